//! The merge on hand-built evidence: order, one record per `(prober, record_seq)` and content,
//! one marker per id, lanes from transitions and `start.restored`, the configuration in force,
//! problems.

use super::*;
use crate::control::{Forced, MarkerKind};
use crate::probe::Attempt;
use crate::readiness::{Transition, WindowStats};
use crate::record::{
    DuplicateProber, EvidenceReopened, MarkerRecord, OverrideRecord, Restored, StartBranch,
    StateSyncFailed, TransitionRecord, read_lines,
};
use crate::report::model::ServiceDrill;

const T0: Millis = 1_767_323_045_000;

fn env(at: Millis, prober: &str, seq: u64, record: Record) -> Result<Envelope, LineError> {
    let mut e = Envelope::new(T0 + at, "orders-queue", prober, record);
    e.record_seq = Some(seq);
    Ok(e)
}

fn start(restored: Vec<Restored>) -> Record {
    Record::Start(Start {
        config: "probes/orders-queue.toml".into(),
        branches: vec![
            StartBranch {
                name: "secondary".into(),
                role: "SECONDARY".into(),
                endpoint: "mq-b.orders.internal.example".into(),
                port: 5672,
            },
            StartBranch {
                name: "primary".into(),
                role: "PRIMARY".into(),
                endpoint: "mq-a.orders.internal.example".into(),
                port: 5672,
            },
        ],
        duration_ms: None,
        state_store: "state".into(),
        restored,
        probe_interval_ms: Some(300),
        probe_timeout_ms: Some(250),
        suspect_interval_ms: None,
        publish_interval_ms: Some(1_000),
        policy: vec!["declare unready: success rate < 80% over 3s held for 1s".into()],
        approval_required: Some(false),
        stable_name_interval_ms: None,
        stable_name_end_to_end: None,
        namespace: Some("Orders".into()),
        initial: Some(ReadinessState::Ready),
    })
}

fn attempt(branch: &str, ok: bool) -> Record {
    let outcome = if ok {
        Outcome::Success
    } else {
        Outcome::Failure {
            step: crate::failure::Step::Connect,
            class: crate::failure::FailureClass::TcpRefused,
            message: "refused".into(),
        }
    };
    Record::Attempt(Attempt::bare(branch, 1, 0, 0, outcome))
}

fn transition(branch: &str, from: ReadinessState, to: ReadinessState) -> Record {
    let stats = WindowStats {
        window_ms: 3_000,
        finished: 10,
        failed: 5,
        success_rate_percent: Some(50.0),
        failure_classes: vec![],
    };
    Record::Transition(TransitionRecord {
        branch: branch.into(),
        transition: Transition {
            from,
            to,
            at: 0,
            reason: "r".into(),
            held_since: None,
            unready_window: stats.clone(),
            ready_window: stats,
            damping: None,
        },
        published: to.published_value(),
        override_: None,
        batch: None,
    })
}

fn marker(id: &str, given_at: Millis) -> Record {
    Record::Marker(MarkerRecord {
        marker_id: id.into(),
        marker_kind: MarkerKind::Fault,
        label: "blocked writer path".into(),
        by: "alice".into(),
        given_at: T0 + given_at,
    })
}

use ReadinessState::{Ready, Unready};

#[test]
fn lanes_markers_and_config_come_from_every_file_in_time_order() {
    let a = || {
        vec![
            env(
                0,
                "az-a",
                1,
                start(vec![Restored {
                    branch: "primary".into(),
                    state: Ready,
                    since: None,
                }]),
            ),
            env(1_000, "az-a", 2, attempt("primary", true)),
            env(3_000, "az-a", 3, marker("m1", 2_500)),
            env(3_100, "az-a", 4, attempt("primary", false)),
            env(5_000, "az-a", 5, transition("primary", Ready, Unready)),
        ]
    };
    let b = vec![
        env(500, "az-b", 7, attempt("primary", true)),
        env(2_900, "az-b", 8, marker("m1", 2_500)),
        env(3_050, "az-b", 9, attempt("secondary", true)),
    ];
    let d = merge(vec![("a.jsonl".into(), a()), ("b.jsonl".into(), b)], None);
    assert_eq!(d.probers, ["az-a", "az-b"]);
    assert_eq!(
        d.window,
        Span {
            from: T0,
            until: T0 + 5_000
        }
    );
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let s = &d.services[0];
    let names: Vec<_> = s
        .branches
        .iter()
        .map(|b| (b.name.as_str(), b.role.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("primary", Some("PRIMARY")),
            ("secondary", Some("SECONDARY"))
        ]
    );
    let p = &s.branches[0];
    let at: Vec<_> = p
        .attempts
        .iter()
        .map(|a| (a.at - T0, a.class.as_deref()))
        .collect();
    assert_eq!(
        at,
        [(500, None), (1_000, None), (3_100, Some("tcp_refused"))]
    );
    let states: Vec<_> = p
        .states
        .iter()
        .map(|b| (b.span.from - T0, b.span.until - T0, b.state))
        .collect();
    assert_eq!(states, [(0, 5_000, Ready), (5_000, 5_000, Unready)]);
    let published: Vec<_> = p.published.iter().map(|b| b.state).collect();
    assert_eq!(published, [Some(1.0), Some(0.0)]);
    // One marker for the two probers' records of it, at the time it was given.
    assert_eq!(s.markers.len(), 1);
    assert_eq!(s.markers[0].at, T0 + 2_500);
    let cfg: Vec<String> = s.config.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    assert!(
        cfg.contains(&"probe: every 300ms, attempt timeout 250ms".to_string()),
        "{cfg:?}"
    );
    assert!(
        cfg.contains(
            &"readiness: declare unready: success rate < 80% over 3s held for 1s".to_string()
        ),
        "{cfg:?}"
    );
    assert!(
        cfg.contains(&"stable_name_probe: off".to_string()),
        "{cfg:?}"
    );
    // The phase table is derived: the fault at 2.5 s hit the primary.
    assert_eq!(s.episodes.len(), 1);
    assert_eq!(s.episodes[0].branch, "primary");

    // The same file given twice counts once.
    let twice = merge(
        vec![("a.jsonl".into(), a()), ("a-copy.jsonl".into(), a())],
        None,
    );
    assert_eq!(twice.services[0].branches[0].attempts.len(), 2);
    assert!(twice.problems.is_empty(), "{:?}", twice.problems);
}

#[test]
fn bad_lines_gaps_and_reopens_are_problems_and_the_rest_still_merges() {
    let good = |at: Millis, seq: u64, r: Record| {
        let mut e = Envelope::new(T0 + at, "orders-queue", "az-a", r);
        e.record_seq = Some(seq);
        let mut l = serde_json::to_string(&e).unwrap();
        l.insert_str(1, &format!("\"record_seq\":{seq},"));
        l
    };
    let duplicate = Record::DuplicateProber(DuplicateProber {
        state_store: "state/control-orders-queue.json".into(),
        instance: "i-1".into(),
        other_instance: "i-2".into(),
        other_saved_at: T0,
    });
    let sync_failed = Record::StateSyncFailed(StateSyncFailed {
        error: "disk full".into(),
        class: None,
        started_at: None,
    });
    let reopened = Record::EvidenceReopened(EvidenceReopened {
        path: "/var/ev.jsonl".into(),
    });
    let text = [
        good(0, 1, attempt("primary", true)),
        "{\"at\": torn".into(),
        good(1_000, 2, attempt("primary", true)),
        good(2_000, 6, reopened),
        good(3_000, 7, attempt("primary", false)),
        good(3_500, 8, duplicate),
        // Kept for nothing but the window and the seq check.
        good(9_000, 9, sync_failed),
    ]
    .join("\n");
    let lines: Vec<_> = read_lines(text.as_bytes()).collect();
    let d = merge(vec![("ev.jsonl".into(), lines)], None);
    assert_eq!(d.services[0].branches[0].attempts.len(), 3);
    let problems = d.problems.join("\n");
    assert!(
        problems.contains("ev.jsonl: line 2: not an evidence record"),
        "{problems}"
    );
    assert!(
        problems.contains("prober az-a: record_seq jumps from 2 to 6: 3 records missing"),
        "{problems}"
    );
    assert!(
        problems.contains("reopened its evidence file /var/ev.jsonl"),
        "{problems}"
    );
    assert!(problems.contains("(duplicate_prober)"), "{problems}");
    assert_eq!(d.window.until, T0 + 9_000);
    // An old line without record_seq reads, and is neither deduplicated nor a gap.
    let old = r#"{"at":"x","at_ms":5,"service":"orders-queue","prober":"az-a","kind":"evidence_reopened","path":"p"}"#;
    let e: Envelope = serde_json::from_str(old).unwrap();
    assert_eq!(e.record_seq, None);
}

#[test]
fn a_service_filter_keeps_one_service_and_overrides_make_bands() {
    let set = Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::Set,
        override_: Some(Override {
            force: Forced::Unready,
            by: "carol".into(),
            reason: "maintenance".into(),
            at: T0,
            expires_at: T0 + 60_000,
        }),
    });
    let cleared = Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::Cleared,
        override_: None,
    });
    let mut other = Envelope::new(T0, "billing", "az-a", attempt("primary", true));
    other.record_seq = Some(4);
    let lines = vec![
        env(
            0,
            "az-a",
            1,
            start(vec![Restored {
                branch: "primary".into(),
                state: Ready,
                since: None,
            }]),
        ),
        env(1_000, "az-a", 2, set),
        env(4_000, "az-a", 3, cleared),
        Ok(other),
        env(6_000, "az-a", 5, attempt("primary", true)),
    ];
    let d = merge(vec![("a.jsonl".into(), lines)], Some("orders-queue"));
    assert_eq!(d.services.len(), 1);
    let p = &d.services[0].branches[0];
    let ov: Vec<_> = p
        .overrides
        .iter()
        .map(|b| (b.span.from - T0, b.span.until - T0, b.state.as_str()))
        .collect();
    assert_eq!(ov, [(1_000, 4_000, "force unready by carol: maintenance")]);
    let published: Vec<_> = p
        .published
        .iter()
        .map(|b| (b.span.from - T0, b.state))
        .collect();
    assert_eq!(
        published,
        [(0, Some(1.0)), (1_000, Some(0.0)), (4_000, Some(1.0))]
    );
    assert_eq!(p.events.len(), 2);
    // The other service's record is not in the window, and its seq 4 is no gap either.
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

/// Two probers: the lanes show the first prober's readiness, the phase table the first
/// prober to declare the branch unready and its own publish.
#[test]
fn with_two_probers_detection_is_the_first_to_declare_and_publish() {
    let publish = |outcome| {
        Record::Publish(crate::record::Publish::new(
            "emf",
            PublishReason::Transition,
            1,
            1,
            1,
            outcome,
            None,
        ))
    };
    let restored = || {
        start(vec![Restored {
            branch: "primary".into(),
            state: Ready,
            since: None,
        }])
    };
    let a = vec![
        env(0, "az-a", 1, restored()),
        env(1_000, "az-a", 2, marker("m1", 1_000)),
        env(1_300, "az-a", 3, attempt("primary", false)),
        env(4_000, "az-a", 4, transition("primary", Ready, Unready)),
        env(
            4_010,
            "az-a",
            5,
            publish(crate::record::PublishOutcome::Sent),
        ),
    ];
    let b = vec![
        env(0, "az-b", 1, restored()),
        env(1_200, "az-b", 2, marker("m1", 1_000)),
        env(1_400, "az-b", 3, attempt("primary", false)),
        env(3_000, "az-b", 4, transition("primary", Ready, Unready)),
        env(
            3_005,
            "az-b",
            5,
            publish(crate::record::PublishOutcome::Failed),
        ),
        env(
            3_500,
            "az-b",
            6,
            publish(crate::record::PublishOutcome::Sent),
        ),
    ];
    let d = merge(vec![("b".into(), b), ("a".into(), a)], None);
    let s = &d.services[0];
    let states: Vec<_> = s.branches[0]
        .states
        .iter()
        .map(|b| (b.span.from - T0, b.state))
        .collect();
    assert_eq!(states, [(0, Ready), (4_000, Unready)], "az-a's bands");
    assert!(
        s.config
            .iter()
            .any(|(k, v)| k == "lanes" && v.contains("az-a, az-b")),
        "{:?}",
        s.config
    );
    let e = &s.episodes[0];
    let p = e
        .phases
        .iter()
        .find(|p| p.name == "readiness 0 published")
        .unwrap();
    assert_eq!(p.at, Some(T0 + 3_500), "{p:?}");
    assert!(p.note.as_deref().unwrap().contains("prober az-b"), "{p:?}");
}

/// A file of garbage lists the first problems and counts the rest in one line.
#[test]
fn problems_are_capped_with_a_count_of_the_rest() {
    let text = "not json\n".repeat(MAX_PROBLEMS + 10);
    let lines: Vec<_> = read_lines(text.as_bytes()).collect();
    let d = merge(vec![("junk.jsonl".into(), lines)], None);
    assert_eq!(d.problems.len(), MAX_PROBLEMS + 1);
    assert_eq!(
        d.problems[0].split(':').take(2).collect::<Vec<_>>(),
        ["junk.jsonl", " line 1"]
    );
    assert_eq!(d.problems[MAX_PROBLEMS], "… and 10 more problems");
    assert!(d.services.is_empty());
}

#[test]
fn alarms_are_looked_up_in_the_namespace_and_branches_the_evidence_names() {
    let mut m = Merger::new(None);
    let f = m.file("a.jsonl");
    // A file that starts mid-run: branches from attempts until a `start` names the namespace.
    m.push(f, env(0, "az-a", 7, attempt("tertiary", true)));
    assert_eq!(
        m.metric_series("orders-queue"),
        (None, vec!["tertiary".to_string()])
    );
    m.push(f, env(10, "az-a", 8, start(vec![])));
    m.push(f, env(20, "az-a", 9, attempt("primary", false)));
    let (ns, branches) = m.metric_series("orders-queue");
    assert_eq!(ns, Some("Orders"));
    assert_eq!(branches, ["primary", "secondary", "tertiary"]);
    assert_eq!(m.metric_series("other"), (None, vec![]));
    m.note_problem("--alarms: no alarm on branch tertiary".into());
    assert!(m.finish().problems.iter().any(|p| p.contains("tertiary")));
}

#[test]
fn a_branch_without_transitions_shows_its_initial_state_from_the_start() {
    let mut m = Merger::new(None);
    let f = m.file("a.jsonl");
    m.push(f, env(0, "az-a", 1, start(vec![])));
    m.push(f, env(5_000, "az-a", 2, attempt("secondary", true)));
    let d = m.finish();
    let lane = d.services[0]
        .branches
        .iter()
        .find(|b| b.name == "secondary")
        .expect("secondary lane");
    assert_eq!(lane.states.len(), 1, "{:?}", lane.states);
    assert_eq!(lane.states[0].state, Ready);
    assert_eq!(lane.states[0].span.from, T0);
    assert_eq!(lane.published[0].state, Some(1.0));
}

#[test]
fn between_a_stop_and_the_next_start_nothing_is_published() {
    let stop = Record::Stop(crate::record::Stop {
        reason: "SIGTERM".into(),
        attempts: BTreeMap::new(),
        abandoned: 0,
        transitions: 0,
        dropped_batches: BTreeMap::new(),
        final_states: BTreeMap::new(),
        approvals_applied: 0,
        approvals_rejected: 0,
        state_sync_failures: 0,
        evidence_write_failures: 0,
    });
    let mut m = Merger::new(None);
    let f = m.file("a.jsonl");
    m.push(f, env(0, "az-a", 1, start(vec![])));
    m.push(f, env(10_000, "az-a", 2, stop));
    m.push(f, env(40_000, "az-a", 3, start(vec![])));
    m.push(f, env(50_000, "az-a", 4, attempt("primary", true)));
    let d = m.finish();
    let lane = d.services[0]
        .branches
        .iter()
        .find(|b| b.name == "primary")
        .expect("primary lane");
    let published: Vec<(Millis, Option<f64>)> = lane
        .published
        .iter()
        .map(|b| (b.span.from - T0, b.state))
        .collect();
    assert_eq!(
        published,
        [(0, Some(1.0)), (10_000, None), (40_000, Some(1.0))]
    );
    assert!(
        lane.events
            .iter()
            .any(|e| e.label.contains("stopped (SIGTERM)"))
    );
}

fn restored_ready() -> Record {
    start(vec![Restored {
        branch: "primary".into(),
        state: Ready,
        since: None,
    }])
}

fn failovers(s: &ServiceDrill) -> Vec<&crate::report::model::Episode> {
    s.episodes
        .iter()
        .filter(|e| e.kind == crate::report::model::EpisodeKind::Failover)
        .collect()
}

/// A failover only the second prober by id saw is tabled: the phase table reads every
/// prober's transitions, not only the lane prober's.
#[test]
fn a_failover_only_a_later_prober_saw_is_tabled() {
    let a = vec![
        env(0, "az-a", 1, restored_ready()),
        env(1_000, "az-a", 2, attempt("primary", true)),
    ];
    let b = vec![
        env(0, "az-b", 1, restored_ready()),
        env(1_400, "az-b", 2, attempt("primary", false)),
        env(3_000, "az-b", 3, transition("primary", Ready, Unready)),
    ];
    let d = merge(vec![("a".into(), a), ("b".into(), b)], None);
    let s = &d.services[0];
    let f = failovers(s);
    assert_eq!(f.len(), 1, "{:#?}", s.episodes);
    assert_eq!(f[0].branch, "primary");
    assert!(f[0].trigger.contains("prober az-b"), "{}", f[0].trigger);
}

/// The same failover seen by two probers is one episode, not one per prober.
#[test]
fn a_failover_two_probers_saw_is_one_episode() {
    let p = |id: &'static str, at: Millis| {
        vec![
            env(0, id, 1, restored_ready()),
            env(at - 2_000, id, 2, attempt("primary", false)),
            env(at, id, 3, transition("primary", Ready, Unready)),
        ]
    };
    let d = merge(
        vec![
            ("a".into(), p("az-a", 5_000)),
            ("b".into(), p("az-b", 4_000)),
        ],
        None,
    );
    assert_eq!(
        failovers(&d.services[0]).len(),
        1,
        "{:#?}",
        d.services[0].episodes
    );
}

/// A prober whose clock is an hour behind records the marker an hour before it was given: its
/// failover is still tabled, and the skew is a problem naming the prober.
#[test]
fn a_prober_an_hour_behind_is_tabled_and_its_skew_flagged() {
    const HOUR: Millis = 3_600_000;
    let at = |t: Millis| t + 2 * HOUR;
    let a = vec![
        env(at(0), "az-a", 1, restored_ready()),
        env(at(1_000), "az-a", 2, marker("m1", at(900))),
        env(at(1_300), "az-a", 3, attempt("primary", true)),
    ];
    let b = vec![
        env(at(0), "az-b", 1, restored_ready()),
        env(at(1_100), "az-b", 2, marker("m1", at(900))),
    ];
    let c = vec![
        env(at(0) - HOUR, "az-c", 1, restored_ready()),
        env(at(1_200) - HOUR, "az-c", 2, marker("m1", at(900))),
        env(at(1_500) - HOUR, "az-c", 3, attempt("primary", false)),
        env(
            at(4_000) - HOUR,
            "az-c",
            4,
            transition("primary", Ready, Unready),
        ),
    ];
    let mut m = Merger::new(None);
    for (name, lines) in [("a", a), ("b", b), ("c", c)] {
        let f = m.file(name);
        for l in lines {
            m.push(f, l);
        }
    }
    let skew = m.clock_skew();
    assert_eq!(skew.len(), 1, "{skew:?}");
    assert!(skew[0].contains("prober az-c"), "{skew:?}");
    let d = m.finish();
    let problems = d.problems.join("\n");
    assert!(
        problems.contains("prober az-c") && problems.contains("clock"),
        "{problems}"
    );
    assert!(
        !problems.contains("az-a") && !problems.contains("az-b"),
        "{problems}"
    );
    let s = &d.services[0];
    let f = failovers(s);
    assert!(
        f.iter().any(|e| e.trigger.contains("prober az-c")),
        "{:#?}",
        s.episodes
    );
}

/// `record_seq` going back within one prober's file is flagged: the file was edited or two
/// runs' files were joined.
#[test]
fn record_seq_going_back_in_a_file_is_a_problem() {
    let lines = vec![
        env(0, "az-a", 5, restored_ready()),
        env(1_000, "az-a", 6, attempt("primary", true)),
        env(2_000, "az-a", 2, attempt("primary", true)),
        env(3_000, "az-a", 3, attempt("primary", true)),
    ];
    let d = merge(vec![("ev.jsonl".into(), lines)], None);
    let problems = d.problems.join("\n");
    assert!(
        problems.contains("ev.jsonl: prober az-a: record_seq goes back from 6 to 2"),
        "{problems}"
    );
    // Two files of the same prober, each in order, are no such problem.
    let one = vec![env(0, "az-a", 1, restored_ready())];
    let two = vec![env(1_000, "az-a", 2, attempt("primary", true))];
    let d = merge(vec![("b".into(), two), ("a".into(), one)], None);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

/// The `approved` phase shows when the operator gave the approval and when the prober applied
/// it.
#[test]
fn the_approval_phase_shows_when_it_was_given_and_when_applied() {
    let approval = Record::Approval(crate::record::ApprovalRecord {
        branch: "primary".into(),
        approval_id: "a1".into(),
        by: "bob".into(),
        reason: "writer verified".into(),
        given_at: T0 + 6_000,
        expires_at: T0 + 1_806_000,
        applied: true,
        detail: "applied".into(),
    });
    let mut first = start(vec![Restored {
        branch: "primary".into(),
        state: Unready,
        since: None,
    }]);
    if let Record::Start(s) = &mut first {
        s.approval_required = Some(true);
    }
    let lines = vec![
        env(0, "az-a", 1, first),
        env(1_000, "az-a", 2, attempt("primary", true)),
        env(
            4_000,
            "az-a",
            3,
            transition("primary", Unready, ReadinessState::PendingApproval),
        ),
        env(9_000, "az-a", 4, approval),
        env(
            9_000,
            "az-a",
            5,
            transition("primary", ReadinessState::PendingApproval, Ready),
        ),
    ];
    let d = merge(vec![("a".into(), lines)], None);
    let e = &d.services[0].episodes[0];
    let at = |name: &str| e.phases.iter().find(|p| p.name == name).and_then(|p| p.at);
    assert_eq!(at("approval given"), Some(T0 + 6_000), "{:#?}", e.phases);
    assert_eq!(at("approved"), Some(T0 + 9_000), "{:#?}", e.phases);
}

/// Twenty thousand markers with long labels: labels are cut to 200 characters, and the pages
/// draw a bounded number of markers and episodes (the rest summarised), so their size does not
/// grow with the markers.
#[test]
fn many_long_markers_are_cut_and_bounded_in_the_pages() {
    let long = "x".repeat(1_000);
    let mut lines = vec![env(0, "az-a", 1, restored_ready())];
    for k in 0..20_000u64 {
        let mut m = marker(&format!("m{k}"), 1_000 + k as Millis);
        if let Record::Marker(r) = &mut m {
            r.label.clone_from(&long);
            if k % 2 == 1 {
                r.marker_kind = MarkerKind::Restore;
            }
        }
        lines.push(env(1_000 + k as Millis, "az-a", k + 2, m));
    }
    let d = merge(vec![("a".into(), lines)], None);
    let s = &d.services[0];
    assert_eq!(s.markers.len(), 20_000);
    assert!(
        s.markers
            .iter()
            .all(|m| m.label.chars().count() == 200 && m.label.ends_with('…'))
    );
    let html = crate::report::html::render(&d);
    let md = crate::report::markdown::render(&d);
    assert!(html.len() < 2_000_000, "{} bytes of HTML", html.len());
    assert!(md.len() < 2_000_000, "{} bytes of Markdown", md.len());
    assert!(html.contains("more markers"), "the rest is summarised");
}

/// Older runs wrote `suspect_interval_ms` equal to the interval when adaptive probing was off:
/// it still reads as off, and a run at 100 ms below it reads as on.
#[test]
fn a_suspect_interval_equal_to_the_interval_reads_as_off() {
    let probe_line = |suspect: Option<u64>| {
        let mut r = start(vec![]);
        if let Record::Start(s) = &mut r {
            s.suspect_interval_ms = suspect;
        }
        let d = merge(vec![("a.jsonl".into(), vec![env(0, "az-a", 1, r)])], None);
        let cfg = &d.services[0].config;
        cfg.iter()
            .find(|(k, _)| k == "probe")
            .map(|(_, v)| v.clone())
            .expect("a probe line")
    };
    assert_eq!(probe_line(Some(300)), "every 300ms, attempt timeout 250ms");
    assert_eq!(
        probe_line(Some(100)),
        "every 300ms, attempt timeout 250ms, every 100ms while suspect"
    );
}

/// A `start` after records of a run that wrote no `stop` (killed) is a problem; one after a
/// `stop`, records the writer added after it, or another service's `start` of the same run are
/// not.
#[test]
fn a_start_without_a_stop_before_it_is_a_problem() {
    let stop = || {
        Record::Stop(crate::record::Stop {
            reason: "SIGTERM".into(),
            attempts: BTreeMap::new(),
            abandoned: 0,
            transitions: 0,
            dropped_batches: BTreeMap::new(),
            final_states: BTreeMap::new(),
            approvals_applied: 0,
            approvals_rejected: 0,
            state_sync_failures: 0,
            evidence_write_failures: 0,
        })
    };
    let reopened = || {
        Record::EvidenceReopened(EvidenceReopened {
            path: "/var/ev.jsonl".into(),
        })
    };
    let mut m = Merger::new(None);
    let f = m.file("a.jsonl");
    m.push(f, env(0, "az-a", 1, start(vec![])));
    m.push(f, env(0, "az-a", 2, start(vec![])));
    m.push(f, env(5_000, "az-a", 3, attempt("primary", true)));
    m.push(f, env(10_000, "az-a", 4, stop()));
    m.push(f, env(10_001, "az-a", 5, reopened()));
    m.push(f, env(20_000, "az-a", 6, start(vec![])));
    m.push(f, env(25_000, "az-a", 7, attempt("primary", true)));
    m.push(f, env(40_000, "az-a", 8, start(vec![])));
    let problems = m.finish().problems.join("\n");
    let killed: Vec<&str> = problems
        .lines()
        .filter(|l| l.contains("without a stop record"))
        .collect();
    assert_eq!(killed.len(), 1, "{problems}");
    assert!(
        killed[0].contains("started again at 2026-01-02T03:04:45.000Z")
            && killed[0].contains("after its record at 2026-01-02T03:04:30.000Z"),
        "{problems}"
    );
}

/// Two different records with one `(prober, record_seq)` (numbering restarted: a fresh disk
/// whose S3 did not answer at start, or a lost evidence file) are both kept, in time order, and
/// the reused range is a problem; the same record given twice still counts once, silently.
#[test]
fn a_record_seq_reused_by_different_records_keeps_both_and_is_a_problem() {
    let first = || {
        vec![
            env(0, "az-a", 1, start(vec![])),
            env(1_000, "az-a", 2, attempt("primary", true)),
            env(2_000, "az-a", 3, attempt("primary", true)),
            env(3_000, "az-a", 4, attempt("primary", true)),
            env(4_000, "az-a", 7, attempt("primary", true)),
            env(5_000, "az-a", 9, attempt("primary", true)),
        ]
    };
    let restarted = vec![
        env(60_000, "az-a", 1, start(vec![])),
        env(61_000, "az-a", 2, attempt("primary", false)),
        env(62_000, "az-a", 3, attempt("primary", false)),
        // The same record as the first run's 7 (a copy): no reuse.
        env(4_000, "az-a", 7, attempt("primary", true)),
        env(63_000, "az-a", 9, attempt("primary", false)),
    ];
    let d = merge(
        vec![
            ("run-1.jsonl".into(), first()),
            ("run-2.jsonl".into(), restarted),
            ("run-1-copy.jsonl".into(), first()),
        ],
        None,
    );
    let attempts = &d.services[0].branches[0].attempts;
    let times: Vec<Millis> = attempts.iter().map(|a| a.at - T0).collect();
    assert_eq!(
        times,
        [1_000, 2_000, 3_000, 4_000, 5_000, 61_000, 62_000, 63_000],
        "{attempts:?}"
    );
    let reused: Vec<&String> = d.problems.iter().filter(|p| p.contains("reused")).collect();
    assert_eq!(reused.len(), 1, "{:?}", d.problems);
    assert!(
        reused[0].starts_with("prober az-a: record_seq 1–3, 9 reused by different records"),
        "{reused:?}"
    );
}
