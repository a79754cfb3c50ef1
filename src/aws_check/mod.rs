//! `check --aws`: reads the deployed CloudWatch alarms, Route 53 health checks and failover
//! records of the config's services and reports every violation of the metric contract with its
//! fix. The rules are pure (`rules`, over the plain data of `model`); `fetch` does the reads,
//! `render` the output. The rule list for operators: docs/check-aws.md.

mod creds;
mod fetch;
mod limits;
mod model;
mod render;
mod rules;

use crate::config::{Config, escape_controls};
use clap::ValueEnum;
use std::time::Duration;

/// Exit code of `check --aws` when everything was read and nothing is violated (warnings
/// alone, such as `alarm_in_branch_region`, exit 0).
pub const EXIT_OK: u8 = 0;

/// Exit code of `check --aws` when it finds a violation (as `probe` when an attempt fails,
/// `cli::EXIT_ATTEMPT_FAILED`).
pub const EXIT_VIOLATIONS: u8 = 1;

/// Exit code when AWS cannot be reached or no region is set (sysexits' `EX_IOERR`, as
/// `cli::EXIT_IO`).
pub const EXIT_IO: u8 = 74;

/// Exit code when nothing is violated but some reads gave nothing (refused, unusable, cut short
/// by `--aws-timeout`), or when there are no usable credentials: not everything was checked
/// (sysexits' `EX_NOPERM`), so a script does not take a role that may read nothing for a pass.
pub const EXIT_NOT_CHECKED: u8 = 77;

/// `check --format`.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Format {
    /// One line per finding, then a summary.
    #[default]
    Table,
    /// One JSON document.
    Json,
}

/// The default of `--aws-timeout`.
pub const DEFAULT_TIMEOUT: &str = "60s";

/// `check --aws-timeout`: a humantime duration above zero (a zero one would check nothing).
///
/// # Errors
/// What is wrong with it, for clap.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. \"60s\", \"5m\")"))?;
    if d.is_zero() {
        return Err("must be above zero: a zero timeout would check nothing".into());
    }
    if d > crate::config::MAX_DURATION {
        return Err("longer than the longest accepted duration, 366 days".into());
    }
    Ok(d)
}

/// Run the check and return its exit code: 0 when everything was read and nothing is violated, 1 when something is,
/// 77 when nothing is but something was not checked (a `not_checked` row), or nothing could be
/// because there are no usable credentials, 74 when AWS cannot be reached or no region is set.
/// Every read runs within `timeout`; what it cuts short is not checked, unless its endpoint
/// answered no call (then AWS cannot be reached, as when the SDK's timeout ends the call).
pub async fn check_aws(cfg: &Config, format: Format, timeout: Duration) -> u8 {
    let deadline = limits::Deadline::after(timeout, cfg.publish.cloudwatch.operation_timeout);
    let places = fetch::places(cfg);
    // With one target the report is as it always was; with several each finding names its own.
    let named = places.len() > 1;
    let mut clients = Vec::new();
    for p in &places {
        // One overall deadline; each target's endpoints are judged by their own answers.
        let d = deadline.for_another_target();
        clients.push(
            fetch::Clients::new(p, cfg.route53.endpoint_url.as_deref(), &d)
                .await
                .map(|c| (c, d)),
        );
    }
    let regions: Vec<String> = clients
        .iter()
        .map(|c| match c {
            Ok((c, _)) => c.region.clone(),
            Err((region, _)) => region.clone(),
        })
        .collect();
    let targets: Vec<render::Where> = places
        .iter()
        .zip(&regions)
        .map(|(p, r)| render::Where {
            name: p.name.clone(),
            region: r.clone(),
        })
        .collect();
    let mut findings = Vec::new();
    // A target that cannot be read is a `not_checked` row; the check goes on with the others.
    let mut failed = Vec::new();
    for (k, (p, c)) in places.iter().zip(&clients).enumerate() {
        let expect = fetch::expect(cfg, &places, k, &regions);
        let read = match c {
            Ok((c, d)) => fetch::inventory(c, cfg, p, &expect, d)
                .await
                .map_err(|e| (c.region.clone(), unreachable(&e))),
            Err((region, f)) => Err((region.clone(), f.clone())),
        };
        let view = route53_view(p);
        match read {
            Ok(inventory) => {
                findings.extend(rules::check(&expect, &inventory).into_iter().map(|mut f| {
                    f.target = named.then(|| p.name.clone());
                    (view.clone(), f)
                }))
            }
            Err((region, f)) => {
                let rows = unread(cfg, p, &f, named);
                findings.extend(rows.into_iter().map(|f| (view.clone(), f)));
                failed.push((region, at_target(named, p, f)));
            }
        }
    }
    // No target could be read: the check ends as with one target.
    if let Some((region, f)) = failed.first().filter(|_| failed.len() == places.len()) {
        return fail(format, region, f);
    }
    let findings = rules::once_per_route53(findings);
    for f in findings.iter().filter(|f| !f.is_violation()) {
        tracing::warn!(
            publish_target = %escape_controls(f.target.as_deref().unwrap_or("-")),
            service = %escape_controls(&f.service),
            object = %escape_controls(&f.object),
            "{}",
            escape_controls(&f.problem)
        );
    }
    let out = match format {
        Format::Table => render::table(&targets, &findings),
        Format::Json => render::json(&targets, &findings),
    };
    print!("{out}");
    if findings.iter().any(model::Finding::is_violation) {
        EXIT_VIOLATIONS
    } else if findings.iter().any(|f| f.rule == model::Rule::NotChecked) {
        EXIT_NOT_CHECKED
    } else {
        EXIT_OK
    }
}

/// The failure of a target whose reads got no answer.
fn unreachable(e: &fetch::Unreachable) -> model::Failure {
    model::Failure {
        exit: EXIT_IO,
        kind: "unreachable",
        message: format!("cannot reach AWS: {e}"),
        fix: "check the network path to AWS (or the configured endpoints) and the region".into(),
    }
}

/// Which Route 53 a target reads: Route 53 is global and every target reads it at
/// `[route53] endpoint_url`, so targets with the same credentials (the same role, or none) read
/// the same health checks and records, whatever their CloudWatch endpoint.
fn route53_view(p: &fetch::Place) -> String {
    p.target
        .role
        .as_ref()
        .map_or_else(String::new, |r| r.role_arn.clone())
}

/// The `not_checked` rows of a target that could not be read: one per service it holds.
fn unread(cfg: &Config, p: &fetch::Place, f: &model::Failure, named: bool) -> Vec<model::Finding> {
    p.services
        .iter()
        .map(|&i| model::Finding {
            target: named.then(|| p.name.clone()),
            service: cfg.services[i].service.name.clone(),
            branch: None,
            object: "publish target".into(),
            rule: model::Rule::NotChecked,
            problem: format!("not checked: {} ({})", f.message, f.kind),
            fix: f.fix.clone(),
        })
        .collect()
}

/// A failure at one of several targets names it.
fn at_target(named: bool, p: &fetch::Place, mut f: model::Failure) -> model::Failure {
    if named {
        f.message = format!("target {}: {}", p.name, f.message);
    }
    f
}

/// End the check without findings: the message on stderr, and with `--format json` a JSON
/// document with the error on stdout.
fn fail(format: Format, region: &str, f: &model::Failure) -> u8 {
    eprintln!(
        "error: {}; {}",
        escape_controls(&f.message),
        escape_controls(&f.fix)
    );
    if let Format::Json = format {
        print!("{}", render::error_json(region, f));
    }
    f.exit
}
