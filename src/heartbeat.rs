//! The heartbeat file: `run` rewrites it while its loop turns ([`beat`]), `readyprobe health`
//! judges its age ([`check`]) so that a container health check needs no shell, no socket and no
//! AWS call. Freshness is the file's modification time; the content (the time of writing) is for
//! a person reading the file.

use crate::regular_file::open_regular;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often `run` rewrites the heartbeat: well inside [`DEFAULT_MAX_AGE`], so one write that
/// is late on a loaded machine does not fail the health check.
pub const EVERY: Duration = Duration::from_secs(5);

/// `health --max-age` default: six missed heartbeats.
pub const DEFAULT_MAX_AGE: &str = "30s";

/// Rewrite the heartbeat file at `path` (created with mode 0644 when missing) with the time of
/// writing. Blocking: `run` calls it off its loop. Only a regular file is written (no FIFO,
/// device or symbolic link: [`open_regular`]).
///
/// # Errors
/// What opening or writing the file returned, naming the path.
pub fn beat(path: &Path) -> std::io::Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let line = format!(
        "{}\n",
        crate::clock::rfc3339(i64::try_from(now.as_millis()).unwrap_or(i64::MAX))
    );
    let write = || {
        let mut f = open_regular(
            path,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        f.write_all(line.as_bytes())
    };
    write().map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Whether the heartbeat at `path` was written within `max_age` of now: `Ok` with its age, or
/// the one-line reason it is not (missing, not a regular file, unreadable, too old).
///
/// # Errors
/// The reason, naming the path.
pub fn check(path: &Path, max_age: Duration) -> Result<Duration, String> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "no heartbeat file {shown}: no `readyprobe run --heartbeat` with this path has written it yet"
            ));
        }
        Err(e) => return Err(format!("heartbeat file {shown}: {e}")),
    };
    if !meta.is_file() {
        return Err(format!(
            "heartbeat {shown} is not a regular file (run writes only a regular file there)"
        ));
    }
    let modified = meta
        .modified()
        .map_err(|e| format!("heartbeat file {shown}: no modification time: {e}"))?;
    judge(modified, SystemTime::now(), max_age).map_err(|why| format!("heartbeat {shown} {why}"))
}

/// The age of a heartbeat written at `modified`, seen at `now`, or why it is too old. A time
/// after `now` counts as just written: the wall clock stepped back since, and the next beat
/// writes a time on the new clock.
fn judge(modified: SystemTime, now: SystemTime, max_age: Duration) -> Result<Duration, String> {
    let age = now.duration_since(modified).unwrap_or(Duration::ZERO);
    if age > max_age {
        return Err(format!(
            "last written {} ago, more than --max-age {}: the run loop is not turning (stopped, hung or exited)",
            crate::clock::fmt_duration(Duration::from_secs(age.as_secs())),
            crate::clock::fmt_duration(max_age)
        ));
    }
    Ok(age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_within_max_age_stale_past_it() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let max = Duration::from_secs(30);
        assert_eq!(judge(t, t + Duration::from_secs(30), max), Ok(max));
        let old = judge(t, t + Duration::from_millis(30_001), max).unwrap_err();
        assert_eq!(
            old,
            "last written 30s ago, more than --max-age 30s: the run loop is not turning (stopped, hung or exited)"
        );
        assert!(judge(t, t + Duration::from_secs(3600), max).is_err());
        // Written "after now": the clock stepped back; fresh.
        assert_eq!(
            judge(t, t - Duration::from_secs(60), max),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn beat_writes_a_fresh_file_and_check_reads_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("heartbeat");
        let missing = check(&path, Duration::from_secs(30)).unwrap_err();
        assert!(missing.starts_with("no heartbeat file "), "{missing}");
        beat(&path).expect("beat");
        beat(&path).expect("beat again (rewrites)");
        assert!(check(&path, Duration::from_secs(30)).is_ok());
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.ends_with("Z\n") && text.lines().count() == 1,
            "{text:?}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).expect("symlink");
        let e = beat(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!dir.path().join("elsewhere").exists());
        let e = check(dir.path(), Duration::from_secs(30)).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
