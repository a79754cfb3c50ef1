//! The third hop: the CloudWatch alarm on a branch's `Readiness`.
//!
//! Model (an assumption, stated in every report): periods are aligned on the scenario's start;
//! the alarm evaluates period `k` (`[k·P, (k+1)·P)`) at its end plus `evaluation_delay`, over
//! the last `evaluation_periods` periods. A period's datapoint is the statistic of the datums
//! timestamped in it, or missing. `TreatMissingData`: `breaching` and `notBreaching` turn a
//! missing datapoint into one; with `missing` and `ignore` missing datapoints neither breach nor
//! clear. The alarm is ALARM when at least `datapoints_to_alarm` datapoints breach; else, when no
//! datapoint is present, INSUFFICIENT_DATA (`missing`) or unchanged (`ignore`); else OK. Periods
//! before the start carry the branch's initial published value.

use super::publish::Datum;
use super::scenario::{AlarmModel, Statistic, TreatMissing};
use crate::readiness::Millis;
use serde::Serialize;

pub use crate::aws_vocab::AlarmState;

/// A change of a hop's state at an instant (ms from the scenario's start).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change<S> {
    pub at: Millis,
    pub to: S,
}

/// The statistic of one period's values; `None` when there are none.
pub fn statistic(s: Statistic, values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    Some(match s {
        Statistic::Average => values.iter().sum::<f64>() / n,
        Statistic::Minimum => values.iter().copied().fold(f64::INFINITY, f64::min),
        Statistic::Maximum => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Statistic::Sum => values.iter().sum(),
        Statistic::SampleCount => n,
    })
}

/// The alarm's state at the start (from the initial published value) and every change until
/// `end` (ms).
pub fn alarm_states(
    model: &AlarmModel,
    initial_value: Option<f64>,
    datums: &[Datum],
    end: Millis,
) -> (AlarmState, Vec<Change<AlarmState>>) {
    let p = model.period_ms.max(1);
    let periods = usize::try_from(end / p + 1).unwrap_or(0);
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); periods];
    for d in datums {
        if let Some(v) = usize::try_from(d.at / p)
            .ok()
            .and_then(|k| values.get_mut(k))
        {
            v.push(d.value);
        }
    }
    let breach = |v: Option<f64>| -> Option<bool> {
        match (v, model.treat_missing_data) {
            (Some(x), _) => Some(model.comparison.breaches(x, model.threshold)),
            (None, TreatMissing::Breaching) => Some(true),
            (None, TreatMissing::NotBreaching) => Some(false),
            (None, _) => None,
        }
    };
    let before = breach(initial_value.and_then(|v| statistic(model.statistic, &[v])));
    let points: Vec<Option<bool>> = values
        .iter()
        .map(|v| breach(statistic(model.statistic, v)))
        .collect();
    let n = model.evaluation_periods as usize;
    let start = decide(model, &vec![before; n], AlarmState::InsufficientData);
    let mut state = start;
    let mut changes = Vec::new();
    for k in 0..periods {
        let at = (k as i64 + 1) * p + model.evaluation_delay_ms;
        if at > end {
            break;
        }
        let range: Vec<Option<bool>> = (0..n)
            .map(|back| k.checked_sub(back).map_or(before, |i| points[i]))
            .collect();
        let next = decide(model, &range, state);
        if next != state {
            state = next;
            changes.push(Change { at, to: next });
        }
    }
    (start, changes)
}

fn decide(model: &AlarmModel, range: &[Option<bool>], current: AlarmState) -> AlarmState {
    let present = range.iter().filter(|b| b.is_some()).count();
    let breaching = range.iter().filter(|b| **b == Some(true)).count();
    if breaching >= model.datapoints_to_alarm as usize {
        AlarmState::Alarm
    } else if present == 0 {
        match model.treat_missing_data {
            TreatMissing::Ignore => current,
            _ => AlarmState::InsufficientData,
        }
    } else {
        AlarmState::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::scenario::Comparison;

    fn model(statistic: Statistic, threshold: f64, treat: TreatMissing, n: u32) -> AlarmModel {
        AlarmModel {
            period_ms: 60_000,
            statistic,
            evaluation_periods: n,
            datapoints_to_alarm: n,
            threshold,
            comparison: Comparison::LessThanThreshold,
            treat_missing_data: treat,
            evaluation_delay_ms: 0,
        }
    }

    fn d(at: Millis, value: f64) -> Datum {
        Datum { at, value }
    }

    /// Ticks of 1 each minute; 0 from a transition at 782 s on.
    fn unready_at_782() -> Vec<Datum> {
        let mut v: Vec<Datum> = (0..=13).map(|m| d(m * 60_000, 1.0)).collect();
        v.push(d(782_000, 0.0));
        v.extend((14..=20).map(|m| d(m * 60_000, 0.0)));
        v
    }

    #[test]
    fn the_statistic_is_the_quorum_rule() {
        let m = model(Statistic::Minimum, 1.0, TreatMissing::Missing, 1);
        let (start, ch) = alarm_states(&m, Some(1.0), &unready_at_782(), 1_200_000);
        assert_eq!(start, AlarmState::Ok);
        // Minimum of {1 at 780 s, 0 at 782 s} is 0: the period [780 s, 840 s) breaches.
        assert_eq!(
            ch,
            [Change {
                at: 840_000,
                to: AlarmState::Alarm
            }]
        );
        // Average of the same period is 0.5, not < 0.5: one period later.
        let m = model(Statistic::Average, 0.5, TreatMissing::Missing, 1);
        let (_, ch) = alarm_states(&m, Some(1.0), &unready_at_782(), 1_200_000);
        assert_eq!(
            ch,
            [Change {
                at: 900_000,
                to: AlarmState::Alarm
            }]
        );
        // Two of two periods: one more.
        let m = model(Statistic::Minimum, 1.0, TreatMissing::Missing, 2);
        let (_, ch) = alarm_states(&m, Some(1.0), &unready_at_782(), 1_200_000);
        assert_eq!(
            ch,
            [Change {
                at: 900_000,
                to: AlarmState::Alarm
            }]
        );
    }

    #[test]
    fn missing_data_follows_treat_missing_data() {
        // Datums stop after 5 m (the prober died).
        let datums: Vec<Datum> = (0..=5).map(|m| d(m * 60_000, 1.0)).collect();
        let end = 600_000;
        let run = |t| {
            alarm_states(
                &model(Statistic::Minimum, 1.0, t, 1),
                Some(1.0),
                &datums,
                end,
            )
            .1
        };
        assert_eq!(
            run(TreatMissing::Missing),
            [Change {
                at: 420_000,
                to: AlarmState::InsufficientData
            }]
        );
        assert_eq!(
            run(TreatMissing::Breaching),
            [Change {
                at: 420_000,
                to: AlarmState::Alarm
            }]
        );
        assert_eq!(run(TreatMissing::NotBreaching), []);
        assert_eq!(run(TreatMissing::Ignore), []);
        // Never published (unknown): insufficient data from the start.
        let (start, ch) = alarm_states(
            &model(Statistic::Minimum, 1.0, TreatMissing::Missing, 1),
            None,
            &[],
            end,
        );
        assert_eq!((start, ch.len()), (AlarmState::InsufficientData, 0));
    }
}
