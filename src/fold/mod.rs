//! The decisions of a run, as a pure fold: each service's branches (readiness, tick
//! accumulators, override), restored snapshots, recorded approvals and fail-open flag, the run's
//! counters, and the account of every batch handed to a sink, shared by all services so that a
//! publish tick packs every service's datums into one batch per namespace.
//!
//! Attempts, publish ticks, store syncs and sink reports go in as data ([`Input`]) with the time;
//! what to publish, record and log comes out as data ([`Effect`]). No I/O, no clock reads, no
//! tasks, no logging: the runner executes the effects, in order.

use crate::control::{Approval, ControlDoc, Decision, Marker, Override};
use crate::datum::{Datum, Refusal, SinkId, SinkReport};
use crate::probe::{Attempt, Outcome};
use crate::readiness::{Millis, Policy, Readiness, ReadinessState, Suspect};
use crate::record::{
    AbandonCause, AttemptAbandoned, DuplicateProber, PublishFailureClass, PublishReason, Record,
    Reload, Restored, ServiceUnavailable, StableNameRecord, Start, StoreSyncFailureClass,
};
use std::collections::{BTreeMap, BTreeSet};

/// The sinks a service's datums go to, as [`crate::datum::sinks_of`] gives them.
pub type Sinks = Vec<SinkId>;

/// A service that could not be prepared: its name, namespace and sinks, to which its
/// `ServiceUnavailable` datum goes at every tick.
pub type Unavailable = (String, String, Sinks);

mod batches;
mod branches;
mod control;
mod services;
mod summary;

/// What a run did, for the caller's summary line and tests.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Why it stopped (`duration`, `SIGTERM`, `SIGINT`).
    pub stop_reason: String,
    /// Finished attempts per branch (keyed `service/branch` when the run has several services).
    pub attempts: BTreeMap<String, u64>,
    /// Attempts abandoned at shutdown.
    pub abandoned: u64,
    /// Readiness transitions, all branches together.
    pub transitions: u64,
    /// Batches dropped per sink (queue full, sink stopped, window closed, or abandoned at
    /// shutdown).
    pub dropped_batches: BTreeMap<String, u64>,
    /// Final state per branch (keyed as `attempts`).
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

/// One batch of datums for every sink. `id` is unique within a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// From 1.
    pub id: u64,
    pub datums: Vec<Datum>,
    pub reason: PublishReason,
    /// The sinks it is for, in config order (a CloudWatch sink per target).
    pub sinks: Vec<SinkId>,
    /// The CloudWatch namespace of its datums.
    pub namespace: String,
}

/// What goes into the fold.
#[derive(Debug)]
pub enum Input {
    /// A finished attempt of a branch of service `.0` (its index in [`Setup::services`]).
    Attempt(usize, Box<Attempt>),
    /// An attempt cut off by shutdown after the grace period; it does not count.
    Abandoned {
        /// Index of the service.
        service: usize,
        /// Branch name.
        branch: String,
        /// Its sequence number.
        seq: u64,
    },
    /// A publish tick: evaluate every branch, publish the tick's datums.
    Tick {
        /// True for the last tick of the run ([`PublishReason::Final`]).
        last: bool,
    },
    /// A readiness deadline ([`Fold::next_wakeup`]) came: evaluate every branch whose deadline
    /// has come. A transition publishes and records as at an attempt; no tick batch.
    Wake,
    /// A sync with the store finished: the document as written, and this prober's decisions on
    /// approvals it had not taken yet (from [`crate::control::sync_prober`]).
    SyncDone {
        /// Index of the service whose control document it is.
        service: usize,
        /// As this sync wrote it.
        doc: ControlDoc,
        /// Decisions to take, oldest approval first.
        decided: Vec<(Approval, Decision)>,
        /// Drill markers to record, oldest first (from [`crate::control::take_markers`]).
        markers: Vec<Marker>,
        /// Overrides this sync dropped from the document unapplied, by branch, because they were
        /// set in the future (from [`crate::control::dropped_ahead`]): each logged and recorded.
        dropped: Vec<(String, Override)>,
    },
    /// A sync with the store failed; probing and publishing go on.
    SyncFailed {
        /// Index of the service whose control document it is.
        service: usize,
        /// The store's error, in a sentence.
        error: String,
        /// Its class: the `Class` of the `StoreSyncFailures` datum at the next tick.
        class: StoreSyncFailureClass,
        /// When the sync started, ms since the epoch; `None` for the final sync, cut off by the
        /// end of the grace period.
        started: Option<Millis>,
    },
    /// A sink's queue refused batch `batch`.
    SinkRefused {
        sink: SinkId,
        /// [`Batch::id`].
        batch: u64,
        why: Refusal,
    },
    /// A sink's account of a batch.
    SinkReport(SinkReport),
    /// Service [`NewService::id`] starts, at the start of the run or brought by a reload (the
    /// one way in): its `start` record, then its branches restored from its control document
    /// when it has this prober's state.
    AddService(Box<NewService>),
    /// A reload removed service `.0`: its branches and datums end; events that still arrive for
    /// it are ignored.
    RemoveService(ServiceId),
    /// A reload changed the settings of a running service.
    ChangeService(Box<ServiceChange>),
    /// The services that could not be prepared, replacing the list: each gets a
    /// `ServiceUnavailable` datum at every tick, to its own targets.
    SetUnavailable(Vec<Unavailable>),
    /// An attempt of a branch loop a reload stopped (its service removed, its branch restarted
    /// or removed) that finished before the loop stopped: recorded and counted for `service`
    /// (by name: a removed service is gone from the fold), never folded into a window.
    StoppedAttempt {
        /// Service name.
        service: String,
        attempt: Box<Attempt>,
    },
    /// A round of the stable-name probe of service `service`: recorded (evidence only, it never
    /// reaches a branch's window); ignored when the service is gone.
    StableName {
        /// Index of the service.
        service: ServiceId,
        record: Box<StableNameRecord>,
        /// Its `SelectedBranch` value (1 PRIMARY, 2 SECONDARY, 0 neither), published at every
        /// tick until the next round (and its `StableNameSuccess`, from the record's end-to-end
        /// attempt, when it made one).
        selected: f64,
    },
    /// A reload stopped the service's stable-name loop: its `SelectedBranch` and
    /// `StableNameSuccess` datums stop until a round of a new loop comes.
    StableNameStopped {
        /// Index of the service.
        service: ServiceId,
    },
    /// A service of the config cannot start (its inputs or control document unavailable): it
    /// is not probed. Recorded (`service_unavailable`) and said at ERROR.
    ServiceUnavailable {
        /// Service name.
        service: String,
        /// Why, one sentence each.
        problems: Vec<String>,
    },
    /// A sync found another process saving under this prober id: recorded
    /// (`duplicate_prober`) and said at ERROR, at every sync that finds it.
    DuplicateProber(Box<DuplicateProber>),
    /// A reload was applied or refused: recorded (`reload`) and said at INFO or ERROR.
    Reloaded {
        /// What it did, or why not.
        record: Box<Reload>,
        /// The services running after it.
        services: usize,
    },
    /// An attempt cut off because a reload stopped its loop: recorded as abandoned with cause
    /// `reload`; it counts in no window.
    CancelledByReload {
        /// Service name.
        service: String,
        /// Branch name.
        branch: String,
        /// Its sequence number.
        seq: u64,
    },
    /// Branch loops of service `service` started (at its start, or a reload's change), each
    /// paced by the shell from now on when `pacing` is set (adaptive probing on), else at its
    /// interval: those already suspect are paced at their suspect interval at once.
    Paced {
        /// Index of the service.
        service: ServiceId,
        /// The branches whose loops started.
        branches: Vec<String>,
        /// Their periods; `None` when adaptive probing is off.
        pacing: Option<Pacing>,
    },
    /// The run started, its services in the fold: said once at INFO (`readyprobe started`).
    Started(Box<Started>),
    /// Files of an earlier state format in the state directory (paths): each said at WARN and
    /// ignored; readiness continues from the control documents.
    EarlierStateFiles(Vec<String>),
    /// A config read again came while a reload is being prepared: it waits for it.
    ReloadWaiting {
        /// True when it replaced a config that was waiting already.
        replaced: bool,
    },
    /// A reload was admitted: its services are prepared beside the run.
    ReloadStaging {
        /// Running services it prepares again.
        running: usize,
        /// Running services whose settings it changes.
        changed: Vec<String>,
        /// Services it starts.
        to_start: Vec<String>,
    },
    /// A reload's plan is about to apply: the new config's warnings and its likely renames,
    /// each said at WARN.
    ReloadPlanned {
        /// The new config's warnings, one sentence each.
        warnings: Vec<String>,
        /// Removed services whose endpoints an added one probes.
        renames: Vec<Rename>,
    },
    /// No service publishes to these namespaces any more: their sinks send what they hold and
    /// stop.
    NamespacesRetired(Vec<String>),
    /// The final save of a service a reload removed finished: where its state was saved, or
    /// the store's error in a sentence.
    RemovedSaved(Result<String, String>),
}

/// The two periods of a branch loop with adaptive probing ([`Input::Paced`]), as durations are
/// written in log lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Pacing {
    /// Between two attempts.
    pub interval: String,
    /// Between two attempts while suspect.
    pub suspect_interval: String,
}

/// What the `readyprobe started` line says ([`Input::Started`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Started {
    /// The run's label (the one service's name, or a summary of several).
    pub label: String,
    /// Services of the config.
    pub services: u64,
    /// Services of the config that could not start.
    pub unavailable: u64,
    pub prober: String,
    /// This process's instance id.
    pub instance: String,
    /// Branch loops running.
    pub branches: u64,
    /// The publish interval, as durations are written.
    pub publish_interval: String,
    /// The sinks, as a list.
    pub sinks: String,
    /// Where the control documents are (one location, or how many).
    pub state: String,
    /// The evidence file.
    pub evidence: String,
}

/// A likely rename a reload makes ([`Input::ReloadPlanned`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Rename {
    /// The removed service's name.
    pub removed: String,
    /// The added service's name.
    pub added: String,
    /// The endpoints both probe.
    pub endpoints: Vec<String>,
}

/// A service's id within a run: its index in [`Setup::services`] for those present at start,
/// then one more for each service a reload adds. Never reused, so an event of a removed
/// service can never be taken for another's.
pub type ServiceId = usize;

/// A service that starts ([`Input::AddService`]).
#[derive(Debug, Clone)]
pub struct NewService {
    /// Its id; not used before in this run.
    pub id: ServiceId,
    /// Service name (the `Service` dimension).
    pub service: String,
    /// The CloudWatch namespace of its datums.
    pub namespace: String,
    /// Its sinks.
    pub sinks: Sinks,
    /// The readiness policy of its branches.
    pub policy: Policy,
    /// Branch names, in config order.
    pub branches: Vec<String>,
    /// Where its control document lives, for log messages.
    pub store_location: String,
    /// Its control document as loaded.
    pub doc: ControlDoc,
    /// Its `start` record as the shell knows it (settings, store); the fold fills in
    /// `restored` and records it before anything else of the service.
    pub start: Box<Start>,
    /// Whether a reload brought it (logged as added) rather than the start of the run.
    pub by_reload: bool,
}

/// New settings of a running service.
#[derive(Debug, Clone)]
pub struct ServiceChange {
    /// Its id.
    pub id: ServiceId,
    /// The CloudWatch namespace of its datums from now on.
    pub namespace: String,
    /// Its sinks from now on.
    pub sinks: Sinks,
    /// The readiness policy of its branches from now on.
    pub policy: Policy,
    /// Its branches from now on, in config order; a running branch not named here is removed.
    pub branches: Vec<BranchChange>,
}

/// One branch of a [`ServiceChange`].
#[derive(Debug, Clone)]
pub struct BranchChange {
    /// Branch name.
    pub name: String,
    /// True when its target changed (endpoint, port or probe kind): it keeps its readiness
    /// state, but its window and holding clocks start afresh. False: its readiness is carried
    /// whole (state, window, holding clocks), judged by the new policy from now on
    /// ([`crate::reload_plan::BranchPlan::retarget`]). A branch that is new to the service
    /// starts in the policy's initial state either way.
    pub reset: bool,
}

/// Severity of a [`Log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Per-attempt and per-batch detail.
    Debug,
    /// Normal operation.
    Info,
    /// Needs attention.
    Warn,
    /// Something is broken.
    Error,
}

/// The structured fields a [`Log`] may carry, named as the log's keys; `None` fields are left
/// out. Values are display text, except counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    pub service: Option<String>,
    pub branch: Option<String>,
    pub seq: Option<u64>,
    pub step: Option<String>,
    pub class: Option<String>,
    pub detail: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub state: Option<String>,
    pub reason: Option<String>,
    pub failures: Option<String>,
    pub by: Option<String>,
    pub force: Option<String>,
    pub expires_at: Option<String>,
    pub sink: Option<String>,
    pub datums: Option<u64>,
    pub tries: Option<u64>,
    pub error: Option<String>,
    pub attempts: Option<String>,
    pub transitions: Option<u64>,
    pub states: Option<String>,
    pub dropped_batches: Option<String>,
    pub problems: Option<String>,
    pub added: Option<String>,
    pub removed: Option<String>,
    pub changed: Option<String>,
    pub unavailable: Option<String>,
    pub services: Option<u64>,
    /// The keys of the run's rarer lines (pace, reload, start), boxed so that an attempt's
    /// line stays small.
    pub more: Option<Box<MoreFields>>,
}

/// The keys of a [`Fields`] that few lines carry; `None` fields are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MoreFields {
    pub why: Option<String>,
    pub interval: Option<String>,
    pub replaced: Option<bool>,
    pub running: Option<u64>,
    pub to_start: Option<String>,
    pub endpoints: Option<String>,
    pub namespace: Option<String>,
    pub file: Option<String>,
    pub prober: Option<String>,
    pub instance: Option<String>,
    pub branches: Option<u64>,
    pub publish_interval: Option<String>,
    pub sinks: Option<String>,
    pub evidence: Option<String>,
    /// A count of services that cannot start, logged as `unavailable` (the key
    /// [`Fields::unavailable`] names, as a number).
    pub unavailable_count: Option<u64>,
}

/// [`Fields`] with only `more` set.
fn more(m: MoreFields) -> Fields {
    Fields {
        more: Some(Box::new(m)),
        ..Fields::default()
    }
}

/// A log event for the runner to emit.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    pub level: Level,
    pub message: String,
    pub fields: Fields,
}

/// What comes out of the fold, to be executed in order.
#[derive(Debug)]
pub enum Effect {
    /// Hand the batch to every sink; tell the fold about each refusal
    /// ([`Input::SinkRefused`]) and, later, each report ([`Input::SinkReport`]).
    Publish(Batch),
    /// Append an evidence record observed at the given instant (ms since the epoch), for the
    /// named service (`*`: the whole run, when it has several services).
    Record(Millis, String, Record),
    /// Emit a log event.
    Log(Log),
    /// Branch `branch` of service `id` became suspect (`Some`: why) or stopped being suspect
    /// (`None`): probe it at its suspect interval, or at its interval again. The line that
    /// says so follows it (an [`Effect::Log`]) when the branch's loop is paced.
    Pace {
        id: ServiceId,
        branch: String,
        suspect: Option<Suspect>,
    },
}

/// What the fold needs to start.
#[derive(Debug, Clone, Copy)]
pub struct Setup<'a> {
    /// This prober's id (its entry in each control document).
    pub prober: &'a str,
    /// The services, in config order; their index names them in [`Input`].
    pub services: &'a [ServiceSetup<'a>],
    /// Services that could not be prepared (name, namespace): a `ServiceUnavailable` datum for
    /// each at every tick.
    pub unavailable: &'a [Unavailable],
    /// Sink names, in config order.
    pub sinks: &'a [&'static str],
    /// Which metrics the sinks get (`publish.metrics`).
    pub metrics: crate::contract::MetricsProfile,
}

/// One service at start.
#[derive(Debug, Clone, Copy)]
pub struct ServiceSetup<'a> {
    /// Service name (the `Service` dimension).
    pub service: &'a str,
    /// The CloudWatch namespace of its datums.
    pub namespace: &'a str,
    /// Its sinks.
    pub sinks: &'a [SinkId],
    /// The readiness policy of its branches.
    pub policy: &'a Policy,
    /// Branch names, in config order (the order of each tick's datums).
    pub branches: &'a [String],
    /// Where its control document lives, for log messages.
    pub store_location: &'a str,
    /// Its control document as loaded.
    pub doc: &'a ControlDoc,
}

/// Accumulators of one branch between publish ticks.
#[derive(Debug, Default)]
struct TickAcc {
    attempts: u64,
    failed: u64,
    /// Durations (ms) of the steps that succeeded, per step name.
    steps: BTreeMap<&'static str, Vec<f64>>,
    /// `notAfter` of the leaf certificate last seen, ms since the epoch.
    cert_not_after: Option<Millis>,
}

/// One branch's state.
#[derive(Debug)]
struct Branch {
    /// Index of its service.
    svc: usize,
    name: String,
    readiness: Readiness,
    acc: TickAcc,
    /// The override in force, as last read from the store; dropped once it expires.
    ov: Option<Override>,
    /// Whether the runner was last told (or will be asked, [`Fold::suspect`]) that it is
    /// suspect: kept equal to `readiness.suspect().is_some()` after every input.
    suspect: bool,
}

impl Branch {
    /// The published readiness at `now`: an active override's value, else the computed one.
    fn effective(&self, now: Millis) -> Option<f64> {
        crate::control::effective_value(self.readiness.published_value(), self.ov.as_ref(), now)
    }
}

/// A batch handed to a sink and not yet reported.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    reason: PublishReason,
    datums: usize,
    /// [`Batch::id`].
    batch: u64,
}

/// What the fold keeps per service besides its branches.
#[derive(Debug)]
struct Svc {
    name: String,
    namespace: String,
    sinks: Sinks,
    restored: Vec<Restored>,
    /// Approval ids whose decision this run has recorded.
    recorded: BTreeSet<String>,
    /// Drill marker ids this prober has recorded (this run, or an earlier one per the document).
    markers: BTreeSet<String>,
    /// Whether the current all-unready spell has been logged (re-armed when a branch is ready).
    both_unready_logged: bool,
    /// The `SelectedBranch` value of the latest stable-name round; `None` before the first.
    selected_branch: Option<f64>,
    /// The `StableNameSuccess` value of the latest stable-name round: `None` before the first
    /// and when that round made no end-to-end attempt.
    stable_name_success: Option<f64>,
    /// Failed store syncs per class since the last tick, for the `StoreSyncFailures` datums.
    sync_failures: BTreeMap<StoreSyncFailureClass, u64>,
    /// When the span its next tick's counts cover began: its previous tick, or when it started.
    counted_since: Millis,
    /// The periods of each branch loop with adaptive probing, by branch ([`Input::Paced`]):
    /// what a pace change of the branch says.
    pacing: BTreeMap<String, Pacing>,
}

/// Every branch of every service, and the run's counters.
#[derive(Debug)]
pub struct Fold {
    /// By id, so in config order for the services present at start, then in order added.
    services: BTreeMap<ServiceId, Svc>,
    /// Services that could not be prepared: (name, namespace).
    unavailable: Vec<Unavailable>,
    /// Each service's branches, in config order: a service's work (a tick, a sync, an
    /// attempt) touches its own branches only, never every branch of the run.
    branches: BTreeMap<ServiceId, Vec<Branch>>,
    sinks: Vec<&'static str>,
    /// Which metrics the sinks get: every batch is filtered by it before it is handed out.
    metrics: crate::contract::MetricsProfile,
    /// Batches handed to a sink and not yet reported, per (sink, batch id).
    outstanding: BTreeMap<(SinkId, u64), Outstanding>,
    /// Batches handed per sink.
    handed: BTreeMap<SinkId, u64>,
    /// Failed batches per class since the last tick, for the `PublishFailures` datums.
    failures: BTreeMap<PublishFailureClass, u64>,
    /// When the span `failures` covers began: the previous tick, or the start.
    failures_since: Millis,
    next_batch: u64,
    summary: RunSummary,
    effects: Vec<Effect>,
    /// This prober's id (its entry in each control document).
    prober: String,
    /// [`next_wakeup`](Self::next_wakeup) as of the latest input, when known: an attempt only
    /// brings its own branch's deadline in, so a run of attempts never scans every branch. It may
    /// be early (a deadline an attempt moved on): that wake-up finds nothing and rescans.
    wakeup: Option<Option<Millis>>,
    /// Branches a reload's changes dropped from running services, for its `reload` record.
    removed_branches: Vec<crate::record::RemovedBranch>,
}

/// The fold's view of its branches at the start of a sync with the store.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    /// A copy of each branch's readiness.
    pub readiness: BTreeMap<String, Readiness>,
    /// Approval ids whose decision this run has recorded.
    pub recorded: BTreeSet<String>,
    /// Drill marker ids this prober has recorded.
    pub markers: BTreeSet<String>,
}

fn log(level: Level, message: impl Into<String>, fields: Fields) -> Effect {
    Effect::Log(Log {
        level,
        message: message.into(),
        fields,
    })
}

fn branch_fields(service: &str, branch: &str) -> Fields {
    Fields {
        service: Some(service.to_string()),
        branch: Some(branch.to_string()),
        ..Fields::default()
    }
}

fn service_fields(service: &str) -> Fields {
    Fields {
        service: Some(service.to_string()),
        ..Fields::default()
    }
}

impl Fold {
    /// The name of service `svc` (empty once removed).
    pub fn service_name(&self, svc: ServiceId) -> &str {
        self.svc_name(svc)
    }

    /// Whether branch `branch` of service `svc` is suspect now, and why (for a loop starting).
    pub fn suspect(&self, svc: ServiceId, branch: &str) -> Option<Suspect> {
        let b = self.branches.get(&svc)?.iter().find(|b| b.name == branch)?;
        b.readiness.suspect()
    }

    /// The branches of service `svc` whose state was restored from the store, for its start
    /// record.
    pub fn restored(&self, svc: usize) -> &[Restored] {
        self.services.get(&svc).map_or(&[], |s| &s.restored)
    }

    /// A copy of what a sync of service `svc`'s document needs ([`crate::control::sync_prober`]).
    pub fn sync_request(&self, svc: usize) -> SyncRequest {
        SyncRequest {
            readiness: self
                .branches
                .get(&svc)
                .into_iter()
                .flatten()
                .map(|b| (b.name.clone(), b.readiness.clone()))
                .collect(),
            recorded: self
                .services
                .get(&svc)
                .map(|s| s.recorded.clone())
                .unwrap_or_default(),
            markers: self
                .services
                .get(&svc)
                .map(|s| s.markers.clone())
                .unwrap_or_default(),
        }
    }

    /// The service a record about the whole run is written for: the one service's name, or
    /// `*` when the run has several.
    fn run_label(&self) -> String {
        match self.services.values().next() {
            Some(one) if self.services.len() == 1 => one.name.clone(),
            _ => "*".to_string(),
        }
    }

    /// The summary key of a branch: its name, or `service/branch` with several services.
    fn key(&self, svc: usize, branch: &str) -> String {
        if self.services.len() == 1 {
            branch.to_string()
        } else {
            format!("{}/{branch}", self.svc_name(svc))
        }
    }

    /// Take one input at `now` (ms since the epoch); returns what to do, in order.
    pub fn handle(&mut self, input: Input, now: Millis) -> Vec<Effect> {
        let cached = self.wakeup.take();
        let keeps = keeps_deadline(&input);
        match input {
            Input::Attempt(svc, a) => {
                let branch = self.branch_ix(svc, &a.branch);
                self.on_attempt(svc, a);
                let own = branch
                    .and_then(|i| self.branches.get(&svc)?.get(i))
                    .and_then(|b| b.readiness.next_deadline());
                self.wakeup = cached.map(|c| c.into_iter().chain(own).min());
            }
            Input::Abandoned {
                service,
                branch,
                seq,
            } => self.abandoned(service, branch, seq, now),
            Input::Tick { last } => {
                let reason = if last {
                    PublishReason::Final
                } else {
                    PublishReason::Tick
                };
                self.tick(reason, now);
            }
            Input::Wake => self.wake(now),
            Input::SyncDone {
                service,
                doc,
                decided,
                markers,
                dropped,
            } => {
                self.record_markers(service, &doc, markers, now);
                self.sync_done(service, &doc, decided, now);
                self.dropped_ahead(service, dropped, now);
            }
            Input::SyncFailed {
                service,
                error,
                class,
                started,
            } => self.sync_failed(service, error, class, started, now),
            Input::SinkRefused { sink, batch, why } => self.refused(sink, batch, why, now),
            Input::SinkReport(r) => self.on_report(r, now),
            Input::AddService(n) => self.add_service(&n, now),
            Input::RemoveService(svc) => self.remove_service(svc),
            Input::ChangeService(c) => self.change_service(*c),
            Input::SetUnavailable(list) => self.unavailable = list,
            Input::ServiceUnavailable { service, problems } => {
                self.service_unavailable(service, problems, now);
            }
            Input::Reloaded { record, services } => self.reloaded(*record, services, now),
            Input::DuplicateProber(d) => self.duplicate_prober(*d, now),
            Input::StoppedAttempt { service, attempt } => self.stopped_attempt(service, attempt),
            Input::StableName {
                service,
                record,
                selected,
            } => self.stable_name(service, *record, selected, now),
            Input::StableNameStopped { service } => {
                if let Some(s) = self.services.get_mut(&service) {
                    s.selected_branch = None;
                    s.stable_name_success = None;
                }
            }
            Input::CancelledByReload {
                service,
                branch,
                seq,
            } => self.cancelled_by_reload(service, branch, seq, now),
            Input::Paced {
                service,
                branches,
                pacing,
            } => self.paced(service, branches, pacing),
            Input::Started(s) => self.started(*s),
            Input::EarlierStateFiles(files) => self.earlier_state_files(files),
            Input::ReloadWaiting { replaced } => self.reload_waiting(replaced),
            Input::ReloadStaging {
                running,
                changed,
                to_start,
            } => self.reload_staging(running, &changed, &to_start),
            Input::ReloadPlanned { warnings, renames } => self.reload_planned(warnings, renames),
            Input::NamespacesRetired(list) => self.namespaces_retired(list),
            Input::RemovedSaved(r) => self.removed_saved(r),
        }
        if keeps {
            self.wakeup = cached;
        }
        std::mem::take(&mut self.effects)
    }

    /// The stable name's end-to-end check: which branch it selected and whether it succeeded.
    fn stable_name(
        &mut self,
        service: ServiceId,
        record: StableNameRecord,
        selected: f64,
        now: Millis,
    ) {
        if let Some(s) = self.services.get_mut(&service) {
            s.selected_branch = Some(selected);
            s.stable_name_success = record.end_to_end.as_ref().map(|e| {
                if e.outcome == Outcome::Success {
                    1.0
                } else {
                    0.0
                }
            });
            self.record_for(service, now, Record::StableName(record));
        }
    }

    /// A record about the whole run.
    fn record(&mut self, at: Millis, record: Record) {
        let label = self.run_label();
        self.effects.push(Effect::Record(at, label, record));
    }

    /// A record about service `svc`.
    fn record_for(&mut self, svc: usize, at: Millis, record: Record) {
        let name = self.services.get(&svc).map(|s| s.name.clone());
        let name = name.unwrap_or_else(|| self.run_label());
        self.effects.push(Effect::Record(at, name, record));
    }

    /// The index of service `svc`'s branch `name` among its branches.
    fn branch_ix(&self, svc: ServiceId, name: &str) -> Option<usize> {
        self.branches.get(&svc)?.iter().position(|b| b.name == name)
    }

    /// Branch `i` of service `svc`.
    fn branch_mut(&mut self, svc: ServiceId, i: usize) -> Option<&mut Branch> {
        self.branches.get_mut(&svc)?.get_mut(i)
    }

    /// How many branches service `svc` has.
    fn branch_count(&self, svc: ServiceId) -> usize {
        self.branches.get(&svc).map_or(0, Vec::len)
    }

    fn namespace(&self, svc: ServiceId) -> String {
        self.services
            .get(&svc)
            .map(|s| s.namespace.clone())
            .unwrap_or_default()
    }

    fn set_unready_logged(&mut self, svc: ServiceId, logged: bool) {
        if let Some(s) = self.services.get_mut(&svc) {
            s.both_unready_logged = logged;
        }
    }

    fn svc_name(&self, svc: usize) -> &str {
        self.services.get(&svc).map_or("", |s| s.name.as_str())
    }
}

/// Inputs that touch no branch's readiness keep the cached wake-up deadline: a sink's report of
/// each batch must not cost a scan of every branch.
fn keeps_deadline(input: &Input) -> bool {
    matches!(
        input,
        Input::Abandoned { .. }
            | Input::SyncFailed { .. }
            | Input::SinkRefused { .. }
            | Input::SinkReport(_)
            | Input::SetUnavailable(_)
            | Input::StoppedAttempt { .. }
            | Input::StableName { .. }
            | Input::StableNameStopped { .. }
            | Input::CancelledByReload { .. }
            | Input::ServiceUnavailable { .. }
            | Input::Reloaded { .. }
            | Input::DuplicateProber(_)
            | Input::Paced { .. }
            | Input::Started(_)
            | Input::EarlierStateFiles(_)
            | Input::ReloadWaiting { .. }
            | Input::ReloadStaging { .. }
            | Input::ReloadPlanned { .. }
            | Input::NamespacesRetired(_)
            | Input::RemovedSaved(_)
    )
}

#[cfg(test)]
mod tests;
