//! Probes: one attempt against one branch, step by step, ending in an [`Attempt`] record.
//!
//! A probe never publishes and never decides readiness: it measures and returns data. Each step
//! (`resolve`, `connect`, `tls`) and each probe kind (`mysql`, `postgres`, `http`, `otlp`, `tcp`)
//! lives in its own file with one `run(ctx: &mut StepCtx, ..)` of the same shape; [`run_attempt`]
//! runs the common steps and dispatches on the kind with one `match`. Every step runs under the smaller of
//! its own timeout and what is left of the attempt deadline. Imports go one way: the kinds use the
//! steps and `http_client`, never each other, and no child imports this module. The shared data
//! lives in two leaves that import no sibling: [`attempt`] (what an attempt produces) and
//! [`target`] (what a branch is probed with).

pub mod attempt;
pub mod connect;
pub mod ctx;
pub mod http;
pub mod http_client;
pub mod mysql;
pub mod otlp;
pub mod postgres;
mod prepare;
pub mod resolve;
pub mod stable_name;
pub mod target;
pub mod tcp;
pub mod tls;

pub use attempt::{Attempt, DnsMeta, Learned, Outcome, StepRecord};
pub use ctx::{Deadline, StepBudget, StepCtx, StepError, StepFailure, Steps, new_marker};
pub use target::{BranchProbe, Redactor, Target};

pub(crate) use prepare::local_secret;
pub use prepare::{
    InputsDigest, PrepareError, PrepareProblem, branches, branches_and_digest, prepare,
    prepare_service, resolver, short_secret_warning,
};

use crate::clock::Clock;
use hickory_resolver::TokioResolver;

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
    let mut learned = ctx.learned;
    learned.redact(&probe.redactor);
    if let Err((_, e)) = &result
        && denied(e.class, &learned)
    {
        // A rotated secret: the ones that can be read again are, before the next attempt.
        probe.target.report_denied();
    }
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
        tls_verified: probe.tls_verified,
        certificate_not_after: certificate.not_after,
        certificate_subject: certificate.subject.map(|s| probe.redactor.redact(&s)),
        server: learned.server,
        http: learned.http,
        otlp: learned.otlp,
        not_counted: false,
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

/// Whether a failure says the server refused the credentials sent: `auth_denied`, or an HTTP
/// 401 or 403 (the `http` and `otlp` kinds' secret headers).
fn denied(class: crate::failure::FailureClass, learned: &Learned) -> bool {
    use crate::failure::FailureClass as C;
    let status = learned
        .http
        .as_ref()
        .and_then(|h| h.verify_status.or(h.status))
        .or(learned.otlp.as_ref().and_then(|o| o.status));
    class == C::AuthDenied || (class == C::HttpStatus && matches!(status, Some(401 | 403)))
}

/// The common steps (`resolve`, `connect`), then the kind's own.
async fn run_steps(ctx: &mut StepCtx<'_>) -> Result<(), StepFailure> {
    let resolution = resolve::run(ctx).await?;
    let connected = connect::run(ctx, &resolution.addresses).await?;
    match &ctx.probe.target {
        Target::Mysql(t) => mysql::run(ctx, t, connected).await,
        Target::Postgres(t) => postgres::run(ctx, t, connected).await,
        Target::Tcp(t) => tcp::run(ctx, t, connected).await,
        Target::Http(t) => http::run(ctx, t, connected).await,
        Target::Otlp(t) => otlp::run(ctx, t, connected).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureClass as C;
    use attempt::{HttpObservation, OtlpObservation};

    /// A refused password or a 401/403 asks for the secrets again; other failures do not.
    #[test]
    fn denied_is_auth_denied_or_an_http_401_or_403() {
        let http = |status, verify_status| Learned {
            http: Some(HttpObservation {
                status,
                verify_status,
            }),
            ..Learned::default()
        };
        let otlp = |status| Learned {
            otlp: Some(OtlpObservation {
                status,
                ..OtlpObservation::default()
            }),
            ..Learned::default()
        };
        assert!(denied(C::AuthDenied, &Learned::default()));
        assert!(denied(C::HttpStatus, &http(Some(401), None)));
        assert!(denied(C::HttpStatus, &http(Some(200), Some(403))));
        assert!(denied(C::HttpStatus, &otlp(Some(401))));
        assert!(!denied(C::HttpStatus, &http(Some(503), None)));
        assert!(!denied(C::HttpStatus, &http(Some(401), Some(500))));
        assert!(!denied(C::ServerReadOnly, &Learned::default()));
    }
}
