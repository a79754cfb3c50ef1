//! What an attempt produces: the [`Attempt`] record with its [`Outcome`], and the facts the steps
//! learn on the way (DNS answers, TLS session, server identity, HTTP and OTLP answers).
//!
//! A leaf: plain data that the steps, the kinds and the dispatcher in `probe` all use, so none of
//! them imports another to reach it.

use super::target::Redactor;
use crate::failure::{FailureClass, Step};
use crate::readiness::{AttemptRecord, Millis};
use serde::Serialize;

/// Response code and authoritative flag of the DNS answer an attempt used.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct DnsMeta {
    /// Response code, e.g. `NoError`.
    pub rcode: String,
    pub authoritative: bool,
}

/// The outcome of an attempt. Its printed name ([`Outcome::as_str`]) is its serialised `result`
/// tag, from the same rule.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, strum::IntoStaticStr)]
#[serde(tag = "result", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// Every step succeeded.
    Success,
    /// A step failed.
    Failure {
        step: Step,
        class: FailureClass,
        /// What happened, for a human (never containing secrets; at most 1 KiB).
        message: String,
    },
}

impl Outcome {
    /// `success` or `failure`, as in the evidence's `result` field.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

/// One finished attempt: the unit of evidence and of the success rate.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Attempt {
    pub branch: String,
    /// Per-branch sequence number, from 1.
    pub seq: u64,
    /// Fresh random marker written by this attempt (32 hex chars).
    pub marker: String,
    /// Start, ms since the epoch.
    pub started_at: Millis,
    /// End, ms since the epoch.
    pub finished_at: Millis,
    /// Steps in order, with durations.
    pub steps: Vec<StepRecord>,
    /// DNS answer chain.
    pub answers: Vec<Answer>,
    /// Response code and authoritative flag of the DNS answer used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsMeta>,
    /// The address connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// TLS session facts (after a completed handshake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsInfo>,
    /// Whether every TLS session of this attempt verified the server's certificate chain and
    /// name (`verify_identity`); false without TLS, and for the modes that send secrets only
    /// under `danger_send_secrets_unverified`.
    #[serde(default)]
    pub tls_verified: bool,
    /// `notAfter` (ms since the epoch) of the server's leaf certificate as presented in this
    /// attempt, whether or not it verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_not_after: Option<Millis>,
    /// Subject of the server's leaf certificate as presented in this attempt, whether or not it
    /// verified: who answered, also when the attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_subject: Option<String>,
    /// Server identity from `verify`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerIdentity>,
    /// HTTP statuses (`http` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpObservation>,
    /// The gateway's answer (`otlp` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpObservation>,
    /// Success, or the failing step and class.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// True for an attempt of a loop a reload stopped, which finished after it: recorded as
    /// evidence, counted in no window (its `seq` may recur in the branch's new loop).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_counted: bool,
}

impl Attempt {
    /// An attempt that learned nothing: no step records, no observations, just its outcome.
    pub fn bare(
        branch: &str,
        seq: u64,
        started_at: Millis,
        finished_at: Millis,
        outcome: Outcome,
    ) -> Self {
        Attempt {
            branch: branch.to_string(),
            seq,
            marker: String::new(),
            started_at,
            finished_at,
            steps: Vec::new(),
            answers: Vec::new(),
            not_counted: false,
            dns: None,
            address: None,
            tls: None,
            tls_verified: false,
            certificate_not_after: None,
            certificate_subject: None,
            server: None,
            http: None,
            otlp: None,
            outcome,
        }
    }

    /// An attempt that ended because readyprobe itself failed (e.g. a panic in a probe task).
    pub fn internal_failure(
        branch: &str,
        seq: u64,
        started_at: Millis,
        finished_at: Millis,
        message: String,
    ) -> Self {
        let outcome = Outcome::Failure {
            step: Step::Resolve,
            class: FailureClass::InternalError,
            message,
        };
        Attempt::bare(branch, seq, started_at, finished_at, outcome)
    }

    /// The readiness core's view of this attempt.
    pub fn record(&self) -> AttemptRecord {
        AttemptRecord {
            finished_at: self.finished_at,
            success: self.outcome == Outcome::Success,
            class: match &self.outcome {
                Outcome::Success => None,
                Outcome::Failure { class, .. } => Some(*class),
            },
        }
    }
}

/// What an attempt has learned so far; kept when a later step fails, so the evidence and
/// `readyprobe probe` show it either way.
#[derive(Debug, Clone, Default)]
pub struct Learned {
    /// The DNS answer chain.
    pub answers: Vec<Answer>,
    pub dns: Option<DnsMeta>,
    /// The address connected to.
    pub address: Option<String>,
    /// TLS session facts, set once a handshake completed.
    pub tls: Option<TlsInfo>,
    /// The server's own identity (`mysql` kind), set once the read-back returned a row.
    pub server: Option<ServerIdentity>,
    pub http: Option<HttpObservation>,
    pub otlp: Option<OtlpObservation>,
}

impl Learned {
    /// Remove the configured secrets from everything the target told: the server's host name
    /// and version, the gateway's message.
    pub fn redact(&mut self, r: &Redactor) {
        if let Some(s) = &mut self.server {
            r.redact_in_place(&mut s.hostname);
            r.redact_in_place(&mut s.version);
        }
        if let Some(m) = self.otlp.as_mut().and_then(|o| o.message.as_mut()) {
            r.redact_in_place(m);
        }
    }
}

/// One step's outcome inside an attempt.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct StepRecord {
    pub step: Step,
    /// Wall time the step took, in ms.
    pub duration_ms: f64,
    pub ok: bool,
    /// Set when the step failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<FailureClass>,
}

/// One record of the answer chain, as seen on this attempt.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Answer {
    /// Owner name (absolute, with trailing dot).
    pub name: String,
    /// `A`, `AAAA` or `CNAME`.
    #[serde(rename = "type")]
    pub rtype: String,
    /// Address or CNAME target.
    pub data: String,
    /// TTL in seconds as served.
    pub ttl: u32,
}

/// What the handshake established.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct TlsInfo {
    /// Negotiated protocol version, e.g. `TLSv1_3`.
    pub version: String,
    /// Negotiated cipher suite.
    pub cipher_suite: String,
    /// Number of certificates the server presented.
    pub peer_certificates: usize,
    /// The leaf certificate's `notAfter`, ms since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaf_not_after: Option<i64>,
}

/// Server identity read by the `verify` step.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ServerIdentity {
    /// `@@hostname`; PostgreSQL: `cluster_name`, else the server's address.
    pub hostname: String,
    /// `@@server_id` (0 for PostgreSQL).
    pub server_id: u64,
    /// `@@read_only`; PostgreSQL: the session's `transaction_read_only`.
    pub read_only: bool,
    /// `@@innodb_read_only`.
    #[serde(default)]
    pub innodb_read_only: bool,
    /// PostgreSQL's `pg_is_in_recovery()`: a standby (absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_recovery: bool,
    /// Server version from the greeting.
    pub version: String,
}

/// What the requests returned.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct HttpObservation {
    /// Status of the marked request.
    pub status: Option<u16>,
    /// Status of the verify request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_status: Option<u16>,
}

/// What the gateway answered.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct OtlpObservation {
    /// HTTP status.
    pub status: Option<u16>,
    /// Rejected data points reported by a partial success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<i64>,
    /// The gateway's message, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Longest text about the server kept in an attempt (version, host name): it goes into every
/// evidence record.
pub const MAX_IDENTITY_CHARS: usize = 255;

/// Text a server sent, as kept in an attempt: control characters replaced, at most
/// [`MAX_IDENTITY_CHARS`] characters.
pub fn server_text(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .take(MAX_IDENTITY_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `in_recovery` (a PostgreSQL standby) is in the line only when true: MySQL lines and
    /// older readers stay as they were.
    #[test]
    fn in_recovery_is_written_only_when_true() {
        let mut id = ServerIdentity {
            hostname: "pg-a".into(),
            server_id: 0,
            read_only: true,
            innodb_read_only: false,
            in_recovery: true,
            version: "15.20".into(),
        };
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            r#"{"hostname":"pg-a","server_id":0,"read_only":true,"innodb_read_only":false,"in_recovery":true,"version":"15.20"}"#
        );
        id.in_recovery = false;
        let line = serde_json::to_string(&id).unwrap();
        assert!(!line.contains("in_recovery"), "{line}");
        assert_eq!(serde_json::from_str::<ServerIdentity>(&line).unwrap(), id);
    }

    #[test]
    fn outcome_prints_its_serialised_name() {
        let every = [
            Outcome::Success,
            Outcome::Failure {
                step: Step::Verify,
                class: FailureClass::VerifyMismatch,
                message: "m".into(),
            },
        ];
        for o in every {
            let json = serde_json::to_value(&o).expect("serialise");
            assert_eq!(json["result"], o.as_str(), "{o:?}");
        }
    }
}
