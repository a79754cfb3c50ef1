//! The issue's acceptance: a real Prometheus (the Debian package's `/usr/bin/prometheus`) scrapes
//! the built binary's `/metrics` every second, one readiness series per branch, and follows a
//! transition within one scrape. Two throwaway MariaDB servers with TLS behind real DNS, probed
//! by the `mysql` kind; the primary is made read-only, so the canary's write fails
//! `server_read_only` and the branch turns unready, with a publish interval (2 minutes) far longer
//! than the scrape interval, so only the transition itself can move the gauge in time.

use crate::support::fixture::{ConfigOpts, Pipeline, has_transition, read_evidence, wait_evidence};
use crate::support::run::{DEADLINE, served_addr, spawn_graced, stop};
use crate::support::{free_tcp_port, skip_or_panic};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const SERVICE: &str = "orders-db";

/// Prometheus scraping `target` every second, its API on `api`.
fn prometheus(dir: &Path, target: SocketAddr, api: SocketAddr) -> tokio::process::Child {
    let cfg = dir.join("prometheus.yml");
    let text = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: readyprobe\n    static_configs:\n      - targets: [\"{target}\"]\n"
    );
    std::fs::write(&cfg, text).unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    tokio::process::Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={api}"))
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus starts")
}

/// The `data.result` of a Prometheus instant query, or `None` while it does not answer.
async fn query(api: SocketAddr, promql: &str) -> Option<Vec<Value>> {
    let q = utf8_percent_encode(promql, NON_ALPHANUMERIC);
    // HTTP/1.0: the answer is not chunked and ends with the connection.
    let req = format!("GET /api/v1/query?query={q} HTTP/1.0\r\nHost: prometheus\r\n\r\n");
    let mut s = TcpStream::connect(api).await.ok()?;
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (_, body) = text.split_once("\r\n\r\n")?;
    let v: Value = serde_json::from_str(body).ok()?;
    v["data"]["result"].as_array().cloned()
}

/// The samples (ms, value) Prometheus holds for the service's `branch` readiness.
async fn samples(api: SocketAddr, branch: &str) -> Vec<(i64, String)> {
    let promql = format!(r#"readyprobe_readiness{{service="{SERVICE}",branch="{branch}"}}[10m]"#);
    let series = query(api, &promql).await.unwrap_or_default();
    let values = series.first().map(|s| s["values"].clone());
    let values = values
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    values
        .iter()
        .map(|p| {
            let ms = (p[0].as_f64().unwrap_or_default() * 1000.0).round() as i64;
            (ms, p[1].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// The `branch` label of every readiness series Prometheus ever stored for the service, sorted.
async fn readiness_series(api: SocketAddr) -> Vec<String> {
    let promql = format!(r#"readyprobe_readiness{{service="{SERVICE}"}}[10m]"#);
    let series = query(api, &promql).await.unwrap_or_default();
    let mut branches: Vec<String> = series
        .iter()
        .map(|s| {
            s["metric"]["branch"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    branches.sort_unstable();
    branches
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls until Prometheus holds a sample of 1 for `branch`.
async fn wait_sample_of_1(api: SocketAddr, dir: &Path, branch: &str) {
    let end = tokio::time::Instant::now() + DEADLINE;
    while !samples(api, branch).await.iter().any(|s| s.1 == "1") {
        let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
        assert!(
            tokio::time::Instant::now() < end,
            "no sample of 1 for {branch}: {log}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_follows_a_read_only_primary_within_one_scrape() {
    if !Path::new(PROMETHEUS).is_file() {
        skip_or_panic("prometheus (Debian package prometheus) is not installed");
        return;
    }
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let dir = p.dir.path();
    let opts = ConfigOpts {
        interval_ms: 500,
        timeout_ms: 450,
        publish_ms: 120_000,
        ..ConfigOpts::default()
    };
    let path = p
        .builder(&opts)
        .set("serve", "listen", "127.0.0.1:0")
        .write(&dir.join("scrape.toml"));
    let evidence = p.evidence();
    let stdout = dir.join("stdout.jsonl");
    let mut child = spawn_graced(&path, &stdout, "1s");
    let target = served_addr(&stdout.with_extension("log")).await;
    let api = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
    let mut prom = prometheus(dir, target, api);

    // Both branches ready, Prometheus has scraped both 1s, and holds one series per branch.
    wait_evidence(&evidence, DEADLINE, |ev| {
        has_transition(ev, "primary", "ready") && has_transition(ev, "secondary", "ready")
    })
    .await;
    wait_sample_of_1(api, dir, "primary").await;
    wait_sample_of_1(api, dir, "secondary").await;
    assert_eq!(readiness_series(api).await, ["primary", "secondary"]);

    // The primary turns read-only: the canary's write is refused and the branch turns unready.
    let from = read_evidence(&evidence).len();
    p.primary.set_read_only(true).await;
    wait_evidence(&evidence, DEADLINE, |ev| {
        has_transition(&ev[from.min(ev.len())..], "primary", "unready")
    })
    .await;
    // The transition's record exists: the exposition took the effect before it was written, so
    // every scrape that started from now on carries the 0 (no publish tick is due for 2 minutes).
    let seen = now_ms();
    let end = tokio::time::Instant::now() + DEADLINE;
    let after = loop {
        let all = samples(api, "primary").await;
        let after: Vec<_> = all.into_iter().filter(|s| s.0 > seen).collect();
        if after.len() >= 2 {
            break after;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no scrape since the transition"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(after.iter().all(|s| s.1 == "0"), "{after:?}");
    // No publish tick moved the gauge in between: the transition did.
    let ev = read_evidence(&evidence);
    let at = ev[from..]
        .iter()
        .find(|v| v["kind"] == "transition" && v["branch"] == "primary")
        .and_then(|t| t["at_ms"].as_i64())
        .unwrap();
    let last = after.last().map_or(seen, |s| s.0);
    let ticks: Vec<&Value> = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["reason"] == "tick")
        .filter(|v| {
            v["at_ms"]
                .as_i64()
                .is_some_and(|t| (at..=last).contains(&t))
        })
        .collect();
    assert!(
        ticks.is_empty(),
        "a tick between transition and scrape: {ticks:?}"
    );

    // The failures are counted with their class; still one readiness series per branch.
    let promql = format!(
        r#"readyprobe_attempts_total{{service="{SERVICE}",branch="primary",result="failure"}}"#
    );
    let failures = query(api, &promql).await.unwrap_or_default();
    let read_only = failures
        .iter()
        .find(|s| s["metric"]["class"] == "server_read_only");
    let count = read_only.and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok());
    assert!(count.is_some_and(|n| n >= 1.0), "{failures:?}");
    assert!(
        failures.iter().all(|s| s["metric"]["class"] != ""),
        "a failure without its class: {failures:?}"
    );
    assert_eq!(readiness_series(api).await, ["primary", "secondary"]);

    stop(&mut child).await;
    prom.kill().await.unwrap();
}
