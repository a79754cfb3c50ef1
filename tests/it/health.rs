//! `readyprobe health` against the heartbeat of a real `readyprobe run` process: fresh while the
//! process runs, stale once it is stopped (SIGSTOP: alive but not turning, as a hung loop) and
//! the max age has passed, fresh again when it goes on; a missing file fails with its reason.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::wait_for;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;

/// `readyprobe health --heartbeat PATH --max-age MAX`.
async fn health(heartbeat: &Path, max_age: &str) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["health", "--max-age", max_age, "--heartbeat"])
        .arg(heartbeat)
        .env_remove("READYPROBE_HEARTBEAT")
        .output()
        .await
        .unwrap()
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn signal(pid: u32, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Whether process `pid` is stopped (state `T` in /proc/PID/stat).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_heartbeat_of_a_running_prober() {
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
    let beat = dir.path().join("heartbeat");
    let config = ConfigBuilder::new(dir.path(), "orders-queue", "mq.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .set("probe", "interval", "200ms")
        .set("probe", "timeout", "150ms")
        .set("publish", "interval", "1s")
        .set("evidence", "path", path(&dir.path().join("evidence.jsonl")))
        .branch(
            "primary",
            "PRIMARY",
            "mq-primary.orders.internal.example",
            None,
        )
        .write(&dir.path().join("readyprobe.toml"));
    let log = dir.path().join("run.log");
    // The path by the environment, as the container templates set it.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--grace", "2s", "--config"])
        .arg(&config)
        .env("READYPROBE_HEARTBEAT", &beat)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let wide = Duration::from_secs(60);

    // Running: the file appears, is rewritten, and health says so.
    wait_for(wide, "the first heartbeat", || async { beat.exists() }).await;
    let first = modified(&beat).unwrap();
    wait_for(wide, "the heartbeat rewritten", || async {
        modified(&beat).is_some_and(|m| m > first)
    })
    .await;
    let ok = health(&beat, "30s").await;
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("ok: heartbeat "));

    // Stopped: no more writes, and once the max age has passed health fails with the reason.
    signal(pid, "-STOP");
    // A write already inside the kernel finishes before its thread stops: read the time after.
    wait_for(wide, "the prober stopped", || async { stopped(pid) }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_stop = modified(&beat).unwrap();
    let end = tokio::time::Instant::now() + wide;
    let stale = loop {
        let o = health(&beat, "6s").await;
        if o.status.code() == Some(1) {
            break o;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "health still {:?} on the stopped prober",
            o.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let why = stderr(&stale);
    assert_eq!(why.lines().count(), 1, "{why}");
    assert!(why.starts_with("unhealthy: heartbeat "), "{why}");
    assert!(why.contains("more than --max-age 6s"), "{why}");
    assert_eq!(modified(&beat), Some(at_stop), "written while stopped");

    // Going on: fresh again.
    signal(pid, "-CONT");
    wait_for(wide, "health good again after SIGCONT", || async {
        health(&beat, "6s").await.status.code() == Some(0)
    })
    .await;

    signal(pid, "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains("cannot write the heartbeat"), "{log}");
    server.abort();
}

#[tokio::test]
async fn health_without_a_heartbeat_file_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("heartbeat");
    let o = health(&missing, "30s").await;
    assert_eq!(o.status.code(), Some(1));
    let why = stderr(&o);
    assert_eq!(why.lines().count(), 1, "{why}");
    assert!(
        why.contains(&format!("no heartbeat file {}", missing.display())),
        "{why}"
    );
    // Neither a path nor the variable: a usage error.
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .arg("health")
        .env_remove("READYPROBE_HEARTBEAT")
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}
