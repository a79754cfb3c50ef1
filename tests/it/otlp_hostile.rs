//! Hostile collectors against the `otlp` sink of the real binary: a raw loopback peer answers
//! each export with bytes no well-behaved collector sends (an oversized refusal, a 1 GB body, a
//! redirect, garbage, a reset mid-answer, a body one byte a second, a 429 with Retry-After).
//! Each export must end as an `otlp` publish record with the class its answer deserves, within
//! the publish window, the `emf` sink unaffected, the run ending cleanly.

use crate::otlp_sink::otlp_rig;
use crate::publish_faults::{Run, config_builder, run_binary, target};
use crate::support::dns::DnsServer;
use crate::support::publish_records::assert_each_one_try;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the raw collector does with one connection, once it has read the request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// 400 with a 100 KiB HTML page (a proxy's error page): more than the sink reads.
    BigRefusal,
    /// 200 announcing 1 GiB of protobuf and streaming zeros while the sink reads.
    GigabyteOk,
    /// 307 to another port.
    Redirect,
    /// 200, typed protobuf, a body that is no export response.
    Garbage,
    /// The status line and part of a body, then a TCP reset.
    ResetMidBody,
    /// 200 with a 100-byte body sent one byte a second.
    SlowBody,
    /// 429 with `Retry-After: 30`.
    Throttled,
}

/// Read one request: its headers and the `Content-Length` bytes of its body (bounded).
async fn read_request(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let body_len = loop {
        let Ok(n) = s.read(&mut chunk).await else {
            return;
        };
        if n == 0 || buf.len() > 1 << 20 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4 + len).saturating_sub(buf.len());
        }
    };
    let mut left = body_len;
    while left > 0 {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Answer as `a` says; write errors (the sink hung up) end it.
async fn answer(mut s: TcpStream, a: Answer) {
    read_request(&mut s).await;
    let head = |status: &str, extra: &str| {
        format!("HTTP/1.1 {status}\r\n{extra}Connection: close\r\n\r\n").into_bytes()
    };
    match a {
        Answer::BigRefusal => {
            let page = format!("<html>{}</html>", "x".repeat(100 * 1024));
            let mut out = head(
                "400 Bad Request",
                &format!(
                    "Content-Type: text/html\r\nContent-Length: {}\r\n",
                    page.len()
                ),
            );
            out.extend_from_slice(page.as_bytes());
            let _ = s.write_all(&out).await;
        }
        Answer::GigabyteOk => {
            let h = head(
                "200 OK",
                "Content-Type: application/x-protobuf\r\nContent-Length: 1073741824\r\n",
            );
            if s.write_all(&h).await.is_err() {
                return;
            }
            let zeros = vec![0u8; 64 * 1024];
            for _ in 0..(1 << 14) {
                if s.write_all(&zeros).await.is_err() {
                    return;
                }
            }
        }
        Answer::Redirect => {
            let h = head(
                "307 Temporary Redirect",
                "Location: http://127.0.0.1:9/v1/metrics\r\nContent-Length: 0\r\n",
            );
            let _ = s.write_all(&h).await;
        }
        Answer::Garbage => {
            let mut out = head(
                "200 OK",
                "Content-Type: application/x-protobuf\r\nContent-Length: 6\r\n",
            );
            out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
            let _ = s.write_all(&out).await;
        }
        Answer::ResetMidBody => {
            let mut out = head(
                "200 OK",
                "Content-Type: application/x-protobuf\r\nContent-Length: 100\r\n",
            );
            out.extend_from_slice(b"\x0a\x02");
            let _ = s.write_all(&out).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            // SO_LINGER 0: the close sends a reset.
            let _ = s.set_zero_linger();
            drop(s);
        }
        Answer::SlowBody => {
            let h = head(
                "200 OK",
                "Content-Type: application/x-protobuf\r\nContent-Length: 100\r\n",
            );
            if s.write_all(&h).await.is_err() {
                return;
            }
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if s.write_all(b"\0").await.is_err() {
                    return;
                }
            }
        }
        Answer::Throttled => {
            let h = head(
                "429 Too Many Requests",
                "Retry-After: 30\r\nContent-Length: 0\r\n",
            );
            let _ = s.write_all(&h).await;
        }
    }
}

/// A raw collector on loopback answering connection `i` as `script[i % len]`; its URL.
async fn raw_collector(script: Vec<Answer>) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let i = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(answer(s, script[i % script.len()]));
        }
    });
    (url, served)
}

/// The `otlp` publish records of an evidence file's text, failed or sent.
fn otlp_records(text: &str) -> Vec<Json> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|v| v["kind"] == "publish" && v["sink"] == "otlp")
        .collect()
}

/// Run the binary against a raw collector answering as `script`, `max_tries` tries a batch, at
/// most `secs` seconds, until `done` holds for the otlp records written so far and the count of
/// connections served.
async fn run_hostile(
    script: Vec<Answer>,
    max_tries: i64,
    secs: u64,
    done: impl Fn(&[Json], usize) -> bool,
) -> Run {
    let (url, served) = raw_collector(script).await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = otlp_rig(dir.path(), &dns, port, &url)
        .set("publish.otlp", "max_tries", max_tries)
        .write(&dir.path().join("run.toml"));
    let ev = dir.path().join("evidence.jsonl");
    run_binary(&cfg, secs, &[], &[], |_| {
        let recs = otlp_records(&std::fs::read_to_string(&ev).unwrap_or_default());
        done(&recs, served.load(Ordering::SeqCst))
    })
    .await
}

/// At least three failed records.
fn three_failed(recs: &[Json], _served: usize) -> bool {
    recs.iter().filter(|p| p["outcome"] == "failed").count() >= 3
}

/// A refusal whose page is longer than the sink reads is still a refusal: judged by its
/// status (`publish_rejected`, the status in the message), never retried as if the collector
/// were unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_refusal_is_judged_by_its_status() {
    let run = run_hostile(vec![Answer::BigRefusal], 3, 30, three_failed).await;
    assert_each_one_try(
        &run.publishes("otlp"),
        ("outcome", "failed"),
        3,
        ("class", "publish_rejected"),
        "400 Bad Request",
    );
}

/// Each hostile answer, one connection a batch (`max_tries = 1`): the class it deserves, the
/// status or cause in a bounded message, every record within its publish window, every batch
/// also sent by `emf` as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_answer_ends_in_a_classed_record() {
    use Answer as A;
    let script = vec![
        A::BigRefusal,
        A::GigabyteOk,
        A::Redirect,
        A::Garbage,
        A::ResetMidBody,
        A::SlowBody,
        A::Throttled,
    ];
    // What each refusal must end as: its class and a part of its message. The 200 with a
    // 1 GiB body is an accepted export (its status says so; the body is not read past the
    // cap), so it ends `sent`: the only otlp batches that can.
    let want: BTreeMap<&str, (&str, &str)> = BTreeMap::from([
        ("big refusal", ("publish_rejected", "400 Bad Request")),
        ("redirect", ("publish_rejected", "307 Temporary Redirect")),
        ("garbage", ("publish_rejected", "not an export response")),
        ("reset", ("publish_unreachable", "reading the answer")),
        ("slow body", ("publish_timeout", "")),
        ("429", ("publish_throttled", "429 Too Many Requests")),
    ]);
    let seen = |recs: &[Json], (class, part): (&str, &str)| {
        recs.iter()
            .any(|p| p["class"] == class && p["error"].as_str().is_some_and(|e| e.contains(part)))
    };
    let connections = 2 * script.len();
    let run = run_hostile(script, 1, 60, |recs, served| {
        served > connections
            && want.values().all(|w| seen(recs, *w))
            && recs.iter().any(|p| p["outcome"] == "sent")
    })
    .await;
    let recs: Vec<Json> = run.publishes("otlp").into_iter().cloned().collect();
    assert!(
        recs.iter().any(|p| p["outcome"] == "sent"),
        "the 1 GiB 200 ended as no sent record: {recs:#?}"
    );
    for (what, w) in &want {
        assert!(seen(&recs, *w), "{what}: no record {w:?} in {recs:#?}");
    }
    let emf = run.publishes("emf");
    for p in recs.iter().filter(|p| p["outcome"] == "failed") {
        assert_eq!(p["tries"], 1, "{p}");
        assert!(p["class"].is_string(), "{p}");
        assert!(p["error"].as_str().unwrap().len() <= 1024, "{p}");
        // The emf sink sent the very same batch.
        let b = &p["batch"];
        let e = emf.iter().find(|e| &e["batch"] == b);
        assert!(
            e.is_some_and(|e| e["outcome"] == "sent"),
            "batch {b}: {e:?}"
        );
    }
}

/// `check` tries the `otlp` sink's inputs as `run` prepares them: a header secret that is unset
/// or a CA bundle that cannot be read is a warning naming the key and the reference (never a
/// value), saying every otlp batch would fail; `--strict` makes it an error (exit 78). Before,
/// `check` said nothing and `run` then failed every otlp batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tries_the_otlp_sinks_secret_and_ca() {
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    let dir = tempfile::tempdir().unwrap();
    let check = |cfg: std::path::PathBuf, strict: bool| async move {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"));
        cmd.arg("check").arg("--config").arg(&cfg);
        if strict {
            cmd.arg("--strict");
        }
        cmd.env_remove("HOSTILE_OTLP_TOKEN");
        let out = cmd.output().await.unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let secret = config_builder(dir.path(), &dns, port, "http://127.0.0.1:9")
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "otlp".into()]),
        )
        .set("publish.otlp", "endpoint", "http://127.0.0.1:4318")
        .set_raw(
            "publish.otlp",
            "headers",
            "{ authorization = { env = \"HOSTILE_OTLP_TOKEN\" } }",
        )
        .write(&dir.path().join("secret.toml"));
    let (code, out, err) = check(secret.clone(), false).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("warning: publish.otlp.headers.authorization"))
        .unwrap_or_else(|| panic!("no warning about the otlp header: {out}"));
    assert!(line.contains("HOSTILE_OTLP_TOKEN"), "{line}");
    assert!(line.contains("every otlp batch would fail"), "{line}");
    let (code, _, err) = check(secret, true).await;
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("error: publish.otlp.headers.authorization"),
        "{err}"
    );

    let ca = config_builder(dir.path(), &dns, port, "http://127.0.0.1:9")
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "otlp".into()]),
        )
        .set("publish.otlp", "endpoint", "https://127.0.0.1:4318")
        .set("publish.otlp", "ssl_ca", "no-such-ca.pem")
        .write(&dir.path().join("ca.toml"));
    let (code, out, err) = check(ca, false).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("warning: publish.otlp.ssl_ca")
                && l.contains("every otlp batch would fail")),
        "{out}"
    );
}

/// A 429 whose `Retry-After` (30 s) is beyond the batch's window (1 s) is not retried within it:
/// one try, `publish_throttled`, where the sink used to try twice more at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_beyond_the_window_is_honoured() {
    let run = run_hostile(vec![Answer::Throttled], 3, 30, three_failed).await;
    assert_each_one_try(
        &run.publishes("otlp"),
        ("outcome", "failed"),
        3,
        ("class", "publish_throttled"),
        "",
    );
}
