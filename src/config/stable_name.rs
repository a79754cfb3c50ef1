//! `[stable_name_probe]`: the evidence-only probe of each service's stable name. Off by default.

use super::issues::Issues;
use super::probe::too_short;
use super::raw::RawStableNameProbe;
use std::time::Duration;

/// The canary-row key (`branch` column) of the end-to-end attempt's marked write (`mysql`): no
/// branch may have this name, so the attempt never overwrites a branch's row.
pub const END_TO_END_KEY: &str = "~stable_name";

/// The shortest accepted interval: a round resolves the stable name and every branch endpoint.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `[stable_name_probe]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StableNameProbe {
    /// Whether the probe runs. Default `false`.
    pub enabled: bool,
    /// Time between two rounds per service (jittered). Default 30 s, at least 100 ms.
    pub interval: Duration,
    /// Whether each round also runs the service's probe through the stable name (the
    /// end-to-end attempt, evidence only). Default `false`.
    pub end_to_end: bool,
}

impl Default for StableNameProbe {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(30),
            end_to_end: false,
        }
    }
}

/// Validate `[stable_name_probe]`.
pub(super) fn section(raw: RawStableNameProbe, issues: &mut Issues<'_>) -> StableNameProbe {
    let default = StableNameProbe::default();
    let interval = raw.interval.unwrap_or(default.interval);
    if interval < MIN_INTERVAL {
        issues.error(
            "stable_name_probe.interval",
            too_short(interval, MIN_INTERVAL),
        );
    }
    StableNameProbe {
        enabled: raw.enabled.unwrap_or(default.enabled),
        interval,
        end_to_end: raw.end_to_end.unwrap_or(default.end_to_end),
    }
}
