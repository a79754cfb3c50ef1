//! `[readiness]`: the policy every branch is judged by, and the arithmetic `check` explains.

use super::issues::Issues;
use super::raw::RawReadiness;
use super::values::{Approval, InitialState};
use crate::clock::fmt_duration;
use crate::failure::FailureClass;
use crate::readiness::{Condition, Definitive, FlapDamping, Policy};
use std::collections::BTreeSet;
use std::time::Duration;

const UNREADY_RATE: &str = "readiness.declare_unready.success_rate_below";
const READY_RATE: &str = "readiness.declare_ready.success_rate_at_or_above";

/// The longest readiness window or `for` duration. The readiness state keeps every attempt of
/// its longest window, and that state is saved to the shared control document on every sync:
/// a day at the shortest probe interval is already the largest document worth carrying.
pub const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The most attempts one window may hold at the probe interval. Every attempt of a window is
/// saved (about 60 bytes) per branch and prober to the control document, which is read whole
/// and refused above 16 MiB (`state::MAX_DOC_BYTES`): 20,000 keep a prober's branch near 1 MiB.
pub const MAX_WINDOW_ATTEMPTS: u64 = 20_000;

/// Validate `[readiness]`; `interval` is the probe interval the windows must hold attempts at
/// (`None` when it is invalid: the windows are then not measured against it).
pub(super) fn section(
    r: &RawReadiness,
    interval: Option<Duration>,
    issues: &mut Issues<'_>,
) -> Option<Policy> {
    bounded_windows(r, issues);
    let window = r.window.unwrap_or(Duration::from_secs(60));
    let min_attempts = r.min_attempts.unwrap_or(10);
    if min_attempts == 0 {
        issues.error("readiness.min_attempts", "must be at least 1");
    }
    let u = r.declare_unready.as_ref();
    let unready = Condition {
        threshold_percent: u.and_then(|u| u.success_rate_below).unwrap_or(95.0),
        for_: u.and_then(|u| u.for_).unwrap_or(Duration::from_secs(180)),
        window: u.and_then(|u| u.window).unwrap_or(window),
    };
    let x = r.declare_ready.as_ref();
    let ready = Condition {
        threshold_percent: x.and_then(|x| x.success_rate_at_or_above).unwrap_or(99.0),
        for_: x.and_then(|x| x.for_).unwrap_or(Duration::from_secs(600)),
        window: x.and_then(|x| x.window).unwrap_or(window),
    };
    let approval = x.and_then(|x| x.approval).unwrap_or_default();
    let initial = r.initial.unwrap_or_default();
    if approval == Approval::Required && initial == InitialState::Ready {
        issues.warn(
            "readiness.initial is \"ready\" while declare_ready.approval is \"required\": a fresh start publishes 1 without any approval",
        );
    }
    thresholds(&unready, &ready, issues);
    let windows = [
        ("unready", &unready, u.is_some_and(|u| u.window.is_some())),
        ("ready", &ready, x.is_some_and(|x| x.window.is_some())),
    ];
    if let Some(interval) = interval {
        for (name, c, own_window) in windows {
            window_fits(name, c, own_window, interval, min_attempts, issues);
        }
    }
    let definitive = definitive(r, &unready, issues);
    // The attempts of twice `definitive_for` are kept too (`Policy::retention`).
    if let Some(n) = interval
        .map(|i| attempts_in(definitive.for_.saturating_mul(2), i))
        .filter(|n| *n > MAX_WINDOW_ATTEMPTS)
    {
        issues.error(
            "readiness.declare_unready.definitive_for",
            format!(
                "twice {} holds {n} attempts at the probe interval, more than {MAX_WINDOW_ATTEMPTS}: the attempts of twice definitive_for are kept in the state saved to the shared control document; shorten it",
                fmt_duration(definitive.for_)
            ),
        );
    }
    let damping = damping(r, &ready, issues);
    Some(Policy {
        min_attempts,
        declare_unready: unready,
        declare_ready: ready,
        approval_required: approval == Approval::Required,
        initial: initial.into(),
        definitive: Some(definitive),
        damping,
    })
}

/// `[readiness.flap_damping]`: on by default ([`FlapDamping::default`], `quiet` defaulting to
/// `period`); `enabled = false` turns it off.
fn damping(r: &RawReadiness, ready: &Condition, issues: &mut Issues<'_>) -> Option<FlapDamping> {
    const KEY: &str = "readiness.flap_damping";
    let raw = r.flap_damping.as_ref();
    if raw.and_then(|d| d.enabled) == Some(false) {
        return None;
    }
    let default = FlapDamping::default();
    let period = raw.and_then(|d| d.period).unwrap_or(default.period);
    let d = FlapDamping {
        flaps: raw.and_then(|d| d.flaps).unwrap_or(default.flaps),
        period,
        max_for: raw
            .and_then(|d| d.max_for)
            // A ready `for` over a day is its own error; the default does not repeat it.
            .unwrap_or(default.max_for.max(ready.for_.min(MAX_WINDOW))),
        quiet: raw.and_then(|d| d.quiet).unwrap_or(period),
    };
    for (key, v) in [
        ("period", d.period),
        ("max_for", d.max_for),
        ("quiet", d.quiet),
    ] {
        if v > MAX_WINDOW {
            issues.error(
                format!("{KEY}.{key}"),
                format!(
                    "{} is longer than 24h (flap damping keeps no longer a memory)",
                    issues.written(&format!("{KEY}.{key}"), v)
                ),
            );
        }
    }
    if d.period.is_zero() {
        issues.error(format!("{KEY}.period"), "must be longer than 0s; to turn damping off, set readiness.flap_damping.enabled = false");
    }
    if d.quiet.is_zero() {
        issues.error(format!("{KEY}.quiet"), "must be longer than 0s; to turn damping off, set readiness.flap_damping.enabled = false");
    } else if d.quiet > d.period {
        issues.error(
            format!("{KEY}.quiet"),
            format!(
                "{} is longer than flap_damping.period ({}): flaps older than the period are forgotten already, so it would never reset anything",
                issues.written(&format!("{KEY}.quiet"), d.quiet),
                issues.written(&format!("{KEY}.period"), d.period)
            ),
        );
    }
    if d.max_for < ready.for_ && ready.for_ <= MAX_WINDOW {
        issues.error(
            format!("{KEY}.max_for"),
            format!(
                "{} is shorter than declare_ready.for ({}): damping lengthens the ready `for`, it cannot shorten it",
                issues.written(&format!("{KEY}.max_for"), d.max_for),
                issues.written("readiness.declare_ready.for", ready.for_)
            ),
        );
    }
    Some(d)
}

/// `declare_unready.definitive_for` (default 20 s, or `for` when that is shorter: at most `for`)
/// and `definitive_classes` (default [`FailureClass::default_definitive`]).
fn definitive(r: &RawReadiness, unready: &Condition, issues: &mut Issues<'_>) -> Definitive {
    const KEY: &str = "readiness.declare_unready.definitive_for";
    let written = r.declare_unready.as_ref().and_then(|u| u.definitive_for);
    let default = Definitive::default();
    let for_ = written.unwrap_or(default.for_.min(unready.for_));
    if for_ > unready.for_ {
        issues.error(
            KEY,
            format!(
                "{} is longer than declare_unready.for ({}): the definitive rule shortens `for` for definitive failures, it cannot lengthen it",
                issues.written(KEY, for_),
                issues.written("readiness.declare_unready.for", unready.for_)
            ),
        );
    } else if written.is_some_and(|d| d.is_zero()) {
        issues.error(
            KEY,
            "must be longer than 0s (0s would fire on a single definitive failure); to turn the rule off, set readiness.definitive_classes = []",
        );
    }
    let classes = match &r.definitive_classes {
        None => default.classes,
        Some(names) => class_set(names, issues),
    };
    Definitive { for_, classes }
}

/// The classes `names` name; an unknown name is an error listing the known ones.
fn class_set(names: &[String], issues: &mut Issues<'_>) -> BTreeSet<FailureClass> {
    use strum::IntoEnumIterator;
    let mut set = BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        match FailureClass::iter().find(|c| c.as_str() == name) {
            Some(c) => {
                set.insert(c);
            }
            None => {
                let known: Vec<&str> = FailureClass::iter().map(FailureClass::as_str).collect();
                issues.error(
                    format!("readiness.definitive_classes[{i}]"),
                    format!(
                        "unknown failure class {name:?}; the classes are: {}",
                        known.join(", ")
                    ),
                );
            }
        }
    }
    set
}

/// Every written window and `for` is at most [`MAX_WINDOW`].
fn bounded_windows(r: &RawReadiness, issues: &mut Issues<'_>) {
    let u = r.declare_unready.as_ref();
    let x = r.declare_ready.as_ref();
    for (key, d) in [
        ("readiness.window", r.window),
        ("readiness.declare_unready.window", u.and_then(|u| u.window)),
        ("readiness.declare_unready.for", u.and_then(|u| u.for_)),
        (
            "readiness.declare_unready.definitive_for",
            u.and_then(|u| u.definitive_for),
        ),
        ("readiness.declare_ready.window", x.and_then(|x| x.window)),
        ("readiness.declare_ready.for", x.and_then(|x| x.for_)),
    ] {
        if let Some(d) = d.filter(|d| *d > MAX_WINDOW) {
            issues.error(
                key,
                format!(
                    "{} is longer than the longest readiness window, 24h (the attempts it spans are kept in the state saved to the shared control document)",
                    issues.written(key, d)
                ),
            );
        }
    }
}

/// Both thresholds are percentages, and the ready one is not below the unready one.
fn thresholds(unready: &Condition, ready: &Condition, issues: &mut Issues<'_>) {
    for (key, thr) in [
        (UNREADY_RATE, unready.threshold_percent),
        (READY_RATE, ready.threshold_percent),
    ] {
        if !(0.0..=100.0).contains(&thr) || !thr.is_finite() {
            issues.error(key, "is a percentage: 0–100");
        }
    }
    if unready.threshold_percent <= 0.0 {
        issues.warn(
            "readiness.declare_unready.success_rate_below is 0: no success rate is below it, so a branch is never declared unready",
        );
    }
    if ready.threshold_percent < unready.threshold_percent {
        issues.error(
            READY_RATE,
            format!(
                "the ready threshold ({}%) is below the unready threshold ({}%): a branch could be declared ready at a rate that declares it unready",
                ready.threshold_percent, unready.threshold_percent
            ),
        );
    }
}

/// With adaptive probing, the attempts the policy keeps (its longest window, or twice
/// `definitive_for`) at one per `suspect_interval` stay within [`MAX_WINDOW_ATTEMPTS`]: a
/// suspect branch fills its windows faster. An error on `probe.suspect_interval` otherwise,
/// unless the policy is already refused at `interval` (one error per cause).
pub(super) fn suspect_fits(
    policy: &Policy,
    (interval, suspect_interval): (Duration, Option<Duration>),
    issues: &mut Issues<'_>,
) {
    let Some(suspect_interval) = suspect_interval else {
        return;
    };
    let kept = policy.retention();
    let longest = policy
        .declare_unready
        .window
        .max(policy.declare_ready.window);
    if longest > MAX_WINDOW || attempts_in(kept, interval) > MAX_WINDOW_ATTEMPTS {
        return;
    }
    let n = attempts_in(kept, suspect_interval);
    if n > MAX_WINDOW_ATTEMPTS {
        issues.error(
            "probe.suspect_interval",
            format!(
                "a suspect branch keeps {n} attempts ({} of them at {}), more than {MAX_WINDOW_ATTEMPTS}: each prober saves every attempt of its windows to the shared control document (read whole, at most 16 MiB); lengthen probe.suspect_interval or shorten the windows",
                fmt_duration(kept),
                fmt_duration(suspect_interval)
            ),
        );
    }
}

/// The condition's window holds `min_attempts` at `interval`; warn when one failure crosses
/// the threshold.
fn window_fits(
    name: &str,
    c: &Condition,
    own_window: bool,
    interval: Duration,
    min_attempts: u32,
    issues: &mut Issues<'_>,
) {
    let key = format!("readiness.declare_{name}");
    let wkey = if own_window {
        format!("{key}.window")
    } else {
        "readiness.window".to_string()
    };
    if c.window > MAX_WINDOW {
        // Already an error of its own.
        return;
    }
    let fits = attempts_in(c.window, interval);
    if fits > MAX_WINDOW_ATTEMPTS {
        issues.error(
            wkey,
            format!(
                "a {} window holds {fits} attempts at probe.interval {}, more than {MAX_WINDOW_ATTEMPTS}: each prober saves every attempt of its windows to the shared control document (read whole, at most 16 MiB); shorten the window or lengthen probe.interval",
                fmt_duration(c.window),
                fmt_duration(interval)
            ),
        );
    } else if fits < u64::from(min_attempts) {
        issues.error(
            wkey,
            format!(
                "a {} window holds at most {fits} attempts at probe.interval {}, fewer than readiness.min_attempts ({min_attempts}): the {name} condition could never hold",
                fmt_duration(c.window),
                fmt_duration(interval)
            ),
        );
    } else if fits > 0 {
        let one_fail = (fits - 1) as f64 / fits as f64 * 100.0;
        if one_fail < c.threshold_percent {
            issues.warn(format!(
                "{key}: one failure among {fits} attempts in the {} window gives {one_fail:.1}%, which {} the {}% threshold",
                fmt_duration(c.window),
                if name == "unready" { "already falls below" } else { "already misses" },
                c.threshold_percent
            ));
        }
    }
}

/// How many attempts finish in `window` at one attempt per `interval` (at least).
pub fn attempts_in(window: Duration, interval: Duration) -> u64 {
    if interval.is_zero() {
        return 0;
    }
    (window.as_millis() / interval.as_millis().max(1)) as u64
}

/// What one failed attempt does to a condition's success rate, as a sentence for `check`.
pub fn one_failure_effect(c: &Condition, interval: Duration, unready: bool) -> String {
    let n = attempts_in(c.window, interval);
    if n == 0 {
        return "window holds no attempt".into();
    }
    let rate = (n - 1) as f64 / n as f64 * 100.0;
    let crosses = rate < c.threshold_percent;
    let verdict = match (unready, crosses) {
        (true, true) => "below the threshold: a single failure starts the unready `for` clock",
        (true, false) => "still above the threshold",
        (false, true) => "misses the threshold: the ready condition demands zero failures",
        (false, false) => "still meets the threshold",
    };
    format!(
        "{n} attempts per {} window; one failure → {rate:.1}% ({verdict})",
        fmt_duration(c.window)
    )
}
