//! Command line: argument parsing (clap), logging set-up, the subcommands and their exit codes.

pub mod cost;
mod drill_cmd;
mod operator;
mod plan;
mod probe_cmd;
mod simulate_cmd;

pub use operator::{MAX_APPROVAL, MAX_OVERRIDE};
pub use plan::plan;

use crate::aws_check;
use crate::config::{self, Config, ConfigSource};
use crate::config_source::{Identity, Reader};
use crate::probe;
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
/// start-up, or the `[serve] listen` address cannot be bound (sysexits EX_CONFIG); also `check
/// --strict` when it finds one.
pub const EXIT_UNAVAILABLE_INPUT: u8 = 78;

/// readyprobe — tells Route 53 the truth about whether each failover branch can do its job.
///
/// Probes each branch by its own name (resolve → connect → TLS → authenticate → marked write →
/// verify), folds the attempts into one 0/1 `Readiness` metric per branch with asymmetric
/// hysteresis, publishes it for the CloudWatch alarm behind the Route 53 health check, and writes
/// every attempt, transition and publish to an evidence file.
///
/// Exit codes: 0 ok; 1 `probe` attempt failed, `approve` found no prober waiting for approval,
/// `check --aws` found a violation, or `health` found the heartbeat stale or missing; 64 invalid config or usage; 70 internal error (the runtime
/// could not start); 74 state store, evidence, scenario or report I/O error, or AWS unreachable
/// (`check --aws`, `drill report --alarms`);
/// 77 `check --aws` could not read everything (no violation among what it read); 78 secret, CA
/// bundle, client certificate or key, or resolv.conf unavailable (`run`, `probe`, `check --strict`).
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
    /// SIGHUP re-reads the config and applies its service changes without a restart; so does a
    /// change `[reload] poll` finds (an `s3://` config is polled every 30 s by default).
    ///
    /// Exit 0 after a clean stop; 64 invalid config; 74 state store or evidence file unusable at
    /// start, or still running two seconds past `--grace` after a stop signal (a write hangs); 78 secret, CA bundle, client certificate or key, or resolv.conf unavailable (every
    /// such problem is listed, one per line).
    Run {
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Stop after this long, e.g. `55s` (scheduled-task mode); more than zero.
        #[arg(long, value_parser = parse_run_duration)]
        duration: Option<Duration>,
        /// After a stop request, how long in-flight attempts and the final publish may take.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        grace: Duration,
        /// Rewrite this file every 5 s while the run's loop turns, for `readyprobe health` (a
        /// container health check). Absent: no heartbeat file.
        #[arg(long, value_name = "PATH", env = "READYPROBE_HEARTBEAT")]
        heartbeat: Option<PathBuf>,
    },
    /// Validate the config and print the plan (branches, steps, metrics, what one failure does).
    ///
    /// Then try what `run` prepares at start-up (secrets, CA bundles, client certificates and
    /// keys, resolv.conf, the otlp sink's header secrets and CA bundle) and print one warning
    /// per unavailable file or secret. Validation never
    /// reads those files, so a config checks on any machine; run `check --strict` where the
    /// prober runs (e.g. first in the task) to fail early instead. Exit 0 when valid (warnings
    /// included), 64 with every error (file, line, key) when not; with `--strict`, 78 when a file
    /// or secret is unavailable.
    ///
    /// `--aws` instead reads the deployed alarms, health checks and failover records and
    /// reports every violation of the metric contract with its fix (docs/check-aws.md): exit 0
    /// when none, 1 when some, 77 when none but some reads gave nothing (refused, unusable, cut
    /// short by `--aws-timeout`) or there are no usable credentials, 74 when AWS cannot be
    /// reached. Without `--aws`, no AWS call.
    Check {
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Treat an unavailable file or secret as an error (exit 78), in any service.
        #[arg(long, conflicts_with = "aws")]
        strict: bool,
        /// Check the deployed CloudWatch alarms, Route 53 health checks and records instead.
        #[arg(long)]
        aws: bool,
        /// Output of `--aws`.
        #[arg(long, value_enum, default_value_t = aws_check::Format::Table, requires = "aws")]
        format: aws_check::Format,
        /// Overall deadline of `--aws`'s reads (e.g. "60s", "5m"); what it cuts short is
        /// reported not checked.
        #[arg(long, value_name = "DURATION", default_value = aws_check::DEFAULT_TIMEOUT,
              value_parser = aws_check::parse_timeout, requires = "aws")]
        aws_timeout: Duration,
    },
    /// Run one attempt against one branch now and print every step (a debugging aid).
    ///
    /// The attempt is real: the mysql and postgres kinds upsert this prober's canary row, the
    /// http kind sends its marked request, the otlp kind exports its marked data point. Exit 0
    /// when the attempt succeeded, 1 when it failed, 64 invalid config or unknown branch, 78
    /// secret, CA bundle, client certificate or key, or resolv.conf unavailable.
    Probe {
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
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
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
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
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Branch name.
        #[arg(long, short)]
        branch: String,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
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
        /// Who (default: $USER, else "unknown").
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
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
        /// Print the raw control document as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Container health check: exit 0 when the heartbeat file of a running `run --heartbeat`
    /// was written within `--max-age`, else 1 with the reason on one line on stderr.
    ///
    /// `run` rewrites the file every 5 s from its loop, so a process that is stopped, hung or
    /// gone leaves it stale. Reads only the file's modification time: no config, no shell, no
    /// network, so it runs as the exec-form ECS health check
    /// `["CMD", "/usr/local/bin/readyprobe", "health"]` with `READYPROBE_HEARTBEAT` set in the
    /// task. Exit 0 fresh; 1 stale, missing or not a regular file; 64 invalid arguments.
    Health {
        /// The heartbeat file `run --heartbeat` writes.
        #[arg(long, value_name = "PATH", env = "READYPROBE_HEARTBEAT")]
        heartbeat: PathBuf,
        /// The oldest heartbeat that still counts as alive, e.g. "30s"; more than zero.
        #[arg(long, value_name = "DURATION", value_parser = parse_run_duration,
              default_value = crate::heartbeat::DEFAULT_MAX_AGE)]
        max_age: Duration,
    },
    /// Drill evidence: `drill mark` puts an operator's marker into the drill's evidence;
    /// `drill report` turns the evidence into a report.
    Drill {
        /// The drill subcommand.
        #[command(subcommand)]
        command: drill_cmd::DrillCommand,
    },
    /// Predict a failover and failback timeline offline: scripted attempt outcomes per branch
    /// (docs/simulate.md) through the real readiness core, then the modelled alarm, health check,
    /// failover answer and resolver caches, each hop's assumption stated and set in the scenario.
    ///
    /// Prints, per scripted fault, the time of each phase (detection, alarm, health check, DNS
    /// selection, cache expiry; failback with pending_approval), the flaps and the fail-open
    /// periods. Probes nothing, publishes nothing, reads no secret. Exit 0 when simulated, 64
    /// invalid config, scenario (file, line, key) or arguments, 74 the scenario or `--out` cannot
    /// be read or written.
    Simulate {
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: ConfigSource,
        /// Scenario file (TOML).
        #[arg(long)]
        scenario: PathBuf,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
        /// Also write simulation.md, simulation.json and report.html (the timeline drawn as a
        /// drill report is, to put next to a drill's) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Output on stdout.
        #[arg(long, value_enum, default_value_t = simulate_cmd::Format::Table)]
        format: simulate_cmd::Format,
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
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. \"55s\", \"5m\")"))?;
    if d > config::MAX_DURATION {
        return Err("longer than the longest accepted duration, 366 days".into());
    }
    Ok(d)
}

/// `run --duration`: a zero one would stop before the first attempt, probing nothing.
fn parse_run_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be more than zero (a run of 0s probes nothing)".into());
    }
    Ok(d)
}

/// A one-shot command's stdout may be a pipe its reader closes early (`status | head -1`): such a
/// command then ends as Unix filters do, by `SIGPIPE`, instead of panicking in `println!`. `run`
/// keeps Rust's default (ignored, writes fail with `EPIPE`), which its EMF writer handles.
/// Sockets are unaffected: the standard library sends on TCP with `MSG_NOSIGNAL`, and the probes
/// open no Unix-domain sockets (`mysql` is told not to prefer one).
fn restore_sigpipe() {
    // SAFETY: called from `main` before the runtime or any other thread exists, so nothing can
    // race the change of disposition; `SIG_DFL` installs no handler code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Set by [`hold_sighup`]'s handler: a SIGHUP came before `run` took SIGHUP over.
static EARLY_SIGHUP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_early_sighup(_: libc::c_int) {
    EARLY_SIGHUP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Catch SIGHUP before anything else runs (the binary calls this from its `.init_array`, before
/// Rust's own start-up, and `main` again): its default action ends the process, and
/// parsing the command line, building the runtime and reading the config take time (a command
/// other than `run` gets the default back, [`release_sighup`]). A SIGHUP before the
/// reload handler exists only sets a flag ([`took_early_sighup`] logs it): the config is read
/// after that handler is installed, so it is the newest anyway.
pub fn hold_sighup() {
    // SAFETY: called before the runtime or any other thread exists; the handler only stores to
    // an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGHUP,
            on_early_sighup as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// A command other than `run` ends at SIGHUP, as by default: the default action back, and an
/// early SIGHUP [`hold_sighup`] caught raised again.
fn release_sighup() {
    // SAFETY: as in `hold_sighup`; `SIG_DFL` installs no handler code, and `raise` sends the
    // signal to this thread only.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_DFL);
        if EARLY_SIGHUP.load(std::sync::atomic::Ordering::Relaxed) {
            libc::raise(libc::SIGHUP);
        }
    }
}

/// Log a SIGHUP [`hold_sighup`] caught before the reload handler was installed.
fn took_early_sighup() {
    if EARLY_SIGHUP.swap(false, std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(
            "SIGHUP before the run was ready: ignored (the config is read now, after it)"
        );
    }
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

/// Read and validate the config from its source (exit 64 naming the source when it cannot be
/// read or is invalid); `--prober-id` overrides its `prober_id`. Also the reader, for `run`'s
/// reloads, and the identity of what was read.
async fn load(
    source: &ConfigSource,
    prober_id: Option<&str>,
) -> Result<(Config, Reader, Identity), ExitCode> {
    let reader = Reader::new(source.clone()).await;
    let (mut cfg, identity) = reader.load().await.map_err(|e| {
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
    Ok((cfg, reader, identity))
}

/// Run the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    // First, before anything that takes time: `run` must never end at an early SIGHUP.
    hold_sighup();
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
    if !matches!(cli.command, Command::Run { .. }) {
        release_sighup();
        restore_sigpipe();
    }
    // Before logging and the runtime: a health check runs often and needs neither.
    if let Command::Health { heartbeat, max_age } = &cli.command {
        return health(heartbeat, *max_age);
    }
    if let Err(e) = init_logging(&cli) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    // Threads must not grow with the number of services: the file store runs at most
    // `state::FILE_OPS` operations at once; the cap leaves room for config reads on reload and
    // the evidence writer's stop (tokio's default allows 512).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(32)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    // The command runs as a task on the worker threads, beside the branch loops it talks to,
    // not on this thread: every wake-up would cross threads (BENCHMARKS.md, cost per attempt).
    let code = rt.block_on(async {
        tokio::spawn(async_main(cli)).await.unwrap_or_else(|e| {
            eprintln!("error: internal error: {e}");
            ExitCode::from(EXIT_INTERNAL)
        })
    });
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
    /// The config the subcommand reads (`None`: `drill report`, which reads none).
    fn config(&self) -> Option<&ConfigSource> {
        match self {
            Command::Run { config, .. }
            | Command::Check { config, .. }
            | Command::Probe { config, .. }
            | Command::Approve { config, .. }
            | Command::Override { config, .. }
            | Command::Status { config, .. }
            | Command::Simulate { config, .. } => Some(config),
            Command::Drill { command } => command.config(),
            Command::Health { .. } => None,
        }
    }

    /// The `--service` a one-service command names (`None`: the config's only one).
    fn service(&self) -> Option<&str> {
        match self {
            Command::Probe { service, .. }
            | Command::Approve { service, .. }
            | Command::Override { service, .. }
            | Command::Status { service, .. }
            | Command::Simulate { service, .. } => service.as_deref(),
            Command::Drill {
                command: drill_cmd::DrillCommand::Mark { service, .. },
            } => service.as_deref(),
            Command::Drill { .. }
            | Command::Run { .. }
            | Command::Check { .. }
            | Command::Health { .. } => None,
        }
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    // `run` takes SIGHUP over before reading the config: from here on it never ends the process
    // (its default action), also while a large config is still being read.
    let hup = matches!(cli.command, Command::Run { .. })
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()));
    took_early_sighup();
    if let Command::Drill {
        command: drill_cmd::DrillCommand::Report(args),
    } = cli.command
    {
        return drill_cmd::report(args).await;
    }
    let Some(source) = cli.command.config() else {
        eprintln!("error: no --config for this command");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    };
    let (cfg, reader, identity) = match load(source, cli.prober_id.as_deref()).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cli.command {
        Command::Check {
            aws: true,
            format,
            aws_timeout,
            ..
        } => ExitCode::from(aws_check::check_aws(&cfg, format, aws_timeout).await),
        Command::Check { strict, .. } => {
            let secrets = crate::secrets::SecretCache::default();
            secrets.read_missing(&cfg).await;
            let code = check(&cfg, strict, &secrets);
            // A local file costs nothing to poll; an S3 object is one GET a poll.
            if let (config::ConfigSource::S3 { .. }, Some(every)) = (
                reader.source(),
                crate::config_source::poll_every(reader.source(), cfg.reload_poll),
            ) {
                println!("{}", cost::config_poll_line(every));
            }
            code
        }
        Command::Run {
            duration,
            grace,
            heartbeat,
            ..
        } => {
            let opts = RunOptions {
                duration,
                grace,
                emf_out: None,
                heartbeat,
            };
            let hup = hup.and_then(|h| {
                h.map_err(|e| tracing::error!(error = %e, "cannot install the SIGHUP handler; a config change needs a restart or a [reload] poll"))
                    .ok()
            });
            let poll = crate::config_source::poll_every(reader.source(), cfg.reload_poll);
            let watched = runner::Watched {
                reader,
                identity,
                poll,
                prober_id: cli.prober_id.clone(),
            };
            run(cfg, opts, runner::watch(watched, hup)).await
        }
        Command::Simulate {
            scenario,
            service,
            out,
            format,
            ..
        } => simulate_cmd::simulate(&cfg, service.as_deref(), &scenario, out.as_deref(), format),
        command => on_one_service(&cfg, command).await,
    }
}

/// The commands that act on one service of the config (`--service`, or the only one): they
/// read or change one branch's state, where `check`, `run` and `simulate` take the whole config.
async fn on_one_service(cfg: &Config, command: Command) -> ExitCode {
    let svc = match pick(cfg, command.service()) {
        Ok(svc) => svc,
        Err(code) => return code,
    };
    match command {
        Command::Probe { branch, .. } => probe_cmd::probe_once(cfg, svc, &branch).await,
        Command::Approve {
            branch,
            by,
            reason,
            expires,
            ..
        } => operator::approve(cfg, svc, &branch, &by, &reason, expires).await,
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
            let target = operator::Target {
                cfg,
                svc,
                branch: &branch,
            };
            operator::override_cmd(target, force, expires, reason, by, clear).await
        }
        Command::Status { json, .. } => operator::status(cfg, svc, json).await,
        Command::Drill { command } => drill_cmd::drill(cfg, svc, command).await,
        Command::Check { .. }
        | Command::Run { .. }
        | Command::Simulate { .. }
        | Command::Health { .. } => {
            unreachable!("main and async_main run the whole-config commands and health themselves")
        }
    }
}

/// The service a command acts on: `--service`, or the config's only one (exit 64 otherwise,
/// naming the services).
fn pick<'a>(cfg: &'a Config, name: Option<&str>) -> Result<&'a config::ServiceConfig, ExitCode> {
    cfg.service(name).map_err(|e| {
        eprintln!("error: {}", config::escape_controls(&e));
        ExitCode::from(EXIT_INVALID_CONFIG)
    })
}

/// `check`: the plan, then one question to [`probe::prepare`], one line per problem it reports.
/// Only `check` and `run` (and `probe`) read secrets and CA files; the operator commands need
/// nothing but the config and the state store.
fn check(cfg: &Config, strict: bool, secrets: &crate::secrets::SecretCache) -> ExitCode {
    // Names, paths and problems quote the config: escaped, so it cannot drive the terminal.
    print!("{}", config::escape_controls_by_line(&plan(cfg)));
    // Each unavailable input once, with the services it stops when there are several.
    let mut problems: Vec<(String, Vec<&str>)> = Vec::new();
    if let Err(e) = probe::resolver(cfg) {
        let all = cfg.services.iter().map(|s| s.service.name.as_str());
        problems.extend(
            e.problems
                .iter()
                .map(|p| (p.to_string(), all.clone().collect())),
        );
    }
    for svc in &cfg.services {
        let e = match probe::branches(cfg, svc, secrets) {
            Ok(probes) => {
                if let Some(w) = probe::short_secret_warning(&probes) {
                    let of = if cfg.services.len() > 1 {
                        format!(" (service {})", svc.service.name)
                    } else {
                        String::new()
                    };
                    println!("warning: {}", config::escape_controls(&format!("{w}{of}")));
                }
                continue;
            }
            Err(e) => e,
        };
        for p in e.problems.iter().map(ToString::to_string) {
            match problems.iter_mut().find(|(q, _)| *q == p) {
                Some((_, names)) => names.push(&svc.service.name),
                None => problems.push((p, vec![&svc.service.name])),
            }
        }
    }
    for (p, names) in &problems {
        let of = if cfg.services.len() > 1 {
            let s = if names.len() == 1 { "" } else { "s" };
            format!(", in service{s} {}", names.join(", "))
        } else {
            String::new()
        };
        let p = config::escape_controls(&format!("{p}{of}")).into_owned();
        if strict {
            eprintln!("error: {p}");
        } else {
            // `run` exits 78 only when no service can start; it leaves out the others.
            if names.len() < cfg.services.len() {
                println!("warning: {p} (run would leave it out: ServiceUnavailable = 1)");
            } else {
                println!("warning: {p} (run would exit {EXIT_UNAVAILABLE_INPUT})");
            }
        }
    }
    let sink_unavailable = check_otlp_sink(cfg, strict, secrets);
    ExitCode::from(if strict && (!problems.is_empty() || sink_unavailable) {
        EXIT_UNAVAILABLE_INPUT
    } else {
        EXIT_OK
    })
}

/// `check`'s line about the `otlp` sink's inputs (header secrets, CA bundle) when one is
/// unavailable: `run` starts all the same and fails every otlp batch. Whether there was one.
fn check_otlp_sink(cfg: &Config, strict: bool, secrets: &crate::secrets::SecretCache) -> bool {
    let Some((class, why)) = runner::otlp_unavailable(cfg, secrets) else {
        return false;
    };
    let why = config::escape_controls(&why).into_owned();
    if strict {
        eprintln!("error: {why}");
    } else {
        let class = class.as_str();
        println!("warning: {why} (run would start, and every otlp batch would fail as {class})");
    }
    true
}

async fn run(cfg: Config, opts: RunOptions, reloads: Option<runner::Reloads>) -> ExitCode {
    for w in &cfg.warnings {
        tracing::warn!("config: {w}");
    }
    let stop = shutdown_signal(opts.grace);
    let e = match runner::run_with_reloads(cfg, opts, stop, reloads).await {
        Ok(_) => return ExitCode::from(EXIT_OK),
        Err(e) => e,
    };
    match e {
        runner::RunError::Prepare(e) => {
            for p in &e.problems {
                eprintln!("error: {}", config::escape_controls(&p.to_string()));
            }
            let n = e.problems.len();
            eprintln!(
                "error: cannot prepare probes ({n} input{} unavailable); nothing was probed or published",
                if n == 1 { "" } else { "s" }
            );
            ExitCode::from(EXIT_UNAVAILABLE_INPUT)
        }
        runner::RunError::Serve(_) => {
            eprintln!("error: {e}; nothing was probed or published");
            ExitCode::from(EXIT_UNAVAILABLE_INPUT)
        }
        runner::RunError::State(_) | runner::RunError::Evidence { .. } => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_IO)
        }
    }
}

/// `health`: the heartbeat's verdict, one line (stdout when fresh, stderr when not).
fn health(path: &std::path::Path, max_age: Duration) -> ExitCode {
    match crate::heartbeat::check(path, max_age) {
        Ok(age) => {
            println!(
                "ok: heartbeat {} written {} ago",
                path.display(),
                crate::clock::fmt_duration(Duration::from_millis(age.as_millis() as u64))
            );
            ExitCode::from(EXIT_OK)
        }
        Err(why) => {
            eprintln!("unhealthy: {}", config::escape_controls(&why));
            ExitCode::from(EXIT_ATTEMPT_FAILED)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
    fn check_aws_exits_with_the_codes_the_cli_documents() {
        assert_eq!(aws_check::EXIT_OK, EXIT_OK);
        assert_eq!(aws_check::EXIT_VIOLATIONS, EXIT_ATTEMPT_FAILED);
        assert_eq!(aws_check::EXIT_IO, EXIT_IO);
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
            aws_check::EXIT_NOT_CHECKED,
            EXIT_UNAVAILABLE_INPUT,
        ];
        let top = cli.get_long_about().map(ToString::to_string);
        assert_eq!(exit_codes(&top.unwrap_or_default()), all.into());
        for (cmd, codes) in [
            ("run", &[0, 64, 74, 78][..]),
            ("check", &[0, 1, 64, 74, 77, 78]),
            ("probe", &[0, 1, 64, 78]),
            ("approve", &[0, 1, 64, 74]),
            ("override", &[0, 64, 74]),
            ("status", &[0, 64, 74]),
            ("simulate", &[0, 64, 74]),
            ("drill mark", &[0, 64, 74]),
            ("drill report", &[0, 64, 74]),
            ("health", &[0, 1, 64]),
        ] {
            let mut words = cmd.split(' ');
            let top = words.next().and_then(|w| cli.find_subcommand(w));
            let sub = words.fold(top, |c, w| c?.find_subcommand(w)).map(|c| {
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
