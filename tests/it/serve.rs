//! `[serve]`: the built binary serving `/metrics`, `/healthz` and `/status` on loopback, `tcp`
//! services on loopback listeners, real DNS. The routes answer with their status codes and
//! content types; anything else gets 404, 405, 413 or 431; an address in use stops `run` at
//! start-up. Hostile clients (a slowloris, 1,000 connections held open, a 10 MB body) are cut
//! or refused while the attempts keep their schedule, and a scrape gets its answer after.

use crate::reload::{DEADLINE, config, fleet, of, service, spawn_graced, start_gaps, write_config};
use crate::support::fixture::wait_evidence;
use crate::support::run::{served_addr, stop, unavailable_input};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The `Accept` of a Prometheus 2 scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `alpha` probed every second without jitter (the schedule the gap check reads), with
/// `[serve]` on a port the kernel picks and `serve` extra keys.
fn serve_config(dir: &Path, f: &crate::reload::Fleet, serve: &str) -> String {
    let probe = "probe = { interval = \"1s\", timeout = \"800ms\", jitter = \"0s\" }\nreadiness = { window = \"10s\" }\n";
    let svc = service("alpha", f.ports[0].port, f.ports[1].port).replacen(
        "\n[[service.branch]]",
        &format!("\n{probe}[[service.branch]]"),
        1,
    );
    let serve = format!("\n[serve]\nlisten = \"127.0.0.1:0\"\n{serve}\n");
    // `[serve]` goes before the services: a table after them would be read as theirs.
    config(dir, &f.dns, "1s", &format!("{serve}{svc}"))
}

/// An answer: status code, header block (lower case), body.
struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            (n.trim() == name).then_some(v.trim())
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Send `request` as written and read the answer to the end (the server closes after one).
async fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(request).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::other("no end of answer within 20s"))??;
    parse(&raw)
}

fn parse(raw: &[u8]) -> std::io::Result<Answer> {
    let text = String::from_utf8_lossy(raw);
    let bad = || std::io::Error::other(format!("not an HTTP answer: {text:?}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let (line, headers) = head.split_once("\r\n").unwrap_or((&head, ""));
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    Ok(Answer {
        status,
        headers: headers.to_ascii_lowercase(),
        body: raw[split + 4..].to_vec(),
    })
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    let req = format!("GET {path} HTTP/1.1\r\nHost: prober\r\n\r\n");
    exchange(addr, req.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_its_three_routes_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let path = dir.path().join("serve.toml");
    let stdout = dir.path().join("stdout.jsonl");
    write_config(&path, &serve_config(dir.path(), &f, ""));
    let mut child = spawn_graced(&path, &stdout, "1s");
    let addr = served_addr(&stdout.with_extension("log")).await;
    assert!(addr.ip().is_loopback(), "{addr}");
    // A family without a series is left out of the text: wait for the first attempts (on a
    // loaded machine the first scrape came before them).
    let end = tokio::time::Instant::now() + DEADLINE;
    while !get(addr, "/metrics")
        .await
        .text()
        .contains("readyprobe_attempts_total{")
    {
        assert!(tokio::time::Instant::now() < end, "no attempt counted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Prometheus asks for OpenMetrics and gets it; curl (`*/*`, or no Accept) the text 0.0.4,
    // the same series without `# EOF`.
    let om =
        format!("GET /metrics HTTP/1.1\r\nHost: prober\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n");
    let m = exchange(addr, om.as_bytes()).await.unwrap();
    assert_eq!(m.status, 200);
    assert_eq!(m.header("content-type"), Some(OPENMETRICS));
    assert_eq!(m.header("vary"), Some("accept"));
    assert!(m.text().ends_with("# EOF\n"), "{}", m.text());
    let curl =
        b"GET /metrics HTTP/1.1\r\nHost: prober\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n";
    for req in [&curl[..], b"GET /metrics HTTP/1.1\r\nHost: prober\r\n\r\n"] {
        let t = exchange(addr, req).await.unwrap();
        assert_eq!(t.status, 200);
        assert_eq!(t.header("content-type"), Some(PROMETHEUS_TEXT));
        assert!(
            t.text()
                .contains("# TYPE readyprobe_attempts_total counter")
                && !t.text().contains("# EOF"),
            "{}",
            t.text()
        );
    }
    let h = get(addr, "/healthz").await;
    assert_eq!(
        (h.status, h.header("content-type")),
        (200, Some("text/plain; charset=utf-8"))
    );
    assert!(
        h.text().starts_with("ok: the run loop ticked "),
        "{}",
        h.text()
    );
    // /status: this prober, and its service once a sync has returned its document.
    let end = tokio::time::Instant::now() + DEADLINE;
    let status = loop {
        let s = get(addr, "/status").await;
        assert_eq!(
            (s.status, s.header("content-type")),
            (200, Some("application/json"))
        );
        let v: serde_json::Value = serde_json::from_slice(&s.body).unwrap();
        assert_eq!(v["prober"], "reload-test", "{v}");
        if v["services"]["alpha"]["probers"]["reload-test"].is_object() {
            break v;
        }
        assert!(tokio::time::Instant::now() < end, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let alpha = &status["services"]["alpha"];
    assert_eq!(alpha["service"], "alpha", "{alpha}");
    assert_eq!(alpha["freshness"]["probers"]["reload-test"]["stale"], false);

    let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: prober\r\n\r\n")
        .await
        .unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(get(addr, "/").await.status, 404);
    assert_eq!(get(addr, "/metrics/../status").await.status, 404);
    let post = exchange(addr, b"POST /metrics HTTP/1.1\r\nHost: prober\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("get, head"))
    );
    let sized = b"GET /metrics HTTP/1.1\r\nHost: prober\r\nContent-Length: 4\r\n\r\nabcd";
    let sized = exchange(addr, sized).await.unwrap();
    assert_eq!(sized.status, 413);
    assert_eq!(sized.header("connection"), Some("close"));
    let chunked =
        b"GET /metrics HTTP/1.1\r\nHost: prober\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n";
    assert_eq!(exchange(addr, chunked).await.unwrap().status, 413);
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: prober\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    assert_eq!(exchange(addr, big.as_bytes()).await.unwrap().status, 431);

    // A second run on the same address stops at start-up, saying why.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let taken = serve_config(&other, &f, "").replace("127.0.0.1:0", &addr.to_string());
    let taken_path = other.join("taken.toml");
    write_config(&taken_path, &taken);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--config"])
        .arg(&taken_path)
        .output()
        .await
        .unwrap();
    unavailable_input(&out, &format!("[serve] cannot listen on {addr}: "));
    assert!(!other.join("evidence.jsonl").exists());
    stop(&mut child).await;
}

/// A slowloris that sends a header byte a second: the connection ends long before its bytes
/// are all sent, without an answer of 200. Says on `started` when two bytes are in; returns
/// how long after its connect the connection was cut.
async fn slowloris(addr: SocketAddr, started: tokio::sync::oneshot::Sender<()>) -> Duration {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t0 = tokio::time::Instant::now();
    let bytes = b"GET /metrics HTTP/1.1\r\nHost: slowly-";
    let mut buf = [0u8; 256];
    let mut started = Some(started);
    for (i, b) in bytes.iter().enumerate() {
        if s.write_all(&[*b]).await.is_err() {
            return t0.elapsed();
        }
        if i == 1 {
            let _ = started.take().map(|tx| tx.send(()));
        }
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return t0.elapsed(),
            Ok(Ok(n)) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(!text.contains(" 200 "), "{text}");
            }
            Err(_) => {}
        }
    }
    panic!("the slowloris was never cut");
}

/// Once `start` says so, hold 1,000 connections open for `hold`, then close them.
async fn flood(addr: SocketAddr, start: tokio::sync::oneshot::Receiver<()>, hold: Duration) {
    start.await.unwrap();
    let mut conns = Vec::new();
    for _ in 0..1_000 {
        // A connection refused or reset under the flood counts as held: the test is the server's.
        if let Ok(s) = TcpStream::connect(addr).await {
            conns.push(s);
        }
    }
    assert!(conns.len() >= 900, "{} connected", conns.len());
    tokio::time::sleep(hold).await;
    drop(conns);
}

/// A request with a 10 MB body: answered 413, or cut while the body is still being sent; never
/// anything else. Returns the bytes of body the kernel took.
async fn big_body(addr: SocketAddr) -> usize {
    const SIZE: usize = 10 * 1024 * 1024;
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader = tokio::spawn(async move {
        let mut raw = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), rd.read_to_end(&mut raw)).await;
        raw
    });
    let head = format!("POST /metrics HTTP/1.1\r\nHost: prober\r\nContent-Length: {SIZE}\r\n\r\n");
    wr.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    while sent < SIZE {
        match tokio::time::timeout(Duration::from_secs(20), wr.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            _ => break,
        }
    }
    let raw = reader.await.unwrap();
    if let Ok(a) = parse(&raw) {
        assert_eq!(a.status, 413);
    } else {
        assert!(sent < SIZE, "all 10 MB sent and no answer: {raw:?}");
    }
    sent
}

/// Under a slowloris, a flood of 1,000 connections and a 10 MB body at once, attempts keep
/// their 1 s schedule: every start gap stays within the bound `reload`'s schedule check uses
/// (625 ms either side of a fast or slow schedule: 1 s ± 375 ms here). The flood's excess
/// connections are refused (logged), and a scrape answers once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_delay_no_attempt() {
    // 1,000 sockets on each side: room for them under a low soft limit (the child inherits it).
    raise_open_files(4_096);
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let path = dir.path().join("serve.toml");
    let stdout = dir.path().join("stdout.jsonl");
    let evidence = dir.path().join("evidence.jsonl");
    write_config(
        &path,
        &serve_config(dir.path(), &f, "request_timeout = \"3s\""),
    );
    let mut child = spawn_graced(&path, &stdout, "1s");
    let log = stdout.with_extension("log");
    let addr = served_addr(&log).await;
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary")).len() >= 2
    })
    .await;
    let from = now_ms();

    // The slowloris connects first: it holds a connection slot, never refused by the flood.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (cut, (), body) = tokio::join!(
        slowloris(addr, tx),
        flood(addr, rx, Duration::from_secs(5)),
        big_body(addr)
    );
    // At the 3 s request_timeout (its bytes do not extend it), before the 6 s lifetime cap.
    assert!(
        cut >= Duration::from_millis(2_900) && cut < Duration::from_secs(6),
        "the slowloris was cut after {cut:?}"
    );
    let until = now_ms();
    assert!(body > 0);
    // Once the flood is gone, scrapes are answered (a scrape may come before the server has
    // seen every close: retried).
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let req =
            format!("GET /metrics HTTP/1.1\r\nHost: prober\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n");
        match exchange(addr, req.as_bytes()).await {
            Ok(a) if a.status == 200 && a.text().ends_with("# EOF\n") => break,
            other => assert!(
                tokio::time::Instant::now() < end,
                "{:?}",
                other.map(|a| a.status)
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get(addr, "/metrics").await.status, 200);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("a connection over max_connections was closed unanswered"),
        "{text}"
    );

    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary"))
            .iter()
            .any(|a| a["started_at"].as_i64().unwrap() > until + 1_000)
    })
    .await;
    let gaps = start_gaps(&ev, "alpha", from);
    eprintln!("slowloris cut after {cut:?}; {body} body bytes taken; start gaps (ms) {gaps:?}");
    assert!(gaps.len() >= 4, "{gaps:?}");
    assert!(
        gaps.iter().all(|g| (625..=1_375).contains(g)),
        "start gaps (ms) under hostile clients: {gaps:?}"
    );
    stop(&mut child).await;
}

/// Raise this process's soft limit of open files to `want` (at most the hard limit).
fn raise_open_files(want: libc::rlim_t) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid resource and a pointer to a live rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
