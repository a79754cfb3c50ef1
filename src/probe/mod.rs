//! Probes: one attempt against one branch, step by step, ending in an [`Attempt`] record.
//!
//! A probe never publishes and never decides readiness: it measures and returns data. Each step
//! (`resolve`, `connect`, `tls`) and each probe kind (`mysql`, `http`, `otlp`, `tcp`) lives in its
//! own file with one `run(ctx: &mut StepCtx, ..)` of the same shape; [`run_attempt`] runs the
//! common steps and dispatches on the kind with one `match`. Every step runs under the smaller of
//! its own timeout and what is left of the attempt deadline. Imports go one way: the kinds use the
//! steps and `http_client`, never each other.

pub mod connect;
pub mod ctx;
pub mod http;
pub mod http_client;
pub mod mysql;
pub mod otlp;
pub mod resolve;
pub mod tcp;
pub mod tls;

pub use ctx::{Deadline, StepBudget, StepCtx, StepError, StepFailure, StepRecord, Steps};

use crate::clock::Clock;
use crate::config::{Branch, Config, ProbeKind, StepTimeouts};
use crate::failure::{FailureClass, Step};
use crate::readiness::{AttemptRecord, Millis};
use hickory_resolver::TokioResolver;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

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
    pub answers: Vec<resolve::Answer>,
    /// Response code and authoritative flag of the DNS answer used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsMeta>,
    /// The address connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// TLS session facts (after a completed handshake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<tls::TlsInfo>,
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
    pub server: Option<mysql::ServerIdentity>,
    /// HTTP statuses (`http` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<http::HttpObservation>,
    /// The gateway's answer (`otlp` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<otlp::OtlpObservation>,
    /// Success, or the failing step and class.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Attempt {
    /// An attempt that ended because readyprobe itself failed (e.g. a panic in a probe task).
    pub fn internal_failure(
        branch: &str,
        seq: u64,
        started_at: Millis,
        finished_at: Millis,
        message: String,
    ) -> Self {
        Attempt {
            branch: branch.to_string(),
            seq,
            marker: String::new(),
            started_at,
            finished_at,
            steps: Vec::new(),
            answers: Vec::new(),
            dns: None,
            address: None,
            tls: None,
            certificate_not_after: None,
            certificate_subject: None,
            server: None,
            http: None,
            otlp: None,
            outcome: Outcome::Failure {
                step: Step::Resolve,
                class: FailureClass::InternalError,
                message,
            },
        }
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

/// Everything needed to probe one branch, prepared once at start-up.
#[derive(Debug, Clone)]
pub struct BranchProbe {
    pub branch: Branch,
    pub prober_id: String,
    /// The service's stable name, which no branch attempt may resolve through.
    pub stable_name: String,
    /// Address records the `resolve` step asks for.
    pub address_family: crate::config::AddressFamily,
    /// Attempt deadline, from its start.
    pub timeout: Duration,
    pub step_timeouts: StepTimeouts,
    pub target: Target,
}

/// Kind-specific prepared target; one variant per probe kind.
#[derive(Debug, Clone)]
pub enum Target {
    Mysql(Box<mysql::MysqlTarget>),
    Tcp(tcp::TcpTarget),
    Http(Box<http::HttpTarget>),
    Otlp(Box<otlp::OtlpTarget>),
}

/// Start-up failure while preparing probes.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A secret could not be read.
    #[error(transparent)]
    Secret(#[from] crate::config::SecretError),
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] tls::TlsSetupError),
    /// The resolver could not be built.
    #[error(transparent)]
    Resolver(#[from] resolve::ResolverSetupError),
}

/// Prepare the probes of every branch: read secrets, load CA bundles, build the resolver.
///
/// # Errors
/// [`PrepareError`] naming the secret reference, CA file or resolv.conf that failed.
pub fn prepare(cfg: &Config) -> Result<(TokioResolver, Vec<BranchProbe>), PrepareError> {
    let resolver = resolve::build_resolver(&cfg.dns)?;
    let target = match &cfg.probe.kind {
        ProbeKind::Mysql(m) => {
            let password = m.password.resolve()?;
            let tls = tls::client_config(
                m.ssl_mode,
                m.ssl_ca.as_deref(),
                m.tls_min_version,
                m.client_identity.as_ref(),
            )?;
            Target::Mysql(Box::new(mysql::MysqlTarget {
                settings: m.clone(),
                password,
                tls,
            }))
        }
        ProbeKind::Http(h) => Target::Http(Box::new(http::HttpTarget {
            headers: http::resolve_headers(&h.headers)?,
            tls: tls::client_config_for(&h.tls)?,
            settings: (**h).clone(),
        })),
        ProbeKind::Otlp(o) => Target::Otlp(Box::new(otlp::OtlpTarget {
            headers: http::resolve_headers(&o.headers)?,
            tls: tls::client_config_for(&o.tls)?,
            settings: o.clone(),
        })),
        ProbeKind::Tcp(t) => Target::Tcp(tcp::TcpTarget {
            tls: tls::client_config_for(&t.tls)?,
        }),
    };
    let probes = cfg
        .branches
        .iter()
        .map(|b| BranchProbe {
            branch: b.clone(),
            prober_id: cfg.prober_id.clone(),
            stable_name: cfg.service.stable_name.clone(),
            address_family: cfg.dns.address_family,
            timeout: cfg.probe.timeout,
            step_timeouts: cfg.probe.step_timeouts,
            target: target.clone(),
        })
        .collect();
    Ok((resolver, probes))
}

/// A fresh 128-bit random marker as 32 lowercase hex characters.
pub fn new_marker() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}

/// What an attempt has learned so far; kept when a later step fails, so the evidence and
/// `readyprobe probe` show it either way.
#[derive(Debug, Clone, Default)]
pub struct Learned {
    /// The DNS answer chain.
    pub answers: Vec<resolve::Answer>,
    pub dns: Option<DnsMeta>,
    /// The address connected to.
    pub address: Option<String>,
    /// TLS session facts, set once a handshake completed.
    pub tls: Option<tls::TlsInfo>,
    /// The server's own identity (`mysql` kind), set once the read-back returned a row.
    pub server: Option<mysql::ServerIdentity>,
    pub http: Option<http::HttpObservation>,
    pub otlp: Option<otlp::OtlpObservation>,
}

impl Target {
    /// The kind's TLS client configuration; `None` when TLS is off.
    pub fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        match self {
            Target::Mysql(t) => t.tls.as_ref(),
            Target::Tcp(t) => t.tls.as_ref(),
            Target::Http(t) => t.tls.as_ref(),
            Target::Otlp(t) => t.tls.as_ref(),
        }
    }
}

/// Run one attempt. Never panics on a peer's behaviour; every outcome is data.
pub async fn run_attempt(
    probe: &BranchProbe,
    resolver: &TokioResolver,
    clock: &Clock,
    seq: u64,
) -> Attempt {
    let started_at = clock.now_ms();
    let mut ctx = StepCtx::new(probe, resolver, clock, seq);
    let (result, certificate) = tls::with_seen_certificate(run_steps(&mut ctx)).await;
    let certificate = certificate.unwrap_or_default();
    let learned = ctx.learned;
    Attempt {
        branch: probe.branch.name.clone(),
        seq,
        marker: ctx.marker,
        started_at,
        finished_at: clock.now_ms(),
        steps: ctx.steps.records,
        answers: learned.answers,
        dns: learned.dns,
        address: learned.address,
        tls: learned.tls,
        certificate_not_after: certificate.not_after,
        certificate_subject: certificate.subject,
        server: learned.server,
        http: learned.http,
        otlp: learned.otlp,
        outcome: match result {
            Ok(()) => Outcome::Success,
            Err((step, e)) => Outcome::Failure {
                step,
                class: e.class,
                message: e.message,
            },
        },
    }
}

/// The common steps (`resolve`, `connect`), then the kind's own.
async fn run_steps(ctx: &mut StepCtx<'_>) -> Result<(), StepFailure> {
    let resolution = resolve::run(ctx).await?;
    let connected = connect::run(ctx, &resolution.addresses).await?;
    match &ctx.probe.target {
        Target::Mysql(t) => mysql::run(ctx, t, connected).await,
        Target::Tcp(t) => tcp::run(ctx, t, connected).await,
        Target::Http(t) => http::run(ctx, t, connected).await,
        Target::Otlp(t) => otlp::run(ctx, t, connected).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
