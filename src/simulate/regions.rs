//! Cross-region layouts: where each branch's alarm lives and which prober feeds it, compared on
//! one scenario of two regions (`[[region]]`).
//!
//! Each region has a prober, which probes every branch (its own view: a segment with `seen_by`
//! fails only for the probers it names), and a CloudWatch, which takes that prober's datums and
//! evaluates the alarms that live in it. A region fault takes a region away: `dark` fails its
//! branches for every prober, stops its prober and its CloudWatch; `cloudwatch` stops only its
//! CloudWatch (no datum is taken, no alarm evaluated). Route 53 then reads an alarm of that
//! region as its last state, and after `alarm.evaluation_periods` periods as INSUFFICIENT_DATA
//! (`alarms = "insufficient_data"`), or as its last state until the fault ends (`"stale"`).
//!
//! A layout gives each branch a health check: its own region's alarm (fed by its own region's
//! prober), the other region's alarm (fed by the other prober, probing across), or a CALCULATED
//! check over both regions' metric checks, healthy when at least `threshold` are. Each is run
//! under every `InsufficientDataHealthStatus` and scored against the truth: a branch can do its
//! job unless its region is dark or a fault every prober sees (at least 50 % failures) is on it;
//! the right answer is PRIMARY when it can, else SECONDARY when it can (else either). A wrong
//! answer is Route 53 changing its answer to a wrong one, or never giving the right one while it
//! holds. Pure: time is ms from the scenario's start.

use super::alarm::{self, AlarmState, Change};
use super::attempts::{self, ScriptedAttempt, Timing};
use super::publish::{self, Cadence, Datum, Operator};
use super::route53::{self, Answer, Health, Record};
use super::scenario::{
    AlarmModel, BranchScript, HealthModel, ImpairedAlarms, InsufficientDataHealthStatus, Region,
    RegionFaultKind, Scenario, Segment,
};
use crate::failure::FailureClass;
use crate::readiness::{Millis, Policy};
use serde::Serialize;

/// A state's start and its changes.
pub type Line<S> = (S, Vec<Change<S>>);

/// Where a branch's health check reads its alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// The alarm in the branch's own region, fed by that region's prober.
    OwnRegion,
    /// The alarm in the other region, fed by that region's prober probing across.
    OtherRegion,
    /// A CALCULATED check over both regions' metric checks, each fed by its own region's
    /// prober: healthy when at least this many are.
    Calculated(u8),
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layout::OwnRegion => f.write_str("own region"),
            Layout::OtherRegion => f.write_str("other region"),
            Layout::Calculated(k) => write!(f, "calculated, threshold {k}"),
        }
    }
}

/// Every layout compared.
pub const LAYOUTS: [Layout; 4] = [
    Layout::OwnRegion,
    Layout::OtherRegion,
    Layout::Calculated(1),
    Layout::Calculated(2),
];

/// Every `InsufficientDataHealthStatus` compared.
pub const STATUSES: [InsufficientDataHealthStatus; 3] = [
    InsufficientDataHealthStatus::Healthy,
    InsufficientDataHealthStatus::Unhealthy,
    InsufficientDataHealthStatus::LastKnownStatus,
];

/// A change of the right answer and how long Route 53 took to give it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Converge {
    /// When the right answer changed, ms.
    pub at: Millis,
    /// The right answer from then on (`None`: no branch can do its job; either is right).
    pub right: Option<Record>,
    /// How long until Route 53 answered it, ms; `None`: not while it held.
    pub after_ms: Option<Millis>,
}

/// One layout under one insufficient-data status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub layout: Layout,
    pub insufficient_data: InsufficientDataHealthStatus,
    /// Every change of the right answer after the start.
    pub converge: Vec<Converge>,
    /// Answers changed to a wrong record, plus right answers never given while they held.
    pub wrong_answers: u32,
    /// How long Route 53 answered wrong, lags included, ms.
    pub wrong_ms: Millis,
}

/// The state of a line at `t` (after every change at or before it).
pub fn at<S: Copy>(line: &Line<S>, t: Millis) -> S {
    line.1
        .iter()
        .take_while(|c| c.at <= t)
        .last()
        .map_or(line.0, |c| c.to)
}

/// The line of `f` sampled at `times` (each a possible change), starting as `f(-1)`.
fn retime<S: Copy + PartialEq>(mut times: Vec<Millis>, f: impl Fn(Millis) -> S) -> Line<S> {
    times.sort_unstable();
    times.dedup();
    let start = f(-1);
    let mut state = start;
    let mut changes = Vec::new();
    for t in times.into_iter().filter(|t| *t >= 0) {
        let next = f(t);
        if next != state {
            state = next;
            changes.push(Change { at: t, to: next });
        }
    }
    (start, changes)
}

/// The alarm as Route 53 reads it, given its region's faults.
pub fn impaired(
    model: &AlarmModel,
    region: &Region,
    normal: &Line<AlarmState>,
) -> Line<AlarmState> {
    let hold = model.period_ms * i64::from(model.evaluation_periods);
    let mut times: Vec<Millis> = normal.1.iter().map(|c| c.at).collect();
    for f in &region.faults {
        times.extend([f.from, f.from + hold, f.until]);
    }
    retime(times, |t| match region.fault_at(t) {
        None => at(normal, t),
        Some(f) if f.alarms == ImpairedAlarms::InsufficientData && t >= f.from + hold => {
            AlarmState::InsufficientData
        }
        Some(f) => at(normal, f.from - 1),
    })
}

/// A CALCULATED check: healthy when at least `threshold` children are.
pub fn calculated(children: &[&Line<Health>], threshold: u8) -> Line<Health> {
    let times = children
        .iter()
        .flat_map(|c| c.1.iter().map(|x| x.at))
        .collect();
    retime(times, |t| {
        let up = children
            .iter()
            .filter(|c| at(c, t) == Health::Healthy)
            .count();
        if up >= usize::from(threshold) {
            Health::Healthy
        } else {
            Health::Unhealthy
        }
    })
}

/// A branch's script as the prober of `region` sees it.
pub fn seen_from(script: &BranchScript, region: &str) -> BranchScript {
    let keep = |v: &[Segment]| -> Vec<Segment> {
        v.iter().filter(|s| s.seen_from(region)).cloned().collect()
    };
    BranchScript {
        noise: keep(&script.noise),
        faults: keep(&script.faults),
        ..script.clone()
    }
}

/// What the comparison takes from the simulation's setup.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub scenario: &'a Scenario,
    pub policy: &'a Policy,
    pub timing: &'a Timing,
    pub cadence: Cadence,
    /// The service's branches and their records.
    pub branches: &'a [(String, Record)],
}

fn dark(region: &Region, t: Millis) -> bool {
    region
        .fault_at(t)
        .is_some_and(|f| f.kind == RegionFaultKind::Dark)
}

/// The datums the prober of region `p` gets into its CloudWatch for branch `ix`.
fn datums(inp: &Inputs<'_>, p: usize, ix: usize, script: &BranchScript) -> Vec<Datum> {
    let regions = &inp.scenario.regions;
    let prober = &regions[p];
    let home = regions.iter().find(|r| r.branches.contains(&script.name));
    let seen = seen_from(script, &prober.name);
    let end = inp.scenario.duration_ms;
    let stream = ix as u64 + 64 * (p as u64 + 1);
    let fail = FailureClass::TcpTimeout;
    let tried: Vec<ScriptedAttempt> =
        attempts::attempts(&seen, inp.timing, end, inp.scenario.seed, stream)
            .into_iter()
            .filter(|a| !dark(prober, a.started_at))
            .map(|mut a| {
                if home.is_some_and(|h| dark(h, a.started_at)) {
                    a.record.success = false;
                    a.record.class = Some(fail);
                    a.record.finished_at = a.started_at + inp.timing.failure_ms(fail);
                }
                a
            })
            .collect();
    let operator = Operator {
        approve_at: script.approve_at.clone(),
        approve_after: script.approve_after,
    };
    publish::run_branch(inp.policy, &tried, inp.cadence, &operator, end)
        .datums
        .into_iter()
        .filter(|d| prober.fault_at(d.at).is_none())
        .collect()
}

/// Every branch's alarm in every region, as Route 53 reads it: `[region][branch]`.
fn alarms(inp: &Inputs<'_>) -> Vec<Vec<Line<AlarmState>>> {
    let s = inp.scenario;
    s.regions
        .iter()
        .enumerate()
        .map(|(p, region)| {
            inp.branches
                .iter()
                .enumerate()
                .map(|(ix, (name, _))| {
                    let script = s
                        .branches
                        .iter()
                        .find(|b| &b.name == name)
                        .cloned()
                        .unwrap_or_else(|| BranchScript::quiet(name));
                    let d = datums(inp, p, ix, &script);
                    let initial = inp.policy.initial.published_value();
                    let normal = alarm::alarm_states(&s.alarm, initial, &d, s.duration_ms);
                    impaired(&s.alarm, region, &normal)
                })
                .collect()
        })
        .collect()
}

/// Whether branch `name` can do its job at `t`.
fn able(s: &Scenario, name: &str, t: Millis) -> bool {
    let home_dark = s
        .regions
        .iter()
        .any(|r| r.branches.iter().any(|b| b == name) && dark(r, t));
    let every = |seg: &Segment| s.regions.iter().all(|r| seg.seen_from(&r.name));
    let broken = s.branches.iter().filter(|b| b.name == name).any(|b| {
        b.faults
            .iter()
            .any(|f| f.from <= t && t < f.until && f.fail_percent >= 50.0 && every(f))
    });
    !home_dark && !broken
}

/// The right answer over time.
fn truth(inp: &Inputs<'_>) -> Line<Option<Record>> {
    let s = inp.scenario;
    let mut times: Vec<Millis> = vec![0];
    for b in &s.branches {
        times.extend(b.faults.iter().flat_map(|f| [f.from, f.until]));
    }
    for r in &s.regions {
        times.extend(r.faults.iter().flat_map(|f| [f.from, f.until]));
    }
    let of = |rec: Record| inp.branches.iter().find(|b| b.1 == rec).map(|b| &b.0);
    retime(times, |t| {
        let t = t.max(0);
        match (of(Record::Primary), of(Record::Secondary)) {
            (Some(p), _) if able(s, p, t) => Some(Record::Primary),
            (_, Some(q)) if able(s, q, t) => Some(Record::Secondary),
            _ => None,
        }
    })
}

/// How `answer` did against `right` up to `end`.
pub fn score(
    right: &Line<Option<Record>>,
    answer: &Line<Answer>,
    end: Millis,
) -> (Vec<Converge>, u32, Millis) {
    let wrong_at = |t: Millis| at(right, t).is_some_and(|r| r != at(answer, t).record);
    let mut cuts: Vec<Millis> = std::iter::once(0)
        .chain(right.1.iter().map(|c| c.at))
        .chain(answer.1.iter().map(|c| c.at))
        .filter(|t| *t < end)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut wrong_ms = 0;
    for (i, t) in cuts.iter().enumerate() {
        let next = cuts.get(i + 1).copied().unwrap_or(end);
        if wrong_at(*t) {
            wrong_ms += next - t;
        }
    }
    let flips = answer.1.iter().filter(|c| c.at < end && wrong_at(c.at));
    let flips = flips
        .filter(|c| !right.1.iter().any(|r| r.at == c.at))
        .count();
    let mut wrong = u32::try_from(flips).unwrap_or(u32::MAX);
    let mut converge = Vec::new();
    let starts: Vec<(Millis, Option<Record>)> = std::iter::once((0, right.0))
        .chain(right.1.iter().map(|c| (c.at, c.to)))
        .collect();
    for (i, (from, want)) in starts.iter().enumerate() {
        let until = starts.get(i + 1).map_or(end, |n| n.0);
        let given = std::iter::once(*from)
            .chain(
                answer
                    .1
                    .iter()
                    .map(|c| c.at)
                    .filter(|t| from < t && *t < until),
            )
            .find(|t| want.is_none_or(|w| at(answer, *t).record == w));
        if given.is_none() {
            wrong += 1;
        }
        if *from > 0 {
            converge.push(Converge {
                at: *from,
                right: *want,
                after_ms: given.map(|g| g - from),
            });
        }
    }
    (converge, wrong, wrong_ms)
}

/// Every layout under every insufficient-data status; empty without `[[region]]`.
pub fn compare(inp: &Inputs<'_>) -> Vec<Row> {
    let s = inp.scenario;
    if s.regions.len() != 2 {
        return Vec::new();
    }
    let alarms = alarms(inp);
    let right = truth(inp);
    let home = |name: &str| usize::from(s.regions[0].branches.iter().all(|b| b != name));
    let mut rows = Vec::new();
    for layout in LAYOUTS {
        for status in STATUSES {
            let model = HealthModel {
                insufficient_data_health_status: status,
                delay_ms: s.health_check.delay_ms,
            };
            let check = |r: usize, b: usize| -> Line<Health> {
                let a = &alarms[r][b];
                route53::health_states(&model, a.0, &a.1)
            };
            let health: Vec<Line<Health>> = inp
                .branches
                .iter()
                .enumerate()
                .map(|(b, (name, _))| {
                    let own = home(name);
                    match layout {
                        Layout::OwnRegion => check(own, b),
                        Layout::OtherRegion => check(1 - own, b),
                        Layout::Calculated(k) => {
                            calculated(&[&check(own, b), &check(1 - own, b)], k)
                        }
                    }
                })
                .collect();
            let of = |rec: Record| {
                inp.branches
                    .iter()
                    .position(|b| b.1 == rec)
                    .map(|i| (health[i].0, health[i].1.as_slice()))
            };
            let primary = of(Record::Primary).unwrap_or((Health::Unhealthy, &[]));
            let answer = route53::answers(primary, of(Record::Secondary), s.dns.answer_delay_ms);
            let (converge, wrong_answers, wrong_ms) = score(&right, &answer, s.duration_ms);
            rows.push(Row {
                layout,
                insufficient_data: status,
                converge,
                wrong_answers,
                wrong_ms,
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::scenario::{Comparison, RegionFault, Statistic, TreatMissing};

    fn ch<S>(at: Millis, to: S) -> Change<S> {
        Change { at, to }
    }

    fn model(evaluation_periods: u32) -> AlarmModel {
        AlarmModel {
            period_ms: 60_000,
            statistic: Statistic::Minimum,
            evaluation_periods,
            datapoints_to_alarm: evaluation_periods,
            threshold: 1.0,
            comparison: Comparison::LessThanThreshold,
            treat_missing_data: TreatMissing::Missing,
            evaluation_delay_ms: 0,
        }
    }

    fn region(kind: RegionFaultKind, alarms: ImpairedAlarms) -> Region {
        Region {
            name: "a".into(),
            branches: vec!["primary".into()],
            faults: vec![RegionFault {
                from: 600_000,
                until: 2_400_000,
                kind,
                alarms,
            }],
        }
    }

    /// The alarm went to ALARM at 5m (and would go back to OK at 30m): an impaired CloudWatch
    /// keeps ALARM from 10m, then INSUFFICIENT_DATA once its periods have passed, or ALARM
    /// throughout when stale; from 40m it follows its own evaluation again.
    #[test]
    fn an_impaired_region_freezes_its_alarms_then_has_insufficient_data() {
        let normal = (
            AlarmState::Ok,
            vec![
                ch(300_000, AlarmState::Alarm),
                ch(1_800_000, AlarmState::Ok),
                ch(2_460_000, AlarmState::InsufficientData),
            ],
        );
        let r = region(
            RegionFaultKind::Cloudwatch,
            ImpairedAlarms::InsufficientData,
        );
        let (start, changes) = impaired(&model(2), &r, &normal);
        assert_eq!(start, AlarmState::Ok);
        assert_eq!(
            changes,
            [
                ch(300_000, AlarmState::Alarm),
                ch(720_000, AlarmState::InsufficientData),
                ch(2_400_000, AlarmState::Ok),
                ch(2_460_000, AlarmState::InsufficientData),
            ]
        );
        let r = region(RegionFaultKind::Dark, ImpairedAlarms::Stale);
        let (_, changes) = impaired(&model(1), &r, &normal);
        assert_eq!(
            changes,
            [
                ch(300_000, AlarmState::Alarm),
                ch(2_400_000, AlarmState::Ok),
                ch(2_460_000, AlarmState::InsufficientData),
            ]
        );
    }

    #[test]
    fn a_calculated_check_counts_its_healthy_children() {
        let a = (Health::Healthy, vec![ch(100, Health::Unhealthy)]);
        let b = (
            Health::Healthy,
            vec![ch(200, Health::Unhealthy), ch(300, Health::Healthy)],
        );
        assert_eq!(
            calculated(&[&a, &b], 1),
            (
                Health::Healthy,
                vec![ch(200, Health::Unhealthy), ch(300, Health::Healthy)]
            )
        );
        assert_eq!(
            calculated(&[&a, &b], 2),
            (Health::Healthy, vec![ch(100, Health::Unhealthy)])
        );
    }

    fn answer(record: Record) -> Answer {
        Answer {
            record,
            fail_open: false,
        }
    }

    /// Lag after the right answer changes is wrong time but no wrong answer; an answer that
    /// leaves a branch that can do its job, or one that never comes, is a wrong answer.
    #[test]
    fn the_score_separates_lag_from_wrong_answers() {
        let right = (
            Some(Record::Primary),
            vec![
                ch(1_000, Some(Record::Secondary)),
                ch(5_000, Some(Record::Primary)),
            ],
        );
        let good = (
            answer(Record::Primary),
            vec![
                ch(1_300, answer(Record::Secondary)),
                ch(6_000, answer(Record::Primary)),
            ],
        );
        let (converge, wrong, wrong_ms) = score(&right, &good, 10_000);
        assert_eq!((wrong, wrong_ms), (0, 300 + 1_000));
        assert_eq!(
            converge,
            [
                Converge {
                    at: 1_000,
                    right: Some(Record::Secondary),
                    after_ms: Some(300)
                },
                Converge {
                    at: 5_000,
                    right: Some(Record::Primary),
                    after_ms: Some(1_000)
                },
            ]
        );
        let stuck = (answer(Record::Primary), vec![]);
        let (converge, wrong, wrong_ms) = score(&right, &stuck, 10_000);
        assert_eq!((wrong, wrong_ms), (1, 4_000));
        assert_eq!(converge[0].after_ms, None);
        let fine = (Some(Record::Primary), vec![]);
        let flip = (
            answer(Record::Primary),
            vec![
                ch(2_000, answer(Record::Secondary)),
                ch(3_000, answer(Record::Primary)),
            ],
        );
        assert_eq!(score(&fine, &flip, 10_000), (vec![], 1, 1_000));
    }
}
