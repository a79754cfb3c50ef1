//! The decisions of a run, as a pure fold: each service's branches (readiness, tick
//! accumulators, override), restored snapshots, recorded approvals and fail-open flag, the run's
//! counters, and the account of every batch handed to a sink, shared by all services so that a
//! publish tick packs every service's datums into one batch per namespace.
//!
//! Attempts, publish ticks, store syncs and sink reports go in as data ([`Input`]) with the time;
//! what to publish, record and log comes out as data ([`Effect`]). No I/O, no clock reads, no
//! tasks, no logging: the runner executes the effects, in order.

use crate::control::{self, Approval, ControlDoc, Decision, Marker, Override};
use crate::probe::{Attempt, Outcome};
use crate::readiness::{Millis, Policy, Readiness, ReadinessState, Snapshot, Suspect, Transition};
use crate::record::{
    AbandonCause, ApprovalNotApplied, ApprovalRecord, AttemptAbandoned, BothBranchesUnready,
    MarkerRecord, OverrideAction, OverrideRecord, Publish, PublishFailureClass, PublishOutcome,
    PublishReason, Record, Restored, StableNameRecord, StateSyncFailed, Stop, TransitionRecord,
};
use crate::sink::{
    BranchTick, Datum, Refusal, SinkReport, publish_failure_datums, selected_branch_datum,
    service_unavailable_datum, stable_name_success_datum, tick_datums, transition_datum,
};
use std::collections::{BTreeMap, BTreeSet};

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
    /// The sinks it is for (names), in config order.
    pub sinks: Vec<&'static str>,
    /// The CloudWatch namespace of its datums.
    pub namespace: String,
}

/// The sink that publishes the fold's own accounting (`PublishFailures`).
const EMF: &str = "emf";

/// What a batch that a sink's queue refused became.
fn refusal_outcome(why: Refusal) -> PublishOutcome {
    match why {
        Refusal::Closed => PublishOutcome::SinkStopped,
    }
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
    /// approvals it had not taken yet (from [`control::sync_prober`]).
    SyncDone {
        /// Index of the service whose control document it is.
        service: usize,
        /// As this sync wrote it.
        doc: ControlDoc,
        /// Decisions to take, oldest approval first.
        decided: Vec<(Approval, Decision)>,
        /// Drill markers to record, oldest first (from [`control::take_markers`]).
        markers: Vec<Marker>,
    },
    /// A sync with the store failed; probing and publishing go on.
    SyncFailed {
        /// Index of the service whose control document it is.
        service: usize,
        /// The store's error, in a sentence.
        error: String,
        /// When the sync started, ms since the epoch; `None` for the final sync, cut off by the
        /// end of the grace period.
        started: Option<Millis>,
    },
    /// A sink's queue refused batch `batch`.
    SinkRefused {
        sink: &'static str,
        /// [`Batch::id`].
        batch: u64,
        why: Refusal,
    },
    /// A sink's account of a batch.
    SinkReport(SinkReport),
    /// A reload added service [`NewService::id`]: its branches start as at start-up (restored
    /// from its control document when it has this prober's state).
    AddService(Box<NewService>),
    /// A reload removed service `.0`: its branches and datums end; events that still arrive for
    /// it are ignored.
    RemoveService(ServiceId),
    /// A reload changed the settings of a running service.
    ChangeService(Box<ServiceChange>),
    /// The services that could not be prepared (name, namespace), replacing the list: each gets
    /// a `ServiceUnavailable` datum at every tick.
    SetUnavailable(Vec<(String, String)>),
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
}

/// A service's id within a run: its index in [`Setup::services`] for those present at start,
/// then one more for each service a reload adds. Never reused, so an event of a removed
/// service can never be taken for another's.
pub type ServiceId = usize;

/// A service added by a reload.
#[derive(Debug, Clone)]
pub struct NewService {
    /// Its id; not used before in this run.
    pub id: ServiceId,
    /// Service name (the `Service` dimension).
    pub service: String,
    /// The CloudWatch namespace of its datums.
    pub namespace: String,
    /// The readiness policy of its branches.
    pub policy: Policy,
    /// Branch names, in config order.
    pub branches: Vec<String>,
    /// Where its control document lives, for log messages.
    pub store_location: String,
    /// Its control document as loaded.
    pub doc: ControlDoc,
}

/// New settings of a running service.
#[derive(Debug, Clone)]
pub struct ServiceChange {
    /// Its id.
    pub id: ServiceId,
    /// The CloudWatch namespace of its datums from now on.
    pub namespace: String,
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
    /// True when what it is probed with or decided by changed (endpoint, port, role, the
    /// service's probe or readiness settings): it keeps its readiness state, but its window and
    /// holding clocks start afresh under the new settings. False: untouched. A branch that is
    /// new to the service starts in the policy's initial state either way.
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
    /// (`None`): probe it at its suspect interval, or at its interval again.
    Pace {
        id: ServiceId,
        /// Service name (log lines).
        service: String,
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
    pub unavailable: &'a [(String, String)],
    /// Sink names, in config order.
    pub sinks: &'a [&'static str],
}

/// One service at start.
#[derive(Debug, Clone, Copy)]
pub struct ServiceSetup<'a> {
    /// Service name (the `Service` dimension).
    pub service: &'a str,
    /// The CloudWatch namespace of its datums.
    pub namespace: &'a str,
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
        control::effective_value(self.readiness.published_value(), self.ov.as_ref(), now)
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
}

/// Every branch of every service, and the run's counters.
#[derive(Debug)]
pub struct Fold {
    /// By id, so in config order for the services present at start, then in order added.
    services: BTreeMap<ServiceId, Svc>,
    /// Services that could not be prepared: (name, namespace).
    unavailable: Vec<(String, String)>,
    /// Each service's branches, in config order: a service's work (a tick, a sync, an
    /// attempt) touches its own branches only, never every branch of the run.
    branches: BTreeMap<ServiceId, Vec<Branch>>,
    sinks: Vec<&'static str>,
    /// Batches handed to a sink and not yet reported, per (sink, batch id).
    outstanding: BTreeMap<(&'static str, u64), Outstanding>,
    /// Batches handed per sink.
    handed: BTreeMap<&'static str, u64>,
    /// Failed batches per class since the last tick, for the `PublishFailures` datums.
    failures: BTreeMap<PublishFailureClass, u64>,
    next_batch: u64,
    summary: RunSummary,
    effects: Vec<Effect>,
    /// This prober's id (its entry in each control document).
    prober: String,
    /// [`next_wakeup`](Self::next_wakeup) as of the latest input, when known: an attempt only
    /// brings its own branch's deadline in, so a run of attempts never scans every branch. It may
    /// be early (a deadline an attempt moved on): that wake-up finds nothing and rescans.
    wakeup: Option<Option<Millis>>,
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

/// A map as compact JSON text for a log field, e.g. `{"cloudwatch":3}`.
/// Up to this many branches, the `stopped` log line lists attempts and states per branch;
/// beyond, it gives the attempts in all and the number of branches in each state.
const STOPPED_LOG_BRANCHES: usize = 8;

fn json_text<V: serde::Serialize>(map: &BTreeMap<String, V>) -> String {
    serde_json::to_string(map).unwrap_or_default()
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
    /// Start the fold: each branch's readiness restored from this prober's saved state in its
    /// service's document when there is one, and the stores' overrides taken. Returns the fold
    /// and what to log, record and publish at start.
    pub fn start(setup: Setup<'_>, now: Millis) -> (Fold, Vec<Effect>) {
        let mut fold = Fold {
            services: BTreeMap::new(),
            unavailable: setup.unavailable.to_vec(),
            branches: BTreeMap::new(),
            sinks: setup.sinks.to_vec(),
            outstanding: BTreeMap::new(),
            handed: BTreeMap::new(),
            failures: BTreeMap::new(),
            next_batch: 0,
            summary: RunSummary::default(),
            effects: Vec::new(),
            prober: String::new(),
            wakeup: None,
        };
        fold.prober = setup.prober.to_string();
        for (i, s) in setup.services.iter().enumerate() {
            fold.start_service(i, s, now);
        }
        let effects = std::mem::take(&mut fold.effects);
        (fold, effects)
    }

    fn start_service(&mut self, svc: ServiceId, setup: &ServiceSetup<'_>, now: Millis) {
        let prober = self.prober.clone();
        let prober = prober.as_str();
        let mine = setup.doc.probers.get(prober);
        let mut restored = Vec::new();
        let mut branches = Vec::with_capacity(setup.branches.len());
        for name in setup.branches {
            let readiness = match mine.and_then(|s| s.branches.get(name)) {
                Some(snap) => {
                    restored.push(Restored {
                        branch: name.clone(),
                        state: snap.state,
                        since: snap.since,
                    });
                    Readiness::restore(setup.policy.clone(), snap.clone().clamped(now))
                }
                None => Readiness::new(setup.policy.clone()),
            };
            branches.push(Branch {
                svc,
                name: name.clone(),
                suspect: readiness.suspect().is_some(),
                readiness,
                acc: TickAcc::default(),
                ov: None,
            });
        }
        self.branches.insert(svc, branches);
        let service = setup.service;
        for r in &restored {
            self.effects.push(log(
                Level::Info,
                format!("restored readiness state from {}", setup.store_location),
                Fields {
                    state: Some(r.state.as_str().into()),
                    ..branch_fields(service, &r.branch)
                },
            ));
        }
        self.services.insert(
            svc,
            Svc {
                name: service.to_string(),
                namespace: setup.namespace.to_string(),
                restored,
                // Decisions this prober id already has in the document were taken (and recorded)
                // by an earlier run: a restart must not record them again as news.
                recorded: setup
                    .doc
                    .approvals
                    .iter()
                    .filter(|a| a.decisions.contains_key(prober))
                    .map(|a| a.id.clone())
                    .collect(),
                // Likewise markers this prober id took before: an earlier run recorded them.
                markers: setup
                    .doc
                    .markers
                    .iter()
                    .filter(|m| m.taken.contains_key(prober))
                    .map(|m| m.id.clone())
                    .collect(),
                both_unready_logged: false,
                selected_branch: None,
                stable_name_success: None,
            },
        );
        for (b, snap) in mine.map(|p| &p.branches).into_iter().flatten() {
            if setup.branches.contains(b) && snap.clone().clamped(now) != *snap {
                self.effects.push(log(
                    Level::Warn,
                    "saved state is dated after this host's clock (clock skew between probers, or a clock stepped back): its future instants are ignored",
                    branch_fields(service, b),
                ));
            }
        }
        self.apply_overrides(svc, setup.doc, now);
        for b in mine.map(|p| p.branches.keys()).into_iter().flatten() {
            if !setup.branches.contains(b) {
                self.effects.push(log(
                    Level::Warn,
                    "saved state has a branch that is not in the config; it is dropped at the next save",
                    branch_fields(service, b),
                ));
            }
        }
    }

    /// Add a service a reload brought, as [`start`](Self::start) adds each (its start record is
    /// the shell's, with [`restored`](Self::restored)).
    fn add_service(&mut self, n: &NewService, now: Millis) {
        if self.services.contains_key(&n.id) {
            return;
        }
        let setup = ServiceSetup {
            service: &n.service,
            namespace: &n.namespace,
            policy: &n.policy,
            branches: &n.branches,
            store_location: &n.store_location,
            doc: &n.doc,
        };
        self.start_service(n.id, &setup, now);
        self.effects.push(log(
            Level::Info,
            "service added by a reload",
            service_fields(&n.service),
        ));
    }

    /// Drop a service a reload removed: its branches, overrides and datums.
    fn remove_service(&mut self, svc: ServiceId) {
        let Some(s) = self.services.remove(&svc) else {
            return;
        };
        self.branches.remove(&svc);
        self.effects.push(log(
            Level::Info,
            "service removed by a reload: its datums stop",
            service_fields(&s.name),
        ));
    }

    /// Take a running service's new settings. An untouched branch keeps everything; a reset
    /// one keeps its state (so a reload never makes an unready branch look ready, nor a ready
    /// one unknown) and gathers its window afresh under the new settings; a new one starts in
    /// the policy's initial state; one no longer named is dropped.
    fn change_service(&mut self, c: ServiceChange) {
        let Some(s) = self.services.get_mut(&c.id) else {
            return;
        };
        s.namespace = c.namespace;
        let name = s.name.clone();
        let mut old: BTreeMap<String, Branch> = self
            .branches
            .remove(&c.id)
            .unwrap_or_default()
            .into_iter()
            .map(|b| (b.name.clone(), b))
            .collect();
        let mut branches = Vec::with_capacity(c.branches.len());
        for bc in c.branches {
            let branch = match old.remove(&bc.name) {
                Some(b) if !bc.reset => b,
                Some(mut b) => {
                    let snap = b.readiness.snapshot();
                    let fresh = Snapshot {
                        state: snap.state,
                        since: snap.since,
                        unready_holding_since: None,
                        ready_holding_since: None,
                        attempts: Vec::new(),
                        flaps: Vec::new(),
                    };
                    b.readiness = Readiness::restore(c.policy.clone(), fresh);
                    self.effects.push(log(
                        Level::Info,
                        "probe or readiness settings changed by a reload: the state is kept, its window and clocks start afresh",
                        Fields {
                            state: Some(b.readiness.state().as_str().into()),
                            ..branch_fields(&name, &bc.name)
                        },
                    ));
                    b
                }
                None => Branch {
                    svc: c.id,
                    name: bc.name,
                    readiness: Readiness::new(c.policy.clone()),
                    acc: TickAcc::default(),
                    ov: None,
                    suspect: false,
                },
            };
            branches.push(branch);
        }
        self.branches.insert(c.id, branches);
        for ix in 0..self.branch_count(c.id) {
            self.repace(c.id, ix);
        }
        for b in old.keys() {
            self.effects.push(log(
                Level::Info,
                "branch removed by a reload: its datums stop",
                branch_fields(&name, b),
            ));
        }
    }

    /// The name of service `svc` (empty once removed).
    pub fn service_name(&self, svc: ServiceId) -> &str {
        self.svc_name(svc)
    }

    /// Whether branch `branch` of service `svc` is suspect now, and why (for a loop starting).
    pub fn suspect(&self, svc: ServiceId, branch: &str) -> Option<Suspect> {
        let b = self.branches.get(&svc)?.iter().find(|b| b.name == branch)?;
        b.readiness.suspect()
    }

    /// After a change of branch `ix` of `svc`'s readiness: a [`Effect::Pace`] when it became or
    /// stopped being suspect.
    fn repace(&mut self, svc: ServiceId, ix: usize) {
        let service = self.svc_name(svc).to_string();
        let Some(b) = self.branch_mut(svc, ix) else {
            return;
        };
        let suspect = b.readiness.suspect();
        if suspect.is_some() == b.suspect {
            return;
        }
        b.suspect = suspect.is_some();
        let branch = b.name.clone();
        self.effects.push(Effect::Pace {
            id: svc,
            service,
            branch,
            suspect,
        });
    }

    /// The branches of service `svc` whose state was restored from the store, for its start
    /// record.
    pub fn restored(&self, svc: usize) -> &[Restored] {
        self.services.get(&svc).map_or(&[], |s| &s.restored)
    }

    /// A copy of what a sync of service `svc`'s document needs ([`control::sync_prober`]).
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
        // Inputs that touch no branch's readiness keep the cached deadline: a sink's report of
        // each batch must not cost a scan of every branch.
        let keeps = matches!(
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
        );
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
            } => {
                self.summary.abandoned += 1;
                let r = AttemptAbandoned {
                    branch,
                    seq,
                    cause: None,
                };
                self.record_for(service, now, Record::AttemptAbandoned(r));
            }
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
            } => {
                self.record_markers(service, &doc, markers, now);
                self.sync_done(service, &doc, decided, now)
            }
            Input::SyncFailed {
                service,
                error,
                started,
            } => self.sync_failed(service, error, started, now),
            Input::SinkRefused { sink, batch, why } => self.refused(sink, batch, why, now),
            Input::SinkReport(r) => self.on_report(r, now),
            Input::AddService(n) => self.add_service(&n, now),
            Input::RemoveService(svc) => self.remove_service(svc),
            Input::ChangeService(c) => self.change_service(*c),
            Input::SetUnavailable(list) => self.unavailable = list,
            Input::StoppedAttempt { service, attempt } => self.stopped_attempt(service, attempt),
            Input::StableName {
                service,
                record,
                selected,
            } => {
                if let Some(s) = self.services.get_mut(&service) {
                    s.selected_branch = Some(selected);
                    s.stable_name_success = record.end_to_end.as_ref().map(|e| {
                        if e.outcome == Outcome::Success {
                            1.0
                        } else {
                            0.0
                        }
                    });
                    self.record_for(service, now, Record::StableName(*record));
                }
            }
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
            } => {
                self.summary.abandoned += 1;
                let r = AttemptAbandoned {
                    branch,
                    seq,
                    cause: Some(AbandonCause::Reload),
                };
                let r = Record::AttemptAbandoned(r);
                self.effects.push(Effect::Record(now, service, r));
            }
        }
        if keeps {
            self.wakeup = cached;
        }
        std::mem::take(&mut self.effects)
    }

    /// Every batch handed to a sink and never reported (the grace period ended first) is
    /// dropped: count, log and record each.
    pub fn abandon_unsent(&mut self, now: Millis) -> Vec<Effect> {
        for ((sink, _), o) in std::mem::take(&mut self.outstanding) {
            let why = "abandoned at shutdown: the grace period ended before it was sent";
            let reason = <&str>::from(o.reason);
            self.unsent(
                sink,
                &o,
                reason,
                why,
                PublishOutcome::AbandonedAtShutdown,
                now,
            );
        }
        std::mem::take(&mut self.effects)
    }

    /// End the run (call once, after [`abandon_unsent`](Self::abandon_unsent)): the summary,
    /// the stop record and the final log line, which names every sink that dropped batches and
    /// says so plainly when one dropped them all.
    pub fn finish(
        &mut self,
        now: Millis,
        stop_reason: &str,
        evidence_write_failures: u64,
    ) -> (RunSummary, Vec<Effect>) {
        let mut s = std::mem::take(&mut self.summary);
        s.stop_reason = stop_reason.to_string();
        s.evidence_write_failures = evidence_write_failures;
        s.final_states = self
            .branches
            .values()
            .flatten()
            .map(|b| (self.key(b.svc, &b.name), b.readiness.state()))
            .collect();
        self.record(
            now,
            Record::Stop(Stop {
                reason: s.stop_reason.clone(),
                attempts: s.attempts.clone(),
                abandoned: s.abandoned,
                transitions: s.transitions,
                dropped_batches: s.dropped_batches.clone(),
                final_states: s.final_states.clone(),
                approvals_applied: s.approvals_applied,
                approvals_rejected: s.approvals_rejected,
                state_sync_failures: s.state_sync_failures,
                evidence_write_failures,
            }),
        );
        let line = self.stopped_log(&s);
        self.effects.push(Effect::Log(line));
        (s, std::mem::take(&mut self.effects))
    }

    fn stopped_log(&self, s: &RunSummary) -> Log {
        let silent: Vec<String> = self
            .handed
            .iter()
            .filter(|(sink, n)| **n > 0 && s.dropped_batches.get(**sink) == Some(*n))
            .map(|(sink, n)| {
                format!("sink {sink} dropped every batch ({n} of {n}): none of this run's datums reached it")
            })
            .collect();
        let (level, message) = if !silent.is_empty() {
            (Level::Error, format!("stopped; {}", silent.join("; ")))
        } else if !s.dropped_batches.is_empty() {
            (
                Level::Warn,
                "stopped; some batches were dropped".to_string(),
            )
        } else {
            (Level::Info, "stopped".to_string())
        };
        // Per branch up to a few branches; a fleet's line gives totals (the `stop` record
        // keeps every branch).
        let (attempts, states) = if s.final_states.len() <= STOPPED_LOG_BRANCHES {
            (json_text(&s.attempts), json_text(&s.final_states))
        } else {
            let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
            for state in s.final_states.values() {
                *by_state.entry(state.as_str().to_string()).or_default() += 1;
            }
            (
                s.attempts.values().sum::<u64>().to_string(),
                json_text(&by_state),
            )
        };
        Log {
            level,
            message,
            fields: Fields {
                reason: Some(s.stop_reason.clone()),
                attempts: Some(attempts),
                transitions: Some(s.transitions),
                states: Some(states),
                dropped_batches: (!s.dropped_batches.is_empty())
                    .then(|| json_text(&s.dropped_batches)),
                ..Fields::default()
            },
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

    fn on_attempt(&mut self, svc: usize, a: Box<Attempt>) {
        if !self.services.contains_key(&svc) {
            // A removed service's attempt that was already on its way.
            return;
        }
        let key = self.key(svc, &a.branch);
        *self.summary.attempts.entry(key).or_default() += 1;
        let fields = Fields {
            seq: Some(a.seq),
            ..branch_fields(self.svc_name(svc), &a.branch)
        };
        self.effects.push(match &a.outcome {
            Outcome::Success => log(Level::Debug, "attempt ok", fields),
            Outcome::Failure {
                step,
                class,
                message,
            } => log(
                Level::Debug,
                "attempt failed",
                Fields {
                    step: Some(step.to_string()),
                    class: Some(class.to_string()),
                    detail: Some(message.clone()),
                    ..fields
                },
            ),
        });
        let record = a.record();
        let ix = self.branch_ix(svc, &a.branch);
        let transition = ix.and_then(|i| {
            let b = self.branch_mut(svc, i)?;
            b.acc.attempts += 1;
            if a.outcome != Outcome::Success {
                b.acc.failed += 1;
            }
            for s in a.steps.iter().filter(|s| s.ok) {
                b.acc
                    .steps
                    .entry(s.step.as_str())
                    .or_default()
                    .push(s.duration_ms);
            }
            if let Some(na) = a.certificate_not_after {
                b.acc.cert_not_after = Some(na);
            }
            b.readiness.record(record)
        });
        self.record_for(svc, a.finished_at, Record::Attempt(*a));
        if let (Some(i), Some(t)) = (ix, transition) {
            self.on_transition(svc, i, &t);
        }
        if let Some(i) = ix {
            self.repace(svc, i);
        }
    }

    /// An attempt of a loop a reload stopped: the evidence and the run's count have it, no
    /// window does (its service is gone, or its branch starts afresh under new settings).
    fn stopped_attempt(&mut self, service: String, mut a: Box<Attempt>) {
        a.not_counted = true;
        let only = self.services.len() == 1 && self.services.values().all(|s| s.name == service);
        let key = if only {
            a.branch.clone()
        } else {
            format!("{service}/{}", a.branch)
        };
        *self.summary.attempts.entry(key).or_default() += 1;
        self.effects.push(log(
            Level::Debug,
            "attempt of a loop a reload stopped: recorded, not counted in any window",
            Fields {
                seq: Some(a.seq),
                ..branch_fields(&service, &a.branch)
            },
        ));
        self.effects
            .push(Effect::Record(a.finished_at, service, Record::Attempt(*a)));
    }

    /// A transition of service `svc`'s branch `ix`.
    fn on_transition(&mut self, svc: ServiceId, ix: usize, t: &Transition) {
        let Some(b) = self.branches.get(&svc).and_then(|v| v.get(ix)) else {
            return;
        };
        self.summary.transitions += 1;
        let branch = b.name.clone();
        let service = self.svc_name(svc).to_string();
        let ov = b.ov.clone().filter(|o| o.active(t.at));
        let published = control::effective_value(b.readiness.published_value(), ov.as_ref(), t.at);
        let classes: Vec<String> = t
            .unready_window
            .failure_classes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect();
        let level = if t.to == ReadinessState::Unready {
            Level::Warn
        } else {
            Level::Info
        };
        self.effects.push(log(
            level,
            "readiness transition",
            Fields {
                from: Some(t.from.as_str().into()),
                to: Some(t.to.as_str().into()),
                reason: Some(t.reason.clone()),
                failures: Some(format!("{classes:?}")),
                ..branch_fields(&service, &branch)
            },
        ));
        if t.to == ReadinessState::PendingApproval {
            let which = if self.services.len() > 1 {
                format!("--service {service} ")
            } else {
                String::new()
            };
            self.effects.push(log(
                Level::Warn,
                format!("ready condition held its full `for`: waiting for an operator (readyprobe approve {which}--branch {branch} --by WHO --reason TEXT)"),
                branch_fields(&service, &branch),
            ));
        }
        self.record_for(
            svc,
            t.at,
            Record::Transition(TransitionRecord {
                branch: branch.clone(),
                transition: t.clone(),
                published,
                override_: ov,
                // The id `publish` below gives its batch.
                batch: published.map(|_| self.next_batch + 1),
            }),
        );
        if let Some(v) = published {
            let d = transition_datum(&service, &branch, v, t.at);
            let ns = self.namespace(svc);
            self.publish(vec![d], PublishReason::Transition, ns);
        }
    }

    /// The earliest readiness deadline of any branch ([`Readiness::next_deadline`]): when to
    /// feed [`Input::Wake`] if nothing else comes first. After a wake-up it is always later than
    /// the wake-up's instant (every branch whose deadline had come was evaluated then), so one
    /// never repeats.
    pub fn next_wakeup(&mut self) -> Option<Millis> {
        let branches = &self.branches;
        *self.wakeup.get_or_insert_with(|| {
            branches
                .values()
                .flatten()
                .filter_map(|b| b.readiness.next_deadline())
                .min()
        })
    }

    /// Evaluate at `now`, for [`Input::Wake`], every branch whose deadline has come:
    /// transitions and pace changes only. The others' deadlines are later, so evaluating them
    /// too would find nothing (and cost a pass over every branch at each of their deadlines).
    fn wake(&mut self, now: Millis) {
        let ids: Vec<ServiceId> = self.branches.keys().copied().collect();
        for svc in ids {
            for i in 0..self.branch_count(svc) {
                let Some(b) = self.branch_mut(svc, i) else {
                    continue;
                };
                if b.readiness.next_deadline().is_none_or(|d| d > now) {
                    continue;
                }
                if let Some(t) = b.readiness.evaluate(now) {
                    self.on_transition(svc, i, &t);
                }
                self.repace(svc, i);
            }
        }
    }

    /// Evaluate every branch at `now`, then publish the tick's datums (each service's heartbeat
    /// included), one batch per namespace.
    fn tick(&mut self, reason: PublishReason, now: Millis) {
        self.expire_overrides(now);
        let mut by_ns: BTreeMap<String, Vec<Datum>> = BTreeMap::new();
        let ids: Vec<ServiceId> = self.services.keys().copied().collect();
        for svc in ids {
            let datums = self.tick_service(svc, now);
            let ns = self.namespace(svc);
            by_ns.entry(ns).or_default().extend(datums);
        }
        for (name, ns) in &self.unavailable {
            let d = service_unavailable_datum(name, now);
            by_ns.entry(ns.clone()).or_default().push(d);
        }
        for (ns, datums) in by_ns {
            self.publish(datums, reason, ns);
        }
        self.publish_failures(now);
    }

    /// Evaluate service `svc`'s branches at `now`; its tick datums.
    fn tick_service(&mut self, svc: usize, now: Millis) -> Vec<Datum> {
        let mut ticks = Vec::new();
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            if let Some(t) = b.readiness.evaluate(now) {
                self.on_transition(svc, i, &t);
            }
            self.repace(svc, i);
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let stats = b
                .readiness
                .window_stats(now, b.readiness.policy().declare_unready.window);
            let acc = std::mem::take(&mut b.acc);
            let effective = b.effective(now);
            ticks.push(BranchTick {
                branch: b.name.clone(),
                readiness: effective,
                is_ready: effective == Some(1.0),
                is_known: effective.is_some(),
                success_rate: stats.success_rate_percent,
                attempts: acc.attempts,
                failed: acc.failed,
                step_durations: acc.steps.into_iter().collect(),
                // Only what a handshake showed since the last tick: no handshake, no datum.
                cert_not_after: acc.cert_not_after,
            });
        }
        let all_unready = ticks.iter().all(|t| t.is_known && !t.is_ready);
        let name = self.svc_name(svc).to_string();
        let logged = self
            .services
            .get(&svc)
            .is_some_and(|s| s.both_unready_logged);
        if all_unready && !logged {
            self.effects.push(log(
                Level::Error,
                "NO BRANCH IS READY: Route 53 failover fails open and answers with the PRIMARY regardless; BothBranchesUnready = 1",
                service_fields(&name),
            ));
            self.record_for(
                svc,
                now,
                Record::BothBranchesUnready(BothBranchesUnready::new()),
            );
            self.set_unready_logged(svc, true);
        } else if !all_unready {
            self.set_unready_logged(svc, false);
        }
        let mut datums = tick_datums(&name, &ticks, now);
        if let Some(s) = self.services.get(&svc) {
            if let Some(v) = s.selected_branch {
                datums.push(selected_branch_datum(&name, v, now));
            }
            if let Some(v) = s.stable_name_success {
                datums.push(stable_name_success_datum(&name, v, now));
            }
        }
        datums
    }

    /// The failed batches counted since the last tick, as `PublishFailures` datums for the
    /// `emf` sink only: the count must not depend on the sink that is failing. With several
    /// services each one's datum carries the run's count (their batches are shared).
    fn publish_failures(&mut self, now: Millis) {
        let counts: Vec<_> = std::mem::take(&mut self.failures).into_iter().collect();
        if counts.is_empty() || !self.sinks.contains(&EMF) {
            return;
        }
        let mut by_ns: BTreeMap<String, Vec<Datum>> = BTreeMap::new();
        for s in self.services.values() {
            let datums = publish_failure_datums(&s.name, &counts, now);
            by_ns.entry(s.namespace.clone()).or_default().extend(datums);
        }
        for (ns, datums) in by_ns {
            self.publish_to(datums, PublishReason::PublishFailures, vec![EMF], ns);
        }
    }

    /// Hand a batch to every sink; each stays outstanding until the sink reports it or its
    /// queue refuses it.
    fn publish(&mut self, datums: Vec<Datum>, reason: PublishReason, namespace: String) {
        let sinks = self.sinks.clone();
        self.publish_to(datums, reason, sinks, namespace);
    }

    /// Hand a batch for `namespace` to `sinks`.
    fn publish_to(
        &mut self,
        datums: Vec<Datum>,
        reason: PublishReason,
        sinks: Vec<&'static str>,
        namespace: String,
    ) {
        self.next_batch += 1;
        let id = self.next_batch;
        for &sink in &sinks {
            *self.handed.entry(sink).or_default() += 1;
            self.outstanding.insert(
                (sink, id),
                Outstanding {
                    reason,
                    datums: datums.len(),
                    batch: id,
                },
            );
        }
        self.effects.push(Effect::Publish(Batch {
            id,
            datums,
            reason,
            sinks,
            namespace,
        }));
    }

    fn refused(&mut self, sink: &'static str, batch: u64, why: Refusal, now: Millis) {
        let Some(o) = self.outstanding.remove(&(sink, batch)) else {
            return;
        };
        self.unsent(sink, &o, why.why(), why.why(), refusal_outcome(why), now);
    }

    /// A batch that never reached its sink: counted as dropped, logged (with `log_reason`) and
    /// recorded (with `why` as its error).
    fn unsent(
        &mut self,
        sink: &'static str,
        o: &Outstanding,
        log_reason: &str,
        why: &str,
        outcome: PublishOutcome,
        now: Millis,
    ) {
        let message = match outcome {
            PublishOutcome::AbandonedAtShutdown => "publish abandoned at shutdown",
            _ => "publish dropped",
        };
        *self
            .summary
            .dropped_batches
            .entry(sink.to_string())
            .or_default() += 1;
        self.effects.push(log(
            Level::Warn,
            message,
            Fields {
                sink: Some(sink.into()),
                datums: Some(o.datums as u64),
                reason: Some(log_reason.into()),
                ..Fields::default()
            },
        ));
        let publish = Publish::new(sink, o.reason, o.datums, 0, 0, outcome, Some(why.into()));
        self.record(now, Record::Publish(publish.with_batch(o.batch)));
    }

    fn on_report(&mut self, r: SinkReport, now: Millis) {
        let Some(o) = self.outstanding.remove(&(r.sink, r.batch)) else {
            return;
        };
        let fields = Fields {
            sink: Some(r.sink.into()),
            datums: Some(r.datums as u64),
            ..Fields::default()
        };
        if r.outcome.is_dropped() {
            *self
                .summary
                .dropped_batches
                .entry(r.sink.to_string())
                .or_default() += 1;
            if let Some(c) = r.class {
                *self.failures.entry(c).or_default() += 1;
            }
            let message = match r.outcome {
                PublishOutcome::Failed => "publish failed; batch dropped",
                PublishOutcome::Expired => "publish expired in the queue; batch dropped",
                _ => "publish dropped",
            };
            self.effects.push(log(
                Level::Warn,
                message,
                Fields {
                    tries: Some(u64::from(r.tries)),
                    class: r.class.map(|c| c.as_str().into()),
                    error: r.error.clone(),
                    reason: Some(<&str>::from(o.reason).into()),
                    ..fields
                },
            ));
        } else {
            self.effects.push(log(
                Level::Debug,
                "published",
                Fields {
                    datums: Some(r.sent as u64),
                    ..fields
                },
            ));
        }
        let publish = Publish::new(
            r.sink, o.reason, r.datums, r.sent, r.tries, r.outcome, r.error,
        );
        let publish = publish.with_class(r.class).with_batch(o.batch);
        self.record(now, Record::Publish(publish));
    }

    /// Take a finished sync: record its decisions, apply approved failbacks, take overrides.
    fn sync_done(
        &mut self,
        svc: usize,
        doc: &ControlDoc,
        decided: Vec<(Approval, Decision)>,
        now: Millis,
    ) {
        let Some(s) = self.services.get_mut(&svc) else {
            return;
        };
        let service = s.name.clone();
        for (a, d) in decided {
            if let Some(s) = self.services.get_mut(&svc) {
                s.recorded.insert(a.id.clone());
            }
            self.record_for(
                svc,
                now,
                Record::Approval(ApprovalRecord {
                    branch: a.branch.clone(),
                    approval_id: a.id.clone(),
                    by: a.by.clone(),
                    reason: a.reason.clone(),
                    given_at: a.at,
                    expires_at: a.expires_at,
                    applied: d.applied,
                    detail: d.detail.clone(),
                }),
            );
            if d.applied {
                self.apply_approval(svc, &a, now);
            } else {
                self.summary.approvals_rejected += 1;
                self.effects.push(log(
                    Level::Warn,
                    "operator approval rejected",
                    Fields {
                        by: Some(a.by.clone()),
                        detail: Some(d.detail.clone()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
            }
        }
        self.apply_overrides(svc, doc, now);
    }

    /// Record the drill markers a sync took, once each: a marker id already recorded is not
    /// recorded again. The ids kept are those still in the document (it prunes old markers).
    fn record_markers(&mut self, svc: usize, doc: &ControlDoc, markers: Vec<Marker>, now: Millis) {
        let Some(s) = self.services.get_mut(&svc) else {
            return;
        };
        s.markers
            .retain(|id| doc.markers.iter().any(|m| &m.id == id));
        let fresh: Vec<Marker> = markers
            .into_iter()
            .filter(|m| s.markers.insert(m.id.clone()))
            .collect();
        let service = s.name.clone();
        for m in fresh {
            self.effects.push(log(
                Level::Info,
                "drill marker",
                Fields {
                    by: Some(m.by.clone()),
                    state: Some(m.kind.as_str().into()),
                    detail: Some(m.label.clone()),
                    ..service_fields(&service)
                },
            ));
            let r = MarkerRecord {
                marker_id: m.id,
                marker_kind: m.kind,
                label: m.label,
                by: m.by,
                given_at: m.at,
            };
            self.record_for(svc, now, Record::Marker(r));
        }
    }

    /// Apply an approval the store decided as applied to the live state.
    fn apply_approval(&mut self, svc: usize, a: &Approval, now: Millis) {
        let Some(ix) = self.branch_ix(svc, &a.branch) else {
            return;
        };
        let service = self.svc_name(svc).to_string();
        let Some(b) = self.branch_mut(svc, ix) else {
            return;
        };
        match b.readiness.approve(now) {
            Ok(t) => {
                self.summary.approvals_applied += 1;
                self.effects.push(log(
                    Level::Info,
                    "operator approval applied",
                    Fields {
                        by: Some(a.by.clone()),
                        reason: Some(a.reason.clone()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
                self.on_transition(svc, ix, &t);
                self.repace(svc, ix);
            }
            Err(e) => {
                // The branch left pending_approval while the sync was in flight.
                let state = b.readiness.state();
                self.effects.push(log(
                    Level::Warn,
                    "approval decided but not applied: the branch left pending_approval meanwhile",
                    Fields {
                        error: Some(e.to_string()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
                self.record_for(
                    svc,
                    now,
                    Record::ApprovalNotApplied(ApprovalNotApplied {
                        branch: a.branch.clone(),
                        approval_id: a.id.clone(),
                        state,
                    }),
                );
            }
        }
    }

    fn sync_failed(&mut self, svc: usize, error: String, started: Option<Millis>, now: Millis) {
        self.summary.state_sync_failures += 1;
        let message = match started {
            Some(_) => {
                "cannot sync with the state store; probing goes on, retrying at the next poll"
            }
            None => "final state sync did not finish within the grace period",
        };
        self.effects.push(log(
            Level::Error,
            message,
            Fields {
                error: Some(error.clone()),
                ..service_fields(self.svc_name(svc))
            },
        ));
        self.record_for(
            svc,
            now,
            Record::StateSyncFailed(StateSyncFailed {
                error,
                started_at: started,
            }),
        );
    }

    /// Take the store's overrides; record and publish at once every one that starts, changes or
    /// is cleared.
    fn apply_overrides(&mut self, svc: usize, doc: &ControlDoc, now: Millis) {
        // Expiries first, so the one that just ran out is recorded as expired, not as cleared
        // when the store's copy of it is seen to be inactive.
        self.expire_overrides_of(svc, now);
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let new = doc
                .overrides
                .get(&b.name)
                .filter(|o| o.active(now))
                .cloned();
            if b.ov == new {
                continue;
            }
            b.ov = new;
            let (name, ov, effective) = (b.name.clone(), b.ov.clone(), b.effective(now));
            let service = self.svc_name(svc).to_string();
            match ov {
                Some(o) => {
                    self.effects.push(log(
                        Level::Warn,
                        "override in force: the published readiness is forced",
                        Fields {
                            force: Some(o.force.as_str().into()),
                            by: Some(o.by.clone()),
                            reason: Some(o.reason.clone()),
                            expires_at: Some(crate::clock::rfc3339(o.expires_at)),
                            ..branch_fields(&service, &name)
                        },
                    ));
                    self.override_record(svc, now, &name, OverrideAction::Set, Some(o));
                }
                None => {
                    self.effects.push(log(
                        Level::Warn,
                        "override cleared: the computed readiness is published again",
                        branch_fields(&service, &name),
                    ));
                    self.override_record(svc, now, &name, OverrideAction::Cleared, None);
                }
            }
            // A cleared override whose branch is unknown has nothing to publish.
            if let Some(v) = effective {
                let d = transition_datum(&service, &name, v, now);
                let ns = self.namespace(svc);
                self.publish(vec![d], PublishReason::Override, ns);
            }
        }
    }

    /// End overrides whose expiry passed (no store round trip needed).
    fn expire_overrides(&mut self, now: Millis) {
        let ids: Vec<ServiceId> = self.branches.keys().copied().collect();
        for svc in ids {
            self.expire_overrides_of(svc, now);
        }
    }

    /// End service `svc`'s overrides whose expiry passed.
    fn expire_overrides_of(&mut self, svc: ServiceId, now: Millis) {
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let Some(o) = b.ov.take_if(|o| !o.active(now)) else {
                continue;
            };
            let (name, effective) = (b.name.clone(), b.effective(now));
            let service = self.svc_name(svc).to_string();
            self.effects.push(log(
                Level::Warn,
                "override expired: the computed readiness is published again",
                Fields {
                    force: Some(o.force.as_str().into()),
                    ..branch_fields(&service, &name)
                },
            ));
            self.override_record(svc, now, &name, OverrideAction::Expired, Some(o));
            if let Some(v) = effective {
                let d = transition_datum(&service, &name, v, now);
                let ns = self.namespace(svc);
                self.publish(vec![d], PublishReason::Override, ns);
            }
        }
    }

    fn override_record(
        &mut self,
        svc: usize,
        now: Millis,
        branch: &str,
        action: OverrideAction,
        ov: Option<Override>,
    ) {
        self.record_for(
            svc,
            now,
            Record::Override(OverrideRecord {
                branch: branch.to_string(),
                action,
                override_: ov,
            }),
        );
    }
}

#[cfg(test)]
mod tests;
