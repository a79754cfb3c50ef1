//! The fourth and fifth hops: each branch's Route 53 `CLOUDWATCH_METRIC` health check and the
//! failover answer.
//!
//! Model (assumptions, stated in every report): a health check follows its alarm's state
//! `health_check.delay` after it changes: OK healthy, ALARM unhealthy, INSUFFICIENT_DATA as
//! `InsufficientDataHealthStatus` says (`LastKnownStatus` keeps the status, healthy before any).
//! Route 53 answers with the PRIMARY record when its health check is healthy, else with the
//! SECONDARY when that one is, else with the PRIMARY anyway (fail-open, as Route 53 does when no
//! record is healthy), `dns.answer_delay` after the health change. A resolver that cached the old
//! answer hands it out for at most the record's TTL more.

use super::alarm::{AlarmState, Change};
use super::scenario::{HealthModel, InsufficientDataHealthStatus};
use crate::readiness::{Millis, fails_open};
use serde::Serialize;

/// A health check's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Health {
    Healthy,
    Unhealthy,
}

/// The failover record Route 53 answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::Display)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Record {
    Primary,
    Secondary,
}

/// What Route 53 answers, and whether it is the fail-open answer (no record healthy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub record: Record,
    pub fail_open: bool,
}

fn follow(model: &HealthModel, alarm: AlarmState, last: Health) -> Health {
    match alarm {
        AlarmState::Ok => Health::Healthy,
        AlarmState::Alarm => Health::Unhealthy,
        AlarmState::InsufficientData => match model.insufficient_data_health_status {
            InsufficientDataHealthStatus::Healthy => Health::Healthy,
            InsufficientDataHealthStatus::Unhealthy => Health::Unhealthy,
            InsufficientDataHealthStatus::LastKnownStatus => last,
        },
    }
}

/// The health check's status at the start and every change.
pub fn health_states(
    model: &HealthModel,
    alarm_start: AlarmState,
    alarm: &[Change<AlarmState>],
) -> (Health, Vec<Change<Health>>) {
    let start = follow(model, alarm_start, Health::Healthy);
    let mut state = start;
    let mut changes = Vec::new();
    for c in alarm {
        let next = follow(model, c.to, state);
        if next != state {
            state = next;
            changes.push(Change {
                at: c.at + model.delay_ms,
                to: next,
            });
        }
    }
    (start, changes)
}

fn answer(primary: Health, secondary: Option<Health>) -> Answer {
    let healthy = |h: Health| Some(h == Health::Healthy);
    let branches = std::iter::once(primary).chain(secondary).map(healthy);
    let fail_open = fails_open(branches) == Some(true);
    let record = match (primary, secondary) {
        (Health::Unhealthy, Some(Health::Healthy)) => Record::Secondary,
        _ => Record::Primary,
    };
    Answer { record, fail_open }
}

/// A health timeline: its start and changes.
pub type HealthTimeline<'a> = (Health, &'a [Change<Health>]);

/// The answer at the start and every change, from the PRIMARY's health and the SECONDARY's
/// (`None` when the service has no SECONDARY branch).
pub fn answers(
    primary: HealthTimeline<'_>,
    secondary: Option<HealthTimeline<'_>>,
    answer_delay_ms: Millis,
) -> (Answer, Vec<Change<Answer>>) {
    let (mut p, mut s) = (primary.0, secondary.map(|x| x.0));
    let start = answer(p, s);
    let mut events: Vec<(Millis, bool, Health)> =
        primary.1.iter().map(|c| (c.at, true, c.to)).collect();
    if let Some((_, ch)) = secondary {
        events.extend(ch.iter().map(|c| (c.at, false, c.to)));
    }
    events.sort_by_key(|e| e.0);
    let mut current = start;
    let mut changes = Vec::new();
    for (i, (at, is_primary, h)) in events.iter().enumerate() {
        if *is_primary {
            p = *h;
        } else {
            s = Some(*h);
        }
        // Changes at one instant are one answer change.
        if events.get(i + 1).is_some_and(|n| n.0 == *at) {
            continue;
        }
        let next = answer(p, s);
        if next != current {
            current = next;
            changes.push(Change {
                at: at + answer_delay_ms,
                to: next,
            });
        }
    }
    (start, changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(status: &str) -> HealthModel {
        HealthModel {
            insufficient_data_health_status: status.parse().expect("a status"),
            delay_ms: 30_000,
        }
    }

    fn ch<S>(at: Millis, to: S) -> Change<S> {
        Change { at, to }
    }

    #[test]
    fn insufficient_data_follows_the_health_check_setting() {
        let alarm = [
            ch(60_000, AlarmState::Alarm),
            ch(120_000, AlarmState::InsufficientData),
            ch(180_000, AlarmState::Ok),
        ];
        let (_, last) = health_states(&model("LastKnownStatus"), AlarmState::Ok, &alarm);
        assert_eq!(
            last,
            [ch(90_000, Health::Unhealthy), ch(210_000, Health::Healthy)]
        );
        let (_, healthy) = health_states(&model("Healthy"), AlarmState::Ok, &alarm);
        assert_eq!(
            healthy,
            [ch(90_000, Health::Unhealthy), ch(150_000, Health::Healthy)]
        );
        let (start, _) = health_states(&model("Unhealthy"), AlarmState::InsufficientData, &[]);
        assert_eq!(start, Health::Unhealthy);
    }

    #[test]
    fn both_unhealthy_fails_open_to_the_primary() {
        let p = [ch(100, Health::Unhealthy), ch(900, Health::Healthy)];
        let s = [ch(300, Health::Unhealthy), ch(600, Health::Healthy)];
        let (start, changes) = answers((Health::Healthy, &p), Some((Health::Healthy, &s)), 5);
        let a = |record, fail_open| Answer { record, fail_open };
        assert_eq!(start, a(Record::Primary, false));
        assert_eq!(
            changes,
            [
                ch(105, a(Record::Secondary, false)),
                ch(305, a(Record::Primary, true)),
                ch(605, a(Record::Secondary, false)),
                ch(905, a(Record::Primary, false)),
            ]
        );
    }
}
