//! A hostile STS endpoint in front of a role target, on the real binary: an `AssumeRole` answer
//! far longer than any credentials document is cut at the sink's response cap (the prober
//! stops reading it), and every batch still ends as a `publish_credentials` record.

use crate::publish_faults::{config_builder, run_binary, target};
use crate::support::dns::DnsServer;
use crate::support::fake_cloudwatch::FakeCloudWatch;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROLE: &str = "arn:aws:iam::111122223333:role/readyprobe-publish";

/// The body an answer announces: 64 MiB, far over every cap of the prober.
const HUGE: usize = 64 << 20;

/// An STS endpoint answering every request `200` with a [`HUGE`] body of spaces, written in
/// 64 KiB chunks until the client stops reading; `most` keeps the most bytes one answer got
/// out before the client closed (or all of them).
async fn huge_sts() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let most = Arc::new(AtomicUsize::new(0));
    let m = most.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let m = m.clone();
            tokio::spawn(async move {
                // The request's head and form (small): read until a pause, then answer.
                let mut buf = vec![0u8; 64 * 1024];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {HUGE}\r\n\r\n"
                );
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < HUGE && s.write_all(&chunk).await.is_ok() {
                    sent += chunk.len();
                    m.fetch_max(sent, Ordering::Relaxed);
                }
            });
        }
    });
    (url, most, task)
}

/// STS streams a 64 MiB answer: the prober reads no more of it than its response cap (1 MiB,
/// plus what the kernel's socket buffers hold), and each batch is `publish_credentials`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_assume_role_answer_is_cut_at_the_cap() {
    let (sts, most, _sts_task) = huge_sts().await;
    let fake = FakeCloudWatch::start().await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    // A 3 s window per try: time enough to read the whole answer if nothing cut it.
    let cfg = config_builder(dir.path(), &dns, port, &fake.url)
        .set("publish", "interval", "3s")
        .set("publish.cloudwatch", "operation_timeout", "3s")
        .set("publish.cloudwatch", "max_attempts", 1)
        .set("publish.cloudwatch", "role_arn", ROLE)
        .write(&dir.path().join("run.toml"));
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL_STS", sts.as_str()),
    ];
    let remove = [
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ];
    let ev = dir.path().join("evidence.jsonl");
    let run = run_binary(&cfg, 30, &env, &remove, |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        text.matches("\"kind\":\"publish\"").count() >= 2
    })
    .await;
    let cw = run.publishes("cloudwatch");
    assert!(!cw.is_empty(), "no publish record");
    for p in &cw {
        assert_eq!(p["outcome"], "failed", "{p}");
        assert_eq!(p["class"], "publish_credentials", "{p}");
    }
    assert!(fake.seen().is_empty(), "a request reached CloudWatch");
    let read = most.load(Ordering::Relaxed);
    assert!(read > 0, "STS was never asked");
    assert!(
        read < HUGE / 2,
        "the prober read {read} bytes of a {HUGE}-byte STS answer"
    );
}
