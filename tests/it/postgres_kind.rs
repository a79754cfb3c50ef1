//! The `postgres` kind against real PostgreSQL 15 clusters: a healthy writer over verified TLS
//! and SCRAM, one connection per attempt; the failback case (a hot standby from
//! `pg_basebackup -R` fails `server_read_only` and never goes ready, then `pg_ctl promote` and
//! it does); `default_transaction_read_only` on a primary; `md5`/cleartext refused on an
//! unverified session without sending the password.

use crate::support::fixture::{Running, has_transition, read_evidence};
use crate::support::postgres::{PgOptions, PgWorld};
use crate::support::wait_for;
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Attempt, Outcome, prepare, run_attempt};
use serde_json::Value;
use std::time::Duration;

/// One branch's attempts on one prepared probe, `n` of them in a row.
async fn attempts(w: &PgWorld, text: String, n: u64) -> Vec<Attempt> {
    let path = w.dir.path().join("pg.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (resolver, probes) = prepare(&cfg).unwrap_or_else(|e| panic!("{e:?}"));
    let clock = Clock::start();
    let mut out = Vec::new();
    for seq in 1..=n {
        out.push(run_attempt(&probes[0], &resolver, &clock, seq).await);
    }
    out
}

fn failure(a: &Attempt) -> (Step, FailureClass) {
    match &a.outcome {
        Outcome::Failure { step, class, .. } => (*step, *class),
        Outcome::Success => panic!("expected a failure, got success: {a:?}"),
    }
}

fn message(a: &Attempt) -> &str {
    match &a.outcome {
        Outcome::Failure { message, .. } => message,
        Outcome::Success => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_writer_succeeds_on_one_connection_per_attempt() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let before = w.pg.probe_connections();
    let got = attempts(&w, w.config(w.pg.port(), 2000, 1500).build(), 3).await;
    for a in &got {
        assert_eq!(a.outcome, Outcome::Success, "{a:?}");
        let steps: Vec<_> = a.steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(
            steps,
            ["resolve", "connect", "tls", "auth", "write", "verify"]
        );
        assert!(a.tls_verified);
        let server = a.server.as_ref().expect("server identity");
        assert!(server.version.starts_with("15"), "{server:?}");
        assert!(!server.read_only && !server.in_recovery, "{server:?}");
    }
    // The server's own count: one authorised connection of the probe role per attempt.
    wait_for(
        Duration::from_secs(10),
        "three probe connections",
        || async { w.pg.probe_connections() - before >= 3 },
    )
    .await;
    assert_eq!(w.pg.probe_connections() - before, 3, "{}", w.pg.log());
    // The row holds the last attempt's marker and seq.
    let row =
        w.pg.psql(
            "readyprobe",
            "SELECT marker, seq FROM public.canary WHERE prober_id = 'it' AND branch = 'primary'",
        )
        .await;
    assert_eq!(row, format!("{}|3", got[2].marker));
}

/// `default_transaction_read_only = on` (reload) on a primary: every write is refused with
/// `25006`, the failback class; off again, the next attempt succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_transaction_read_only_fails_server_read_only() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    w.pg.set_default_read_only(true).await;
    let text = w.config(w.pg.port(), 2000, 1500).build();
    let got = attempts(&w, text.clone(), 2).await;
    for a in &got {
        assert_eq!(
            failure(a),
            (Step::Write, FailureClass::ServerReadOnly),
            "{a:?}"
        );
        assert!(message(a).contains("25006"), "{a:?}");
    }
    w.pg.set_default_read_only(false).await;
    let got = attempts(&w, text, 1).await;
    assert_eq!(got[0].outcome, Outcome::Success, "{:?}", got[0]);
}

/// `pg_hba` asks for a cleartext password: over `ssl_mode = "required"` (allowed by the danger
/// key) the attempt fails at auth and the password never reaches the server (its log shows the
/// failed authentication of no password); over `verify_identity` it is sent and the attempt
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_password_goes_only_over_a_verified_session() {
    let opts = PgOptions {
        method: "password".into(),
        ..PgOptions::default()
    };
    let Some(w) = PgWorld::start_or_skip(opts).await else {
        return;
    };
    let unverified = w
        .config(w.pg.port(), 2000, 1500)
        .tls("required", None)
        .set("probe.tls", "danger_send_secrets_unverified", true)
        .build();
    let got = attempts(&w, unverified, 1).await;
    assert_eq!(
        failure(&got[0]),
        (Step::Auth, FailureClass::AuthDenied),
        "{:?}",
        got[0]
    );
    assert!(message(&got[0]).contains("not sent"), "{:?}", got[0]);
    let got = attempts(&w, w.config(w.pg.port(), 2000, 1500).build(), 1).await;
    assert_eq!(got[0].outcome, Outcome::Success, "{:?}", got[0]);
}

/// Attempt records and the readiness of `primary` after an in-process run of `text`.
async fn run(w: &PgWorld, text: &str, duration: Duration) -> Vec<Value> {
    let path = w.dir.path().join("run.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    Running::start(cfg, Some(duration)).finish().await;
    read_evidence(&w.evidence())
}

/// 500 ms attempts; unready after 1 s under 80 %, ready after 2 s at 95 %.
const POLICY: &str = r#"
[readiness]
window = "3s"
min_attempts = 3
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "2s" }
"#;

/// The failback case: the old primary's place is taken by a hot standby made with
/// `pg_basebackup -R`. It answers every read; every attempt fails `server_read_only` and the
/// branch never goes ready. After `pg_ctl promote` it becomes ready by the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_standby_never_goes_ready_until_promoted() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let standby = w.pg.standby().await;
    let text = w
        .config(standby.port(), 500, 400)
        .clear("readiness")
        .merge(POLICY)
        .build();
    let ev = run(&w, &text, Duration::from_millis(4000)).await;
    let tried: Vec<&Value> = ev.iter().filter(|v| v["kind"] == "attempt").collect();
    assert!(tried.len() >= 4, "{ev:#?}");
    for a in &tried {
        assert_eq!(
            (a["step"].as_str(), a["class"].as_str()),
            (Some("write"), Some("server_read_only")),
            "{a}"
        );
    }
    assert!(!has_transition(&ev, "primary", "ready"), "{ev:#?}");
    assert!(has_transition(&ev, "primary", "unready"), "{ev:#?}");

    standby.promote().await;
    let _ = std::fs::remove_file(w.evidence());
    let ev = run(&w, &text, Duration::from_millis(5000)).await;
    assert!(has_transition(&ev, "primary", "ready"), "{ev:#?}");
    let last = ev.iter().rfind(|v| v["kind"] == "attempt").unwrap();
    assert_eq!(last["result"], "success", "{last}");
    assert_eq!(last["server"]["read_only"], false, "{last}");
}
