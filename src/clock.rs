//! Wall-clock time for the I/O edges, derived from tokio's monotonic clock, and the crate's one
//! way of writing instants ([`rfc3339`]) and durations ([`fmt_duration`]).
//!
//! The readiness core takes time as an argument ([`Millis`], ms since the UNIX
//! epoch). The edges read it here: the wall time at start plus tokio's monotonic elapsed time, so
//! a wall-clock step (NTP) cannot move a `for` clock mid-run, and tests under
//! `tokio::time::pause` see virtual time advance consistently.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// An instant: milliseconds since the UNIX epoch (wall clock, supplied by the caller).
pub type Millis = i64;

/// A clock anchored at one wall-clock reading.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall_at_start: Millis,
    mono_at_start: Instant,
}

impl Clock {
    /// Anchor a clock now.
    pub fn start() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as Millis;
        Clock {
            wall_at_start: wall,
            mono_at_start: Instant::now(),
        }
    }

    /// Milliseconds since the UNIX epoch.
    pub fn now_ms(&self) -> Millis {
        self.wall_at_start + self.mono_at_start.elapsed().as_millis() as Millis
    }

    /// The monotonic instant at which this clock reads `ms` (the start, for an earlier `ms`).
    pub fn instant_of(&self, ms: Millis) -> Instant {
        let after = u64::try_from(ms.saturating_sub(self.wall_at_start)).unwrap_or(0);
        self.mono_at_start + Duration::from_millis(after)
    }

    /// The wall time of a monotonic instant taken on this clock.
    pub fn at(&self, instant: Instant) -> Millis {
        let d = instant.saturating_duration_since(self.mono_at_start);
        self.wall_at_start + d.as_millis() as Millis
    }
}

/// Latest instant RFC 3339 can write (9999-12-31T23:59:59.999Z), ms since the epoch.
pub const MAX_RFC3339_MS: Millis = 253_402_300_799_999;

/// Format ms since the epoch as RFC 3339 UTC with milliseconds. Never panics: instants before
/// the epoch or after year 9999 are clamped to those bounds.
pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, MAX_RFC3339_MS) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Format a duration the way config files write them (`1m 30s`, `500ms`), to the millisecond.
pub fn fmt_duration(d: Duration) -> String {
    const DAY_MS: u64 = 24 * 3600 * 1000;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    // Whole days as `d`, never humantime's months and years (30.44 and 365.25 days), so "400d"
    // reads back as 400d and not as "1year 1month 4days 7h 26m 24s".
    let (days, rest) = (ms / DAY_MS, ms % DAY_MS);
    let rest = humantime::format_duration(Duration::from_millis(rest)).to_string();
    match (days, rest.as_str()) {
        (0, _) => rest,
        (_, "0s") => format!("{days}d"),
        _ => format!("{days}d {rest}"),
    }
}

/// [`fmt_duration`] of a span in milliseconds; a negative span is written as `0s`.
pub fn fmt_duration_ms(ms: i64) -> String {
    fmt_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_config() {
        assert_eq!(fmt_duration(Duration::from_millis(90_500)), "1m 30s 500ms");
        assert_eq!(fmt_duration(Duration::from_micros(1500)), "1ms");
        assert_eq!(fmt_duration_ms(-3), "0s");
        assert_eq!(fmt_duration_ms(180_000), "3m");
        assert_eq!(fmt_duration(Duration::from_secs(400 * 86_400)), "400d");
        assert_eq!(fmt_duration(Duration::from_secs(86_400 + 3_600)), "1d 1h");
        assert_eq!(fmt_duration(Duration::from_secs(31 * 86_400)), "31d");
    }

    #[test]
    fn rfc3339_never_panics() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
