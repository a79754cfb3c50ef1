//! `[reload]`: how often the config's source is read again for a change (`poll`). A change
//! found is applied as a SIGHUP's reload is.

use super::issues::Issues;
use super::raw::RawReload;
use std::time::Duration;

/// The shortest accepted `poll`: each poll reads the whole file, or asks S3 once.
pub const MIN_POLL: Duration = Duration::from_secs(1);

/// Validate `[reload]`: `poll`, when set, at least [`MIN_POLL`].
pub(super) fn section(raw: RawReload, issues: &mut Issues<'_>) -> Option<Duration> {
    if let Some(poll) = raw.poll
        && poll < MIN_POLL
    {
        issues.error(
            "reload.poll",
            format!(
                "{} is shorter than the minimum, {}",
                humantime::format_duration(poll),
                crate::clock::fmt_duration(MIN_POLL)
            ),
        );
    }
    raw.poll
}
