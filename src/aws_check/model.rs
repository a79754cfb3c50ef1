//! What `check --aws` compares: the config's expectations and the deployed objects, as plain
//! data (no SDK types), and what it reports.

use crate::aws_vocab::{
    Comparison, HealthCheckType, InsufficientDataHealthStatus, Spelled, Statistic, TreatMissing,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// The result of one read: the objects, or why they could not be read (a denied call, an
/// answer that could not be used, a listing that did not end, the deadline).
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched<T> {
    /// What the call returned.
    Got(T),
    /// Not checked, why, and what to do about it.
    NotChecked(Unchecked),
}

/// Why a read gave nothing to check, and the fix for that cause (the IAM action to allow, the
/// endpoint or network to look at, what was wrong with the answer).
#[derive(Debug, Clone, PartialEq)]
pub struct Unchecked {
    /// What happened, with AWS's error code and message when it answered.
    pub why: String,
    /// What to do.
    pub fix: String,
}

impl Unchecked {
    /// A reason and its fix.
    pub fn new(why: impl Into<String>, fix: impl Into<String>) -> Unchecked {
        Unchecked {
            why: why.into(),
            fix: fix.into(),
        }
    }
}

impl<T> Fetched<T> {
    /// What was read, if it was.
    pub fn got(&self) -> Option<&T> {
        match self {
            Fetched::Got(t) => Some(t),
            Fetched::NotChecked(_) => None,
        }
    }
}

/// Why `check --aws` checked nothing at all: its exit code, and what to tell (on stderr, and as
/// the `error` of the JSON document).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The exit code.
    #[serde(skip)]
    pub exit: u8,
    /// `no_region`, `credentials` or `unreachable`.
    pub kind: &'static str,
    /// What happened.
    pub message: String,
    /// What to do.
    pub fix: String,
}

/// What the config says the deployment must match.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// The region of the CloudWatch client: where the alarms were read.
    pub region: String,
    /// `route53.insufficient_data_health_status`.
    pub insufficient_data: Option<InsufficientDataHealthStatus>,
    /// The services of the config.
    pub services: Vec<ServiceExpect>,
}

/// One service of the config.
#[derive(Debug, Clone, Default)]
pub struct ServiceExpect {
    /// `Service` dimension value.
    pub name: String,
    /// Namespace its datums go to.
    pub namespace: String,
    /// The failover record name (lower case, no root dot).
    pub stable_name: String,
    /// The regions the service's other publish targets are read in: a health check following
    /// an alarm there belongs to that target's check, not to this one's `region` rule.
    pub other_regions: Vec<String>,
    /// The branches of the service.
    pub branches: Vec<BranchExpect>,
}

/// One branch of a service in the config.
#[derive(Debug, Clone, Default)]
pub struct BranchExpect {
    /// Branch name (`Branch` dimension value).
    pub name: String,
    /// Failover role (`PRIMARY`, `SECONDARY`).
    pub role: String,
    /// The branch-specific endpoint the prober probes (lower case, no root dot): the failover
    /// record of the role must answer with it.
    pub endpoint: String,
    /// The region the branch runs in (`branch.region`), if the config names it.
    pub region: Option<String>,
}

/// One metric an alarm watches (the alarm's own, or one `MetricStat` of its metric math).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Namespace.
    pub namespace: String,
    /// Metric name.
    pub metric: String,
    /// Dimensions (name, value) as the alarm lists them.
    pub dimensions: Vec<(String, String)>,
}

impl Series {
    /// The value of dimension `name`.
    pub fn dim(&self, name: &str) -> Option<&str> {
        self.dimensions
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A CloudWatch metric alarm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Alarm {
    /// Alarm name.
    pub name: String,
    /// The metric of a single-metric alarm; `None` for metric math.
    pub series: Option<Series>,
    /// The metrics inside metric math (`Metrics`); empty for a single-metric alarm.
    pub math: Vec<Series>,
    /// `Unit`, if set.
    pub unit: Option<String>,
    /// `Statistic`, if set.
    pub statistic: Option<Spelled<Statistic>>,
    /// `ExtendedStatistic` (`p99`, ...), if set.
    pub extended_statistic: Option<String>,
    /// `Period`, seconds.
    pub period: Option<i32>,
    /// `EvaluationPeriods`.
    pub evaluation_periods: Option<i32>,
    /// `DatapointsToAlarm`; unset means `EvaluationPeriods`.
    pub datapoints_to_alarm: Option<i32>,
    /// `TreatMissingData`, if set.
    pub treat_missing_data: Option<Spelled<TreatMissing>>,
    /// `ComparisonOperator`, if set.
    pub comparison: Option<Spelled<Comparison>>,
    /// `Threshold`, if set.
    pub threshold: Option<f64>,
}

impl Alarm {
    /// Every metric it watches.
    pub fn all_series(&self) -> impl Iterator<Item = &Series> {
        self.series.iter().chain(self.math.iter())
    }
}

/// The alarm a `CLOUDWATCH_METRIC` health check follows.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmRef {
    /// Alarm name.
    pub name: String,
    /// Alarm region.
    pub region: String,
}

/// A Route 53 health check.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// Health check id.
    pub id: String,
    /// `Type` (`CLOUDWATCH_METRIC`, `HTTPS`, ...).
    pub kind: Spelled<HealthCheckType>,
    /// `AlarmIdentifier`, if any.
    pub alarm: Option<AlarmRef>,
    /// `InsufficientDataHealthStatus`, if set.
    pub insufficient_data: Option<Spelled<InsufficientDataHealthStatus>>,
    /// `Inverted`: Route 53 reports healthy while the alarm is in ALARM.
    pub inverted: bool,
    /// `Disabled`: Route 53 considers the health check healthy whatever the alarm says.
    pub disabled: bool,
    /// `ChildHealthChecks` of a `CALCULATED` health check (ids); empty for the others.
    pub children: Vec<String>,
    /// `HealthThreshold` of a `CALCULATED` health check: how many children must be healthy.
    pub health_threshold: Option<i32>,
}

/// A record of a hosted zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    /// Name, lower case, without the root dot.
    pub name: String,
    /// Type (`A`, `CNAME`, ...).
    pub rtype: String,
    /// `SetIdentifier`, if any.
    pub set_identifier: Option<String>,
    /// `Failover` (`PRIMARY`, `SECONDARY`), if any.
    pub failover: Option<String>,
    /// TTL, seconds (`None` for an alias record).
    pub ttl: Option<i64>,
    /// `HealthCheckId`, if any.
    pub health_check_id: Option<String>,
    /// An alias record's `EvaluateTargetHealth`.
    pub evaluate_target_health: bool,
    /// The values of `ResourceRecords` (a CNAME's target, an A record's addresses), as listed.
    pub values: Vec<String>,
    /// An alias record's `AliasTarget.DNSName`, as listed.
    pub alias_target: Option<String>,
}

/// Everything read from AWS.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// Metric alarms of the region.
    pub alarms: Fetched<Vec<Alarm>>,
    /// Health checks of the account.
    pub health_checks: Fetched<Vec<HealthCheck>>,
    /// Per service name: its hosted zone id and the records named by its stable name.
    pub records: BTreeMap<String, Fetched<(String, Vec<Record>)>>,
    /// Per alarm name: whether its metric has a datum in the last 5 minutes.
    pub recent: BTreeMap<String, Fetched<bool>>,
}

/// The rule a finding breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Rule {
    /// A read was denied or failed: nothing was checked there.
    NotChecked,
    /// No alarm watches the branch's `Readiness`.
    NoAlarm,
    /// No health check follows an alarm of the branch.
    NoHealthCheck,
    /// Period ≠ 60 s (high resolution below).
    Period,
    /// Extended statistic, a statistic Route 53 cannot follow, or one that has no meaning on a
    /// 0/1 metric published by several probers (`Sum`, `SampleCount`).
    Statistic,
    /// The alarm's comparison and threshold do not mean "unready": ALARM must fire when the
    /// statistic of `Readiness` drops below 1 (or below the majority's 0.5), and only then.
    Direction,
    /// Metric math instead of one metric.
    MetricMath,
    /// `DatapointsToAlarm` ≠ `EvaluationPeriods`.
    MOutOfN,
    /// `Period` × `EvaluationPeriods` above 5 minutes: a late failover.
    DetectionTime,
    /// The health check's `AlarmIdentifier.Region` is not the alarm's region.
    Region,
    /// A namespace the prober does not publish to.
    Namespace,
    /// A metric other than `Readiness`.
    Metric,
    /// A dimension set other than `Service`, `Branch`, or a branch the config does not have.
    Dimensions,
    /// A unit the prober does not publish: CloudWatch filters every datum out.
    Unit,
    /// `TreatMissingData` unset.
    TreatMissingData,
    /// `InsufficientDataHealthStatus` unset or not the expected value.
    InsufficientDataHealthStatus,
    /// No datum in the last 5 minutes.
    NoDatum,
    /// No failover record under the stable name.
    NoRecord,
    /// Failover record TTL above the contract's.
    RecordTtl,
    /// A failover record that does not follow its branch's health check.
    RecordHealthCheck,
    /// A SECONDARY record with no health evaluation at all.
    SecondaryUnevaluated,
    /// Only one of the PRIMARY and SECONDARY failover records exists under the stable name.
    FailoverPair,
    /// A failover record that does not answer with its branch's endpoint: the prober watches one
    /// target and Route 53 routes to another.
    RecordTarget,
    /// A health check with `Inverted` set: ALARM (unready) reads as healthy.
    HealthCheckInverted,
    /// A health check with `Disabled` set: Route 53 considers it healthy whatever the alarm says.
    HealthCheckDisabled,
    /// A `CALCULATED` health check of the branch with a child that follows another branch's
    /// alarm: the branch's health then depends on another branch's readiness.
    CalculatedChild,
    /// A `CALCULATED` health check of the branch whose `HealthThreshold` is below its number of
    /// children: one region's view alone keeps the branch healthy.
    CalculatedThreshold,
    /// A warning: every alarm the branch's health check follows (directly, or through the
    /// children of a `CALCULATED` one) is in the branch's own region, so an impaired CloudWatch
    /// or a dark region there leaves the branch's only health signal stale when it fails.
    AlarmInBranchRegion,
}

impl Rule {
    /// Whether a finding of this rule is about Route 53's objects alone (health checks,
    /// records): Route 53 is global, so it is the same from every target in one account.
    pub fn is_route53(self) -> bool {
        matches!(
            self,
            Rule::HealthCheckInverted
                | Rule::HealthCheckDisabled
                | Rule::InsufficientDataHealthStatus
                | Rule::CalculatedChild
                | Rule::CalculatedThreshold
                | Rule::NoRecord
                | Rule::RecordTtl
                | Rule::RecordHealthCheck
                | Rule::SecondaryUnevaluated
                | Rule::FailoverPair
                | Rule::RecordTarget
        )
    }

    /// Whether a finding of this rule is a warning: reported, but neither a violation nor a
    /// part not checked (it does not change the exit code).
    pub fn is_warning(self) -> bool {
        matches!(self, Rule::AlarmInBranchRegion)
    }
}

/// One violation (or one thing not checked) and its fix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The publish target whose reads found it (its name), when the check read more than the
    /// config's default target; set by the caller of the rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Service name.
    pub service: String,
    /// Branch name, when the finding is about one.
    pub branch: Option<String>,
    /// The AWS object (`alarm NAME`, `health check ID`, `record NAME PRIMARY`, ...).
    pub object: String,
    /// The rule.
    pub rule: Rule,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

impl Finding {
    /// Whether it is a violation (a `not_checked` row and a warning are not).
    pub fn is_violation(&self) -> bool {
        self.rule != Rule::NotChecked && !self.rule.is_warning()
    }

    /// Whether it is a warning.
    pub fn is_warning(&self) -> bool {
        self.rule.is_warning()
    }
}
