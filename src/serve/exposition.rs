//! What `/metrics` shows: the fold's effects (its datums and evidence records) mapped to
//! Prometheus series, in the OpenMetrics text format.
//!
//! Counters come from evidence records only (an `attempt` record, a failed `publish`, a
//! `state_sync_failed`), never from datums, which a metrics profile filters and an `otlp` sink
//! may receive as a second batch. Gauges come from the datums every batch carries (Readiness,
//! Heartbeat, BothBranchesUnready, ServiceUnavailable) and from `transition` records. Labels are
//! names from the config and closed sets (service, branch, step, class, sink, target), so the
//! series are bounded by the config; a service or branch a reload removes loses its series.

mod families;
#[cfg(test)]
mod tests;

pub use families::{PREFIX, STEP_DURATION_BUCKETS};

use crate::contract;
use crate::datum::{Datum, Value};
use crate::failure::{FailureClass, Step};
use crate::fold::Effect;
use crate::readiness::Millis;
use crate::record::{
    OverrideAction, PublishOutcome, Record, Reload, RemovedBranch, StoreSyncFailureClass,
};
use families::{
    AttemptLabels, BranchLabels, Families, Ordered, ServiceClassLabels, ServiceLabels, SinkLabels,
    StepLabels,
};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use strum::{IntoEnumIterator, VariantArray};

/// The contract metrics whose datums set gauges here; every other datum is passed over. Each is
/// in [`contract::CONTROL`] (a test holds it), so no metrics profile can starve `/metrics`.
pub(crate) const FROM_DATUMS: [contract::Metric; 4] = [
    contract::READINESS,
    contract::HEARTBEAT,
    contract::BOTH_BRANCHES_UNREADY,
    contract::SERVICE_UNAVAILABLE,
];

/// The series `/metrics` serves. Updated by the shell from each effect it executes; read by the
/// endpoint at each scrape. Both take `&self`: the families lock per series, never the fold.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
    families: Families,
    services: Mutex<Services>,
    /// How often a readiness or fail-open gauge moved ([`Self::changes`]).
    changes: AtomicU64,
}

/// Which services have series, to remove them all when a reload removes the service.
#[derive(Debug, Default)]
struct Services {
    /// The branches each service has series for.
    branches: BTreeMap<String, BTreeSet<String>>,
    /// Services a reload removed and that have not started again: a late record of theirs (an
    /// attempt that finished as its loop stopped) brings no series back.
    removed: BTreeSet<String>,
    /// Likewise branches a reload removed from services that run on, (service, branch): until
    /// the fold names the branch again (a counted attempt, a transition, a Readiness datum:
    /// only a branch it has), a late attempt of its stopped loop brings no series back.
    removed_branches: BTreeSet<(String, String)>,
}

impl Default for Exposition {
    fn default() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let families = Families::register(&mut registry);
        Exposition {
            registry,
            families,
            services: Mutex::default(),
            changes: AtomicU64::new(0),
        }
    }
}

impl Exposition {
    /// An exposition with no series yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in one effect the shell is about to execute, observed at `now`.
    pub fn observe(&self, effect: &Effect, _now: Millis) {
        match effect {
            Effect::Publish(batch) => {
                batch.datums.iter().for_each(|d| self.datum(d));
                self.ticked(&batch.datums);
            }
            Effect::Record(_, service, record) => self.record(service, record),
            Effect::Log(_) | Effect::Pace { .. } => {}
        }
    }

    /// How often a readiness or fail-open gauge took another value, appeared or went so far: an
    /// encoding made at the same count shows the same readiness (counters may have moved).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Set the 0/1 gauge `l` of `family` to `flag`, counting a change when it moves or appears.
    fn set_flag<L>(&self, family: &families::Ordered<L, Gauge>, l: &L, flag: i64)
    where
        L: Clone + std::hash::Hash + Ord + prometheus_client::encoding::EncodeLabelSet,
    {
        // The read guard of `get` ends before `get_or_create` may take the write lock.
        let moved = family.get(l).is_none_or(|g| g.get() != flag);
        family.get_or_create(l).set(flag);
        if moved {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Remove gauge `l` of `family`, counting a change when it was there.
    fn remove_flag<L>(&self, family: &families::Ordered<L, Gauge>, l: &L)
    where
        L: Clone + std::hash::Hash + Ord + prometheus_client::encoding::EncodeLabelSet,
    {
        if family.remove(l) {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The text a scrape gets (OpenMetrics, ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        match prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            Ok(()) => out,
            // Writing to a `String` cannot fail; should it, a scrape gets no series rather than
            // half of them.
            Err(_) => "# EOF\n".to_string(),
        }
    }

    /// The same series in the Prometheus text format 0.0.4 (no `# EOF`, no `# UNIT`), for a
    /// scraper that does not accept OpenMetrics.
    pub fn encode_prometheus_text(&self) -> String {
        let mut out = String::new();
        match prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            Ok(()) => out,
            Err(_) => String::new(),
        }
    }

    fn services(&self) -> std::sync::MutexGuard<'_, Services> {
        // The guarded maps stay consistent whatever panicked while holding them.
        self.services.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `service` may have series (it was not removed by a reload), and `branch` too
    /// (not removed by a reload, unless `back`: the fold has it again); notes `branch` as one
    /// of the service's branches. No allocation once the branch is known.
    fn live(&self, service: &str, branch: Option<&str>, back: bool) -> bool {
        let mut s = self.services();
        if s.removed.contains(service) {
            return false;
        }
        let Some(branch) = branch else { return true };
        if !s.removed_branches.is_empty() {
            let key = (service.to_string(), branch.to_string());
            if back {
                s.removed_branches.remove(&key);
            } else if s.removed_branches.contains(&key) {
                return false;
            }
        }
        match s.branches.get_mut(service) {
            Some(b) if b.contains(branch) => {}
            Some(b) => {
                b.insert(branch.to_string());
            }
            None => {
                let b = BTreeSet::from([branch.to_string()]);
                s.branches.insert(service.to_string(), b);
            }
        }
        true
    }

    /// A datum of a batch: the gauges it sets (counters never come from datums).
    fn datum(&self, d: &Datum) {
        let Value::Single(v) = d.value else { return };
        if !FROM_DATUMS.iter().any(|m| m.name == d.metric) {
            return;
        }
        let dim = |name: &str| {
            let found = d.dimensions.iter().find(|(k, _)| *k == name);
            found.map(|(_, v)| v.as_str())
        };
        let Some(service) = dim(contract::SERVICE) else {
            return;
        };
        let f = &self.families;
        let flag = i64::from(v != 0.0);
        if d.metric == contract::READINESS.name {
            if let Some(branch) = dim(contract::BRANCH)
                && self.live(service, Some(branch), true)
            {
                let l = branch_labels(service, branch);
                self.set_flag(&f.readiness, &l, flag);
            }
        } else if d.metric == contract::HEARTBEAT.name {
            if self.live(service, None, false) {
                let at = d.timestamp as f64 / 1000.0;
                f.heartbeat.get_or_create(&service_labels(service)).set(at);
            }
        } else if let Some(family) = self.service_flag(d.metric)
            && self.live(service, None, false)
        {
            self.set_flag(family, &service_labels(service), flag);
        }
    }

    /// A batch's datums: for each service whose Heartbeat it carries (its tick; a control
    /// profile keeps every datum read here, so each batch of a tick carries them all), what
    /// the tick does not say any more is removed: the readiness of a branch without a
    /// Readiness datum (unknown) and BothBranchesUnready when absent (it cannot be told).
    fn ticked(&self, datums: &[Datum]) {
        let dim = |d: &Datum, name: &str| {
            let found = d.dimensions.iter().find(|(k, _)| *k == name);
            found.map(|(_, v)| v.clone())
        };
        let of = |metric: &str| -> BTreeSet<String> {
            let found = datums.iter().filter(|d| d.metric == metric);
            found.filter_map(|d| dim(d, contract::SERVICE)).collect()
        };
        let ticked = of(contract::HEARTBEAT.name);
        if ticked.is_empty() {
            return;
        }
        let told = of(contract::BOTH_BRANCHES_UNREADY.name);
        let known: BTreeSet<(String, String)> = datums
            .iter()
            .filter(|d| d.metric == contract::READINESS.name)
            .filter_map(|d| Some((dim(d, contract::SERVICE)?, dim(d, contract::BRANCH)?)))
            .collect();
        let f = &self.families;
        for service in &ticked {
            if !told.contains(service) {
                self.remove_flag(&f.both_branches_unready, &service_labels(service));
            }
            let branches = self.services().branches.get(service).cloned();
            for branch in branches.into_iter().flatten() {
                if !known.contains(&(service.clone(), branch.clone())) {
                    self.remove_flag(&f.readiness, &branch_labels(service, &branch));
                }
            }
        }
    }

    /// The 0/1 family per service that datums of `metric` set, if any.
    fn service_flag(&self, metric: &str) -> Option<&Ordered<ServiceLabels, Gauge>> {
        let f = &self.families;
        if metric == contract::BOTH_BRANCHES_UNREADY.name {
            Some(&f.both_branches_unready)
        } else if metric == contract::SERVICE_UNAVAILABLE.name {
            Some(&f.service_unavailable)
        } else {
            None
        }
    }

    /// An evidence record for `service` (`*`: the whole run).
    fn record(&self, service: &str, record: &Record) {
        match record {
            Record::Attempt(_) => self.attempt(service, record),
            Record::Transition(t) => {
                if !self.live(service, Some(&t.branch), true) {
                    return;
                }
                let l = branch_labels(service, &t.branch);
                match t.published {
                    Some(v) => {
                        let flag = i64::from(v != 0.0);
                        self.set_flag(&self.families.readiness, &l, flag);
                    }
                    None => self.remove_flag(&self.families.readiness, &l),
                }
            }
            Record::Publish(p) if p.outcome == PublishOutcome::Failed => {
                let l = SinkLabels {
                    sink: p.sink.clone(),
                    target: p.target.clone().unwrap_or_default(),
                    class: p.class.map_or("", |c| c.as_str()),
                };
                self.families.publish_failures.get_or_create(&l).inc();
            }
            Record::StateSyncFailed(f) if self.live(service, None, false) => {
                let l = ServiceClassLabels {
                    service: service.to_string(),
                    class: f.class.map_or("", StoreSyncFailureClass::as_str),
                };
                self.families.store_sync_failures.get_or_create(&l).inc();
            }
            // The forced value ends: the publish that follows (none while the branch is
            // unknown) sets the computed one.
            Record::Override(o)
                if matches!(o.action, OverrideAction::Cleared | OverrideAction::Expired) =>
            {
                let l = branch_labels(service, &o.branch);
                self.remove_flag(&self.families.readiness, &l);
            }
            Record::Start(_) => self.started(service),
            Record::Reload(r) if r.applied => self.reloaded(r),
            _ => {}
        }
    }

    /// An `attempt` record: its count, its steps' durations, its certificate's expiry.
    fn attempt(&self, service: &str, record: &Record) {
        let Record::Attempt(a) = record else { return };
        // A counted attempt is of a branch the fold has; one of a stopped loop may not be.
        if !self.live(service, Some(&a.branch), !a.not_counted) {
            return;
        }
        let r = a.record();
        let l = AttemptLabels {
            service: service.to_string(),
            branch: a.branch.clone(),
            result: if r.success { "success" } else { "failure" },
            class: r.class.map_or("", FailureClass::as_str),
        };
        self.families.attempts.get_or_create(&l).inc();
        for s in &a.steps {
            let seconds = s.duration_ms / 1000.0;
            if !seconds.is_finite() || seconds < 0.0 {
                continue;
            }
            let l = StepLabels {
                service: service.to_string(),
                branch: a.branch.clone(),
                step: s.step.as_str(),
            };
            self.families
                .step_duration
                .get_or_create(&l)
                .observe(seconds);
        }
        if let Some(not_after) = a.certificate_not_after {
            let l = branch_labels(service, &a.branch);
            let seconds = not_after.div_euclid(1000);
            self.families
                .certificate_expiry
                .get_or_create(&l)
                .set(seconds);
        }
    }

    /// A service started (at the start of the run or by a reload): it runs, so it is no
    /// longer unavailable, and its series may come back if a reload had removed it.
    fn started(&self, service: &str) {
        let mut s = self.services();
        s.removed.remove(service);
        s.removed_branches.retain(|(name, _)| name != service);
        drop(s);
        let l = service_labels(service);
        self.remove_flag(&self.families.service_unavailable, &l);
    }

    /// An applied reload: the services and branches it removed lose their series; services
    /// it left unavailable may have series again (their `ServiceUnavailable`).
    fn reloaded(&self, r: &Reload) {
        for name in &r.removed {
            self.remove_service(name);
        }
        for RemovedBranch { service, branch } in &r.removed_branches {
            let mut s = self.services();
            if let Some(b) = s.branches.get_mut(service) {
                b.remove(branch);
            }
            s.removed_branches.insert((service.clone(), branch.clone()));
            drop(s);
            self.remove_branch(service, branch);
        }
        let mut s = self.services();
        for name in &r.unavailable {
            s.removed.remove(name.as_str());
        }
    }

    /// Remove every series of `service`.
    fn remove_service(&self, service: &str) {
        let branches = {
            let mut s = self.services();
            s.removed.insert(service.to_string());
            s.branches.remove(service).unwrap_or_default()
        };
        for branch in &branches {
            self.remove_branch(service, branch);
        }
        let f = &self.families;
        let classes = StoreSyncFailureClass::VARIANTS.iter().map(|c| c.as_str());
        for class in std::iter::once("").chain(classes) {
            let service = service.to_string();
            f.store_sync_failures
                .remove(&ServiceClassLabels { service, class });
        }
        let l = service_labels(service);
        f.heartbeat.remove(&l);
        self.remove_flag(&f.both_branches_unready, &l);
        self.remove_flag(&f.service_unavailable, &l);
    }

    /// Remove every series of `service`'s `branch`.
    fn remove_branch(&self, service: &str, branch: &str) {
        let f = &self.families;
        let l = branch_labels(service, branch);
        self.remove_flag(&f.readiness, &l);
        f.certificate_expiry.remove(&l);
        let results = std::iter::once(("success", ""))
            .chain(FailureClass::iter().map(|c| ("failure", c.as_str())));
        for (result, class) in results {
            let (service, branch) = (service.to_string(), branch.to_string());
            f.attempts.remove(&AttemptLabels {
                service,
                branch,
                result,
                class,
            });
        }
        for step in Step::iter() {
            let (service, branch) = (service.to_string(), branch.to_string());
            let step = step.as_str();
            f.step_duration.remove(&StepLabels {
                service,
                branch,
                step,
            });
        }
    }
}

fn service_labels(service: &str) -> ServiceLabels {
    ServiceLabels {
        service: service.to_string(),
    }
}

fn branch_labels(service: &str, branch: &str) -> BranchLabels {
    BranchLabels {
        service: service.to_string(),
        branch: branch.to_string(),
    }
}
