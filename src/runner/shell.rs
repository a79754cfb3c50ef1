//! The effect executor of a run: feeds inputs to the fold and carries out what comes back
//! (evidence records, batches for the sink queues, log events), and runs the store syncs whose
//! results go back in.

use crate::clock::Clock;
use crate::control::{
    self, Approval, ControlDoc, Decision, InstanceWatch, Marker, OtherInstance, Override,
};
use crate::fold::{Batch, Effect, Fold, Input, Level, Log, Pacing, ServiceId};
use crate::readiness::Millis;
use crate::record::{DuplicateProber, StoreSyncFailureClass};
use crate::scheduler::BranchEvent;
use crate::sink::evidence::EvidenceWriter;
use crate::sink::{Queued, SinkQueue};
use crate::state::{StateError, Store};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a background sync produced: the document, this prober's decisions to take and drill
/// markers to record, and the other instance it found under this prober id.
pub(super) struct SyncOutcome {
    /// The service whose document it is.
    pub(super) service: ServiceId,
    /// Where the document is.
    location: String,
    started: Millis,
    result: Result<(ControlDoc, SyncOut), StateError>,
    /// The class of a failure the error alone does not tell (the sync's bound ran out, the
    /// task ended); `None`: the error's own ([`sync_failure_class`]).
    class: Option<StoreSyncFailureClass>,
    found: Option<OtherInstance>,
}

/// What the sync closure hands back out: its decisions, the drill markers it took and the
/// overrides it dropped as set in the future.
type SyncOut = (
    Vec<(Approval, Decision)>,
    Vec<Marker>,
    Vec<(String, Override)>,
);

/// The fold and what executes its effects.
pub(super) struct Shell {
    pub(super) fold: Fold,
    pub(super) evidence: EvidenceWriter,
    /// Each sink's queue with the namespace it publishes to.
    pub(super) sinks: Vec<(String, SinkQueue)>,
    pub(super) clock: Clock,
    /// The store of each running service's control document.
    pub(super) stores: BTreeMap<ServiceId, Store>,
    pub(super) prober: String,
    /// A batch's window: one publish interval.
    pub(super) publish_window: Duration,
    /// How long a sync may take before it counts as failed.
    pub(super) sync_bound: Duration,
    /// Whether another process saves under this prober id, per running service's store.
    pub(super) instances: BTreeMap<ServiceId, InstanceWatch>,
    /// This process's instance id.
    pub(super) instance: String,
    /// The pace of each running branch loop with adaptive probing, by service and branch.
    pub(super) paces: BTreeMap<(ServiceId, String), Pace>,
    /// With `[serve]`: what the endpoint shows, kept up to date here (plain data handed over).
    pub(super) served: Option<Arc<crate::serve::Feed>>,
}

/// What sets a branch loop's pace: the `watch` it reads (true: suspect, at its suspect
/// interval).
pub(super) struct Pace {
    tx: watch::Sender<bool>,
}

impl Pace {
    /// Sets the loop's pace (the fold says so in a log line).
    fn set(&self, suspect: bool) {
        self.tx.send_replace(suspect);
    }
}

impl Shell {
    /// Keep the store of running service `id`.
    pub(super) fn add_store(&mut self, id: ServiceId, store: Store) {
        self.stores.insert(id, store);
        let watch = InstanceWatch::new(self.instance.clone());
        self.instances.insert(id, watch);
    }

    /// Forget the store of a removed service (after its final sync was started).
    pub(super) fn remove_store(&mut self, id: ServiceId) {
        self.stores.remove(&id);
        self.instances.remove(&id);
        self.paces.retain(|(s, _), _| *s != id);
        if let Some(f) = &self.served {
            f.forget(id);
        }
    }

    /// Keep the pace of the branch loops just started for service `id` (with `probe`'s
    /// periods), each set from the fold: a branch already suspect starts at its suspect
    /// interval. Without adaptive probing nothing is kept: the loops keep their interval.
    pub(super) fn pace(
        &mut self,
        id: ServiceId,
        probe: &crate::config::ProbeConfig,
        loops: Vec<(String, watch::Sender<bool>)>,
    ) {
        let branches: Vec<String> = loops.iter().map(|(b, _)| b.clone()).collect();
        for branch in &branches {
            self.paces.remove(&(id, branch.clone()));
        }
        let pacing = probe.suspect_interval.map(|suspect_interval| {
            for (branch, tx) in loops {
                self.paces.insert((id, branch), Pace { tx });
            }
            let d = crate::clock::fmt_duration;
            Pacing {
                interval: d(probe.interval),
                suspect_interval: d(suspect_interval),
            }
        });
        self.feed(Input::Paced {
            service: id,
            branches,
            pacing,
        });
    }

    pub(super) fn feed(&mut self, input: Input) {
        let effects = self.fold.handle(input, self.clock.now_ms());
        self.execute(effects);
    }

    pub(super) fn execute(&mut self, effects: Vec<Effect>) {
        let now = self.clock.now_ms();
        for e in effects {
            if let Some(f) = &self.served {
                f.exposition.observe(&e, now);
            }
            match e {
                Effect::Publish(b) => self.hand(b),
                Effect::Record(at, service, r) => self.evidence.record_for(at, &service, &r),
                Effect::Log(l) => emit(&l),
                Effect::Pace {
                    id,
                    branch,
                    suspect,
                    ..
                } => {
                    if let Some(p) = self.paces.get(&(id, branch)) {
                        p.set(suspect.is_some());
                    }
                }
            }
        }
    }

    /// Queue a batch for every sink; a full or closed queue is the fold's to account.
    pub(super) fn hand(&mut self, mut b: Batch) {
        let deadline = Instant::now() + self.publish_window;
        let mut refused = Vec::new();
        let mine = |(ns, s): &&(String, SinkQueue)| *ns == b.namespace && b.sinks.contains(s.id());
        let mut queues = self.sinks.iter().filter(mine).peekable();
        while let Some((_, s)) = queues.next() {
            // The last sink takes the datums: a tick's batch is never held twice.
            let datums = match queues.peek() {
                Some(_) => b.datums.clone(),
                None => std::mem::take(&mut b.datums),
            };
            let q = Queued {
                id: b.id,
                datums,
                deadline,
            };
            if let Err(why) = s.offer(q) {
                refused.push((s.id().clone(), why));
            }
        }
        for (sink, why) in refused {
            self.feed(Input::SinkRefused {
                sink,
                batch: b.id,
                why,
            });
        }
    }

    /// An event of a branch of running service `service`.
    pub(super) fn on_branch_event(&mut self, (service, ev): (usize, BranchEvent)) {
        self.feed(match ev {
            BranchEvent::Attempt(a) => Input::Attempt(service, a),
            BranchEvent::Abandoned { branch, seq } => Input::Abandoned {
                service,
                branch,
                seq,
            },
            BranchEvent::StableName(record, selected) => Input::StableName {
                service,
                record,
                selected,
            },
        });
    }

    /// An event of a loop a reload stopped, for service `service` (by name: it may be gone):
    /// recorded, never folded into a window.
    pub(super) fn on_stopped_event(&mut self, service: &str, ev: BranchEvent) {
        let service = service.to_string();
        self.feed(match ev {
            BranchEvent::Attempt(attempt) => Input::StoppedAttempt { service, attempt },
            BranchEvent::Abandoned { branch, seq } => Input::CancelledByReload {
                service,
                branch,
                seq,
            },
            // A stable-name round of a loop a reload stopped or replaced: evidence of nothing running.
            BranchEvent::StableName(..) => return,
        });
    }

    /// A readiness deadline came: evaluate the branches it is due for at it (or now, if later),
    /// so a rule fires when its time runs out rather than at the next attempt or tick.
    pub(super) fn wake(&mut self, deadline: Millis) {
        let now = self.clock.now_ms().max(deadline);
        let effects = self.fold.handle(Input::Wake, now);
        self.execute(effects);
    }

    pub(super) fn tick(&mut self, last: bool) {
        let now = self.clock.now_ms();
        self.evidence.reopen_if_replaced(now);
        if let Some(f) = &self.served {
            f.ticked(now);
        }
        self.feed(Input::Tick { last });
    }

    /// Start a sync with the store in the background: save this prober's readiness, decide new
    /// approvals, read overrides, in one conditional read-modify-write of the control document
    /// ([`control::sync_prober`]). The run loop goes on meanwhile (a slow or stuck store never
    /// stalls probing or publishing); [`finish_sync`](Self::finish_sync) takes the result.
    pub(super) fn sync_task(
        &self,
        service: usize,
    ) -> impl std::future::Future<Output = SyncOutcome> + Send + 'static {
        let now = self.clock.now_ms();
        let req = self.fold.sync_request(service);
        let me = self.prober.clone();
        let instance = self.instance.clone();
        // Only services with a store are synced (the caller's loops go over `stores`).
        let store = self.stores.get(&service).cloned();
        let bound = self.sync_bound;
        let out: Arc<Mutex<(SyncOut, Option<OtherInstance>)>> = Arc::default();
        let out2 = out.clone();
        async move {
            let Some(store) = store else {
                return SyncOutcome {
                    service,
                    location: String::new(),
                    started: now,
                    result: Err(StateError::Io {
                        location: String::new(),
                        reason: "no store for this service".into(),
                    }),
                    class: None,
                    found: None,
                };
            };
            // The store may run the change more than once (a conflicting writer): each run
            // starts again from the copy taken now.
            let update = store.update(move |doc| {
                let mut readiness = req.readiness.clone();
                let found = control::claim_instance(doc, &me, &instance);
                let dropped = control::dropped_ahead(doc, now);
                let decided = control::sync_prober(doc, &me, &mut readiness, &req.recorded, now);
                let markers = control::take_markers(doc, &me, &req.markers, now);
                *out2.lock().unwrap_or_else(|p| p.into_inner()) =
                    ((decided, markers, dropped), found);
                Ok(())
            });
            let (result, class) = match tokio::time::timeout(bound, update).await {
                Ok(r) => (r, None),
                Err(_) => {
                    let e = StateError::Io {
                        location: store.location(),
                        reason: format!(
                            "no answer within {}; probing and publishing go on",
                            crate::clock::fmt_duration(bound)
                        ),
                    };
                    (Err(e), Some(StoreSyncFailureClass::Timeout))
                }
            };
            let (taken, found) =
                std::mem::take(&mut *out.lock().unwrap_or_else(|p| p.into_inner()));
            SyncOutcome {
                service,
                location: store.location(),
                started: now,
                result: result.map(|doc| (doc, taken)),
                class,
                found,
            }
        }
    }

    /// Take a finished sync of service `service`'s document.
    pub(super) fn finish_sync(
        &mut self,
        service: usize,
        joined: Result<SyncOutcome, tokio::task::JoinError>,
    ) {
        let location = self.stores.get(&service).map(Store::location);
        let outcome = joined.unwrap_or_else(|e| SyncOutcome {
            service,
            location: location.clone().unwrap_or_default(),
            started: self.clock.now_ms(),
            result: Err(StateError::Io {
                location: location.clone().unwrap_or_default(),
                reason: format!("sync task ended: {e}"),
            }),
            class: None,
            found: None,
        });
        let Some(watch) = self.instances.get_mut(&service) else {
            // The final save of a service a reload removed.
            let saved = match outcome.result {
                Ok(_) => Ok(outcome.location),
                Err(e) => Err(e.to_string()),
            };
            self.feed(Input::RemovedSaved(saved));
            return;
        };
        let duplicate = watch.after_sync(outcome.result.is_ok(), outcome.found);
        if let Some(other) = duplicate {
            self.duplicate(service, other);
        }
        if let (Some(f), Ok((doc, _))) = (&self.served, &outcome.result) {
            f.synced(service, doc);
        }
        self.feed(match outcome.result {
            Ok((doc, (decided, markers, dropped))) => Input::SyncDone {
                service,
                doc,
                decided,
                markers,
                dropped,
            },
            Err(e) => Input::SyncFailed {
                service,
                class: outcome.class.unwrap_or_else(|| sync_failure_class(&e)),
                error: e.to_string(),
                started: Some(outcome.started),
            },
        });
    }
}

impl Shell {
    /// Another process saves under this prober id: the fold says so at ERROR and in the
    /// evidence, at every sync that finds it.
    fn duplicate(&mut self, service: usize, other: OtherInstance) {
        let store = self
            .stores
            .get(&service)
            .map(Store::location)
            .unwrap_or_default();
        self.feed(Input::DuplicateProber(Box::new(DuplicateProber {
            state_store: store,
            instance: self.instance.clone(),
            other_instance: other.instance,
            other_saved_at: other.saved_at,
        })));
    }
}

/// The class of a store error, for `StoreSyncFailures`: one place for the conversion.
fn sync_failure_class(e: &StateError) -> StoreSyncFailureClass {
    match e {
        StateError::Io { .. } => StoreSyncFailureClass::Io,
        StateError::Corrupt { .. } => StoreSyncFailureClass::Corrupt,
        StateError::TooLarge { .. } => StoreSyncFailureClass::TooLarge,
        StateError::Contended { .. } => StoreSyncFailureClass::Contended,
    }
}

/// Display a text field when it is set.
fn shown(v: &Option<String>) -> Option<tracing::field::DisplayValue<&str>> {
    v.as_deref().map(tracing::field::display)
}

/// Emit a fold's log event as a tracing event of its level, under the `readyprobe::runner`
/// target (which log filters name).
fn emit(log: &Log) {
    macro_rules! at {
        ($level:expr) => {{
            let f = &log.fields;
            let m = f.more.as_deref().cloned().unwrap_or_default();
            tracing::event!(
                target: "readyprobe::runner",
                $level,
                service = shown(&f.service),
                branch = shown(&f.branch),
                seq = f.seq,
                step = shown(&f.step),
                class = shown(&f.class),
                detail = shown(&f.detail),
                from = shown(&f.from),
                to = shown(&f.to),
                state = shown(&f.state),
                reason = shown(&f.reason),
                failures = shown(&f.failures),
                by = shown(&f.by),
                force = shown(&f.force),
                expires_at = shown(&f.expires_at),
                sink = shown(&f.sink),
                datums = f.datums,
                tries = f.tries,
                error = shown(&f.error),
                attempts = shown(&f.attempts),
                transitions = f.transitions,
                states = shown(&f.states),
                dropped_batches = shown(&f.dropped_batches),
                problems = shown(&f.problems),
                added = shown(&f.added),
                removed = shown(&f.removed),
                changed = shown(&f.changed),
                unavailable = shown(&f.unavailable),
                services = f.services,
                why = shown(&m.why),
                interval = shown(&m.interval),
                replaced = m.replaced,
                running = m.running,
                to_start = shown(&m.to_start),
                endpoints = shown(&m.endpoints),
                namespace = shown(&m.namespace),
                file = shown(&m.file),
                prober = shown(&m.prober),
                instance = shown(&m.instance),
                branches = m.branches,
                publish_interval = shown(&m.publish_interval),
                sinks = shown(&m.sinks),
                evidence = shown(&m.evidence),
                "unavailable" = m.unavailable_count,
                "{}",
                log.message
            )
        }};
    }
    match log.level {
        Level::Debug => at!(tracing::Level::DEBUG),
        Level::Info => at!(tracing::Level::INFO),
        Level::Warn => at!(tracing::Level::WARN),
        Level::Error => at!(tracing::Level::ERROR),
    }
}
