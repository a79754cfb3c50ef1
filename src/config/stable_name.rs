//! `[stable_name_probe]`: the evidence-only probe of each service's stable name. Off by default.

use super::issues::Issues;
use super::probe::too_short;
use super::raw::RawStableNameProbe;
use std::time::Duration;

/// The shortest accepted interval: a round resolves the stable name and every branch endpoint.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `[stable_name_probe]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StableNameProbe {
    /// Whether the probe runs. Default `false`.
    pub enabled: bool,
    /// Time between two rounds per service (jittered). Default 30 s, at least 100 ms.
    pub interval: Duration,
}

impl Default for StableNameProbe {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(30),
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
    }
}
