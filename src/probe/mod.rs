//! Probes: one attempt against one branch, step by step, ending in an [`Attempt`] record.
//!
//! A probe never publishes and never decides readiness: it measures and returns data. Each step
//! (`resolve`, `connect`, `tls`) and each probe kind (`mysql`, `http`, `otlp`, `tcp`) lives in its
//! own file with one `run(ctx: &mut StepCtx, ..)` of the same shape; [`run_attempt`] runs the
//! common steps and dispatches on the kind with one `match`. Every step runs under the smaller of
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
mod prepare;
pub mod resolve;
pub mod stable_name;
pub mod target;
pub mod tcp;
pub mod tls;

pub use attempt::{Attempt, DnsMeta, Learned, Outcome, StepRecord};
pub use ctx::{Deadline, StepBudget, StepCtx, StepError, StepFailure, Steps, new_marker};
pub use target::{BranchProbe, Redactor, Target};

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
        && e.class == crate::failure::FailureClass::AuthDenied
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
