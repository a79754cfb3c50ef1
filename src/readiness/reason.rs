//! The reason text of a transition: the counts, thresholds and holding times that made a
//! condition fire, as the evidence and the logs quote them (pure).

use super::{Readiness, ReadinessState, WindowStats, duration_ms};
use crate::clock::{Millis, fmt_duration_ms, rfc3339};
use crate::failure::FailureClass;
use std::time::Duration;

/// Formats a percentage with two decimals, trimming a trailing zero (`80.0`, `96.67`).
pub(super) fn fmt_percent(p: f64) -> String {
    let s = format!("{p:.2}");
    match s.strip_suffix('0') {
        Some(t) if !t.ends_with('.') => t.to_string(),
        _ => s,
    }
}

/// `a=3, b=1`, the three largest classes (then `...`).
fn describe_classes(classes: &[(FailureClass, u32)]) -> String {
    let top: Vec<String> = classes
        .iter()
        .take(3)
        .map(|(c, n)| format!("{c}={n}"))
        .collect();
    let mut s = top.join(", ");
    if classes.len() > 3 {
        s.push_str(", ...");
    }
    s
}

/// `over the last 5m (150 attempts, 12 failed: a=10, b=2)`: a window's counts as evidence.
fn describe_window(w: &WindowStats) -> String {
    let mut s = format!(
        "over the last {} ({} attempts, {} failed",
        fmt_duration_ms(i64::try_from(w.window_ms).unwrap_or(i64::MAX)),
        w.finished,
        w.failed
    );
    if !w.failure_classes.is_empty() {
        s.push_str(": ");
        s.push_str(&describe_classes(&w.failure_classes));
    }
    s.push(')');
    s
}

impl Readiness {
    /// `(held_since, reason)` of a transition to `unready` at `now`.
    pub(super) fn unready_reason(
        &self,
        now: Millis,
        uw: &WindowStats,
        definitive: Option<&WindowStats>,
    ) -> (Millis, String) {
        let c = &self.policy.declare_unready;
        let hs = self.unready_holding_since.unwrap_or(now);
        let mut reason = format!(
            "success rate {}% < {}% {} held for {} (required {}, since {})",
            fmt_percent(uw.success_rate_percent.unwrap_or(0.0)),
            fmt_percent(c.threshold_percent),
            describe_window(uw),
            fmt_duration_ms(now.saturating_sub(hs)),
            fmt_duration_ms(duration_ms(c.for_)),
            rfc3339(hs),
        );
        if let Some(run) = definitive {
            reason.push_str(&format!(
                "; definitive rule fired: the last {} attempts failed with a definitive class ({}), the first {} ago (required {})",
                run.failed,
                describe_classes(&run.failure_classes),
                fmt_duration_ms(i64::try_from(run.window_ms).unwrap_or(i64::MAX)),
                fmt_duration_ms(duration_ms(
                    self.policy.definitive.as_ref().map_or(Duration::ZERO, |d| d.for_)
                )),
            ));
        }
        (hs, reason)
    }

    /// `(held_since, reason)` of a transition to `to` (ready or pending_approval) at `now`, after
    /// the ready condition held for `ready_for` (the `for` in force).
    pub(super) fn ready_reason(
        &self,
        now: Millis,
        rw: &WindowStats,
        to: ReadinessState,
        ready_for: Duration,
    ) -> (Millis, String) {
        let c = &self.policy.declare_ready;
        let hs = self.ready_holding_since.unwrap_or(now);
        let mut reason = format!(
            "success rate {}% >= {}% {} held for {} (required {}, since {})",
            fmt_percent(rw.success_rate_percent.unwrap_or(0.0)),
            fmt_percent(c.threshold_percent),
            describe_window(rw),
            fmt_duration_ms(now.saturating_sub(hs)),
            fmt_duration_ms(duration_ms(ready_for)),
            rfc3339(hs),
        );
        if to == ReadinessState::PendingApproval {
            reason.push_str("; operator approval required");
        }
        (hs, reason)
    }
}
