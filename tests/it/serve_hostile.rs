//! `[serve]` of the built binary against a flood of slow readers of a large fleet's `/metrics`:
//! 500 services × 2 branches make a text of about 3.7 MB, and 64 clients (the default
//! `max_connections`) ask for it and never read. Each used to hold a copy of its own (the
//! process grew by about 200 MB, and the endpoint's thread encoded 64 times); now they share,
//! and the process grows by a bounded amount.

use crate::support::dns::DnsServer;
use crate::support::run::served_addr;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const ZONE: &str = "flood.internal.example";
const SERVICES: usize = 500;

/// The config: `SERVICES` tcp services whose branches all reach `port`, a 5 s probe, `[serve]`
/// on a port the kernel picks.
fn config(dir: &std::path::Path, dns: SocketAddr, port: u16) -> String {
    let mut text = format!(
        r#"prober_id = "flood"
state_dir = {state:?}

[serve]
listen = "127.0.0.1:0"

[publish]
interval = "5s"
sinks = ["emf"]

[evidence]
path = {evidence:?}

[dns]
nameservers = ["{dns}"]

[readiness]
window = "30s"
min_attempts = 2
initial = "ready"

[probe]
kind = "tcp"
interval = "5s"
timeout = "1s"

[probe.tcp]
port = {port}
"#,
        state = dir.join("state"),
        evidence = dir.join("evidence.jsonl"),
    );
    for i in 0..SERVICES {
        text.push_str(&format!(
            r#"
[[service]]
name = "svc-{i:03}"
stable_name = "s{i}.{ZONE}"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "p{i}.{ZONE}"
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "q{i}.{ZONE}"
"#
        ));
    }
    text
}

/// The resident set of process `pid`, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

/// `GET /metrics` answered in full: status and body length.
async fn scrape(addr: SocketAddr) -> (u16, usize) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: prober\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let status = std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap();
    (status, raw.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_of_a_large_metrics_share_one_copy() {
    let dns = DnsServer::start(ZONE).await;
    for i in 0..SERVICES {
        for b in ["p", "q"] {
            dns.set_a(&format!("{b}{i}"), Ipv4Addr::LOCALHOST, 300)
                .await;
        }
    }
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = target.local_addr().unwrap().port();
    let _accept = tokio::spawn(async move {
        while let Ok((s, _)) = target.accept().await {
            drop(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("flood.toml");
    std::fs::write(&cfg, config(dir.path(), dns.addr(), port)).unwrap();
    let stdout = dir.path().join("stdout.jsonl");
    let mut child = crate::reload::spawn_graced(&cfg, &stdout, "1s");
    let pid = child.id().unwrap();
    let addr = served_addr(&stdout.with_extension("log")).await;
    // Every branch has had attempts: the text is as large as it gets.
    let end = tokio::time::Instant::now() + Duration::from_secs(120);
    let size = loop {
        let (status, len) = scrape(addr).await;
        if status == 200 && len > 3_000_000 {
            break len;
        }
        assert!(tokio::time::Instant::now() < end, "{status}, {len} bytes");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let before = rss(pid);
    // 64 readers that ask and never read (a 4 KiB receive buffer each): the endpoint writes
    // until the kernel's buffers fill, then waits on them until twice request_timeout.
    let mut readers = Vec::new();
    for _ in 0..64 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: prober\r\n\r\n")
            .await
            .unwrap();
        readers.push(s);
    }
    let mut peak = before;
    // Six seconds of the ten the connections may live (twice the default request_timeout).
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss(pid));
    }
    drop(readers);
    let grew = peak.saturating_sub(before);
    eprintln!(
        "metrics {size} B; rss {} MB before, {} MB peak with 64 slow readers",
        before >> 20,
        peak >> 20
    );
    // A copy each would be 64 × 3.7 MB; four copies at most are alive now.
    assert!(
        grew < 48 << 20,
        "grew by {} MB with 64 slow readers of {size} B",
        grew >> 20
    );
    // The readers gone, a scrape is answered in full.
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, len) = scrape(addr).await;
        if status == 200 && len > 3_000_000 {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{status}, {len} bytes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    crate::reload::signal(&child, libc::SIGTERM);
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
}
