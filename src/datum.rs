//! The metric contract as data ([`Datum`]), the pure builders of a publish tick's datums, and a
//! sink's account of a batch ([`SinkReport`]): plain data, no I/O, nothing async, so the fold
//! builds and accounts batches without knowing how sinks send them.

use crate::config::{Publish, PublishTarget, SinkKind};
use crate::contract::{self, Metric};
use crate::readiness::{Millis, fails_open};
use crate::record::{PublishFailureClass, PublishOutcome, StoreSyncFailureClass};
use serde::Serialize;
use std::collections::BTreeMap;

pub use crate::contract::Unit;

/// A datum's value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Value {
    /// One value.
    Single(f64),
    /// Raw samples, sent to CloudWatch as a statistic set (count, sum, min, max) and to EMF as
    /// an array.
    Samples(Vec<f64>),
}

/// One metric datum of the contract (README.md, "Metric contract").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Datum {
    /// Metric name, e.g. `Readiness`.
    pub metric: &'static str,
    /// Dimensions in contract order, e.g. `[("Service", "orders-db"), ("Branch", "primary")]`.
    pub dimensions: Vec<(&'static str, String)>,
    /// The value.
    pub value: Value,
    /// Unit.
    pub unit: Unit,
    /// Observation time, ms since the epoch.
    pub timestamp: Millis,
    /// For a count over the span since the previous tick ([`COUNTED`]): when that span began
    /// (the service's previous tick, or when it started), set by the fold ([`counted_since`]).
    /// `None` elsewhere. CloudWatch and EMF ignore it; OTLP sends it as a delta's start time.
    #[serde(skip)]
    pub since: Option<Millis>,
}

/// The metrics whose datums count what happened since the previous tick: attempts, failed
/// attempts, step durations, failed publishes and store syncs.
pub const COUNTED: [&str; 5] = [
    contract::ATTEMPTS.name,
    contract::FAILED_ATTEMPTS.name,
    contract::STEP_DURATION.name,
    contract::PUBLISH_FAILURES.name,
    contract::STORE_SYNC_FAILURES.name,
];

/// Mark the [`COUNTED`] datums of `datums` as counting since `since` (pure).
pub fn counted_since(datums: &mut [Datum], since: Millis) {
    for d in datums.iter_mut().filter(|d| COUNTED.contains(&d.metric)) {
        d.since = Some(since);
    }
}

impl Datum {
    /// True when every number in it is finite (CloudWatch rejects NaN and ±Inf; emulators accept
    /// them, so we check on our side).
    pub fn is_finite(&self) -> bool {
        match &self.value {
            Value::Single(v) => v.is_finite(),
            Value::Samples(s) => !s.is_empty() && s.iter().all(|v| v.is_finite()),
        }
    }
}

/// Per-branch input of one publish tick.
#[derive(Debug, Clone, Default)]
pub struct BranchTick {
    /// Branch name.
    pub branch: String,
    /// Published readiness value: `Some(1.0)`, `Some(0.0)`, or `None` (unknown: no datum).
    pub readiness: Option<f64>,
    /// True when the state is `ready` (computed or forced).
    pub is_ready: bool,
    /// True when the state is known (not `unknown`).
    pub is_known: bool,
    /// Success rate of the unready window, percent; `None` when no attempt finished in it.
    pub success_rate: Option<f64>,
    /// Attempts finished since the previous tick.
    pub attempts: u64,
    /// Of which failed.
    pub failed: u64,
    /// Step durations since the previous tick, ms, per step name.
    pub step_durations: Vec<(&'static str, Vec<f64>)>,
    /// `notAfter` of the server's leaf certificate as last seen by the `tls` step, ms since the
    /// epoch; `None` where TLS is not used (no `CertificateExpiryDays` datum then).
    pub cert_not_after: Option<Millis>,
}

impl BranchTick {
    /// Its published readiness for [`fails_open`]: ready or not, `None` when unknown.
    pub fn published(&self) -> Option<bool> {
        self.is_known.then_some(self.is_ready)
    }
}

/// A datum of contract metric `m`; `values` are its dimensions' values, in the contract's order.
fn datum(m: &Metric, values: &[&str], value: Value, timestamp: Millis) -> Datum {
    debug_assert_eq!(m.dimensions.len(), values.len(), "{}", m.name);
    Datum {
        metric: m.name,
        dimensions: m
            .dimensions
            .iter()
            .zip(values)
            .map(|(d, v)| (*d, (*v).to_string()))
            .collect(),
        value,
        unit: m.unit,
        timestamp,
        since: None,
    }
}

/// Build the datums of one publish tick (pure).
pub fn tick_datums(service: &str, branches: &[BranchTick], now: Millis) -> Vec<Datum> {
    let mut out = Vec::new();
    for b in branches {
        let sb = [service, b.branch.as_str()];
        if let Some(v) = b.readiness {
            out.push(datum(&contract::READINESS, &sb, Value::Single(v), now));
        }
        if let Some(r) = b.success_rate {
            out.push(datum(&contract::SUCCESS_RATE, &sb, Value::Single(r), now));
        }
        let attempts = Value::Single(b.attempts as f64);
        out.push(datum(&contract::ATTEMPTS, &sb, attempts, now));
        let failed = Value::Single(b.failed as f64);
        out.push(datum(&contract::FAILED_ATTEMPTS, &sb, failed, now));
        if let Some(na) = b.cert_not_after {
            // Fractional days; negative once expired.
            let days = Value::Single((na - now) as f64 / 86_400_000.0);
            out.push(datum(&contract::CERTIFICATE_EXPIRY_DAYS, &sb, days, now));
        }
        for (step, samples) in &b.step_durations {
            if samples.is_empty() {
                continue;
            }
            let dims = [service, b.branch.as_str(), step];
            let v = Value::Samples(samples.clone());
            out.push(datum(&contract::STEP_DURATION, &dims, v, now));
        }
    }
    out.push(datum(
        &contract::HEARTBEAT,
        &[service],
        Value::Single(1.0),
        now,
    ));
    // Fail-open signal: no datum while it cannot be told.
    if let Some(open) = fails_open(branches.iter().map(BranchTick::published)) {
        let v = Value::Single(if open { 1.0 } else { 0.0 });
        out.push(datum(&contract::BOTH_BRANCHES_UNREADY, &[service], v, now));
    }
    out
}

/// The datums of `datums` that `profile` sends to a metric sink, in order (pure). The others
/// never were for a sink: they are not drops.
pub fn for_profile(datums: Vec<Datum>, profile: contract::MetricsProfile) -> Vec<Datum> {
    datums
        .into_iter()
        .filter(|d| profile.sends(d.metric))
        .collect()
}

/// The `ServiceUnavailable` datum of a service `run` could not prepare: 1, every tick (pure).
pub fn service_unavailable_datum(service: &str, now: Millis) -> Datum {
    datum(
        &contract::SERVICE_UNAVAILABLE,
        &[service],
        Value::Single(1.0),
        now,
    )
}

/// The `SelectedBranch` datum of a service's latest stable-name round (pure).
pub fn selected_branch_datum(service: &str, value: f64, now: Millis) -> Datum {
    datum(
        &contract::SELECTED_BRANCH,
        &[service],
        Value::Single(value),
        now,
    )
}

/// The `StableNameSuccess` datum of a service's latest end-to-end attempt through its stable
/// name: 1 succeeded, 0 failed (pure).
pub fn stable_name_success_datum(service: &str, value: f64, now: Millis) -> Datum {
    datum(
        &contract::STABLE_NAME_SUCCESS,
        &[service],
        Value::Single(value),
        now,
    )
}

/// The `PublishFailures` datums: failed batches per class since the previous tick (pure).
pub fn publish_failure_datums(
    service: &str,
    counts: &[(PublishFailureClass, u64)],
    now: Millis,
) -> Vec<Datum> {
    let counts = counts.iter().map(|(c, n)| (c.as_str(), *n));
    per_class(&contract::PUBLISH_FAILURES, service, counts, now)
}

/// The `StoreSyncFailures` datums of a service: failed store syncs per class since the previous
/// tick (pure).
pub fn store_sync_failure_datums(
    service: &str,
    counts: &BTreeMap<StoreSyncFailureClass, u64>,
    now: Millis,
) -> Vec<Datum> {
    let counts = counts.iter().map(|(c, n)| (c.as_str(), *n));
    per_class(&contract::STORE_SYNC_FAILURES, service, counts, now)
}

/// A datum of `metric` (dimensions `Service`, `Class`) per class and count of `counts`.
fn per_class(
    metric: &Metric,
    service: &str,
    counts: impl Iterator<Item = (&'static str, u64)>,
    now: Millis,
) -> Vec<Datum> {
    counts
        .map(|(class, n)| datum(metric, &[service, class], Value::Single(n as f64), now))
        .collect()
}

/// The `Readiness` datum sent at once on a transition.
pub fn transition_datum(service: &str, branch: &str, value: f64, now: Millis) -> Datum {
    datum(
        &contract::READINESS,
        &[service, branch],
        Value::Single(value),
        now,
    )
}

/// One sink a batch goes to: its kind (`emf`, `cloudwatch`) and, for a CloudWatch target a
/// service names other than `[publish.cloudwatch]`'s own, that target's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SinkId {
    /// The sink's kind.
    pub kind: &'static str,
    /// The target's name; `None`: the default target (and every `emf` sink).
    pub target: Option<std::sync::Arc<str>>,
}

impl SinkId {
    /// The sink of `kind` at the default target.
    pub fn of(kind: &'static str) -> SinkId {
        SinkId { kind, target: None }
    }
}

impl std::fmt::Display for SinkId {
    /// `cloudwatch`, or `cloudwatch[<target>]` for a named target.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            None => f.write_str(self.kind),
            Some(t) => write!(f, "{}[{t}]", self.kind),
        }
    }
}

/// One sink a service's datums go to ([`sinks_of`]): its kind, its id, and for a CloudWatch
/// sink the target it sends to.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRoute<'a> {
    /// The sink's kind.
    pub kind: SinkKind,
    /// Its id: batches, queues and `publish` records name it.
    pub id: SinkId,
    /// The CloudWatch target; `None` for any other kind.
    pub target: Option<&'a PublishTarget>,
}

/// The sinks the datums of a service publishing to `targets` (its `publish_targets`) go to:
/// each of `publish.sinks` in order, the `cloudwatch` sink once per target. A target equal to
/// `[publish.cloudwatch]`'s own has no name in its id, so every service of a namespace that
/// names no target shares one sink. The one rule the fold's batches, the sink tasks a run
/// starts and `check`'s cost estimate follow.
pub fn sinks_of<'a>(publish: &Publish, targets: &'a [PublishTarget]) -> Vec<SinkRoute<'a>> {
    let default = publish.default_target();
    let mut out = Vec::new();
    for &kind in &publish.sinks {
        match kind {
            SinkKind::CloudWatch => out.extend(targets.iter().map(|t| SinkRoute {
                kind,
                id: SinkId {
                    kind: kind.into(),
                    target: (*t != default).then(|| std::sync::Arc::from(t.name.as_str())),
                },
                target: Some(t),
            })),
            SinkKind::Emf | SinkKind::Otlp => out.push(SinkRoute {
                kind,
                id: SinkId::of(kind.into()),
                target: None,
            }),
        }
    }
    out
}

/// A sink's account of one batch it took, or dropped from, its queue.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkReport {
    /// The batch id ([`crate::fold::Batch::id`]).
    pub batch: u64,
    /// The sink.
    pub sink: SinkId,
    /// Datums in the batch.
    pub datums: usize,
    /// Datums sent (non-finite ones are skipped).
    pub sent: usize,
    /// Tries made, the first included (0: never tried).
    pub tries: u32,
    /// What became of it: `sent`, `failed`, `expired` or `dropped_queue_full`.
    pub outcome: PublishOutcome,
    /// Why the last try failed (`outcome` = `failed`).
    pub class: Option<PublishFailureClass>,
    /// Why the batch was dropped; `None` when it was sent.
    pub error: Option<String>,
}

/// Why a sink's queue refused a batch (a full queue never refuses: it drops its oldest batch
/// and reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The sink's task has ended.
    Closed,
}

impl Refusal {
    /// The cause, in a phrase.
    pub fn why(self) -> &'static str {
        match self {
            Refusal::Closed => "sink stopped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_contract() {
        let b = BranchTick {
            branch: "primary".into(),
            readiness: Some(1.0),
            is_ready: true,
            is_known: true,
            success_rate: Some(100.0),
            attempts: 30,
            failed: 0,
            step_durations: vec![("resolve", vec![1.0, 2.0]), ("write", vec![])],
            cert_not_after: Some(1000 + 86_400_000 * 3 / 2),
        };
        let d = tick_datums("orders-db", &[b], 1000);
        let names: Vec<_> = d.iter().map(|d| d.metric).collect();
        assert_eq!(
            names,
            [
                "Readiness",
                "SuccessRate",
                "Attempts",
                "FailedAttempts",
                "CertificateExpiryDays",
                "StepDuration",
                "Heartbeat",
                "BothBranchesUnready"
            ]
        );
        assert_eq!(d[4].value, Value::Single(1.5));
        assert_eq!(d[5].dimensions[2], ("Step", "resolve".to_string()));
        assert_eq!(d[7].value, Value::Single(0.0));
    }

    #[test]
    fn control_profile_keeps_only_what_alarms_read() {
        let b = BranchTick {
            branch: "primary".into(),
            readiness: Some(0.0),
            is_known: true,
            success_rate: Some(0.0),
            attempts: 3,
            failed: 3,
            step_durations: vec![("connect", vec![5.0])],
            cert_not_after: Some(86_400_000),
            ..Default::default()
        };
        let mut d = tick_datums("s", &[b], 0);
        d.push(service_unavailable_datum("t", 0));
        d.extend(store_sync_failure_datums(
            "s",
            &BTreeMap::from([(StoreSyncFailureClass::Io, 1)]),
            0,
        ));
        let full = for_profile(d.clone(), contract::MetricsProfile::Full);
        assert_eq!(full, d);
        let control = for_profile(d, contract::MetricsProfile::Control);
        let names: Vec<_> = control.iter().map(|d| d.metric).collect();
        assert_eq!(
            names,
            [
                "Readiness",
                "Heartbeat",
                "BothBranchesUnready",
                "ServiceUnavailable"
            ]
        );
    }

    #[test]
    fn unknown_publishes_no_readiness_and_no_fail_open() {
        let b = BranchTick {
            branch: "primary".into(),
            ..Default::default()
        };
        let d = tick_datums("s", &[b], 0);
        assert!(!d.iter().any(|d| d.metric == "Readiness"));
        assert!(!d.iter().any(|d| d.metric == "BothBranchesUnready"));
    }

    #[test]
    fn all_unready_is_fail_open() {
        let mk = |n: &str| BranchTick {
            branch: n.into(),
            readiness: Some(0.0),
            is_known: true,
            ..Default::default()
        };
        let d = tick_datums("s", &[mk("a"), mk("b")], 0);
        let f = d
            .iter()
            .find(|d| d.metric == "BothBranchesUnready")
            .unwrap();
        assert_eq!(f.value, Value::Single(1.0));
    }

    /// A fleet of three services: `a` names no target, `b` two (one equal to the default
    /// target, one in another region), `c` one in another account.
    fn fleet() -> crate::config::Config {
        let text = "[publish]\nsinks = [\"emf\", \"cloudwatch\"]\n[publish.cloudwatch]\nregion = \"eu-west-1\"\n[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 1\n\
             [[service]]\nname = \"a\"\nstable_name = \"a.internal.example\"\n\
             [[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a1.internal.example\"\n\
             [[service]]\nname = \"b\"\nstable_name = \"b.internal.example\"\n\
             publish = [{ region = \"eu-west-1\" }, { region = \"us-east-1\" }]\n\
             [[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"b1.internal.example\"\n\
             [[service]]\nname = \"c\"\nstable_name = \"c.internal.example\"\n\
             publish = { name = \"zone\", role_arn = \"arn:aws:iam::111122223333:role/p\" }\n\
             [[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"c1.internal.example\"\n";
        crate::config::parse(std::path::Path::new("t.toml"), text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The one rule: each sink of `publish.sinks` in order, `cloudwatch` once per target, a
    /// target equal to the default one unnamed (shared with every service naming none).
    #[test]
    fn sinks_of_a_service_follow_its_targets() {
        let cfg = fleet();
        let ids = |i: usize| -> Vec<String> {
            let s = &cfg.services[i];
            let routes = sinks_of(&cfg.publish, &s.publish_targets);
            for r in &routes {
                assert_eq!(r.kind == SinkKind::CloudWatch, r.target.is_some(), "{r:?}");
                assert_eq!(<&str>::from(r.kind), r.id.kind);
            }
            routes.iter().map(|r| r.id.to_string()).collect()
        };
        assert_eq!(ids(0), ["emf", "cloudwatch"]);
        assert_eq!(ids(1), ["emf", "cloudwatch", "cloudwatch[us-east-1]"]);
        assert_eq!(ids(2), ["emf", "cloudwatch[zone]"]);
        let s = &cfg.services[2];
        let zone = sinks_of(&cfg.publish, &s.publish_targets)[1].target;
        assert_eq!(zone, Some(&s.publish_targets[0]));
        // Without the cloudwatch sink a service's datums go to emf alone, targets or not.
        let mut publish = cfg.publish.clone();
        publish.sinks = vec![SinkKind::Emf];
        let routes = sinks_of(&publish, &cfg.services[1].publish_targets);
        assert_eq!(routes.len(), 1);
        assert_eq!(
            (routes[0].id.clone(), routes[0].target),
            (SinkId::of("emf"), None)
        );
    }
}
