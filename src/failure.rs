//! Failure classes and steps: the closed vocabulary an attempt's outcome is told in.
//!
//! Every failed attempt names the [`Step`] that failed and one [`FailureClass`]. Both serialise to
//! stable snake_case names that appear in evidence, logs and dashboards, so renaming one is a
//! breaking change. Conversion from each library's error type lives in exactly one function per
//! source (`classify_*` below), each covered by a table test.

use serde::{Deserialize, Serialize};

/// One step of a probe attempt, in the order a probe kind runs them. Serde and strum derive the
/// printed and the serialised name from the same rule; a test holds them equal.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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
    /// Stable snake_case name, as used in evidence and in the `Step` metric dimension.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why an attempt failed. Closed set; the snake_case names are a stable interface, printed and
/// serialised from the same rule.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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
    /// The stable name's answer matches no branch (stable-name probe rounds only, never an
    /// attempt): the failover records point somewhere this config does not know, the other
    /// half of the circular-control-loop check.
    StableNameUnknownTarget,
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
    /// a locked account: MySQL 3118, MariaDB 4151; 1142/1143 when a GRANT on the canary table is
    /// missing; PostgreSQL `28000`, `28P01`, `42501`), or asked for a password method the kind
    /// refuses on this session.
    AuthDenied,
    /// The server is read-only (MySQL 1290 `--read-only`, 1836 read-only mode, 1036 a table opened
    /// read-only, e.g. under `innodb_read_only`; PostgreSQL `25006`, a hot standby or
    /// `default_transaction_read_only`).
    ServerReadOnly,
    /// The server refused the connection for lack of capacity (MySQL 1040, 1203; PostgreSQL
    /// `53300`).
    TooManyConnections,
    /// A lock wait timed out (MySQL 1205) or a deadlock was detected (1213); PostgreSQL `55P03`
    /// (`lock_timeout`), `40P01` deadlock, `40001` serialization failure.
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
    /// The server refused the session for now: starting up, shutting down, or in recovery
    /// without hot standby (PostgreSQL `57P03`).
    CannotConnectNow,
    /// The canary's database, schema or table does not exist on the server (PostgreSQL `3D000`,
    /// `3F000`, `42P01`): the canary was never installed there.
    CanaryMissing,
}

impl FailureClass {
    /// Stable snake_case name, as used in evidence and logs.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether this class is *definitive* by default: the branch answered, and the answer says it
    /// cannot do the job, whatever the network noise (retrying the same attempt gets the same
    /// answer). The others are *ambiguous*: the attempt may fail for a moment and pass the next
    /// time. `readiness.definitive_classes` overrides this list; the unready condition fires after
    /// the shorter `declare_unready.definitive_for` on definitive failures only.
    pub fn is_definitive(self) -> bool {
        use FailureClass as C;
        match self {
            // Authoritative answer: the branch's name does not exist.
            C::DnsNxdomain => true,
            // Authoritative answer: the name exists without an address of the requested type.
            C::DnsNodata => true,
            // A stable-name round's finding, never a branch attempt's: no branch's readiness.
            C::StableNameUnknownTarget => false,
            // Resolver trouble (upstream down, overloaded, DNSSEC hiccup): often passes.
            C::DnsServfail => false,
            // A statement about the nameserver's policy, not about the branch.
            C::DnsRefused => false,
            // No answer in time: loss or a slow resolver.
            C::DnsTimeout => false,
            // Unusable or malformed response: says nothing certain about the branch.
            C::DnsError => false,
            // Topology: the branch name resolves through the failover record; no retry changes it.
            C::DnsStableName => true,
            // A restart or a full listen queue refuses for seconds.
            C::TcpRefused => false,
            // Loss, a blackhole or an overloaded host look the same: the class the bursts carry.
            C::TcpTimeout => false,
            // Routing changes and ARP/ND hiccups pass.
            C::TcpUnreachable => false,
            // A reset mid-exchange: a restart, a load balancer or a middlebox.
            C::TcpReset => false,
            // The server answered without TLS: its configuration, the same on every attempt.
            C::TlsNotOffered => true,
            // Cut handshakes are resets in disguise.
            C::TlsHandshake => false,
            // The certificate chain is the server's configuration: clients refuse it too.
            C::TlsUntrusted => true,
            // The certificate does not name the endpoint: clients refuse it too.
            C::TlsNameMismatch => true,
            // An expired certificate stays expired until someone replaces it.
            C::TlsExpired => true,
            // Not valid yet (or a skewed clock): clients refuse it until time or config changes.
            C::TlsNotYetValid => true,
            // No common protocol version: negotiation gives the same answer every time.
            C::TlsProtocolVersion => true,
            // The server refused the identity or its grants: clients with it fail too.
            C::AuthDenied => true,
            // The writer says it is read-only: it cannot take writes, however fast it answers.
            C::ServerReadOnly => true,
            // Capacity: connections free up within seconds.
            C::TooManyConnections => false,
            // Contention: the next transaction usually gets the lock.
            C::LockWaitTimeout => false,
            // The server or a proxy closed the connection: restarts and idle cuts pass.
            C::ServerGoneAway => false,
            // Unknown server error: no basis for certainty.
            C::ServerError => false,
            // The read-back shows another writer's data: the branch is not the writer it claims.
            C::VerifyMismatch => true,
            // 5xx during a deploy or from a load balancer passes; the status alone is not certain.
            C::HttpStatus => false,
            // The service answered with content that is not the service's: a wrong deployment.
            C::HttpBodyMismatch => true,
            // Another branch answered: traffic for this branch does not reach it.
            C::HttpWrongBranch => true,
            // Partial rejections include throttling and quotas, which pass.
            C::OtlpRejected => false,
            // Too slow this time: the same as a timeout.
            C::DeadlineExceeded => false,
            // A broken exchange can be a middlebox or a cut connection.
            C::ProtocolError => false,
            // readyprobe's own failure says nothing certain about the branch.
            C::InternalError => false,
            // A starting, stopping or recovering server: a restart or a promotion passes.
            C::CannotConnectNow => false,
            // The schema is the server's setup: every attempt finds it missing until someone
            // installs the canary.
            C::CanaryMissing => true,
        }
    }

    /// The definitive classes by default ([`is_definitive`](Self::is_definitive)), in order.
    pub fn default_definitive() -> Vec<FailureClass> {
        use strum::IntoEnumIterator;
        FailureClass::iter().filter(|c| c.is_definitive()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn step_prints_its_serialised_name() {
        let mut names = Vec::new();
        for s in Step::iter() {
            let json = serde_json::to_value(s).expect("serialise");
            assert_eq!(json, serde_json::Value::String(s.to_string()), "{s:?}");
            assert_eq!(s.as_str(), s.to_string());
            assert_eq!(serde_json::from_value::<Step>(json).expect("back"), s);
            names.push(s.as_str());
        }
        assert_eq!(
            names,
            ["resolve", "connect", "tls", "auth", "write", "verify"]
        );
    }

    #[test]
    fn failure_class_prints_its_serialised_name() {
        for c in FailureClass::iter() {
            let json = serde_json::to_value(c).expect("serialise");
            assert_eq!(json, serde_json::Value::String(c.to_string()), "{c:?}");
            assert_eq!(c.as_str(), c.to_string());
            assert_eq!(
                serde_json::from_value::<FailureClass>(json).expect("back"),
                c
            );
        }
        assert_eq!(FailureClass::TlsNotYetValid.as_str(), "tls_not_yet_valid");
        assert_eq!(FailureClass::DnsNxdomain.as_str(), "dns_nxdomain");
        assert_eq!(
            FailureClass::StableNameUnknownTarget.as_str(),
            "stable_name_unknown_target"
        );
    }
}
