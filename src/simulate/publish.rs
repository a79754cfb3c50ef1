//! The second hop: the real readiness core ([`Readiness`]) and the approval rule
//! ([`control::decide`]) driven as the fold drives them, and the `Readiness` datums a prober
//! publishes (the metric contract: 1 ready; 0 unready or pending_approval; no datum unknown).
//!
//! As in a run: every finished attempt is recorded and evaluated at its `finished_at`; a
//! transition publishes its value at once; every publish tick (at the start and every
//! `publish.interval` after it) evaluates and publishes the current value; an approval
//! given at `t` is decided at the first store sync (`state.poll_interval`) at or after `t`, and
//! each approval is decided once. At one instant: attempts first, then the sync, then the tick.

use super::attempts::ScriptedAttempt;
use crate::control::{self, Approval};
use crate::readiness::{Millis, Policy, Readiness, ReadinessState, Transition};
use serde::Serialize;
use std::collections::BTreeMap;

/// One `Readiness` datum.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Datum {
    /// Its timestamp, ms from the scenario's start.
    pub at: Millis,
    /// 0 or 1.
    pub value: f64,
}

/// What an approval became.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalOutcome {
    /// When the operator gave it, ms.
    pub given_at: Millis,
    /// When the prober decided it (its next store sync), ms.
    pub decided_at: Millis,
    /// Applied or rejected.
    pub applied: bool,
    /// The rule's sentence.
    pub detail: String,
}

/// The branch's side of the loop over the whole scenario.
#[derive(Debug, Clone, Default)]
pub struct BranchRun {
    /// Readiness transitions, in order.
    pub transitions: Vec<Transition>,
    /// Published datums, in order.
    pub datums: Vec<Datum>,
    /// Operator approvals and what became of them.
    pub approvals: Vec<ApprovalOutcome>,
}

/// The prober's timing.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    /// `publish.interval`, ms.
    pub publish_ms: Millis,
    /// `state.poll_interval`, ms.
    pub sync_ms: Millis,
}

/// What the operator does for one branch.
#[derive(Debug, Clone, Default)]
pub struct Operator {
    /// Approvals given at these instants, ms.
    pub approve_at: Vec<Millis>,
    /// An approval this long after each entry into `pending_approval`, ms.
    pub approve_after: Option<Millis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Index into the attempts.
    Attempt(usize),
    Sync,
    Tick,
}

/// Run one branch from 0 to `end` (ms).
pub fn run_branch(
    policy: &Policy,
    attempts: &[ScriptedAttempt],
    cadence: Cadence,
    operator: &Operator,
    end: Millis,
) -> BranchRun {
    let mut events: Vec<(Millis, Event)> = attempts
        .iter()
        .enumerate()
        .filter(|(_, a)| a.record.finished_at <= end)
        .map(|(i, a)| (a.record.finished_at, Event::Attempt(i)))
        .collect();
    // A tick at 0 too: a branch that starts known stands for a prober already running.
    for (step, ev) in [
        (cadence.sync_ms, Event::Sync),
        (cadence.publish_ms, Event::Tick),
    ] {
        let step = step.max(1);
        events.extend(
            (0..)
                .map(|k| k * step)
                .take_while(|t| *t <= end)
                .map(|t| (t, ev)),
        );
    }
    events.sort();
    let mut r = Readiness::new(policy.clone());
    let mut out = BranchRun::default();
    // Given, not decided yet: (given at, approval).
    let mut waiting: BTreeMap<Millis, Vec<Approval>> = BTreeMap::new();
    for t in &operator.approve_at {
        waiting.entry(*t).or_default().push(approval(*t));
    }
    for (now, ev) in events {
        let transition = match ev {
            Event::Attempt(i) => r.record(attempts[i].record),
            Event::Tick => r.evaluate(now),
            Event::Sync => sync(&mut r, &mut waiting, &mut out.approvals, now),
        };
        if let Some(t) = transition {
            if let Some(v) = t.to.published_value() {
                out.datums.push(Datum { at: t.at, value: v });
            }
            if t.to == ReadinessState::PendingApproval
                && let Some(after) = operator.approve_after
            {
                let at = t.at + after;
                waiting.entry(at).or_default().push(approval(at));
            }
            out.transitions.push(t);
        }
        if ev == Event::Tick
            && let Some(v) = r.published_value()
        {
            out.datums.push(Datum { at: now, value: v });
        }
    }
    out
}

fn approval(at: Millis) -> Approval {
    Approval {
        id: format!("simulated-{at}"),
        branch: String::new(),
        by: "scenario".into(),
        reason: "scripted".into(),
        at,
        expires_at: at + super::scenario::APPROVAL_VALID_MS,
        decisions: BTreeMap::new(),
    }
}

/// A store sync at `now`: every approval given by then is decided, oldest first.
fn sync(
    r: &mut Readiness,
    waiting: &mut BTreeMap<Millis, Vec<Approval>>,
    log: &mut Vec<ApprovalOutcome>,
    now: Millis,
) -> Option<Transition> {
    let due: Vec<Millis> = waiting.range(..=now).map(|(t, _)| *t).collect();
    let mut applied = None;
    for t in due {
        for a in waiting.remove(&t).unwrap_or_default() {
            let d = control::decide(&a, r, now);
            if d.applied && applied.is_none() {
                applied = r.approve(now).ok();
            }
            log.push(ApprovalOutcome {
                given_at: a.at,
                decided_at: now,
                applied: d.applied,
                detail: d.detail,
            });
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::{AttemptRecord, Condition};
    use std::time::Duration;

    fn policy(approval_required: bool) -> Policy {
        Policy {
            min_attempts: 10,
            declare_unready: Condition {
                threshold_percent: 95.0,
                for_: Duration::from_secs(180),
                window: Duration::from_secs(60),
            },
            declare_ready: Condition {
                threshold_percent: 99.0,
                for_: Duration::from_secs(600),
                window: Duration::from_secs(300),
            },
            approval_required,
            initial: ReadinessState::Ready,
            definitive: None,
            damping: None,
        }
    }

    /// Attempts every 2 s; those starting in `[from, until)` fail.
    fn outage(from: Millis, until: Millis, end: Millis) -> Vec<ScriptedAttempt> {
        (0..end / 2000)
            .map(|k| {
                let t = k * 2000;
                let fail = (from..until).contains(&t);
                ScriptedAttempt {
                    started_at: t,
                    record: AttemptRecord {
                        finished_at: t,
                        success: !fail,
                        class: None,
                    },
                }
            })
            .collect()
    }

    const CADENCE: Cadence = Cadence {
        publish_ms: 60_000,
        sync_ms: 10_000,
    };

    #[test]
    fn a_transition_publishes_at_once_and_every_tick_publishes_the_state() {
        let a = outage(600_000, 1_500_000, 3_600_000);
        let run = run_branch(&policy(false), &a, CADENCE, &Operator::default(), 3_600_000);
        let to: Vec<_> = run.transitions.iter().map(|t| (t.to, t.at)).collect();
        // Unready: the second failure (602 s) puts the 60 s window below 95 %, 3 m later.
        // Ready: the second-last failure (1,496 s) leaves the 5 m window at 1,796 s, 10 m later.
        assert_eq!(
            to,
            [
                (ReadinessState::Unready, 782_000),
                (ReadinessState::Ready, 2_396_000)
            ]
        );
        assert!(run.datums.contains(&Datum {
            at: 782_000,
            value: 0.0
        }));
        assert!(run.datums.contains(&Datum {
            at: 780_000,
            value: 1.0
        }));
        assert!(run.datums.contains(&Datum {
            at: 2_400_000,
            value: 1.0
        }));
        assert_eq!(run.datums.iter().filter(|d| d.at % 60_000 == 0).count(), 61);
    }

    #[test]
    fn an_approval_is_decided_at_the_next_sync_and_never_pre_authorises() {
        let a = outage(600_000, 1_500_000, 3_600_000);
        let op = Operator {
            // Before pending_approval (rejected), then 5 m after it.
            approve_at: vec![1_000_000],
            approve_after: Some(300_000),
        };
        let run = run_branch(&policy(true), &a, CADENCE, &op, 3_600_000);
        let to: Vec<_> = run.transitions.iter().map(|t| (t.to, t.at)).collect();
        assert_eq!(
            to,
            [
                (ReadinessState::Unready, 782_000),
                (ReadinessState::PendingApproval, 2_396_000),
                // Given at 2,696 s, decided at the sync at 2,700 s.
                (ReadinessState::Ready, 2_700_000),
            ]
        );
        let decided: Vec<_> = run
            .approvals
            .iter()
            .map(|a| (a.given_at, a.decided_at, a.applied))
            .collect();
        assert_eq!(
            decided,
            [(1_000_000, 1_000_000, false), (2_696_000, 2_700_000, true)]
        );
    }
}
