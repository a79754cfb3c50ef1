//! The metric families `/metrics` serves: their label sets, names, help texts and the step
//! duration buckets, registered once, each series in the order of its labels. Which effect
//! moves which series is `exposition.rs`'s.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeSet;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};

/// The prefix of every series name.
pub const PREFIX: &str = "readyprobe";

/// Upper bounds of `readyprobe_step_duration_seconds`'s buckets: the contract's, in seconds.
pub use crate::contract::STEP_DURATION_BUCKETS;

/// A service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ServiceLabels {
    pub service: String,
}

/// A branch of a service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct BranchLabels {
    pub service: String,
    pub branch: String,
}

/// A branch's attempts of one result: `success` with class `""`, or `failure` with its class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct AttemptLabels {
    pub service: String,
    pub branch: String,
    pub result: &'static str,
    pub class: &'static str,
}

/// One step of a branch's attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct StepLabels {
    pub service: String,
    pub branch: String,
    pub step: &'static str,
}

/// A sink (`cloudwatch`, `emf`, `otlp`) at one target (`""`: the sink's own) and a failure
/// class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
    pub target: String,
    pub class: &'static str,
}

/// A service and a failure class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ServiceClassLabels {
    pub service: String,
    pub class: &'static str,
}

/// A [`Family`] that encodes its series in the order of their label sets (service, then
/// branch, ...), so that two scrapes list them alike; `Family` alone lists them in its hash
/// map's order. It keeps the label sets it has beside the family.
#[derive(Debug)]
pub struct Ordered<S, M, C = fn() -> M> {
    family: Family<S, M, C>,
    labels: Arc<RwLock<BTreeSet<S>>>,
}

impl<S, M, C: Clone> Clone for Ordered<S, M, C> {
    fn clone(&self) -> Self {
        Ordered {
            family: self.family.clone(),
            labels: self.labels.clone(),
        }
    }
}

impl<S: Clone + Hash + Eq + Ord, M: Default> Default for Ordered<S, M> {
    fn default() -> Self {
        Ordered {
            family: Family::default(),
            labels: Arc::default(),
        }
    }
}

impl<S: Clone + Hash + Eq + Ord, M, C: MetricConstructor<M>> Ordered<S, M, C> {
    /// A family whose series `constructor` makes.
    pub fn new_with_constructor(constructor: C) -> Self {
        Ordered {
            family: Family::new_with_constructor(constructor),
            labels: Arc::default(),
        }
    }

    /// The series of `labels`, made if new.
    pub fn get_or_create(&self, labels: &S) -> impl Deref<Target = M> + '_ {
        let known = self.labels.read().unwrap_or_else(PoisonError::into_inner);
        if !known.contains(labels) {
            drop(known);
            let mut known = self.labels.write().unwrap_or_else(PoisonError::into_inner);
            known.insert(labels.clone());
        }
        self.family.get_or_create(labels)
    }

    /// The series of `labels`, if there is one.
    pub fn get(&self, labels: &S) -> Option<impl Deref<Target = M> + '_> {
        self.family.get(labels)
    }

    /// Remove the series of `labels`; whether there was one.
    pub fn remove(&self, labels: &S) -> bool {
        let removed = self.family.remove(labels);
        let mut known = self.labels.write().unwrap_or_else(PoisonError::into_inner);
        known.remove(labels);
        removed
    }
}

impl<S, M, C> TypedMetric for Ordered<S, M, C>
where
    M: TypedMetric,
{
    const TYPE: MetricType = M::TYPE;
}

impl<S, M, C> EncodeMetric for Ordered<S, M, C>
where
    S: Clone + Hash + Eq + Ord + EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
    C: MetricConstructor<M>,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let known = self.labels.read().unwrap_or_else(PoisonError::into_inner);
        for labels in known.iter() {
            if let Some(m) = self.family.get(labels) {
                m.encode(encoder.encode_family(labels)?)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        let known = self.labels.read().unwrap_or_else(PoisonError::into_inner);
        known.is_empty()
    }
}

/// A histogram with [`STEP_DURATION_BUCKETS`].
fn step_histogram() -> Histogram {
    Histogram::new(STEP_DURATION_BUCKETS)
}

/// A gauge holding a float (a Unix time with its milliseconds).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Handles on every family (each a shared reference to its series).
#[derive(Debug, Clone)]
pub struct Families {
    pub readiness: Ordered<BranchLabels, Gauge>,
    pub attempts: Ordered<AttemptLabels, Counter>,
    pub step_duration: Ordered<StepLabels, Histogram>,
    pub certificate_expiry: Ordered<BranchLabels, Gauge>,
    pub heartbeat: Ordered<ServiceLabels, FloatGauge>,
    pub both_branches_unready: Ordered<ServiceLabels, Gauge>,
    pub service_unavailable: Ordered<ServiceLabels, Gauge>,
    pub publish_failures: Ordered<SinkLabels, Counter>,
    pub store_sync_failures: Ordered<ServiceClassLabels, Counter>,
}

impl Families {
    /// Every family, registered in `registry` (its prefix is [`PREFIX`]).
    pub fn register(registry: &mut Registry) -> Families {
        let f = Families {
            readiness: Ordered::default(),
            attempts: Ordered::default(),
            step_duration: Ordered::new_with_constructor(step_histogram as fn() -> Histogram),
            certificate_expiry: Ordered::default(),
            heartbeat: Ordered::default(),
            both_branches_unready: Ordered::default(),
            service_unavailable: Ordered::default(),
            publish_failures: Ordered::default(),
            store_sync_failures: Ordered::default(),
        };
        registry.register(
            "readiness",
            "Published readiness of a branch: 1 ready, 0 unready or pending approval (absent while unknown); what the CloudWatch Readiness metric carries",
            f.readiness.clone(),
        );
        registry.register(
            "attempts",
            "Finished probe attempts of a branch, by result and failure class (class empty on success)",
            f.attempts.clone(),
        );
        registry.register_with_unit(
            "step_duration",
            "Duration of each step of a branch's attempts (resolve, connect, tls, auth, write, verify), failed steps included",
            Unit::Seconds,
            f.step_duration.clone(),
        );
        registry.register_with_unit(
            "certificate_expiry",
            "Unix time of the notAfter of the leaf certificate the branch last presented",
            Unit::Seconds,
            f.certificate_expiry.clone(),
        );
        registry.register_with_unit(
            "heartbeat_timestamp",
            "Unix time of the service's latest publish tick",
            Unit::Seconds,
            f.heartbeat.clone(),
        );
        registry.register(
            "both_branches_unready",
            "1 when every branch of the service is known and none is ready, so Route 53 fails open; 0 otherwise",
            f.both_branches_unready.clone(),
        );
        registry.register(
            "service_unavailable",
            "1 for a service of the config that could not be prepared and is not probed",
            f.service_unavailable.clone(),
        );
        registry.register(
            "publish_failures",
            "Batches a sink failed to send after every try, by target (empty: the sink's own) and failure class",
            f.publish_failures.clone(),
        );
        registry.register(
            "store_sync_failures",
            "Failed syncs of the service's control document with the state store, by failure class",
            f.store_sync_failures.clone(),
        );
        f
    }
}
