//! Command line: argument parsing (clap), logging set-up, the subcommands and their exit codes.

use crate::config::{self, Config, ProbeKind, SinkKind};
use crate::probe::{self, Outcome};
use crate::runner::{self, RunOptions};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Exit code: success (for `probe`: the attempt succeeded).
pub const EXIT_OK: u8 = 0;
/// Exit code of `probe` when the attempt failed.
pub const EXIT_ATTEMPT_FAILED: u8 = 1;
/// Exit code: invalid configuration or usage (sysexits EX_USAGE).
pub const EXIT_INVALID_CONFIG: u8 = 64;
/// Exit code: state or evidence file I/O failed (sysexits EX_IOERR).
pub const EXIT_IO: u8 = 74;
/// Exit code: a secret, CA bundle or resolv.conf is unavailable at start-up (sysexits EX_CONFIG).
pub const EXIT_UNAVAILABLE_INPUT: u8 = 78;

/// readyprobe — tells Route 53 the truth about whether each failover branch can do its job.
///
/// Probes each branch by its own name (resolve → connect → TLS → authenticate → marked write →
/// verify), folds the attempts into one 0/1 `Readiness` metric per branch with asymmetric
/// hysteresis, publishes it for the CloudWatch alarm behind the Route 53 health check, and writes
/// every attempt, transition and publish to an evidence file.
///
/// Exit codes: 0 ok; 1 `probe` attempt failed; 64 invalid config or usage; 74 state/evidence
/// file I/O error; 78 secret, CA bundle or resolv.conf unavailable.
#[derive(Debug, Parser)]
#[command(name = "readyprobe", version, about, long_about)]
pub struct Cli {
    /// Log format: `text` (readable) or `json` (one object per line, for CloudWatch Logs).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "READYPROBE_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// This prober instance's id, overriding `prober_id` in the config (e.g. one per
    /// Availability Zone). It keys the canary row and the state file, so give each concurrently
    /// running prober its own, and keep it stable across scheduled-task runs.
    #[arg(long, global = true, env = "READYPROBE_PROBER_ID")]
    pub prober_id: Option<String>,
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `debug`, `readyprobe=debug`.
    #[arg(long, global = true, default_value = "info", env = "READYPROBE_LOG")]
    pub log_level: String,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// JSON lines.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Probe every branch and publish readiness until SIGTERM/SIGINT (ECS service) or for a
    /// bounded `--duration` (ECS scheduled task; state continues from the state file).
    Run {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Stop after this long, e.g. `55s` (scheduled-task mode).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// After a stop request, how long in-flight attempts and the final publish may take.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        grace: Duration,
    },
    /// Validate the config and print the plan (branches, steps, metrics, what one failure does).
    /// Exit 0 when valid, 64 with every error (file, line, key) when not.
    Check {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
    },
    /// Run one attempt against one branch now and print every step (a debugging aid).
    /// Exit 0 when the attempt succeeded, 1 when it failed.
    Probe {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. \"55s\", \"5m\")"))
}

fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().flatten_event(true).init(),
    }
}

fn load(path: &std::path::Path, prober_id: Option<&str>) -> Result<Config, ExitCode> {
    let mut cfg = config::load(path).map_err(|e| {
        eprintln!("error: invalid configuration\n{e}");
        ExitCode::from(EXIT_INVALID_CONFIG)
    })?;
    if let Some(id) = prober_id {
        if let Err(msg) = config::check_prober_id(id) {
            eprintln!("error: --prober-id / READYPROBE_PROBER_ID: {msg}");
            return Err(ExitCode::from(EXIT_INVALID_CONFIG));
        }
        cfg.prober_id = id.to_string();
    }
    Ok(cfg)
}

/// Run the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors; every usage error is EX_USAGE (64).
            return ExitCode::from(if e.use_stderr() {
                EXIT_INVALID_CONFIG
            } else {
                EXIT_OK
            });
        }
    };
    init_logging(&cli);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    rt.block_on(async_main(cli))
}

async fn async_main(cli: Cli) -> ExitCode {
    let id = cli.prober_id.as_deref();
    match cli.command {
        Command::Check { config } => match load(&config, id) {
            Ok(cfg) => {
                print!("{}", plan(&cfg));
                match &cfg.probe.kind {
                    ProbeKind::Mysql(m) => {
                        if let Err(e) = m.password.resolve() {
                            println!("warning: {e} (run needs it at start-up)");
                        }
                    }
                }
                ExitCode::from(EXIT_OK)
            }
            Err(code) => code,
        },
        Command::Run {
            config,
            duration,
            grace,
        } => {
            let cfg = match load(&config, id) {
                Ok(c) => c,
                Err(code) => return code,
            };
            for w in &cfg.warnings {
                tracing::warn!("config: {w}");
            }
            match runner::run(cfg, RunOptions { duration, grace }, shutdown_signal()).await {
                Ok(_) => ExitCode::from(EXIT_OK),
                Err(e) => {
                    eprintln!("error: {e}");
                    tracing::error!(error = %e, "run failed");
                    ExitCode::from(match e {
                        runner::RunError::Prepare(_) => EXIT_UNAVAILABLE_INPUT,
                        runner::RunError::State(_) | runner::RunError::Evidence { .. } => EXIT_IO,
                    })
                }
            }
        }
        Command::Probe { config, branch } => {
            let cfg = match load(&config, id) {
                Ok(c) => c,
                Err(code) => return code,
            };
            probe_once(&cfg, &branch).await
        }
    }
}

/// Resolves with the name of the first termination signal received.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            tracing::error!("cannot install signal handlers; stop with --duration");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

async fn probe_once(cfg: &Config, branch: &str) -> ExitCode {
    let (resolver, probes) = match probe::prepare(cfg) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: cannot prepare probes: {e}");
            return ExitCode::from(EXIT_UNAVAILABLE_INPUT);
        }
    };
    let Some(p) = probes.iter().find(|p| p.branch.name == branch) else {
        let names: Vec<_> = cfg.branches.iter().map(|b| b.name.as_str()).collect();
        eprintln!(
            "error: no branch {branch:?} in {}; branches: {}",
            cfg.source.display(),
            names.join(", ")
        );
        return ExitCode::from(EXIT_INVALID_CONFIG);
    };
    let clock = crate::clock::Clock::start();
    let a = probe::run_attempt(p, &resolver, &clock, 1).await;
    println!(
        "branch {} ({}) endpoint {} port {}",
        p.branch.name,
        p.branch.role.as_str(),
        p.branch.endpoint,
        p.branch.port
    );
    for s in &a.steps {
        let status = match s.class {
            None => "ok".to_string(),
            Some(c) => format!("FAILED {c}"),
        };
        println!(
            "  {:<8} {:>9.1} ms  {status}",
            s.step.as_str(),
            s.duration_ms
        );
        if s.step == crate::failure::Step::Resolve {
            for ans in &a.answers {
                println!(
                    "             {} {} {} (ttl {} s)",
                    ans.name, ans.rtype, ans.data, ans.ttl
                );
            }
        }
        if s.step == crate::failure::Step::Connect
            && let Some(addr) = &a.address
        {
            println!("             connected to {addr}");
        }
        if s.step == crate::failure::Step::Tls
            && let Some(t) = &a.tls
        {
            println!(
                "             {} {} ({} certificates)",
                t.version, t.cipher_suite, t.peer_certificates
            );
        }
    }
    if let Some(s) = &a.server {
        println!(
            "  server   hostname={} server_id={} read_only={} version={}",
            s.hostname, s.server_id, s.read_only, s.version
        );
    }
    match &a.outcome {
        Outcome::Success => {
            println!(
                "  outcome  success (marker {}, {} ms)",
                a.marker,
                a.finished_at - a.started_at
            );
            ExitCode::from(EXIT_OK)
        }
        Outcome::Failure {
            step,
            class,
            message,
        } => {
            println!("  outcome  FAILED at {step}: {class}: {message}");
            ExitCode::from(EXIT_ATTEMPT_FAILED)
        }
    }
}

/// The `check` plan (pure): branches, steps, metrics and dimensions, the policy arithmetic.
pub fn plan(cfg: &Config) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let d = config::fmt_dur;
    let _ = writeln!(s, "{}: valid", cfg.source.display());
    let _ = writeln!(
        s,
        "service {} (stable name {}, never probed as a branch)",
        cfg.service.name, cfg.service.stable_name
    );
    let steps = match &cfg.probe.kind {
        ProbeKind::Mysql(m) => {
            if m.ssl_mode == config::SslMode::Disabled {
                "resolve → connect → auth → write → verify"
            } else {
                "resolve → connect → tls → auth → write → verify"
            }
        }
    };
    let _ = writeln!(
        s,
        "probe kind {} every {} (attempt timeout {}, first-attempt jitter ≤ {}): {steps}",
        cfg.probe.kind.name(),
        d(cfg.probe.interval),
        d(cfg.probe.timeout),
        d(cfg.probe.jitter)
    );
    match &cfg.probe.kind {
        ProbeKind::Mysql(m) => {
            let _ = writeln!(
                s,
                "  mysql user {} (password from {}), canary {}.{}, ssl_mode {}{}",
                m.user,
                m.password,
                m.database,
                m.table,
                m.ssl_mode.as_str(),
                m.ssl_ca
                    .as_ref()
                    .map(|p| format!(", CA {}", p.display()))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(
        s,
        "  dns: {}",
        match &cfg.dns.nameservers {
            Some(ns) => ns
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("nameservers from {}", cfg.dns.resolv_conf.display()),
        }
    );
    let _ = writeln!(s, "branches:");
    for b in &cfg.branches {
        let _ = writeln!(
            s,
            "  {:<12} {:<9} {}:{}",
            b.name,
            b.role.as_str(),
            b.endpoint,
            b.port
        );
    }
    let p = &cfg.policy;
    let _ = writeln!(
        s,
        "readiness (initial {}, min_attempts {}):",
        p.initial.as_str(),
        p.min_attempts
    );
    let _ = writeln!(
        s,
        "  declare unready: success rate < {}% over {} held for {}; {}",
        p.declare_unready.threshold_percent,
        d(p.declare_unready.window),
        d(p.declare_unready.for_),
        config::one_failure_effect(&p.declare_unready, cfg.probe.interval, true)
    );
    let _ = writeln!(
        s,
        "  declare ready:   success rate ≥ {}% over {} held for {}{}; {}",
        p.declare_ready.threshold_percent,
        d(p.declare_ready.window),
        d(p.declare_ready.for_),
        if p.approval_required {
            ", then operator approval"
        } else {
            ""
        },
        config::one_failure_effect(&p.declare_ready, cfg.probe.interval, false)
    );
    let sinks: Vec<&str> = cfg
        .publish
        .sinks
        .iter()
        .map(|k| match k {
            SinkKind::CloudWatch => "cloudwatch",
            SinkKind::Emf => "emf (stdout)",
        })
        .collect();
    let _ = writeln!(
        s,
        "publish every {} to {} in namespace {} (standard resolution, 60 s):",
        d(cfg.publish.interval),
        sinks.join(", "),
        cfg.publish.namespace
    );
    for (m, unit, dims) in [
        ("Readiness", "None (0/1)", "Service, Branch"),
        ("SuccessRate", "Percent", "Service, Branch"),
        ("Attempts", "Count", "Service, Branch"),
        ("FailedAttempts", "Count", "Service, Branch"),
        ("StepDuration", "Milliseconds", "Service, Branch, Step"),
        ("Heartbeat", "Count", "Service"),
        ("BothBranchesUnready", "None (0/1)", "Service"),
    ] {
        let _ = writeln!(s, "  {m:<20} {unit:<14} [{dims}]");
    }
    let _ = writeln!(s, "evidence: {}", cfg.evidence_path.display());
    let _ = writeln!(s, "state: {}", cfg.state_dir.display());
    for w in &cfg.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
