//! A recorded drill on real components, and its report checked against what the test did.
//!
//! Two MariaDB servers behind TLS, the in-process DNS server serving both branch names and the
//! stable name (a CNAME the test flips, with a TTL, when the primary's readiness goes 0 and when
//! it is ready again), the prober with compressed durations publishing to LocalStack, where an
//! alarm per branch follows `Readiness`. The test marks the fault, makes the primary read-only,
//! restores it and approves the failback; then `drill report --alarms` must place each phase
//! within one probe interval of the instant the test saw it happen.

use crate::support::cloudwatch::{MetricQuery, PutAlarms, endpoint, unique_namespace};
use crate::support::config::{ConfigBuilder, path, secret_file};
use crate::support::dns::DnsServer;
use crate::support::fixture::{PASSWORD, Running};
use crate::support::fixture::{cloudwatch, has_transition, wait_evidence};
use crate::support::mariadb::{MariaDb, MariaDbOptions};
use crate::support::tls::TestCa;
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, StateValue, Statistic};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ZONE: &str = "orders.internal.example";
const SERVICE: &str = "orders-db";
/// The probe interval, ms: the tolerance of every phase.
const INTERVAL_MS: i64 = 1000;
/// The TTL the failover CNAME is served with, s.
const TTL: u32 = 2;
const SECONDARY_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// From a flip of the CNAME until every answer given before it has expired, with a margin: the
/// test moves on only then, so that the report sees each cache expiry. (The alarm's wait
/// between a flip and the next step is usually longer already.)
const CACHE_EXPIRY: Duration = Duration::from_secs(TTL as u64 + 2);

const POLICY: &str = r#"
[readiness]
window = "4s"
min_attempts = 3
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "2s", approval = "required" }
initial = "ready"
"#;

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fqdn(host: &str) -> String {
    format!("{host}.{ZONE}")
}

async fn put_alarm(cw: &Client, ns: &str, branch: &str) -> String {
    let name = format!("{ns}-{branch}");
    cw.put_metric_alarm()
        .alarm_name(&name)
        .namespace(ns)
        .metric_name("Readiness")
        .dimensions(Dimension::builder().name("Service").value(SERVICE).build())
        .dimensions(Dimension::builder().name("Branch").value(branch).build())
        .statistic(Statistic::Minimum)
        .period(10)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(ComparisonOperator::LessThanThreshold)
        .treat_missing_data("missing")
        .send()
        .await
        .expect("PutMetricAlarm");
    name
}

/// Poll CloudWatch until each of `branches` has a `Readiness` 1 there.
async fn published_ready(cw: &Client, ns: &str, branches: &[&str]) {
    for branch in branches {
        let q = MetricQuery::new(ns, "Readiness")
            .dims(&[("Service", SERVICE), ("Branch", branch)])
            .period(10)
            .stat("Maximum");
        let got = q
            .poll(cw, Duration::from_secs(30), |v| {
                v.iter().any(|(_, x)| *x == 1.0)
            })
            .await;
        assert!(
            got.iter().any(|(_, x)| *x == 1.0),
            "no Readiness 1 of {branch} in CloudWatch: {got:?}"
        );
    }
}

/// Poll the alarm until it is in `want`; the instant the test saw it.
async fn wait_alarm(cw: &Client, name: &str, want: StateValue) -> i64 {
    let end = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let out = cw
            .describe_alarms()
            .alarm_names(name)
            .send()
            .await
            .expect("DescribeAlarms");
        let state = out
            .metric_alarms()
            .first()
            .and_then(|a| a.state_value().cloned());
        if state.as_ref() == Some(&want) {
            return now_ms();
        }
        assert!(
            tokio::time::Instant::now() < end,
            "alarm {name} is {state:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The newest stable-name round selects `branch` and its end-to-end attempt succeeded.
fn serving(branch: &'static str) -> impl Fn(&[Value]) -> bool {
    move |ev| {
        ev.iter()
            .rev()
            .find(|v| v["kind"] == "stable_name")
            .is_some_and(|r| r["selected"] == branch && r["end_to_end"]["result"] == "success")
    }
}

/// Approve the primary's failback; again when the prober found the ready condition not holding
/// at that instant (a slow attempt under load). The instant of the applied approval.
/// Wait until the prober's saved state (its next store sync, every 500 ms) has the primary in
/// `pending_approval`, which `approve` checks.
async fn wait_saved_pending(state_dir: &Path) {
    let doc = state_dir.join(format!("control-{SERVICE}.json"));
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = std::fs::read_to_string(&doc)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|v| v["probers"]["it"]["branches"]["primary"]["state"].clone());
        if state.as_ref().is_some_and(|s| s == "pending_approval") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the store never had the primary pending_approval: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn approve(config: &Path, evidence: &Path) -> i64 {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let mut last = String::new();
    loop {
        n += 1;
        assert!(
            tokio::time::Instant::now() < end,
            "no approval applied within 30 s ({n} tries); last: {last}; primary's transitions: {:?}",
            crate::support::fixture::transitions(
                &crate::support::fixture::read_evidence(evidence),
                "primary"
            )
        );
        let reason = format!("writer checked by hand ({n})");
        let at = now_ms();
        let (code, out, err) = cli(
            &[
                "approve",
                "--config",
                &config.display().to_string(),
                "--branch",
                "primary",
                "--by",
                "drill-lead",
                "--reason",
                &reason,
            ],
            &[],
        );
        last = err.clone();
        assert_eq!(code, 0, "{out}{err}");
        let ev = wait_evidence(evidence, Duration::from_secs(30), |ev| {
            ev.iter()
                .any(|v| v["kind"] == "approval" && v["reason"] == reason.as_str())
        })
        .await;
        let decided = ev
            .iter()
            .find(|v| v["kind"] == "approval" && v["reason"] == reason.as_str())
            .unwrap();
        if decided["applied"] == true {
            return at;
        }
        let detail = decided["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("does not hold now"), "{decided}");
    }
}

fn mark(config: &Path, kind: &str, label: &str) -> i64 {
    let at = now_ms();
    let (code, out, err) = cli(
        &[
            "drill",
            "mark",
            "--config",
            &config.display().to_string(),
            "--kind",
            kind,
            "--label",
            label,
            "--by",
            "drill-lead",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    at
}

/// The phase of `episode` whose name starts with `name`: its instant.
fn phase_at(episode: &Value, name: &str) -> Option<i64> {
    let phases = episode["phases"].as_array()?;
    let p = phases
        .iter()
        .find(|p| p["name"].as_str().is_some_and(|n| n.starts_with(name)))
        .unwrap_or_else(|| panic!("no phase {name:?} in {episode:#}"));
    p["at"].as_i64()
}

#[track_caller]
fn near(what: &str, got: Option<i64>, want: i64, episode: &Value) {
    within(what, got, want, INTERVAL_MS, episode);
}

#[track_caller]
fn within(what: &str, got: Option<i64>, want: i64, margin: i64, episode: &Value) {
    let got = got.unwrap_or_else(|| panic!("{what}: no time in the report: {episode:#}"));
    assert!(
        (got - want).abs() <= margin,
        "{what}: report says {got}, the test saw {want} (off by {} ms)",
        got - want
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_drill_reports_each_phase_within_one_probe_interval() {
    let Some(cw) = cloudwatch().await else { return };
    let ca = TestCa::new();
    let (p_name, s_name, stable) = (
        fqdn("mysql-primary"),
        fqdn("mysql-secondary"),
        fqdn("mysql"),
    );
    let pc = ca.server_cert(&[&p_name, &stable], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let sc = ca.server_cert(&[&s_name, &stable], &[IpAddr::V4(SECONDARY_IP)]);
    let Some(primary) = MariaDb::start_or_skip(Some(&pc)).await else {
        return;
    };
    let secondary = MariaDb::start_with(MariaDbOptions {
        tls: Some(sc),
        extra_args: vec![format!("--bind-address=127.0.0.1,{SECONDARY_IP}")],
    })
    .await;
    primary.install_canary(PASSWORD).await;
    secondary.install_canary(PASSWORD).await;
    let dns = DnsServer::start(ZONE).await;
    dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mysql-secondary", SECONDARY_IP, 5).await;
    dns.set_cname("mysql", "mysql-primary", TTL).await;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let ns = unique_namespace("drill");
    let config = drill_config(
        dir.path(),
        &ns,
        &stable,
        dns.addr(),
        ca.ca_pem_path(),
        (&p_name, primary.port()),
        (&s_name, secondary.port()),
    );
    let cfg = readyprobe::config::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let run = Running::start(cfg, None);
    let wait = Duration::from_secs(30);

    // Steady: the stable name serves the primary and a client gets through; the alarm is OK.
    // The alarms are put once both branches' 1s are there to see (the emulator evaluates an
    // alarm when it is put, then once per period): OK at once rather than a period later.
    wait_evidence(&evidence, wait, serving("primary")).await;
    published_ready(&cw, &ns, &["primary", "secondary"]).await;
    let put = PutAlarms::new(&cw);
    let alarm_p = put_alarm(&cw, &ns, "primary").await;
    put.add(&alarm_p);
    put.add(&put_alarm(&cw, &ns, "secondary").await);
    wait_alarm(&cw, &alarm_p, StateValue::Ok).await;

    // Failover.
    let fault = mark(&config, "fault", "primary made read-only");
    primary.set_read_only(true).await;
    wait_evidence(&evidence, wait, |ev| {
        has_transition(ev, "primary", "unready")
    })
    .await;
    let unready_seen = now_ms();
    dns.set_cname("mysql", "mysql-secondary", TTL).await;
    let flipped = now_ms();
    let answers_expire = tokio::time::Instant::now() + CACHE_EXPIRY;
    let alarm_seen = wait_alarm(&cw, &alarm_p, StateValue::Alarm).await;
    wait_evidence(&evidence, wait, serving("secondary")).await;
    tokio::time::sleep_until(answers_expire).await;

    // Failback, with the operator's approval.
    let restore = mark(&config, "restore", "primary writable again");
    primary.set_read_only(false).await;
    wait_evidence(&evidence, wait, |ev| {
        has_transition(ev, "primary", "pending_approval")
    })
    .await;
    let pending_seen = now_ms();
    wait_saved_pending(&dir.path().join("state")).await;
    let approved = approve(&config, &evidence).await;
    wait_evidence(&evidence, wait, |ev| has_transition(ev, "primary", "ready")).await;
    let ready_seen = now_ms();
    dns.set_cname("mysql", "mysql-primary", TTL).await;
    let flipped_back = now_ms();
    let answers_expire = tokio::time::Instant::now() + CACHE_EXPIRY;
    let ok_seen = wait_alarm(&cw, &alarm_p, StateValue::Ok).await;
    wait_evidence(&evidence, wait, serving("primary")).await;
    tokio::time::sleep_until(answers_expire).await;
    run.stop().await;

    let seen = Seen {
        fault,
        unready: unready_seen,
        flipped,
        alarm: alarm_seen,
        restore,
        pending: pending_seen,
        approved,
        ready: ready_seen,
        flipped_back,
        ok: ok_seen,
    };
    let out = dir.path().join("report");
    drill_report(&evidence, &out);
    check_report(&out, &seen);
}

/// The drill's config in `dir` (`drill.toml`): both sinks into namespace `ns`, the stable-name
/// probe with its end-to-end attempt, and MySQL branches `primary` and `secondary` as
/// `(endpoint, port)` verified against the CA at `ca`.
fn drill_config(
    dir: &Path,
    ns: &str,
    stable: &str,
    nameserver: std::net::SocketAddr,
    ca: &Path,
    primary: (&str, u16),
    secondary: (&str, u16),
) -> std::path::PathBuf {
    ConfigBuilder::new(dir, SERVICE, stable)
        .clear("readiness")
        .merge(POLICY)
        .set("publish", "interval", "1s")
        .set("publish", "namespace", ns)
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "cloudwatch".into()]),
        )
        .set("publish.cloudwatch", "endpoint_url", endpoint())
        .set("publish.cloudwatch", "region", "us-east-1")
        .set("evidence", "path", path(&dir.join("evidence.jsonl")))
        .merge("[state]\npoll_interval = \"500ms\"\n")
        .set("stable_name_probe", "enabled", true)
        .set("stable_name_probe", "interval", "1s")
        .set("stable_name_probe", "end_to_end", true)
        .nameserver(nameserver)
        .set("dns", "timeout", "300ms")
        .kind("mysql")
        .set("probe", "interval", format!("{INTERVAL_MS}ms"))
        .set("probe", "timeout", "800ms")
        .tls("verify_identity", Some(ca))
        .set("probe.mysql", "user", "readyprobe")
        .set(
            "probe.mysql",
            "password",
            secret_file(&dir.join("password")),
        )
        .branch("primary", "PRIMARY", primary.0, Some(primary.1))
        .branch("secondary", "SECONDARY", secondary.0, Some(secondary.1))
        .write(&dir.join("drill.toml"))
}

/// Instants (ms since the epoch) at which the test did or saw each thing.
struct Seen {
    fault: i64,
    unready: i64,
    flipped: i64,
    alarm: i64,
    restore: i64,
    pending: i64,
    approved: i64,
    ready: i64,
    flipped_back: i64,
    ok: i64,
}

/// `drill report --alarms` over `evidence` into `out`.
fn drill_report(evidence: &Path, out: &Path) {
    let ep = endpoint();
    let (code, stdout, err) = cli(
        &[
            "drill",
            "report",
            "--evidence",
            &evidence.display().to_string(),
            "--alarms",
            "--out",
            &out.display().to_string(),
        ],
        &[
            ("AWS_ENDPOINT_URL", ep.as_str()),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    assert_eq!(code, 0, "{stdout}{err}");
    // docs/development.md: the committed picture is this drill's report.
    if let Ok(keep) = std::env::var("READYPROBE_KEEP_DRILL_REPORT") {
        std::fs::create_dir_all(&keep).unwrap();
        for f in ["report.html", "report.md", "report.json"] {
            std::fs::copy(out.join(f), Path::new(&keep).join(f)).unwrap();
        }
    }
}

/// Failover phases of the report's `over` episode against what the test saw.
fn check_failover(over: &Value, seen: &Seen) {
    // Failover: the first attempt after the fault fails (it starts within an interval, and the
    // read-only check takes a few ms); detection as the test saw the transition; the alarm as the
    // test saw it; the stable name's answer and a client's reconnect within one stable-name round
    // of the flip; the last cache expires a TTL after the last old answer.
    near(
        "first failed attempt",
        phase_at(over, "first failed"),
        seen.fault + INTERVAL_MS / 2,
        over,
    );
    near(
        "detection",
        phase_at(over, "readiness 0"),
        seen.unready,
        over,
    );
    // LocalStack dates an alarm's state change in whole seconds: one more second of margin.
    within(
        "alarm",
        phase_at(over, "alarm"),
        seen.alarm,
        INTERVAL_MS + 1000,
        over,
    );
    near(
        "DNS selection",
        phase_at(over, "stable name answers"),
        seen.flipped + INTERVAL_MS / 2,
        over,
    );
    near(
        "cache expiry",
        phase_at(over, "cache expiry"),
        seen.flipped + i64::from(TTL) * 1000,
        over,
    );
    near(
        "reconnect",
        phase_at(over, "reconnect"),
        seen.flipped + INTERVAL_MS / 2,
        over,
    );
}

/// Failback phases of the report's `back` episode against what the test saw.
fn check_failback(back: &Value, seen: &Seen) {
    // Failback: approval-gated, who approved, then the same chain back.
    near(
        "first successful attempt",
        phase_at(back, "first successful"),
        seen.restore + INTERVAL_MS / 2,
        back,
    );
    near(
        "pending_approval",
        phase_at(back, "pending_approval"),
        seen.pending,
        back,
    );
    assert_eq!(back["approved_by"], "drill-lead");
    near(
        "readiness 1 published",
        phase_at(back, "readiness 1"),
        seen.ready,
        back,
    );
    assert!(phase_at(back, "readiness 1").unwrap() >= seen.approved);
    within(
        "alarm OK",
        phase_at(back, "alarm"),
        seen.ok,
        INTERVAL_MS + 1000,
        back,
    );
    near(
        "DNS selection back",
        phase_at(back, "stable name selects"),
        seen.flipped_back + INTERVAL_MS / 2,
        back,
    );
    near(
        "reconnect back",
        phase_at(back, "reconnect"),
        seen.flipped_back + INTERVAL_MS / 2,
        back,
    );
}

/// Every phase within one probe interval of what the test saw.
fn check_report(out: &Path, seen: &Seen) {
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let svc = &report["services"][0];
    let episodes = svc["episodes"].as_array().unwrap();
    let over = episodes
        .iter()
        .find(|e| e["kind"] == "failover" && e["branch"] == "primary")
        .unwrap_or_else(|| panic!("no failover episode: {svc:#}"));
    let back = episodes
        .iter()
        .find(|e| e["kind"] == "failback" && e["branch"] == "primary")
        .unwrap_or_else(|| panic!("no failback episode: {svc:#}"));

    check_failover(over, seen);
    check_failback(back, seen);

    // The pictures' inputs: both alarm lanes, the stable-name lane, both markers.
    assert_eq!(svc["alarms"].as_array().map(Vec::len), Some(2), "{svc:#}");
    assert!(
        svc["stable_name"]["rounds"]
            .as_array()
            .is_some_and(|r| r.len() > 10)
    );
    assert_eq!(svc["markers"].as_array().map(Vec::len), Some(2));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("drill-lead"), "{md}");
    assert!(
        std::fs::read_to_string(out.join("report.html"))
            .unwrap()
            .contains("<svg")
    );
}
