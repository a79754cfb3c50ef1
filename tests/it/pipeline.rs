//! The core pipeline end to end on real components: MariaDB branches with TLS, names from an
//! in-process DNS server, readiness published to the CloudWatch emulator through the real SDK.

use crate::support::cloudwatch::{MetricQuery, endpoint, unique_namespace};
use crate::support::fixture::*;
use crate::support::proxy::NoisyProxy;
use std::time::Duration;

/// Minimum and maximum of every `Readiness` datum of `branch` in `ns`, polled until one arrives.
async fn readiness_range(
    client: &aws_sdk_cloudwatch::Client,
    ns: &str,
    branch: &str,
) -> (f64, f64) {
    let dims = [("Service", "orders-db"), ("Branch", branch)];
    let q = |stat: &str| MetricQuery::new(ns, "Readiness").dims(&dims).stat(stat);
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let min = q("Minimum").fetch(client).await;
        let max = q("Maximum").fetch(client).await;
        if !min.is_empty() && !max.is_empty() {
            let lo = min.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min);
            let hi = max
                .iter()
                .map(|(_, v)| *v)
                .fold(f64::NEG_INFINITY, f64::max);
            return (lo, hi);
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no Readiness datum for {branch} arrived in namespace {ns}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Healthy → both 1; primary read-only → primary 0 after the unready `for`, secondary stays 1;
/// primary writable again → 0 until the ready condition held its full `for`, then 1. Each phase
/// is a separate run with its own namespace on one state file, so the phases also prove that a
/// run continues the saved state of the previous one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_failback_reach_cloudwatch() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some(cw) = cloudwatch().await else { return };
    let ns = unique_namespace("pipeline");
    let (ns_a, ns_b, ns_c) = (format!("{ns}-a"), format!("{ns}-b"), format!("{ns}-c"));
    let ev_path = p.evidence();
    let opts = |ns: &'static str| ConfigOpts {
        namespace: ns,
        sinks: &["cloudwatch"],
        endpoint: Some(endpoint()),
        ..Default::default()
    };
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };

    // Phase A: both healthy until both are declared ready.
    let run = Running::start(p.config("a.toml", &opts(leak(ns_a.clone()))), None);
    let ev = wait_evidence(&ev_path, Duration::from_secs(30), |ev| {
        has_transition(ev, "primary", "ready") && has_transition(ev, "secondary", "ready")
    })
    .await;
    wait_ticks(&ev_path, ev.len(), 1).await; // one more publish tick
    let s = run.stop().await;
    assert!(
        s.dropped_batches.is_empty(),
        "publishes dropped: {:?}\n{:?}",
        s.dropped_batches,
        read_evidence(&ev_path)
            .iter()
            .filter(|v| v["kind"] == "publish" && v["dropped"] == true)
            .take(2)
            .collect::<Vec<_>>()
    );
    assert_eq!(s.final_states["primary"].as_str(), "ready");
    assert_eq!(readiness_range(&cw, &ns_a, "primary").await, (1.0, 1.0));
    assert_eq!(readiness_range(&cw, &ns_a, "secondary").await, (1.0, 1.0));

    // Phase B: the primary's database turns read-only.
    p.primary.set_read_only(true).await;
    let b_start = read_evidence(&ev_path).len();
    let run = Running::start(p.config("b.toml", &opts(leak(ns_b.clone()))), None);
    let ev = wait_evidence(&ev_path, Duration::from_secs(30), |ev| {
        has_transition(&ev[b_start..], "primary", "unready")
    })
    .await;
    wait_ticks(&ev_path, ev.len(), 1).await;
    let s = run.stop().await;
    let ev_b = &ev[b_start..];
    let restored = ev_b.iter().find(|v| v["kind"] == "start").unwrap();
    assert_eq!(
        restored["restored"].as_array().unwrap().len(),
        2,
        "phase B continues phase A's state"
    );
    let failed: Vec<_> = attempts(ev_b, "primary")
        .into_iter()
        .filter(|a| a["result"] == "failure")
        .collect();
    assert!(!failed.is_empty());
    for a in &failed {
        assert_eq!(a["step"], "write", "{a}");
        assert_eq!(a["class"], "server_read_only", "{a}");
    }
    let first_fail = failed[0]["finished_at"].as_i64().unwrap();
    let t = transitions(ev_b, "primary");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].0.as_str(), t[0].1.as_str()), ("ready", "unready"));
    assert!(
        t[0].2 - first_fail >= 1000,
        "unready before its 1 s `for`: {t:?}, first failure {first_fail}"
    );
    assert!(transitions(ev_b, "secondary").is_empty());
    assert_eq!(s.final_states["secondary"].as_str(), "ready");
    assert_eq!(readiness_range(&cw, &ns_b, "primary").await.0, 0.0);
    assert_eq!(readiness_range(&cw, &ns_b, "secondary").await, (1.0, 1.0));

    // Phase C: writable again; it must stay 0 until the ready condition held its full `for`.
    p.primary.set_read_only(false).await;
    let c_start = read_evidence(&ev_path).len();
    let run = Running::start(p.config("c.toml", &opts(leak(ns_c.clone()))), None);
    let ev = wait_evidence(&ev_path, Duration::from_secs(40), |ev| {
        has_transition(&ev[c_start..], "primary", "ready")
    })
    .await;
    wait_ticks(&ev_path, ev.len(), 1).await;
    run.stop().await;
    let ev_c = &ev[c_start..];
    let first_ok = attempts(ev_c, "primary")
        .into_iter()
        .find(|a| a["result"] == "success")
        .unwrap()["finished_at"]
        .as_i64()
        .unwrap();
    let t = transitions(ev_c, "primary");
    assert_eq!((t[0].0.as_str(), t[0].1.as_str()), ("unready", "ready"));
    let held_since = t[0].3.unwrap();
    assert!(
        held_since >= first_ok,
        "ready condition cannot hold before a success"
    );
    assert!(
        t[0].2 - held_since >= 3000,
        "ready before its 3 s `for`: {t:?}"
    );
    let (lo, hi) = readiness_range(&cw, &ns_c, "primary").await;
    assert_eq!((lo, hi), (0.0, 1.0), "published 0 while waiting, then 1");
}

/// A few percent of connections dropped at random (seeded) never flip a ready branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noise_never_flips_a_ready_branch() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let proxy = NoisyProxy::start(p.primary.addr(), 0.03, 0x5eed).await;
    let policy = r#"
[readiness]
window = "10s"
min_attempts = 10
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 85.0, for = "1s" }
initial = "ready"
"#;
    let cfg = p.config(
        "noise.toml",
        &ConfigOpts {
            policy,
            interval_ms: 200,
            timeout_ms: 180,
            primary_port: Some(proxy.addr().port()),
            ..Default::default()
        },
    );
    let run = Running::start(cfg, Some(Duration::from_secs(20)));
    let s = run.finish().await;
    let ev = read_evidence(&p.evidence());
    let prim = attempts(&ev, "primary");
    let failed = prim.iter().filter(|a| a["result"] == "failure").count();
    assert!(prim.len() >= 60, "too few attempts: {}", prim.len());
    assert!(
        failed > 0 && proxy.dropped() > 0,
        "the noise must be real: {failed} failed attempts"
    );
    assert!(
        (failed as f64) < prim.len() as f64 * 0.15,
        "noise too strong for this test: {failed}/{}",
        prim.len()
    );
    assert!(
        !has_transition(&ev, "primary", "unready"),
        "noise flipped the primary: {:?}",
        transitions(&ev, "primary")
    );
    assert_eq!(s.final_states["primary"].as_str(), "ready");
}

/// Two bounded runs: the second resumes the first's state, and a ready `for` that began in the
/// first run completes in the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_runs_resume_saved_state() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let opts = ConfigOpts::default();
    // Run 1: long enough for the ready condition to start holding, too short for its 3 s `for`.
    let s1 = Running::start(p.config("r.toml", &opts), Some(Duration::from_millis(3200)))
        .finish()
        .await;
    assert_eq!(s1.final_states["primary"].as_str(), "unknown");
    let state_file = p.dir.path().join("state/control-orders-db.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    let holding = saved["probers"]["it"]["branches"]["primary"]["ready_holding_since"].as_i64();
    assert!(holding.is_some(), "run 1 saved a holding clock: {saved}");
    let n1 = read_evidence(&p.evidence()).len();

    // Run 2 continues: the transition's `for` spans both runs.
    let s2 = Running::start(p.config("r.toml", &opts), Some(Duration::from_secs(4)))
        .finish()
        .await;
    let ev = read_evidence(&p.evidence());
    let ev2 = &ev[n1..];
    let start2 = ev2.iter().find(|v| v["kind"] == "start").unwrap()["at_ms"]
        .as_i64()
        .unwrap();
    let t = transitions(ev2, "primary");
    assert_eq!((t[0].0.as_str(), t[0].1.as_str()), ("unknown", "ready"));
    assert!(
        t[0].3.unwrap() < start2,
        "the ready condition's clock started in run 1: {t:?}, run 2 started {start2}"
    );
    assert_eq!(s2.final_states["primary"].as_str(), "ready");

    // Run 3 starts as ready (no transition out of unknown again).
    let n2 = ev.len();
    let s3 = Running::start(p.config("r.toml", &opts), Some(Duration::from_secs(1)))
        .finish()
        .await;
    let ev = read_evidence(&p.evidence());
    assert!(transitions(&ev[n2..], "primary").is_empty());
    assert_eq!(s3.final_states["primary"].as_str(), "ready");
}

/// A CloudWatch endpoint that refuses connections: every batch is retried within its window,
/// then dropped, counted and recorded; probing and readiness go on; the run ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_cloudwatch_endpoint_drops_are_counted_not_fatal() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let dead = format!("http://127.0.0.1:{}", crate::support::free_tcp_port());
    let cfg = p.config(
        "dead.toml",
        &ConfigOpts {
            sinks: &["cloudwatch", "emf"],
            endpoint: Some(dead),
            ..Default::default()
        },
    );
    let run = Running::start(cfg, Some(Duration::from_millis(3500)));
    let emf_out = run.emf.clone();
    let s = run.finish().await;
    let ev = read_evidence(&p.evidence());
    let cw: Vec<_> = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["sink"] == "cloudwatch")
        .collect();
    assert!(cw.len() >= 3, "every tick is accounted for: {cw:?}");
    assert!(
        cw.iter()
            .all(|v| v["dropped"] == true && v["error"].as_str().is_some_and(|e| !e.is_empty()))
    );
    assert!(
        cw.iter().any(|v| v["tries"].as_u64().unwrap_or(0) > 1),
        "retried within the window: {cw:?}"
    );
    // The cause is one short line, not the SDK's debug dump.
    assert!(
        cw.iter()
            .any(|v| v["error"] == "PutMetricData failed: connection refused"),
        "{cw:?}"
    );
    assert_eq!(s.dropped_batches["cloudwatch"], cw.len() as u64);
    // Every batch is accounted for in both sinks: the same batches went to each (emf also gets
    // the PublishFailures counts, which go to it alone).
    let emf = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["sink"] == "emf")
        .filter(|v| v["reason"] != "publish_failures")
        .count();
    assert_eq!(cw.len(), emf, "one record per batch and sink");
    // The other sink is unaffected, and probing went on.
    assert!(
        ev.iter()
            .any(|v| v["kind"] == "publish" && v["sink"] == "emf" && v["dropped"] == false)
    );
    assert!(s.attempts["primary"] >= 8, "{:?}", s.attempts);
    // The EMF lines went to the run's buffer, one per datum sent.
    let emf_sent: u64 = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["sink"] == "emf")
        .map(|v| v["sent"].as_u64().unwrap_or(0))
        .sum();
    assert!(emf_sent > 0);
    assert_eq!(emf_out.lines().len() as u64, emf_sent);
}
