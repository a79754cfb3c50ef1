//! Failback safety on real components: operator approval, overrides, the shared state store
//! (file and S3 on the emulator), fail-open and liveness signals, several probers on one series.

use crate::support::cloudwatch::{MetricQuery, endpoint, unique_namespace};
use crate::support::fixture::*;
use crate::support::proxy::NoisyProxy;
use readyprobe::control::{Approval, ControlDoc};
use readyprobe::state::{S3Store, Store};
use std::process::Command;
use std::time::Duration;

const APPROVAL_POLICY: &str = r#"
[readiness]
window = "3s"
min_attempts = 5
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "2s", approval = "required" }
initial = "ready"
"#;

fn cli(args: &[&str], config: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn state_of(ev: &[serde_json::Value], branch: &str) -> String {
    transitions(ev, branch)
        .last()
        .map(|t| t.1.clone())
        .unwrap_or_else(|| "initial".into())
}

async fn readiness_values(
    cw: &aws_sdk_cloudwatch::Client,
    ns: &str,
    branch: &str,
    stat: &str,
) -> Vec<f64> {
    MetricQuery::new(ns, "Readiness")
        .dims(&[("Service", "orders-db"), ("Branch", branch)])
        .stat(stat)
        .fetch(cw)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// `readyprobe approve --branch primary --by BY --reason REASON EXTRA…`.
fn approve(
    path: &std::path::Path,
    by: &str,
    reason: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec![
        "approve", "--branch", "primary", "--by", by, "--reason", reason,
    ];
    args.extend_from_slice(extra);
    cli(&args, path)
}

/// Read-only → unready; writable → pending_approval (published 0, `status` says it waits);
/// an approval given while unready and an expired one are rejected; a valid one → ready (1),
/// with who, why and when in the evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_waits_for_a_valid_operator_approval() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some(cw) = cloudwatch().await else { return };
    let ns = unique_namespace("approval");
    let leak: &'static str = Box::leak(ns.clone().into_boxed_str());
    let path = p.write_config(
        "approval.toml",
        &ConfigOpts {
            policy: APPROVAL_POLICY,
            namespace: leak,
            sinks: &["cloudwatch"],
            endpoint: Some(endpoint()),
            ..Default::default()
        },
    );
    let cfg = readyprobe::config::load(&path).unwrap();
    let ev_path = p.evidence();
    let run = Running::start(cfg, None);

    an_early_approval_does_not_pre_authorise(&p, &path).await;
    an_expired_approval_is_rejected(&p, &path).await;

    // A valid approval makes it ready and publishes 1. On a loaded machine a slow attempt can
    // leave the ready window short at the moment the prober reads the approval; the prober then
    // rejects it as not supported by current evidence (the rule), and the operator approves again.
    let mut not_current = 0;
    let ev = loop {
        let reason = format!("replica promoted back, checked ({not_current})");
        let (code, out, err) = approve(&path, "carol", &reason, &[]);
        assert_eq!(code, 0, "{out}{err}");
        let ev = wait_evidence(&ev_path, Duration::from_secs(30), |ev| {
            ev.iter()
                .any(|v| v["kind"] == "approval" && v["reason"] == reason.as_str())
        })
        .await;
        let decided = ev
            .iter()
            .find(|v| v["kind"] == "approval" && v["reason"] == reason.as_str())
            .unwrap();
        if decided["applied"] == true {
            break wait_evidence(&ev_path, Duration::from_secs(30), |ev| {
                has_transition(ev, "primary", "ready")
            })
            .await;
        }
        let detail = decided["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("does not hold now") && not_current < 4,
            "a valid approval was rejected: {decided}"
        );
        not_current += 1;
    };
    let ok = ev
        .iter()
        .find(|v| v["kind"] == "approval" && v["applied"] == true)
        .unwrap();
    assert_eq!(ok["by"], "carol");
    assert_eq!(
        ok["reason"],
        format!("replica promoted back, checked ({not_current})")
    );
    assert!(ok["given_at"].as_i64().is_some());
    wait_ticks(&ev_path, ev.len(), 1).await;
    let s = run.stop().await;
    assert_eq!(s.final_states["primary"].as_str(), "ready");
    assert_eq!(
        (s.approvals_applied, s.approvals_rejected),
        (1, 2 + not_current)
    );
    assert!(
        readiness_values(&cw, &ns, "primary", "Minimum")
            .await
            .contains(&0.0)
    );
    assert!(
        readiness_values(&cw, &ns, "primary", "Maximum")
            .await
            .contains(&1.0)
    );
}

/// Read-only → unready; an approval given then is refused up front and rejected when read;
/// writable → pending_approval, published 0, and `status` says it waits.
async fn an_early_approval_does_not_pre_authorise(p: &Pipeline, path: &std::path::Path) {
    let ev_path = p.evidence();
    p.primary.set_read_only(true).await;
    wait_evidence(&ev_path, Duration::from_secs(20), |ev| {
        has_transition(ev, "primary", "unready")
    })
    .await;
    let (code, _, err) = approve(path, "alice", "too early", &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no prober has branch primary in pending_approval"),
        "{err}"
    );
    p.primary.set_read_only(false).await;
    let ev = wait_evidence(&ev_path, Duration::from_secs(20), |ev| {
        has_transition(ev, "primary", "pending_approval")
    })
    .await;
    let early = ev
        .iter()
        .find(|v| v["kind"] == "approval" && v["reason"] == "too early")
        .expect("the early approval was read and recorded");
    assert_eq!(early["applied"], false);
    // Waiting: published 0, and `status` says so.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ev = read_evidence(&ev_path);
    assert_eq!(
        state_of(&ev, "primary"),
        "pending_approval",
        "the early approval did not pre-authorise"
    );
    let t = ev
        .iter()
        .rfind(|v| v["kind"] == "transition" && v["branch"] == "primary")
        .unwrap();
    assert_eq!(t["published"], 0.0);
    let (code, out, _) = cli(&["status"], path);
    assert_eq!(code, 0);
    assert!(out.contains("prober it: pending_approval"), "{out}");
    assert!(
        out.contains("waiting for: operator approval (readyprobe approve --branch primary"),
        "{out}"
    );
}

/// An expiry shorter than two syncs is refused up front, and an approval that has expired by
/// the time a prober reads it is rejected: the branch stays pending_approval.
async fn an_expired_approval_is_rejected(p: &Pipeline, path: &std::path::Path) {
    let ev_path = p.evidence();
    let (code, _, err) = approve(path, "bob", "x", &["--expires", "1ms"]);
    assert_eq!(code, 64, "{err}");
    let store = readyprobe::state::FileStore::new(&p.dir.path().join("state"), "orders-db");
    let now = readyprobe::clock::Clock::start().now_ms();
    store
        .update(move |d| {
            d.approvals.push(Approval {
                id: "stale-1".into(),
                branch: "primary".into(),
                by: "bob".into(),
                reason: "stale".into(),
                at: now,
                expires_at: now + 1,
                decisions: Default::default(),
            });
            Ok(())
        })
        .unwrap();
    wait_evidence(&ev_path, Duration::from_secs(30), |ev| {
        ev.iter()
            .any(|v| v["kind"] == "approval" && v["reason"] == "stale")
    })
    .await;
    let ev = read_evidence(&ev_path);
    let stale = ev
        .iter()
        .find(|v| v["kind"] == "approval" && v["reason"] == "stale")
        .unwrap();
    assert_eq!(stale["applied"], false);
    assert!(stale["detail"].as_str().unwrap().contains("expired"));
    assert_eq!(state_of(&ev, "primary"), "pending_approval");
}

/// `override --force unready` publishes 0 at once on a healthy branch; the real readiness is
/// still computed; the expiry restores the computed value without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn override_forces_the_metric_until_it_expires() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let policy = "[readiness]\nwindow = \"3s\"\nmin_attempts = 5\ninitial = \"ready\"\n";
    let path = p.write_config(
        "override.toml",
        &ConfigOpts {
            policy,
            ..Default::default()
        },
    );
    let cfg = readyprobe::config::load(&path).unwrap();
    let ev_path = p.evidence();
    let run = Running::start(cfg, None);
    // The healthy branch is probed before the override forces it.
    wait_evidence(&ev_path, Duration::from_secs(10), |ev| {
        attempts(ev, "primary")
            .iter()
            .any(|a| a["result"] == "success")
    })
    .await;
    let (code, out, err) = cli(
        &[
            "override",
            "--branch",
            "primary",
            "--force",
            "unready",
            "--expires",
            "3s",
            "--reason",
            "maintenance",
            "--by",
            "dave",
        ],
        &path,
    );
    assert_eq!(code, 0, "{out}{err}");
    let ev = wait_evidence(&ev_path, Duration::from_secs(5), |ev| {
        ev.iter()
            .any(|v| v["kind"] == "override" && v["action"] == "set")
    })
    .await;
    assert!(ev.iter().any(|v| v["kind"] == "override"));
    let (_, status, _) = cli(&["status"], &path);
    assert!(status.contains("OVERRIDE: forced unready"), "{status}");
    let ev = wait_evidence(&ev_path, Duration::from_secs(8), |ev| {
        ev.iter()
            .any(|v| v["kind"] == "override" && v["action"] == "expired")
    })
    .await;
    wait_ticks(&ev_path, ev.len(), 1).await;
    let s = run.stop().await;
    let ev = read_evidence(&ev_path);
    // The branch itself never stopped being ready.
    assert!(transitions(&ev, "primary").is_empty());
    assert_eq!(s.final_states["primary"].as_str(), "ready");
    // Published values, from the EMF lines' source of truth: publish records of the override.
    let expired = ev
        .iter()
        .find(|v| v["kind"] == "override" && v["action"] == "expired")
        .unwrap();
    let (at, expires_at) = (
        expired["override"]["at"].as_i64().unwrap(),
        expired["override"]["expires_at"].as_i64().unwrap(),
    );
    assert_eq!(expires_at - at, 3000, "--expires 3s");
    // Measured against the override's own end, not against when the prober first saw it
    // (a poll and a save later, longer on a loaded machine).
    assert!(
        expired["at_ms"].as_i64().unwrap() >= expires_at,
        "lasted until its expiry: {expired}"
    );
    let expiries = ev
        .iter()
        .filter(|v| v["kind"] == "override" && v["action"] == "expired")
        .count();
    assert_eq!(expiries, 1, "an expiry is recorded once, not at every sync");
    let override_publishes = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["reason"] == "override")
        .count();
    assert!(
        override_publishes >= 2,
        "0 at once, then the computed 1 at expiry"
    );
}

async fn s3_bucket_or_skip() -> Option<(aws_sdk_s3::Client, String)> {
    cloudwatch().await?; // same emulator; sets test credentials
    let conf = aws_sdk_s3::config::Builder::from(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(endpoint())
            .load()
            .await,
    )
    .force_path_style(true)
    .build();
    let client = aws_sdk_s3::Client::from_conf(conf);
    let bucket = format!("readyprobe-it-{}", rand::random::<u32>());
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    Some((client, bucket))
}

fn s3_state(bucket: &str) -> String {
    format!(
        "[state]\nstore = \"s3\"\npoll_interval = \"500ms\"\n\n[state.s3]\nbucket = \"{bucket}\"\nkey_prefix = \"it/\"\nregion = \"us-east-1\"\nendpoint_url = \"{}\"\n",
        endpoint()
    )
}

/// Scheduled-task mode on the S3 store: three bounded runs continue one state; the ready
/// condition's `for` spans runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_bounded_runs_continue_one_state_in_s3() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some((s3, bucket)) = s3_bucket_or_skip().await else {
        return;
    };
    let state = s3_state(&bucket);
    let leak: &'static str = Box::leak(state.into_boxed_str());
    let opts = ConfigOpts {
        state: leak,
        ..Default::default()
    };
    let s1 = Running::start(
        p.config("s3.toml", &opts),
        Some(Duration::from_millis(3200)),
    )
    .finish()
    .await;
    assert_eq!(s1.final_states["primary"].as_str(), "unknown");
    let obj = s3
        .get_object()
        .bucket(&bucket)
        .key("it/control-orders-db.json")
        .send()
        .await
        .expect("run 1 saved to S3");
    let doc: ControlDoc =
        serde_json::from_slice(&obj.body.collect().await.unwrap().into_bytes()).unwrap();
    assert!(
        doc.probers["it"].branches["primary"]
            .ready_holding_since
            .is_some()
    );
    let n1 = read_evidence(&p.evidence()).len();
    let s2 = Running::start(p.config("s3.toml", &opts), Some(Duration::from_secs(4)))
        .finish()
        .await;
    let ev = read_evidence(&p.evidence());
    let start2 = ev[n1..].iter().find(|v| v["kind"] == "start").unwrap()["at_ms"]
        .as_i64()
        .unwrap();
    let t = transitions(&ev[n1..], "primary");
    assert_eq!(t[0].1, "ready");
    assert!(t[0].3.unwrap() < start2, "the `for` began in run 1: {t:?}");
    assert_eq!(s2.final_states["primary"].as_str(), "ready");
    let n2 = ev.len();
    let s3run = Running::start(p.config("s3.toml", &opts), Some(Duration::from_secs(1)))
        .finish()
        .await;
    let ev = read_evidence(&p.evidence());
    assert!(transitions(&ev[n2..], "primary").is_empty());
    assert_eq!(s3run.final_states["primary"].as_str(), "ready");
    assert_eq!(s3run.state_sync_failures, 0);
}

/// Concurrent writers on the S3 store: every approval survives (conditional writes, retried
/// from the fresh document after a lost race).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_s3_writers_never_lose_an_approval() {
    let Some((_s3, bucket)) = s3_bucket_or_skip().await else {
        return;
    };
    let cfg = readyprobe::config::S3State {
        bucket,
        key_prefix: "race/".into(),
        region: Some("us-east-1".into()),
        endpoint_url: Some(endpoint()),
    };
    let store = Store::S3(S3Store::new(&cfg, "orders-db").await);
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..5 {
                store
                    .update(move |d| {
                        d.approvals.push(Approval {
                            id: format!("{w}-{i}"),
                            branch: "primary".into(),
                            by: format!("writer-{w}"),
                            reason: "race".into(),
                            at: 0,
                            expires_at: 1,
                            decisions: Default::default(),
                        });
                        Ok(())
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let doc = store.load().await.unwrap();
    let mut ids: Vec<_> = doc.approvals.iter().map(|a| a.id.clone()).collect();
    ids.sort();
    assert_eq!(ids.len(), 20, "{ids:?}");
}

/// SIGKILL at random moments while the prober writes the file store every 100 ms: the document
/// is always readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_prober_mid_write_leaves_a_readable_file_store() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let path = p.write_config(
        "kill.toml",
        &ConfigOpts {
            interval_ms: 100,
            timeout_ms: 90,
            state: "[state]\npoll_interval = \"100ms\"\n",
            ..Default::default()
        },
    );
    let store = readyprobe::state::FileStore::new(&p.dir.path().join("state"), "orders-db");
    for round in 0..8u64 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(["run", "--config"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(600 + (round * 137) % 500)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let doc = store
            .load()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            doc.probers.contains_key("it"),
            "round {round}: {doc:?}\n{:?}",
            read_evidence(&p.evidence()).last()
        );
    }
}

/// Both databases read-only: `BothBranchesUnready` becomes 1 (with a loud evidence record);
/// `Heartbeat` arrives while the prober runs and stops when it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_unready_is_flagged_and_heartbeat_stops_with_the_prober() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some(cw) = cloudwatch().await else { return };
    let ns = unique_namespace("failopen");
    let leak: &'static str = Box::leak(ns.clone().into_boxed_str());
    let cfg = p.config(
        "failopen.toml",
        &ConfigOpts {
            namespace: leak,
            sinks: &["cloudwatch"],
            endpoint: Some(endpoint()),
            policy: "[readiness]\nwindow = \"3s\"\nmin_attempts = 5\ndeclare_unready = { success_rate_below = 80.0, for = \"1s\" }\ninitial = \"ready\"\n",
            ..Default::default()
        },
    );
    p.primary.set_read_only(true).await;
    p.secondary.set_read_only(true).await;
    let started = std::time::SystemTime::now();
    let run = Running::start(cfg, None);
    let ev = wait_evidence(&p.evidence(), Duration::from_secs(20), |ev| {
        ev.iter().any(|v| v["kind"] == "both_branches_unready")
    })
    .await;
    wait_ticks(&p.evidence(), ev.len(), 1).await;
    run.stop().await;
    // Every datum the run publishes carries a time no later than this.
    let stopped = std::time::SystemTime::now();
    let q = |metric: &str, stat: &str| {
        MetricQuery::new(&ns, metric)
            .dims(&[("Service", "orders-db")])
            .stat(stat)
    };
    let flag = q("BothBranchesUnready", "Maximum")
        .poll(&cw, Duration::from_secs(15), |v| !v.is_empty())
        .await;
    assert!(flag.iter().any(|(_, v)| *v == 1.0), "{flag:?}");
    let beats = |v: &[(std::time::SystemTime, f64)]| v.iter().map(|(_, x)| *x).sum::<f64>();
    let alive = q("Heartbeat", "Sum")
        .poll(&cw, Duration::from_secs(15), |v| beats(v) >= 2.0)
        .await;
    assert!(beats(&alive) >= 2.0, "heartbeats while alive: {alive:?}");
    // A prober still running would publish a heartbeat every second (the publish interval).
    // Counted by the datums' own times, in 1 s buckets from a second after the stop (the bucket
    // start is floored to the second): a request the emulator answers late, after the stop, is
    // not mistaken for a new heartbeat, as a before/after comparison of totals would.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let per_second = |from: std::time::SystemTime| {
        q("Heartbeat", "SampleCount")
            .window(from, stopped + Duration::from_secs(300))
            .period(1)
    };
    let during = per_second(started).fetch(&cw).await;
    assert!(
        beats(&during) >= 2.0,
        "the same query over the run: {during:?}"
    );
    let later = per_second(stopped + Duration::from_secs(1))
        .fetch(&cw)
        .await;
    assert_eq!(
        beats(&later),
        0.0,
        "heartbeats after the prober stopped: {later:?}"
    );
}

/// Two probers publish the same series; one sees the primary ready, the other (behind a proxy
/// that drops every connection) unready. Each datum stays 0/1, and the alarm statistic chooses
/// the quorum rule: Minimum = any prober says unready, Maximum = all must, Average = the share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_probers_one_series_quorum_by_statistic() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some(cw) = cloudwatch().await else { return };
    let ns = unique_namespace("quorum");
    let leak: &'static str = Box::leak(ns.clone().into_boxed_str());
    let blackhole = NoisyProxy::start(p.primary.addr(), 1.0, 1).await;
    let policy = "[readiness]\nwindow = \"3s\"\nmin_attempts = 5\ndeclare_unready = { success_rate_below = 80.0, for = \"1s\" }\ninitial = \"ready\"\n";
    let base = ConfigOpts {
        namespace: leak,
        sinks: &["cloudwatch"],
        endpoint: Some(endpoint()),
        policy,
        ..Default::default()
    };
    let mut a = p.config("qa.toml", &base);
    a.prober_id = "az-a".into();
    let mut b = p.config(
        "qb.toml",
        &ConfigOpts {
            primary_port: Some(blackhole.addr().port()),
            ..base
        },
    );
    b.prober_id = "az-b".into();
    let ra = Running::start(a, None);
    let rb = Running::start(b, None);
    let ev = wait_evidence(&p.evidence(), Duration::from_secs(20), |ev| {
        ev.iter()
            .any(|v| v["kind"] == "transition" && v["prober"] == "az-b" && v["branch"] == "primary")
    })
    .await;
    // Two ticks of each prober after az-b's 0: the 1 s periods hold both values.
    let from = ev.len();
    wait_evidence(&p.evidence(), Duration::from_secs(30), |ev| {
        ["az-a", "az-b"]
            .iter()
            .all(|p| ticks_since(ev, from, Some(p)) >= 2)
    })
    .await;
    let sa = ra.stop().await;
    let sb = rb.stop().await;
    assert_eq!(sa.final_states["primary"].as_str(), "ready");
    assert_eq!(sb.final_states["primary"].as_str(), "unready");
    let stat = |s: &str| {
        let cw = cw.clone();
        let ns = ns.clone();
        let s = s.to_string();
        async move { readiness_values(&cw, &ns, "primary", &s).await }
    };
    let (min, max) = (stat("Minimum").await, stat("Maximum").await);
    let samples = stat("SampleCount").await;
    assert!(
        min.iter().all(|v| *v == 0.0 || *v == 1.0) && min.contains(&0.0),
        "{min:?}"
    );
    assert!(max.contains(&1.0), "{max:?}");
    let avg = stat("Average").await;
    assert!(
        avg.iter().any(|v| *v > 0.0 && *v < 1.0),
        "a share between the probers: {avg:?}"
    );
    assert!(samples.iter().sum::<f64>() >= 4.0);
}
