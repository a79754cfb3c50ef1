//! `simulate`: reads the scenario, runs the pure model ([`crate::simulate`]) on one service of the
//! config, prints the report and writes it to `--out`.

use super::drill_cmd::replace_file;
use super::{EXIT_INVALID_CONFIG, EXIT_IO, EXIT_OK};
use crate::config::{self, Config};
use crate::simulate::{self, Setup, render, scenario};
use std::path::Path;
use std::process::ExitCode;

/// A scenario larger than this is not a scenario, bytes.
const MAX_SCENARIO_BYTES: u64 = 1024 * 1024;

/// Output of `simulate`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables.
    Table,
    /// One JSON document.
    Json,
}

/// Run `simulate`.
pub fn simulate(
    cfg: &Config,
    service: Option<&str>,
    scenario_path: &Path,
    out: Option<&Path>,
    format: Format,
) -> ExitCode {
    let svc = match super::pick(cfg, service) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let text = match read(scenario_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "error: cannot read scenario file {}: {e}",
                config::escape_controls(&scenario_path.display().to_string())
            );
            return ExitCode::from(EXIT_IO);
        }
    };
    let names: Vec<String> = svc.branches.iter().map(|b| b.name.clone()).collect();
    let limits = scenario::Limits {
        branches: &names,
        interval: svc.probe.interval,
        insufficient_data: cfg.route53.insufficient_data_health_status,
    };
    let sc = match scenario::parse(scenario_path, &text, &limits) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: invalid scenario\n{e}");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
    };
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let setup = Setup::from_config(svc, ms(cfg.publish.interval), ms(cfg.state.poll_interval));
    let report = simulate::simulate(&setup, &sc);
    let json = match serde_json::to_string_pretty(&report) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: cannot encode the report: {e}");
            return ExitCode::from(EXIT_IO);
        }
    };
    match format {
        Format::Table => print!(
            "{}",
            config::escape_controls_by_line(&render::report(&report, render::Style::Text))
        ),
        Format::Json => println!("{json}"),
    }
    if let Some(dir) = out {
        let md = render::report(&report, render::Style::Markdown);
        let drill = simulate::drill::drill(&report, &scenario_path.display().to_string());
        let html = crate::report::html::render(&drill);
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| replace_file(dir, "simulation.md", md.as_bytes()))
            .and_then(|()| replace_file(dir, "simulation.json", format!("{json}\n").as_bytes()))
            .and_then(|()| replace_file(dir, "report.html", html.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "error: cannot write the report to {}: {e}",
                config::escape_controls(&dir.display().to_string())
            );
            return ExitCode::from(EXIT_IO);
        }
    }
    ExitCode::from(EXIT_OK)
}

/// The scenario's text, bounded.
fn read(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_SCENARIO_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(std::io::Error::other("larger than 1 MiB; not a scenario"));
    }
    Ok(text)
}
