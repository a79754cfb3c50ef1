//! The metric families `/metrics` serves: their label sets, names, help texts and the step
//! duration buckets, registered once. Which effect moves which series is `exposition.rs`'s.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// The prefix of every series name.
pub const PREFIX: &str = "readyprobe";

/// Upper bounds of `readyprobe_step_duration_seconds`'s buckets: the contract's, in seconds.
pub use crate::contract::STEP_DURATION_BUCKETS;

/// A service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub service: String,
}

/// A branch of a service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BranchLabels {
    pub service: String,
    pub branch: String,
}

/// A branch's attempts of one result: `success` with class `""`, or `failure` with its class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub service: String,
    pub branch: String,
    pub result: &'static str,
    pub class: &'static str,
}

/// One step of a branch's attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub service: String,
    pub branch: String,
    pub step: &'static str,
}

/// A sink (`cloudwatch`, `emf`, `otlp`) at one target (`""`: the sink's own) and a failure
/// class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
    pub target: String,
    pub class: &'static str,
}

/// A service and a failure class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceClassLabels {
    pub service: String,
    pub class: &'static str,
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
    pub readiness: Family<BranchLabels, Gauge>,
    pub attempts: Family<AttemptLabels, Counter>,
    pub step_duration: Family<StepLabels, Histogram, fn() -> Histogram>,
    pub certificate_expiry: Family<BranchLabels, Gauge>,
    pub heartbeat: Family<ServiceLabels, FloatGauge>,
    pub both_branches_unready: Family<ServiceLabels, Gauge>,
    pub service_unavailable: Family<ServiceLabels, Gauge>,
    pub publish_failures: Family<SinkLabels, Counter>,
    pub store_sync_failures: Family<ServiceClassLabels, Counter>,
}

impl Families {
    /// Every family, registered in `registry` (its prefix is [`PREFIX`]).
    pub fn register(registry: &mut Registry) -> Families {
        let f = Families {
            readiness: Family::default(),
            attempts: Family::default(),
            step_duration: Family::new_with_constructor(step_histogram as fn() -> Histogram),
            certificate_expiry: Family::default(),
            heartbeat: Family::default(),
            both_branches_unready: Family::default(),
            service_unavailable: Family::default(),
            publish_failures: Family::default(),
            store_sync_failures: Family::default(),
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
