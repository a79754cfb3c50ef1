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
/// Exit code: the runtime could not start (sysexits EX_SOFTWARE).
pub const EXIT_INTERNAL: u8 = 70;
/// Exit code: a secret, CA bundle, client certificate or key, or resolv.conf is unavailable at
/// start-up (sysexits EX_CONFIG); also `check --strict` when it finds one.
pub const EXIT_UNAVAILABLE_INPUT: u8 = 78;

/// readyprobe — tells Route 53 the truth about whether each failover branch can do its job.
///
/// Probes each branch by its own name (resolve → connect → TLS → authenticate → marked write →
/// verify), folds the attempts into one 0/1 `Readiness` metric per branch with asymmetric
/// hysteresis, publishes it for the CloudWatch alarm behind the Route 53 health check, and writes
/// every attempt, transition and publish to an evidence file.
///
/// Exit codes: 0 ok; 1 `probe` attempt failed, or `approve` found no prober waiting for approval;
/// 64 invalid config or usage; 70 internal error (the runtime could not start); 74 state store
/// or evidence I/O error; 78 secret, CA bundle, client certificate or key, or resolv.conf
/// unavailable (`run`, `probe`, `check --strict`).
#[derive(Debug, Parser)]
#[command(name = "readyprobe", version, about, long_about)]
pub struct Cli {
    /// Log format: `text` (readable) or `json` (one object per line, for CloudWatch Logs).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "READYPROBE_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// This prober instance's id, overriding `prober_id` in the config (e.g. one per
    /// Availability Zone). It keys the canary row and this prober's entry in the shared state
    /// store, so give each concurrently running prober its own, and keep it stable across
    /// scheduled-task runs.
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
    /// bounded `--duration` (ECS scheduled task; readiness continues from the state store).
    ///
    /// Exit 0 after a clean stop; 64 invalid config; 74 state store or evidence file unusable at
    /// start; 78 secret, CA bundle, client certificate or key, or resolv.conf unavailable (every
    /// such problem is listed, one per line).
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
    ///
    /// Then try what `run` prepares at start-up (secrets, CA bundles, client certificates and
    /// keys, resolv.conf) and print one warning per unavailable file or secret. Validation never
    /// reads those files, so a config checks on any machine; run `check --strict` where the
    /// prober runs (e.g. first in the task) to fail early instead. Exit 0 when valid (warnings
    /// included), 64 with every error (file, line, key) when not; with `--strict`, 78 when a file
    /// or secret is unavailable.
    Check {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Treat an unavailable file or secret as an error (exit 78), as `run` would.
        #[arg(long)]
        strict: bool,
    },
    /// Run one attempt against one branch now and print every step (a debugging aid).
    ///
    /// The attempt is real: the mysql kind upserts this prober's canary row, the http kind sends its
    /// marked request, the otlp kind exports its marked data point. Exit 0 when the
    /// attempt succeeded, 1 when it failed, 64 invalid config or unknown branch, 78 secret, CA
    /// bundle, client certificate or key, or resolv.conf unavailable.
    Probe {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
    },
    /// Approve the failback of a branch waiting in `pending_approval`.
    ///
    /// The running probers (or
    /// the next scheduled run) apply it only if the branch is still pending when they read it and
    /// the approval has not expired; an approval given before the branch got there never
    /// pre-authorises a later failback. Needs only the config and the state store (never the
    /// secrets or CA files). Exit 0 when some prober has the branch pending, 1 when none does
    /// (the approval is recorded, and will be rejected when read), 64 invalid config or
    /// arguments, 74 state store unreadable or unwritable.
    Approve {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
        /// Who approves (recorded in the evidence).
        #[arg(long)]
        by: String,
        /// Why (recorded in the evidence).
        #[arg(long)]
        reason: String,
        /// How long the approval stays valid if no prober has applied it yet.
        #[arg(long, value_parser = parse_duration, default_value = "30m")]
        expires: Duration,
    },
    /// Force a branch's published readiness (Route 53 ignores `SetAlarmState`, so overrides go
    /// through the metric), always with an expiry; or `--clear` it.
    ///
    /// The real readiness is still computed and recorded meanwhile. Needs only the config and the state store. Exit 0 when
    /// recorded, 64 invalid config or arguments, 74 state store unreadable or unwritable.
    Override {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
        /// Value to force.
        #[arg(
            long,
            value_enum,
            required_unless_present = "clear",
            conflicts_with = "clear"
        )]
        force: Option<ForceArg>,
        /// How long the override lasts (required with --force).
        #[arg(long, value_parser = parse_duration, required_unless_present = "clear")]
        expires: Option<Duration>,
        /// Why (required with --force).
        #[arg(long, required_unless_present = "clear")]
        reason: Option<String>,
        /// Who (default: $USER).
        #[arg(long)]
        by: Option<String>,
        /// Remove the branch's override.
        #[arg(long)]
        clear: bool,
    },
    /// Show each branch's readiness per prober: state, since when, success rate, what it waits
    /// for, pending approvals and active overrides.
    ///
    /// Needs only the config and the state store.
    /// Exit 0, 64 invalid config, 74 state store unreadable.
    Status {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Print the raw control document as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--force` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ForceArg {
    /// Publish 1.
    Ready,
    /// Publish 0.
    Unready,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. \"55s\", \"5m\")"))
}

fn init_logging(cli: &Cli) -> Result<(), String> {
    // A bare word that is not a level would parse as a target name and silence every log line.
    for directive in cli.log_level.split(',') {
        let d = directive.trim();
        let level = d.rsplit_once('=').map(|(_, l)| l).unwrap_or(d);
        if !["trace", "debug", "info", "warn", "error", "off"]
            .contains(&level.to_ascii_lowercase().as_str())
        {
            return Err(format!(
                "--log-level {:?}: {d:?} is not a level (trace, debug, info, warn, error, off) or a target=level directive",
                cli.log_level
            ));
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .map_err(|e| format!("--log-level {:?}: {e}", cli.log_level))?;
    // Colour codes only where a person reads them: in a file or CloudWatch Logs they are noise.
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().flatten_event(true).init(),
    }
    Ok(())
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
    if let Err(e) = init_logging(&cli) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
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
    let code = rt.block_on(async_main(cli));
    // Dropping the runtime would wait for every blocking thread, including one stuck on a hung
    // file system; past this bound they are left behind and the process exits.
    rt.shutdown_timeout(RUNTIME_SHUTDOWN);
    code
}

/// How long the runtime may take, once the command is done, to end its tasks and blocking
/// threads before the process exits without them. Anything still running then is stuck (every
/// store operation the command waited for has already answered or timed out).
const RUNTIME_SHUTDOWN: Duration = Duration::from_millis(250);

/// After a stop signal the process ends within `--grace` plus this. Whatever it still waits for
/// then (a hung state, evidence or sink write) is given up and the process exits [`EXIT_IO`].
pub const STOP_SLACK: Duration = Duration::from_secs(2);

impl Command {
    /// The config file every subcommand reads.
    fn config(&self) -> &std::path::Path {
        match self {
            Command::Run { config, .. }
            | Command::Check { config, .. }
            | Command::Probe { config, .. }
            | Command::Approve { config, .. }
            | Command::Override { config, .. }
            | Command::Status { config, .. } => config,
        }
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    let cfg = match load(cli.command.config(), cli.prober_id.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cli.command {
        Command::Check { strict, .. } => check(&cfg, strict),
        Command::Run {
            duration, grace, ..
        } => {
            let opts = RunOptions {
                duration,
                grace,
                emf_out: None,
            };
            run(cfg, opts).await
        }
        Command::Probe { branch, .. } => probe_once(&cfg, &branch).await,
        Command::Approve {
            branch,
            by,
            reason,
            expires,
            ..
        } => approve(&cfg, &branch, &by, &reason, expires).await,
        Command::Override {
            branch,
            force,
            expires,
            reason,
            by,
            clear,
            ..
        } => {
            let by = by
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "unknown".into());
            override_cmd(&cfg, &branch, force, expires, reason, by, clear).await
        }
        Command::Status { json, .. } => status(&cfg, json).await,
    }
}

/// `check`: the plan, then one question to [`probe::prepare`], one line per problem it reports.
/// Only `check` and `run` (and `probe`) read secrets and CA files; the operator commands need
/// nothing but the config and the state store.
fn check(cfg: &Config, strict: bool) -> ExitCode {
    print!("{}", plan(cfg));
    let Err(e) = probe::prepare(cfg) else {
        return ExitCode::from(EXIT_OK);
    };
    for p in &e.problems {
        if strict {
            eprintln!("error: {p}");
        } else {
            println!("warning: {p} (run would exit {EXIT_UNAVAILABLE_INPUT})");
        }
    }
    ExitCode::from(if strict {
        EXIT_UNAVAILABLE_INPUT
    } else {
        EXIT_OK
    })
}

async fn run(cfg: Config, opts: RunOptions) -> ExitCode {
    for w in &cfg.warnings {
        tracing::warn!("config: {w}");
    }
    let stop = shutdown_signal(opts.grace);
    let e = match runner::run(cfg, opts, stop).await {
        Ok(_) => return ExitCode::from(EXIT_OK),
        Err(e) => e,
    };
    match e {
        runner::RunError::Prepare(e) => {
            for p in &e.problems {
                eprintln!("error: {p}");
            }
            let n = e.problems.len();
            eprintln!(
                "error: cannot prepare probes ({n} input{} unavailable); nothing was probed or published",
                if n == 1 { "" } else { "s" }
            );
            ExitCode::from(EXIT_UNAVAILABLE_INPUT)
        }
        runner::RunError::State(_) | runner::RunError::Evidence { .. } => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_IO)
        }
    }
}

/// Longest approval validity: an approval is a decision about the evidence of now.
pub const MAX_APPROVAL: Duration = Duration::from_secs(24 * 3600);
/// Longest override: long enough for a planned maintenance, short enough not to be forgotten.
pub const MAX_OVERRIDE: Duration = Duration::from_secs(30 * 24 * 3600);

/// An expiry must outlast two state-store syncs (or no prober may ever read it) and stay within
/// `max`.
fn check_expiry(cfg: &Config, d: Duration, max: Duration) -> Result<(), String> {
    let min = cfg.state.poll_interval * 2;
    if d < min {
        return Err(format!(
            "{} is shorter than two state syncs ({}): probers might never read it",
            crate::clock::fmt_duration(d),
            crate::clock::fmt_duration(min)
        ));
    }
    if d > max {
        return Err(format!(
            "{} is longer than the maximum {}",
            crate::clock::fmt_duration(d),
            crate::clock::fmt_duration(max)
        ));
    }
    Ok(())
}

fn now_ms() -> crate::readiness::Millis {
    crate::clock::Clock::start().now_ms()
}

fn check_branch(cfg: &Config, branch: &str) -> Result<(), ExitCode> {
    if cfg.branches.iter().any(|b| b.name == branch) {
        return Ok(());
    }
    let names: Vec<_> = cfg.branches.iter().map(|b| b.name.as_str()).collect();
    eprintln!(
        "error: no branch {branch:?} in {}; branches: {}",
        cfg.source.display(),
        names.join(", ")
    );
    Err(ExitCode::from(EXIT_INVALID_CONFIG))
}

fn store_error(e: crate::state::StateError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(EXIT_IO)
}

async fn approve(
    cfg: &Config,
    branch: &str,
    by: &str,
    reason: &str,
    expires: Duration,
) -> ExitCode {
    if let Err(c) = check_branch(cfg, branch) {
        return c;
    }
    if let Err(e) = check_expiry(cfg, expires, MAX_APPROVAL) {
        eprintln!("error: --expires: {e}");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    if by.trim().is_empty() || reason.trim().is_empty() {
        eprintln!("error: --by and --reason must not be empty (they are the approval's record)");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    let now = now_ms();
    let approval = crate::control::Approval {
        id: format!("{now}-{:08x}", rand::random::<u32>()),
        branch: branch.to_string(),
        by: by.to_string(),
        reason: reason.to_string(),
        at: now,
        expires_at: now + expires.as_millis() as i64,
        decisions: Default::default(),
    };
    let store = runner::open_store(cfg).await;
    let a = approval.clone();
    let doc = match store
        .update(move |doc| {
            doc.approvals.push(a.clone());
            Ok(())
        })
        .await
    {
        Ok(d) => d,
        Err(e) => return store_error(e),
    };
    // Probers that saved recently (control::PROBER_FRESH_MS) will read the approval soon; older
    // entries (a stopped prober, a scheduled task between runs) read it if they come back in time.
    let fresh = |p: &crate::control::ProberState| p.is_fresh(now);
    let mut states = Vec::new();
    let (mut pending_fresh, mut pending_stale) = (false, false);
    for (id, ps) in &doc.probers {
        if let Some(b) = ps.branches.get(branch) {
            let pending = b.state == crate::readiness::ReadinessState::PendingApproval;
            if fresh(ps) {
                pending_fresh |= pending;
                states.push(format!("{id}: {}", b.state.as_str()));
            } else {
                pending_stale |= pending;
                states.push(format!(
                    "{id}: {} (last saved {} ago)",
                    b.state.as_str(),
                    crate::clock::fmt_duration(Duration::from_secs(
                        ((now - ps.saved_at).max(0) / 1000) as u64
                    ))
                ));
            }
        }
    }
    println!(
        "approval {} for branch {branch} recorded in {} (by {by}, expires {})",
        approval.id,
        store.location(),
        crate::clock::rfc3339(approval.expires_at)
    );
    let states = if states.is_empty() {
        "no prober has saved state for this branch yet".to_string()
    } else {
        states.join(", ")
    };
    if pending_fresh {
        println!(
            "probers apply it at their next sync (within {}) if the ready condition still holds; branch states: {states}",
            crate::clock::fmt_duration(cfg.state.poll_interval)
        );
        ExitCode::from(EXIT_OK)
    } else if pending_stale {
        eprintln!(
            "warning: only probers that have not saved recently have branch {branch} in pending_approval ({states}); they apply it only if they run again before it expires and the ready condition still holds"
        );
        ExitCode::from(EXIT_OK)
    } else {
        eprintln!(
            "warning: no prober has branch {branch} in pending_approval ({states}); the approval will be rejected when read and does not pre-authorise a later failback"
        );
        ExitCode::from(EXIT_ATTEMPT_FAILED)
    }
}

async fn override_cmd(
    cfg: &Config,
    branch: &str,
    force: Option<ForceArg>,
    expires: Option<Duration>,
    reason: Option<String>,
    by: String,
    clear: bool,
) -> ExitCode {
    if let Err(c) = check_branch(cfg, branch) {
        return c;
    }
    let now = now_ms();
    let store = runner::open_store(cfg).await;
    let b = branch.to_string();
    let new = if clear {
        None
    } else {
        let (Some(force), Some(expires), Some(reason)) = (force, expires, reason) else {
            eprintln!("error: --force needs --expires and --reason");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        };
        if let Err(e) = check_expiry(cfg, expires, MAX_OVERRIDE) {
            eprintln!("error: --expires: {e}");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
        if reason.trim().is_empty() {
            eprintln!("error: --reason must not be empty (it is the override's record)");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
        Some(crate::control::Override {
            force: match force {
                ForceArg::Ready => crate::control::Forced::Ready,
                ForceArg::Unready => crate::control::Forced::Unready,
            },
            by,
            reason,
            at: now,
            expires_at: now + expires.as_millis() as i64,
        })
    };
    let n = new.clone();
    let r = store
        .update(move |doc| {
            match &n {
                Some(o) => {
                    doc.overrides.insert(b.clone(), o.clone());
                }
                None => {
                    doc.overrides.remove(&b);
                }
            }
            Ok(())
        })
        .await;
    if let Err(e) = r {
        return store_error(e);
    }
    match new {
        Some(o) => println!(
            "override for branch {branch}: publish {} until {} ({}); probers apply it within {}",
            o.force.as_str(),
            crate::clock::rfc3339(o.expires_at),
            o.reason,
            crate::clock::fmt_duration(cfg.state.poll_interval)
        ),
        None => println!(
            "override for branch {branch} cleared; probers publish the computed readiness within {}",
            crate::clock::fmt_duration(cfg.state.poll_interval)
        ),
    }
    ExitCode::from(EXIT_OK)
}

async fn status(cfg: &Config, json: bool) -> ExitCode {
    let store = runner::open_store(cfg).await;
    let doc = match store.load().await {
        Ok(d) => d,
        Err(e) => return store_error(e),
    };
    if json {
        match serde_json::to_string_pretty(&doc) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot encode the control document: {e}");
                return ExitCode::from(EXIT_IO);
            }
        }
    } else {
        let branches: Vec<String> = cfg.branches.iter().map(|b| b.name.clone()).collect();
        print!(
            "{}",
            crate::control::render_status(&doc, &cfg.policy, &branches, now_ms())
        );
    }
    ExitCode::from(EXIT_OK)
}

/// Install the SIGTERM and SIGINT handlers now; the future resolves with the name of the first
/// of them received. From that signal on, the process lives at most `grace` + [`STOP_SLACK`]:
/// the signal is awaited by a task of its own and the bound kept by a thread of its own, so a
/// write that hangs inside the runtime, even on the thread that drives `run`, cannot hold it up.
fn shutdown_signal(grace: Duration) -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::oneshot::channel();
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::spawn(async move {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                exit_after(grace + STOP_SLACK);
                let _ = tx.send(name);
            });
        }
        _ => tracing::error!("cannot install signal handlers; stop with --duration"),
    }
    async move {
        match rx.await {
            Ok(name) => name,
            Err(_) => std::future::pending().await,
        }
    }
}

/// Exit the process with [`EXIT_IO`] after `limit` unless it has ended by then.
fn exit_after(limit: Duration) {
    let spawned = std::thread::Builder::new()
        .name("stop-deadline".into())
        .spawn(move || {
            std::thread::sleep(limit);
            tracing::error!(
                limit = %crate::clock::fmt_duration(limit),
                "readyprobe did not stop within the grace period + {} of the stop signal (a state, evidence or sink write hangs); exiting",
                crate::clock::fmt_duration(STOP_SLACK)
            );
            std::process::exit(i32::from(EXIT_IO));
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the stop deadline; the stop may take longer than the grace period");
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
        print_step(s, &a);
    }
    print_answers(&a);
    print_server(&a);
    match &a.outcome {
        Outcome::Success => {
            println!(
                "  outcome  {} (marker {}, {} ms)",
                a.outcome.as_str(),
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
            println!(
                "  outcome  {} at {step}: {class}: {message}",
                a.outcome.as_str()
            );
            ExitCode::from(EXIT_ATTEMPT_FAILED)
        }
    }
}

/// One step of `probe`'s report, with what the attempt learned in it.
fn print_step(s: &probe::StepRecord, a: &probe::Attempt) {
    use crate::failure::Step;
    let status = match s.class {
        None => "ok".to_string(),
        Some(c) => format!("FAILED {c}"),
    };
    println!(
        "  {:<8} {:>9.1} ms  {status}",
        s.step.as_str(),
        s.duration_ms
    );
    match s.step {
        Step::Resolve => {
            if let Some(m) = &a.dns {
                let auth = if m.authoritative {
                    " (authoritative)"
                } else {
                    ""
                };
                println!("             {} answer{auth}", m.rcode);
            }
            for ans in &a.answers {
                println!(
                    "             {} {} {} (ttl {} s)",
                    ans.name, ans.rtype, ans.data, ans.ttl
                );
            }
        }
        Step::Connect => {
            if let Some(addr) = &a.address {
                println!("             connected to {addr}");
            }
        }
        Step::Tls => {
            if let Some(t) = &a.tls {
                println!(
                    "             {} {} ({} certificates)",
                    t.version, t.cipher_suite, t.peer_certificates
                );
            }
        }
        Step::Auth | Step::Write | Step::Verify => {}
    }
}

/// The `http` and `otlp` kinds' answers, whatever the outcome.
fn print_answers(a: &probe::Attempt) {
    let or_dash = |s: Option<u16>| s.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
    if let Some(h) = &a.http {
        println!(
            "  http     status {}{}",
            or_dash(h.status),
            h.verify_status
                .map(|s| format!(", verify status {s}"))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &a.otlp {
        println!(
            "  otlp     status {}{}{}",
            or_dash(o.status),
            o.rejected
                .map(|r| format!(", rejected {r}"))
                .unwrap_or_default(),
            o.message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
}

/// Who answered, as far as the attempt learned it: the certificate the server presented
/// (verified or not) and the server's own identity; printed also when a later step failed.
fn print_server(a: &probe::Attempt) {
    if let Some(subject) = &a.certificate_subject {
        println!("  server   certificate {subject}");
    }
    if let Some(na) = a.certificate_not_after {
        println!(
            "             certificate valid until {} ({:.1} days)",
            crate::clock::rfc3339(na),
            (na - a.finished_at) as f64 / 86_400_000.0
        );
    }
    if let Some(s) = &a.server {
        println!(
            "  server   hostname={} server_id={} read_only={} version={}",
            s.hostname, s.server_id, s.read_only, s.version
        );
    }
}

/// The `check` plan (pure): branches, steps, metrics and dimensions, the policy arithmetic.
pub fn plan(cfg: &Config) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write_plan(&mut s, cfg);
    s
}

fn write_plan(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "{}: valid", cfg.source.display())?;
    writeln!(
        s,
        "service {} (stable name {}, never probed as a branch)",
        cfg.service.name, cfg.service.stable_name
    )?;
    plan_probe(s, cfg)?;
    plan_branches(s, cfg)?;
    plan_readiness(s, cfg)?;
    plan_publish(s, cfg)?;
    plan_evidence_and_state(s, cfg)?;
    for w in &cfg.warnings {
        writeln!(s, "warning: {w}")?;
    }
    Ok(())
}

/// The steps one attempt of `kind` runs, in order.
fn probe_steps(kind: &ProbeKind) -> &'static str {
    let tls = |mode: config::SslMode| mode != config::SslMode::Disabled;
    match kind {
        ProbeKind::Mysql(m) if tls(m.ssl_mode) => "resolve → connect → tls → auth → write → verify",
        ProbeKind::Mysql(_) => "resolve → connect → auth → write → verify",
        ProbeKind::Tcp(t) if tls(t.tls.ssl_mode) => "resolve → connect → tls",
        ProbeKind::Tcp(_) => "resolve → connect",
        ProbeKind::Http(h) => match (tls(h.tls.ssl_mode), h.verify.is_some()) {
            (false, false) => "resolve → connect → write",
            (false, true) => "resolve → connect → write → verify",
            (true, false) => "resolve → connect → tls → write",
            (true, true) => "resolve → connect → tls → write → verify",
        },
        ProbeKind::Otlp(o) if tls(o.tls.ssl_mode) => "resolve → connect → tls → write",
        ProbeKind::Otlp(_) => "resolve → connect → write",
    }
}

/// The probe section: schedule and steps, the kind's own settings, where DNS answers come from.
fn plan_probe(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    let d = crate::clock::fmt_duration;
    writeln!(
        s,
        "probe kind {} every {} (attempt timeout {}, first-attempt jitter ≤ {}): {}",
        cfg.probe.kind.name(),
        d(cfg.probe.interval),
        d(cfg.probe.timeout),
        d(cfg.probe.jitter),
        probe_steps(&cfg.probe.kind)
    )?;
    writeln!(s, "  {}", kind_settings(&cfg.probe.kind))?;
    let dns = match &cfg.dns.nameservers {
        Some(ns) => ns
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        None => format!("nameservers from {}", cfg.dns.resolv_conf.display()),
    };
    writeln!(s, "  dns: {dns}")
}

/// One line of the kind's own settings (never a secret's value).
fn kind_settings(kind: &ProbeKind) -> String {
    let ca = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| format!(", CA {}", p.display()))
            .unwrap_or_default()
    };
    match kind {
        ProbeKind::Mysql(m) => format!(
            "mysql user {} (password from {}), canary {}.{}, ssl_mode {}{}, TLS ≥ {}{}",
            m.user,
            m.password,
            m.database,
            m.table,
            m.ssl_mode.as_str(),
            ca(&m.ssl_ca),
            match m.tls_min_version {
                crate::config::MinVersion::Tls12 => "1.2",
                crate::config::MinVersion::Tls13 => "1.3",
            },
            m.client_identity
                .as_ref()
                .map(|c| format!(", client certificate {}", c.cert.display()))
                .unwrap_or_default()
        ),
        ProbeKind::Otlp(o) => format!(
            "otlp POST {} (one marked gauge data point, OTLP/HTTP protobuf), ssl_mode {}",
            o.path,
            o.tls.ssl_mode.as_str()
        ),
        ProbeKind::Http(h) => format!(
            "http {} {}{}, ssl_mode {}, accepted status {}{}",
            h.request.method,
            h.request.path,
            h.verify
                .as_ref()
                .map(|v| format!(" then verify {} {}", v.method, v.path))
                .unwrap_or_default(),
            h.tls.ssl_mode.as_str(),
            if h.request.expect_status.is_empty() {
                "2xx".to_string()
            } else {
                format!("{:?}", h.request.expect_status)
            },
            h.expect_header
                .as_ref()
                .map(|(n, v)| format!(", response header {n} must be {v:?}"))
                .unwrap_or_default()
        ),
        ProbeKind::Tcp(t) => format!(
            "tcp, ssl_mode {}{} (liveness-level: proves the port answers, not that the branch can do its job)",
            t.tls.ssl_mode.as_str(),
            ca(&t.tls.ssl_ca)
        ),
    }
}

fn plan_branches(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "branches:")?;
    for b in &cfg.branches {
        writeln!(
            s,
            "  {:<12} {:<9} {}:{}",
            b.name,
            b.role.as_str(),
            b.endpoint,
            b.port
        )?;
    }
    Ok(())
}

/// The readiness policy, with what one failed attempt does to each condition.
fn plan_readiness(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    let d = crate::clock::fmt_duration;
    let p = &cfg.policy;
    writeln!(
        s,
        "readiness (initial {}, min_attempts {}):",
        p.initial.as_str(),
        p.min_attempts
    )?;
    writeln!(
        s,
        "  declare unready: success rate < {}% over {} held for {}; {}",
        p.declare_unready.threshold_percent,
        d(p.declare_unready.window),
        d(p.declare_unready.for_),
        config::one_failure_effect(&p.declare_unready, cfg.probe.interval, true)
    )?;
    writeln!(
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
    )
}

/// Where and how often metrics go, and the metric contract (names, units, dimensions).
fn plan_publish(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    let sinks: Vec<&str> = cfg
        .publish
        .sinks
        .iter()
        .map(|k| match k {
            SinkKind::CloudWatch => "cloudwatch",
            SinkKind::Emf => "emf (stdout)",
        })
        .collect();
    writeln!(
        s,
        "publish every {} to {} in namespace {} (standard resolution, 60 s):",
        crate::clock::fmt_duration(cfg.publish.interval),
        sinks.join(", "),
        cfg.publish.namespace
    )?;
    for (m, unit, dims) in [
        ("Readiness", "None (0/1)", "Service, Branch"),
        ("SuccessRate", "Percent", "Service, Branch"),
        ("Attempts", "Count", "Service, Branch"),
        ("FailedAttempts", "Count", "Service, Branch"),
        ("StepDuration", "Milliseconds", "Service, Branch, Step"),
        (
            "CertificateExpiryDays",
            "None (days)",
            "Service, Branch (TLS)",
        ),
        ("Heartbeat", "Count", "Service"),
        ("BothBranchesUnready", "None (0/1)", "Service"),
    ] {
        writeln!(s, "  {m:<22} {unit:<14} [{dims}]")?;
    }
    Ok(())
}

/// The evidence file, then this prober's id and the state store it syncs with.
fn plan_evidence_and_state(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "evidence: {}", cfg.evidence_path.display())?;
    let document = format!("control-{}.json", crate::state::safe(&cfg.service.name));
    let store = match &cfg.state.store {
        config::StoreKind::File => cfg.state_dir.join(document).display().to_string(),
        config::StoreKind::S3(s3) => format!("s3://{}/{}{document}", s3.bucket, s3.key_prefix),
    };
    writeln!(
        s,
        "prober id {}; state store: {store} (synced every {})",
        cfg.prober_id,
        crate::clock::fmt_duration(cfg.state.poll_interval)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use expect_test::expect;

    const MYSQL: &str = r#"
prober_id = "az-a"
state_dir = "/var/lib/readyprobe"

[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[readiness]
window = "60s"
min_attempts = 10
declare_unready = { success_rate_below = 95.0, for = "3m" }
declare_ready = { success_rate_at_or_above = 99.0, for = "10m", window = "5m" }

[probe]
kind = "mysql"
interval = "2s"
timeout = "1500ms"

[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }

[probe.tls]
ssl_mode = "required"

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"
"#;

    fn plan_of(text: &str) -> String {
        let path = std::path::Path::new("/etc/readyprobe/orders.toml");
        plan(&config::parse(path, text).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The probe section of the plan for [`MYSQL`] with its `[probe]` tables replaced by `kind`.
    fn probe_lines_of(kind: &str) -> String {
        let (head, _) = MYSQL.split_once("[probe]").unwrap_or_default();
        let (_, branches) = MYSQL.split_once("[[branch]]").unwrap_or_default();
        let text = format!("{head}{kind}\n[[branch]]{branches}");
        let plan = plan_of(&text);
        plan.lines()
            .skip_while(|l| !l.starts_with("probe kind"))
            .take(3)
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn plan_names_every_section_once() {
        expect![[r#"
            /etc/readyprobe/orders.toml: valid
            service orders-db (stable name mysql.orders.internal.example, never probed as a branch)
            probe kind mysql every 2s (attempt timeout 1s 500ms, first-attempt jitter ≤ 200ms): resolve → connect → tls → auth → write → verify
              mysql user readyprobe (password from environment variable READYPROBE_MYSQL_PASSWORD), canary readyprobe.canary, ssl_mode required, TLS ≥ 1.2
              dns: nameservers from /etc/resolv.conf
            branches:
              primary      PRIMARY   mysql-primary.orders.internal.example:3306
              secondary    SECONDARY mysql-secondary.orders.internal.example:3306
            readiness (initial unknown, min_attempts 10):
              declare unready: success rate < 95% over 1m held for 3m; 30 attempts per 1m window; one failure → 96.7% (still above the threshold)
              declare ready:   success rate ≥ 99% over 5m held for 10m; 150 attempts per 5m window; one failure → 99.3% (still meets the threshold)
            publish every 1m to emf (stdout) in namespace Readyprobe (standard resolution, 60 s):
              Readiness              None (0/1)     [Service, Branch]
              SuccessRate            Percent        [Service, Branch]
              Attempts               Count          [Service, Branch]
              FailedAttempts         Count          [Service, Branch]
              StepDuration           Milliseconds   [Service, Branch, Step]
              CertificateExpiryDays  None (days)    [Service, Branch (TLS)]
              Heartbeat              Count          [Service]
              BothBranchesUnready    None (0/1)     [Service]
            evidence: /var/lib/readyprobe/evidence.jsonl
            prober id az-a; state store: /var/lib/readyprobe/control-orders-db.json (synced every 10s)
        "#]]
        .assert_eq(&plan_of(MYSQL));
    }

    #[test]
    fn plan_shows_each_kinds_steps_and_settings() {
        expect![[r#"
            probe kind tcp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect
              tcp, ssl_mode disabled (liveness-level: proves the port answers, not that the branch can do its job)
              dns: 10.0.0.2:53, 10.0.1.2:5353
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"tcp\"\ninterval = \"2s\"\n[probe.tcp]\nport = 5672\n[probe.tls]\nssl_mode = \"disabled\"\n[dns]\nnameservers = [\"10.0.0.2\", \"10.0.1.2:5353\"]\n",
        ));
        expect![[r#"
            probe kind http every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect → tls → write → verify
              http POST /orders then verify GET /orders/{{marker}}, ssl_mode required, accepted status [201]
              dns: nameservers from /etc/resolv.conf
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"http\"\ninterval = \"2s\"\n[probe.tls]\nssl_mode = \"required\"\n[probe.http]\nmethod = \"POST\"\npath = \"/orders\"\nexpect_status = [201]\n[probe.http.verify]\nmethod = \"GET\"\npath = \"/orders/{{marker}}\"\n",
        ));
        expect![[r#"
            probe kind otlp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect → write
              otlp POST /v1/metrics (one marked gauge data point, OTLP/HTTP protobuf), ssl_mode disabled
              dns: nameservers from /etc/resolv.conf
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"otlp\"\ninterval = \"2s\"\n[probe.otlp]\n[probe.tls]\nssl_mode = \"disabled\"\n",
        ));
    }

    /// Exit codes named in a help text after its first "Exit".
    fn exit_codes(help: &str) -> std::collections::BTreeSet<u8> {
        let Some((_, tail)) = help.split_once("Exit") else {
            return Default::default();
        };
        tail.split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect()
    }

    #[test]
    fn help_names_the_exit_codes_each_command_uses() {
        let cli = Cli::command();
        let all = [
            EXIT_OK,
            EXIT_ATTEMPT_FAILED,
            EXIT_INVALID_CONFIG,
            EXIT_INTERNAL,
            EXIT_IO,
            EXIT_UNAVAILABLE_INPUT,
        ];
        let top = cli.get_long_about().map(ToString::to_string);
        assert_eq!(exit_codes(&top.unwrap_or_default()), all.into());
        for (cmd, codes) in [
            ("run", &[0, 64, 74, 78][..]),
            ("check", &[0, 64, 78]),
            ("probe", &[0, 1, 64, 78]),
            ("approve", &[0, 1, 64, 74]),
            ("override", &[0, 64, 74]),
            ("status", &[0, 64, 74]),
        ] {
            let sub = cli.find_subcommand(cmd).map(|c| {
                c.get_long_about()
                    .or(c.get_about())
                    .map(ToString::to_string)
                    .unwrap_or_default()
            });
            assert_eq!(
                exit_codes(&sub.unwrap_or_default()),
                codes.iter().copied().collect(),
                "{cmd}"
            );
        }
    }
}
