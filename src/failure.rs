//! Failure classes and steps: the closed vocabulary an attempt's outcome is told in.
//!
//! Every failed attempt names the [`Step`] that failed and one [`FailureClass`]. Both serialise to
//! stable snake_case names that appear in evidence, logs and dashboards, so renaming one is a
//! breaking change. Conversion from each library's error type lives in exactly one function per
//! source (`classify_*` below), each covered by a table test.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One step of a probe attempt, in the order a probe kind runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Look up the branch-specific endpoint name (never the stable name).
    Resolve,
    /// Open a TCP connection to a resolved address.
    Connect,
    /// Negotiate TLS and check the server certificate.
    Tls,
    /// Authenticate the probe identity.
    Auth,
    /// Perform the marked write.
    Write,
    /// Read the marked write back and compare the marker.
    Verify,
}

impl Step {
    /// All steps in execution order.
    pub const ALL: [Step; 6] = [
        Step::Resolve,
        Step::Connect,
        Step::Tls,
        Step::Auth,
        Step::Write,
        Step::Verify,
    ];

    /// Stable snake_case name, as used in evidence and in the `Step` metric dimension.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Resolve => "resolve",
            Step::Connect => "connect",
            Step::Tls => "tls",
            Step::Auth => "auth",
            Step::Write => "write",
            Step::Verify => "verify",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt failed. Closed set; the snake_case names are a stable interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The name does not exist (NXDOMAIN).
    DnsNxdomain,
    /// The name exists but has no address record of the requested type (NODATA).
    DnsNodata,
    /// The nameserver answered SERVFAIL.
    DnsServfail,
    /// The nameserver refused the query (REFUSED).
    DnsRefused,
    /// No nameserver answered in time.
    DnsTimeout,
    /// Any other resolution failure (bad response, no nameserver usable).
    DnsError,
    /// The branch name resolves through the service's stable name (a CNAME chain through the
    /// failover record): the probe would measure whatever Route 53 answers, a circular control
    /// loop, so the attempt fails instead.
    DnsStableName,
    /// The TCP connection was refused (RST).
    TcpRefused,
    /// The TCP connection did not complete within the connect timeout.
    TcpTimeout,
    /// No route to the host or network.
    TcpUnreachable,
    /// The connection was reset or closed by the peer mid-exchange.
    TcpReset,
    /// The server does not offer TLS although ssl-mode requires it.
    TlsNotOffered,
    /// The TLS handshake failed for a reason other than the certificate.
    TlsHandshake,
    /// The server certificate does not chain to a trusted CA.
    TlsUntrusted,
    /// The server certificate is not valid for the endpoint name.
    TlsNameMismatch,
    /// The server certificate has expired.
    TlsExpired,
    /// The server certificate is not valid yet.
    TlsNotYetValid,
    /// No TLS protocol version acceptable to both sides.
    TlsProtocolVersion,
    /// The server rejected the probe identity or its privileges (MySQL 1044, 1045, 1698, 3159;
    /// 1142/1143 when a GRANT on the canary table is missing).
    AuthDenied,
    /// The server is read-only (MySQL 1290 `--read-only`, 1836 read-only mode).
    ServerReadOnly,
    /// The server refused the connection for lack of capacity (MySQL 1040, 1203).
    TooManyConnections,
    /// A lock wait timed out (MySQL 1205) or a deadlock was detected (1213).
    LockWaitTimeout,
    /// The server closed the connection (MySQL 2006/2013, unexpected EOF).
    ServerGoneAway,
    /// Any other error reported by the server.
    ServerError,
    /// The row (or resource) read back does not carry the marker just written.
    VerifyMismatch,
    /// An HTTP response had a status outside the accepted ones.
    HttpStatus,
    /// An HTTP response body lacks the expected content (marker, JSON pointer value).
    HttpBodyMismatch,
    /// An HTTP response came from another branch than the one probed (response header check).
    HttpWrongBranch,
    /// An OTLP gateway answered 2xx but rejected data in a partial success.
    OtlpRejected,
    /// A step or the whole attempt ran past its deadline.
    DeadlineExceeded,
    /// The peer broke the protocol (unexpected packet, malformed greeting).
    ProtocolError,
    /// readyprobe itself failed during the attempt (a bug, reported in the message); the attempt
    /// counts as failed so that nothing is silently lost.
    InternalError,
}

impl FailureClass {
    /// Stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::DnsNxdomain => "dns_nxdomain",
            FailureClass::DnsNodata => "dns_nodata",
            FailureClass::DnsServfail => "dns_servfail",
            FailureClass::DnsRefused => "dns_refused",
            FailureClass::DnsTimeout => "dns_timeout",
            FailureClass::DnsError => "dns_error",
            FailureClass::DnsStableName => "dns_stable_name",
            FailureClass::TcpRefused => "tcp_refused",
            FailureClass::TcpTimeout => "tcp_timeout",
            FailureClass::TcpUnreachable => "tcp_unreachable",
            FailureClass::TcpReset => "tcp_reset",
            FailureClass::TlsNotOffered => "tls_not_offered",
            FailureClass::TlsHandshake => "tls_handshake",
            FailureClass::TlsUntrusted => "tls_untrusted",
            FailureClass::TlsNameMismatch => "tls_name_mismatch",
            FailureClass::TlsExpired => "tls_expired",
            FailureClass::TlsNotYetValid => "tls_not_yet_valid",
            FailureClass::TlsProtocolVersion => "tls_protocol_version",
            FailureClass::AuthDenied => "auth_denied",
            FailureClass::ServerReadOnly => "server_read_only",
            FailureClass::TooManyConnections => "too_many_connections",
            FailureClass::LockWaitTimeout => "lock_wait_timeout",
            FailureClass::ServerGoneAway => "server_gone_away",
            FailureClass::ServerError => "server_error",
            FailureClass::VerifyMismatch => "verify_mismatch",
            FailureClass::HttpStatus => "http_status",
            FailureClass::HttpBodyMismatch => "http_body_mismatch",
            FailureClass::HttpWrongBranch => "http_wrong_branch",
            FailureClass::OtlpRejected => "otlp_rejected",
            FailureClass::DeadlineExceeded => "deadline_exceeded",
            FailureClass::ProtocolError => "protocol_error",
            FailureClass::InternalError => "internal_error",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
