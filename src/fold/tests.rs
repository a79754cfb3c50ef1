//! Unit tests of the fold with plain data: no tokio, no files.

use super::*;
use crate::control::{self, Forced, ProberState};
use crate::datum::Value;
use crate::readiness::{Condition, Snapshot};
use crate::record::PublishOutcome;
use serde_json::Value as Json;
use std::time::Duration;

const SINKS: [&str; 2] = ["cloudwatch", "emf"];

/// The sinks of a service without `publish`: [`SINKS`], the default target's.
static DEFAULT_SINKS: [SinkId; 2] = [
    SinkId {
        kind: "cloudwatch",
        target: None,
    },
    SinkId {
        kind: "emf",
        target: None,
    },
];

/// The kinds of `sinks` (all at the default target in these tests).
fn names(sinks: &[SinkId]) -> Vec<&'static str> {
    assert!(sinks.iter().all(|s| s.target.is_none()), "{sinks:?}");
    sinks.iter().map(|s| s.kind).collect()
}

fn policy() -> Policy {
    Policy {
        min_attempts: 2,
        declare_unready: Condition {
            threshold_percent: 95.0,
            for_: Duration::from_secs(1),
            window: Duration::from_secs(10),
        },
        declare_ready: Condition {
            threshold_percent: 99.0,
            for_: Duration::from_secs(2),
            window: Duration::from_secs(10),
        },
        approval_required: true,
        initial: ReadinessState::Unready,
        definitive: None,
        damping: None,
    }
}

/// A fold of one service, `orders-db`, with `doc` as its control document.
fn start_with(doc: &ControlDoc, policy: &Policy) -> (Fold, Vec<Effect>) {
    start_at(doc, policy, 0)
}

/// [`start_with`] on a host whose clock reads `now`.
fn start_at(doc: &ControlDoc, policy: &Policy, now: Millis) -> (Fold, Vec<Effect>) {
    let branches = ["primary".to_string(), "secondary".to_string()];
    let services = [ServiceSetup {
        sinks: &DEFAULT_SINKS,
        service: "orders-db",
        namespace: "Readyprobe",
        policy,
        branches: &branches,
        store_location: "memory",
        doc,
    }];
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Full,
    };
    Fold::start(setup, now)
}

fn start(doc: &ControlDoc) -> (Fold, Vec<Effect>) {
    start_with(doc, &policy())
}

fn attempt(branch: &str, seq: u64, at: Millis, ok: bool) -> Input {
    let mut a = Attempt::internal_failure(branch, seq, at - 10, at, "refused".into());
    if ok {
        a.outcome = Outcome::Success;
    }
    Input::Attempt(0, Box::new(a))
}

/// Attempts on `branch` every 500 ms in `[from, to)`; returns the effects and the next time.
fn drive(f: &mut Fold, branch: &str, from: Millis, to: Millis, ok: bool) -> Vec<Effect> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        out.extend(f.handle(attempt(branch, t as u64, t, ok), t));
        t += 500;
    }
    out
}

/// The evidence records among the effects, as the JSON the writer stores.
fn records(effects: &[Effect]) -> Vec<Json> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record(_, _, r) => Some(serde_json::to_value(r).unwrap()),
            _ => None,
        })
        .collect()
}

fn of_kind(effects: &[Effect], kind: &str) -> Vec<Json> {
    records(effects)
        .into_iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn batches(effects: &[Effect]) -> Vec<&Batch> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish(b) => Some(b),
            _ => None,
        })
        .collect()
}

fn logs(effects: &[Effect]) -> Vec<&Log> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Log(l) => Some(l),
            _ => None,
        })
        .collect()
}

fn readiness_values(b: &Batch, branch: &str) -> Vec<f64> {
    b.datums
        .iter()
        .filter(|d| d.metric == "Readiness" && d.dimensions[1].1 == branch)
        .map(|d| match d.value {
            Value::Single(v) => v,
            Value::Samples(_) => f64::NAN,
        })
        .collect()
}

/// A fold whose primary entered pending_approval; returns it and when.
fn pending() -> (Fold, Millis) {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let e = drive(&mut f, "primary", 500, 5000, true);
    let t = of_kind(&e, "transition");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["transition"]["to"], "pending_approval");
    (f, t[0]["transition"]["at"].as_i64().unwrap())
}

fn approval(id: &str, at: Millis, expires_at: Millis) -> Approval {
    Approval {
        id: id.into(),
        branch: "primary".into(),
        by: "op".into(),
        reason: "checked".into(),
        at,
        expires_at,
        decisions: BTreeMap::new(),
    }
}

/// One sync as the runner does it: the store's document goes through
/// `control::sync_prober` with the fold's copy, then back into the fold.
fn sync(f: &mut Fold, doc: &mut ControlDoc, now: Millis) -> Vec<Effect> {
    let req = f.sync_request(0);
    let mut copy = req.readiness.clone();
    let dropped = control::dropped_ahead(doc, now);
    let decided = control::sync_prober(doc, "p1", &mut copy, &req.recorded, now);
    let markers = control::take_markers(doc, "p1", &req.markers, now);
    f.handle(
        Input::SyncDone {
            service: 0,
            doc: doc.clone(),
            decided,
            markers,
            dropped,
        },
        now,
    )
}

fn marker(id: &str, at: Millis) -> control::Marker {
    control::Marker {
        id: id.into(),
        kind: control::MarkerKind::Restore,
        label: "writer path open again".into(),
        by: "op".into(),
        at,
        taken: BTreeMap::new(),
    }
}

/// A drill marker in the store becomes one `marker` record at the next sync, never again: not
/// at later syncs, not when a sync hands back one already recorded (a lost answer), not after a
/// restart from the document.
#[test]
fn a_drill_marker_is_recorded_once() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("orders-db");
    doc.markers.push(marker("m1", 900));
    let e = sync(&mut f, &mut doc, 1000);
    let m = of_kind(&e, "marker");
    assert_eq!(m.len(), 1, "{e:?}");
    assert_eq!(m[0]["marker_id"], "m1");
    assert_eq!(m[0]["marker_kind"], "restore");
    assert_eq!(m[0]["label"], "writer path open again");
    assert_eq!(m[0]["by"], "op");
    assert_eq!(m[0]["given_at"], 900);
    assert!(e.iter().any(|x| matches!(
        x,
        Effect::Record(1000, svc, crate::record::Record::Marker(_)) if svc == "orders-db"
    )));
    assert!(logs(&e).iter().any(|l| l.message == "drill marker"));
    for now in [1500, 2000, 2500] {
        assert!(of_kind(&sync(&mut f, &mut doc, now), "marker").is_empty());
    }
    // A sync that hands it back anyway records nothing.
    let again = f.handle(
        Input::SyncDone {
            service: 0,
            doc: doc.clone(),
            decided: Vec::new(),
            markers: vec![doc.markers[0].clone()],
            dropped: Vec::new(),
        },
        3000,
    );
    assert!(of_kind(&again, "marker").is_empty());
    let (mut g, _) = start(&doc);
    assert!(of_kind(&sync(&mut g, &mut doc, 3500), "marker").is_empty());
}

#[test]
fn an_approval_given_while_pending_is_applied() {
    let (mut f, since) = pending();
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals
        .push(approval("a1", since + 10, since + 60_000));
    let e = sync(&mut f, &mut doc, since + 20);
    let a = of_kind(&e, "approval");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["applied"], true);
    let t = of_kind(&e, "transition");
    assert_eq!(t[0]["transition"]["to"], "ready");
    assert_eq!(t[0]["published"], 1.0);
    let b = batches(&e);
    assert_eq!(b[0].reason, PublishReason::Transition);
    assert_eq!(readiness_values(b[0], "primary"), [1.0]);
    // The saved snapshot already shows ready, and the decision is in the document.
    assert_eq!(
        doc.probers["p1"].branches["primary"].state,
        ReadinessState::Ready
    );
    assert!(doc.approvals[0].decisions["p1"].applied);
    // Taken once: the next sync has nothing new.
    assert!(of_kind(&sync(&mut f, &mut doc, since + 100), "approval").is_empty());
    let (s, _) = f.finish(since + 200, "duration", 0);
    assert_eq!((s.approvals_applied, s.approvals_rejected), (1, 0));
    assert_eq!(s.final_states["primary"], ReadinessState::Ready);
}

#[test]
fn a_restart_does_not_record_the_decisions_of_an_earlier_run_again() {
    let (mut f, since) = pending();
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals
        .push(approval("a1", since + 10, since + 60_000));
    assert_eq!(
        of_kind(&sync(&mut f, &mut doc, since + 20), "approval").len(),
        1
    );
    // The next run of a scheduled task starts from that document a minute later: the decision
    // is history to it, neither an approval nor an approval_not_applied.
    let (mut next, _) = start(&doc);
    let e = sync(&mut next, &mut doc, since + 60_000);
    assert!(of_kind(&e, "approval").is_empty(), "{:?}", records(&e));
    assert!(of_kind(&e, "approval_not_applied").is_empty());
    let (s, _) = next.finish(since + 61_000, "duration", 0);
    assert_eq!((s.approvals_applied, s.approvals_rejected), (0, 0));
}

#[test]
fn an_approval_given_before_pending_is_rejected_and_stays_rejected() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals.push(approval("early", 100, 600_000));
    let e = sync(&mut f, &mut doc, 200);
    let a = of_kind(&e, "approval");
    assert_eq!(a[0]["applied"], false);
    assert!(
        a[0]["detail"]
            .as_str()
            .unwrap()
            .contains("not pending_approval")
    );
    assert!(
        logs(&e)
            .iter()
            .any(|l| l.message == "operator approval rejected")
    );
    // Later the branch waits for approval: the early approval does not pre-authorise it.
    let e = drive(&mut f, "primary", 500, 5000, true);
    assert_eq!(
        of_kind(&e, "transition")[0]["transition"]["to"],
        "pending_approval"
    );
    let e = sync(&mut f, &mut doc, 5000);
    assert!(of_kind(&e, "approval").is_empty() && of_kind(&e, "transition").is_empty());
    let (s, _) = f.finish(5000, "duration", 0);
    assert_eq!((s.approvals_applied, s.approvals_rejected), (0, 1));
    assert_eq!(s.final_states["primary"], ReadinessState::PendingApproval);
}

#[test]
fn an_expired_approval_is_rejected_and_an_old_one_is_history() {
    let (mut f, since) = pending();
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals
        .push(approval("stale", since + 10, since + 15));
    // Expired long before this prober saw it: neither decided nor recorded.
    doc.approvals.push(approval(
        "history",
        0,
        since - control::APPROVAL_HISTORY_MS - 1,
    ));
    let e = sync(&mut f, &mut doc, since + 20);
    let a = of_kind(&e, "approval");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["approval_id"], "stale");
    assert_eq!(a[0]["applied"], false);
    assert!(a[0]["detail"].as_str().unwrap().contains("expired"));
    assert!(of_kind(&e, "transition").is_empty());
    assert!(doc.approvals[1].decisions.is_empty());
}

#[test]
fn a_decision_whose_answer_was_lost_is_taken_at_the_next_sync() {
    let (mut f, since) = pending();
    let mut a = approval("lost", since + 10, since + 60_000);
    // A previous sync of this prober wrote the decision; its answer never came back.
    a.decisions.insert(
        "p1".into(),
        Decision {
            at: since + 20,
            applied: true,
            detail: "applied: pending_approval → ready".into(),
        },
    );
    let mut old = approval("old", since + 10, since + 60_000);
    old.decisions.insert(
        "p1".into(),
        Decision {
            at: since + 20 - control::LOST_DECISION_MS,
            applied: true,
            detail: "applied".into(),
        },
    );
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals = vec![old, a];
    let e = sync(&mut f, &mut doc, since + 30);
    let rec = of_kind(&e, "approval");
    assert_eq!(rec.len(), 1, "only the recent one is news: {rec:?}");
    assert_eq!(rec[0]["approval_id"], "lost");
    assert_eq!(of_kind(&e, "transition")[0]["transition"]["to"], "ready");
    assert_eq!(
        doc.probers["p1"].branches["primary"].state,
        ReadinessState::Ready
    );
    // Recorded once.
    assert!(of_kind(&sync(&mut f, &mut doc, since + 40), "approval").is_empty());
}

#[test]
fn a_lost_decision_is_not_applied_once_the_branch_moved_on() {
    let (mut f, since) = pending();
    // The branch fails again: pending_approval → unready.
    let e = drive(&mut f, "primary", since + 500, since + 5000, false);
    assert_eq!(of_kind(&e, "transition")[0]["transition"]["to"], "unready");
    let mut a = approval("lost", since + 10, since + 60_000);
    a.decisions.insert(
        "p1".into(),
        Decision {
            at: since + 20,
            applied: true,
            detail: "applied".into(),
        },
    );
    let mut doc = ControlDoc::new("orders-db");
    doc.approvals.push(a);
    let e = sync(&mut f, &mut doc, since + 5000);
    assert_eq!(of_kind(&e, "approval").len(), 1);
    let n = of_kind(&e, "approval_not_applied");
    assert_eq!(n[0]["state"], "unready");
    assert!(of_kind(&e, "transition").is_empty());
    assert_eq!(
        doc.probers["p1"].branches["primary"].state,
        ReadinessState::Unready
    );
}

fn forced(force: Forced, expires_at: Millis) -> Override {
    Override {
        force,
        by: "op".into(),
        reason: "maintenance".into(),
        at: 0,
        expires_at,
    }
}

#[test]
fn overrides_set_clear_and_expire() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("orders-db");
    doc.overrides
        .insert("primary".into(), forced(Forced::Ready, 10_000));
    let e = sync(&mut f, &mut doc, 1000);
    let o = of_kind(&e, "override");
    assert_eq!(o.len(), 1);
    assert_eq!(
        (&o[0]["branch"], &o[0]["action"]),
        (&"primary".into(), &"set".into())
    );
    assert_eq!(o[0]["override"]["force"], "ready");
    let b = batches(&e);
    assert_eq!(b[0].reason, PublishReason::Override);
    assert_eq!(readiness_values(b[0], "primary"), [1.0]);
    // Unchanged at the next sync: nothing new.
    assert!(sync(&mut f, &mut doc, 2000).is_empty());
    // The tick publishes the forced value.
    let e = f.handle(Input::Tick { last: false }, 3000);
    assert_eq!(readiness_values(batches(&e)[0], "primary"), [1.0]);
    // Cleared by the operator: the computed value (unready) is published at once.
    doc.overrides.clear();
    let e = sync(&mut f, &mut doc, 4000);
    assert_eq!(of_kind(&e, "override")[0]["action"], "cleared");
    assert!(of_kind(&e, "override")[0].get("override").is_none());
    assert_eq!(readiness_values(batches(&e)[0], "primary"), [0.0]);
    // Set again, then it expires at a tick: recorded once, not again at the next sync
    // that still reads the expired copy.
    doc.overrides
        .insert("primary".into(), forced(Forced::Ready, 6000));
    assert_eq!(of_kind(&sync(&mut f, &mut doc, 5000), "override").len(), 1);
    let e = f.handle(Input::Tick { last: false }, 6000);
    let o = of_kind(&e, "override");
    assert_eq!(o[0]["action"], "expired");
    let b = batches(&e);
    assert_eq!(b[0].reason, PublishReason::Override);
    assert_eq!(readiness_values(b[0], "primary"), [0.0]);
    assert_eq!(b[1].reason, PublishReason::Tick);
    assert_eq!(readiness_values(b[1], "primary"), [0.0]);
    assert!(of_kind(&sync(&mut f, &mut doc, 7000), "override").is_empty());
}

#[test]
fn a_transition_under_an_override_publishes_the_forced_value() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("orders-db");
    doc.overrides
        .insert("primary".into(), forced(Forced::Unready, 60_000));
    sync(&mut f, &mut doc, 100);
    let e = drive(&mut f, "primary", 500, 5000, true);
    let t = of_kind(&e, "transition");
    assert_eq!(t[0]["transition"]["to"], "pending_approval");
    assert_eq!(t[0]["published"], 0.0);
    assert_eq!(t[0]["override"]["force"], "unready");
}

#[test]
fn both_unready_is_logged_once_and_rearmed() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let flagged = |e: &[Effect]| {
        let r = of_kind(e, "both_branches_unready").len();
        let l = logs(e)
            .iter()
            .filter(|l| l.level == Level::Error && l.message.starts_with("NO BRANCH IS READY"))
            .count();
        assert_eq!(r, l);
        r
    };
    let fail_open = |e: &[Effect]| {
        batches(e)
            .last()
            .unwrap()
            .datums
            .iter()
            .find(|d| d.metric == "BothBranchesUnready")
            .map(|d| d.value.clone())
    };
    let e = f.handle(Input::Tick { last: false }, 1000);
    assert_eq!(flagged(&e), 1);
    assert_eq!(fail_open(&e), Some(Value::Single(1.0)));
    let e = f.handle(Input::Tick { last: false }, 2000);
    assert_eq!(flagged(&e), 0, "once per spell");
    assert_eq!(fail_open(&e), Some(Value::Single(1.0)), "the datum goes on");
    // One branch ready (forced): the spell ends and re-arms.
    let mut doc = ControlDoc::new("orders-db");
    doc.overrides
        .insert("secondary".into(), forced(Forced::Ready, 3500));
    sync(&mut f, &mut doc, 2500);
    let e = f.handle(Input::Tick { last: false }, 3000);
    assert_eq!(flagged(&e), 0);
    assert_eq!(fail_open(&e), Some(Value::Single(0.0)));
    let e = f.handle(Input::Tick { last: false }, 4000);
    assert_eq!(flagged(&e), 1, "a new spell is flagged again");
}

#[test]
fn no_fail_open_flag_while_a_branch_is_unknown() {
    let p = Policy {
        initial: ReadinessState::Unknown,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    let e = f.handle(Input::Tick { last: false }, 1000);
    assert!(of_kind(&e, "both_branches_unready").is_empty());
}

#[test]
fn a_tick_publishes_what_happened_since_the_last_one() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    drive(&mut f, "primary", 100, 1600, true);
    f.handle(attempt("secondary", 1, 1000, false), 1000);
    let e = f.handle(Input::Tick { last: false }, 2000);
    let b = batches(&e);
    assert_eq!(b.len(), 1);
    let count = |metric: &str, branch: &str| {
        b[0].datums
            .iter()
            .find(|d| d.metric == metric && d.dimensions[1].1 == branch)
            .map(|d| d.value.clone())
    };
    assert_eq!(count("Attempts", "primary"), Some(Value::Single(3.0)));
    assert_eq!(
        count("FailedAttempts", "secondary"),
        Some(Value::Single(1.0))
    );
    assert!(b[0].datums.iter().any(|d| d.metric == "Heartbeat"));
    let e = f.handle(Input::Tick { last: true }, 3000);
    let b = batches(&e);
    let last = b.last().unwrap();
    assert_eq!(last.reason, PublishReason::Final);
    assert!(
        last.datums
            .iter()
            .any(|d| d.metric == "Attempts" && d.value == Value::Single(0.0))
    );
    let (s, _) = f.finish(3000, "SIGTERM", 0);
    assert_eq!(s.attempts["primary"], 3);
    assert_eq!(s.attempts["secondary"], 1);
}

#[test]
fn saved_state_is_restored_and_unknown_branches_are_named() {
    let (f, _) = pending();
    let snap = f.sync_request(0).readiness["primary"].snapshot();
    let mut doc = ControlDoc::new("orders-db");
    doc.probers.insert(
        "p1".into(),
        ProberState {
            saved_at: 0,
            branches: [
                ("primary".to_string(), snap.clone()),
                ("gone".to_string(), snap),
            ]
            .into_iter()
            .collect(),
        },
    );
    let (f, e) = start(&doc);
    assert_eq!(f.restored(0).len(), 1);
    assert_eq!(f.restored(0)[0].state, ReadinessState::PendingApproval);
    assert!(
        logs(&e)
            .iter()
            .any(|l| l.level == Level::Warn && l.fields.branch.as_deref() == Some("gone"))
    );
}

#[test]
fn saved_state_dated_ahead_is_named_and_clamped() {
    let (f, _) = pending();
    let snap = f.sync_request(0).readiness["primary"].snapshot();
    let saved_since = snap.since.expect("pending has a since");
    let mut doc = ControlDoc::new("orders-db");
    let branches = [("primary".to_string(), snap)].into_iter().collect();
    doc.probers.insert(
        "p1".into(),
        ProberState {
            saved_at: 0,
            branches,
        },
    );
    // This host's clock reads 0: everything saved lies ahead of it.
    let (f, e) = start(&doc);
    assert!(saved_since > 0);
    assert!(logs(&e).iter().any(|l| l.level == Level::Warn
        && l.message.contains("dated after this host's clock")
        && l.fields.branch.as_deref() == Some("primary")));
    assert_eq!(f.sync_request(0).readiness["primary"].since(), Some(0));
}

fn report(batch: u64, sink: &'static str, error: Option<&str>) -> Input {
    Input::SinkReport(SinkReport {
        batch,
        sink: SinkId::of(sink),
        datums: 5,
        sent: if error.is_some() { 0 } else { 5 },
        tries: 3,
        outcome: match error {
            Some(_) => PublishOutcome::Failed,
            None => PublishOutcome::Sent,
        },
        class: error.map(|_| PublishFailureClass::PublishUnreachable),
        error: error.map(Into::into),
    })
}

/// A report of a batch the sink's queue dropped untried.
fn untried(batch: u64, sink: &'static str, outcome: PublishOutcome) -> Input {
    Input::SinkReport(SinkReport {
        batch,
        sink: SinkId::of(sink),
        datums: 5,
        sent: 0,
        tries: 0,
        outcome,
        class: None,
        error: Some("dropped".into()),
    })
}

#[test]
fn failures_are_classed_and_counted_on_emf_only() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let b1 = batches(&f.handle(Input::Tick { last: false }, 1000))[0].id;
    let b2 = batches(&f.handle(Input::Tick { last: false }, 2000))[0].id;
    let b3 = batches(&f.handle(Input::Tick { last: false }, 3000))[0].id;
    let e = f.handle(report(b1, "cloudwatch", Some("connection reset")), 3100);
    let p = of_kind(&e, "publish");
    assert_eq!(
        (&p[0]["outcome"], &p[0]["class"]),
        (&"failed".into(), &"publish_unreachable".into())
    );
    let l = logs(&e)[0];
    assert_eq!(l.fields.class.as_deref(), Some("publish_unreachable"));
    // Dropped untried: counted as dropped, no class, no PublishFailures.
    for (b, outcome) in [
        (b2, PublishOutcome::DroppedQueueFull),
        (b3, PublishOutcome::Expired),
    ] {
        let e = f.handle(untried(b, "cloudwatch", outcome), 3200);
        let p = of_kind(&e, "publish");
        assert_eq!(p[0]["outcome"], <&str>::from(outcome));
        assert_eq!(p[0]["class"], serde_json::Value::Null);
    }
    let e = f.handle(Input::Tick { last: false }, 4000);
    let bs = batches(&e);
    assert_eq!(bs.len(), 2, "the tick and the PublishFailures batch");
    assert_eq!(names(&bs[0].sinks), SINKS);
    assert_eq!(names(&bs[1].sinks), ["emf"]);
    assert_eq!(bs[1].reason, PublishReason::PublishFailures);
    let d: Vec<_> = bs[1]
        .datums
        .iter()
        .map(|d| (d.metric, d.dimensions.clone(), d.value.clone(), d.timestamp))
        .collect();
    assert_eq!(
        d,
        [(
            "PublishFailures",
            vec![
                ("Service", "orders-db".to_string()),
                ("Class", "publish_unreachable".to_string())
            ],
            Value::Single(1.0),
            4000
        )]
    );
    // Counted once: the next tick has nothing to add.
    assert_eq!(
        batches(&f.handle(Input::Tick { last: false }, 5000)).len(),
        1
    );
    let (s, _) = f.finish(6000, "duration", 0);
    assert_eq!(s.dropped_batches["cloudwatch"], 3);
}

#[test]
fn every_batch_is_accounted_for_per_sink() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let id = |e: &[Effect]| batches(e)[0].id;
    let b1 = id(&f.handle(Input::Tick { last: false }, 1000));
    // Dropped from a full queue at cloudwatch; sent by emf.
    let e = f.handle(
        untried(b1, "cloudwatch", PublishOutcome::DroppedQueueFull),
        1001,
    );
    let p = of_kind(&e, "publish");
    assert_eq!(
        (&p[0]["dropped"], &p[0]["tries"], &p[0]["outcome"]),
        (&true.into(), &0.into(), &"dropped_queue_full".into())
    );
    assert_eq!(p[0]["reason"], "tick");
    let e = f.handle(report(b1, "emf", None), 1002);
    assert_eq!(of_kind(&e, "publish")[0]["dropped"], false);
    // A report for a batch already accounted is not counted twice.
    assert!(f.handle(report(b1, "emf", None), 1003).is_empty());
    // Failed send at cloudwatch; emf never reports (abandoned at shutdown).
    let b2 = id(&f.handle(Input::Tick { last: false }, 2000));
    let e = f.handle(report(b2, "cloudwatch", Some("connection refused")), 2500);
    let p = of_kind(&e, "publish");
    assert_eq!(
        (&p[0]["dropped"], &p[0]["tries"]),
        (&true.into(), &3.into())
    );
    assert_eq!(p[0]["error"], "connection refused");
    // A closed queue (the sink's task ended). The failure above is counted on emf.
    let e = f.handle(Input::Tick { last: true }, 3000);
    let b3 = id(&e);
    let counted = &batches(&e)[1];
    assert_eq!(names(&counted.sinks), ["emf"]);
    f.handle(report(counted.id, "emf", None), 3001);
    f.handle(
        Input::SinkRefused {
            sink: SinkId::of("cloudwatch"),
            batch: b3,
            why: Refusal::Closed,
        },
        3000,
    );
    f.handle(report(b3, "emf", None), 3001);
    let e = f.abandon_unsent(3100);
    let p = of_kind(&e, "publish");
    assert_eq!(p.len(), 1);
    assert_eq!(
        (&p[0]["sink"], &p[0]["dropped"]),
        (&"emf".into(), &true.into())
    );
    assert!(
        p[0]["error"]
            .as_str()
            .unwrap()
            .contains("abandoned at shutdown")
    );
    let (s, e) = f.finish(3200, "SIGTERM", 0);
    let want: BTreeMap<String, u64> = [("cloudwatch".into(), 3), ("emf".into(), 1)].into();
    assert_eq!(s.dropped_batches, want);
    let stop = of_kind(&e, "stop");
    assert_eq!(stop[0]["dropped_batches"]["cloudwatch"], 3);
    // The last line says which sink published nothing.
    let last = logs(&e)[0];
    assert_eq!(last.level, Level::Error);
    assert!(
        last.message
            .contains("sink cloudwatch dropped every batch (3 of 3)"),
        "{}",
        last.message
    );
    assert!(!last.message.contains("emf dropped"));
    assert_eq!(
        last.fields.dropped_batches.as_deref(),
        Some(r#"{"cloudwatch":3,"emf":1}"#)
    );
}

#[test]
fn a_clean_run_stops_quietly() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let b = batches(&f.handle(Input::Tick { last: true }, 1000))[0].id;
    for sink in SINKS {
        f.handle(report(b, sink, None), 1001);
    }
    assert!(f.abandon_unsent(1002).is_empty());
    let (s, e) = f.finish(1003, "duration", 2);
    assert!(s.dropped_batches.is_empty());
    assert_eq!(s.evidence_write_failures, 2);
    let last = logs(&e)[0];
    assert_eq!(
        (last.level, last.message.as_str()),
        (Level::Info, "stopped")
    );
    assert_eq!(last.fields.dropped_batches, None);
}

#[test]
fn an_abandoned_attempt_is_counted_not_folded() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let e = f.handle(
        Input::Abandoned {
            service: 0,
            branch: "primary".into(),
            seq: 7,
        },
        100,
    );
    assert_eq!(of_kind(&e, "attempt_abandoned")[0]["seq"], 7);
    let e = f.handle(
        Input::SyncFailed {
            service: 0,
            error: "disk on fire".into(),
            class: StoreSyncFailureClass::Io,
            started: Some(50),
        },
        100,
    );
    let r = &of_kind(&e, "state_sync_failed")[0];
    assert_eq!((&r["started_at"], &r["class"]), (&50.into(), &"io".into()));
    let (s, _) = f.finish(200, "SIGINT", 0);
    assert_eq!((s.abandoned, s.state_sync_failures), (1, 1));
    assert!(s.attempts.is_empty());
}

/// Services of one run: a tick packs every service in a namespace into one batch, each datum
/// with its own `Service`; an attempt, a sync and a record belong to their own service.
#[test]
fn a_tick_packs_every_service_of_a_namespace_into_one_batch() {
    let branches = ["primary".to_string(), "secondary".to_string()];
    let docs = [
        ControlDoc::new("orders-db"),
        ControlDoc::new("payments-db"),
        ControlDoc::new("telemetry"),
    ];
    let p = policy();
    let svc = |i: usize, service, namespace| ServiceSetup {
        sinks: &DEFAULT_SINKS,
        service,
        namespace,
        policy: &p,
        branches: &branches,
        store_location: "memory",
        doc: &docs[i],
    };
    let services = [
        svc(0, "orders-db", "Readyprobe"),
        svc(1, "payments-db", "Readyprobe"),
        svc(2, "telemetry", "Telemetry"),
    ];
    let unavailable = [(
        "broken-db".to_string(),
        "Readyprobe".to_string(),
        DEFAULT_SINKS.to_vec(),
    )];
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &unavailable,
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Full,
    };
    let (mut f, _) = Fold::start(setup, 0);
    let mut a = Attempt::internal_failure("primary", 1, 0, 10, "x".into());
    a.outcome = Outcome::Success;
    let e = f.handle(Input::Attempt(1, Box::new(a)), 10);
    let r = of_kind(&e, "attempt");
    assert_eq!(r.len(), 1);
    let Effect::Record(_, service, _) = e.iter().find(|e| matches!(e, Effect::Record(..))).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(service, "payments-db");

    let e = f.handle(Input::Tick { last: false }, 1000);
    let b = batches(&e);
    assert_eq!(b.len(), 2, "one batch per namespace: {b:?}");
    let services_of = |b: &Batch, metric: &str| -> Vec<String> {
        b.datums
            .iter()
            .filter(|d| d.metric == metric)
            .map(|d| d.dimensions[0].1.clone())
            .collect()
    };
    let (main, tele) = (b[0], b[1]);
    assert_eq!(main.namespace, "Readyprobe");
    assert_eq!(services_of(main, "Heartbeat"), ["orders-db", "payments-db"]);
    assert_eq!(services_of(main, "ServiceUnavailable"), ["broken-db"]);
    assert_eq!(tele.namespace, "Telemetry");
    assert_eq!(services_of(tele, "Heartbeat"), ["telemetry"]);
    // Only payments-db/primary attempted.
    let attempts: Vec<(String, f64)> = main
        .datums
        .iter()
        .filter(|d| d.metric == "Attempts")
        .map(|d| {
            let Value::Single(v) = d.value else { panic!() };
            (format!("{}/{}", d.dimensions[0].1, d.dimensions[1].1), v)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    assert_eq!(attempts, [("payments-db/primary".to_string(), 1.0)]);
    // A sync of one service's document touches only its branches.
    assert_eq!(f.sync_request(2).readiness.len(), 2);
    let s = f.finish(2000, "test", 0).0;
    assert_eq!(s.attempts["payments-db/primary"], 1);
    assert_eq!(s.final_states.len(), 6);
}

fn new_service(id: ServiceId, name: &str, doc: ControlDoc) -> Input {
    Input::AddService(Box::new(NewService {
        sinks: DEFAULT_SINKS.to_vec(),
        id,
        service: name.into(),
        namespace: "Readyprobe".into(),
        policy: policy(),
        branches: vec!["primary".into(), "secondary".into()],
        store_location: "memory".into(),
        doc,
        start: Box::default(),
        by_reload: true,
    }))
}

/// The services with a `Heartbeat` datum in a tick's batches.
fn heartbeats(effects: &[Effect]) -> Vec<String> {
    batches(effects)
        .iter()
        .flat_map(|b| b.datums.iter())
        .filter(|d| d.metric == "Heartbeat")
        .map(|d| d.dimensions[0].1.clone())
        .collect()
}

#[test]
fn a_reload_adds_a_service_restored_from_its_document() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("payments-db");
    let mut saved = Readiness::new(policy());
    saved.record(crate::readiness::AttemptRecord {
        finished_at: 100,
        success: true,
        class: None,
    });
    let snap = Snapshot {
        state: ReadinessState::Ready,
        since: Some(100),
        ..saved.snapshot()
    };
    doc.probers.insert(
        "p1".into(),
        ProberState {
            saved_at: 100,
            branches: [("primary".to_string(), snap)].into(),
        },
    );
    let e = f.handle(new_service(1, "payments-db", doc), 1000);
    assert!(
        logs(&e).iter().any(|l| l.message.contains("added")),
        "{e:?}"
    );
    assert_eq!(f.restored(1).len(), 1);
    assert_eq!(f.restored(1)[0].state, ReadinessState::Ready);
    // Its attempts are its own; the first service's are untouched.
    let mut a = Attempt::internal_failure("primary", 1, 1000, 1010, "x".into());
    a.outcome = Outcome::Success;
    let e = f.handle(Input::Attempt(1, Box::new(a)), 1010);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Record(_, s, Record::Attempt(_)) if s == "payments-db"))
    );
    let e = f.handle(Input::Tick { last: false }, 2000);
    assert_eq!(heartbeats(&e), ["orders-db", "payments-db"]);
    let b = batches(&e);
    assert_eq!(readiness_values(b[0], "primary"), [0.0, 1.0], "{b:?}");
    // An id in use is not taken twice.
    let e = f.handle(new_service(1, "other", ControlDoc::new("other")), 2000);
    assert!(e.is_empty(), "{e:?}");
}

#[test]
fn a_removed_service_stops_and_its_late_events_are_ignored() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    f.handle(
        new_service(1, "payments-db", ControlDoc::new("payments-db")),
        0,
    );
    let e = f.handle(Input::RemoveService(0), 100);
    assert!(
        logs(&e).iter().any(|l| l.message.contains("removed")),
        "{e:?}"
    );
    // An attempt of the removed service that was on its way: no record, no count.
    let e = f.handle(attempt("primary", 1, 200, true), 200);
    assert!(records(&e).is_empty(), "{e:?}");
    let e = f.handle(Input::Tick { last: false }, 1000);
    assert_eq!(heartbeats(&e), ["payments-db"]);
    // Removing it again, or a service never known, does nothing.
    assert!(f.handle(Input::RemoveService(0), 1000).is_empty());
    assert!(f.handle(Input::RemoveService(7), 1000).is_empty());
    let s = f.finish(2000, "test", 0).0;
    assert!(s.attempts.is_empty(), "{:?}", s.attempts);
    // payments-db's two branches only (one service left: keyed by branch name).
    assert_eq!(s.final_states.len(), 2, "{:?}", s.final_states);
}

#[test]
fn a_changed_service_keeps_untouched_branches_and_resets_changed_ones_windows() {
    let (mut f, _) = pending();
    drive(&mut f, "secondary", 500, 5000, false);
    let before = f.sync_request(0).readiness;
    let change = ServiceChange {
        sinks: DEFAULT_SINKS.to_vec(),
        id: 0,
        namespace: "Other".into(),
        policy: policy(),
        branches: vec![
            BranchChange {
                name: "primary".into(),
                reset: true,
            },
            BranchChange {
                name: "tertiary".into(),
                reset: false,
            },
        ],
    };
    let e = f.handle(Input::ChangeService(Box::new(change)), 5000);
    // No transition and nothing published: a reload is not news for Route 53.
    assert!(of_kind(&e, "transition").is_empty(), "{e:?}");
    assert!(batches(&e).is_empty(), "{e:?}");
    let after = f.sync_request(0).readiness;
    let names: Vec<&String> = after.keys().collect();
    assert_eq!(names, ["primary", "tertiary"], "secondary is gone");
    // primary: same state (pending_approval never turns into ready), empty window.
    let p = &after["primary"];
    assert_eq!(p.state(), ReadinessState::PendingApproval);
    assert_eq!(p.since(), before["primary"].since());
    assert_eq!(p.window_stats(5000, Duration::from_secs(10)).finished, 0);
    assert_eq!(p.holding(), (None, None));
    // tertiary: the policy's initial state.
    assert_eq!(after["tertiary"].state(), ReadinessState::Unready);
    let e = f.handle(Input::Tick { last: false }, 6000);
    let b = batches(&e);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].namespace, "Other");
    assert_eq!(readiness_values(b[0], "primary"), [0.0]);
    assert!(readiness_values(b[0], "secondary").is_empty());
}

#[test]
fn an_untouched_branch_of_a_changed_service_keeps_its_window_and_clocks() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    drive(&mut f, "primary", 500, 2000, true);
    let before = f.sync_request(0).readiness["primary"].clone();
    let change = ServiceChange {
        sinks: DEFAULT_SINKS.to_vec(),
        id: 0,
        namespace: "Readyprobe".into(),
        policy: policy(),
        branches: ["primary", "secondary"]
            .map(|n| BranchChange {
                name: n.into(),
                reset: false,
            })
            .into(),
    };
    f.handle(Input::ChangeService(Box::new(change)), 2000);
    let after = f.sync_request(0).readiness["primary"].clone();
    assert_eq!(after.snapshot(), before.snapshot());
    // The ready condition goes on from where it was: pending_approval at the same time as
    // without the reload (see `pending`).
    let e = drive(&mut f, "primary", 2000, 5000, true);
    let t = of_kind(&e, "transition");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["transition"]["to"], "pending_approval");
}

/// A reload that changes the policy but not the branch's target carries its readiness whole
/// (state, window, holding clocks), now judged by the new policy.
#[test]
fn a_carried_branch_keeps_its_window_under_the_new_policy() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    drive(&mut f, "primary", 500, 2000, true);
    let before = f.sync_request(0).readiness["primary"].snapshot();
    let mut stricter = policy();
    stricter.min_attempts += 1;
    let change = ServiceChange {
        sinks: DEFAULT_SINKS.to_vec(),
        id: 0,
        namespace: "Readyprobe".into(),
        policy: stricter.clone(),
        branches: ["primary", "secondary"]
            .map(|n| BranchChange {
                name: n.into(),
                reset: false,
            })
            .into(),
    };
    f.handle(Input::ChangeService(Box::new(change)), 2000);
    let after = &f.sync_request(0).readiness["primary"];
    assert_eq!(after.policy(), &stricter);
    assert_eq!(after.snapshot(), before);
}

/// A service enters the fold with its `start` record first, before the lines of its restore;
/// only one a reload brought is logged as added.
#[test]
fn a_service_enters_with_its_start_record_first() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let e = f.handle(new_service(3, "svc-3", ControlDoc::new("x")), 10);
    assert!(
        matches!(&e[0], Effect::Record(10, s, Record::Start(_)) if s == "svc-3"),
        "{e:?}"
    );
    let added = |e: &[Effect]| {
        e.iter()
            .any(|e| matches!(e, Effect::Log(l) if l.message == "service added by a reload"))
    };
    assert!(added(&e));
    let Input::AddService(mut n) = new_service(4, "svc-4", ControlDoc::new("x")) else {
        unreachable!()
    };
    n.by_reload = false;
    assert!(!added(&f.handle(Input::AddService(n), 20)));
}

/// A service that cannot start and a reload, applied or refused: the fold decides the record
/// and the log line; what a line shows of a service name or a problem is escaped.
#[test]
fn unavailable_services_and_reloads_are_recorded_and_logged() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let problems = vec!["/etc/\u{1b}[31mca.pem: not found".to_string()];
    let e = f.handle(
        Input::ServiceUnavailable {
            service: "billing".into(),
            problems: problems.clone(),
        },
        10,
    );
    assert_eq!(of_kind(&e, "service_unavailable").len(), 1, "{e:?}");
    let line = logs(&e)[0];
    assert_eq!(line.level, Level::Error);
    assert!(!line.fields.problems.as_deref().unwrap().contains('\u{1b}'));
    let applied = Reload {
        applied: true,
        added: (0..7).map(|i| format!("s{i}")).collect(),
        removed: Vec::new(),
        changed: Vec::new(),
        unavailable: Vec::new(),
        problems: Vec::new(),
        removed_branches: Vec::new(),
    };
    let record = Box::new(applied);
    let e = f.handle(
        Input::Reloaded {
            record,
            services: 8,
        },
        20,
    );
    assert_eq!(of_kind(&e, "reload").len(), 1, "{e:?}");
    let line = logs(&e)[0];
    assert_eq!(line.message, "reload applied");
    assert_eq!(
        line.fields.added.as_deref(),
        Some("s0, s1, s2, s3, s4 and 2 more")
    );
    assert_eq!(line.fields.services, Some(8));
    let refused = Reload {
        applied: false,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
        unavailable: Vec::new(),
        problems: vec!["dns.timeout changed".into()],
        removed_branches: Vec::new(),
    };
    let record = Box::new(refused);
    let e = f.handle(
        Input::Reloaded {
            record,
            services: 8,
        },
        30,
    );
    let line = logs(&e)[0];
    assert_eq!(line.level, Level::Error);
    assert_eq!(line.fields.problems.as_deref(), Some("dns.timeout changed"));
}

/// Another process under this prober id: the fold records it and says so at ERROR, naming the
/// store.
#[test]
fn a_duplicate_prober_is_recorded_and_logged() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let d = crate::record::DuplicateProber {
        state_store: "s3://bucket/orders-db.json".into(),
        instance: "a".into(),
        other_instance: "b".into(),
        other_saved_at: 5,
    };
    let e = f.handle(Input::DuplicateProber(Box::new(d)), 10);
    assert_eq!(of_kind(&e, "duplicate_prober").len(), 1, "{e:?}");
    let line = logs(&e)[0];
    assert_eq!(line.level, Level::Error);
    assert!(
        line.message.contains("another readyprobe process"),
        "{line:?}"
    );
    assert_eq!(
        line.fields.state.as_deref(),
        Some("s3://bucket/orders-db.json")
    );
}

#[test]
fn a_fleet_stopped_line_gives_totals_not_every_branch() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    for id in 1..5 {
        f.handle(
            new_service(id, &format!("svc-{id}"), ControlDoc::new("x")),
            10,
        );
    }
    let mut a = Attempt::internal_failure("primary", 1, 100, 110, "x".into());
    a.outcome = Outcome::Success;
    f.handle(Input::Attempt(2, Box::new(a)), 110);
    let (s, e) = f.finish(200, "duration", 0);
    assert_eq!(s.final_states.len(), 10, "the summary keeps every branch");
    let line = logs(&e)[0];
    assert_eq!(line.fields.attempts.as_deref(), Some("1"));
    let states: BTreeMap<String, u64> =
        serde_json::from_str(line.fields.states.as_deref().unwrap()).unwrap();
    assert_eq!(states.values().sum::<u64>(), 10, "{states:?}");
}

/// The `Service` of every record among the effects, in order.
fn record_services(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record(_, s, _) => Some(s.as_str()),
            _ => None,
        })
        .collect()
}

fn ok_attempt(branch: &str, seq: u64, at: Millis) -> Box<Attempt> {
    let mut a = Attempt::internal_failure(branch, seq, at - 10, at, "x".into());
    a.outcome = Outcome::Success;
    Box::new(a)
}

/// A service's branches are kept per service: after an add, a remove and a change (a branch
/// added, one dropped), attempts, ticks, syncs and overrides land on that service's branches
/// only, and every other service's are untouched.
#[test]
fn branches_stay_with_their_service_across_add_remove_and_change() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    f.handle(
        new_service(1, "payments-db", ControlDoc::new("payments-db")),
        0,
    );
    f.handle(new_service(2, "telemetry", ControlDoc::new("telemetry")), 0);
    f.handle(Input::RemoveService(1), 10);
    let change = ServiceChange {
        sinks: DEFAULT_SINKS.to_vec(),
        id: 0,
        namespace: "Readyprobe".into(),
        policy: policy(),
        branches: ["secondary", "tertiary"]
            .map(|n| BranchChange {
                name: n.into(),
                reset: false,
            })
            .into(),
    };
    f.handle(Input::ChangeService(Box::new(change)), 20);
    let names = |f: &Fold, s| f.sync_request(s).readiness.into_keys().collect::<Vec<_>>();
    assert_eq!(names(&f, 0), ["secondary", "tertiary"]);
    assert!(names(&f, 1).is_empty());
    assert_eq!(names(&f, 2), ["primary", "secondary"]);
    for t in (100i64..3000).step_by(100) {
        f.handle(Input::Attempt(2, ok_attempt("primary", t as u64, t)), t);
    }
    // orders-db has no primary any more: its attempt is recorded for it and folds nowhere.
    let e = f.handle(Input::Attempt(0, ok_attempt("primary", 1, 2990)), 2990);
    assert_eq!(record_services(&e), ["orders-db"]);
    let finished = |f: &Fold, s, b: &str| {
        f.sync_request(s).readiness[b]
            .window_stats(3000, Duration::from_secs(10))
            .finished
    };
    assert_eq!(finished(&f, 2, "primary"), 29);
    assert_eq!(finished(&f, 2, "secondary"), 0);
    assert_eq!(finished(&f, 0, "secondary"), 0);
    let e = f.handle(Input::Tick { last: false }, 3000);
    assert_eq!(heartbeats(&e), ["orders-db", "telemetry"]);
    let attempts: Vec<(String, f64)> = batches(&e)
        .iter()
        .flat_map(|b| b.datums.iter())
        .filter(|d| d.metric == "Attempts")
        .map(|d| {
            let Value::Single(v) = d.value else { panic!() };
            (format!("{}/{}", d.dimensions[0].1, d.dimensions[1].1), v)
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("orders-db/secondary".to_string(), 0.0),
            ("orders-db/tertiary".to_string(), 0.0),
            ("telemetry/primary".to_string(), 29.0),
            ("telemetry/secondary".to_string(), 0.0),
        ]
    );
    // An override in orders-db's document reaches orders-db/tertiary only.
    let mut doc = ControlDoc::new("orders-db");
    let ov = forced(Forced::Unready, 60_000);
    doc.overrides.insert("tertiary".into(), ov);
    let e = f.handle(
        Input::SyncDone {
            service: 0,
            doc,
            decided: Vec::new(),
            markers: Vec::new(),
            dropped: Vec::new(),
        },
        3100,
    );
    let b = batches(&e);
    assert_eq!(b.len(), 1, "{e:?}");
    let d = &b[0].datums;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].dimensions[0].1, "orders-db");
    assert_eq!(d[0].dimensions[1].1, "tertiary");
    let s = f.finish(4000, "test", 0).0;
    let keys: Vec<&String> = s.final_states.keys().collect();
    assert_eq!(
        keys,
        [
            "orders-db/secondary",
            "orders-db/tertiary",
            "telemetry/primary",
            "telemetry/secondary"
        ]
    );
}

/// Loops a reload stopped: an attempt that finished before its loop stopped is recorded and
/// counted for its service (by name, also when the service is gone), one cut off is recorded as
/// abandoned with cause `reload`; neither enters a window.
#[test]
fn attempts_of_loops_a_reload_stopped_are_recorded_never_folded() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    f.handle(
        new_service(1, "payments-db", ControlDoc::new("payments-db")),
        0,
    );
    f.handle(Input::RemoveService(1), 10);
    let late = Input::StoppedAttempt {
        service: "payments-db".into(),
        attempt: ok_attempt("primary", 4, 20),
    };
    let e = f.handle(late, 30);
    assert_eq!(of_kind(&e, "attempt")[0]["seq"], 4);
    assert_eq!(of_kind(&e, "attempt")[0]["not_counted"], true);
    assert_eq!(record_services(&e), ["payments-db"]);
    let cut = Input::CancelledByReload {
        service: "payments-db".into(),
        branch: "primary".into(),
        seq: 5,
    };
    let e = f.handle(cut, 40);
    let r = of_kind(&e, "attempt_abandoned");
    assert_eq!(
        (r[0]["seq"].as_u64(), r[0]["cause"].as_str()),
        (Some(5), Some("reload"))
    );
    assert_eq!(record_services(&e), ["payments-db"]);
    // The old loop of a restarted branch of a running service: recorded, not in its window.
    let mut failed = ok_attempt("primary", 9, 50);
    failed.outcome = Attempt::internal_failure("primary", 9, 40, 50, "x".into()).outcome;
    let e = f.handle(
        Input::StoppedAttempt {
            service: "orders-db".into(),
            attempt: failed,
        },
        50,
    );
    assert_eq!(record_services(&e), ["orders-db"]);
    let w = f.sync_request(0).readiness["primary"].window_stats(60, Duration::from_secs(10));
    assert_eq!(w.finished, 0);
    let s = f.finish(100, "test", 0).0;
    assert_eq!((s.abandoned, s.transitions), (1, 0));
    let counted: Vec<(&String, &u64)> = s.attempts.iter().collect();
    assert_eq!(
        counted,
        [
            (&"payments-db/primary".to_string(), &1),
            (&"primary".to_string(), &1)
        ]
    );
}

/// Not a check: the cost of a tick and of a sync request per service at 1,000 services of two
/// branches (`cargo test --lib tick_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement"]
fn tick_cost_at_a_thousand_services() {
    let branches = ["primary".to_string(), "secondary".to_string()];
    let names: Vec<String> = (0..1000).map(|i| format!("svc-{i:04}")).collect();
    let docs: Vec<ControlDoc> = names.iter().map(|n| ControlDoc::new(n)).collect();
    let p = policy();
    let services: Vec<ServiceSetup<'_>> = names
        .iter()
        .zip(&docs)
        .map(|(n, doc)| ServiceSetup {
            sinks: &DEFAULT_SINKS,
            service: n,
            namespace: "Readyprobe",
            policy: &p,
            branches: &branches,
            store_location: "memory",
            doc,
        })
        .collect();
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Full,
    };
    let (mut f, _) = Fold::start(setup, 0);
    let ticks = 20;
    let t0 = std::time::Instant::now();
    for i in 1..=ticks {
        f.handle(Input::Tick { last: false }, i * 1000);
    }
    let tick = t0.elapsed() / ticks as u32;
    let t0 = std::time::Instant::now();
    for s in 0..1000 {
        std::hint::black_box(f.sync_request(s));
    }
    let syncs = t0.elapsed();
    println!(
        "1,000 services × 2 branches: one tick {tick:?}; a sync request for every service {syncs:?}"
    );
}

#[test]
fn a_stable_name_round_is_recorded_for_its_service_and_never_reaches_a_window() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let round = |service| Input::StableName {
        service,
        record: Box::new(StableNameRecord {
            stable_name: "orders-db.example.test".into(),
            answers: vec![],
            selected: Some("secondary".into()),
            unknown_target: false,
            ambiguous: vec![],
            class: None,
            error: None,
            branch_failures: BTreeMap::new(),
            end_to_end: None,
        }),
        selected: 2.0,
    };
    let selected = |e: &[Effect]| -> Vec<Value> {
        batches(e)
            .iter()
            .flat_map(|b| b.datums.iter())
            .filter(|d| d.metric == "SelectedBranch")
            .map(|d| d.value.clone())
            .collect()
    };
    // No round yet: no datum.
    assert!(selected(&f.handle(Input::Tick { last: false }, 5)).is_empty());
    let e = f.handle(round(0), 10);
    let r = of_kind(&e, "stable_name");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["selected"], "secondary");
    assert_eq!(record_services(&e), ["orders-db"]);
    let w = f.sync_request(0).readiness["primary"].window_stats(20, Duration::from_secs(10));
    assert_eq!(w.finished, 0);
    // A round of a service that is gone is dropped.
    assert!(of_kind(&f.handle(round(7), 20), "stable_name").is_empty());
    // The latest round's value, at every tick until the next round.
    for t in [30, 40] {
        let e = f.handle(Input::Tick { last: false }, t);
        assert_eq!(selected(&e), [Value::Single(2.0)]);
    }
}

/// `StableNameSuccess` follows the latest round's end-to-end attempt: none without one, 1 on
/// success, 0 on failure; a reload that stops the loop stops both stable-name datums.
#[test]
fn stable_name_success_follows_the_latest_end_to_end_attempt() {
    use crate::failure::{FailureClass, Step};
    use crate::probe::Outcome;
    use crate::record::EndToEnd;
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let round = |outcome: Option<Outcome>| Input::StableName {
        service: 0,
        record: Box::new(StableNameRecord {
            stable_name: "orders-db.example.test".into(),
            answers: vec![],
            selected: Some("primary".into()),
            unknown_target: false,
            ambiguous: vec![],
            class: None,
            error: None,
            branch_failures: BTreeMap::new(),
            end_to_end: outcome.map(|outcome| EndToEnd {
                started_at: 1,
                finished_at: 2,
                address: None,
                outcome,
            }),
        }),
        selected: 1.0,
    };
    let metric = |e: &[Effect], name: &str| -> Vec<Value> {
        batches(e)
            .iter()
            .flat_map(|b| b.datums.iter())
            .filter(|d| d.metric == name)
            .map(|d| d.value.clone())
            .collect()
    };
    let tick = |f: &mut Fold, t| f.handle(Input::Tick { last: false }, t);
    assert!(metric(&tick(&mut f, 5), "StableNameSuccess").is_empty());
    f.handle(round(None), 10);
    assert!(metric(&tick(&mut f, 15), "StableNameSuccess").is_empty());
    f.handle(round(Some(Outcome::Success)), 20);
    assert_eq!(
        metric(&tick(&mut f, 25), "StableNameSuccess"),
        [Value::Single(1.0)]
    );
    let failed = Outcome::Failure {
        step: Step::Connect,
        class: FailureClass::TcpRefused,
        message: "connection refused".into(),
    };
    f.handle(round(Some(failed)), 30);
    let e = tick(&mut f, 35);
    assert_eq!(metric(&e, "StableNameSuccess"), [Value::Single(0.0)]);
    assert_eq!(metric(&e, "SelectedBranch"), [Value::Single(1.0)]);
    f.handle(Input::StableNameStopped { service: 0 }, 40);
    let e = tick(&mut f, 45);
    assert!(metric(&e, "StableNameSuccess").is_empty());
    assert!(metric(&e, "SelectedBranch").is_empty());
}

/// The pace of each branch, in order: `(branch, suspect)` per [`Effect::Pace`].
fn paces(effects: &[Effect]) -> Vec<(String, bool)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Pace {
                branch, suspect, ..
            } => Some((branch.clone(), suspect.is_some())),
            _ => None,
        })
        .collect()
}

/// A branch becomes suspect at the first attempt that makes its unready condition hold, stays
/// suspect through the unready spell, and stops being suspect when it is ready again: one
/// `Pace` effect each way, none per attempt, none for the healthy branch.
#[test]
fn pace_effects_only_when_a_branch_becomes_or_stops_being_suspect() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    let mut out = drive(&mut f, "primary", 0, 5_000, true);
    out.extend(drive(&mut f, "secondary", 0, 60_000, true));
    assert!(paces(&out).is_empty(), "{:?}", paces(&out));
    let out = drive(&mut f, "primary", 5_000, 5_500, false);
    assert_eq!(paces(&out), [("primary".to_string(), true)]);
    assert!(matches!(
        f.suspect(0, "primary"),
        Some(Suspect::UnreadyHolding(5_000))
    ));
    let out = drive(&mut f, "primary", 5_500, 8_000, false);
    assert_eq!(f.suspect(0, "primary"), Some(Suspect::Unready));
    assert!(paces(&out).is_empty(), "{:?}", paces(&out));
    let out = drive(&mut f, "primary", 8_000, 30_000, true);
    assert_eq!(paces(&out), [("primary".to_string(), false)]);
    assert_eq!(f.suspect(0, "primary"), None);
    assert_eq!(f.suspect(0, "secondary"), None);
}

/// A branch's `for` runs out between attempts: the wake-up at the fold's deadline makes the
/// transition there, publishes it alone (no tick batch), and hands out no deadline again.
#[test]
fn a_wake_up_at_the_deadline_makes_the_transition_without_a_tick() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    assert_eq!(f.next_wakeup(), None);
    // Failures at 0, 500 and 1000 ms: the unready condition holds from 500 (two attempts), its
    // 1 s `for` runs out at 1500; the secondary's from 750, at 1750.
    let e = drive(&mut f, "primary", 0, 1250, false);
    assert!(of_kind(&e, "transition").is_empty());
    f.handle(attempt("secondary", 1, 250, false), 250);
    f.handle(attempt("secondary", 2, 750, false), 750);
    assert_eq!(f.next_wakeup(), Some(1500));
    let e = f.handle(Input::Wake, 1500);
    let t = of_kind(&e, "transition");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["branch"], "primary");
    assert_eq!(t[0]["transition"]["at"], 1500);
    assert_eq!(t[0]["transition"]["held_since"], 500);
    let reasons: Vec<_> = batches(&e).iter().map(|b| b.reason).collect();
    assert_eq!(reasons, [PublishReason::Transition], "no tick batch");
    // The transition and its batch's publish records name the same batch.
    let id = batches(&e)[0].id;
    assert_eq!(t[0]["batch"], id);
    let p = of_kind(&f.handle(report(id, "emf", None), 1510), "publish");
    assert_eq!(
        (p[0]["batch"].as_u64(), &p[0]["reason"]),
        (Some(id), &Json::from("transition"))
    );
    assert_eq!(f.next_wakeup(), Some(1750));
    let e = f.handle(Input::Wake, 1750);
    assert_eq!(of_kind(&e, "transition")[0]["branch"], "secondary");
    // Nothing holds any more: no deadline, and a wake-up changes nothing.
    assert_eq!(f.next_wakeup(), None);
    let e = f.handle(Input::Wake, 1750);
    assert!(batches(&e).is_empty() && records(&e).is_empty(), "{e:?}");
}

/// An attempt that makes the transition before the wake-up leaves the cached deadline early: the
/// wake-up then finds nothing, and the one after is computed afresh (none here), never the same.
#[test]
fn an_early_wake_up_finds_nothing_and_is_not_repeated() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    drive(&mut f, "primary", 0, 1250, false);
    assert_eq!(f.next_wakeup(), Some(1500));
    let e = f.handle(attempt("primary", 9, 1600, false), 1600);
    assert_eq!(of_kind(&e, "transition").len(), 1);
    assert_eq!(f.next_wakeup(), Some(1500), "cached: early, never late");
    let e = f.handle(Input::Wake, 1600);
    assert!(records(&e).is_empty() && batches(&e).is_empty(), "{e:?}");
    assert_eq!(f.next_wakeup(), None);
}

/// A branch is evaluated at its own deadlines, attempts and ticks, never at another branch's
/// deadline: its decision does not depend on when other branches' rules run out (as in the
/// decision simulation). Here the primary's wake-up at 20.5 s falls where the secondary's
/// window briefly holds one attempt; the secondary still fires at its own deadline.
#[test]
fn a_branch_is_not_evaluated_at_another_branch_deadline() {
    let mut p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    p.declare_unready.for_ = Duration::from_secs(20);
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    f.handle(attempt("primary", 1, 0, false), 0);
    f.handle(attempt("primary", 2, 500, false), 500);
    for (seq, at) in [(1, 9_000), (2, 9_500), (3, 19_200)] {
        f.handle(attempt("secondary", seq, at, false), at);
    }
    assert_eq!(f.next_wakeup(), Some(20_500));
    // The primary's window is empty by then: no transition, its clock stops.
    let e = f.handle(Input::Wake, 20_500);
    assert!(of_kind(&e, "transition").is_empty(), "{e:?}");
    for (seq, at) in [(4, 20_700), (5, 29_000)] {
        f.handle(attempt("secondary", seq, at, false), at);
    }
    assert_eq!(f.next_wakeup(), Some(29_500));
    let e = f.handle(Input::Wake, 29_500);
    let t = of_kind(&e, "transition");
    assert_eq!(t.len(), 1, "{e:?}");
    assert_eq!(t[0]["branch"], "secondary");
    assert_eq!(t[0]["transition"]["held_since"], 9_500);
}

/// A restart restores a holding clock whose deadline is ahead (first wake-up there) or already
/// past (first wake-up at once, evaluated at the restart's now): either way the rule fires at
/// that wake-up, once, with the saved `held_since`, and no deadline is handed out again.
#[test]
fn a_restored_holding_clock_fires_at_its_first_wake_up_once() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    drive(&mut f, "primary", 0, 1250, false);
    let snap = f.sync_request(0).readiness["primary"].snapshot();
    assert_eq!(snap.unready_holding_since, Some(500));
    let mut doc = ControlDoc::new("orders-db");
    let branches = [("primary".to_string(), snap)].into_iter().collect();
    let saved = ProberState {
        saved_at: 1000,
        branches,
    };
    doc.probers.insert("p1".into(), saved);
    for (restart, wake) in [(1200, 1500), (5000, 5000)] {
        let (mut f, _) = start_at(&doc, &p, restart);
        assert_eq!(f.next_wakeup(), Some(1500), "restart at {restart}");
        let e = f.handle(Input::Wake, wake);
        let t = of_kind(&e, "transition");
        assert_eq!(t.len(), 1, "restart at {restart}: {e:?}");
        assert_eq!(t[0]["transition"]["at"], wake);
        assert_eq!(t[0]["transition"]["held_since"], 500);
        assert_eq!(f.next_wakeup(), None, "restart at {restart}");
    }
}

/// A sink's report touches no readiness: it keeps the cached deadline (here the early one an
/// attempt left) instead of scanning every branch again; the wake-up at it still finds nothing.
#[test]
fn a_sink_report_keeps_the_cached_deadline() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    drive(&mut f, "primary", 0, 1250, false);
    assert_eq!(f.next_wakeup(), Some(1500));
    let e = f.handle(attempt("primary", 9, 1600, false), 1600);
    let id = batches(&e)[0].id;
    f.handle(report(id, "emf", None), 1610);
    f.handle(Input::StableNameStopped { service: 0 }, 1620);
    assert_eq!(f.next_wakeup(), Some(1500), "kept, not scanned again");
    let e = f.handle(Input::Wake, 1620);
    assert!(records(&e).is_empty() && batches(&e).is_empty(), "{e:?}");
    assert_eq!(f.next_wakeup(), None);
}

/// Not a check: the cost of the wake-ups when 10,000 branches (5,000 services of two) all
/// start failing at staggered instants, each `for` running out at its own deadline
/// (`cargo test --lib wake_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement"]
fn wake_cost_at_ten_thousand_branches() {
    let branches = ["primary".to_string(), "secondary".to_string()];
    let n = 5000;
    let names: Vec<String> = (0..n).map(|i| format!("svc-{i:04}")).collect();
    let docs: Vec<ControlDoc> = names.iter().map(|n| ControlDoc::new(n)).collect();
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let services: Vec<ServiceSetup<'_>> = names
        .iter()
        .zip(&docs)
        .map(|(n, doc)| ServiceSetup {
            sinks: &DEFAULT_SINKS,
            service: n,
            namespace: "Readyprobe",
            policy: &p,
            branches: &branches,
            store_location: "memory",
            doc,
        })
        .collect();
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Full,
    };
    let (mut f, _) = Fold::start(setup, 0);
    // Two failures per branch, 500 ms apart, each branch 0.1 ms after the one before (by
    // whole ms: 10 branches share each instant): 1,000 distinct deadlines.
    for k in 0..2 {
        for s in 0..n {
            for (j, b) in branches.iter().enumerate() {
                let at = 1000 + k * 500 + ((s * 2 + j) / 10) as Millis;
                let mut a = Attempt::internal_failure(b, k as u64, at - 10, at, "refused".into());
                a.finished_at = at;
                f.handle(Input::Attempt(s, Box::new(a)), at);
            }
        }
    }
    let t0 = std::time::Instant::now();
    let (mut wakes, mut transitions) = (0, 0);
    while let Some(d) = f.next_wakeup() {
        let e = f.handle(Input::Wake, d);
        wakes += 1;
        transitions += of_kind(&e, "transition").len();
        // Each transition's batch comes back from each sink, as from the sink tasks.
        for b in batches(&e) {
            for sink in SINKS {
                f.handle(report(b.id, sink, None), d);
                std::hint::black_box(f.next_wakeup());
            }
        }
    }
    println!(
        "10,000 branches, {wakes} wake-ups, {transitions} transitions: {:?}",
        t0.elapsed()
    );
    // An input other than an attempt drops the cached deadline: the next one is a full scan.
    let t0 = std::time::Instant::now();
    for _ in 0..1000 {
        f.handle(Input::StableNameStopped { service: 0 }, 20_000);
        std::hint::black_box(f.next_wakeup());
    }
    println!(
        "1,000 inputs, each followed by next_wakeup: {:?}",
        t0.elapsed()
    );
}

/// A failed store sync while running: `StoreSyncFailures` per class at the next tick, in the
/// tick's batch for every sink (a store failure does not depend on a sink), counted once; no
/// datum while none failed.
#[test]
fn failed_store_syncs_are_counted_per_class_at_the_next_tick() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    type Seen = (Vec<(&'static str, String)>, Value, Vec<&'static str>);
    let failures = |e: &[Effect]| -> Vec<Seen> {
        batches(e)
            .iter()
            .flat_map(|b| {
                b.datums
                    .iter()
                    .filter(|d| d.metric == "StoreSyncFailures")
                    .map(|d| (d.dimensions.clone(), d.value.clone(), names(&b.sinks)))
            })
            .collect()
    };
    assert!(failures(&f.handle(Input::Tick { last: false }, 1000)).is_empty());
    let failed = |class| Input::SyncFailed {
        service: 0,
        error: "state store x holds a corrupt document".into(),
        class,
        started: Some(1100),
    };
    f.handle(failed(StoreSyncFailureClass::Corrupt), 1200);
    f.handle(failed(StoreSyncFailureClass::Corrupt), 1300);
    f.handle(failed(StoreSyncFailureClass::Timeout), 1400);
    let dims = |class: &str| {
        vec![
            ("Service", "orders-db".to_string()),
            ("Class", class.to_string()),
        ]
    };
    assert_eq!(
        failures(&f.handle(Input::Tick { last: false }, 2000)),
        [
            (dims("corrupt"), Value::Single(2.0), SINKS.to_vec()),
            (dims("timeout"), Value::Single(1.0), SINKS.to_vec()),
        ]
    );
    assert!(failures(&f.handle(Input::Tick { last: false }, 3000)).is_empty());
}

/// An override set in the future beyond the tolerated skew is dropped by the sync, never
/// applied: said once at WARN and recorded once (`override`, `dropped_ahead`), not at the next
/// sync, which no longer finds it.
#[test]
fn an_override_dropped_as_set_in_the_future_is_logged_and_recorded_once() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let mut doc = ControlDoc::new("orders-db");
    let now = 10_000;
    let at = now + control::MAX_CLOCK_SKEW_MS + 1;
    doc.overrides.insert(
        "primary".into(),
        Override {
            force: Forced::Ready,
            by: "op".into(),
            reason: "maintenance".into(),
            at,
            expires_at: at + 60_000,
        },
    );
    let e = sync(&mut f, &mut doc, now);
    assert!(doc.overrides.is_empty(), "the sync drops it");
    let r = of_kind(&e, "override");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (&r[0]["branch"], &r[0]["action"], &r[0]["override"]["at"]),
        (&"primary".into(), &"dropped_ahead".into(), &at.into())
    );
    let warn: Vec<_> = logs(&e)
        .into_iter()
        .filter(|l| l.level == Level::Warn && l.message.contains("override dropped"))
        .collect();
    assert_eq!(warn.len(), 1, "{:?}", logs(&e));
    assert_eq!(warn[0].fields.branch.as_deref(), Some("primary"));
    assert_eq!(warn[0].fields.by.as_deref(), Some("op"));
    assert!(batches(&e).is_empty(), "never in force: nothing to publish");
    let e = sync(&mut f, &mut doc, now + 1000);
    assert!(of_kind(&e, "override").is_empty());
}

/// A line's rarer keys.
fn extra(l: &Log) -> MoreFields {
    l.fields.more.as_deref().cloned().unwrap_or_default()
}

fn pacing() -> Option<Pacing> {
    Some(Pacing {
        interval: "2s".into(),
        suspect_interval: "500ms".into(),
    })
}

/// The pace lines, as `(message, branch, why, interval)`.
fn pace_lines(effects: &[Effect]) -> Vec<(String, String, Option<String>, String)> {
    logs(effects)
        .into_iter()
        .filter(|l| l.message.contains("suspect"))
        .map(|l| {
            let f = &l.fields;
            assert_eq!(l.level, Level::Info);
            assert_eq!(f.service.as_deref(), Some("orders-db"));
            let branch = f.branch.clone().unwrap_or_default();
            let m = extra(l);
            (
                l.message.clone(),
                branch,
                m.why,
                m.interval.unwrap_or_default(),
            )
        })
        .collect()
}

/// With adaptive probing on, each pace change comes with the line that says it (after the
/// `Pace` effect), naming the interval the branch is probed at now; a branch already suspect
/// when its loop starts is paced and said at once; with adaptive probing off, no line.
#[test]
fn a_paced_branch_says_its_interval_when_it_becomes_and_stops_being_suspect() {
    let p = Policy {
        approval_required: false,
        initial: ReadinessState::Ready,
        ..policy()
    };
    let (mut f, _) = start_with(&ControlDoc::new("orders-db"), &p);
    let both = vec!["primary".to_string(), "secondary".to_string()];
    let paced = |pacing| Input::Paced {
        service: 0,
        branches: both.clone(),
        pacing,
    };
    assert!(f.handle(paced(pacing()), 0).is_empty(), "none suspect");
    let out = drive(&mut f, "primary", 0, 1_500, false);
    // The line right after its effect.
    let at = out.iter().position(|e| matches!(e, Effect::Pace { .. }));
    let next = at.and_then(|i| out.get(i + 1));
    assert!(matches!(next, Some(Effect::Log(l)) if l.message.contains("suspect")));
    let why = Suspect::UnreadyHolding(500).to_string();
    assert_eq!(
        pace_lines(&out),
        [(
            "branch suspect: probing at its suspect interval".to_string(),
            "primary".to_string(),
            Some(why),
            "500ms".to_string()
        )]
    );
    // A loop (re)started while its branch is suspect: paced and said at once.
    let out = f.handle(paced(pacing()), 1_600);
    assert_eq!(paces(&out), [("primary".to_string(), true)]);
    assert_eq!(pace_lines(&out).len(), 1);
    let out = drive(&mut f, "primary", 1_600, 30_000, true);
    assert_eq!(
        pace_lines(&out),
        [(
            "branch no longer suspect: probing at its interval".to_string(),
            "primary".to_string(),
            None,
            "2s".to_string()
        )]
    );
    // Adaptive probing off (a reload): the fold still paces, nothing is said.
    assert!(f.handle(paced(None), 30_000).is_empty());
    let out = drive(&mut f, "primary", 30_000, 31_500, false);
    assert_eq!(paces(&out), [("primary".to_string(), true)]);
    assert!(pace_lines(&out).is_empty());
}

/// The run's own lines the shell used to say itself come out of the fold with their level,
/// message and fields.
#[test]
fn the_run_lines_come_from_the_fold_with_their_fields() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let one = |f: &mut Fold, input| {
        let e = f.handle(input, 10);
        let l = logs(&e);
        assert_eq!(l.len(), 1, "{l:?}");
        (*l[0]).clone()
    };
    let started = Started {
        label: "orders-db".into(),
        services: 2,
        unavailable: 1,
        prober: "p1".into(),
        instance: "i-1".into(),
        branches: 2,
        publish_interval: "1m".into(),
        sinks: "[Emf]".into(),
        state: "memory".into(),
        evidence: "/tmp/e.jsonl".into(),
    };
    let l = one(&mut f, Input::Started(Box::new(started)));
    assert_eq!(
        (l.level, l.message.as_str()),
        (Level::Info, "readyprobe started")
    );
    let want = Fields {
        service: Some("orders-db".into()),
        services: Some(2),
        state: Some("memory".into()),
        ..more(MoreFields {
            unavailable_count: Some(1),
            prober: Some("p1".into()),
            instance: Some("i-1".into()),
            branches: Some(2),
            publish_interval: Some("1m".into()),
            sinks: Some("[Emf]".into()),
            evidence: Some("/tmp/e.jsonl".into()),
            ..MoreFields::default()
        })
    };
    assert_eq!(l.fields, want);
    let l = one(&mut f, Input::ReloadWaiting { replaced: true });
    assert_eq!(l.level, Level::Info);
    assert!(l.message.starts_with("a reload is in progress"), "{l:?}");
    assert_eq!(extra(&l).replaced, Some(true));
    let staging = Input::ReloadStaging {
        running: 3,
        changed: vec!["beta".into()],
        to_start: Vec::new(),
    };
    let l = one(&mut f, staging);
    assert_eq!(l.message, "reload: preparing services beside the run");
    let want = Fields {
        changed: Some("beta".into()),
        ..more(MoreFields {
            running: Some(3),
            to_start: Some("none".into()),
            ..MoreFields::default()
        })
    };
    assert_eq!(l.fields, want);
    let saved = one(&mut f, Input::RemovedSaved(Ok("s3://b/k".into())));
    assert_eq!(saved.level, Level::Info);
    assert_eq!(saved.fields.state.as_deref(), Some("s3://b/k"));
    let lost = one(&mut f, Input::RemovedSaved(Err("denied".into())));
    assert_eq!(lost.level, Level::Error);
    assert_eq!(lost.fields.error.as_deref(), Some("denied"));
}

/// Lines said once per item: each config warning then each likely rename (names escaped), each
/// retired namespace, each state file of an earlier format; none for an empty list.
#[test]
fn list_lines_come_one_per_item() {
    let (mut f, _) = start(&ControlDoc::new("orders-db"));
    let planned = Input::ReloadPlanned {
        warnings: vec!["a".into(), "b".into()],
        renames: vec![Rename {
            removed: "old\u{1b}".into(),
            added: "new".into(),
            endpoints: vec!["db1:3306".into(), "db2:3306".into()],
        }],
    };
    let e = f.handle(planned, 10);
    let l = logs(&e);
    let said: Vec<_> = l.iter().map(|l| (l.level, l.message.as_str())).collect();
    assert_eq!(
        &said[..2],
        [(Level::Warn, "config: a"), (Level::Warn, "config: b")]
    );
    assert_eq!(l.len(), 3);
    assert!(
        l[2].message
            .starts_with("a reload removed a service and added one")
    );
    assert_eq!(l[2].fields.removed.as_deref(), Some("old\\u{1b}"));
    assert_eq!(l[2].fields.added.as_deref(), Some("new"));
    let endpoints = extra(l[2]).endpoints;
    assert_eq!(endpoints.as_deref(), Some("db1:3306, db2:3306"));
    let e = f.handle(Input::NamespacesRetired(vec!["A".into(), "B".into()]), 20);
    let ns: Vec<_> = logs(&e).iter().map(|l| extra(l).namespace).collect();
    assert_eq!(ns, [Some("A".to_string()), Some("B".to_string())]);
    let e = f.handle(Input::EarlierStateFiles(vec!["/s/state-x.json".into()]), 30);
    let l = logs(&e);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].level, Level::Warn);
    assert_eq!(extra(l[0]).file.as_deref(), Some("/s/state-x.json"));
    for empty in [
        Input::EarlierStateFiles(Vec::new()),
        Input::NamespacesRetired(Vec::new()),
        Input::ReloadPlanned {
            warnings: Vec::new(),
            renames: Vec::new(),
        },
    ] {
        assert!(f.handle(empty, 40).is_empty());
    }
}

/// An override whose `expires_at` lies beyond [`control::MAX_OVERRIDE_MS`] after it was set is
/// shown with the end the prober applies from the first time it is taken (at start, from the
/// loaded document): the WARN line and the `override` record carry the bounded end, and the
/// first sync, which writes that bound into the document, logs and records nothing more.
#[test]
fn an_override_beyond_the_maximum_shows_its_bounded_end_from_the_first_line() {
    let year = 365 * 86_400_000;
    let mut doc = ControlDoc::new("orders-db");
    doc.overrides
        .insert("primary".into(), forced(Forced::Ready, year));
    let (mut f, e) = start_at(&doc, &policy(), 1000);
    let end = control::MAX_OVERRIDE_MS;
    let warn: Vec<_> = logs(&e)
        .into_iter()
        .filter(|l| l.message.contains("override in force"))
        .collect();
    assert_eq!(warn.len(), 1, "{:?}", logs(&e));
    let shown = crate::clock::rfc3339(end);
    assert_eq!(warn[0].fields.expires_at.as_deref(), Some(shown.as_str()));
    let r = of_kind(&e, "override");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["override"]["expires_at"], end);
    let e = sync(&mut f, &mut doc, 2000);
    assert_eq!(
        doc.overrides["primary"].expires_at, end,
        "the sync wrote it"
    );
    assert!(of_kind(&e, "override").is_empty(), "{:?}", logs(&e));
    assert!(
        !logs(&e).iter().any(|l| l.message.contains("override")),
        "{:?}",
        logs(&e)
    );
}

/// A service with two CloudWatch targets: each tick's batch goes to its sinks, `emf` once and
/// each target's; a failure of one target is accounted to that target alone (its `publish`
/// record names it, the run summary counts it as `cloudwatch[<target>]`), the other's batch
/// is sent; a service without targets shares no batch with one that has them.
#[test]
fn each_target_is_its_own_sink_and_is_accounted_alone() {
    let (branches, p) = (["primary".to_string()], policy());
    let docs = [ControlDoc::new("orders-db"), ControlDoc::new("payments-db")];
    let a = SinkId {
        kind: "cloudwatch",
        target: Some("eu-west-1".into()),
    };
    let b = SinkId {
        kind: "cloudwatch",
        target: Some("us-east-1@111122223333/pub".into()),
    };
    let two = [a.clone(), b.clone(), SinkId::of("emf")];
    let services = [
        ServiceSetup {
            sinks: &two,
            service: "orders-db",
            namespace: "Readyprobe",
            policy: &p,
            branches: &branches,
            store_location: "memory",
            doc: &docs[0],
        },
        ServiceSetup {
            sinks: &DEFAULT_SINKS,
            service: "payments-db",
            namespace: "Readyprobe",
            policy: &p,
            branches: &branches,
            store_location: "memory",
            doc: &docs[1],
        },
    ];
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Full,
    };
    let (mut f, _) = Fold::start(setup, 0);
    let e = f.handle(Input::Tick { last: false }, 1000);
    let bs = batches(&e);
    assert_eq!(bs.len(), 2, "{bs:?}");
    let of = |svc: &str| {
        bs.iter()
            .find(|b| b.datums.iter().any(|d| d.dimensions[0].1 == svc))
            .copied()
            .expect("a batch")
    };
    let (orders, payments) = (of("orders-db"), of("payments-db"));
    assert_eq!(orders.sinks, two);
    assert_eq!(names(&payments.sinks), SINKS);
    assert!(
        !payments
            .datums
            .iter()
            .any(|d| d.dimensions[0].1 == "orders-db")
    );
    let failed = Input::SinkReport(SinkReport {
        batch: orders.id,
        sink: a.clone(),
        datums: 3,
        sent: 0,
        tries: 3,
        outcome: PublishOutcome::Failed,
        class: Some(PublishFailureClass::PublishCredentials),
        error: Some("no credentials for role".into()),
    });
    let e = f.handle(failed, 1100);
    let p = of_kind(&e, "publish");
    assert_eq!(p[0]["sink"], "cloudwatch");
    assert_eq!(p[0]["target"], "eu-west-1");
    assert_eq!(p[0]["class"], "publish_credentials");
    let sent = Input::SinkReport(SinkReport {
        batch: orders.id,
        sink: b,
        datums: 3,
        sent: 3,
        tries: 1,
        outcome: PublishOutcome::Sent,
        class: None,
        error: None,
    });
    let p = of_kind(&f.handle(sent, 1200), "publish");
    assert_eq!(
        (&p[0]["target"], &p[0]["outcome"]),
        (&"us-east-1@111122223333/pub".into(), &"sent".into())
    );
    // The default target's and emf's records carry no target.
    let e = f.handle(report(payments.id, "cloudwatch", None), 1300);
    assert_eq!(of_kind(&e, "publish")[0].get("target"), None);
    let (s, _) = f.finish(2000, "duration", 0);
    assert_eq!(
        s.dropped_batches,
        [("cloudwatch[eu-west-1]".to_string(), 1)].into()
    );
}

#[test]
fn the_control_profile_hands_sinks_only_what_alarms_read() {
    let doc = ControlDoc::new("orders-db");
    let (p, branches) = (policy(), ["primary".to_string(), "secondary".to_string()]);
    let services = [ServiceSetup {
        sinks: &DEFAULT_SINKS,
        service: "orders-db",
        namespace: "Readyprobe",
        policy: &p,
        branches: &branches,
        store_location: "memory",
        doc: &doc,
    }];
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &SINKS,
        metrics: crate::contract::MetricsProfile::Control,
    };
    let (mut f, _) = Fold::start(setup, 0);
    let mut records = 0;
    for (i, at) in [100, 200, 300].into_iter().enumerate() {
        let e = f.handle(attempt("primary", i as u64 + 1, at, i != 1), at);
        records += of_kind(&e, "attempt").len();
    }
    // Every attempt is in the evidence whatever the profile.
    assert_eq!(records, 3);
    let e = f.handle(Input::Tick { last: false }, 1000);
    let b = batches(&e);
    assert!(!b.is_empty());
    for batch in &b {
        for d in &batch.datums {
            let sent = [
                "Readiness",
                "Heartbeat",
                "BothBranchesUnready",
                "ServiceUnavailable",
            ];
            assert!(sent.contains(&d.metric), "{}", d.metric);
        }
    }
    assert!(
        b.iter()
            .flat_map(|b| &b.datums)
            .any(|d| d.metric == "Heartbeat")
    );
    // Each handed datum is accounted: the publish record counts what the batch held.
    let id = b[0].id;
    let n = b[0].datums.len();
    let report = SinkReport {
        sink: SinkId::of("cloudwatch"),
        batch: id,
        datums: n,
        sent: n,
        tries: 1,
        outcome: PublishOutcome::Sent,
        class: None,
        error: None,
    };
    let e = f.handle(Input::SinkReport(report), 1100);
    assert_eq!(of_kind(&e, "publish")[0]["datums"], n);
}

/// With `control` and both kinds of sinks, a tick is two batches: `cloudwatch` and `emf` get the
/// control series, `otlp` every datum; each sink gets exactly one `publish` record per batch it
/// was handed, and only for it.
#[test]
fn the_control_profile_leaves_otlp_the_full_set_in_a_batch_of_its_own() {
    let doc = ControlDoc::new("orders-db");
    let (p, branches) = (policy(), ["primary".to_string(), "secondary".to_string()]);
    let sinks = ["cloudwatch", "otlp", "emf"];
    let ids = sinks.map(SinkId::of);
    let services = [ServiceSetup {
        sinks: &ids,
        service: "orders-db",
        namespace: "Readyprobe",
        policy: &p,
        branches: &branches,
        store_location: "memory",
        doc: &doc,
    }];
    let setup = |metrics| Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &sinks,
        metrics,
    };
    // Full: one batch for all three, as before.
    let (mut f, _) = Fold::start(setup(crate::contract::MetricsProfile::Full), 0);
    let b = batches(&f.handle(Input::Tick { last: false }, 1000))
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(b.len(), 1);
    assert_eq!(names(&b[0].sinks), sinks);

    let (mut f, _) = Fold::start(setup(crate::contract::MetricsProfile::Control), 0);
    for (i, at) in [100, 200].into_iter().enumerate() {
        f.handle(attempt("primary", i as u64 + 1, at, true), at);
    }
    let b: Vec<Batch> = batches(&f.handle(Input::Tick { last: false }, 1000))
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(b.len(), 2, "{b:?}");
    let (limited, full) = (&b[0], &b[1]);
    assert_eq!(names(&limited.sinks), ["cloudwatch", "emf"]);
    assert_eq!(names(&full.sinks), ["otlp"]);
    assert_ne!(limited.id, full.id);
    let metrics = |b: &Batch| {
        let mut m: Vec<&str> = b.datums.iter().map(|d| d.metric).collect();
        m.dedup();
        m
    };
    assert!(
        limited
            .datums
            .iter()
            .all(|d| crate::contract::MetricsProfile::Control.sends(d.metric)),
        "{:?}",
        metrics(limited)
    );
    for m in [
        "Attempts",
        "FailedAttempts",
        "SuccessRate",
        "Readiness",
        "Heartbeat",
    ] {
        assert!(metrics(full).contains(&m), "{m}: {:?}", metrics(full));
    }
    // Every (sink, batch) is accounted once: a report of a batch to a sink it was not handed
    // to records nothing.
    let mut records = Vec::new();
    for (batch, sink) in [
        (limited.id, "cloudwatch"),
        (limited.id, "emf"),
        (full.id, "otlp"),
        (full.id, "cloudwatch"),
        (limited.id, "otlp"),
    ] {
        let e = f.handle(report(batch, sink, None), 1100);
        for r in of_kind(&e, "publish") {
            records.push((r["sink"].as_str().unwrap().to_string(), r["batch"].clone()));
        }
    }
    assert_eq!(
        records,
        [
            ("cloudwatch".to_string(), limited.id.into()),
            ("emf".to_string(), limited.id.into()),
            ("otlp".to_string(), full.id.into()),
        ]
    );
    let (s, _) = f.finish(2000, "test", 0);
    assert!(s.dropped_batches.is_empty(), "{:?}", s.dropped_batches);
}

/// A late tick's counts cover the span since the previous tick, however long: the attempts and
/// failed attempts (and step durations, by the same rule) carry `since` (the previous tick, or the start for the
/// first), the gauges none.
#[test]
fn a_late_tick_counts_since_the_previous_tick() {
    let (mut f, _) = start_at(&ControlDoc::new("orders-db"), &policy(), 500);
    let since = |f: &mut Fold, at: Millis| -> Vec<(&'static str, Option<Millis>)> {
        let e = f.handle(Input::Tick { last: false }, at);
        let tick = batches(&e)
            .into_iter()
            .find(|b| b.reason == PublishReason::Tick)
            .unwrap();
        let mut got: Vec<_> = tick
            .datums
            .iter()
            .filter(|d| d.dimensions.get(1).is_some_and(|b| b.1 == "primary"))
            .map(|d| (d.metric, d.since))
            .collect();
        got.dedup();
        got
    };
    f.handle(attempt("primary", 1, 700, true), 700);
    let first = since(&mut f, 1000);
    assert!(first.contains(&("Attempts", Some(500))), "{first:?}");
    assert!(first.contains(&("FailedAttempts", Some(500))), "{first:?}");
    assert!(first.contains(&("Readiness", None)), "{first:?}");
    f.handle(attempt("primary", 2, 1500, true), 1500);
    // Late: the next tick comes at 4500, not 2000.
    let late = since(&mut f, 4500);
    for m in ["Attempts", "FailedAttempts"] {
        assert!(late.contains(&(m, Some(1000))), "{m}: {late:?}");
    }
    assert!(late.contains(&("Readiness", None)), "{late:?}");
}

/// The exposition (`/metrics`) fed the real fold's effects.
mod exposition;
