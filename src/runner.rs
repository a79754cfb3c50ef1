//! The `run` I/O shell: start-up, the select loop and shutdown. Branch loops feed attempts in;
//! every decision is the fold's ([`crate::fold`]); this module executes its effects (evidence,
//! batches for the sinks, logs) and moves the control document to and from the store.
//!
//! Sending never blocks probing: each sink has its own task behind a bounded queue
//! ([`SinkQueue`]), and a batch that does not fit is dropped, counted and recorded. A failed send
//! is retried with backoff until the batch's window (one publish interval) closes, then dropped,
//! counted and recorded.

mod shell;

use crate::clock::Clock;
use crate::config::{Config, SinkKind, StoreKind};
use crate::control::{ControlDoc, InstanceWatch};
use crate::fold::{Fold, Input, Setup};
use crate::probe;
use crate::record::{Record, Start, StartBranch};
use crate::scheduler::{BranchEvent, Schedule, branch_loop};
use crate::sink::cloudwatch::CloudWatchSink;
use crate::sink::emf::{EmfBuffer, EmfSink};
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{Sink, SinkQueue, SinkReport};
use crate::state::{FileStore, S3Store, StateError, Store};
use shell::{Shell, SyncOutcome};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::fold::RunSummary;

/// Options of one `run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop after this long (ECS scheduled task); `None` runs until a signal.
    pub duration: Option<Duration>,
    /// How long in-flight attempts and the final publish may take after a stop request.
    pub grace: Duration,
    /// Where the `emf` sink writes: `None` for stdout (the product), a buffer for a caller that
    /// reads the lines itself (tests).
    pub emf_out: Option<EmfBuffer>,
}

/// Why a run could not start or finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Secrets, CA bundle or resolver could not be prepared.
    #[error("cannot prepare probes: {0}")]
    Prepare(#[from] probe::PrepareError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The evidence file could not be opened or written.
    #[error("evidence file {path}: {source}")]
    Evidence {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Open the configured state store for `service`'s control document.
pub async fn open_store(cfg: &Config, service: &str) -> Store {
    match &cfg.state.store {
        StoreKind::File => Store::File(FileStore::new(&cfg.state_dir, service)),
        StoreKind::S3(s3) => Store::S3(S3Store::new(s3, service).await),
    }
}

/// The channels and tasks between the shell and the branch loops and sinks.
struct Wiring {
    events: mpsc::Receiver<BranchEvent>,
    stop_loops: CancellationToken,
    /// Aborted only when a loop outlives the grace period.
    loops: Vec<JoinHandle<u64>>,
    reports: mpsc::UnboundedReceiver<SinkReport>,
    sink_tasks: TaskTracker,
    /// Cancelled at the end of the grace period: sends still running are cut.
    stop_sinks: CancellationToken,
}

/// Run until `stop` resolves (a signal name) or the duration passes.
///
/// # Errors
/// [`RunError`] when start-up fails (nothing is published then): secrets, CA bundle or resolver
/// unavailable, the state store unreadable or corrupt, the evidence file not openable.
pub async fn run<S>(cfg: Config, opts: RunOptions, stop: S) -> Result<RunSummary, RunError>
where
    S: Future<Output = &'static str>,
{
    let clock = Clock::start();
    let (resolver, probes) = probe::prepare(&cfg)?;
    let svc = &cfg.services[0];
    let store = open_store(&cfg, &svc.service.name).await;
    let doc = store.load().await?;
    let evidence = EvidenceWriter::open(
        &cfg.evidence_path,
        &svc.service.name,
        &cfg.prober_id,
        cfg.evidence_max_bytes,
    )
    .map_err(|source| RunError::Evidence {
        path: cfg.evidence_path.display().to_string(),
        source,
    })?;
    let (queues, reports, sink_tasks, stop_sinks) = spawn_sinks(&cfg, &opts).await;
    let mut shell = start(&cfg, &opts, clock, store, evidence, queues, &doc);

    let stop_loops = CancellationToken::new();
    let (att_tx, events) = mpsc::channel::<BranchEvent>(256);
    let schedule = Schedule {
        interval: svc.probe.interval,
        jitter: svc.probe.jitter,
        grace: opts.grace,
    };
    let loops = probes
        .into_iter()
        .map(|p| {
            let (tx, stop) = (att_tx.clone(), stop_loops.clone());
            tokio::spawn(branch_loop(p, resolver.clone(), clock, schedule, tx, stop))
        })
        .collect();
    drop(att_tx);
    tracing::info!(
        service = %svc.service.name,
        prober = %cfg.prober_id,
        instance = %shell.instances.instance,
        branches = svc.branches.len(),
        interval = %crate::clock::fmt_duration(svc.probe.interval),
        publish_interval = %crate::clock::fmt_duration(cfg.publish.interval),
        sinks = ?cfg.publish.sinks,
        state = %shell.store.location(),
        evidence = %cfg.evidence_path.display(),
        "readyprobe started"
    );
    let mut wiring = Wiring {
        events,
        stop_loops,
        loops,
        reports,
        sink_tasks,
        stop_sinks,
    };
    let (stop_reason, syncing) = serve(&mut shell, &mut wiring, &cfg, opts.duration, stop).await;
    Ok(shutdown(shell, wiring, syncing, stop_reason, opts.grace).await)
}

/// Start a task per configured sink, each behind a bounded queue.
async fn spawn_sinks(
    cfg: &Config,
    opts: &RunOptions,
) -> (
    Vec<SinkQueue>,
    mpsc::UnboundedReceiver<SinkReport>,
    TaskTracker,
    CancellationToken,
) {
    let (report_tx, reports) = mpsc::unbounded_channel();
    let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
    let mut queues = Vec::new();
    for kind in &cfg.publish.sinks {
        let sink: Box<dyn Sink> = match kind {
            SinkKind::Emf => Box::new(match &opts.emf_out {
                Some(buf) => EmfSink::with_writer(&cfg.publish.namespace, Box::new(buf.clone())),
                None => EmfSink::new(&cfg.publish.namespace),
            }),
            SinkKind::CloudWatch => Box::new(
                CloudWatchSink::new(
                    &cfg.publish.cloudwatch,
                    &cfg.publish.namespace,
                    cfg.publish.interval,
                )
                .await,
            ),
        };
        queues.push(SinkQueue::spawn(
            sink,
            report_tx.clone(),
            &tracker,
            cancel.clone(),
        ));
    }
    tracker.close();
    (queues, reports, tracker, cancel)
}

/// Build the fold from the stored document, write the start record and take the store's
/// overrides.
fn start(
    cfg: &Config,
    opts: &RunOptions,
    clock: Clock,
    store: Store,
    evidence: EvidenceWriter,
    sinks: Vec<SinkQueue>,
    doc: &ControlDoc,
) -> Shell {
    let now = clock.now_ms();
    let svc = &cfg.services[0];
    let branches: Vec<String> = svc.branches.iter().map(|b| b.name.clone()).collect();
    let sink_names: Vec<&'static str> = sinks.iter().map(SinkQueue::name).collect();
    let location = store.location();
    let setup = Setup {
        service: &svc.service.name,
        prober: &cfg.prober_id,
        policy: &svc.policy,
        branches: &branches,
        sinks: &sink_names,
        store_location: &location,
    };
    let (fold, effects) = Fold::start(setup, doc, now);
    let record = Record::Start(Start {
        config: cfg.source.display().to_string(),
        branches: svc
            .branches
            .iter()
            .map(|b| StartBranch {
                name: b.name.clone(),
                role: b.role.as_str().to_string(),
                endpoint: b.endpoint.clone(),
                port: b.port,
            })
            .collect(),
        duration_ms: opts.duration.map(|d| d.as_millis() as u64),
        state_store: location.clone(),
        restored: fold.restored().to_vec(),
    });
    let mut shell = Shell {
        fold,
        evidence,
        sinks,
        clock,
        store,
        prober: cfg.prober_id.clone(),
        publish_window: cfg.publish.interval,
        sync_bound: cfg.state.poll_interval.max(Duration::from_secs(5)),
        instances: InstanceWatch::new(format!("{:016x}", rand::random::<u64>())),
    };
    shell.write(now, &record);
    shell.execute(effects);
    if let Ok(entries) = std::fs::read_dir(&cfg.state_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("state-") && name.ends_with(".json") {
                tracing::warn!(file = %e.path().display(), "ignoring a state file of an earlier format; readiness continues from {location}");
            }
        }
    }
    shell
}

/// The select loop: attempts, publish ticks, store syncs and sink reports, until a stop.
/// Returns why it stopped and the sync still in flight, if any.
async fn serve<S>(
    shell: &mut Shell,
    w: &mut Wiring,
    cfg: &Config,
    duration: Option<Duration>,
    stop: S,
) -> (String, Option<JoinHandle<SyncOutcome>>)
where
    S: Future<Output = &'static str>,
{
    let every = |d: Duration| {
        let mut i = interval_at(Instant::now() + d, d);
        i.set_missed_tick_behavior(MissedTickBehavior::Skip);
        i
    };
    let mut ticker = every(cfg.publish.interval);
    let mut poll = every(cfg.state.poll_interval);
    let until = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(100 * 365 * 86400)));
    tokio::pin!(until);
    tokio::pin!(stop);
    let mut syncing: Option<JoinHandle<SyncOutcome>> = None;
    let reason = loop {
        tokio::select! {
            ev = w.events.recv() => match ev {
                Some(ev) => shell.on_branch_event(ev),
                None => break "branch loops ended".to_string(),
            },
            _ = ticker.tick() => shell.tick(false),
            _ = poll.tick() => {
                if syncing.is_none() {
                    syncing = Some(shell.start_sync());
                }
            }
            joined = async {
                match syncing.as_mut() {
                    Some(task) => task.await,
                    None => std::future::pending().await,
                }
            }, if syncing.is_some() => {
                syncing = None;
                shell.finish_sync(joined);
            }
            Some(rep) = w.reports.recv() => shell.feed(Input::SinkReport(rep)),
            _ = &mut until => break "duration".to_string(),
            sig = &mut stop => break sig.to_string(),
        }
    };
    (reason, syncing)
}

/// Stop the loops and let in-flight attempts finish within the grace period; publish the final
/// datum set; save (the final evaluation included); close the sink queues and wait for the
/// sinks within what is left of the grace period. Whatever a sink did not report by then is
/// recorded as dropped.
async fn shutdown(
    mut shell: Shell,
    mut w: Wiring,
    syncing: Option<JoinHandle<SyncOutcome>>,
    stop_reason: String,
    grace: Duration,
) -> RunSummary {
    tracing::info!(reason = %stop_reason, grace = %crate::clock::fmt_duration(grace), "stopping");
    let grace_end = Instant::now() + grace;
    // Everything below ends by `hard_end`, inside the process's own limit of grace +
    // `cli::STOP_SLACK` (2 s) with room for the runtime's own shutdown, so a clean stop never
    // meets the watchdog's exit 74.
    let hard_end = grace_end + Duration::from_millis(1_500);
    w.stop_loops.cancel();
    let drain = async {
        while let Some(ev) = w.events.recv().await {
            shell.on_branch_event(ev);
        }
    };
    if tokio::time::timeout_at(grace_end + Duration::from_millis(200), drain)
        .await
        .is_err()
    {
        tracing::warn!("branch loops did not stop within the grace period; abandoning them");
        w.loops.iter().for_each(JoinHandle::abort);
    }
    shell.tick(true);
    // The final save and sends get what is left of the grace period, at least 1 s, and finish
    // 300 ms before `hard_end` so the evidence can still be closed.
    let final_deadline = grace_end
        .max(Instant::now() + Duration::from_secs(1))
        .min(hard_end - Duration::from_millis(300));
    let final_sync = async {
        if let Some(t) = syncing {
            let j = t.await;
            shell.finish_sync(j);
        }
        let j = shell.start_sync().await;
        shell.finish_sync(j);
    };
    if tokio::time::timeout_at(final_deadline, final_sync)
        .await
        .is_err()
    {
        shell.feed(Input::SyncFailed {
            error: "the final sync did not finish within the grace period".into(),
            started: None,
        });
    }
    shell.sinks.clear();
    let sinks_done = w.sink_tasks.wait();
    tokio::pin!(sinks_done);
    loop {
        tokio::select! {
            // Finished sinks win over a deadline that has passed meanwhile.
            biased;
            _ = &mut sinks_done => break,
            Some(rep) = w.reports.recv() => shell.feed(Input::SinkReport(rep)),
            _ = tokio::time::sleep_until(final_deadline) => {
                tracing::warn!("sinks did not finish within the grace period");
                break;
            }
        }
    }
    w.stop_sinks.cancel();
    while let Ok(rep) = w.reports.try_recv() {
        shell.feed(Input::SinkReport(rep));
    }
    let now = shell.clock.now_ms();
    let effects = shell.fold.abandon_unsent(now);
    shell.execute(effects);
    let (summary, effects) = shell
        .fold
        .finish(now, &stop_reason, shell.evidence.failed());
    shell.execute(effects);
    shell
        .evidence
        .close(hard_end.max(Instant::now() + Duration::from_millis(100)))
        .await;
    summary
}
