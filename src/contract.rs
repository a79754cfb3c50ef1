//! The metric contract as data: the series alarms depend on (names, units, dimensions,
//! resolution). The sinks build every datum from these entries, and the deployment templates
//! and `check --aws` are checked against them, so a change here is a change of the contract.

use serde::{Deserialize, Serialize};

/// The namespace when the config sets none.
pub const DEFAULT_NAMESPACE: &str = "Readyprobe";

/// `StorageResolution` of every datum: standard resolution, the only one a Route 53
/// `CLOUDWATCH_METRIC` health check can follow.
pub const STORAGE_RESOLUTION: i32 = 60;

/// CloudWatch unit of a datum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// `None`.
    None,
    /// `Percent`.
    Percent,
    /// `Count`.
    Count,
    /// `Milliseconds`.
    Milliseconds,
}

impl Unit {
    /// CloudWatch spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::None => "None",
            Unit::Percent => "Percent",
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// One metric of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// Metric name.
    pub name: &'static str,
    /// Unit of every datum.
    pub unit: Unit,
    /// Dimension names, in order.
    pub dimensions: &'static [&'static str],
}

/// Dimension of the service.
pub const SERVICE: &str = "Service";
/// Dimension of the branch.
pub const BRANCH: &str = "Branch";
/// Dimension of the step of `StepDuration`.
pub const STEP: &str = "Step";
/// Dimension of the failure class of `PublishFailures` and `StoreSyncFailures`.
pub const CLASS: &str = "Class";

const SB: &[&str] = &[SERVICE, BRANCH];
const S: &[&str] = &[SERVICE];

/// 1 ready, 0 unready or pending approval; no datum while unknown. The alarm's metric.
pub const READINESS: Metric = Metric {
    name: "Readiness",
    unit: Unit::None,
    dimensions: SB,
};
/// Share of successful attempts in the unready window.
pub const SUCCESS_RATE: Metric = Metric {
    name: "SuccessRate",
    unit: Unit::Percent,
    dimensions: SB,
};
/// Attempts finished since the previous tick.
pub const ATTEMPTS: Metric = Metric {
    name: "Attempts",
    unit: Unit::Count,
    dimensions: SB,
};
/// Of which failed.
pub const FAILED_ATTEMPTS: Metric = Metric {
    name: "FailedAttempts",
    unit: Unit::Count,
    dimensions: SB,
};
/// Step durations, as a statistic set.
pub const STEP_DURATION: Metric = Metric {
    name: "StepDuration",
    unit: Unit::Milliseconds,
    dimensions: &[SERVICE, BRANCH, STEP],
};
/// Upper bounds of the step-duration histograms' buckets, seconds, for every exporter that
/// buckets (`/metrics`, OTLP in ms): 1 ms (a resolve from a local cache) to 30 s (past any
/// step timeout a config allows; more lands in the last, unbounded bucket).
pub const STEP_DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Days until the leaf certificate's `notAfter`.
pub const CERTIFICATE_EXPIRY_DAYS: Metric = Metric {
    name: "CertificateExpiryDays",
    unit: Unit::None,
    dimensions: SB,
};
/// 1 every tick while the prober is alive.
pub const HEARTBEAT: Metric = Metric {
    name: "Heartbeat",
    unit: Unit::Count,
    dimensions: S,
};
/// 1 when every branch is known and none is ready (Route 53 fails open).
pub const BOTH_BRANCHES_UNREADY: Metric = Metric {
    name: "BothBranchesUnready",
    unit: Unit::None,
    dimensions: S,
};
/// 1 every tick for a service `run` could not prepare.
pub const SERVICE_UNAVAILABLE: Metric = Metric {
    name: "ServiceUnavailable",
    unit: Unit::None,
    dimensions: S,
};
/// Failed batches per class since the previous tick (`emf` sink only).
pub const PUBLISH_FAILURES: Metric = Metric {
    name: "PublishFailures",
    unit: Unit::Count,
    dimensions: &[SERVICE, CLASS],
};
/// Failed syncs with the state store per class since the previous tick: approvals, overrides
/// and snapshots have stopped flowing while it counts.
pub const STORE_SYNC_FAILURES: Metric = Metric {
    name: "StoreSyncFailures",
    unit: Unit::Count,
    dimensions: &[SERVICE, CLASS],
};
/// Which branch the stable name's answer selects (`[stable_name_probe]` only): 1 PRIMARY,
/// 2 SECONDARY, 0 neither; from the latest round, every tick. No alarm reads it.
pub const SELECTED_BRANCH: Metric = Metric {
    name: "SelectedBranch",
    unit: Unit::None,
    dimensions: S,
};

/// Whether the latest end-to-end attempt through the stable name succeeded (`[stable_name_probe]
/// end_to_end` only): 1 succeeded, 0 failed; from the latest round, every tick. No alarm reads it.
pub const STABLE_NAME_SUCCESS: Metric = Metric {
    name: "StableNameSuccess",
    unit: Unit::None,
    dimensions: S,
};

/// Every metric of the contract.
pub const METRICS: &[Metric] = &[
    READINESS,
    SUCCESS_RATE,
    ATTEMPTS,
    FAILED_ATTEMPTS,
    STEP_DURATION,
    CERTIFICATE_EXPIRY_DAYS,
    HEARTBEAT,
    BOTH_BRANCHES_UNREADY,
    PUBLISH_FAILURES,
    SERVICE_UNAVAILABLE,
    STORE_SYNC_FAILURES,
    SELECTED_BRANCH,
    STABLE_NAME_SUCCESS,
];

/// Which metrics of the contract a run sends (`publish.metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsProfile {
    /// Every metric of [`METRICS`].
    #[default]
    Full,
    /// Only [`CONTROL`]: the series the deployment templates' alarms read.
    Control,
}

impl MetricsProfile {
    /// Its config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsProfile::Full => "full",
            MetricsProfile::Control => "control",
        }
    }

    /// Whether a sink of kind `sink` (`cloudwatch`, `emf`, `otlp`) takes this profile: the one
    /// rule of which sinks `publish.metrics` limits. `cloudwatch` and `emf` (billed per series
    /// and read by alarms) do; `otlp` always gets the full set, as `/metrics` and the evidence do.
    pub fn limits(self, sink: &str) -> bool {
        self != MetricsProfile::Full && matches!(sink, "cloudwatch" | "emf")
    }

    /// Whether a run with this profile sends metric `name` to a metric sink.
    pub fn sends(self, name: &str) -> bool {
        match self {
            MetricsProfile::Full => true,
            MetricsProfile::Control => CONTROL.iter().any(|m| m.name == name),
        }
    }
}

/// The metrics alarms read, the `control` profile: readiness per branch, and per service the
/// prober's heartbeat, the fail-open signal and an unprepared service. Failure counts
/// (`PublishFailures`, `StoreSyncFailures`) are left out: no alarm reads them, and each failure
/// is in the evidence and the log anyway.
pub const CONTROL: &[Metric] = &[
    READINESS,
    HEARTBEAT,
    BOTH_BRANCHES_UNREADY,
    SERVICE_UNAVAILABLE,
];

/// The statistics a Route 53 `CLOUDWATCH_METRIC` health check can follow (no extended
/// statistics, no metric math).
pub const ROUTE53_STATISTICS: &[&str] = &["Average", "Minimum", "Maximum", "Sum", "SampleCount"];

/// The alarm period the contract publishes for, seconds.
pub const ALARM_PERIOD: i32 = 60;

/// The largest failover record TTL the contract allows, seconds.
pub const MAX_RECORD_TTL: i64 = 60;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
    }

    #[test]
    fn control_profile_sends_only_control_metrics() {
        for m in METRICS {
            assert!(MetricsProfile::Full.sends(m.name), "{}", m.name);
            let control = CONTROL.contains(m);
            assert_eq!(MetricsProfile::Control.sends(m.name), control, "{}", m.name);
        }
        let sent: Vec<_> = METRICS
            .iter()
            .filter(|m| MetricsProfile::Control.sends(m.name))
            .map(|m| m.name)
            .collect();
        assert!(MetricsProfile::Control.limits("cloudwatch"));
        assert!(MetricsProfile::Control.limits("emf"));
        assert!(!MetricsProfile::Control.limits("otlp"));
        assert!(!MetricsProfile::Full.limits("cloudwatch"));
        assert_eq!(
            sent,
            [
                "Readiness",
                "Heartbeat",
                "BothBranchesUnready",
                "ServiceUnavailable"
            ]
        );
    }
}
