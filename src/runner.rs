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
use crate::config::{Config, ServiceConfig, SinkKind, StoreKind};
use crate::control::{ControlDoc, InstanceWatch};
use crate::fold::{Fold, Input, ServiceSetup, Setup};
use crate::probe::{self, BranchProbe, PrepareError};
use crate::record::{Record, ServiceUnavailable, Start, StartBranch};
use crate::scheduler::{BranchEvent, Schedule, branch_loop};
use crate::sink::cloudwatch::CloudWatchSink;
use crate::sink::emf::{EmfBuffer, EmfSink};
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{Sink, SinkQueue, SinkReport};
use crate::state::{FileStore, S3Store, StateError, Store};
use shell::{Shell, SyncOutcome};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
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
    /// Branch events tagged with the index of their (running) service.
    events: mpsc::Receiver<(usize, BranchEvent)>,
    stop_loops: CancellationToken,
    /// Aborted only when a loop outlives the grace period.
    loops: Vec<JoinHandle<u64>>,
    reports: mpsc::UnboundedReceiver<SinkReport>,
    sink_tasks: TaskTracker,
    /// Cancelled at the end of the grace period: sends still running are cut.
    stop_sinks: CancellationToken,
}

/// The services that could be prepared, each with its branch probes, and the ones that could
/// not, each with its problems.
struct Prepared<'a> {
    running: Vec<(&'a ServiceConfig, Vec<BranchProbe>)>,
    resolver: Option<hickory_resolver::TokioResolver>,
    unavailable: Vec<(&'a ServiceConfig, PrepareError)>,
}

/// Prepare every service on its own: one that cannot be prepared does not stop the others.
/// The resolver is built once; without it no service runs.
fn prepare_all(cfg: &Config) -> Prepared<'_> {
    let mut p = Prepared {
        running: Vec::new(),
        resolver: None,
        unavailable: Vec::new(),
    };
    let resolver = match probe::resolver(cfg) {
        Ok(r) => r,
        Err(e) => {
            p.unavailable = cfg.services.iter().map(|s| (s, e.clone())).collect();
            return p;
        }
    };
    for svc in &cfg.services {
        match probe::branches(cfg, svc) {
            Ok(probes) => p.running.push((svc, probes)),
            Err(e) => p.unavailable.push((svc, e)),
        }
    }
    if !p.running.is_empty() {
        p.resolver = Some(resolver);
    }
    p
}

/// Run until `stop` resolves (a signal name) or the duration passes.
///
/// # Errors
/// [`RunError`] when start-up fails (nothing is published then): no service could be prepared
/// (secrets, CA bundle or resolver unavailable), a state store unreadable or corrupt, the
/// evidence file not openable.
pub async fn run<S>(cfg: Config, opts: RunOptions, stop: S) -> Result<RunSummary, RunError>
where
    S: Future<Output = &'static str>,
{
    let clock = Clock::start();
    let prepared = prepare_all(&cfg);
    let Some(resolver) = prepared.resolver.clone() else {
        let mut problems = Vec::new();
        for (_, e) in prepared.unavailable {
            for p in e.problems {
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
        }
        return Err(RunError::Prepare(PrepareError { problems }));
    };
    let mut stores = Vec::new();
    let mut docs = Vec::new();
    for (svc, _) in &prepared.running {
        let store = open_store(&cfg, &svc.service.name).await;
        docs.push(store.load().await?);
        stores.push(store);
    }
    let label = match &cfg.services[..] {
        [one] => one.service.name.clone(),
        _ => "*".to_string(),
    };
    let evidence = EvidenceWriter::open(
        &cfg.evidence_path,
        &label,
        &cfg.prober_id,
        cfg.evidence_max_bytes,
        crate::sink::evidence::queue_lines(cfg.services.len()),
    )
    .map_err(|source| RunError::Evidence {
        path: cfg.evidence_path.display().to_string(),
        source,
    })?;
    let namespaces: BTreeSet<String> = cfg.services.iter().map(|s| s.namespace.clone()).collect();
    let (queues, reports, sink_tasks, stop_sinks) = spawn_sinks(&cfg, &opts, &namespaces).await;
    let outputs = Outputs {
        stores,
        evidence,
        sinks: queues,
    };
    let mut shell = start(&cfg, &opts, clock, &prepared, outputs, &docs);

    let stop_loops = CancellationToken::new();
    let (att_tx, events) = mpsc::channel::<(usize, BranchEvent)>(256);
    let mut loops = Vec::new();
    let mut branches = 0;
    for (i, (svc, probes)) in prepared.running.into_iter().enumerate() {
        let schedule = Schedule {
            interval: svc.probe.interval,
            jitter: svc.probe.jitter,
            grace: opts.grace,
        };
        // The service's loops report on a channel of its own; a task tags their events.
        let (tx, mut rx) = mpsc::channel::<BranchEvent>(64);
        let out = att_tx.clone();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if out.send((i, ev)).await.is_err() {
                    break;
                }
            }
        });
        branches += probes.len();
        for p in probes {
            let (tx, stop) = (tx.clone(), stop_loops.clone());
            loops.push(tokio::spawn(branch_loop(
                p,
                resolver.clone(),
                clock,
                schedule,
                tx,
                stop,
            )));
        }
    }
    drop(att_tx);
    let state = match &shell.stores[..] {
        [one] => one.location(),
        many => format!("{} control documents", many.len()),
    };
    tracing::info!(
        service = %label,
        services = cfg.services.len(),
        unavailable = prepared.unavailable.len(),
        prober = %cfg.prober_id,
        instance = %shell.instances[0].instance,
        branches,
        publish_interval = %crate::clock::fmt_duration(cfg.publish.interval),
        sinks = ?cfg.publish.sinks,
        state = %state,
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
    namespaces: &BTreeSet<String>,
) -> (
    Vec<(String, SinkQueue)>,
    mpsc::UnboundedReceiver<SinkReport>,
    TaskTracker,
    CancellationToken,
) {
    let (report_tx, reports) = mpsc::unbounded_channel();
    let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
    let mut queues = Vec::new();
    for ns in namespaces {
        for kind in &cfg.publish.sinks {
            let sink: Box<dyn Sink> = match kind {
                SinkKind::Emf => Box::new(match &opts.emf_out {
                    Some(buf) => EmfSink::with_writer(ns, Box::new(buf.clone())),
                    None => EmfSink::new(ns),
                }),
                SinkKind::CloudWatch => Box::new(
                    CloudWatchSink::new(&cfg.publish.cloudwatch, ns, cfg.publish.interval).await,
                ),
            };
            let q = SinkQueue::spawn(sink, report_tx.clone(), &tracker, cancel.clone());
            queues.push((ns.clone(), q));
        }
    }
    tracker.close();
    (queues, reports, tracker, cancel)
}

/// Build the fold from the stored documents, write the start records (one per running service)
/// and report each service that could not be prepared.
fn start(
    cfg: &Config,
    opts: &RunOptions,
    clock: Clock,
    prepared: &Prepared<'_>,
    Outputs {
        stores,
        evidence,
        sinks,
    }: Outputs,
    docs: &[ControlDoc],
) -> Shell {
    let now = clock.now_ms();
    let names: Vec<Vec<String>> = prepared
        .running
        .iter()
        .map(|(svc, _)| svc.branches.iter().map(|b| b.name.clone()).collect())
        .collect();
    let locations: Vec<String> = stores.iter().map(Store::location).collect();
    let setups: Vec<ServiceSetup<'_>> = prepared
        .running
        .iter()
        .enumerate()
        .map(|(i, (svc, _))| ServiceSetup {
            service: &svc.service.name,
            namespace: &svc.namespace,
            policy: &svc.policy,
            branches: &names[i],
            store_location: &locations[i],
            doc: &docs[i],
        })
        .collect();
    let unavailable: Vec<(String, String)> = prepared
        .unavailable
        .iter()
        .map(|(svc, _)| (svc.service.name.clone(), svc.namespace.clone()))
        .collect();
    let mut sink_names: Vec<&'static str> = Vec::new();
    for (_, q) in &sinks {
        if !sink_names.contains(&q.name()) {
            sink_names.push(q.name());
        }
    }
    let setup = Setup {
        prober: &cfg.prober_id,
        services: &setups,
        unavailable: &unavailable,
        sinks: &sink_names,
    };
    let (fold, effects) = Fold::start(setup, now);
    let instance = format!("{:016x}", rand::random::<u64>());
    let mut shell = Shell {
        fold,
        evidence,
        sinks,
        clock,
        instances: stores
            .iter()
            .map(|_| InstanceWatch::new(instance.clone()))
            .collect(),
        stores,
        prober: cfg.prober_id.clone(),
        publish_window: cfg.publish.interval,
        sync_bound: cfg.state.poll_interval.max(Duration::from_secs(5)),
    };
    for (i, (svc, _)) in prepared.running.iter().enumerate() {
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
            state_store: locations[i].clone(),
            restored: shell.fold.restored(i).to_vec(),
        });
        shell.evidence.record_for(now, &svc.service.name, &record);
    }
    for (svc, e) in &prepared.unavailable {
        let problems: Vec<String> = e.problems.iter().map(ToString::to_string).collect();
        tracing::error!(
            service = %svc.service.name,
            problems = %problems.join("; "),
            "cannot prepare this service: it is not probed (ServiceUnavailable = 1); the other services run"
        );
        let r = Record::ServiceUnavailable(ServiceUnavailable { problems });
        shell.evidence.record_for(now, &svc.service.name, &r);
    }
    shell.execute(effects);
    if let Ok(entries) = std::fs::read_dir(&cfg.state_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("state-") && name.ends_with(".json") {
                tracing::warn!(file = %e.path().display(), "ignoring a state file of an earlier format; readiness continues from the control documents");
            }
        }
    }
    shell
}

/// Where a run's results go: one store per running service, the evidence, the sink queues.
struct Outputs {
    stores: Vec<Store>,
    evidence: EvidenceWriter,
    sinks: Vec<(String, SinkQueue)>,
}

/// The store syncs in flight, at most one per service.
#[derive(Default)]
struct Syncs {
    set: JoinSet<SyncOutcome>,
    /// The service of each task.
    of: HashMap<tokio::task::Id, usize>,
}

impl Syncs {
    fn busy(&self, service: usize) -> bool {
        self.of.values().any(|s| *s == service)
    }

    fn spawn(&mut self, shell: &Shell, service: usize) {
        let h = self.set.spawn(shell.sync_task(service));
        self.of.insert(h.id(), service);
    }

    /// The next finished sync and its service; `None` when none is in flight.
    async fn next(&mut self) -> Option<(usize, Result<SyncOutcome, tokio::task::JoinError>)> {
        match self.set.join_next_with_id().await? {
            Ok((id, o)) => Some((self.of.remove(&id).unwrap_or(o.service), Ok(o))),
            Err(e) => Some((self.of.remove(&e.id()).unwrap_or_default(), Err(e))),
        }
    }
}

/// The select loop: attempts, publish ticks, store syncs and sink reports, until a stop.
/// Returns why it stopped and the sync still in flight, if any.
async fn serve<S>(
    shell: &mut Shell,
    w: &mut Wiring,
    cfg: &Config,
    duration: Option<Duration>,
    stop: S,
) -> (String, Syncs)
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
    let mut syncs = Syncs::default();
    let reason = loop {
        tokio::select! {
            ev = w.events.recv() => match ev {
                Some(ev) => shell.on_branch_event(ev),
                None => break "branch loops ended".to_string(),
            },
            _ = ticker.tick() => shell.tick(false),
            _ = poll.tick() => {
                for service in 0..shell.stores.len() {
                    if !syncs.busy(service) {
                        syncs.spawn(shell, service);
                    }
                }
            }
            Some((service, joined)) = syncs.next(), if !syncs.set.is_empty() => {
                shell.finish_sync(service, joined);
            }
            Some(rep) = w.reports.recv() => shell.feed(Input::SinkReport(rep)),
            _ = &mut until => break "duration".to_string(),
            sig = &mut stop => break sig.to_string(),
        }
    };
    (reason, syncs)
}

/// Stop the loops and let in-flight attempts finish within the grace period; publish the final
/// datum set; save (the final evaluation included); close the sink queues and wait for the
/// sinks within what is left of the grace period. Whatever a sink did not report by then is
/// recorded as dropped.
async fn shutdown(
    mut shell: Shell,
    mut w: Wiring,
    mut syncing: Syncs,
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
    let mut unsaved: BTreeSet<usize> = (0..shell.stores.len()).collect();
    let final_sync = async {
        while let Some((service, j)) = syncing.next().await {
            shell.finish_sync(service, j);
        }
        for service in 0..shell.stores.len() {
            shell.stores[service].save_next();
            syncing.spawn(&shell, service);
        }
        while let Some((service, j)) = syncing.next().await {
            shell.finish_sync(service, j);
            unsaved.remove(&service);
        }
    };
    if tokio::time::timeout_at(final_deadline, final_sync)
        .await
        .is_err()
    {
        for service in unsaved {
            shell.feed(Input::SyncFailed {
                service,
                error: "the final sync did not finish within the grace period".into(),
                started: None,
            });
        }
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
