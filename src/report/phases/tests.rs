//! Phases from hand-built lanes: each phase timed from its record, and each missing record
//! named in the note instead.

use super::*;
use crate::report::model::{AlarmLane, AttemptMark, Band, BranchLane, Span, StableLane};
use ReadinessState::{PendingApproval, Ready, Unready};

const END: Millis = 300_000;

fn lane(
    name: &str,
    role: &str,
    states: &[(Millis, ReadinessState)],
    fail: (Millis, Millis),
) -> BranchLane {
    let attempts = (0..END / 1000)
        .map(|k| k * 1000 + 300)
        .map(|at| AttemptMark {
            at,
            class: (at >= fail.0 && at < fail.1).then(|| "tcp_refused".to_string()),
        })
        .collect();
    let states = states
        .iter()
        .enumerate()
        .map(|(k, (at, s))| Band {
            span: Span {
                from: *at,
                until: states.get(k + 1).map_or(END, |n| n.0),
            },
            state: *s,
        })
        .collect();
    BranchLane {
        name: name.into(),
        role: Some(role.into()),
        attempts,
        states,
        published: vec![],
        overrides: vec![],
        events: vec![],
    }
}

fn marker(at: Millis, kind: &str) -> Marker {
    Marker {
        at,
        kind: kind.into(),
        label: format!("{kind} of the writer path"),
        by: "alice".into(),
    }
}

/// Rounds every second: primary until `switch`, secondary until `back`, primary after; TTL
/// 5 s; end-to-end attempts (when `e2e`) fail for 2 s after each switch.
fn stable(switch: Millis, back: Millis, e2e: bool) -> StableLane {
    let rounds = (0..END / 1000)
        .map(|k| k * 1000 + 500)
        .map(|at| {
            let sec = at >= switch && at < back;
            let fresh = (at >= switch && at < switch + 2_000) || (at >= back && at < back + 2_000);
            Round {
                at,
                selected: Some(if sec { "secondary" } else { "primary" }.into()),
                unknown_target: false,
                ttl: Some(5),
                end_to_end: e2e.then(|| fresh.then(|| "tcp_refused".to_string())),
            }
        })
        .collect();
    StableLane {
        name: "mq.orders.internal.example".into(),
        rounds,
    }
}

fn tr(at: Millis, branch: &str, from: ReadinessState, to: ReadinessState) -> TransitionFact {
    TransitionFact {
        at,
        prober: "az-a".into(),
        branch: branch.into(),
        from,
        to,
        batch: None,
    }
}

fn sent(at: Millis) -> PublishFact {
    PublishFact {
        at,
        prober: "az-a".into(),
        outcome: PublishOutcome::Sent,
        sink: "emf".into(),
        batch: None,
    }
}

fn service(
    branches: Vec<BranchLane>,
    markers: Vec<Marker>,
    stable_name: Option<StableLane>,
) -> ServiceDrill {
    ServiceDrill {
        name: "orders-queue".into(),
        config: vec![],
        branches,
        stable_name,
        alarms: vec![],
        markers,
        episodes: vec![],
    }
}

fn alarm(states: &[(Millis, &str)]) -> AlarmLane {
    AlarmLane {
        name: "orders-queue-primary".into(),
        branch: "primary".into(),
        target: None,
        states: states
            .iter()
            .enumerate()
            .map(|(k, (at, s))| Band {
                span: Span {
                    from: *at,
                    until: states.get(k + 1).map_or(END, |n| n.0),
                },
                state: s.to_string(),
            })
            .collect(),
    }
}

/// `(name, at, note)` of each phase.
fn rows(e: &Episode) -> Vec<(&str, Option<Millis>, &str)> {
    e.phases
        .iter()
        .map(|p| (p.name.as_str(), p.at, p.note.as_deref().unwrap_or("")))
        .collect()
}

fn phase<'a>(e: &'a Episode, name: &str) -> &'a Phase {
    e.phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no phase {name}: {e:#?}"))
}

/// The whole drill on record: a fault at 10 s, the primary fails from 10.3 s, unready at 12 s,
/// published at 12.005 s, alarm at 70 s, the stable name answers secondary from 80.5 s; a
/// restore at 150 s, pending at 160 s, approved at 170 s, ready and published at 170 s, alarm
/// OK at 200 s, the stable name answers primary from 210.5 s.
fn full() -> (ServiceDrill, Facts) {
    let mut s = service(
        vec![
            lane(
                "primary",
                "PRIMARY",
                &[
                    (0, Ready),
                    (12_000, Unready),
                    (160_000, PendingApproval),
                    (170_000, Ready),
                ],
                (10_000, 150_000),
            ),
            lane("secondary", "SECONDARY", &[(0, Ready)], (0, 0)),
        ],
        vec![
            marker(10_000, "fault"),
            marker(50_000, "note"),
            marker(150_000, "restore"),
        ],
        Some(stable(80_000, 210_000, true)),
    );
    s.alarms = vec![alarm(&[(0, "OK"), (70_000, "ALARM"), (200_000, "OK")])];
    let f = Facts {
        transitions: vec![
            tr(12_000, "primary", Ready, Unready),
            tr(160_000, "primary", Unready, PendingApproval),
            tr(170_000, "primary", PendingApproval, Ready),
        ],
        publishes: vec![sent(12_005), sent(170_010)],
        approvals: vec![ApprovalFact {
            at: 170_000,
            prober: "az-a".into(),
            branch: "primary".into(),
            by: "bob".into(),
            reason: "writer back".into(),
            given_at: 165_000,
            applied: true,
        }],
        approval_required: Some(true),
    };
    (s, f)
}

#[test]
fn a_recorded_failover_times_every_phase_from_its_record() {
    let (s, f) = full();
    let e = episodes(&s, &f);
    assert_eq!(e.len(), 2, "{e:#?}");
    let fo = &e[0];
    assert_eq!(
        (fo.kind, fo.branch.as_str()),
        (EpisodeKind::Failover, "primary")
    );
    let at: Vec<_> = rows(fo).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        at,
        [
            ("fault marker", Some(10_000)),
            ("first failed attempt", Some(10_300)),
            ("readiness 0 published", Some(12_005)),
            ("alarm in ALARM", Some(70_000)),
            ("stable name answers with the other branch", Some(80_500)),
            // The last round naming the primary, 79.5 s, plus its 5 s TTL.
            ("cache expiry", Some(84_500)),
            // End-to-end attempts fail for 2 s after the switch.
            (
                "reconnect (end-to-end through the stable name)",
                Some(82_500)
            ),
            ("steady state", Some(82_500)),
        ]
    );
    let p = phase(fo, "readiness 0 published");
    assert_eq!((p.since_start_ms, p.took_ms), (Some(2_005), Some(1_705)));
    assert!(
        phase(fo, "cache expiry")
            .note
            .as_deref()
            .unwrap()
            .contains("bounded by the TTL")
    );
}

#[test]
fn a_recorded_failback_measures_pending_approval_and_names_the_approver() {
    let (s, f) = full();
    let fb = &episodes(&s, &f)[1];
    assert_eq!(
        (fb.kind, fb.branch.as_str()),
        (EpisodeKind::Failback, "primary")
    );
    let at: Vec<_> = rows(fb).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        at,
        [
            ("restore marker", Some(150_000)),
            ("first successful attempt", Some(150_300)),
            ("pending_approval entered", Some(160_000)),
            ("approval given", Some(165_000)),
            ("approved", Some(170_000)),
            ("readiness 1 published", Some(170_010)),
            ("alarm OK", Some(200_000)),
            ("stable name selects the branch again", Some(210_500)),
            ("cache expiry", Some(214_500)),
            (
                "reconnect (end-to-end through the stable name)",
                Some(212_500)
            ),
            ("steady state", Some(212_500)),
        ]
    );
    assert_eq!(fb.pending_approval_ms, Some(10_000));
    assert_eq!(fb.approved_by.as_deref(), Some("bob"));
    assert!(
        phase(fb, "approved")
            .note
            .as_deref()
            .unwrap()
            .contains("by bob: writer back")
    );
}

#[test]
fn each_missing_record_is_named_instead_of_a_time() {
    let (mut s, mut f) = full();
    s.alarms.clear();
    s.stable_name = None;
    f.publishes.clear();
    f.approvals.clear();
    let e = episodes(&s, &f);
    let note = |k: usize, name: &str| phase(&e[k], name).note.clone().unwrap_or_default();
    for k in [0, 1] {
        assert!(
            note(k, if k == 0 { "alarm in ALARM" } else { "alarm OK" })
                .contains("no alarm lane (without --alarms")
        );
    }
    let p = note(0, "readiness 0 published");
    assert!(
        p.contains("no publish record with reason transition and outcome sent"),
        "{p}"
    );
    assert!(
        note(0, "stable name answers with the other branch").contains("no stable_name records")
    );
    assert!(note(0, "cache expiry").contains("needs the DNS selection"));
    assert!(
        note(0, "reconnect (end-to-end through the stable name)")
            .contains("no stable_name records")
    );
    assert!(note(1, "approved").contains("no applied approval record"));
    for p in e.iter().flat_map(|e| &e.phases).filter(|p| p.at.is_none()) {
        assert!(p.since_start_ms.is_none() && p.took_ms.is_none(), "{p:?}");
        assert!(
            p.note.as_deref().is_some_and(|n| n.starts_with("missing:")),
            "{p:?}"
        );
    }
    // The transitions themselves missing.
    f.transitions.clear();
    let e = episodes(&s, &f);
    let n = phase(&e[0], "readiness 0 published").note.clone().unwrap();
    assert!(
        n.contains("no transition record of primary to unready"),
        "{n}"
    );
    let n = phase(&e[1], "pending_approval entered")
        .note
        .clone()
        .unwrap();
    assert!(
        n.contains("no transition record of primary to pending_approval"),
        "{n}"
    );
}

#[test]
fn without_end_to_end_the_steady_state_is_by_selection_and_reconnect_is_missing() {
    let (mut s, f) = full();
    s.stable_name = Some(stable(80_000, 210_000, false));
    let fo = &episodes(&s, &f)[0];
    let r = phase(fo, "reconnect (end-to-end through the stable name)");
    assert_eq!(r.at, None);
    assert!(
        r.note.as_deref().unwrap().contains("no end_to_end"),
        "{r:?}"
    );
    let st = phase(fo, "steady state");
    assert_eq!(st.at, Some(80_500));
    assert!(
        st.note.as_deref().unwrap().contains("selection only"),
        "{st:?}"
    );
    // A stable name that never moves: no switch, no steady state on the other branch.
    s.stable_name = Some(stable(END, END, false));
    let fo = &episodes(&s, &f)[0];
    assert_eq!(
        phase(fo, "stable name answers with the other branch").at,
        None
    );
    assert!(
        phase(fo, "steady state")
            .note
            .as_deref()
            .unwrap()
            .contains("the last round selects primary")
    );
}

#[test]
fn the_faulted_branch_is_the_first_one_ready_at_the_marker_that_fails_after_it() {
    // The secondary is unready at the marker and fails earlier; the primary, ready, fails later.
    let s = service(
        vec![
            lane("primary", "PRIMARY", &[(0, Ready)], (20_000, 40_000)),
            lane("secondary", "SECONDARY", &[(0, Unready)], (0, 30_000)),
        ],
        vec![marker(10_000, "fault")],
        None,
    );
    let e = episodes(&s, &Facts::default());
    assert_eq!(e[0].branch, "primary");
    assert_eq!(phase(&e[0], "first failed attempt").at, Some(20_300));
    // No branch fails after the marker: said, not guessed.
    let s = service(
        vec![lane("primary", "PRIMARY", &[(0, Ready)], (0, 0))],
        vec![marker(10_000, "fault")],
        None,
    );
    let e = episodes(&s, &Facts::default());
    assert_eq!(e[0].branch, "");
    assert!(
        phase(&e[0], "first failed attempt")
            .note
            .as_deref()
            .unwrap()
            .contains("no branch fails")
    );
}

#[test]
fn without_markers_transitions_start_the_episodes() {
    let (mut s, mut f) = full();
    s.markers.clear();
    f.approval_required = Some(false);
    let e = episodes(&s, &f);
    let kinds: Vec<_> = e.iter().map(|e| (e.kind, e.branch.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (EpisodeKind::Failover, "primary"),
            (EpisodeKind::Failback, "primary")
        ]
    );
    // Measured from the first failed attempt of the streak that led to the transition.
    let m = phase(&e[0], "fault marker");
    assert!(
        m.note.as_deref().unwrap().contains("no fault marker"),
        "{m:?}"
    );
    let first = phase(&e[0], "first failed attempt");
    assert_eq!((first.at, first.since_start_ms), (Some(10_300), Some(0)));
    assert_eq!(
        phase(&e[0], "readiness 0 published").since_start_ms,
        Some(1_705)
    );
    // The failback starts at the first success after the failures.
    assert_eq!(phase(&e[1], "first successful attempt").at, Some(150_300));
    let p = phase(&e[1], "pending_approval entered");
    assert!(
        p.note.as_deref().unwrap().contains("needs no approval"),
        "{p:?}"
    );
}

#[test]
fn a_transition_no_marker_explains_gets_its_own_episode() {
    let (mut s, f) = full();
    // Only the restore marker: the failover has no fault marker before it.
    s.markers.retain(|m| m.kind == "restore");
    let e = episodes(&s, &f);
    let kinds: Vec<_> = e
        .iter()
        .map(|e| (e.kind, e.trigger.starts_with("no marker")))
        .collect();
    assert_eq!(
        kinds,
        [
            (EpisodeKind::Failover, true),
            (EpisodeKind::Failback, false)
        ],
        "{e:#?}"
    );
    // With both markers, the marked episodes alone.
    let (s, f) = full();
    assert!(
        episodes(&s, &f)
            .iter()
            .all(|e| !e.trigger.starts_with("no marker"))
    );
}

/// With several branches, a transition's publish is the one of the batch it names: another
/// branch's transition batch sent just before is not taken for it.
#[test]
fn the_publish_of_a_transition_is_found_by_its_batch() {
    let (s, mut f) = full();
    f.transitions[0].batch = Some(2);
    let other = PublishFact {
        batch: Some(1),
        ..sent(12_003)
    };
    let own = PublishFact {
        batch: Some(2),
        ..sent(12_007)
    };
    f.publishes = vec![other, own, sent(170_010)];
    let e = episodes(&s, &f);
    assert_eq!(phase(&e[0], "readiness 0 published").at, Some(12_007));
}
