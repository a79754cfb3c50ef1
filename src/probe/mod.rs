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
pub mod resolve;
pub mod target;
pub mod tcp;
pub mod tls;

pub use attempt::{Attempt, DnsMeta, Learned, Outcome, StepRecord};
pub use ctx::{Deadline, StepBudget, StepCtx, StepError, StepFailure, Steps, new_marker};
pub use target::{BranchProbe, Target};

use crate::clock::Clock;
use crate::config::{Config, ProbeKind};
use hickory_resolver::TokioResolver;

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
