//! The `run` control loop: branch loops feed attempts in; readiness is folded per branch; publish
//! ticks hand datums to the sinks; evidence and state are written; shutdown is explicit.
//!
//! Sending never blocks probing: each sink has its own task behind a bounded queue, and a batch
//! that does not fit is dropped, counted and recorded. A failed send is retried with backoff until
//! the batch's window (one publish interval) closes, then dropped, counted and recorded.

use crate::clock::Clock;
use crate::config::{Config, SinkKind};
use crate::probe::{self, Attempt, Outcome};
use crate::readiness::{Millis, Readiness, ReadinessState, Transition};
use crate::scheduler::{BranchEvent, Schedule, branch_loop};
use crate::sink::cloudwatch::CloudWatchSink;
use crate::sink::emf::EmfSink;
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{BranchTick, Datum, Sink, tick_datums, transition_datum};
use crate::state::{FileStore, STATE_VERSION, SavedState, StateError};
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior, interval_at};

/// Options of one `run`.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Stop after this long (ECS scheduled task); `None` runs until a signal.
    pub duration: Option<Duration>,
    /// How long in-flight attempts and the final publish may take after a stop request.
    pub grace: Duration,
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
}

struct Batch {
    datums: Vec<Datum>,
    deadline: Instant,
    reason: &'static str,
}

struct SinkReport {
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
}

async fn sink_task(
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Batch>,
    reports: mpsc::UnboundedSender<SinkReport>,
) {
    while let Some(batch) = rx.recv().await {
        let mut tries = 0;
        let mut backoff = Duration::from_millis(250);
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
                        sink: sink.name(),
                        reason: batch.reason,
                        datums: batch.datums.len(),
                        sent,
                        tries,
                        error: None,
                    };
                }
                Err(e) if e.retryable && Instant::now() + backoff < batch.deadline => {
                    tracing::debug!(sink = sink.name(), error = %e, "publish failed, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(8));
                }
                Err(e) => {
                    break SinkReport {
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

/// Run until `stop` resolves (a signal name) or the duration passes.
///
/// # Errors
/// [`RunError`] when start-up fails (nothing is published then) or evidence cannot be written.
pub async fn run<S>(cfg: Config, opts: RunOptions, stop: S) -> Result<RunSummary, RunError>
where
    S: Future<Output = &'static str>,
{
    let clock = Clock::start();
    let (resolver, probes) = probe::prepare(&cfg)?;
    let store = FileStore::new(&cfg.state_dir, &cfg.service.name, &cfg.prober_id);
    let saved = store.load(&cfg.service.name)?;
    let mut evidence = EvidenceWriter::open(
        &cfg.evidence_path,
        &cfg.service.name,
        &cfg.prober_id,
        cfg.evidence_max_bytes,
    )
    .map_err(|source| RunError::Evidence {
        path: cfg.evidence_path.display().to_string(),
        source,
    })?;

    // Readiness per branch, restored from the saved state when there is one.
    let mut readiness: BTreeMap<String, Readiness> = BTreeMap::new();
    let mut restored = Vec::new();
    for b in &cfg.branches {
        let r = match saved.as_ref().and_then(|s| s.branches.get(&b.name)) {
            Some(snap) => {
                restored.push(json!({"branch": b.name, "state": snap.state, "since": snap.since}));
                Readiness::restore(cfg.policy.clone(), snap.clone())
            }
            None => Readiness::new(cfg.policy.clone()),
        };
        readiness.insert(b.name.clone(), r);
    }
    let now = clock.now_ms();
    evidence
        .write("start", now, json!({
            "config": cfg.source.display().to_string(),
            "branches": cfg.branches.iter().map(|b| json!({"name": b.name, "role": b.role.as_str(), "endpoint": b.endpoint, "port": b.port})).collect::<Vec<_>>(),
            "duration_ms": opts.duration.map(|d| d.as_millis() as u64),
            "state_file": store.path().display().to_string(),
            "restored": restored,
        }));
    for r in &restored {
        tracing::info!(branch = %r["branch"], state = %r["state"], "restored readiness state from {}", store.path().display());
    }

    // Sinks.
    let (report_tx, mut report_rx) = mpsc::unbounded_channel::<SinkReport>();
    let mut sinks: Vec<SinkHandle> = Vec::new();
    for kind in &cfg.publish.sinks {
        let sink: Box<dyn Sink> = match kind {
            SinkKind::Emf => Box::new(EmfSink::new(&cfg.publish.namespace)),
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
        branches = cfg.branches.len(),
        interval = %crate::config::fmt_dur(cfg.probe.interval),
        publish_interval = %crate::config::fmt_dur(cfg.publish.interval),
        sinks = ?cfg.publish.sinks,
        evidence = %cfg.evidence_path.display(),
        "readyprobe started"
    );

    let mut summary = RunSummary::default();
    let mut acc: BTreeMap<String, TickAcc> = cfg
        .branches
        .iter()
        .map(|b| (b.name.clone(), TickAcc::default()))
        .collect();
    let mut both_unready_logged = false;
    let mut ctx = Ctx {
        cfg: &cfg,
        sinks: &sinks,
        summary: &mut summary,
        evidence: &mut evidence,
    };

    let mut ticker = interval_at(Instant::now() + cfg.publish.interval, cfg.publish.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let sleep_for = opts
        .duration
        .unwrap_or(Duration::from_secs(100 * 365 * 86400));
    let until = tokio::time::sleep(sleep_for);
    tokio::pin!(until);
    tokio::pin!(stop);

    let stop_reason: String = loop {
        tokio::select! {
            ev = att_rx.recv() => match ev {
                Some(ev) => ctx.on_event(ev, &mut readiness, &mut acc, &clock),
                None => break "branch loops ended".into(),
            },
            _ = ticker.tick() => {
                let now = clock.now_ms();
                ctx.tick(&mut readiness, &mut acc, now, "tick", &mut both_unready_logged);
                save(&store, &cfg, &readiness, now, ctx.evidence)?;
            }
            Some(rep) = report_rx.recv() => ctx.on_report(rep, &clock),
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
            Ok(Some(ev)) => ctx.on_event(ev, &mut readiness, &mut acc, &clock),
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
    // Final datum set, then close the sink queues and wait for them within what is left.
    let now = clock.now_ms();
    ctx.tick(
        &mut readiness,
        &mut acc,
        now,
        "final",
        &mut both_unready_logged,
    );
    let final_deadline = grace_end.max(Instant::now() + Duration::from_secs(2));
    let mut tasks = Vec::new();
    for s in sinks.drain(..) {
        drop(s.tx);
        tasks.push((s.name, s.task));
    }
    let mut ctx = Ctx {
        cfg: &cfg,
        sinks: &[],
        summary: &mut summary,
        evidence: &mut evidence,
    };
    for (name, mut t) in tasks {
        loop {
            tokio::select! {
                r = &mut t => { let _ = r; break; }
                Some(rep) = report_rx.recv() => ctx.on_report(rep, &clock),
                _ = tokio::time::sleep_until(final_deadline) => {
                    tracing::warn!(sink = name, "final publish did not finish within the grace period");
                    *ctx.summary.dropped_batches.entry(name.to_string()).or_default() += 1;
                    t.abort();
                    break;
                }
            }
        }
    }
    while let Ok(rep) = report_rx.try_recv() {
        ctx.on_report(rep, &clock);
    }
    let now = clock.now_ms();
    save(&store, &cfg, &readiness, now, &mut evidence)?;
    for (name, r) in &readiness {
        summary.final_states.insert(name.clone(), r.state());
    }
    summary.stop_reason = stop_reason.clone();
    evidence.write(
        "stop",
        now,
        json!({
            "reason": stop_reason,
            "attempts": summary.attempts,
            "abandoned": summary.abandoned,
            "transitions": summary.transitions,
            "dropped_batches": summary.dropped_batches,
            "final_states": summary.final_states,
            "evidence_write_failures": evidence.failed,
        }),
    );
    summary.evidence_write_failures = evidence.failed;
    if let Err(e) = evidence.sync() {
        tracing::error!(path = %evidence.path().display(), error = %e, "cannot sync evidence");
    }
    tracing::info!(
        reason = %summary.stop_reason,
        attempts = ?summary.attempts,
        transitions = summary.transitions,
        states = ?summary.final_states,
        "stopped"
    );
    Ok(summary)
}

fn save(
    store: &FileStore,
    cfg: &Config,
    readiness: &BTreeMap<String, Readiness>,
    now: Millis,
    evidence: &mut EvidenceWriter,
) -> Result<(), RunError> {
    let state = SavedState {
        version: STATE_VERSION,
        service: cfg.service.name.clone(),
        saved_at: now,
        branches: readiness
            .iter()
            .map(|(k, r)| (k.clone(), r.snapshot()))
            .collect(),
    };
    if let Err(e) = store.save(&state) {
        // Probing goes on; the failure is loud and recorded.
        tracing::error!(error = %e, "cannot save readiness state");
        evidence.write("state_save_failed", now, json!({"error": e.to_string()}));
    }
    Ok(())
}

struct Ctx<'a> {
    cfg: &'a Config,
    sinks: &'a [SinkHandle],
    summary: &'a mut RunSummary,
    evidence: &'a mut EvidenceWriter,
}

impl Ctx<'_> {
    fn on_event(
        &mut self,
        ev: BranchEvent,
        readiness: &mut BTreeMap<String, Readiness>,
        acc: &mut BTreeMap<String, TickAcc>,
        clock: &Clock,
    ) {
        match ev {
            BranchEvent::Abandoned { branch, seq } => {
                self.summary.abandoned += 1;
                self.evidence.write(
                    "attempt_abandoned",
                    clock.now_ms(),
                    json!({"branch": branch, "seq": seq}),
                )
            }
            BranchEvent::Attempt(a) => self.on_attempt(*a, readiness, acc),
        }
    }

    fn on_attempt(
        &mut self,
        a: Attempt,
        readiness: &mut BTreeMap<String, Readiness>,
        acc: &mut BTreeMap<String, TickAcc>,
    ) {
        *self.summary.attempts.entry(a.branch.clone()).or_default() += 1;
        if let Some(t) = acc.get_mut(&a.branch) {
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
        self.evidence.write("attempt", a.finished_at, &a);
        let Some(r) = readiness.get_mut(&a.branch) else {
            return;
        };
        if let Some(t) = r.record(a.record()) {
            let value = r.published_value();
            self.on_transition(&a.branch, &t, value);
        }
    }

    fn on_transition(&mut self, branch: &str, t: &Transition, value: Option<f64>) {
        self.summary.transitions += 1;
        let classes: Vec<String> = t
            .unready_window
            .failure_classes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect();
        if t.to == ReadinessState::Unready {
            tracing::warn!(branch, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, failures = ?classes, "readiness transition");
        } else {
            tracing::info!(branch, from = t.from.as_str(), to = t.to.as_str(), reason = %t.reason, failures = ?classes, "readiness transition");
        }
        self.evidence.write(
            "transition",
            t.at,
            json!({"branch": branch, "transition": t, "published": value}),
        );
        if let Some(v) = value {
            let d = transition_datum(&self.cfg.service.name, branch, v, t.at);
            self.publish(vec![d], "transition", t.at);
        }
    }

    fn tick(
        &mut self,
        readiness: &mut BTreeMap<String, Readiness>,
        acc: &mut BTreeMap<String, TickAcc>,
        now: Millis,
        reason: &'static str,
        both_unready_logged: &mut bool,
    ) {
        let mut ticks = Vec::new();
        for b in &self.cfg.branches {
            let Some(r) = readiness.get_mut(&b.name) else {
                continue;
            };
            if let Some(t) = r.evaluate(now) {
                let v = r.published_value();
                self.on_transition(&b.name, &t, v);
            }
            let stats = r.window_stats(now, self.cfg.policy.declare_unready.window);
            let a = acc.remove(&b.name).unwrap_or_default();
            acc.insert(b.name.clone(), TickAcc::default());
            ticks.push(BranchTick {
                branch: b.name.clone(),
                readiness: r.published_value(),
                is_ready: r.state() == ReadinessState::Ready,
                is_known: r.state() != ReadinessState::Unknown,
                success_rate: stats.success_rate_percent,
                attempts: a.attempts,
                failed: a.failed,
                step_durations: a.steps.into_iter().collect(),
            });
        }
        let all_unready = ticks.iter().all(|t| t.is_known && !t.is_ready);
        if all_unready && !*both_unready_logged {
            tracing::error!(
                service = %self.cfg.service.name,
                "NO BRANCH IS READY: Route 53 failover fails open and answers with the PRIMARY regardless; BothBranchesUnready = 1"
            );
            self.evidence.write("both_branches_unready", now, json!({
                "explanation": "no branch is ready; with every failover health check unhealthy Route 53 answers with the primary record anyway (fail-open)",
            }));
            *both_unready_logged = true;
        } else if !all_unready {
            *both_unready_logged = false;
        }
        let datums = tick_datums(&self.cfg.service.name, &ticks, now);
        self.publish(datums, reason, now)
    }

    fn publish(&mut self, datums: Vec<Datum>, reason: &'static str, now: Millis) {
        let deadline = Instant::now() + self.cfg.publish.interval;
        for s in self.sinks {
            let n = datums.len();
            if let Err(e) = s.tx.try_send(Batch {
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
                self.evidence.write("publish", now, json!({"sink": s.name, "reason": reason, "datums": n, "sent": 0, "dropped": true, "error": why}));
            }
        }
    }

    fn on_report(&mut self, r: SinkReport, clock: &Clock) {
        let now = clock.now_ms();
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
