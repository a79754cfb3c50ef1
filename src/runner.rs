//! The `run` I/O shell: [`run`], the select loop and shutdown. Branch loops feed attempts in;
//! every decision is the fold's ([`crate::fold`]); the shell executes its effects (evidence,
//! batches for the sinks, logs) and moves the control document to and from the store.
//!
//! By concern, each file using only those below it: `wiring.rs` (what runs, the loops and
//! where their events go, the sinks per namespace), `shell.rs` (feeds the fold, executes its
//! effects, builds and takes store syncs), `syncs.rs` (the syncs in flight and queued, final
//! saves), `start.rs` (prepare, load, and `start::launch`: the one way a service
//! starts), `reload.rs` (SIGHUP: stage and execute a [`crate::reload_plan`]), `watch.rs` (the
//! config read again at a SIGHUP or when a `[reload] poll` finds its source changed).
//!
//! Sending never blocks probing: each sink has its own task behind a bounded queue
//! ([`crate::sink::SinkQueue`]), and a batch that does not fit is dropped, counted and recorded.
//! A failed send is retried with backoff until the batch's window (one publish interval)
//! closes, then dropped, counted and recorded.

mod heartbeat;
mod reload;
mod shell;
mod start;
mod syncs;
mod watch;
mod wiring;

use crate::clock::{Clock, Millis};
use crate::config::{Config, ConfigError};
use crate::fold::{Input, ServiceId, Started};
use crate::probe::{self, PrepareError};
use crate::scheduler::BranchEvent;
use crate::serve::{Feed, Serving};
use crate::sink::evidence::{EvidenceWriter, SegmentOutput};
use crate::sink::evidence_s3::Uploader;
use crate::sink::segments;
use crate::state::StateError;
use shell::Shell;
use start::{load_all, prepare_all, start};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use syncs::Syncs;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use wiring::{Fleet, Route, Sinks, Tag, Wiring};

pub use crate::fold::RunSummary;
pub use start::open_store;
pub use watch::{Reloads, Watched, watch};
pub use wiring::{RunOptions, otlp_unavailable};

/// Why a run could not start or finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Secrets, CA bundle or resolver could not be prepared.
    #[error("cannot prepare probes: {0}")]
    Prepare(#[from] probe::PrepareError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The `[serve]` endpoint could not start (its address in use, most likely).
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
    /// The evidence file could not be opened or written.
    #[error("evidence file {path}: {source}")]
    Evidence {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Run until `stop` resolves (a signal name) or the duration passes.
///
/// # Errors
/// [`RunError`] when start-up fails (nothing is published then): no service could be prepared
/// (secrets, CA bundle or resolver unavailable) or none has a readable control document, the
/// evidence file not openable, the `[serve]` address not bindable.
pub async fn run<S>(cfg: Config, opts: RunOptions, stop: S) -> Result<RunSummary, RunError>
where
    S: Future<Output = &'static str>,
{
    run_with_reloads(cfg, opts, stop, None).await
}

/// [`run`], taking each config read again (at a SIGHUP, or a poll: [`watch`]) from `reloads`:
/// a valid one is applied without a restart when it changes only services, else refused with
/// the old one kept (`docs/operations.md`, "Reload").
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
    // First: an address in use stops the run before anything is probed or written.
    let (serving, served) = start_serving(&cfg, clock)?;
    let secrets = crate::secrets::SecretCache::default();
    secrets.read_missing(&cfg).await;
    let prepared = prepare_all(&cfg, &secrets);
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
    let (evidence, uploader) = open_evidence(&cfg, &label).await?;
    let (mut sinks, reports) = Sinks::new(&opts);
    sinks.prepare_otlp(&cfg, &secrets);
    let mut queues = Vec::new();
    for s in &cfg.services {
        sinks.add(&mut queues, &cfg, s);
    }
    let (shell, fleet, events) = start(
        &cfg,
        &opts,
        clock,
        loaded,
        (evidence, queues),
        (resolver, secrets),
        served,
    );
    let mut shell = shell;
    log_started(&mut shell, &fleet, &label);
    let mut wiring = Wiring {
        events,
        reports,
        sinks,
        fleet,
        uploader,
        serving,
    };
    let (stop_reason, syncing) = serve(&mut shell, &mut wiring, &opts, stop, reloads).await;
    Ok(shutdown(shell, wiring, syncing, stop_reason, opts.grace).await)
}

/// With `[serve]`: the endpoint, started, and the feed the shell keeps it up to date through.
fn start_serving(
    cfg: &Config,
    clock: Clock,
) -> Result<(Option<Serving>, Option<Arc<Feed>>), RunError> {
    let Some(settings) = &cfg.serve else {
        return Ok((None, None));
    };
    let feed = Arc::new(Feed::new(&cfg.prober_id, cfg.publish.interval, clock));
    let serving = Serving::start(settings, feed.clone())?;
    Ok((Some(serving), Some(feed)))
}

/// The evidence writer, and with `[evidence.s3]` its segments and their uploader (which
/// starts with the segments an earlier run left in the spool).
async fn open_evidence(
    cfg: &Config,
    label: &str,
) -> Result<(EvidenceWriter, Option<Uploader>), RunError> {
    let queue = crate::sink::evidence::queue_lines(cfg.services.len());
    let (segments, uploader) = match &cfg.evidence_s3 {
        None => (None, None),
        Some(s3) => {
            let spool = segments::spool_beside(&cfg.evidence_path);
            let wake = std::sync::Arc::new(tokio::sync::Notify::new());
            let (notes_tx, notes) = std::sync::mpsc::sync_channel(queue);
            let service = segments::service_dir(cfg);
            // A fresh disk (no local evidence): numbering goes on from this prober's newest
            // segment in S3.
            let fresh = std::fs::metadata(&cfg.evidence_path).map_or(true, |m| m.len() == 0);
            let seq_floor = if fresh {
                let dir = format!("{service}/{}/", cfg.prober_id);
                crate::sink::evidence_s3::last_uploaded_seq(s3, &dir)
                    .await
                    .unwrap_or(0)
            } else {
                0
            };
            let spec = segments::SegmentSpec {
                spool: spool.clone(),
                service,
                prober: cfg.prober_id.clone(),
                segment: s3.segment,
                max_bytes: s3.segment_max_bytes,
                spool_max_bytes: s3.spool_max_bytes,
            };
            let out = SegmentOutput {
                spec,
                wake: wake.clone(),
                notes,
                seq_floor,
            };
            let up = Uploader::start(s3, spool, wake, notes_tx).await;
            (Some(out), Some(up))
        }
    };
    let evidence = EvidenceWriter::open_with(
        &cfg.evidence_path,
        (label, &cfg.prober_id),
        cfg.evidence_max_bytes,
        queue,
        segments,
    )
    .map_err(|source| RunError::Evidence {
        path: cfg.evidence_path.display().to_string(),
        source,
    })?;
    Ok((evidence, uploader))
}

fn log_started(shell: &mut Shell, fleet: &Fleet, label: &str) {
    let cfg = &fleet.cfg;
    let state = match shell.stores.values().collect::<Vec<_>>()[..] {
        [one] => one.location(),
        ref many => format!("{} control documents", many.len()),
    };
    let started = Started {
        label: label.to_string(),
        services: cfg.services.len() as u64,
        unavailable: (cfg.services.len() - fleet.live.len()) as u64,
        prober: cfg.prober_id.clone(),
        instance: shell.instance.clone(),
        branches: fleet.live.values().map(|l| l.loops.len() as u64).sum(),
        publish_interval: crate::clock::fmt_duration(cfg.publish.interval),
        sinks: format!("{:?}", cfg.publish.sinks),
        state,
        evidence: cfg.evidence_path.display().to_string(),
    };
    shell.feed(Input::Started(Box::new(started)));
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
    // The first beat at once: `health` is good from the loop's first turn.
    let mut beats = interval_at(Instant::now(), crate::heartbeat::EVERY);
    beats.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut heartbeat = opts.heartbeat.clone().map(heartbeat::Heartbeat::new);
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
            _ = beats.tick(), if heartbeat.is_some() => {
                if let Some(h) = heartbeat.as_mut() {
                    h.beat();
                }
            }
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
    // 300 ms before `hard_end` so the evidence can still be closed (1 s with `[evidence.s3]`,
    // so its last segment can still be uploaded).
    let reserve = if w.uploader.is_some() { 1_000 } else { 300 };
    let final_deadline = grace_end
        .max(Instant::now() + Duration::from_millis(1_000))
        .min(hard_end - Duration::from_millis(reserve));
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
    if let Some(up) = w.uploader.take() {
        // The segment the writer closed last goes up in what is left before `hard_end`.
        up.finish(hard_end).await;
    }
    // Served up to here: a scrape during the grace period sees the final state.
    if let Some(s) = w.serving.take() {
        s.stop();
    }
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
            class: crate::record::StoreSyncFailureClass::Timeout,
            started: None,
        });
    }
}
