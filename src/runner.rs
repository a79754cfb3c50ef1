//! The `run` I/O shell: start-up, the select loop and shutdown. Branch loops feed attempts in;
//! every decision is the fold's ([`crate::fold`]); this module executes its effects (evidence,
//! batches for the sinks, logs) and moves the control document to and from the store.
//!
//! Sending never blocks probing: each sink has its own task behind a bounded queue
//! ([`SinkQueue`]), and a batch that does not fit is dropped, counted and recorded. A failed send
//! is retried with backoff until the batch's window (one publish interval) closes, then dropped,
//! counted and recorded.

mod reload;
mod shell;

use crate::clock::{Clock, Millis};
use crate::config::{Config, ConfigError, ServiceConfig, SinkKind, StoreKind, escape_controls};
use crate::control::ControlDoc;
use crate::fold::{Fold, Input, ServiceId, ServiceSetup, Setup};
use crate::probe::stable_name::BranchEndpoint;
use crate::probe::{self, BranchProbe, InputsDigest, PrepareError};
use crate::record::{Record, Restored, ServiceUnavailable, Start, StartBranch};
use crate::scheduler::{BranchEvent, Schedule, StableNameTarget, branch_loop, stable_name_loop};
use crate::sink::cloudwatch::{CloudWatchClient, CloudWatchSink};
use crate::sink::emf::{EmfBuffer, EmfSink};
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{Sink, SinkQueue, SinkReport};
use crate::state::{FileStore, S3Store, StateError, Store};
use shell::{Shell, SyncOutcome};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
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

/// A branch event's origin: the feed it came on ([`Loops`]) and that feed's service.
struct Tag {
    feed: u64,
    service: ServiceId,
    /// The service's name: the evidence names a removed service's late events by it.
    name: Arc<str>,
}

/// The channels and tasks between the shell and the branch loops and sinks.
struct Wiring {
    /// Branch events tagged with their origin.
    events: mpsc::Receiver<(Tag, BranchEvent)>,
    reports: mpsc::UnboundedReceiver<SinkReport>,
    sinks: Sinks,
    fleet: Fleet,
}

/// What runs: the config in force, each running service's branch loops, and how to start more.
struct Fleet {
    cfg: Config,
    live: BTreeMap<ServiceId, Live>,
    /// The id the next added service gets.
    next_id: ServiceId,
    loops: Loops,
}

/// A running service: its settings, the digest of the inputs its probes were prepared from,
/// and a loop per branch.
struct Live {
    cfg: ServiceConfig,
    /// A reload restarts the service's loops when its files or secrets now read otherwise.
    inputs: InputsDigest,
    /// Per branch name: the feed its events come on and its task.
    loops: BTreeMap<String, (u64, JoinHandle<u64>)>,
    /// The stable-name loop's feed and task, while `[stable_name_probe]` is enabled.
    stable: Option<(u64, JoinHandle<u64>)>,
}

/// Starts branch loops. Each start (a service's branches, or those a reload restarts) gets a
/// feed of its own, whose events a task tags with the feed's id and service; an event is folded
/// only when its feed is still its branch's, so an attempt of a loop a reload replaced or
/// stopped never reaches the new state (it is recorded as such, [`Route::Stopped`]). Nothing
/// is kept per feed: the tag carries what routing needs.
struct Loops {
    /// `None` once shutdown began: the event channel closes when the last loop ends.
    tx: Option<mpsc::Sender<(Tag, BranchEvent)>>,
    resolver: hickory_resolver::TokioResolver,
    clock: Clock,
    grace: Duration,
    stop: CancellationToken,
    next_feed: u64,
}

impl Loops {
    /// Start a loop per probe of service `id` (first attempts jittered, as at start-up), each
    /// paced by the `watch` whose sender comes back beside it (for [`Shell::pace`]).
    fn spawn(&mut self, id: ServiceId, svc: &ServiceConfig, probes: Vec<BranchProbe>) -> Spawned {
        let Some(out) = self.tx.clone() else {
            return (Vec::new(), Vec::new());
        };
        if probes.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let feed = self.next_feed;
        self.next_feed += 1;
        let name: Arc<str> = svc.service.name.as_str().into();
        let schedule = Schedule {
            interval: svc.probe.interval,
            suspect_interval: svc.probe.suspect_interval,
            jitter: svc.probe.jitter,
            grace: self.grace,
        };
        let (tx, mut rx) = mpsc::channel::<BranchEvent>(64);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let tag = Tag {
                    feed,
                    service: id,
                    name: name.clone(),
                };
                if out.send((tag, ev)).await.is_err() {
                    break;
                }
            }
        });
        probes
            .into_iter()
            .map(|p| {
                let name = p.branch.name.clone();
                let (pace, paced) = watch::channel(false);
                let h = tokio::spawn(branch_loop(
                    p,
                    self.resolver.clone(),
                    self.clock,
                    schedule,
                    (tx.clone(), paced),
                    self.stop.clone(),
                ));
                ((name.clone(), (feed, h)), (name, pace))
            })
            .unzip()
    }
}

impl Loops {
    /// Start service `id`'s stable-name loop when `cfg` enables `[stable_name_probe]` (with
    /// `end_to_end`, its attempts use `probes`, the service's branch probes); `None` otherwise
    /// or once shutdown began. Its rounds are routed to the service while the loop is the
    /// service's, and dropped once a reload stopped or replaced it.
    fn spawn_stable_name(
        &mut self,
        id: ServiceId,
        svc: &ServiceConfig,
        cfg: &Config,
        probes: &[BranchProbe],
    ) -> Option<(u64, JoinHandle<u64>)> {
        let out = self.tx.clone()?;
        let settings = &cfg.stable_name_probe;
        if !settings.enabled {
            return None;
        }
        let name: Arc<str> = svc.service.name.as_str().into();
        let target = StableNameTarget {
            service: svc.service.name.clone(),
            stable_name: svc.service.stable_name.clone(),
            branches: svc
                .branches
                .iter()
                .map(|b| BranchEndpoint {
                    name: b.name.clone(),
                    role: b.role,
                    endpoint: b.endpoint.clone(),
                })
                .collect(),
            family: cfg.dns.address_family,
            end_to_end: if settings.end_to_end {
                probes
                    .iter()
                    .map(BranchProbe::through_stable_name)
                    .collect()
            } else {
                Vec::new()
            },
        };
        let schedule = Schedule {
            interval: settings.interval,
            suspect_interval: settings.interval,
            jitter: settings.interval / 10,
            grace: self.grace,
        };
        let (tx, mut rx) = mpsc::channel::<BranchEvent>(8);
        let feed = self.next_feed;
        self.next_feed += 1;
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let tag = Tag {
                    feed,
                    service: id,
                    name: name.clone(),
                };
                if out.send((tag, ev)).await.is_err() {
                    break;
                }
            }
        });
        let (resolver, stop) = (self.resolver.clone(), self.stop.clone());
        let task = stable_name_loop(target, resolver, self.clock, schedule, tx, stop);
        Some((feed, tokio::spawn(task)))
    }
}

/// What [`Loops::spawn`] started: each branch's feed and task, and each branch's pace sender.
type Spawned = (
    Vec<(String, (u64, JoinHandle<u64>))>,
    Vec<(String, watch::Sender<bool>)>,
);

/// Where a branch event goes.
enum Route {
    /// Its loop still runs: into the fold for this service.
    Live(ServiceId),
    /// A reload stopped its loop (its service removed, its branch restarted or removed): into
    /// the evidence for the named service, never into a window.
    Stopped(Arc<str>),
}

impl Fleet {
    /// Where an event goes: live when its feed is still its branch's.
    fn route(&self, tag: Tag, ev: &BranchEvent) -> Route {
        let branch = match ev {
            BranchEvent::Attempt(a) => &a.branch,
            BranchEvent::Abandoned { branch, .. } => branch,
            BranchEvent::StableName(..) => {
                let live = self.live.get(&tag.service).and_then(|l| l.stable.as_ref());
                return match live {
                    Some((feed, _)) if *feed == tag.feed => Route::Live(tag.service),
                    _ => Route::Stopped(tag.name),
                };
            }
        };
        let current = self
            .live
            .get(&tag.service)
            .and_then(|l| l.loops.get(branch));
        match current {
            Some((feed, _)) if *feed == tag.feed => Route::Live(tag.service),
            _ => Route::Stopped(tag.name),
        }
    }

    /// Stop service `id`'s loops: an attempt in flight is cut off and reported abandoned.
    fn stop_service(&mut self, id: ServiceId) -> Option<Live> {
        let live = self.live.remove(&id)?;
        for (_, h) in live.loops.values().chain(&live.stable) {
            h.abort();
        }
        Some(live)
    }

    fn handles(&self) -> impl Iterator<Item = &JoinHandle<u64>> {
        self.live
            .values()
            .flat_map(|l| l.loops.values().chain(&l.stable).map(|(_, h)| h))
    }
}

/// A service's branch probes and the digest of the inputs they were prepared from.
type Probes = (Vec<BranchProbe>, InputsDigest);

/// The services that could be prepared, each with its branch probes, and the ones that could
/// not, each with its problems.
struct Prepared<'a> {
    running: Vec<(&'a ServiceConfig, Probes)>,
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
        match probe::branches_and_digest(cfg, svc) {
            Ok(probes) => p.running.push((svc, probes)),
            Err(e) => p.unavailable.push((svc, e)),
        }
    }
    if !p.running.is_empty() {
        p.resolver = Some(resolver);
    }
    p
}

/// The services whose control document could be loaded, with it and their store, and the
/// ones whose document could not (unreadable or corrupt), with the error: those are not
/// probed, and their document is never written.
struct Loaded<'a> {
    running: Vec<(&'a ServiceConfig, Probes, Store, ControlDoc)>,
    unavailable: Vec<(&'a ServiceConfig, Vec<String>)>,
    /// The first store error, for the exit code when no service can start.
    first_error: Option<StateError>,
}

/// Load the control document of every prepared service, each on its own.
async fn load_all<'a>(cfg: &Config, prepared: Prepared<'a>) -> Loaded<'a> {
    let mut l = Loaded {
        running: Vec::new(),
        unavailable: prepared
            .unavailable
            .into_iter()
            .map(|(svc, e)| (svc, problems_of(&e)))
            .collect(),
        first_error: None,
    };
    for (svc, probes) in prepared.running {
        let store = open_store(cfg, &svc.service.name).await;
        match store.load().await {
            Ok(doc) => l.running.push((svc, probes, store, doc)),
            Err(e) => {
                l.unavailable.push((svc, vec![e.to_string()]));
                l.first_error.get_or_insert(e);
            }
        }
    }
    l
}

fn problems_of(e: &PrepareError) -> Vec<String> {
    e.problems.iter().map(ToString::to_string).collect()
}

/// Run until `stop` resolves (a signal name) or the duration passes.
///
/// # Errors
/// [`RunError`] when start-up fails (nothing is published then): no service could be prepared
/// (secrets, CA bundle or resolver unavailable) or none has a readable control document, the
/// evidence file not openable.
pub async fn run<S>(cfg: Config, opts: RunOptions, stop: S) -> Result<RunSummary, RunError>
where
    S: Future<Output = &'static str>,
{
    run_with_reloads(cfg, opts, stop, None).await
}

/// [`run`], taking each config read again (on SIGHUP) from `reloads`: a valid one is applied
/// without a restart when it changes only services, else refused with the old one kept
/// (`docs/operations.md`, "Reload").
///
/// # Errors
/// As [`run`].
pub async fn run_with_reloads<S>(
    cfg: Config,
    opts: RunOptions,
    stop: S,
    reloads: Option<mpsc::Receiver<Result<Config, ConfigError>>>,
) -> Result<RunSummary, RunError>
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
    let mut loaded = load_all(&cfg, prepared).await;
    if loaded.running.is_empty() {
        // Every prepared service's document failed: the store is the problem.
        if let Some(e) = loaded.first_error.take() {
            return Err(RunError::State(e));
        }
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
    let (mut sinks, reports) = Sinks::new(&cfg, &opts).await;
    let mut queues = Vec::new();
    for s in &cfg.services {
        queues.extend(sinks.add(&s.namespace));
    }
    let (shell, fleet, events) = start(&cfg, &opts, clock, loaded, (evidence, queues), resolver);
    let mut shell = shell;
    log_started(&shell, &fleet, &label);
    let mut wiring = Wiring {
        events,
        reports,
        sinks,
        fleet,
    };
    let (stop_reason, syncing) = serve(&mut shell, &mut wiring, &opts, stop, reloads).await;
    Ok(shutdown(shell, wiring, syncing, stop_reason, opts.grace).await)
}

fn log_started(shell: &Shell, fleet: &Fleet, label: &str) {
    let cfg = &fleet.cfg;
    let state = match shell.stores.values().collect::<Vec<_>>()[..] {
        [one] => one.location(),
        ref many => format!("{} control documents", many.len()),
    };
    tracing::info!(
        service = %label,
        services = cfg.services.len(),
        unavailable = cfg.services.len() - fleet.live.len(),
        prober = %cfg.prober_id,
        instance = %shell.instance,
        branches = fleet.live.values().map(|l| l.loops.len()).sum::<usize>(),
        publish_interval = %crate::clock::fmt_duration(cfg.publish.interval),
        sinks = ?cfg.publish.sinks,
        state = %state,
        evidence = %cfg.evidence_path.display(),
        "readyprobe started"
    );
}

/// The sink queues of every namespace, and what starting one more needs: the sink tasks
/// report on one channel and stop together. The CloudWatch client is built once and shared.
struct Sinks {
    kinds: Vec<SinkKind>,
    cloudwatch: Option<CloudWatchClient>,
    emf_out: Option<EmfBuffer>,
    report_tx: mpsc::UnboundedSender<SinkReport>,
    tasks: TaskTracker,
    /// Cancelled at the end of the grace period: sends still running are cut.
    stop: CancellationToken,
    namespaces: BTreeSet<String>,
}

impl Sinks {
    async fn new(cfg: &Config, opts: &RunOptions) -> (Sinks, mpsc::UnboundedReceiver<SinkReport>) {
        let (report_tx, reports) = mpsc::unbounded_channel();
        let cloudwatch = if cfg.publish.sinks.contains(&SinkKind::CloudWatch) {
            Some(CloudWatchClient::new(&cfg.publish.cloudwatch, cfg.publish.interval).await)
        } else {
            None
        };
        let tasks = TaskTracker::new();
        // Closed from the start: `wait` then ends once every sink task has (tasks started
        // later by a reload included).
        tasks.close();
        let sinks = Sinks {
            kinds: cfg.publish.sinks.clone(),
            cloudwatch,
            emf_out: opts.emf_out.clone(),
            report_tx,
            tasks,
            stop: CancellationToken::new(),
            namespaces: BTreeSet::new(),
        };
        (sinks, reports)
    }

    /// Start a task per configured sink for `ns`, each behind a bounded queue; nothing when
    /// `ns` has its sinks already.
    fn add(&mut self, ns: &str) -> Vec<(String, SinkQueue)> {
        if !self.namespaces.insert(ns.to_string()) {
            return Vec::new();
        }
        let mut queues = Vec::new();
        for kind in &self.kinds {
            let sink: Box<dyn Sink> = match (kind, &self.cloudwatch) {
                (SinkKind::Emf, _) => Box::new(match &self.emf_out {
                    Some(buf) => EmfSink::with_writer(ns, Box::new(buf.clone())),
                    None => EmfSink::new(ns),
                }),
                (SinkKind::CloudWatch, Some(client)) => {
                    Box::new(CloudWatchSink::with_client(client, ns))
                }
                (SinkKind::CloudWatch, None) => continue,
            };
            let q = SinkQueue::spawn(sink, self.report_tx.clone(), &self.tasks, self.stop.clone());
            queues.push((ns.to_string(), q));
        }
        queues
    }

    /// Stop the sinks of every namespace not in `used`: their queues in `queues` are dropped,
    /// so each task sends what it holds, reports it, and ends. Returns the namespaces stopped.
    fn retain(
        &mut self,
        queues: &mut Vec<(String, SinkQueue)>,
        used: &BTreeSet<String>,
    ) -> Vec<String> {
        let unused: Vec<String> = self.namespaces.difference(used).cloned().collect();
        if unused.is_empty() {
            return unused;
        }
        for ns in &unused {
            self.namespaces.remove(ns);
            tracing::info!(namespace = %ns, "no service publishes to this namespace any more: its sinks send what they hold and stop");
        }
        queues.retain(|(ns, _)| used.contains(ns));
        unused
    }
}

/// Build the fold from the stored documents, write the start records (one per running service),
/// report each service that could not start, and start the branch loops.
fn start(
    cfg: &Config,
    opts: &RunOptions,
    clock: Clock,
    loaded: Loaded<'_>,
    (evidence, sinks): (EvidenceWriter, Vec<(String, SinkQueue)>),
    resolver: hickory_resolver::TokioResolver,
) -> (Shell, Fleet, mpsc::Receiver<(Tag, BranchEvent)>) {
    let now = clock.now_ms();
    let names: Vec<Vec<String>> = loaded
        .running
        .iter()
        .map(|(svc, ..)| svc.branches.iter().map(|b| b.name.clone()).collect())
        .collect();
    let locations: Vec<String> = loaded.running.iter().map(|r| r.2.location()).collect();
    let setups: Vec<ServiceSetup<'_>> = loaded
        .running
        .iter()
        .enumerate()
        .map(|(i, (svc, _, _, doc))| ServiceSetup {
            service: &svc.service.name,
            namespace: &svc.namespace,
            policy: &svc.policy,
            branches: &names[i],
            store_location: &locations[i],
            doc,
        })
        .collect();
    let unavailable: Vec<(String, String)> = loaded
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
    let mut shell = Shell {
        fold,
        evidence,
        sinks,
        clock,
        stores: BTreeMap::new(),
        instances: BTreeMap::new(),
        instance: format!("{:016x}", rand::random::<u64>()),
        paces: BTreeMap::new(),
        prober: cfg.prober_id.clone(),
        publish_window: cfg.publish.interval,
        sync_bound: cfg.state.poll_interval.max(Duration::from_secs(5)),
    };
    let (tx, events) = mpsc::channel::<(Tag, BranchEvent)>(256);
    let mut fleet = Fleet {
        cfg: cfg.clone(),
        live: BTreeMap::new(),
        next_id: loaded.running.len(),
        loops: Loops {
            tx: Some(tx),
            resolver,
            clock,
            grace: opts.grace,
            stop: CancellationToken::new(),
            next_feed: 0,
        },
    };
    let duration_ms = opts.duration.map(|d| d.as_millis() as u64);
    for (id, (svc, probes, store, _)) in loaded.running.into_iter().enumerate() {
        launch(
            &mut shell,
            &mut fleet,
            cfg,
            id,
            (svc, probes, store),
            duration_ms,
        );
    }
    for (svc, problems) in loaded.unavailable {
        report_unavailable(&mut shell, now, &svc.service.name, problems);
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
    (shell, fleet, events)
}

/// Launch service `id`, which the fold holds already (from its control document): write its
/// `start` record, keep its store, start its branch loops (paced from the fold) and its
/// stable-name loop. The one way a service starts, at start-up and at a reload.
fn launch(
    shell: &mut Shell,
    fleet: &mut Fleet,
    cfg: &Config,
    id: ServiceId,
    (svc, (probes, inputs), store): (&ServiceConfig, Probes, Store),
    duration_ms: Option<u64>,
) {
    let now = shell.clock.now_ms();
    let restored = shell.fold.restored(id).to_vec();
    let record = start_record(cfg, svc, store.location(), restored, duration_ms);
    shell.evidence.record_for(now, &svc.service.name, &record);
    shell.add_store(id, store);
    let stable = fleet.loops.spawn_stable_name(id, svc, cfg, &probes);
    let (loops, paces) = fleet.loops.spawn(id, svc, probes);
    shell.pace(id, &svc.probe, paces);
    let live = Live {
        cfg: svc.clone(),
        inputs,
        loops: loops.into_iter().collect(),
        stable,
    };
    fleet.live.insert(id, live);
}

/// The `start` record of a service.
fn start_record(
    cfg: &Config,
    svc: &ServiceConfig,
    state_store: String,
    restored: Vec<Restored>,
    duration_ms: Option<u64>,
) -> Record {
    Record::Start(Start {
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
        duration_ms,
        state_store,
        restored,
        probe_interval_ms: Some(ms(svc.probe.interval)),
        probe_timeout_ms: Some(ms(svc.probe.timeout)),
        suspect_interval_ms: (svc.probe.suspect_interval < svc.probe.interval)
            .then(|| ms(svc.probe.suspect_interval)),
        publish_interval_ms: Some(ms(cfg.publish.interval)),
        policy: policy_lines(&svc.policy),
        approval_required: Some(svc.policy.approval_required),
        stable_name_interval_ms: cfg
            .stable_name_probe
            .enabled
            .then(|| ms(cfg.stable_name_probe.interval)),
        stable_name_end_to_end: cfg
            .stable_name_probe
            .enabled
            .then_some(cfg.stable_name_probe.end_to_end),
        namespace: Some(svc.namespace.clone()),
        initial: Some(svc.policy.initial),
    })
}

/// A duration in whole ms (saturating).
fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The readiness policy in readable lines, as `check` words it: what a drill report shows as
/// the configuration in force.
fn policy_lines(p: &crate::readiness::Policy) -> Vec<String> {
    let d = crate::clock::fmt_duration;
    let (u, r) = (&p.declare_unready, &p.declare_ready);
    let definitive = match &p.definitive {
        Some(x) if !x.classes.is_empty() => format!(
            "definitive rule: unready after {} of definitive failures ({} classes)",
            d(x.for_),
            x.classes.len()
        ),
        _ => "definitive rule: off".into(),
    };
    let damping = match &p.damping {
        Some(x) => format!(
            "flap damping: after more than {} flaps in {}, the ready for doubles per flap up to {}",
            x.flaps,
            d(x.period),
            d(x.max_for)
        ),
        None => "flap damping: off".into(),
    };
    vec![
        format!(
            "initial {}, min_attempts {}",
            p.initial.as_str(),
            p.min_attempts
        ),
        format!(
            "declare unready: success rate < {}% over {} held for {}",
            u.threshold_percent,
            d(u.window),
            d(u.for_)
        ),
        format!(
            "declare ready: success rate ≥ {}% over {} held for {}{}",
            r.threshold_percent,
            d(r.window),
            d(r.for_),
            if p.approval_required {
                ", then operator approval"
            } else {
                ""
            }
        ),
        definitive,
        damping,
    ]
}

/// Say at ERROR and in the evidence that a service is not probed.
fn report_unavailable(shell: &mut Shell, now: Millis, service: &str, problems: Vec<String>) {
    // A problem names config paths: control characters in them never reach the terminal raw.
    tracing::error!(
        service = %escape_controls(service),
        problems = %escape_controls(&problems.join("; ")),
        "this service cannot start: it is not probed (ServiceUnavailable = 1); the other services run"
    );
    let r = Record::ServiceUnavailable(ServiceUnavailable { problems });
    shell.evidence.record_for(now, service, &r);
}

/// At most this many store syncs run at once. A poll queues every service and the queue
/// drains as syncs finish, so thousands of services never hold thousands of sync tasks (each
/// with a copy of its service's readiness) at once; the file store runs
/// [`FILE_OPS`](crate::state::FILE_OPS) operations at a time anyway.
const SYNCS_IN_FLIGHT: usize = 4 * crate::state::FILE_OPS;

/// A sync's task.
type SyncTask = std::pin::Pin<Box<dyn Future<Output = SyncOutcome> + Send>>;

/// A final save waiting for a slot.
struct FinalSave {
    service: ServiceId,
    /// A removed service's, built as it was removed (the fold forgets it then); `None` for a
    /// running one's at shutdown, built as it starts (so at most [`SYNCS_IN_FLIGHT`] copies of
    /// the readiness at once).
    task: Option<SyncTask>,
}

/// The store syncs in flight, at most [`SYNCS_IN_FLIGHT`], and the ones queued behind them:
/// final saves first, each once no sync of its service is in flight.
#[derive(Default)]
struct Syncs {
    set: JoinSet<SyncOutcome>,
    /// The service of each task, and whether it is a final save.
    of: HashMap<tokio::task::Id, (usize, bool)>,
    /// Syncs in flight per service (a poll asks for every service: no scan of `of`).
    busy: HashMap<usize, u32>,
    /// Services waiting for a free slot, in the order they were queued, each once.
    queued: std::collections::VecDeque<usize>,
    waiting: std::collections::HashSet<usize>,
    /// Final saves waiting, in the order they were queued.
    finals: std::collections::VecDeque<FinalSave>,
}

impl Syncs {
    fn busy(&self, service: usize) -> bool {
        self.busy.contains_key(&service)
    }

    /// Queue a sync of `service` unless one is in flight or queued already.
    fn queue(&mut self, service: usize) {
        if !self.busy(service) && self.waiting.insert(service) {
            self.queued.push_back(service);
        }
    }

    /// Queue the final save of a service a reload removes: it starts once no sync of the
    /// service is in flight (so it writes last), and only once.
    fn queue_removed(&mut self, shell: &Shell, service: ServiceId) {
        let store = shell.stores.get(&service).cloned();
        let sync = shell.sync_task(service);
        let task = async move {
            // Set as it starts: a sync in flight before it must not take the flag.
            if let Some(store) = store {
                store.save_next();
            }
            sync.await
        };
        self.finals.push_back(FinalSave {
            service,
            task: Some(Box::pin(task)),
        });
    }

    /// At shutdown: drop the queued syncs and queue the final save of every running service.
    fn queue_shutdown(&mut self, shell: &Shell) {
        self.queued.clear();
        self.waiting.clear();
        for &service in shell.stores.keys() {
            self.finals.push_back(FinalSave {
                service,
                task: None,
            });
        }
    }

    /// The first final save whose service has no sync in flight.
    fn next_final(&mut self) -> Option<FinalSave> {
        let i = self.finals.iter().position(|f| !self.busy(f.service))?;
        self.finals.remove(i)
    }

    /// Start final saves, then queued syncs, while fewer than [`SYNCS_IN_FLIGHT`] run (a
    /// service a reload removed meanwhile is skipped).
    fn fill(&mut self, shell: &Shell) {
        while self.set.len() < SYNCS_IN_FLIGHT {
            if let Some(f) = self.next_final() {
                let task = f.task.unwrap_or_else(|| {
                    if let Some(store) = shell.stores.get(&f.service) {
                        store.save_next();
                    }
                    Box::pin(shell.sync_task(f.service))
                });
                self.start(f.service, true, task);
                continue;
            }
            let Some(service) = self.queued.pop_front() else {
                break;
            };
            self.waiting.remove(&service);
            if shell.stores.contains_key(&service) && !self.busy(service) {
                self.start(service, false, Box::pin(shell.sync_task(service)));
            }
        }
    }

    fn start(&mut self, service: usize, last: bool, task: SyncTask) {
        let h = self.set.spawn(task);
        self.of.insert(h.id(), (service, last));
        *self.busy.entry(service).or_default() += 1;
    }

    /// The next finished sync, its service and whether it was a final save; `None` when none
    /// is in flight.
    async fn next(&mut self) -> Option<(usize, bool, Result<SyncOutcome, tokio::task::JoinError>)> {
        let (id, joined) = match self.set.join_next_with_id().await? {
            Ok((id, o)) => (id, Ok(o)),
            Err(e) => (e.id(), Err(e)),
        };
        let (service, last) = self.of.remove(&id).unwrap_or_else(|| {
            let service = joined.as_ref().map(|o| o.service).unwrap_or_default();
            (service, false)
        });
        if let Some(n) = self.busy.get_mut(&service) {
            *n -= 1;
            if *n == 0 {
                self.busy.remove(&service);
            }
        }
        Some((service, last, joined))
    }
}

/// The select loop: attempts, publish ticks, store syncs and sink reports, until a stop.
/// Returns why it stopped and the sync still in flight, if any.
async fn serve<S>(
    shell: &mut Shell,
    w: &mut Wiring,
    opts: &RunOptions,
    stop: S,
    mut reloads: Option<mpsc::Receiver<Result<Config, ConfigError>>>,
) -> (String, Syncs)
where
    S: Future<Output = &'static str>,
{
    // Settings that need a restart never change while running: these two hold.
    let cfg = w.fleet.cfg.clone();
    let duration = opts.duration;
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
    // A reload in preparation; dropped (its task aborted) when the loop ends.
    let mut pending = reload::Pending::default();
    // One timer, armed at the fold's earliest readiness deadline after every input. A deadline
    // is always after the instant last evaluated, so a wake-up never re-arms the same instant.
    let wake = tokio::time::sleep_until(Instant::now());
    tokio::pin!(wake);
    let mut armed: Option<Millis> = None;
    let reason = loop {
        let next = shell.fold.next_wakeup();
        if next != armed {
            if let Some(at) = next {
                wake.as_mut().reset(shell.clock.instant_of(at));
            }
            armed = next;
        }
        tokio::select! {
            () = &mut wake, if armed.is_some() => {
                if let Some(at) = armed.take() {
                    shell.wake(at);
                }
            }
            ev = w.events.recv() => match ev {
                Some((tag, ev)) => route(shell, &w.fleet, tag, ev),
                None => break "branch loops ended".to_string(),
            },
            _ = ticker.tick() => shell.tick(false),
            _ = poll.tick() => {
                let ids: Vec<ServiceId> = shell.stores.keys().copied().collect();
                for service in ids {
                    syncs.queue(service);
                }
                syncs.fill(shell);
            }
            Some(new) = next_reload(&mut reloads) => {
                reload::request(shell, &w.fleet, &mut pending, new);
            }
            staged = pending.done() => {
                reload::finish(shell, w, &mut syncs, staged);
                if let Some(new) = reload::next_waiting(&mut pending) {
                    reload::request(shell, &w.fleet, &mut pending, new);
                }
            }
            Some((service, _, joined)) = syncs.next(), if !syncs.set.is_empty() => {
                shell.finish_sync(service, joined);
                syncs.fill(shell);
            }
            Some(rep) = w.reports.recv() => shell.feed(Input::SinkReport(rep)),
            _ = &mut until => break "duration".to_string(),
            sig = &mut stop => break sig.to_string(),
        }
    };
    (reason, syncs)
}

/// Hand a branch event to the fold, or to the evidence when a reload stopped its loop.
fn route(shell: &mut Shell, fleet: &Fleet, tag: Tag, ev: BranchEvent) {
    match fleet.route(tag, &ev) {
        Route::Live(id) => shell.on_branch_event((id, ev)),
        Route::Stopped(name) => shell.on_stopped_event(&name, ev),
    }
}

/// The next config read again; never, without a reload channel or once it is closed.
async fn next_reload(
    reloads: &mut Option<mpsc::Receiver<Result<Config, ConfigError>>>,
) -> Option<Result<Config, ConfigError>> {
    let Some(rx) = reloads else {
        return std::future::pending().await;
    };
    match rx.recv().await {
        Some(r) => Some(r),
        None => {
            *reloads = None;
            std::future::pending().await
        }
    }
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
    w.fleet.loops.stop.cancel();
    w.fleet.loops.tx = None;
    let drain = async {
        while let Some((tag, ev)) = w.events.recv().await {
            route(&mut shell, &w.fleet, tag, ev);
        }
    };
    if tokio::time::timeout_at(grace_end + Duration::from_millis(200), drain)
        .await
        .is_err()
    {
        tracing::warn!("branch loops did not stop within the grace period; abandoning them");
        w.fleet.handles().for_each(JoinHandle::abort);
    }
    shell.tick(true);
    // The final save and sends get what is left of the grace period, at least 1 s, and finish
    // 300 ms before `hard_end` so the evidence can still be closed.
    let final_deadline = grace_end
        .max(Instant::now() + Duration::from_millis(1_000))
        .min(hard_end - Duration::from_millis(300));
    final_round(&mut shell, &mut w, &mut syncing, final_deadline).await;
    w.sinks.stop.cancel();
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

/// The final saves and the final publish, side by side until both are done or `deadline`:
/// the sink queues close at once (each sink sends what it holds, the last tick's datums
/// included, reports it and ends), so a hung store never holds the final publish nor its
/// record. Each final save runs after its service's sync in flight, at most
/// [`SYNCS_IN_FLIGHT`] at once, those of services a reload removed that still wait included;
/// a save not done by `deadline` is recorded as failed, and so is what a sink did not report.
async fn final_round(shell: &mut Shell, w: &mut Wiring, syncs: &mut Syncs, deadline: Instant) {
    let mut unsaved: BTreeSet<ServiceId> = shell.stores.keys().copied().collect();
    syncs.queue_shutdown(shell);
    syncs.fill(shell);
    shell.sinks.clear();
    let sinks_done = w.sinks.tasks.wait();
    tokio::pin!(sinks_done);
    let mut sent = false;
    let timed_out = loop {
        if sent && syncs.set.is_empty() {
            break false;
        }
        tokio::select! {
            // Finished work wins over a deadline that has passed meanwhile.
            biased;
            () = &mut sinks_done, if !sent => sent = true,
            Some(rep) = w.reports.recv() => shell.feed(Input::SinkReport(rep)),
            Some((service, last, j)) = syncs.next(), if !syncs.set.is_empty() => {
                shell.finish_sync(service, j);
                if last {
                    unsaved.remove(&service);
                }
                syncs.fill(shell);
            }
            () = tokio::time::sleep_until(deadline) => break true,
        }
    };
    if !timed_out {
        return;
    }
    if !sent {
        tracing::warn!("sinks did not finish within the grace period");
    }
    for service in unsaved {
        shell.feed(Input::SyncFailed {
            service,
            error: "the final sync did not finish within the grace period".into(),
            started: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PublishOutcome;
    use crate::sink::emf::EmfBuffer;
    use crate::sink::{Queued, service_unavailable_datum};

    fn config() -> Config {
        let text = r#"
prober_id = "p1"
[probe]
kind = "tcp"
[service]
name = "alpha"
stable_name = "alpha.example.internal"
[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "alpha-primary.example.internal"
port = 5432
"#;
        crate::config::parse(std::path::Path::new("/etc/readyprobe/one.toml"), text)
            .unwrap_or_else(|e| panic!("{:?}", e.issues))
    }

    /// A final save waits for its service's sync in flight; the others start first, in the
    /// order they were queued, and it starts once that sync is done.
    #[test]
    fn a_final_save_waits_for_its_services_sync_in_flight() {
        let mut syncs = Syncs::default();
        let never = || -> Option<SyncTask> { Some(Box::pin(std::future::pending())) };
        syncs.busy.insert(1, 1);
        for service in [1, 2, 3] {
            let task = never();
            syncs.finals.push_back(FinalSave { service, task });
        }
        let order: Vec<_> = std::iter::from_fn(|| syncs.next_final())
            .map(|f| f.service)
            .collect();
        assert_eq!(order, [2, 3]);
        syncs.busy.clear();
        assert_eq!(syncs.next_final().map(|f| f.service), Some(1));
        assert!(syncs.next_final().is_none());
    }

    /// The sinks of a namespace no service uses any more send the batch they hold, report it,
    /// and end; the others run on, and the namespace can come back later.
    #[tokio::test]
    async fn the_sinks_of_an_unused_namespace_flush_and_stop() {
        let emf = EmfBuffer::new();
        let opts = RunOptions {
            duration: None,
            grace: Duration::from_secs(1),
            emf_out: Some(emf.clone()),
        };
        let (mut sinks, mut reports) = Sinks::new(&config(), &opts).await;
        let mut queues = sinks.add("Kept");
        queues.extend(sinks.add("Gone"));
        assert_eq!(sinks.tasks.len(), 2);
        let batch = Queued {
            id: 7,
            datums: vec![service_unavailable_datum("alpha", 1_000)],
            deadline: Instant::now() + Duration::from_secs(30),
        };
        queues[1].1.offer(batch).expect("queued");
        let used = BTreeSet::from(["Kept".to_string()]);
        assert_eq!(sinks.retain(&mut queues, &used), ["Gone"]);
        assert_eq!(queues.len(), 1);
        assert_eq!(queues[0].0, "Kept");
        let wait = Duration::from_secs(10);
        let rep = tokio::time::timeout(wait, reports.recv())
            .await
            .expect("a report")
            .expect("open");
        assert_eq!((rep.batch, rep.outcome), (7, PublishOutcome::Sent));
        assert!(emf.lines().iter().any(|l| l.contains("\"Gone\"")));
        let ended = async {
            while sinks.tasks.len() > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(wait, ended)
            .await
            .expect("the unused namespace's task ends");
        // Nothing to stop when every namespace is used; a namespace used again gets new sinks.
        assert!(sinks.retain(&mut queues, &used).is_empty());
        assert_eq!(sinks.add("Gone").len(), 1);
    }
}
