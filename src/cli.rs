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
/// Exit codes: 0 ok; 1 `probe` attempt failed, or `approve` found no prober waiting for approval;
/// 64 invalid config or usage; 70 internal error (the runtime could not start); 74 state store
/// or evidence I/O error; 78 secret, CA bundle or resolv.conf unavailable.
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
    /// Exit 0 after a clean stop; 64 invalid config; 74 state store or evidence file unusable at
    /// start; 78 secret, CA bundle or resolv.conf unavailable.
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
    /// Run one attempt against one branch now and print every step (a debugging aid). The
    /// attempt is real: the mysql kind upserts this prober's canary row, the http kind sends its
    /// marked request, the otlp kind exports its marked data point. Exit 0 when the
    /// attempt succeeded, 1 when it failed, 64 invalid config, 78 secret/CA/resolv.conf
    /// unavailable.
    Probe {
        /// Config file (TOML).
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: PathBuf,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
    },
    /// Approve the failback of a branch waiting in `pending_approval`. The running probers (or
    /// the next scheduled run) apply it only if the branch is still pending when they read it and
    /// the approval has not expired; an approval given before the branch got there never
    /// pre-authorises a later failback. Exit 0 when some prober has the branch pending, 1 when
    /// none does (the approval is recorded, and will be rejected when read).
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
    /// through the metric), always with an expiry; or `--clear` it. The real readiness is still
    /// computed and recorded meanwhile.
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

async fn async_main(cli: Cli) -> ExitCode {
    let id = cli.prober_id.as_deref();
    match cli.command {
        Command::Check { config } => match load(&config, id) {
            Ok(cfg) => {
                print!("{}", plan(&cfg));
                // What `run` would prepare: CA bundles, client identities, resolv.conf, secrets.
                if let Err(e) = probe::prepare(&cfg) {
                    println!("warning: {e} (run would exit 78)");
                }
                // What `run` would prepare: CA bundles, client identities, resolv.conf, secrets.
                if let Err(e) = probe::prepare(&cfg) {
                    println!("warning: {e} (run would exit 78)");
                }
                match &cfg.probe.kind {
                    ProbeKind::Mysql(m) => {
                        if let Err(e) = m.password.resolve() {
                            println!("warning: {e} (run needs it at start-up)");
                        }
                    }
                    ProbeKind::Tcp(_) => {}
                    ProbeKind::Otlp(o) => {
                        if let Err(e) = crate::probe::http::resolve_headers(&o.headers) {
                            println!("warning: {e} (run needs it at start-up)");
                        }
                    }
                    ProbeKind::Http(h) => {
                        if let Err(e) = crate::probe::http::resolve_headers(&h.headers) {
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
            match runner::run(
                cfg,
                RunOptions {
                    duration,
                    grace,
                    emf_out: None,
                },
                shutdown_signal(grace),
            )
            .await
            {
                Ok(_) => ExitCode::from(EXIT_OK),
                Err(e) => {
                    eprintln!("error: {e}");
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
        Command::Approve {
            config,
            branch,
            by,
            reason,
            expires,
        } => {
            let cfg = match load(&config, id) {
                Ok(c) => c,
                Err(code) => return code,
            };
            approve(&cfg, &branch, &by, &reason, expires).await
        }
        Command::Override {
            config,
            branch,
            force,
            expires,
            reason,
            by,
            clear,
        } => {
            let cfg = match load(&config, id) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let by = by
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "unknown".into());
            override_cmd(&cfg, &branch, force, expires, reason, by, clear).await
        }
        Command::Status { config, json } => {
            let cfg = match load(&config, id) {
                Ok(c) => c,
                Err(code) => return code,
            };
            status(&cfg, json).await
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
    use std::fmt::Write;
    let mut s = String::new();
    let d = crate::clock::fmt_duration;
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
        ProbeKind::Tcp(t) => {
            if t.tls.ssl_mode == config::SslMode::Disabled {
                "resolve → connect"
            } else {
                "resolve → connect → tls"
            }
        }
        ProbeKind::Http(h) => match (
            h.tls.ssl_mode == config::SslMode::Disabled,
            h.verify.is_some(),
        ) {
            (true, false) => "resolve → connect → write",
            (true, true) => "resolve → connect → write → verify",
            (false, false) => "resolve → connect → tls → write",
            (false, true) => "resolve → connect → tls → write → verify",
        },
        ProbeKind::Otlp(o) => {
            if o.tls.ssl_mode == config::SslMode::Disabled {
                "resolve → connect → write"
            } else {
                "resolve → connect → tls → write"
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
                "  mysql user {} (password from {}), canary {}.{}, ssl_mode {}{}, TLS ≥ {}{}",
                m.user,
                m.password,
                m.database,
                m.table,
                m.ssl_mode.as_str(),
                m.ssl_ca
                    .as_ref()
                    .map(|p| format!(", CA {}", p.display()))
                    .unwrap_or_default(),
                m.tls_min_version,
                m.client_identity
                    .as_ref()
                    .map(|c| format!(", client certificate {}", c.cert.display()))
                    .unwrap_or_default()
            );
        }
        ProbeKind::Otlp(o) => {
            let _ = writeln!(
                s,
                "  otlp POST {} (one marked gauge data point, OTLP/HTTP protobuf), ssl_mode {}",
                o.path,
                o.tls.ssl_mode.as_str()
            );
        }
        ProbeKind::Http(h) => {
            let _ = writeln!(
                s,
                "  http {} {}{}, ssl_mode {}, accepted status {}{}",
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
            );
        }
        ProbeKind::Tcp(t) => {
            let _ = writeln!(
                s,
                "  tcp, ssl_mode {}{} (liveness-level: proves the port answers, not that the branch can do its job)",
                t.tls.ssl_mode.as_str(),
                t.tls
                    .ssl_ca
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
        (
            "CertificateExpiryDays",
            "None (days)",
            "Service, Branch (TLS)",
        ),
        ("Heartbeat", "Count", "Service"),
        ("BothBranchesUnready", "None (0/1)", "Service"),
    ] {
        let _ = writeln!(s, "  {m:<22} {unit:<14} [{dims}]");
    }
    let _ = writeln!(s, "evidence: {}", cfg.evidence_path.display());
    let _ = writeln!(
        s,
        "prober id {}; state store: {} (synced every {})",
        cfg.prober_id,
        match &cfg.state.store {
            config::StoreKind::File => cfg
                .state_dir
                .join(format!(
                    "control-{}.json",
                    crate::state::safe(&cfg.service.name)
                ))
                .display()
                .to_string(),
            config::StoreKind::S3(s3) => format!(
                "s3://{}/{}control-{}.json",
                s3.bucket,
                s3.key_prefix,
                crate::state::safe(&cfg.service.name)
            ),
        },
        d(cfg.state.poll_interval)
    );
    for w in &cfg.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
