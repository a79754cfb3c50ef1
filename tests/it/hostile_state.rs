//! The binary against hostile state and output: control documents with instants at the ends of
//! `i64` or in the future or turned corrupt while running, an S3 endpoint that trickles its body,
//! a stdout closed by its reader, and a zero `--duration`.

use crate::support::config::ConfigBuilder;
use crate::support::dns::DnsServer;
use serde_json::json;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

const SERVICE: &str = "gateway";

/// A tcp-kind config whose one branch, `primary`, points at a listener that accepts and closes.
async fn config(dir: &Path, state: &str) -> (PathBuf, DnsServer) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let cfg = ConfigBuilder::new(dir, SERVICE, "gw.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe", "interval", "500ms")
        .set("probe", "timeout", "400ms")
        .set("probe.tcp", "port", i64::from(port))
        .tls("disabled", None)
        .merge(state)
        .branch(
            "primary",
            "PRIMARY",
            "gw-primary.orders.internal.example",
            None,
        )
        .write(&dir.join("run.toml"));
    (cfg, dns)
}

/// Run the binary with `args` and the config; fails the test if it outlives `bound`.
async fn readyprobe(args: &[&str], cfg: &Path, bound: Duration) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .arg("--config")
        .arg(cfg)
        .envs([
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(bound, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("readyprobe {args:?} still running after {bound:?}"))
        .unwrap()
}

fn write_doc(dir: &Path, doc: &serde_json::Value) {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join(format!("control-{SERVICE}.json")),
        serde_json::to_vec_pretty(doc).unwrap(),
    )
    .unwrap();
}

fn now_ms() -> i64 {
    crate::support::fake_cloudwatch::now_ms()
}

/// An entry of prober `id` saved at `saved_at`, with `primary` waiting for approval.
fn pending_prober(saved_at: i64) -> serde_json::Value {
    json!({
        "saved_at": saved_at,
        "branches": {"primary": {
            "state": "pending_approval",
            "since": 1_700_000_000_000i64,
            "unready_holding_since": null,
            "ready_holding_since": null,
            "attempts": [],
        }},
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// An override from `i64::MIN` to `i64::MAX` (it overflowed every sync, stopping the
/// prober's state syncing): `run` refuses the document at start and `status` refuses it, both
/// exit 74 naming the field; neither panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_status_refuse_an_override_at_the_ends_of_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    write_doc(
        dir.path(),
        &json!({
            "version": 2,
            "service": SERVICE,
            "overrides": {"primary": {"force": "ready", "by": "x", "reason": "y",
                          "at": i64::MIN, "expires_at": i64::MAX}},
        }),
    );
    let bound = Duration::from_secs(30);
    let run = readyprobe(&["run", "--duration", "3s"], &cfg, bound).await;
    let status = readyprobe(&["status"], &cfg, bound).await;
    for (what, out) in [("run", run), ("status", status)] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{what}: {err}");
        assert!(err.contains("overrides.primary.at"), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

/// A prober entry saved at `i64::MAX` made `approve` exit 101 (an overflow); now the document
/// is refused, exit 74, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_refuses_a_prober_saved_at_the_end_of_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    write_doc(
        dir.path(),
        &json!({"version": 2, "service": SERVICE,
                "probers": {"p1": pending_prober(i64::MAX)}}),
    );
    let args = [
        "approve", "--branch", "primary", "--by", "ops", "--reason", "drill",
    ];
    let out = readyprobe(&args, &cfg, Duration::from_secs(30)).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("probers.p1.saved_at"), "{err}");
}

/// A prober entry saved a day ahead of this clock (a host whose clock runs ahead) is not taken
/// for a running prober: `approve` warns that only stale probers wait, as it would for a stopped
/// one, instead of promising the approval is applied at the next sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_counts_a_prober_saved_in_the_future_as_stale() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    let args = [
        "approve", "--branch", "primary", "--by", "ops", "--reason", "drill",
    ];
    for (saved_at, fresh) in [(now_ms() + 86_400_000, false), (now_ms(), true)] {
        write_doc(
            dir.path(),
            &json!({"version": 2, "service": SERVICE,
                    "probers": {"p1": pending_prober(saved_at)}}),
        );
        let out = readyprobe(&args, &cfg, Duration::from_secs(30)).await;
        let (o, e) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{o}{e}");
        assert_eq!(
            o.contains("apply it at their next sync"),
            fresh,
            "saved_at {saved_at}: {o}{e}"
        );
        assert_eq!(e.contains("have not saved recently"), !fresh, "{o}{e}");
    }
}

/// A fake S3 that answers every request `200` with `Content-Length: 1000`, then sends one byte
/// per second.
async fn trickling_s3() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                            etag: \"abc\"\r\ncontent-length: 1000\r\n\r\n{";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if s.write_all(b" ").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// An S3 endpoint trickling the control document (it held `run`'s start, and `status`, for
/// ever): both give up within the 10 s operation timeout (30 s allowed here), exit 74, and say
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_s3_body_fails_the_start_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let url = trickling_s3().await;
    let state = format!(
        "[state]\nstore = \"s3\"\n[state.s3]\nbucket = \"b\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\n"
    );
    let (cfg, _dns) = config(dir.path(), &state).await;
    let bound = Duration::from_secs(30);
    let t0 = std::time::Instant::now();
    let (run, status) = tokio::join!(
        readyprobe(&["run", "--duration", "5s"], &cfg, bound),
        readyprobe(&["status"], &cfg, bound),
    );
    eprintln!("both answered after {:?}", t0.elapsed());
    for (what, out) in [("run", run), ("status", status)] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{what}: {err}");
        assert!(err.contains("GetObject"), "{what}: {err}");
    }
}

/// One-shot commands whose stdout reader is gone end by `SIGPIPE`, as Unix filters do, never
/// by a panic (exit 101); `run`, whose EMF goes to that stdout, still runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_one_shot_commands_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    let cases: [&[&str]; 4] = [
        &["check"],
        &["status"],
        &["probe", "--branch", "primary"],
        &["run", "--duration", "2s"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .stdout(writer)
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Not `output()`: tokio's would replace the closed pipe with a fresh one.
        let out = tokio::time::timeout(Duration::from_secs(30), out.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args[0] == "run" {
            assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        } else {
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGPIPE),
                "{args:?}: {:?} {err}",
                out.status
            );
        }
    }
}

/// `run --duration 0s` probed nothing and exited 0; it is a usage error now (exit 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_duration_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    for d in ["0s", "0ms"] {
        let out = readyprobe(&["run", "--duration", d], &cfg, Duration::from_secs(30)).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{d}: {err}");
        assert!(err.contains("more than zero"), "{d}: {err}");
    }
}

/// An S3 endpoint answering `400` with an endless body (`status` grew past 3 GB in 10 s): the
/// SDK reads at most a little over the 16 MiB document cap of it, so `status` stays far under
/// 200 MB, and exits 74.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_s3_error_body_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _l) = crate::publish_faults::endless_400().await;
    let state = format!(
        "[state]\nstore = \"s3\"\n[state.s3]\nbucket = \"b\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\n"
    );
    let (cfg, _dns) = config(dir.path(), &state).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["status", "--config"])
        .arg(&cfg)
        .envs([
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let t0 = std::time::Instant::now();
    let mut peak = 0;
    let status = loop {
        if let Some(kb) = crate::publish_faults::peak_kb(pid) {
            peak = peak.max(kb);
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "status did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("peak resident memory {peak} kB");
    assert_eq!(status.code(), Some(74));
    assert!(
        peak > 0 && peak < 200 * 1024,
        "peak resident memory {peak} kB"
    );
}

/// `[state]` syncing every 300 ms, so a 3 s run syncs several times.
const FAST_SYNC: &str = "[state]\npoll_interval = \"300ms\"\n";

fn read_doc(dir: &Path) -> serde_json::Value {
    let path = dir.join(format!("state/control-{SERVICE}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn override_records(dir: &Path) -> Vec<serde_json::Value> {
    crate::support::fixture::read_evidence(&dir.join("state/evidence.jsonl"))
        .into_iter()
        .filter(|v| v["kind"] == "override")
        .collect()
}

/// An override set a year ahead of this clock for ten years (a host whose clock ran ahead)
/// forced the branch "until 2036": `status` now shows it ignored, `run` never applies it and its
/// sync drops it. One set now for ten years is applied until 30 days after it was set, the bound
/// a sync writes back into the document, its reason saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_from_the_future_is_ignored_and_a_long_one_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), FAST_SYNC).await;
    let (now, year, month) = (now_ms(), 365 * 86_400_000i64, 30 * 86_400_000i64);
    let doc = |at: i64| {
        json!({"version": 2, "service": SERVICE,
               "overrides": {"primary": {"force": "unready", "by": "ops", "reason": "maintenance",
                             "at": at, "expires_at": now + 10 * year}}})
    };
    let bound = Duration::from_secs(30);
    write_doc(dir.path(), &doc(now + year));
    let status = readyprobe(&["status"], &cfg, bound).await;
    let o = text(&status.stdout);
    assert!(o.contains("override IGNORED: forced unready by ops"), "{o}");
    assert!(!o.contains("OVERRIDE: forced"), "{o}");
    let run = readyprobe(&["run", "--duration", "3s"], &cfg, bound).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    // Never applied; dropped by the first sync, which says so once, at WARN and in the evidence.
    let dropped = override_records(dir.path());
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0]["action"], "dropped_ahead", "{dropped:?}");
    assert_eq!(dropped[0]["override"]["at"], now + year, "{dropped:?}");
    let log = text(&run.stderr);
    assert_eq!(
        log.matches("override dropped unapplied").count(),
        1,
        "{log}"
    );
    assert!(read_doc(dir.path())["overrides"].get("primary").is_none());

    std::fs::remove_file(dir.path().join("state/evidence.jsonl")).unwrap();
    write_doc(dir.path(), &doc(now));
    let run = readyprobe(&["run", "--duration", "3s"], &cfg, bound).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let saved = &read_doc(dir.path())["overrides"]["primary"];
    assert_eq!(saved["expires_at"], now + month, "{saved}");
    let reason = saved["reason"].as_str().unwrap();
    assert!(reason.starts_with("maintenance [expiry ") && reason.contains("bounded"));
    // Logged and recorded once, with the end applied from the first line on.
    let records = override_records(dir.path());
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        records[0]["override"]["expires_at"],
        now + month,
        "{records:?}"
    );
    let log = text(&run.stderr);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("override in force"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(!lines[0].contains(&format!("expires_at={}", now + 10 * year)));
    assert!(lines[0].contains(" bounded to "), "{}", lines[0]);
}

/// A hand edit with megabyte texts (15 undecided approvals with 1 MB reasons, an override with
/// a 200 KB `by` and a 1 MB reason): `run` keeps probing, and its log lines, evidence and the
/// document it writes back carry each text cut to its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_texts_in_a_hand_edited_document_are_cut_to_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), FAST_SYNC).await;
    let now = now_ms();
    let (by, reason) = ("b".repeat(200_000), "r".repeat(1_000_000));
    let approvals: Vec<_> = (0..15)
        .map(|i| {
            json!({"id": format!("{now}-{i:08x}"), "branch": "primary", "by": "ops",
                   "reason": reason, "at": now, "expires_at": now + 3_600_000})
        })
        .collect();
    write_doc(
        dir.path(),
        &json!({"version": 2, "service": SERVICE, "approvals": approvals,
                "overrides": {"primary": {"force": "unready", "by": by, "reason": reason,
                              "at": now, "expires_at": now + 3_600_000}}}),
    );
    let run = readyprobe(&["run", "--duration", "3s"], &cfg, Duration::from_secs(30)).await;
    let log = text(&run.stderr);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        &log[..log.len().min(4000)]
    );
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 8_000, "a log line of {longest} bytes");
    let evidence = std::fs::metadata(dir.path().join("state/evidence.jsonl")).unwrap();
    assert!(
        evidence.len() < 500_000,
        "{} bytes of evidence",
        evidence.len()
    );
    let saved = read_doc(dir.path());
    let o = &saved["overrides"]["primary"];
    let chars = |v: &serde_json::Value| v.as_str().unwrap().chars().count();
    assert_eq!((chars(&o["by"]), chars(&o["reason"])), (100, 1000), "{o}");
    assert!(o["by"].as_str().unwrap().ends_with('…'));
    for a in saved["approvals"].as_array().unwrap() {
        assert_eq!(chars(&a["reason"]), 1000);
    }
}

/// An entry of prober `id` saved at `saved_at` whose `primary` keeps `n` attempts, one a
/// second up to `saved_at`.
fn prober_with_attempts(saved_at: i64, n: i64) -> serde_json::Value {
    let attempts: Vec<serde_json::Value> = (0..n)
        .map(|i| json!({"finished_at": saved_at - (n - i) * 1000, "success": true, "class": null}))
        .collect();
    json!({
        "saved_at": saved_at,
        "branches": {"primary": {
            "state": "ready", "since": null, "unready_holding_since": null,
            "ready_holding_since": null, "attempts": attempts,
        }},
    })
}

/// A document just under the 16 MiB read cap, of twelve probers at the largest window: a `run`
/// wrote it back pretty-printed, over the cap, after which `run`, `status`, `approve` and
/// `drill mark` all exited 74. Now every write is compact and fitted to a budget: the operator
/// commands still work after the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probers_at_the_largest_window_never_make_the_document_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), FAST_SYNC).await;
    let now = now_ms();
    let probers: serde_json::Map<String, serde_json::Value> = (0..12)
        .map(|p| (format!("az-{p}"), prober_with_attempts(now, 20_000)))
        .collect();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join(format!("control-{SERVICE}.json"));
    let body =
        serde_json::to_vec(&json!({"version": 2, "service": SERVICE, "probers": probers})).unwrap();
    assert!(
        body.len() > 12 << 20 && body.len() < 16 << 20,
        "{}",
        body.len()
    );
    std::fs::write(&path, body).unwrap();
    let bound = Duration::from_secs(60);
    // Until a save has fitted the document (its first sync; how long that takes depends on the
    // machine's load, so the run is stopped on the result rather than after a fixed duration).
    let run = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--duration", "300s", "--config"])
        .arg(&cfg)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let len = || std::fs::metadata(&path).map_or(u64::MAX, |m| m.len());
    crate::support::wait_for(bound, "a save fitting the document", || async {
        len() < 9 << 20
    })
    .await;
    let pid = i32::try_from(run.id().unwrap()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let run = tokio::time::timeout(bound, run.wait_with_output())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(len() < 9 << 20, "{} bytes", len());
    assert_eq!(
        read_doc(dir.path())["probers"].as_object().unwrap().len(),
        13
    );
    let status = readyprobe(&["status"], &cfg, bound).await;
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    let approve = [
        "approve", "--branch", "primary", "--by", "ops", "--reason", "x",
    ];
    let out = readyprobe(&approve, &cfg, bound).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let mark = ["drill", "mark", "--label", "fault", "--by", "ops"];
    let out = readyprobe(&mark, &cfg, bound).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A prober last saved 20 minutes ago was shown as if it were running: `status` now gives each
/// prober's age and marks the old one stale, and `--json` says so per prober.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_marks_a_prober_not_saved_for_minutes_stale() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _dns) = config(dir.path(), "").await;
    let now = now_ms();
    write_doc(
        dir.path(),
        &json!({"version": 2, "service": SERVICE,
                "probers": {"old": pending_prober(now - 20 * 60_000),
                            "new": pending_prober(now)}}),
    );
    let bound = Duration::from_secs(30);
    let out = readyprobe(&["status"], &cfg, bound).await;
    let o = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{o}");
    assert_eq!(o.matches("STALE: not saved for 20m").count(), 1, "{o}");
    assert!(o.contains("it may not be running"), "{o}");
    let out = readyprobe(&["status", "--json"], &cfg, bound).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["freshness"]["probers"];
    assert_eq!(
        (f["old"]["stale"].clone(), f["new"]["stale"].clone()),
        (json!(true), json!(false))
    );
    assert!(f["old"]["age_ms"].as_i64().unwrap() >= 20 * 60_000, "{f}");
    assert!(v["freshness"]["read_at"].as_i64().unwrap() >= now);
}

/// A control document that turns corrupt while `run` runs (garbage written over it) keeps the
/// service probed, and every tick after failed syncs publishes `StoreSyncFailures` with class
/// `corrupt` on the `emf` sink (stdout): an alarm can tell that the store stopped flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_turned_corrupt_while_running_raises_store_sync_failures() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let fast = format!("{FAST_SYNC}[publish]\ninterval = \"1s\"\n");
    let (cfg, _dns) = config(dir.path(), &fast).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--duration", "60s", "--config"])
        .arg(&cfg)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let doc = dir.path().join(format!("state/control-{SERVICE}.json"));
    let synced = |doc: &Path| {
        std::fs::read(doc)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["probers"].get("it").is_some())
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while !synced(&doc) {
        assert!(
            tokio::time::Instant::now() < until,
            "no sync saved the document"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failures = |l: &serde_json::Value| l["StoreSyncFailures"].as_f64();
    let mut corrupted = false;
    let found = loop {
        // Garbage again whenever a sync in flight replaced it with a good document.
        if std::fs::read(&doc).map_or(true, |b| {
            serde_json::from_slice::<serde_json::Value>(&b).is_ok()
        }) {
            std::fs::write(&doc, b"\x00not json{{{").unwrap();
            corrupted = true;
        }
        let next = tokio::time::timeout_at(until, lines.next_line()).await;
        let line = next
            .expect("no StoreSyncFailures within 30 s of the start")
            .unwrap()
            .expect("run ended before publishing StoreSyncFailures");
        let Ok(l) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if let Some(n) = failures(&l) {
            assert!(corrupted, "StoreSyncFailures before the corruption: {l}");
            break (n, l);
        }
    };
    let (n, l) = found;
    assert!(n >= 1.0, "{l}");
    assert_eq!(
        (&l["Class"], &l["Service"]),
        (&"corrupt".into(), &SERVICE.into()),
        "{l}"
    );
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let failed: Vec<_> =
        crate::support::fixture::read_evidence(&dir.path().join("state/evidence.jsonl"))
            .into_iter()
            .filter(|v| v["kind"] == "state_sync_failed")
            .collect();
    assert!(
        failed.iter().any(|v| v["class"] == "corrupt"),
        "no state_sync_failed record of class corrupt: {failed:?}"
    );
}
