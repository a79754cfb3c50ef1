//! Each scripted fault measured per phase, as a drill report would: failover from the fault's
//! start (first failed attempt → readiness 0 published → alarm in ALARM → health check unhealthy
//! → the answer leaves the branch → every cache has the new answer) and failback from its end
//! (first successful attempt → pending_approval → readiness 1 published → alarm OK → healthy →
//! the answer returns → caches). Each phase is searched at or after the one before it, within
//! the fault's stretch (failover: until the next fault of the branch; failback: likewise).

use super::alarm::{AlarmState, Change};
use super::attempts::ScriptedAttempt;
use super::route53::{Answer, Health};
use super::scenario::{Scenario, Segment};
use super::{BranchReport, Timeline};
use crate::failure::FailureClass;
use crate::readiness::{Millis, ReadinessState};
use serde::Serialize;

/// One phase of a failover or failback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// What happened.
    pub name: String,
    /// When, ms from the scenario's start; `None` when it did not happen.
    pub at: Option<Millis>,
    /// Since the fault started (failover) or ended (failback), ms.
    pub since_fault_ms: Option<Millis>,
    /// Since the phase before, ms.
    pub took_ms: Option<Millis>,
    /// Why it has no time, or what it means.
    pub note: Option<String>,
}

/// One fault of a branch, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultReport {
    pub from: Millis,
    pub until: Millis,
    pub fail_percent: f64,
    pub class: FailureClass,
    pub failover: Vec<Phase>,
    pub failback: Vec<Phase>,
    /// Time in `pending_approval` before the branch went ready again, ms.
    pub pending_approval_ms: Option<Millis>,
}

/// What every fault is measured against.
pub struct Context<'a> {
    pub scenario: &'a Scenario,
    pub answer: &'a Timeline<Answer>,
}

/// Builds a phase list, each phase searched after the one before.
struct Chain {
    origin: Millis,
    last: Option<Millis>,
    phases: Vec<Phase>,
}

impl Chain {
    fn new(origin: Millis) -> Self {
        Chain {
            origin,
            last: Some(origin),
            phases: Vec::new(),
        }
    }

    /// Where the next search starts; `None` once a phase was not reached.
    fn after(&self) -> Option<Millis> {
        self.last
    }

    fn push(&mut self, name: &str, at: Option<Millis>, note: Option<String>) {
        let note = match (at, self.last, note) {
            (None, Some(_), None) => Some("not reached".to_string()),
            (None, None, None) => Some("an earlier phase was not reached".to_string()),
            (_, _, n) => n,
        };
        self.phases.push(Phase {
            name: name.to_string(),
            at,
            since_fault_ms: at.map(|t| t - self.origin),
            took_ms: at.zip(self.last).map(|(t, l)| t - l),
            note,
        });
        self.last = at;
    }

    /// A phase that did not happen for a reason of its own: later phases are searched after the
    /// one before it.
    fn skip(&mut self, name: &str, note: String) {
        self.phases.push(Phase {
            name: name.to_string(),
            at: None,
            since_fault_ms: None,
            took_ms: None,
            note: Some(note),
        });
    }
}

fn first<S: Copy>(
    changes: &[Change<S>],
    from: Millis,
    to: Millis,
    want: impl Fn(S) -> bool,
) -> Option<Millis> {
    changes
        .iter()
        .find(|c| c.at >= from && c.at < to && want(c.to))
        .map(|c| c.at)
}

/// Every fault of branch `b` measured; `tried` are its attempts.
pub fn faults(
    ctx: &Context<'_>,
    b: &BranchReport,
    faults: &[Segment],
    tried: &[ScriptedAttempt],
) -> Vec<FaultReport> {
    let end = ctx.scenario.duration_ms + 1;
    faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let next = faults.get(i + 1).map_or(end, |n| n.from);
            let (failback, pending) = failback(ctx, b, f.until, next, tried);
            FaultReport {
                from: f.from,
                until: f.until,
                fail_percent: f.fail_percent,
                class: f.class,
                failover: failover(ctx, b, f.from, next, tried),
                failback,
                pending_approval_ms: pending,
            }
        })
        .collect()
}

fn transition(
    b: &BranchReport,
    from: Option<Millis>,
    to: Millis,
    state: ReadinessState,
) -> Option<Millis> {
    let from = from?;
    b.transitions
        .iter()
        .find(|s| s.at >= from && s.at < to && s.to == state)
        .map(|s| s.at)
}

fn failover(
    ctx: &Context<'_>,
    b: &BranchReport,
    start: Millis,
    next: Millis,
    tried: &[ScriptedAttempt],
) -> Vec<Phase> {
    let mut c = Chain::new(start);
    let failed = tried
        .iter()
        .find(|a| a.started_at >= start && !a.record.success)
        .map(|a| a.record.finished_at)
        .filter(|t| *t < next);
    c.push("first failed attempt", failed, None);
    let unready = transition(b, c.after(), next, ReadinessState::Unready);
    c.push("detection: readiness 0 published", unready, None);
    let alarm = c
        .after()
        .and_then(|t| first(&b.alarm.changes, t, next, |s| s == AlarmState::Alarm));
    c.push("alarm: ALARM", alarm, None);
    let sick = c
        .after()
        .and_then(|t| first(&b.health.changes, t, next, |h| h == Health::Unhealthy));
    c.push("health check: unhealthy", sick, None);
    let Some(h) = c.after() else {
        c.push("DNS selection", None, None);
        c.push("cache expiry: every client on the new answer", None, None);
        return c.phases;
    };
    let before = ctx.answer.at(h - 1);
    if before.record != b.record || before.fail_open {
        c.skip(
            "DNS selection",
            format!("the answer was {} already: no DNS change", describe(before)),
        );
        c.skip(
            "cache expiry: every client on the new answer",
            "no DNS change".into(),
        );
        return c.phases;
    }
    let moved = ctx
        .answer
        .changes
        .iter()
        .find(|x| x.at >= h && x.at < next && (x.to.record != b.record || x.to.fail_open))
        .copied();
    let note = moved.map(|m| format!("answer {}", describe(m.to)));
    c.push("DNS selection", moved.map(|m| m.at), note);
    let ttl = moved.map(|m| m.at + ctx.scenario.dns.ttl_ms);
    c.push("cache expiry: every client on the new answer", ttl, None);
    c.phases
}

fn failback(
    ctx: &Context<'_>,
    b: &BranchReport,
    start: Millis,
    next: Millis,
    tried: &[ScriptedAttempt],
) -> (Vec<Phase>, Option<Millis>) {
    let mut c = Chain::new(start);
    let ok = tried
        .iter()
        .find(|a| a.started_at >= start && a.record.success)
        .map(|a| a.record.finished_at)
        .filter(|t| *t < next);
    c.push("first successful attempt", ok, None);
    let pending = transition(b, c.after(), next, ReadinessState::PendingApproval);
    let ready = transition(b, c.after(), next, ReadinessState::Ready);
    let mut pending_ms = None;
    match pending {
        Some(p) if ready.is_none_or(|r| p < r) => {
            c.push("pending_approval (publishes 0)", Some(p), None);
            pending_ms = ready.map(|r| r - p);
        }
        _ => c.skip(
            "pending_approval (publishes 0)",
            "no approval needed".into(),
        ),
    }
    c.push("readiness 1 published", ready, None);
    let ok_alarm = c
        .after()
        .and_then(|t| first(&b.alarm.changes, t, next, |s| s == AlarmState::Ok));
    c.push("alarm: OK", ok_alarm, None);
    let well = c
        .after()
        .and_then(|t| first(&b.health.changes, t, next, |h| h == Health::Healthy));
    c.push("health check: healthy", well, None);
    let back = c.after().and_then(|h| {
        ctx.answer
            .changes
            .iter()
            .find(|x| x.at >= h && x.at < next && x.to.record == b.record && !x.to.fail_open)
            .copied()
    });
    match (c.after(), back) {
        (Some(_), None) => {
            let now = c.after().map(|h| ctx.answer.at(h));
            c.skip(
                "DNS selection",
                format!(
                    "the answer does not return to this branch ({})",
                    now.map_or("unknown".into(), describe)
                ),
            );
            c.skip(
                "cache expiry: every client on the new answer",
                "no DNS change".into(),
            );
        }
        _ => {
            c.push(
                "DNS selection",
                back.map(|m| m.at),
                back.map(|m| format!("answer {}", describe(m.to))),
            );
            let ttl = back.map(|m| m.at + ctx.scenario.dns.ttl_ms);
            c.push("cache expiry: every client on the new answer", ttl, None);
        }
    }
    (c.phases, pending_ms)
}

/// `SECONDARY`, or `PRIMARY (fail-open)`.
pub fn describe(a: Answer) -> String {
    if a.fail_open {
        format!("{} (fail-open: no record healthy)", a.record)
    } else {
        a.record.to_string()
    }
}
