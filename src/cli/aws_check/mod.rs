//! `check --aws`: reads the deployed CloudWatch alarms, Route 53 health checks and failover
//! records of the config's services and reports every violation of the metric contract with its
//! fix. The rules are pure (`rules`, over the plain data of `model`); `fetch` does the reads,
//! `render` the output. The rule list for operators: docs/check-aws.md.

mod fetch;
mod model;
mod render;
mod rules;

use super::{EXIT_ATTEMPT_FAILED, EXIT_IO, EXIT_OK};
use crate::config::{Config, escape_controls};
use clap::ValueEnum;
use std::process::ExitCode;

/// Exit code of `check --aws` when it finds a violation (as `probe` when an attempt fails).
pub const EXIT_VIOLATIONS: u8 = EXIT_ATTEMPT_FAILED;

/// Exit code when nothing is violated but AWS refused some reads: not everything was checked
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

/// Run the check: exit 0 when everything was read and nothing is violated, 1 when something is,
/// 77 when nothing is but a read AWS refused left something unchecked (a `not_checked` row), 74
/// when AWS cannot be reached.
pub async fn check_aws(cfg: &Config, format: Format) -> ExitCode {
    let clients = fetch::Clients::new(cfg).await;
    if clients.region.is_empty() {
        eprintln!(
            "error: no AWS region: set publish.cloudwatch.region, AWS_REGION or a profile's region"
        );
        return ExitCode::from(EXIT_IO);
    }
    let expect = fetch::expect(cfg, &clients.region);
    let inventory = match fetch::inventory(&clients, cfg, &expect).await {
        Ok(i) => i,
        Err(e) => {
            eprintln!(
                "error: cannot reach AWS: {}",
                escape_controls(&e.to_string())
            );
            return ExitCode::from(EXIT_IO);
        }
    };
    let findings = rules::check(&expect, &inventory);
    for f in findings.iter().filter(|f| !f.is_violation()) {
        tracing::warn!(service = %f.service, object = %f.object, "{}", f.problem);
    }
    let out = match format {
        Format::Table => render::table(&clients.region, &findings),
        Format::Json => render::json(&clients.region, &findings),
    };
    print!("{out}");
    ExitCode::from(if findings.iter().any(model::Finding::is_violation) {
        EXIT_VIOLATIONS
    } else if findings.is_empty() {
        EXIT_OK
    } else {
        EXIT_NOT_CHECKED
    })
}
