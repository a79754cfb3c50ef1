//! AWS's alarm and health-check vocabulary as plain types, spelled as the APIs spell it: alarm
//! state, statistic, comparison operator, treat-missing-data, health check type and
//! `InsufficientDataHealthStatus`. A leaf without SDK imports, so `simulate` (scenario files),
//! `config`, `report` (alarm lanes) and `check --aws` (what AWS answered) share one vocabulary
//! and stay pure. What AWS answers is parsed once, at the edge, into [`Spelled`]: a value this
//! vocabulary does not know is kept as [`Spelled::Other`], never mapped to a known one.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A CloudWatch alarm's state (`StateValue`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum AlarmState {
    /// The statistic does not breach.
    Ok,
    /// The statistic breaches (for a readiness alarm: the branch is unready).
    Alarm,
    /// Not enough data to decide.
    InsufficientData,
}

/// An alarm's `Statistic` (the ones a Route 53 health check can follow; `ExtendedStatistic`
/// percentiles are not among them).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum Statistic {
    Average,
    Minimum,
    Maximum,
    Sum,
    SampleCount,
}

/// An alarm's `ComparisonOperator` against a static threshold (the anomaly-detection band
/// operators are not in it: a health check's alarm has a threshold).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
pub enum Comparison {
    GreaterThanOrEqualToThreshold,
    GreaterThanThreshold,
    LessThanThreshold,
    LessThanOrEqualToThreshold,
}

impl Comparison {
    /// Whether `value` breaches `threshold`.
    pub fn breaches(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::GreaterThanOrEqualToThreshold => value >= threshold,
            Comparison::GreaterThanThreshold => value > threshold,
            Comparison::LessThanThreshold => value < threshold,
            Comparison::LessThanOrEqualToThreshold => value <= threshold,
        }
    }
}

/// An alarm's `TreatMissingData`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum TreatMissing {
    Missing,
    Breaching,
    NotBreaching,
    Ignore,
}

/// A Route 53 health check's `Type`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthCheckType {
    /// Follows a CloudWatch alarm: the only type a readiness alarm drives.
    CloudwatchMetric,
    Http,
    Https,
    HttpStrMatch,
    HttpsStrMatch,
    Tcp,
    Calculated,
    RecoveryControl,
}

/// A Route 53 health check's `InsufficientDataHealthStatus`
/// (`route53.insufficient_data_health_status`, a scenario's `health_check`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::EnumString,
)]
pub enum InsufficientDataHealthStatus {
    /// The health check is healthy while its alarm has insufficient data.
    Healthy,
    /// Unhealthy while the alarm has insufficient data.
    Unhealthy,
    /// The status it had before the alarm ran out of data.
    LastKnownStatus,
}

/// A value AWS answered, parsed once: one of the vocabulary's, or another spelling kept as
/// AWS gave it (a value newer than this vocabulary, an emulator's, an empty one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spelled<T> {
    /// A value of the vocabulary.
    Known(T),
    /// Any other spelling, verbatim.
    Other(String),
}

impl<T: FromStr> Spelled<T> {
    /// Parse AWS's spelling (exact, case included).
    pub fn parse(s: &str) -> Spelled<T> {
        s.parse()
            .map_or_else(|_| Spelled::Other(s.to_string()), Spelled::Known)
    }
}

impl<T: FromStr> From<&str> for Spelled<T> {
    fn from(s: &str) -> Spelled<T> {
        Spelled::parse(s)
    }
}

impl<T: Copy> Spelled<T> {
    /// The known value, if it is one.
    pub fn known(&self) -> Option<T> {
        match self {
            Spelled::Known(t) => Some(*t),
            Spelled::Other(_) => None,
        }
    }
}

impl<T: PartialEq> Spelled<T> {
    /// Whether it is `t`.
    pub fn is(&self, t: T) -> bool {
        matches!(self, Spelled::Known(k) if *k == t)
    }
}

impl<T: fmt::Display> fmt::Display for Spelled<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spelled::Known(t) => t.fmt(f),
            Spelled::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_and_print_as_the_apis_spell_them() {
        for (s, v) in [
            ("OK", AlarmState::Ok),
            ("ALARM", AlarmState::Alarm),
            ("INSUFFICIENT_DATA", AlarmState::InsufficientData),
        ] {
            assert_eq!(Spelled::parse(s), Spelled::Known(v));
            assert_eq!(v.to_string(), s);
        }
        let hc: Spelled<HealthCheckType> = Spelled::parse("CLOUDWATCH_METRIC");
        assert!(hc.is(HealthCheckType::CloudwatchMetric));
        assert_eq!(
            Spelled::parse("HTTPS_STR_MATCH"),
            Spelled::Known(HealthCheckType::HttpsStrMatch)
        );
        assert_eq!(TreatMissing::NotBreaching.to_string(), "notBreaching");
        assert_eq!(
            Spelled::parse("notBreaching"),
            Spelled::Known(TreatMissing::NotBreaching)
        );
        assert_eq!(
            Spelled::parse("LastKnownStatus"),
            Spelled::Known(InsufficientDataHealthStatus::LastKnownStatus)
        );
        assert_eq!(
            Spelled::parse("p99"),
            Spelled::<Statistic>::Other("p99".into())
        );
    }

    #[test]
    fn the_statistics_are_those_route53_can_follow() {
        use strum::VariantArray;
        let names: Vec<String> = Statistic::VARIANTS
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, crate::contract::ROUTE53_STATISTICS);
    }

    #[test]
    fn an_unknown_spelling_is_kept_not_mapped() {
        for s in ["ok", "Alarm", "", "INSUFFICIENT DATA"] {
            let got: Spelled<AlarmState> = Spelled::parse(s);
            assert_eq!(got, Spelled::Other(s.to_string()));
            assert_eq!(got.to_string(), s);
            assert_eq!(got.known(), None);
        }
        let band: Spelled<Comparison> = Spelled::parse("LessThanLowerOrGreaterThanUpperThreshold");
        assert!(matches!(band, Spelled::Other(_)));
    }
}
