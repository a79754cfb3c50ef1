//! A real Prometheus (the Debian package's `/usr/bin/prometheus`) scrapes the built binary's
//! `/metrics` every second: one readiness series per branch, and the scrape after a transition
//! already shows it. Two `tcp` branches on loopback listeners, real DNS; the primary's listener
//! closes, so its attempts fail `tcp_refused` and it turns unready.

use crate::reload::{DEADLINE, config, fleet, service, signal, spawn_graced};
use crate::serve::served_addr;
use crate::support::fixture::wait_evidence;
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

/// The samples (ms, value) Prometheus holds for alpha's `branch` readiness.
async fn samples(api: SocketAddr, branch: &str) -> Vec<(i64, String)> {
    let promql = format!(r#"readyprobe_readiness{{service="alpha",branch="{branch}"}}[10m]"#);
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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn transition_to(ev: &[Value], branch: &str, to: &str) -> bool {
    ev.iter()
        .any(|v| v["kind"] == "transition" && v["branch"] == branch && v["transition"]["to"] == to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_follows_a_transition_within_one_scrape() {
    if !Path::new(PROMETHEUS).is_file() {
        skip_or_panic("prometheus (Debian package prometheus) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(&["alpha"]).await;
    let svc = service("alpha", f.ports[0].port, f.ports[1].port);
    let serve = "\n[serve]\nlisten = \"127.0.0.1:0\"\n";
    let path = dir.path().join("scrape.toml");
    std::fs::write(
        &path,
        config(dir.path(), &f.dns, "1s", &format!("{serve}{svc}")),
    )
    .unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let mut child = spawn_graced(&path, &stdout, "1s");
    let target = served_addr(&stdout.with_extension("log")).await;
    let api = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
    let mut prom = prometheus(dir.path(), target, api);

    // Both branches ready, and Prometheus has scraped the primary's 1.
    wait_evidence(&evidence, DEADLINE, |ev| {
        transition_to(ev, "primary", "ready") && transition_to(ev, "secondary", "ready")
    })
    .await;
    let end = tokio::time::Instant::now() + DEADLINE;
    while !samples(api, "primary").await.iter().any(|s| s.1 == "1") {
        let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
        assert!(tokio::time::Instant::now() < end, "no sample of 1: {log}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The primary's listener closes: its attempts are refused and it turns unready.
    drop(f.ports.remove(0));
    wait_evidence(&evidence, DEADLINE, |ev| {
        transition_to(ev, "primary", "unready")
    })
    .await;
    // The transition's record exists: the exposition took the effect before it was written, so
    // every scrape that started from now on carries the 0.
    let seen = now_ms();
    let after = loop {
        let all = samples(api, "primary").await;
        let after: Vec<_> = all.into_iter().filter(|s| s.0 > seen).collect();
        if after.len() >= 2 {
            break after;
        }
        assert!(
            tokio::time::Instant::now() < end + DEADLINE,
            "no scrape since the transition"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(after.iter().all(|s| s.1 == "0"), "{after:?}");

    // One readiness series per branch, each with the prober's labels only.
    let series = query(api, r#"readyprobe_readiness{service="alpha"}"#)
        .await
        .unwrap();
    let mut branches: Vec<&str> = series
        .iter()
        .map(|s| s["metric"]["branch"].as_str().unwrap_or_default())
        .collect();
    branches.sort_unstable();
    assert_eq!(branches, ["primary", "secondary"], "{series:?}");

    signal(&child, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    assert_eq!(status.expect("exit after SIGTERM").unwrap().code(), Some(0));
    prom.kill().await.unwrap();
}
