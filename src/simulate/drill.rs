//! A simulation as a drill report ([`crate::report::model`]): the same lanes and phase tables a
//! recorded drill gets, so a prediction can be put next to a measurement. Scripted faults become
//! `fault` / `restore` markers; Route 53's answer becomes the stable-name lane (one round at the
//! start and at every change, with the record TTL); each branch's simulated alarm is its alarm
//! lane. Times stay ms from the scenario's start.

use super::attempts::ScriptedAttempt;
use super::phases::{FaultReport, Phase as SimPhase};
use super::route53::Answer;
use super::{BranchReport, Report};
use crate::clock::fmt_duration_ms;
use crate::readiness::Millis;
use crate::report::model::{
    AlarmLane, AttemptMark, Band, BranchLane, Drill, Episode, EpisodeKind, Event, Marker, Phase,
    Round, ServiceDrill, Source, Span, StableLane,
};

/// Report `r` as a drill; `scenario` names the scenario file.
pub fn drill(r: &Report, scenario: &str) -> Drill {
    let window = Span {
        from: 0,
        until: r.duration_ms,
    };
    let branches = r
        .branches
        .iter()
        .map(|b| lane(b, &b.tried, window))
        .collect();
    let alarms = r
        .branches
        .iter()
        .map(|b| AlarmLane {
            name: format!("{} {} (simulated)", r.service, b.name),
            branch: b.name.clone(),
            target: None,
            states: bands(
                b.alarm.start,
                b.alarm.changes.iter().map(|c| (c.at, c.to)),
                window,
                |s| s.to_string(),
            ),
        })
        .collect();
    let mut markers: Vec<Marker> = r.branches.iter().flat_map(fault_markers).collect();
    markers.sort_by_key(|m| m.at);
    let episodes = r
        .branches
        .iter()
        .flat_map(|b| b.faults.iter().flat_map(move |f| episodes(b, f)))
        .collect();
    Drill {
        source: Source::Simulation {
            scenario: scenario.to_string(),
            assumptions: r.assumptions.clone(),
        },
        window,
        probers: vec!["simulate".into()],
        services: vec![ServiceDrill {
            name: r.service.clone(),
            config: config(r),
            branches,
            stable_name: Some(stable_lane(r)),
            alarms,
            markers,
            episodes,
        }],
        problems: Vec::new(),
    }
}

fn config(r: &Report) -> Vec<(String, String)> {
    vec![
        ("duration".into(), fmt_duration_ms(r.duration_ms)),
        ("seed".into(), r.seed.to_string()),
        (
            "alarm".into(),
            format!(
                "{} over {}, {} of {} {} {}, missing data {}",
                r.alarm.statistic,
                fmt_duration_ms(r.alarm.period_ms),
                r.alarm.datapoints_to_alarm,
                r.alarm.evaluation_periods,
                r.alarm.comparison,
                r.alarm.threshold,
                r.alarm.treat_missing_data
            ),
        ),
        (
            "health check".into(),
            format!(
                "InsufficientDataHealthStatus {}",
                r.health_check.insufficient_data_health_status
            ),
        ),
        ("record TTL".into(), fmt_duration_ms(r.dns.ttl_ms)),
        ("flaps".into(), flaps(r)),
        ("fail-open".into(), fail_open(r)),
    ]
}

/// Flaps per branch: ready → unready transitions no scripted fault explains.
fn flaps(r: &Report) -> String {
    let per: Vec<String> = r
        .branches
        .iter()
        .map(|b| {
            let at: Vec<String> = b.flaps.iter().map(|t| fmt_duration_ms(*t)).collect();
            match at.as_slice() {
                [] => format!("{}: none", b.name),
                _ => format!("{}: {} (at {})", b.name, at.len(), at.join(", ")),
            }
        })
        .collect();
    per.join("; ")
}

/// When no record was healthy and Route 53 answered with the PRIMARY anyway.
fn fail_open(r: &Report) -> String {
    if r.fail_open.is_empty() {
        return "never".into();
    }
    let p: Vec<String> = r
        .fail_open
        .iter()
        .map(|p| match p.until {
            Some(u) => format!("{}–{}", fmt_duration_ms(p.from), fmt_duration_ms(u)),
            None => format!("from {} to the end", fmt_duration_ms(p.from)),
        })
        .collect();
    p.join(", ")
}

fn lane(b: &BranchReport, tried: &[ScriptedAttempt], window: Span) -> BranchLane {
    let attempts = tried
        .iter()
        .filter(|a| a.record.finished_at <= window.until)
        .map(|a| AttemptMark {
            at: a.record.finished_at,
            class: (!a.record.success).then(|| {
                a.record
                    .class
                    .map_or("failure".into(), |c| c.as_str().into())
            }),
        })
        .collect();
    let changes = b.transitions.iter().map(|s| (s.at, s.to));
    let states = bands(b.initial, changes, window, |s| s);
    let published = states
        .iter()
        .map(|s| Band {
            span: s.span,
            state: s.state.published_value(),
        })
        .collect();
    let events = b
        .approvals
        .iter()
        .map(|a| Event {
            at: a.decided_at,
            label: if a.applied {
                "approval applied".into()
            } else {
                format!("approval rejected: {}", a.detail)
            },
        })
        .collect();
    BranchLane {
        name: b.name.clone(),
        role: Some(b.record.to_string()),
        attempts,
        states,
        published,
        overrides: Vec::new(),
        events,
    }
}

/// Bands over `window` from the state at its start and the changes after it.
fn bands<S: Copy, T>(
    start: S,
    changes: impl IntoIterator<Item = (Millis, S)>,
    window: Span,
    label: impl Fn(S) -> T,
) -> Vec<Band<T>> {
    let mut out: Vec<Band<T>> = Vec::new();
    let (mut from, mut state) = (window.from, start);
    for (at, to) in changes {
        if at > from {
            out.push(Band {
                span: Span { from, until: at },
                state: label(state),
            });
        }
        (from, state) = (at.max(from), to);
    }
    if window.until > from {
        out.push(Band {
            span: Span {
                from,
                until: window.until,
            },
            state: label(state),
        });
    }
    out
}

fn stable_lane(r: &Report) -> StableLane {
    let ttl = u32::try_from(r.dns.ttl_ms / 1000).ok();
    let branch_of = |a: Answer| {
        r.branches
            .iter()
            .find(|b| b.record == a.record)
            .map(|b| b.name.clone())
    };
    let round = |at: Millis, a: Answer| Round {
        at,
        selected: branch_of(a),
        unknown_target: false,
        ttl,
        end_to_end: None,
    };
    let mut rounds = vec![round(0, r.answer.start)];
    rounds.extend(r.answer.changes.iter().map(|c| round(c.at, c.to)));
    StableLane {
        name: "Route 53 answer".into(),
        rounds,
    }
}

fn fault_markers(b: &BranchReport) -> Vec<Marker> {
    b.faults
        .iter()
        .flat_map(|f| {
            let what = format!(
                "{}: {} % {}",
                b.name,
                f.fail_percent,
                f.class.as_str().to_owned()
            );
            [
                Marker {
                    at: f.from,
                    kind: "fault".into(),
                    label: format!("scripted fault {what}"),
                    by: "scenario".into(),
                },
                Marker {
                    at: f.until,
                    kind: "restore".into(),
                    label: format!("scripted fault ends ({})", b.name),
                    by: "scenario".into(),
                },
            ]
        })
        .collect()
}

fn phases(list: &[SimPhase]) -> Vec<Phase> {
    list.iter()
        .map(|p| Phase {
            name: p.name.clone(),
            at: p.at,
            since_start_ms: p.since_fault_ms,
            took_ms: p.took_ms,
            note: p.note.clone(),
        })
        .collect()
}

fn episodes(b: &BranchReport, f: &FaultReport) -> [Episode; 2] {
    let approved_by = f.pending_approval_ms.map(|_| "scenario".to_string());
    [
        Episode {
            kind: EpisodeKind::Failover,
            branch: b.name.clone(),
            trigger: format!(
                "scripted fault from {} ({} % {})",
                fmt_duration_ms(f.from),
                f.fail_percent,
                f.class.as_str()
            ),
            phases: phases(&f.failover),
            pending_approval_ms: None,
            approved_by: None,
        },
        Episode {
            kind: EpisodeKind::Failback,
            branch: b.name.clone(),
            trigger: format!("scripted fault ends at {}", fmt_duration_ms(f.until)),
            phases: phases(&f.failback),
            pending_approval_ms: f.pending_approval_ms,
            approved_by,
        },
    ]
}
