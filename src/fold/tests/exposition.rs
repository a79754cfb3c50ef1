//! review-1: `/metrics` follows the fold exactly: the real fold's effects fed to an
//! [`Exposition`].

use super::*;
use crate::serve::Exposition;

fn show(x: &Exposition, effects: &[Effect]) {
    for e in effects {
        x.observe(e, 0);
    }
}

fn series(x: &Exposition, needle: &str) -> Vec<String> {
    x.encode()
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The default policy, but every branch starting unknown.
fn unknown_first() -> Policy {
    Policy {
        initial: ReadinessState::Unknown,
        ..policy()
    }
}

/// A fresh exposition and a fold on `orders-db` under `p`, its start already shown.
fn shown_start(p: &Policy) -> (Exposition, Fold) {
    let x = Exposition::new();
    let (f, e) = start_with(&ControlDoc::new("orders-db"), p);
    show(&x, &e);
    (x, f)
}

/// Force `primary` to `value` until `until` (synced at 1 s, a tick at 2 s shown); the doc.
fn overridden(x: &Exposition, f: &mut Fold, value: Forced, until: Millis) -> ControlDoc {
    let mut doc = ControlDoc::new("orders-db");
    doc.overrides.insert("primary".into(), forced(value, until));
    show(x, &sync(f, &mut doc, 1000));
    show(x, &f.handle(Input::Tick { last: false }, 2000));
    doc
}

/// The shell's input when a reload leaves `orders-db` with `branches` under `p`.
fn change(p: &Policy, branches: &[&str]) -> Input {
    let change = ServiceChange {
        sinks: DEFAULT_SINKS.to_vec(),
        id: 0,
        namespace: "Readyprobe".into(),
        policy: p.clone(),
        branches: branches
            .iter()
            .map(|n| BranchChange {
                name: (*n).into(),
                reset: false,
            })
            .collect(),
    };
    Input::ChangeService(Box::new(change))
}

#[test]
fn a_cleared_override_on_an_unknown_branch_leaves_no_readiness() {
    let p = unknown_first();
    let (x, mut f) = shown_start(&p);
    let mut doc = overridden(&x, &mut f, Forced::Ready, 60_000);
    let r = series(
        &x,
        "readyprobe_readiness{service=\"orders-db\",branch=\"primary\"}",
    );
    assert_eq!(r.len(), 1, "{r:?}");
    doc.overrides.clear();
    let e = sync(&mut f, &mut doc, 3000);
    assert!(batches(&e).is_empty(), "unknown: nothing published");
    show(&x, &e);
    show(&x, &f.handle(Input::Tick { last: false }, 4000));
    let r = series(&x, "readyprobe_readiness{");
    assert!(
        r.is_empty(),
        "CloudWatch gets no Readiness now, /metrics still: {r:?}"
    );
}

/// Likewise an override that expires on an unknown branch: its forced value leaves /metrics.
#[test]
fn an_expired_override_on_an_unknown_branch_leaves_no_readiness() {
    let p = unknown_first();
    let (x, mut f) = shown_start(&p);
    overridden(&x, &mut f, Forced::Unready, 10_000);
    let r = series(&x, "readyprobe_readiness{");
    assert_eq!(
        r,
        ["readyprobe_readiness{service=\"orders-db\",branch=\"primary\"} 0"]
    );
    let e = f.handle(Input::Tick { last: false }, 11_000);
    assert_eq!(of_kind(&e, "override")[0]["action"], "expired");
    // Gone with the override record already, not only at the tick's batch after it.
    let at = e
        .iter()
        .position(|e| matches!(e, Effect::Record(_, _, Record::Override(_))))
        .unwrap();
    let changes = x.changes();
    show(&x, &e[..=at]);
    let r = series(&x, "readyprobe_readiness{");
    assert!(r.is_empty(), "{r:?}");
    // A removal is a change: a shared /metrics text made before it is not served after it.
    assert!(x.changes() > changes);
    show(&x, &e[at + 1..]);
    assert!(series(&x, "readyprobe_readiness{").is_empty());
}

#[test]
fn a_branch_a_reload_removes_loses_its_series() {
    let x = Exposition::new();
    let (mut f, e) = start(&ControlDoc::new("orders-db"));
    show(&x, &e);
    show(&x, &drive(&mut f, "secondary", 500, 5000, false));
    show(&x, &f.handle(Input::Tick { last: false }, 5000));
    assert!(!series(&x, "branch=\"secondary\"").is_empty());
    show(&x, &f.handle(change(&policy(), &["primary"]), 5500));
    let e = f.handle(reloaded(&["orders-db"]), 5500);
    let r = of_kind(&e, "reload");
    let named = serde_json::json!([{"service": "orders-db", "branch": "secondary"}]);
    assert_eq!(r[0]["removed_branches"], named, "{r:?}");
    show(&x, &e);
    // An attempt of secondary's stopped loop, finished after the reload: evidence only.
    let late = Input::StoppedAttempt {
        service: "orders-db".into(),
        attempt: ok_attempt("secondary", 99, 5600),
    };
    show(&x, &f.handle(late, 5600));
    show(&x, &f.handle(Input::Tick { last: false }, 6000));
    let r = series(&x, "branch=\"secondary\"");
    assert!(
        r.is_empty(),
        "secondary is gone from the fold, not from /metrics: {r:#?}"
    );
    assert!(!series(&x, "branch=\"primary\"").is_empty());
    // A later reload brings it back: its counted attempts show again.
    show(
        &x,
        &f.handle(change(&policy(), &["primary", "secondary"]), 7000),
    );
    show(&x, &f.handle(reloaded(&["orders-db"]), 7000));
    show(&x, &f.handle(attempt("secondary", 1, 7100, true), 7100));
    let r = series(
        &x,
        "readyprobe_attempts_total{service=\"orders-db\",branch=\"secondary\"",
    );
    assert_eq!(r.len(), 1, "{r:?}");
}

/// What the shell feeds after a reload applied its changes to `changed`.
fn reloaded(changed: &[&str]) -> Input {
    let record = Reload {
        applied: true,
        added: Vec::new(),
        removed: Vec::new(),
        changed: changed.iter().map(|s| (*s).to_string()).collect(),
        unavailable: Vec::new(),
        problems: Vec::new(),
        removed_branches: Vec::new(),
    };
    Input::Reloaded {
        record: Box::new(record),
        services: 1,
    }
}

#[test]
fn fail_open_flag_once_a_branch_is_unknown_again() {
    let p = unknown_first();
    let (x, mut f) = shown_start(&p);
    show(&x, &drive(&mut f, "primary", 500, 5000, false));
    show(&x, &drive(&mut f, "secondary", 500, 5000, false));
    show(&x, &f.handle(Input::Tick { last: false }, 5000));
    assert_eq!(
        series(&x, "both_branches_unready{").len(),
        1,
        "{}",
        x.encode()
    );
    let to_three = change(&p, &["primary", "secondary", "tertiary"]);
    show(&x, &f.handle(to_three, 5500));
    let e = f.handle(Input::Tick { last: false }, 6000);
    let sent = batches(&e)
        .iter()
        .flat_map(|b| b.datums.iter())
        .any(|d| d.metric == "BothBranchesUnready");
    show(&x, &e);
    let r = series(&x, "both_branches_unready{");
    assert!(sent || r.is_empty(), "no datum sent, /metrics still: {r:?}");
}
