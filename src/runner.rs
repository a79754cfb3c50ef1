//! The `run` control loop: branch loops feed attempts in; readiness is folded per branch; publish
//! ticks hand datums to the sinks; evidence and state are written; shutdown is explicit.
//!
//! Sending never blocks probing: each sink has its own task behind a bounded queue, and a batch
//! that does not fit is dropped, counted and recorded. A failed send is retried with backoff until
//! the batch's window (one publish interval) closes, then dropped, counted and recorded.

use crate::clock::Clock;
use crate::config::{Config, SinkKind, StoreKind};
use crate::control::{self, ControlDoc, Override, ProberState};
use crate::probe::{self, Attempt, Outcome};
use crate::readiness::{Millis, Readiness, ReadinessState, Transition};
use crate::scheduler::{BranchEvent, Schedule, branch_loop};
use crate::sink::cloudwatch::CloudWatchSink;
use crate::sink::emf::{EmfBuffer, EmfSink};
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{BranchTick, Datum, Sink, tick_datums, transition_datum};
use crate::state::{FileStore, S3Store, StateError, Store};
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior, interval_at};

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

/// What a run did, for the caller's summary line and tests.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Why it stopped (`duration`, `SIGTERM`, `SIGINT`).
    pub stop_reason: String,
    /// Finished attempts per branch.
    pub attempts: BTreeMap<String, u64>,
    /// Attempts abandoned at shutdown.
    pub abandoned: u64,
    /// Transitions.
    pub transitions: u64,
    /// Batches dropped per sink (queue full or window closed).
    pub dropped_batches: BTreeMap<String, u64>,
    /// Final state per branch.
    pub final_states: BTreeMap<String, ReadinessState>,
    /// Evidence records that could not be written.
    pub evidence_write_failures: u64,
    /// Approvals this prober applied.
    pub approvals_applied: u64,
    /// Approvals this prober rejected.
    pub approvals_rejected: u64,
    /// Syncs with the state store that failed.
    pub state_sync_failures: u64,
}

struct Batch {
    id: u64,
    datums: Vec<Datum>,
    deadline: Instant,
    reason: &'static str,
}

struct SinkReport {
    id: u64,
    sink: &'static str,
    reason: &'static str,
    datums: usize,
    sent: usize,
    tries: u32,
    error: Option<String>,
}

struct SinkHandle {
    name: &'static str,
    tx: mpsc::Sender<Batch>,
    task: tokio::task::JoinHandle<()>,
}

/// Per-branch accumulators between publish ticks.
#[derive(Default)]
struct TickAcc {
    attempts: u64,
    failed: u64,
    steps: BTreeMap<&'static str, Vec<f64>>,
    cert_not_after: Option<Millis>,
}

async fn sink_task(
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Batch>,
    reports: mpsc::UnboundedSender<SinkReport>,
) {
    while let Some(batch) = rx.recv().await {
        let mut tries = 0;
        let window = batch.deadline.saturating_duration_since(Instant::now());
        let mut backoff =
            (window / 10).clamp(Duration::from_millis(50), Duration::from_millis(500));
        let report = loop {
            tries += 1;
            let remaining = batch.deadline.saturating_duration_since(Instant::now());
            let r = match tokio::time::timeout(
                remaining.max(Duration::from_millis(1)),
                sink.send(&batch.datums),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(crate::sink::SinkError {
                    message: "the publish window closed before the send finished".into(),
                    retryable: false,
                }),
            };
            match r {
                Ok(sent) => {
                    break SinkReport {
                        id: batch.id,
                        sink: sink.name(),
                        reason: batch.reason,
                        datums: batch.datums.len(),
                        sent,
                        tries,
                        error: None,
                    };
                }
                Err(e)
                    if e.retryable
                        && tries < sink.max_tries()
                        && Instant::now() + backoff < batch.deadline =>
                {
                    tracing::debug!(sink = sink.name(), error = %e, "publish failed, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(8));
                }
                Err(e) => {
                    break SinkReport {
                        id: batch.id,
                        sink: sink.name(),
                        reason: batch.reason,
                        datums: batch.datums.len(),
                        sent: 0,
                        tries,
                        error: Some(e.message),
                    };
                }
            }
        };
        if reports.send(report).is_err() {
            break;
        }
    }
}

/// Open the configured state store.
pub async fn open_store(cfg: &Config) -> Store {
    match &cfg.state.store {
        StoreKind::File => Store::File(FileStore::new(&cfg.state_dir, &cfg.service.name)),
        StoreKind::S3(s3) => Store::S3(S3Store::new(s3, &cfg.service.name).await),
    }
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
    let store = open_store(&cfg).await;
    let doc = store.load().await?;
    let evidence = EvidenceWriter::open(
        &cfg.evidence_path,
        &cfg.service.name,
        &cfg.prober_id,
        cfg.evidence_max_bytes,
    )
    .map_err(|source| RunError::Evidence {
        path: cfg.evidence_path.display().to_string(),
        source,
    })?;

    // Readiness per branch, restored from this prober's saved state when there is one.
    let mut readiness: BTreeMap<String, Readiness> = BTreeMap::new();
    let mut restored = Vec::new();
    let mine = doc.probers.get(&cfg.prober_id);
    for b in &cfg.branches {
        let r = match mine.and_then(|s| s.branches.get(&b.name)) {
            Some(snap) => {
                restored.push(json!({"branch": b.name, "state": snap.state, "since": snap.since}));
                Readiness::restore(cfg.policy.clone(), snap.clone())
            }
            None => Readiness::new(cfg.policy.clone()),
        };
        readiness.insert(b.name.clone(), r);
    }

    // Sinks.
    let (report_tx, mut report_rx) = mpsc::unbounded_channel::<SinkReport>();
    let mut sinks: Vec<SinkHandle> = Vec::new();
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
        let name = sink.name();
        let (tx, rx) = mpsc::channel(4);
        let task = tokio::spawn(sink_task(sink, rx, report_tx.clone()));
        sinks.push(SinkHandle { name, tx, task });
    }
    drop(report_tx);

    let mut ctx = Ctx {
        cfg: &cfg,
        sinks,
        summary: RunSummary::default(),
        evidence,
        readiness,
        acc: cfg
            .branches
            .iter()
            .map(|b| (b.name.clone(), TickAcc::default()))
            .collect(),
        both_unready_logged: false,
        overrides: BTreeMap::new(),
        store,
        clock,
        outstanding: BTreeMap::new(),
        next_batch: 0,
        recorded: Default::default(),
    };
    let now = clock.now_ms();
    ctx.evidence.write(
        "start",
        now,
        json!({
            "config": cfg.source.display().to_string(),
            "branches": cfg.branches.iter().map(|b| json!({"name": b.name, "role": b.role.as_str(), "endpoint": b.endpoint, "port": b.port})).collect::<Vec<_>>(),
            "duration_ms": opts.duration.map(|d| d.as_millis() as u64),
            "state_store": ctx.store.location(),
            "restored": restored,
        }),
    );
    for r in &restored {
        tracing::info!(branch = %r["branch"], state = %r["state"], "restored readiness state from {}", ctx.store.location());
    }
    ctx.apply_overrides(&doc, now);
    for b in doc
        .probers
        .get(&cfg.prober_id)
        .map(|p| p.branches.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if !cfg.branches.iter().any(|x| x.name == b) {
            tracing::warn!(branch = %b, "saved state has a branch that is not in the config; it is dropped at the next save");
        }
    }
    if let Ok(entries) = std::fs::read_dir(&cfg.state_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("state-") && name.ends_with(".json") {
                tracing::warn!(file = %e.path().display(), "ignoring a state file of an earlier format; readiness continues from {}", ctx.store.location());
            }
        }
    }

    // Branch loops.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (att_tx, mut att_rx) = mpsc::channel::<BranchEvent>(256);
    let schedule = Schedule {
        interval: cfg.probe.interval,
        jitter: cfg.probe.jitter,
        grace: opts.grace,
    };
    let mut loops = Vec::new();
    for p in probes {
        loops.push(tokio::spawn(branch_loop(
            p,
            resolver.clone(),
            clock,
            schedule,
            att_tx.clone(),
            stop_rx.clone(),
        )));
    }
    drop(att_tx);
    tracing::info!(
        service = %cfg.service.name,
        prober = %cfg.prober_id,
        branches = cfg.branches.len(),
        interval = %crate::config::fmt_dur(cfg.probe.interval),
        publish_interval = %crate::config::fmt_dur(cfg.publish.interval),
        sinks = ?cfg.publish.sinks,
        state = %ctx.store.location(),
        evidence = %cfg.evidence_path.display(),
        "readyprobe started"
    );

    let mut ticker = interval_at(Instant::now() + cfg.publish.interval, cfg.publish.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut poll = interval_at(
        Instant::now() + cfg.state.poll_interval,
        cfg.state.poll_interval,
    );
    poll.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let sleep_for = opts
        .duration
        .unwrap_or(Duration::from_secs(100 * 365 * 86400));
    let until = tokio::time::sleep(sleep_for);
    tokio::pin!(until);
    tokio::pin!(stop);

    let mut syncing: Option<tokio::task::JoinHandle<SyncOutcome>> = None;
    let stop_reason: String = loop {
        tokio::select! {
            ev = att_rx.recv() => match ev {
                Some(ev) => ctx.on_event(ev),
                None => break "branch loops ended".into(),
            },
            _ = ticker.tick() => ctx.tick("tick"),
            _ = poll.tick() => {
                if syncing.is_none() {
                    syncing = Some(ctx.start_sync());
                }
            }
            joined = async {
                match syncing.as_mut() {
                    Some(task) => task.await,
                    None => std::future::pending().await,
                }
            }, if syncing.is_some() => {
                syncing = None;
                ctx.finish_sync(joined);
            }
            Some(rep) = report_rx.recv() => ctx.on_report(rep),
            _ = &mut until => break "duration".into(),
            sig = &mut stop => break sig.to_string(),
        }
    };

    // Shutdown: stop the loops, let in-flight attempts finish within the grace period.
    tracing::info!(reason = %stop_reason, grace = %crate::config::fmt_dur(opts.grace), "stopping");
    let grace_end = Instant::now() + opts.grace;
    let _ = stop_tx.send(true);
    loop {
        match tokio::time::timeout_at(grace_end + Duration::from_millis(200), att_rx.recv()).await {
            Ok(Some(ev)) => ctx.on_event(ev),
            Ok(None) => break,
            Err(_) => {
                tracing::warn!(
                    "branch loops did not stop within the grace period; abandoning them"
                );
                for l in &loops {
                    l.abort();
                }
                break;
            }
        }
    }
    // The final datum set, then save (the final evaluation included), then close the sink
    // queues and wait for them within what is left of the grace period; whatever a sink did not
    // report by then is recorded as dropped.
    ctx.tick("final");
    let final_deadline = grace_end.max(Instant::now() + Duration::from_secs(2));
    let final_sync = async {
        if let Some(t) = syncing.take() {
            let j = t.await;
            ctx.finish_sync(j);
        }
        let t = ctx.start_sync();
        let j = t.await;
        ctx.finish_sync(j);
    };
    if tokio::time::timeout_at(final_deadline, final_sync)
        .await
        .is_err()
    {
        ctx.summary.state_sync_failures += 1;
        tracing::error!("final state sync did not finish within the grace period");
        let now = clock.now_ms();
        ctx.evidence.write(
            "state_sync_failed",
            now,
            json!({"error": "the final sync did not finish within the grace period"}),
        );
    }
    let mut tasks: Vec<_> = ctx
        .sinks
        .drain(..)
        .map(|s| {
            drop(s.tx);
            s.task
        })
        .collect();
    let all_done = async {
        for t in &mut tasks {
            let _ = t.await;
        }
    };
    tokio::pin!(all_done);
    loop {
        tokio::select! {
            _ = &mut all_done => break,
            Some(rep) = report_rx.recv() => ctx.on_report(rep),
            _ = tokio::time::sleep_until(final_deadline) => {
                tracing::warn!("sinks did not finish within the grace period");
                break;
            }
        }
    }
    for t in &tasks {
        t.abort();
    }
    while let Ok(rep) = report_rx.try_recv() {
        ctx.on_report(rep);
    }
    ctx.account_unsent();
    let now = clock.now_ms();
    for (name, r) in &ctx.readiness {
        ctx.summary.final_states.insert(name.clone(), r.state());
    }
    ctx.summary.stop_reason = stop_reason.clone();
    ctx.summary.evidence_write_failures = ctx.evidence.failed();
    let s = &ctx.summary;
    let stop_record = json!({
        "reason": stop_reason,
        "attempts": s.attempts,
        "abandoned": s.abandoned,
        "transitions": s.transitions,
        "dropped_batches": s.dropped_batches,
        "final_states": s.final_states,
        "approvals_applied": s.approvals_applied,
        "approvals_rejected": s.approvals_rejected,
        "state_sync_failures": s.state_sync_failures,
        "evidence_write_failures": ctx.evidence.failed(),
    });
    ctx.evidence.write("stop", now, stop_record);
    ctx.evidence
        .close(Instant::now() + Duration::from_secs(1))
        .await;
    let summary = ctx.summary;
    tracing::info!(
        reason = %summary.stop_reason,
        attempts = ?summary.attempts,
        transitions = summary.transitions,
        states = ?summary.final_states,
        "stopped"
    );
    Ok(summary)
}

struct Ctx<'a> {
    cfg: &'a Config,
    sinks: Vec<SinkHandle>,
    summary: RunSummary,
    evidence: EvidenceWriter,
    readiness: BTreeMap<String, Readiness>,
    acc: BTreeMap<String, TickAcc>,
    both_unready_logged: bool,
    /// Overrides as last read from the store (active or not).
    overrides: BTreeMap<String, Override>,
    store: Store,
    clock: Clock,
    /// Batches handed to a sink and not yet reported: (sink, id) → (reason, datums).
    outstanding: BTreeMap<(&'static str, u64), (&'static str, usize)>,
    next_batch: u64,
    /// Approval ids whose decision this process has recorded in the evidence.
    recorded: std::collections::BTreeSet<String>,
}

/// What a background sync produced.
struct SyncOutcome {
    started: Millis,
    result: Result<ControlDoc, StateError>,
    decided: Vec<(control::Approval, control::Decision)>,
}

impl Ctx<'_> {
    fn effective(&self, branch: &str, now: Millis) -> Option<f64> {
        let computed = self.readiness.get(branch).and_then(|r| r.published_value());
        control::effective_value(computed, self.overrides.get(branch), now)
    }

    /// Start a sync with the store in the background: save this prober's readiness, decide new
    /// approvals, read overrides, in one conditional read-modify-write of the control document.
    /// The run loop goes on meanwhile (a slow or stuck store never stalls probing or
    /// publishing); [`finish_sync`](Self::finish_sync) takes the result.
    fn start_sync(&self) -> tokio::task::JoinHandle<SyncOutcome> {
        let now = self.clock.now_ms();
        let me = self.cfg.prober_id.clone();
        let start: BTreeMap<String, Readiness> = self.readiness.clone();
        let recorded = self.recorded.clone();
        let out: std::sync::Arc<std::sync::Mutex<Vec<(control::Approval, control::Decision)>>> =
            Default::default();
        let out2 = out.clone();
        let bound = self.cfg.state.poll_interval.max(Duration::from_secs(5));
        let store = self.store.clone();
        tokio::spawn(async move {
            let update = store.update(move |doc| {
                let mut rs = start.clone();
                let mut decided = Vec::new();
                for a in doc.approvals.iter_mut() {
                    let Some(r) = rs.get_mut(&a.branch) else {
                        continue;
                    };
                    if let Some(d) = a.decisions.get(&me) {
                        // Decided by a write whose answer was lost: record it now, and apply an
                        // applied one if the branch still waits for it.
                        if !recorded.contains(&a.id) && d.at + 600_000 > now {
                            if d.applied
                                && r.state() == ReadinessState::PendingApproval
                                && r.since().is_none_or(|s| a.at >= s)
                                && a.expires_at > now
                                && control::not_ready_now(r, now).is_none()
                            {
                                let _ = r.approve(now);
                            }
                            decided.push((a.clone(), d.clone()));
                        }
                        continue;
                    }
                    // Long-expired approvals are history, not news, for a prober that never
                    // saw them (e.g. a new prober id).
                    if a.expires_at + 600_000 < now {
                        continue;
                    }
                    let d = control::decide(a, r, now);
                    if d.applied {
                        let _ = r.approve(now);
                    }
                    a.decisions.insert(me.clone(), d.clone());
                    decided.push((a.clone(), d));
                }
                doc.probers.insert(
                    me.clone(),
                    ProberState {
                        saved_at: now,
                        branches: rs.iter().map(|(k, r)| (k.clone(), r.snapshot())).collect(),
                    },
                );
                doc.prune(now);
                *out2.lock().unwrap_or_else(|p| p.into_inner()) = decided;
                Ok(())
            });
            let result = match tokio::time::timeout(bound, update).await {
                Ok(r) => r,
                Err(_) => Err(StateError::Io {
                    location: store.location(),
                    reason: format!(
                        "no answer within {}; probing and publishing go on",
                        crate::config::fmt_dur(bound)
                    ),
                }),
            };
            let decided = std::mem::take(&mut *out.lock().unwrap_or_else(|p| p.into_inner()));
            SyncOutcome {
                started: now,
                result,
                decided,
            }
        })
    }

    /// Take a finished sync: record its decisions, apply approved failbacks, take overrides.
    fn finish_sync(&mut self, joined: Result<SyncOutcome, tokio::task::JoinError>) {
        let now = self.clock.now_ms();
        let outcome = match joined {
            Ok(o) => o,
            Err(e) => SyncOutcome {
                started: now,
                result: Err(StateError::Io {
                    location: self.store.location(),
                    reason: format!("sync task ended: {e}"),
                }),
                decided: Vec::new(),
            },
        };
        let doc = match outcome.result {
            Ok(doc) => doc,
            Err(e) => {
                self.summary.state_sync_failures += 1;
                tracing::error!(error = %e, "cannot sync with the state store; probing goes on, retrying at the next poll");
                self.evidence.write(
                    "state_sync_failed",
                    now,
                    json!({"error": e.to_string(), "started_at": outcome.started}),
                );
                return;
            }
        };
        for (a, d) in outcome.decided {
            self.recorded.insert(a.id.clone());
            let record = json!({
                "branch": a.branch, "approval_id": a.id, "by": a.by, "reason": a.reason,
                "given_at": a.at, "expires_at": a.expires_at, "applied": d.applied, "detail": d.detail,
            });
            self.evidence.write("approval", now, record);
            if d.applied {
                let Some(r) = self.readiness.get_mut(&a.branch) else {
                    continue;
                };
                match r.approve(now) {
                    Ok(t) => {
                        self.summary.approvals_applied += 1;
                        tracing::info!(branch = %a.branch, by = %a.by, reason = %a.reason, "operator approval applied");
                        let v = r.published_value();
                        self.on_transition(&a.branch, &t, v);
                    }
                    Err(e) => {
                        // The branch left pending_approval while the sync was in flight.
                        tracing::warn!(branch = %a.branch, error = %e, "approval decided but not applied: the branch left pending_approval meanwhile");
                        self.evidence.write(
                            "approval_not_applied",
                            now,
                            json!({"branch": a.branch, "approval_id": a.id, "state": r.state()}),
                        );
                    }
                }
            } else {
                self.summary.approvals_rejected += 1;
                tracing::warn!(branch = %a.branch, by = %a.by, detail = %d.detail, "operator approval rejected");
            }
        }
        self.apply_overrides(&doc, now);
    }

    /// Take the store's overrides; record and publish at once every one that starts, changes or
    /// is cleared.
    fn apply_overrides(&mut self, doc: &ControlDoc, now: Millis) {
        // Expiries first, so the one that just ran out is recorded before the store's copy of it
        // is dropped as inactive.
        self.expire_overrides(now);
        let mut branches: Vec<String> = self.cfg.branches.iter().map(|b| b.name.clone()).collect();
        branches.retain(|b| {
            let old = self.overrides.get(b).filter(|o| o.active(now));
            let new = doc.overrides.get(b).filter(|o| o.active(now));
            old != new
        });
        self.overrides = doc
            .overrides
            .iter()
            .filter(|(_, o)| o.active(now))
            .map(|(b, o)| (b.clone(), o.clone()))
            .collect();
        for b in branches {
            match self.overrides.get(&b).filter(|o| o.active(now)) {
                Some(o) => {
                    tracing::warn!(branch = %b, force = o.force.as_str(), by = %o.by, reason = %o.reason,
                        expires_at = %crate::clock::rfc3339(o.expires_at), "override in force: the published readiness is forced");
                    self.evidence.write(
                        "override",
                        now,
                        json!({"branch": b, "action": "set", "override": o}),
                    );
                }
                None => {
                    tracing::warn!(branch = %b, "override cleared: the computed readiness is published again");
                    self.evidence
                        .write("override", now, json!({"branch": b, "action": "cleared"}));
                }
            }
            let after = self.effective(&b, now);
            // Publish the new effective value at once (a cleared override whose branch is
            // unknown has nothing to publish).
            if let Some(v) = after {
                let d = transition_datum(&self.cfg.service.name, &b, v, now);
                self.publish(vec![d], "override", now);
            }
        }
    }

    /// End overrides whose expiry passed (no store round trip needed).
    fn expire_overrides(&mut self, now: Millis) {
        let (expired, active): (BTreeMap<_, _>, BTreeMap<_, _>) =
            std::mem::take(&mut self.overrides)
                .into_iter()
                .partition(|(_, o)| !o.active(now));
        self.overrides = active;
        for (b, o) in expired {
            tracing::warn!(branch = %b, force = o.force.as_str(), "override expired: the computed readiness is published again");
            self.evidence.write(
                "override",
                now,
                json!({"branch": b, "action": "expired", "override": o}),
            );
            if let Some(v) = self.effective(&b, now) {
                let d = transition_datum(&self.cfg.service.name, &b, v, now);
                self.publish(vec![d], "override", now);
            }
        }
    }

    fn on_event(&mut self, ev: BranchEvent) {
        match ev {
            BranchEvent::Abandoned { branch, seq } => {
                self.summary.abandoned += 1;
                self.evidence.write(
                    "attempt_abandoned",
                    self.clock.now_ms(),
                    json!({"branch": branch, "seq": seq}),
                );
            }
            BranchEvent::Attempt(a) => self.on_attempt(*a),
        }
    }

    fn on_attempt(&mut self, a: Attempt) {
        *self.summary.attempts.entry(a.branch.clone()).or_default() += 1;
        if let Some(t) = self.acc.get_mut(&a.branch) {
            t.attempts += 1;
            if a.outcome != Outcome::Success {
                t.failed += 1;
            }
            for s in a.steps.iter().filter(|s| s.ok) {
                t.steps
                    .entry(s.step.as_str())
                    .or_default()
                    .push(s.duration_ms);
            }
        }
        match &a.outcome {
            Outcome::Success => tracing::debug!(branch = %a.branch, seq = a.seq, "attempt ok"),
            Outcome::Failure {
                step,
                class,
                message,
            } => {
                tracing::debug!(branch = %a.branch, seq = a.seq, %step, %class, %message, "attempt failed")
            }
        }
        if let Some(na) = a.certificate_not_after
            && let Some(t) = self.acc.get_mut(&a.branch)
        {
            t.cert_not_after = Some(na);
        }
        self.evidence.write("attempt", a.finished_at, &a);
        let Some(r) = self.readiness.get_mut(&a.branch) else {
            return;
        };
        if let Some(t) = r.record(a.record()) {
            let value = r.published_value();
            self.on_transition(&a.branch, &t, value);
        }
    }

    fn on_transition(&mut self, branch: &str, t: &Transition, computed: Option<f64>) {
        self.summary.transitions += 1;
        let classes: Vec<String> = t
            .unready_window
            .failure_classes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect();
        let ov = self
            .overrides
            .get(branch)
            .filter(|o| o.active(t.at))
            .cloned();
        let published = control::effective_value(computed, ov.as_ref(), t.at);
        if t.to == ReadinessState::Unready {
            tracing::warn!(branch, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, failures = ?classes, "readiness transition");
        } else {
            tracing::info!(branch, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, failures = ?classes, "readiness transition");
        }
        if t.to == ReadinessState::PendingApproval {
            tracing::warn!(
                branch,
                "ready condition held its full `for`: waiting for an operator (readyprobe approve --branch {branch} --by WHO --reason TEXT)"
            );
        }
        self.evidence.write(
            "transition",
            t.at,
            json!({"branch": branch, "transition": t, "published": published, "override": ov}),
        );
        if let Some(v) = published {
            let d = transition_datum(&self.cfg.service.name, branch, v, t.at);
            self.publish(vec![d], "transition", t.at);
        }
    }

    fn tick(&mut self, reason: &'static str) {
        let now = self.clock.now_ms();
        self.evidence.reopen_if_replaced(now);
        self.expire_overrides(now);
        let mut ticks = Vec::new();
        let branches: Vec<String> = self.cfg.branches.iter().map(|b| b.name.clone()).collect();
        for b in branches {
            let Some(r) = self.readiness.get_mut(&b) else {
                continue;
            };
            if let Some(t) = r.evaluate(now) {
                let v = r.published_value();
                self.on_transition(&b, &t, v);
            }
            let r = &self.readiness[&b];
            let stats = r.window_stats(now, self.cfg.policy.declare_unready.window);
            let a = self
                .acc
                .insert(b.clone(), TickAcc::default())
                .unwrap_or_default();
            let effective = self.effective(&b, now);
            ticks.push(BranchTick {
                branch: b.clone(),
                readiness: effective,
                is_ready: effective == Some(1.0),
                is_known: effective.is_some(),
                success_rate: stats.success_rate_percent,
                attempts: a.attempts,
                failed: a.failed,
                step_durations: a.steps.into_iter().collect(),
                // Only what a handshake showed since the last tick: no handshake, no datum.
                cert_not_after: a.cert_not_after,
            });
        }
        let all_unready = ticks.iter().all(|t| t.is_known && !t.is_ready);
        if all_unready && !self.both_unready_logged {
            tracing::error!(
                service = %self.cfg.service.name,
                "NO BRANCH IS READY: Route 53 failover fails open and answers with the PRIMARY regardless; BothBranchesUnready = 1"
            );
            self.evidence.write(
                "both_branches_unready",
                now,
                json!({
                    "explanation": "no branch is ready; with every failover health check unhealthy Route 53 answers with the primary record anyway (fail-open)",
                }),
            );
            self.both_unready_logged = true;
        } else if !all_unready {
            self.both_unready_logged = false;
        }
        let datums = tick_datums(&self.cfg.service.name, &ticks, now);
        self.publish(datums, reason, now);
    }
    fn publish(&mut self, datums: Vec<Datum>, reason: &'static str, now: Millis) {
        let deadline = Instant::now() + self.cfg.publish.interval;
        for s in &self.sinks {
            let n = datums.len();
            self.next_batch += 1;
            let id = self.next_batch;
            if let Err(e) = s.tx.try_send(Batch {
                id,
                datums: datums.clone(),
                deadline,
                reason,
            }) {
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => {
                        "sink queue full (the sink is slower than the publish rate)"
                    }
                    mpsc::error::TrySendError::Closed(_) => "sink stopped",
                };
                *self
                    .summary
                    .dropped_batches
                    .entry(s.name.to_string())
                    .or_default() += 1;
                tracing::warn!(sink = s.name, datums = n, reason = why, "publish dropped");
                self.evidence.write("publish", now, json!({"sink": s.name, "reason": reason, "datums": n, "sent": 0, "tries": 0, "dropped": true, "error": why}));
            } else {
                self.outstanding.insert((s.name, id), (reason, n));
            }
        }
    }

    /// Record every batch a sink never reported (the grace period ended first) as dropped.
    fn account_unsent(&mut self) {
        let now = self.clock.now_ms();
        for ((sink, _), (reason, n)) in std::mem::take(&mut self.outstanding) {
            *self
                .summary
                .dropped_batches
                .entry(sink.to_string())
                .or_default() += 1;
            tracing::warn!(sink, datums = n, reason, "publish abandoned at shutdown");
            self.evidence.write(
                "publish",
                now,
                json!({"sink": sink, "reason": reason, "datums": n, "sent": 0, "dropped": true,
                       "error": "abandoned at shutdown: the grace period ended before it was sent"}),
            );
        }
    }

    fn on_report(&mut self, r: SinkReport) {
        let now = self.clock.now_ms();
        self.outstanding.remove(&(r.sink, r.id));
        if let Some(err) = &r.error {
            *self
                .summary
                .dropped_batches
                .entry(r.sink.to_string())
                .or_default() += 1;
            tracing::warn!(sink = r.sink, datums = r.datums, tries = r.tries, error = %err, "publish failed; batch dropped");
        } else {
            tracing::debug!(sink = r.sink, datums = r.sent, "published");
        }
        self.evidence.write(
            "publish",
            now,
            json!({
                "sink": r.sink,
                "reason": r.reason,
                "datums": r.datums,
                "sent": r.sent,
                "tries": r.tries,
                "dropped": r.error.is_some(),
                "error": r.error,
            }),
        )
    }
}
