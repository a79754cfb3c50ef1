//! Scenario files: what `simulate` scripts (attempt outcomes per branch, operator approvals) and
//! the assumption of each hop after the prober (alarm, health check, DNS answer, resolver cache).
//!
//! Two stages, as the config loader: serde types that reject unknown keys (durations are humantime
//! strings), then validation against the service being simulated. Every problem is an
//! [`Issue`] with the dotted key and its line, collected into one [`ConfigError`]. Pure: the
//! caller reads the file.

use crate::config::{ConfigError, Issue};
use crate::failure::FailureClass;
use crate::readiness::{Millis, ReadinessState};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;
use toml::de::{DeTable, DeValue};

/// The longest scenario, so that a simulation stays small (a week of 1 s attempts is 600,000
/// attempts per branch).
pub const MAX_SCENARIO: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most attempts a branch may have in one simulation.
pub const MAX_ATTEMPTS: u64 = 1_000_000;
/// How long a scripted approval stays valid (the default of `approve --expires`), ms.
pub const APPROVAL_VALID_MS: Millis = 30 * 60 * 1000;

pub use crate::aws_vocab::{Comparison, InsufficientDataHealthStatus, Statistic, TreatMissing};

/// The state a branch starts in (`initial`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawInitial {
    Unknown,
    Ready,
    Unready,
}

/// Deserialises a humantime duration.
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    humantime_serde::deserialize(d)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(deserialize_with = "duration")]
    duration: Option<Duration>,
    seed: Option<u64>,
    initial: Option<RawInitial>,
    #[serde(default)]
    attempts: RawAttempts,
    #[serde(default)]
    branch: Vec<RawBranch>,
    #[serde(default)]
    alarm: RawAlarm,
    #[serde(default)]
    health_check: RawHealthCheck,
    #[serde(default)]
    dns: RawDns,
    #[serde(default)]
    region: Vec<RawRegion>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegion {
    name: String,
    #[serde(default)]
    branches: Vec<String>,
    #[serde(default)]
    fault: Vec<RawRegionFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegionFault {
    #[serde(default, deserialize_with = "duration")]
    from: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    until: Option<Duration>,
    kind: Option<RegionFaultKind>,
    alarms: Option<ImpairedAlarms>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttempts {
    #[serde(default, deserialize_with = "duration")]
    latency: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBranch {
    name: String,
    #[serde(default)]
    noise: Vec<RawSegment>,
    #[serde(default)]
    fault: Vec<RawSegment>,
    #[serde(default)]
    approve_at: Vec<humantime_serde::Serde<Duration>>,
    #[serde(default, deserialize_with = "duration")]
    approve_after: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSegment {
    #[serde(default, deserialize_with = "duration")]
    from: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    until: Option<Duration>,
    fail_percent: Option<f64>,
    class: Option<FailureClass>,
    seen_by: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlarm {
    #[serde(default, deserialize_with = "duration")]
    period: Option<Duration>,
    statistic: Option<Statistic>,
    evaluation_periods: Option<u32>,
    datapoints_to_alarm: Option<u32>,
    threshold: Option<f64>,
    comparison: Option<Comparison>,
    treat_missing_data: Option<TreatMissing>,
    #[serde(default, deserialize_with = "duration")]
    evaluation_delay: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealthCheck {
    insufficient_data_health_status: Option<InsufficientDataHealthStatus>,
    #[serde(default, deserialize_with = "duration")]
    delay: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDns {
    #[serde(default, deserialize_with = "duration")]
    answer_delay: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    ttl: Option<Duration>,
}

/// A stretch of time in which a share of a branch's attempts fail with one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Start, ms from the scenario's start (inclusive: attempts that start at or after it).
    pub from: Millis,
    /// End, ms (exclusive).
    pub until: Millis,
    /// Share of the attempts that fail, percent (0–100); between 0 and 100 the failing ones are
    /// drawn at random from the seeded generator.
    pub fail_percent: f64,
    /// The class of the failures.
    pub class: FailureClass,
    /// The regions whose prober sees these failures (`None`: every prober). A fault that some
    /// prober does not see is a fault of the path, not of the branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen_by: Option<Vec<String>>,
}

impl Segment {
    /// Whether the prober of `region` sees this segment's failures.
    pub fn seen_from(&self, region: &str) -> bool {
        self.seen_by
            .as_ref()
            .is_none_or(|r| r.iter().any(|x| x == region))
    }
}

/// What a region fault takes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RegionFaultKind {
    /// The region goes dark: its branches, its prober and its CloudWatch are gone.
    Dark,
    /// The region's CloudWatch is impaired: it takes no datum and its alarms stop evaluating;
    /// the branches and the prober are fine.
    Cloudwatch,
}

/// What Route 53 reads from an alarm in a region whose CloudWatch is gone or impaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ImpairedAlarms {
    /// The state it had, for `alarm.evaluation_periods` periods, then INSUFFICIENT_DATA.
    InsufficientData,
    /// The state it had, until the fault ends.
    Stale,
}

/// A fault of a whole region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegionFault {
    /// Start, ms (inclusive).
    pub from: Millis,
    /// End, ms (exclusive).
    pub until: Millis,
    pub kind: RegionFaultKind,
    pub alarms: ImpairedAlarms,
}

/// One of the two regions of a cross-region scenario: a prober and a CloudWatch each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Region {
    pub name: String,
    /// The branches that live in it.
    pub branches: Vec<String>,
    /// Its faults, sorted, not overlapping.
    pub faults: Vec<RegionFault>,
}

impl Region {
    /// The fault in force at `t`, if any.
    pub fn fault_at(&self, t: Millis) -> Option<&RegionFault> {
        self.faults.iter().find(|f| f.from <= t && t < f.until)
    }
}

/// What the scenario scripts for one branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BranchScript {
    /// The branch (a branch of the simulated service).
    pub name: String,
    /// Background failures outside the faults, sorted, not overlapping.
    pub noise: Vec<Segment>,
    /// The scripted faults, sorted, not overlapping; a fault's rule replaces the noise.
    pub faults: Vec<Segment>,
    /// When the operator runs `approve`, ms.
    pub approve_at: Vec<Millis>,
    /// The operator approves this long after each entry into `pending_approval`, ms.
    pub approve_after: Option<Millis>,
}

impl BranchScript {
    /// A branch the scenario does not script: every attempt succeeds.
    pub fn quiet(name: &str) -> Self {
        BranchScript {
            name: name.to_string(),
            noise: Vec::new(),
            faults: Vec::new(),
            approve_at: Vec::new(),
            approve_after: None,
        }
    }
}

/// The CloudWatch alarm on a branch's `Readiness`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlarmModel {
    /// `Period`, ms.
    pub period_ms: Millis,
    pub statistic: Statistic,
    pub evaluation_periods: u32,
    pub datapoints_to_alarm: u32,
    pub threshold: f64,
    pub comparison: Comparison,
    pub treat_missing_data: TreatMissing,
    /// How long after a period ends the alarm evaluates it, ms.
    pub evaluation_delay_ms: Millis,
}

/// The Route 53 `CLOUDWATCH_METRIC` health check behind each branch's failover record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthModel {
    /// `InsufficientDataHealthStatus`.
    pub insufficient_data_health_status: InsufficientDataHealthStatus,
    /// How long after an alarm state change the health check follows it, ms.
    pub delay_ms: Millis,
}

/// The failover answer and the resolvers' caches.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsModel {
    /// How long after a health change Route 53 answers accordingly, ms.
    pub answer_delay_ms: Millis,
    /// The failover records' TTL, ms: a client sees a new answer at most this much later.
    pub ttl_ms: Millis,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// Length, ms.
    pub duration_ms: Millis,
    /// Seed of the noise generator.
    pub seed: u64,
    /// The state every branch starts in; `None`: the config's `readiness.initial`.
    pub initial: Option<ReadinessState>,
    /// How long an attempt that neither succeeds nor times out takes, ms (a success too).
    pub latency_ms: Millis,
    /// One script per branch named in the file.
    pub branches: Vec<BranchScript>,
    pub alarm: AlarmModel,
    pub health_check: HealthModel,
    pub dns: DnsModel,
    /// The two regions, when the scenario models them (`[[region]]`); empty otherwise.
    pub regions: Vec<Region>,
}

/// What validation needs to know of the simulated service.
#[derive(Debug, Clone)]
pub struct Limits<'a> {
    /// The service's branch names.
    pub branches: &'a [String],
    /// The probe interval.
    pub interval: Duration,
    /// The config's `route53.insufficient_data_health_status`, if set.
    pub insufficient_data: Option<InsufficientDataHealthStatus>,
}

fn ms(d: Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Parse and validate a scenario's text; `path` names the file in messages.
///
/// # Errors
/// Every problem, each with its key and line: TOML syntax, unknown keys, wrong types, bad
/// durations, unknown branches, segments out of order or out of range.
pub fn parse(path: &Path, text: &str, limits: &Limits<'_>) -> Result<Scenario, ConfigError> {
    let fail = |issues: Vec<Issue>| ConfigError {
        path: path.to_owned(),
        issues,
    };
    let loc = Locator::new(text);
    let doc = DeTable::parse(text).map_err(|e| {
        fail(vec![Issue {
            key: "(syntax)".into(),
            line: e.span().map(|s| loc.line_of(s.start)),
            message: e.message().trim_end().to_string(),
        }])
    })?;
    let raw: RawScenario = serde_path_to_error::deserialize(toml::Deserializer::from(doc.clone()))
        .map_err(|e| fail(vec![loc.serde_issue(&e)]))?;
    let mut v = Validation {
        loc: &loc,
        doc: doc.get_ref(),
        issues: Vec::new(),
        regions: raw.region.iter().map(|r| r.name.clone()).collect(),
    };
    let scenario = v.scenario(raw, limits);
    if v.issues.is_empty() {
        Ok(scenario)
    } else {
        v.issues.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
        Err(fail(v.issues))
    }
}

struct Validation<'a, 'd> {
    loc: &'a Locator,
    doc: &'a DeTable<'d>,
    issues: Vec<Issue>,
    /// The names of `[[region]]`, which `seen_by` may name.
    regions: Vec<String>,
}

impl Validation<'_, '_> {
    fn error(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let line = self.loc.line_of_key(self.doc, &key);
        self.issues.push(Issue {
            key,
            line,
            message: message.into(),
        });
    }

    /// A delay of a hop, at most [`MAX_SCENARIO`] (so that no sum of instants can overflow).
    fn delay(&mut self, key: &str, d: Option<Duration>, default: Duration) -> Millis {
        let d = d.unwrap_or(default);
        if d > MAX_SCENARIO {
            self.error(key, "at most 7 days");
            return 0;
        }
        ms(d)
    }

    fn scenario(&mut self, raw: RawScenario, limits: &Limits<'_>) -> Scenario {
        let duration = match raw.duration {
            None => {
                self.error("duration", "missing: how long to simulate, e.g. \"60m\"");
                Duration::ZERO
            }
            Some(d) if d.is_zero() || d > MAX_SCENARIO => {
                self.error("duration", "must be more than 0s and at most 7 days");
                Duration::ZERO
            }
            Some(d) => d,
        };
        let attempts = duration.as_millis() / limits.interval.as_millis().max(1);
        if attempts > u128::from(MAX_ATTEMPTS) {
            self.error(
                "duration",
                format!(
                    "{attempts} attempts per branch at the probe interval; at most {MAX_ATTEMPTS}"
                ),
            );
        }
        let duration_ms = ms(duration);
        let mut branches: Vec<BranchScript> = Vec::new();
        for (i, b) in raw.branch.into_iter().enumerate() {
            let key = format!("branch[{i}]");
            if !limits.branches.contains(&b.name) {
                self.error(
                    format!("{key}.name"),
                    format!(
                        "no branch {:?} in the service; its branches: {}",
                        b.name,
                        limits.branches.join(", ")
                    ),
                );
            } else if branches.iter().any(|x| x.name == b.name) {
                self.error(
                    format!("{key}.name"),
                    "this branch is scripted twice; keep one [[branch]]",
                );
            }
            branches.push(self.branch(&key, b, duration_ms));
        }
        let regions = self.regions(raw.region, limits, duration_ms);
        let latency_ms = self.delay("attempts.latency", raw.attempts.latency, Duration::ZERO);
        if latency_ms >= ms(limits.interval) {
            self.error(
                "attempts.latency",
                "must be shorter than the probe interval",
            );
        }
        let delay_ms = self.delay(
            "health_check.delay",
            raw.health_check.delay,
            Duration::from_secs(30),
        );
        Scenario {
            duration_ms,
            seed: raw.seed.unwrap_or(1),
            initial: raw.initial.map(|i| match i {
                RawInitial::Unknown => ReadinessState::Unknown,
                RawInitial::Ready => ReadinessState::Ready,
                RawInitial::Unready => ReadinessState::Unready,
            }),
            latency_ms,
            branches,
            alarm: self.alarm(raw.alarm),
            health_check: HealthModel {
                insufficient_data_health_status: raw
                    .health_check
                    .insufficient_data_health_status
                    .or(limits.insufficient_data)
                    .unwrap_or(InsufficientDataHealthStatus::LastKnownStatus),
                delay_ms,
            },
            dns: self.dns(raw.dns),
            regions,
        }
    }

    /// `[[region]]`: none, or two that hold every branch between them.
    fn regions(&mut self, raw: Vec<RawRegion>, limits: &Limits<'_>, end: Millis) -> Vec<Region> {
        if raw.is_empty() {
            return Vec::new();
        }
        if raw.len() != 2 {
            self.error(
                "region",
                format!("{} regions; a cross-region scenario has two", raw.len()),
            );
        }
        let mut out: Vec<Region> = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let key = format!("region[{i}]");
            if r.name.is_empty() || out.iter().any(|x| x.name == r.name) {
                self.error(format!("{key}.name"), "empty or named twice");
            }
            for b in &r.branches {
                if !limits.branches.contains(b) {
                    self.error(
                        format!("{key}.branches"),
                        format!("no branch {b:?} in the service"),
                    );
                } else if out.iter().any(|x| x.branches.contains(b)) {
                    self.error(
                        format!("{key}.branches"),
                        format!("{b:?} is in two regions"),
                    );
                }
            }
            let faults = self.region_faults(&key, r.fault, end);
            out.push(Region {
                name: r.name,
                branches: r.branches,
                faults,
            });
        }
        for b in limits.branches {
            if !out.iter().any(|r| r.branches.contains(b)) {
                self.error(
                    "region",
                    format!("branch {b:?} is in no region's `branches`"),
                );
            }
        }
        out
    }

    fn region_faults(
        &mut self,
        key: &str,
        raw: Vec<RawRegionFault>,
        end: Millis,
    ) -> Vec<RegionFault> {
        let mut out: Vec<(usize, RegionFault)> = Vec::new();
        for (i, f) in raw.into_iter().enumerate() {
            let k = format!("{key}.fault[{i}]");
            let (Some(from), Some(until)) = (f.from.map(ms), f.until.map(ms)) else {
                self.error(k, "needs `from` and `until`, e.g. \"10m\" and \"40m\"");
                continue;
            };
            if from >= until || until > end {
                self.error(
                    format!("{k}.until"),
                    "must be later than `from`, within `duration`",
                );
            }
            let Some(kind) = f.kind else {
                self.error(k, "missing `kind`: \"dark\" or \"cloudwatch\"");
                continue;
            };
            let alarms = f.alarms.unwrap_or(ImpairedAlarms::InsufficientData);
            out.push((
                i,
                RegionFault {
                    from,
                    until,
                    kind,
                    alarms,
                },
            ));
        }
        out.sort_by_key(|(_, f)| f.from);
        for w in out.windows(2) {
            if w[1].1.from < w[0].1.until {
                self.error(
                    format!("{key}.fault[{}].from", w[1].0),
                    format!("overlaps {key}.fault[{}]", w[0].0),
                );
            }
        }
        out.into_iter().map(|(_, f)| f).collect()
    }

    fn branch(&mut self, key: &str, b: RawBranch, end: Millis) -> BranchScript {
        let noise = self.segments(&format!("{key}.noise"), b.noise, end, false);
        let faults = self.segments(&format!("{key}.fault"), b.fault, end, true);
        let mut approve_at: Vec<Millis> = b.approve_at.into_iter().map(|d| ms(*d)).collect();
        if approve_at.iter().any(|t| *t > end) {
            self.error(
                format!("{key}.approve_at"),
                "an approval after the end of the scenario",
            );
        }
        approve_at.sort_unstable();
        BranchScript {
            name: b.name,
            noise,
            faults,
            approve_at,
            approve_after: b
                .approve_after
                .map(|d| self.delay(&format!("{key}.approve_after"), Some(d), d)),
        }
    }

    /// Noise segments default to the whole scenario; faults need `from` and `until` and fail
    /// every attempt unless `fail_percent` says otherwise.
    fn segments(
        &mut self,
        key: &str,
        raw: Vec<RawSegment>,
        end: Millis,
        fault: bool,
    ) -> Vec<Segment> {
        let mut out: Vec<(usize, Segment)> = Vec::new();
        for (i, s) in raw.into_iter().enumerate() {
            let k = format!("{key}[{i}]");
            if fault && s.from.is_none() {
                self.error(
                    format!("{k}.from"),
                    "missing: when the fault starts, e.g. \"10m\"",
                );
            }
            if fault && s.until.is_none() {
                self.error(
                    format!("{k}.until"),
                    "missing: when the fault ends, e.g. \"25m\"",
                );
            }
            let from = s.from.map_or(0, ms);
            let until = s.until.map_or(end, ms);
            if from >= until {
                self.error(format!("{k}.until"), "must be later than `from`");
            } else if until > end {
                self.error(
                    format!("{k}.until"),
                    "after the end of the scenario (`duration`)",
                );
            }
            let fail_percent = match (s.fail_percent, fault) {
                (Some(p), _) if !(0.0..=100.0).contains(&p) => {
                    self.error(format!("{k}.fail_percent"), "must be 0–100 (percent)");
                    0.0
                }
                (Some(p), _) => p,
                (None, true) => 100.0,
                (None, false) => {
                    self.error(
                        format!("{k}.fail_percent"),
                        "missing: the share of attempts that fail, percent, e.g. 2.0",
                    );
                    0.0
                }
            };
            let class = s.class.unwrap_or(FailureClass::TcpTimeout);
            if let Some(seen) = &s.seen_by
                && (seen.is_empty() || !seen.iter().all(|n| self.regions.contains(n)))
            {
                self.error(
                    format!("{k}.seen_by"),
                    "must name regions of `[[region]]` (and needs them)",
                );
            }
            out.push((
                i,
                Segment {
                    from,
                    until,
                    fail_percent,
                    class,
                    seen_by: s.seen_by,
                },
            ));
        }
        out.sort_by_key(|(_, s)| s.from);
        for w in out.windows(2) {
            if w[1].1.from < w[0].1.until {
                self.error(
                    format!("{key}[{}].from", w[1].0),
                    format!(
                        "overlaps {key}[{}]; segments of one list may not overlap",
                        w[0].0
                    ),
                );
            }
        }
        out.into_iter().map(|(_, s)| s).collect()
    }

    fn alarm(&mut self, raw: RawAlarm) -> AlarmModel {
        let period_ms = ms(raw.period.unwrap_or(Duration::from_secs(60)));
        if !(10_000..=86_400_000).contains(&period_ms) || period_ms % 10_000 != 0 {
            self.error(
                "alarm.period",
                "must be a multiple of 10s, at most 1d (a Route 53 health check needs 60s)",
            );
        }
        let statistic = raw.statistic.unwrap_or(Statistic::Minimum);
        let evaluation_periods = raw.evaluation_periods.unwrap_or(1);
        if !(1..=100).contains(&evaluation_periods) {
            self.error("alarm.evaluation_periods", "must be 1–100");
        }
        let datapoints_to_alarm = raw.datapoints_to_alarm.unwrap_or(evaluation_periods);
        if datapoints_to_alarm == 0 || datapoints_to_alarm > evaluation_periods {
            self.error("alarm.datapoints_to_alarm", "must be 1–evaluation_periods");
        }
        // The templates' QuorumThreshold mapping.
        let threshold = raw.threshold.unwrap_or(match statistic {
            Statistic::Average => 0.5,
            _ => 1.0,
        });
        if !threshold.is_finite() {
            self.error("alarm.threshold", "must be a finite number");
        }
        AlarmModel {
            period_ms: period_ms.clamp(10_000, 86_400_000),
            statistic,
            evaluation_periods: evaluation_periods.max(1),
            datapoints_to_alarm: datapoints_to_alarm.clamp(1, evaluation_periods.max(1)),
            threshold,
            comparison: raw.comparison.unwrap_or(Comparison::LessThanThreshold),
            treat_missing_data: raw.treat_missing_data.unwrap_or(TreatMissing::Missing),
            evaluation_delay_ms: self.delay(
                "alarm.evaluation_delay",
                raw.evaluation_delay,
                Duration::ZERO,
            ),
        }
    }

    fn dns(&mut self, raw: RawDns) -> DnsModel {
        let ttl = raw.ttl.unwrap_or(Duration::from_secs(60));
        if ttl.subsec_nanos() != 0 || ttl > Duration::from_secs(172_800) {
            self.error(
                "dns.ttl",
                "must be whole seconds, at most 172800s (Route 53's limit)",
            );
        }
        DnsModel {
            answer_delay_ms: self.delay("dns.answer_delay", raw.answer_delay, Duration::ZERO),
            ttl_ms: ms(ttl),
        }
    }
}

/// Lines of keys and byte offsets in the scenario's text.
struct Locator {
    newlines: Vec<usize>,
}

impl Locator {
    fn new(text: &str) -> Self {
        Locator {
            newlines: text
                .bytes()
                .enumerate()
                .filter_map(|(i, b)| (b == b'\n').then_some(i))
                .collect(),
        }
    }

    /// 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&n| n < offset) + 1
    }

    /// Line of a dotted key path such as `branch[1].fault[0].until` (of its last key or array
    /// element); `None` when it is not written in the file.
    fn line_of_key(&self, doc: &DeTable<'_>, key: &str) -> Option<usize> {
        let mut table = doc;
        let mut span = None;
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            let (name, index) = match part.split_once('[') {
                Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let (k, mut v) = table.get_key_value(name)?;
            span = Some(k.span());
            if let Some(ix) = index {
                let DeValue::Array(a) = v.get_ref() else {
                    return None;
                };
                v = a.get(ix)?;
                span = Some(v.span());
            }
            if parts.peek().is_some() {
                table = match v.get_ref() {
                    DeValue::Table(t) => t,
                    _ => return None,
                };
            }
        }
        span.map(|s| self.line_of(s.start))
    }

    /// The issue of a deserialisation error: the key path from `serde_path_to_error`, the line
    /// from the span toml attached.
    fn serde_issue(&self, e: &serde_path_to_error::Error<toml::de::Error>) -> Issue {
        let inner = e.inner();
        let msg = inner.message().to_string();
        let path = e.path().to_string();
        let mut key = if path == "." { String::new() } else { path };
        let line = inner.span().map(|s| self.line_of(s.start));
        for marker in ["unknown field `", "missing field `"] {
            if let Some(field) = msg
                .split_once(marker)
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(f, _)| f)
                && !key.ends_with(field)
            {
                key = if key.is_empty() {
                    field.to_string()
                } else {
                    format!("{key}.{field}")
                };
            }
        }
        let message = if msg.ends_with("expected a duration") {
            format!(
                "invalid duration: {msg} (write a number and a unit, e.g. \"500ms\", \"5s\", \"3m\")"
            )
        } else {
            msg
        };
        Issue {
            key: if key.is_empty() { "(file)".into() } else { key },
            line,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> (Vec<String>, Duration) {
        (
            vec!["primary".to_string(), "secondary".to_string()],
            Duration::from_secs(2),
        )
    }

    fn parse_text(text: &str) -> Result<Scenario, ConfigError> {
        let (names, interval) = limits();
        let l = Limits {
            branches: &names,
            interval,
            insufficient_data: None,
        };
        parse(Path::new("s.toml"), text, &l)
    }

    fn issues(text: &str) -> Vec<(String, Option<usize>)> {
        parse_text(text)
            .expect_err("invalid")
            .issues
            .into_iter()
            .map(|i| (i.key, i.line))
            .collect()
    }

    #[test]
    fn defaults_are_the_templates_alarm_and_a_minute_of_ttl() {
        let s = parse_text("duration = \"1h\"\n").expect("valid");
        assert_eq!(s.duration_ms, 3_600_000);
        assert_eq!(
            (s.alarm.statistic, s.alarm.threshold, s.alarm.period_ms),
            (Statistic::Minimum, 1.0, 60_000)
        );
        assert_eq!(
            (s.alarm.evaluation_periods, s.alarm.datapoints_to_alarm),
            (1, 1)
        );
        assert_eq!(s.alarm.comparison, Comparison::LessThanThreshold);
        assert_eq!(s.alarm.treat_missing_data, TreatMissing::Missing);
        assert_eq!(
            s.health_check.insufficient_data_health_status,
            InsufficientDataHealthStatus::LastKnownStatus
        );
        assert_eq!((s.dns.ttl_ms, s.dns.answer_delay_ms), (60_000, 0));
        let avg =
            parse_text("duration = \"1h\"\n[alarm]\nstatistic = \"Average\"\n").expect("valid");
        assert_eq!(avg.alarm.threshold, 0.5);
    }

    #[test]
    fn an_unknown_key_names_its_line_and_key() {
        let text = "duration = \"1h\"\n\n[[branch]]\nname = \"primary\"\n[[branch.fault]]\nfrom = \"10m\"\nuntil = \"20m\"\nclas = \"server_read_only\"\n";
        assert_eq!(
            issues(text),
            [("branch[0].fault[0].clas".to_string(), Some(8))]
        );
        let bad_duration = "duration = \"an hour\"\n";
        assert_eq!(issues(bad_duration), [("duration".to_string(), Some(1))]);
        let bad_class = "duration = \"1h\"\n[[branch]]\nname = \"primary\"\n[[branch.noise]]\nfail_percent = 2.0\nclass = \"slow\"\n";
        assert_eq!(
            issues(bad_class),
            [("branch[0].noise[0].class".to_string(), Some(6))]
        );
    }

    #[test]
    fn delays_are_bounded_so_that_no_instant_overflows() {
        let text = "duration = \"1h\"\n[alarm]\nperiod = \"1000000y\"\nevaluation_delay = \"1000000y\"\n[dns]\nanswer_delay = \"8d\"\n";
        assert_eq!(
            issues(text),
            [
                ("alarm.period".to_string(), Some(3)),
                ("alarm.evaluation_delay".to_string(), Some(4)),
                ("dns.answer_delay".to_string(), Some(6)),
            ]
        );
    }

    #[test]
    fn regions_hold_every_branch_once_and_seen_by_names_them() {
        let ok = r#"duration = "1h"
[[region]]
name = "a"
branches = ["primary"]
[[region.fault]]
from = "10m"
until = "20m"
kind = "dark"
[[region]]
name = "b"
branches = ["secondary"]
[[branch]]
name = "primary"
[[branch.fault]]
from = "30m"
until = "40m"
seen_by = ["b"]
"#;
        let s = parse_text(ok).expect("valid");
        assert_eq!(s.regions.len(), 2);
        assert_eq!(
            s.regions[0].faults[0].alarms,
            ImpairedAlarms::InsufficientData
        );
        assert!(!s.branches[0].faults[0].seen_from("a"));
        assert!(s.branches[0].faults[0].seen_from("b"));
        let bad = r#"duration = "1h"
[[region]]
name = "a"
branches = ["primary", "tertiary"]
[[region.fault]]
from = "10m"
until = "20m"
[[branch]]
name = "primary"
[[branch.fault]]
from = "30m"
until = "40m"
seen_by = ["c"]
"#;
        let keys: Vec<String> = issues(bad).into_iter().map(|i| i.0).collect();
        assert_eq!(
            keys,
            [
                "region",
                "region",
                "region[0].branches",
                "region[0].fault[0]",
                "branch[0].fault[0].seen_by",
            ]
        );
    }

    #[test]
    fn validation_names_every_problem_with_its_line() {
        let text = r#"duration = "30m"

[[branch]]
name = "tertiary"

[[branch]]
name = "primary"
[[branch.fault]]
from = "10m"
until = "20m"
[[branch.fault]]
from = "15m"
until = "40m"
[[branch.noise]]
fail_percent = 200.0
"#;
        assert_eq!(
            issues(text),
            [
                ("branch[0].name".to_string(), Some(4)),
                ("branch[1].fault[1].from".to_string(), Some(12)),
                ("branch[1].fault[1].until".to_string(), Some(13)),
                ("branch[1].noise[0].fail_percent".to_string(), Some(15)),
            ]
        );
    }
}
