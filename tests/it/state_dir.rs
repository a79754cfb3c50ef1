//! What `readyprobe run` does with its state directory: it opens nothing there through a symbolic
//! link; and two processes with one `prober_id` on one directory each notice the other through
//! the control document and say so at ERROR and in their evidence, while a plain restart (one
//! process after the other) does not.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{read_evidence, wait_evidence};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::net::TcpListener;

/// A run of the built binary with its own evidence file and log.
struct Run {
    child: tokio::process::Child,
    evidence: PathBuf,
    log: PathBuf,
}

/// The config of a run named `name` in `dir`, its evidence in `evidence`.
fn config(dir: &Path, name: &str, dns: &DnsServer, port: u16, evidence: &Path) -> PathBuf {
    ConfigBuilder::new(dir, "orders-queue", "mq.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .set("probe", "interval", "200ms")
        .set("probe", "timeout", "150ms")
        .set("publish", "interval", "1s")
        .set("state", "poll_interval", "300ms")
        .set("evidence", "path", path(evidence))
        .branch(
            "primary",
            "PRIMARY",
            "mq-primary.orders.internal.example",
            None,
        )
        .write(&dir.join(format!("{name}.toml")))
}

impl Run {
    fn start(dir: &Path, name: &str, dns: &DnsServer, port: u16) -> Run {
        let evidence = dir.join(format!("{name}.jsonl"));
        let log = dir.join(format!("{name}.log"));
        let config = config(dir, name, dns, port, &evidence);
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(["run", "--grace", "2s", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Run {
            child,
            evidence,
            log,
        }
    }

    /// SIGTERM, wait for exit 0, and return the evidence and the log.
    async fn stop(mut self) -> (Vec<Value>, String) {
        let pid = self.child.id().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("exit after SIGTERM")
            .unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert_eq!(status.code(), Some(0), "{log}");
        (read_evidence(&self.evidence), log)
    }
}

fn duplicates(ev: &[Value]) -> Vec<&Value> {
    ev.iter()
        .filter(|v| v["kind"] == "duplicate_prober")
        .collect()
}

/// The control document's `saved_at` of prober `it` (0 before its first save).
fn saved_at(doc: &Path) -> i64 {
    std::fs::read(doc)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|d| d["probers"]["it"]["saved_at"].as_i64())
        .unwrap_or(0)
}

/// Wait until prober `it` has saved `n` more times (each save has a later `saved_at`).
async fn saves(doc: &Path, n: usize) {
    let mut last = saved_at(doc);
    let mut seen = 0;
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen < n {
        assert!(
            tokio::time::Instant::now() < end,
            "only {seen} saves of {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = saved_at(doc);
        if now > last {
            (last, seen) = (now, seen + 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_one_prober_id_each_report_the_other() {
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-primary", Ipv4Addr::LOCALHOST, 5).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("state/control-orders-queue.json");

    // A restart: the second run finds the first one's entry, which is no duplicate.
    let first = Run::start(dir.path(), "first", &dns, port);
    saves(&doc, 3).await;
    let (first_ev, _) = first.stop().await;
    let restarted = Run::start(dir.path(), "restarted", &dns, port);
    saves(&doc, 3).await;

    // A second live process with the same prober id: both notice within a few syncs.
    let twin = Run::start(dir.path(), "twin", &dns, port);
    let both = |ev: &[Value]| !duplicates(ev).is_empty();
    wait_evidence(&twin.evidence, Duration::from_secs(30), both).await;
    wait_evidence(&restarted.evidence, Duration::from_secs(30), both).await;
    let (restarted_ev, restarted_log) = restarted.stop().await;
    let (twin_ev, twin_log) = twin.stop().await;
    server.abort();

    assert!(duplicates(&first_ev).is_empty(), "a lone run reports none");
    let (r, t) = (duplicates(&restarted_ev), duplicates(&twin_ev));
    // Each names the other: the instance ids cross over.
    assert_eq!(r[0]["other_instance"], t[0]["instance"], "{r:?} {t:?}");
    assert_eq!(t[0]["other_instance"], r[0]["instance"], "{r:?} {t:?}");
    // Nothing before the twin started: the restart itself was not taken for a duplicate.
    let twin_start = twin_ev[0]["at_ms"].as_i64().unwrap();
    assert!(r.iter().all(|d| d["at_ms"].as_i64().unwrap() >= twin_start));
    let store = doc.display().to_string();
    for (d, log) in [(r[0], &restarted_log), (t[0], &twin_log)] {
        assert_eq!(d["state_store"], store.as_str());
        let line = log
            .lines()
            .find(|l| l.contains("another readyprobe process runs with prober_id"))
            .unwrap_or_else(|| panic!("no duplicate line in the log:\n{log}"));
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("\"it\"") && line.contains(&store), "{line}");
    }
}

/// A link planted in place of the evidence file, the control document or its lock file: `run`
/// exits 74 at start with a message naming the link, and the file it points to is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_symlink_in_the_state_dir_naming_it() {
    let dns = DnsServer::start("orders.internal.example").await;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("shadow");
    std::fs::write(&target, "root:*:0:0\n").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let evidence = state.join("evidence.jsonl");
    let doc = state.join("control-orders-queue.json");
    let lock = state.join("control-orders-queue.lock");
    for link in [&evidence, &doc, &lock] {
        std::os::unix::fs::symlink(&target, link).unwrap();
        let cfg = config(dir.path(), "links", &dns, 9, &evidence);
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
                .args(["run", "--duration", "1s", "--config"])
                .arg(&cfg)
                .output(),
        )
        .await
        .expect("run exits at start")
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{stderr}");
        let named = format!("{} is a symbolic link", link.display());
        assert!(stderr.contains(&named), "{stderr}");
        std::fs::remove_file(link).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:*:0:0\n");
}

/// A FIFO or a directory in place of the lock file (which `run` opens only at its first write):
/// `run` exits 74 at start naming the path and what is there, instead of running with every
/// sync failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_fifo_or_directory_at_the_lock_file_naming_it() {
    let dns = DnsServer::start("orders.internal.example").await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let evidence = state.join("evidence.jsonl");
    let lock = state.join("control-orders-queue.lock");
    let cfg = config(dir.path(), "odd", &dns, 9, &evidence);
    for what in ["a FIFO", "a directory"] {
        if what == "a FIFO" {
            let made = Command::new("mkfifo").arg(&lock).status().unwrap();
            assert!(made.success());
        } else {
            std::fs::create_dir(&lock).unwrap();
        }
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
                .args(["run", "--duration", "3s", "--config"])
                .arg(&cfg)
                .output(),
        )
        .await
        .expect("run exits at start")
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{what}: {stderr}");
        let named = format!("{} is {what}", lock.display());
        assert!(stderr.contains(&named), "{stderr}");
        if what == "a FIFO" {
            std::fs::remove_file(&lock).unwrap();
        } else {
            std::fs::remove_dir(&lock).unwrap();
        }
    }
}
