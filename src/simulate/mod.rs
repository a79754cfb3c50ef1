//! `simulate`: an offline model of the whole control loop, run through the real readiness core,
//! so a team can predict a failover timeline before they drill.
//!
//! Hops, one file each: scripted attempt outcomes ([`attempts`]) → the readiness core and the
//! approval rule, and the `Readiness` datums they publish ([`publish`]) → the CloudWatch alarm
//! ([`alarm`]) → the Route 53 health check and failover answer ([`route53`]) → the resolvers'
//! caches (the record TTL). [`phases`] measures each fault's failover and failback per phase;
//! [`render`] prints the report. Every hop after the prober is a model whose assumption the
//! report states; the scenario file sets each one ([`scenario`]).
//!
//! Pure: no I/O, no clock. Time is ms from the scenario's start, which lies on an alarm period
//! boundary. The same scenario gives the same report.

pub mod alarm;
pub mod attempts;
pub mod drill;
pub mod phases;
pub mod publish;
pub mod regions;
pub mod render;
pub mod route53;
pub mod scenario;

use crate::config::{Role, ServiceConfig};
use crate::readiness::{Millis, Policy, ReadinessState};
use alarm::{AlarmState, Change};
use attempts::{ScriptedAttempt, Timing};
use publish::{ApprovalOutcome, Cadence, Datum, Operator};
use route53::{Answer, Health, Record};
use scenario::{AlarmModel, BranchScript, DnsModel, HealthModel, Scenario, Segment};
use serde::Serialize;

/// What the simulation takes from the config: one service and the prober's timing.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Service name.
    pub service: String,
    /// Its readiness policy.
    pub policy: Policy,
    /// Its probe timing (`latency_ms` is overwritten from the scenario).
    pub timing: Timing,
    /// `publish.interval` and `state.poll_interval`.
    pub cadence: Cadence,
    /// Its branches and their failover records.
    pub branches: Vec<(String, Record)>,
}

impl Setup {
    /// The setup of service `svc` under the prober settings `publish_ms` and `sync_ms`.
    pub fn from_config(svc: &ServiceConfig, publish_ms: Millis, sync_ms: Millis) -> Setup {
        Setup {
            service: svc.service.name.clone(),
            policy: svc.policy.clone(),
            timing: Timing {
                interval: svc.probe.interval,
                suspect_interval: svc.probe.suspect_interval,
                timeout: svc.probe.timeout,
                steps: svc.probe.step_timeouts,
                latency_ms: 0,
            },
            cadence: Cadence {
                publish_ms,
                sync_ms,
            },
            branches: svc
                .branches
                .iter()
                .map(|b| {
                    let r = match b.role {
                        Role::Primary => Record::Primary,
                        Role::Secondary => Record::Secondary,
                    };
                    (b.name.clone(), r)
                })
                .collect(),
        }
    }
}

/// A hop's state at the start and its changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline<S> {
    pub start: S,
    pub changes: Vec<Change<S>>,
}

impl<S: Copy> Timeline<S> {
    /// The state in force at `t` (after every change at or before it).
    pub fn at(&self, t: Millis) -> S {
        self.changes
            .iter()
            .take_while(|c| c.at <= t)
            .last()
            .map_or(self.start, |c| c.to)
    }
}

/// A readiness transition, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub at: Millis,
    pub from: ReadinessState,
    pub to: ReadinessState,
    pub reason: String,
}

/// One branch over the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct BranchReport {
    pub name: String,
    pub record: Record,
    pub attempts: u64,
    pub failed_attempts: u64,
    pub initial: ReadinessState,
    pub transitions: Vec<Step>,
    pub datums: Vec<Datum>,
    pub alarm: Timeline<AlarmState>,
    pub health: Timeline<Health>,
    pub approvals: Vec<ApprovalOutcome>,
    /// ready → unready transitions outside any fault, ms.
    pub flaps: Vec<Millis>,
    pub faults: Vec<phases::FaultReport>,
    /// Its attempts, for the report's timeline (not in the JSON report).
    #[serde(skip)]
    pub tried: Vec<ScriptedAttempt>,
}

/// A stretch of time, ms; `until` is `None` when it lasts to the end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Period {
    pub from: Millis,
    pub until: Option<Millis>,
}

/// The whole simulation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub service: String,
    pub duration_ms: Millis,
    pub seed: u64,
    /// Each hop's model, in a sentence with its values.
    pub assumptions: Vec<String>,
    pub alarm: AlarmModel,
    pub health_check: HealthModel,
    pub dns: DnsModel,
    pub branches: Vec<BranchReport>,
    pub answer: Timeline<Answer>,
    /// When no record was healthy and Route 53 answered with the PRIMARY anyway.
    pub fail_open: Vec<Period>,
    /// With `[[region]]`: every layout of alarms and health checks, scored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<regions::Row>,
}

/// Run `scenario` against `setup`.
pub fn simulate(setup: &Setup, scenario: &Scenario) -> Report {
    let end = scenario.duration_ms;
    let timing = Timing {
        latency_ms: scenario.latency_ms,
        ..setup.timing.clone()
    };
    let mut policy = setup.policy.clone();
    if let Some(i) = scenario.initial {
        policy.initial = i;
    }
    let mut runs: Vec<(BranchReport, Vec<ScriptedAttempt>, BranchScript)> = Vec::new();
    for (ix, (name, record)) in setup.branches.iter().enumerate() {
        let script = scenario
            .branches
            .iter()
            .find(|b| &b.name == name)
            .cloned()
            .unwrap_or_else(|| BranchScript::quiet(name));
        // With regions, the report follows the prober in the branch's own region.
        let script = match scenario.regions.iter().find(|r| r.branches.contains(name)) {
            Some(home) => regions::seen_from(&script, &home.name),
            None => script,
        };
        let tried = attempts::attempts(&script, &timing, end, scenario.seed, ix as u64);
        let report = branch(
            scenario,
            &policy,
            &timing,
            setup.cadence,
            (name, *record),
            &script,
            &tried,
        );
        runs.push((report, tried, script));
    }
    let health_of = |r: Record| {
        runs.iter()
            .find(|(b, _, _)| b.record == r)
            .map(|(b, _, _)| (b.health.start, b.health.changes.as_slice()))
    };
    // No PRIMARY branch in the config: its record counts as unhealthy.
    let primary = health_of(Record::Primary).unwrap_or((Health::Unhealthy, &[]));
    let (a0, changes) = route53::answers(
        primary,
        health_of(Record::Secondary),
        scenario.dns.answer_delay_ms,
    );
    let answer = Timeline { start: a0, changes };
    let ctx = phases::Context {
        scenario,
        answer: &answer,
    };
    let branches: Vec<BranchReport> = runs
        .into_iter()
        .map(|(mut b, tried, script)| {
            b.faults = phases::faults(&ctx, &b, &script.faults, &tried);
            b.tried = tried;
            b
        })
        .collect();
    let layouts = regions::compare(&regions::Inputs {
        scenario,
        policy: &policy,
        timing: &timing,
        cadence: setup.cadence,
        branches: &setup.branches,
    });
    Report {
        service: setup.service.clone(),
        layouts,
        duration_ms: end,
        seed: scenario.seed,
        assumptions: assumptions(setup, scenario, &policy),
        alarm: scenario.alarm.clone(),
        health_check: scenario.health_check.clone(),
        dns: scenario.dns.clone(),
        fail_open: fail_open(&answer),
        branches,
        answer,
    }
}

/// One branch through the prober, its alarm and its health check (its faults are measured once
/// the answer is known).
fn branch(
    scenario: &Scenario,
    policy: &Policy,
    timing: &Timing,
    cadence: Cadence,
    (name, record): (&str, Record),
    script: &BranchScript,
    tried: &[ScriptedAttempt],
) -> BranchReport {
    let end = scenario.duration_ms;
    let operator = Operator {
        approve_at: script.approve_at.clone(),
        approve_after: script.approve_after,
    };
    let run = publish::run_branch(policy, tried, cadence, &operator, end);
    let (a0, ach) = alarm::alarm_states(
        &scenario.alarm,
        policy.initial.published_value(),
        &run.datums,
        end,
    );
    let (h0, hch) = route53::health_states(&scenario.health_check, a0, &ach);
    let finished: Vec<_> = tried
        .iter()
        .filter(|a| a.record.finished_at <= end)
        .collect();
    let steps: Vec<Step> = run
        .transitions
        .iter()
        .map(|t| Step {
            at: t.at,
            from: t.from,
            to: t.to,
            reason: t.reason.clone(),
        })
        .collect();
    BranchReport {
        name: name.to_string(),
        record,
        attempts: finished.len() as u64,
        failed_attempts: finished.iter().filter(|a| !a.record.success).count() as u64,
        initial: policy.initial,
        flaps: flaps(&steps, &script.faults, policy, timing),
        transitions: steps,
        datums: run.datums,
        alarm: Timeline {
            start: a0,
            changes: ach,
        },
        health: Timeline {
            start: h0,
            changes: hch,
        },
        approvals: run.approvals,
        faults: Vec::new(),
        tried: Vec::new(),
    }
}

/// ready (or pending_approval) → unready transitions that no fault explains: a fault explains
/// one from its start until its last failure has left the unready window (its end plus the
/// window plus the attempt timeout).
fn flaps(steps: &[Step], faults: &[Segment], policy: &Policy, timing: &Timing) -> Vec<Millis> {
    let tail = ms(policy.declare_unready.window) + ms(timing.timeout);
    steps
        .iter()
        .filter(|s| {
            s.to == ReadinessState::Unready
                && matches!(
                    s.from,
                    ReadinessState::Ready | ReadinessState::PendingApproval
                )
        })
        .map(|s| s.at)
        .filter(|t| !faults.iter().any(|f| f.from <= *t && *t < f.until + tail))
        .collect()
}

/// The periods of the fail-open answer.
fn fail_open(answer: &Timeline<Answer>) -> Vec<Period> {
    let mut out: Vec<Period> = Vec::new();
    let mut open = answer.start.fail_open.then_some(0);
    for c in &answer.changes {
        match (open, c.to.fail_open) {
            (None, true) => open = Some(c.at),
            (Some(from), false) => {
                out.push(Period {
                    from,
                    until: Some(c.at),
                });
                open = None;
            }
            _ => {}
        }
    }
    if let Some(from) = open {
        out.push(Period { from, until: None });
    }
    out
}

fn ms(d: std::time::Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Each hop's model in a sentence, with the values in force.
fn assumptions(setup: &Setup, s: &Scenario, policy: &Policy) -> Vec<String> {
    let d = crate::clock::fmt_duration_ms;
    let a = &s.alarm;
    let t = &setup.timing;
    let fast = t.suspect_interval.map(|fast| {
        format!(
            "; probe.suspect_interval ({}) is not modelled: a suspect branch is probed faster in a real run",
            crate::clock::fmt_duration(fast)
        )
    });
    let fast = fast.unwrap_or_default();
    let mut out = vec![
        format!(
            "attempts: one every {} from 0 (no jitter); a success or a non-timeout failure takes {}; dns_timeout, tcp_timeout and deadline_exceeded end at their step timeout ({}, {}) or the attempt timeout ({}); random failures from seed {}{fast}",
            crate::clock::fmt_duration(t.interval),
            d(s.latency_ms),
            crate::clock::fmt_duration(t.steps.resolve),
            crate::clock::fmt_duration(t.steps.connect),
            crate::clock::fmt_duration(t.timeout),
            s.seed
        ),
        format!(
            "prober: the real readiness core under the config's policy, every branch starting {}; a datum at every transition and every publish tick ({}); an approval is decided at the next store sync (every {}) and is valid 30m",
            policy.initial,
            d(setup.cadence.publish_ms),
            d(setup.cadence.sync_ms)
        ),
        format!(
            "alarm: {} of Readiness over {} periods aligned on the start, ALARM when {} of {} datapoints are {} {}; missing data {}; evaluated {} after each period ends",
            a.statistic,
            d(a.period_ms),
            a.datapoints_to_alarm,
            a.evaluation_periods,
            a.comparison,
            a.threshold,
            a.treat_missing_data,
            d(a.evaluation_delay_ms)
        ),
        format!(
            "health check: follows its alarm {} after it changes (OK healthy, ALARM unhealthy, INSUFFICIENT_DATA {})",
            d(s.health_check.delay_ms),
            s.health_check.insufficient_data_health_status
        ),
        format!(
            "DNS: PRIMARY when healthy, else SECONDARY when healthy, else PRIMARY (fail-open), {} after a health change; resolvers may hand out the old answer for the TTL, {}",
            d(s.dns.answer_delay_ms),
            d(s.dns.ttl_ms)
        ),
    ];
    if !s.regions.is_empty() {
        out.push(
            "regions (the layouts table only): a prober per region probes every branch and publishes to its own region's CloudWatch; a dark region fails its branches for every prober and stops its prober (whose state carries over) and its CloudWatch; an impaired CloudWatch takes no datum; Route 53 reads an unavailable region's alarms as their fault's `alarms` says; a CALCULATED check follows its children at once".to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StepTimeouts;
    use crate::readiness::{Condition, FlapDamping};
    use scenario::InsufficientDataHealthStatus;
    use std::path::Path;
    use std::time::Duration;

    fn setup(unready_for: Duration) -> Setup {
        let s = Duration::from_secs(1);
        Setup {
            service: "orders-db".into(),
            policy: Policy {
                min_attempts: 10,
                declare_unready: Condition {
                    threshold_percent: 95.0,
                    for_: unready_for,
                    window: Duration::from_secs(60),
                },
                declare_ready: Condition {
                    threshold_percent: 99.0,
                    for_: Duration::from_secs(600),
                    window: Duration::from_secs(300),
                },
                approval_required: false,
                initial: ReadinessState::Unknown,
                definitive: None,
                damping: None,
            },
            timing: Timing {
                interval: Duration::from_secs(2),
                suspect_interval: None,
                timeout: Duration::from_millis(1500),
                steps: StepTimeouts {
                    resolve: s,
                    connect: s,
                    tls: s,
                    auth: s,
                    write: s,
                    verify: s,
                },
                latency_ms: 0,
            },
            cadence: Cadence {
                publish_ms: 60_000,
                sync_ms: 10_000,
            },
            branches: vec![
                ("primary".into(), Record::Primary),
                ("secondary".into(), Record::Secondary),
            ],
        }
    }

    fn run(setup: &Setup, text: &str) -> Report {
        let names: Vec<String> = setup.branches.iter().map(|b| b.0.clone()).collect();
        let limits = scenario::Limits {
            branches: &names,
            interval: setup.timing.interval,
            insufficient_data: None,
        };
        let sc = scenario::parse(Path::new("t.toml"), text, &limits).expect("valid scenario");
        simulate(setup, &sc)
    }

    const NOISE: &str = r#"duration = "2h"
seed = 3
initial = "ready"
[[branch]]
name = "primary"
[[branch.noise]]
fail_percent = 2.0
"#;

    /// Adaptive probing is not simulated, and the assumptions say so when it is on.
    #[test]
    fn the_assumptions_name_an_unmodelled_suspect_interval() {
        let mut on = setup(Duration::from_secs(180));
        let off = run(&on, NOISE);
        assert!(
            !off.assumptions[0].contains("suspect"),
            "{}",
            off.assumptions[0]
        );
        on.timing.suspect_interval = Some(Duration::from_millis(500));
        let r = run(&on, NOISE);
        let want = "probe.suspect_interval (500ms) is not modelled";
        assert!(r.assumptions[0].contains(want), "{}", r.assumptions[0]);
    }

    /// A dark primary region: the own-region alarm under LastKnownStatus never fails over (Route
    /// 53 keeps the last verdict); the calculated check of both regions at threshold 2 with
    /// Healthy children fails over on the other region's prober, 3 m of `for` after its window
    /// fell below 95 % and 30 s behind its alarm.
    #[test]
    fn a_dark_region_is_failed_over_by_the_calculated_check_alone() {
        let text = include_str!("../../probes/scenario-region-dark.toml");
        let r = run(&setup(Duration::from_secs(180)), text);
        assert_eq!(r.layouts.len(), 12);
        let row = |layout, status: &str| {
            let status: InsufficientDataHealthStatus = status.parse().expect("a status");
            r.layouts
                .iter()
                .find(|x| x.layout == layout && x.insufficient_data == status)
                .expect("a row")
        };
        let own = row(regions::Layout::OwnRegion, "LastKnownStatus");
        assert_eq!(own.wrong_answers, 1);
        assert_eq!(own.converge[0].after_ms, None);
        let calc = row(regions::Layout::Calculated(2), "Healthy");
        assert_eq!(calc.wrong_answers, 0);
        assert_eq!(calc.converge[0].at, 600_000);
        assert_eq!(calc.converge[0].right, Some(Record::Secondary));
        assert_eq!(calc.converge[0].after_ms, Some(270_000));
        // Without regions there is no comparison.
        assert!(
            run(&setup(Duration::from_secs(180)), NOISE)
                .layouts
                .is_empty()
        );
    }

    #[test]
    fn noise_flaps_only_without_a_for_clock() {
        // 2 % at 2 s: two failures in a 60 s window (93.3 % < 95 %) happen by chance now and
        // then, but not at every evaluation for 3 minutes.
        let held = run(&setup(Duration::from_secs(180)), NOISE);
        assert_eq!(held.branches[0].flaps, Vec::<Millis>::new());
        assert_eq!(held.answer.changes, []);
        let hair_trigger = run(&setup(Duration::ZERO), NOISE);
        assert!(!hair_trigger.branches[0].flaps.is_empty());
        assert!(!hair_trigger.answer.changes.is_empty());
    }

    /// A primary that fails 2 minutes in every 8: the simulation runs the real core, so flap
    /// damping doubles its ready `for` from the 4th flap and says so in the transition reasons.
    #[test]
    fn a_flapping_primary_is_damped() {
        let mut text = String::from(
            "duration = \"70m\"\ninitial = \"ready\"\n[[branch]]\nname = \"primary\"\n",
        );
        for k in 0..6 {
            let from = 5 + 8 * k;
            text.push_str(&format!(
                "[[branch.fault]]\nfrom = \"{from}m\"\nuntil = \"{}m\"\n",
                from + 2
            ));
        }
        let required = |damping: Option<FlapDamping>| {
            let mut s = setup(Duration::from_secs(30));
            s.policy.declare_ready.for_ = Duration::from_secs(60);
            s.policy.declare_ready.window = Duration::from_secs(60);
            s.policy.damping = damping;
            let r = run(&s, &text);
            let steps = &r.branches[0].transitions;
            let downs = steps.iter().filter(|t| t.to == ReadinessState::Unready);
            assert_eq!(downs.count(), 6, "{steps:#?}");
            steps
                .iter()
                .filter(|t| t.to == ReadinessState::Ready)
                .map(|t| {
                    let damped = t.reason.contains("; flap damping: ");
                    let (_, rest) = t.reason.split_once("(required ").expect("required");
                    let (d, _) = rest.split_once(',').expect("required ..,");
                    (d.to_string(), damped)
                })
                .collect::<Vec<_>>()
        };
        let want = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
            v.iter().map(|(d, b)| (d.to_string(), *b)).collect()
        };
        assert_eq!(
            required(Some(FlapDamping::default())),
            want(&[
                ("1m", false),
                ("1m", false),
                ("1m", false),
                ("2m", true),
                ("4m", true),
                ("8m", true)
            ])
        );
        assert_eq!(required(None), want(&[("1m", false); 6]));
    }

    /// A scenario of many faults draws the first 100 fault sections and 500 timeline rows and
    /// counts the rest in one line each, as `drill report` does: 9,900 faults printed 16.6 MB.
    #[test]
    fn a_long_report_is_capped() {
        let mut text = String::from(
            "duration = \"11h\"\ninitial = \"ready\"\n[[branch]]\nname = \"primary\"\n",
        );
        for k in 0..130 {
            let from = 1 + 5 * k;
            text.push_str(&format!(
                "[[branch.fault]]\nfrom = \"{from}m\"\nuntil = \"{}m\"\n",
                from + 2
            ));
        }
        let mut s = setup(Duration::from_secs(30));
        s.policy.declare_ready.for_ = Duration::from_secs(60);
        s.policy.declare_ready.window = Duration::from_secs(60);
        let r = run(&s, &text);
        let changes = r.branches[0].transitions.len()
            + r.branches[0].alarm.changes.len()
            + r.branches[0].health.changes.len()
            + r.answer.changes.len();
        assert!(changes > 600, "{changes} changes: too few to test the cap");
        let md = render::report(&r, render::Style::Markdown);
        let sections = md.lines().filter(|l| l.starts_with("### primary")).count();
        assert_eq!(sections, 100);
        assert!(
            md.contains("\n… 30 more faults not drawn; every one is in the JSON report"),
            "{md}"
        );
        let timeline = md.split("## timeline").nth(1).expect("a timeline");
        let rows = timeline.lines().filter(|l| l.starts_with("| ")).count();
        assert_eq!(rows, 2 + 500, "the header, its rule and 500 rows");
        let more = format!("… {} more changes not listed", changes - 500);
        assert!(timeline.contains(&more), "{more}: {timeline}");
        let text = render::report(&r, render::Style::Text);
        assert!(text.len() < md.len() * 2, "{} bytes", text.len());
        assert!(text.contains("… 30 more faults not drawn"));
    }

    #[test]
    fn a_fault_on_the_secondary_changes_no_answer_and_both_faults_fail_open() {
        let text = r#"duration = "40m"
initial = "ready"
[[branch]]
name = "secondary"
[[branch.fault]]
from = "5m"
until = "30m"
[[branch]]
name = "primary"
[[branch.fault]]
from = "15m"
until = "30m"
"#;
        let r = run(&setup(Duration::from_secs(180)), text);
        let secondary = &r.branches[1].faults[0];
        let dns = secondary
            .failover
            .iter()
            .find(|p| p.name == "DNS selection");
        assert_eq!(
            dns.and_then(|p| p.note.as_deref()),
            Some("the answer was PRIMARY already: no DNS change")
        );
        // Primary unready at 15m + 2s + 3m, ALARM at the end of that minute, unhealthy 30 s later.
        let primary = &r.branches[0].faults[0];
        let dns = primary.failover.iter().find(|p| p.name == "DNS selection");
        assert_eq!(dns.and_then(|p| p.at), Some(19 * 60_000 + 30_000));
        assert_eq!(
            r.fail_open,
            [Period {
                from: 19 * 60_000 + 30_000,
                until: None
            }]
        );
    }

    #[test]
    fn failback_waits_in_pending_approval_until_the_scripted_approval_is_synced() {
        let mut s = setup(Duration::from_secs(180));
        s.policy.approval_required = true;
        let text = r#"duration = "60m"
initial = "ready"
[[branch]]
name = "primary"
approve_after = "5m"
[[branch.fault]]
from = "10m"
until = "25m"
class = "server_read_only"
"#;
        let r = run(&s, text);
        let f = &r.branches[0].faults[0];
        let at = |name: &str| {
            f.failback
                .iter()
                .find(|p| p.name.starts_with(name))
                .and_then(|p| p.since_fault_ms)
        };
        // Pending 14m56s after the fault ended (the ready condition's arithmetic), approved
        // 5 m later, applied at the next store sync (every 10 s): 4 s more.
        assert_eq!(at("pending_approval"), Some(896_000));
        assert_eq!(at("readiness 1 published"), Some(896_000 + 304_000));
        assert_eq!(f.pending_approval_ms, Some(304_000));
        assert!(r.branches[0].approvals[0].applied);
    }

    #[test]
    fn a_simulation_is_a_drill_with_the_same_lanes_and_phases() {
        let text = r#"duration = "60m"
initial = "ready"
[[branch]]
name = "primary"
[[branch.fault]]
from = "10m"
until = "25m"
class = "server_read_only"
"#;
        let r = run(&setup(Duration::from_secs(180)), text);
        let d = drill::drill(&r, "t.toml");
        let s = &d.services[0];
        let marks: Vec<(Millis, &str)> =
            s.markers.iter().map(|m| (m.at, m.kind.as_str())).collect();
        assert_eq!(marks, [(600_000, "fault"), (1_500_000, "restore")]);
        let primary = &s.branches[0];
        assert_eq!(primary.attempts.len() as u64, r.branches[0].attempts);
        let failed = primary
            .attempts
            .iter()
            .filter(|a| a.class.is_some())
            .count();
        assert_eq!(failed as u64, r.branches[0].failed_attempts);
        // State bands cover the window without gaps, and the fault shows as unready.
        let spans: Vec<_> = primary.states.iter().map(|b| b.span).collect();
        assert_eq!(spans.first().map(|s| s.from), Some(0));
        assert_eq!(spans.last().map(|s| s.until), Some(60 * 60_000));
        assert!(spans.windows(2).all(|w| w[0].until == w[1].from));
        assert!(
            primary
                .states
                .iter()
                .any(|b| b.state == ReadinessState::Unready)
        );
        // The same phases as the simulation's own table.
        let sim = &r.branches[0].faults[0];
        let ep: Vec<_> = s.episodes[0]
            .phases
            .iter()
            .map(|p| (&p.name, p.at))
            .collect();
        let own: Vec<_> = sim.failover.iter().map(|p| (&p.name, p.at)).collect();
        assert_eq!(ep, own);
        // The stable name answers PRIMARY, then SECONDARY, then PRIMARY again.
        let sel: Vec<Option<&str>> = s
            .stable_name
            .as_ref()
            .map(|l| l.rounds.iter().map(|r| r.selected.as_deref()).collect())
            .unwrap_or_default();
        assert_eq!(sel, [Some("primary"), Some("secondary"), Some("primary")]);
        assert!(s.alarms[0].states.iter().any(|b| b.state == "ALARM"));
    }
}
