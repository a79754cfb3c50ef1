//! Drill markers on real components: `drill mark` through the file store reaches every running
//! prober's evidence exactly once; `--evidence` appends one whole line to a file; bad labels
//! are usage errors that touch nothing.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{Running, read_evidence, wait_evidence};
use readyprobe::control::ControlDoc;
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tokio::net::TcpListener;

const SERVICE: &str = "orders-queue";

/// A TCP listener on loopback that accepts every connection; aborted on drop.
struct Listener {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listener() -> Listener {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move { while l.accept().await.is_ok() {} });
    Listener { port, task }
}

/// A `tcp` service probed every 300 ms, its store polled every 300 ms, the state shared in
/// `dir`, evidence of prober `prober` in `dir/<prober>.jsonl`.
fn config(dir: &Path, dns: &DnsServer, port: u16, prober: &str) -> PathBuf {
    let cfg = ConfigBuilder::new(dir, SERVICE, "mq.orders.internal.example")
        .top("prober_id", prober)
        .nameserver(dns.addr())
        .set("dns", "timeout", "200ms")
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("publish", "interval", "1s")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("state", "poll_interval", "300ms")
        .set("evidence", "path", path(&evidence(dir, prober)))
        .branch("primary", "PRIMARY", "mq-a.orders.internal.example", None)
        .branch(
            "secondary",
            "SECONDARY",
            "mq-b.orders.internal.example",
            None,
        );
    cfg.write(&dir.join(format!("{prober}.toml")))
}

fn evidence(dir: &Path, prober: &str) -> PathBuf {
    dir.join(format!("{prober}.jsonl"))
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn markers<'a>(ev: &'a [Value], label: &str) -> Vec<&'a Value> {
    ev.iter()
        .filter(|v| v["kind"] == "marker" && v["label"] == label)
        .collect()
}

fn doc(dir: &Path) -> ControlDoc {
    let text = std::fs::read(dir.join("state").join(format!("control-{SERVICE}.json")));
    serde_json::from_slice(&text.unwrap_or_default()).unwrap_or_else(|_| ControlDoc::new(SERVICE))
}

/// Wait until every prober in `probers` has saved after `after` (ms since the epoch) `syncs`
/// times more (each sync rewrites its entry's `saved_at`).
async fn wait_syncs(dir: &Path, probers: &[&str], after: i64, polls: i64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let d = doc(dir);
        let saved = |p: &str| d.probers.get(p).map_or(0, |s| s.saved_at);
        if probers.iter().all(|p| saved(p) > after + polls * 300) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "probers did not sync: {:?}",
            d.probers.keys()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `drill mark` through the store: both running probers record the marker once, as given,
/// and again not after several more syncs nor at their final one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_given_through_the_store_reaches_every_running_prober_once() {
    let l = listener().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-a", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mq-b", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = (
        config(d, &dns, l.port, "az-a"),
        config(d, &dns, l.port, "az-b"),
    );
    let load = |p: &Path| readyprobe::config::load(p).unwrap_or_else(|e| panic!("{e}"));
    let run_a = Running::start(load(&a), None);
    let run_b = Running::start(load(&b), None);
    wait_syncs(d, &["az-a", "az-b"], 0, 0).await;

    let label = "blocked writer path";
    let args = [
        "drill",
        "mark",
        "--config",
        a.to_str().unwrap(),
        "--label",
        label,
    ];
    let (code, out, err) = cli(&[&args[..], &["--kind", "fault", "--by", "alice"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("marker ") && out.contains("(fault) recorded in"),
        "{out}"
    );
    for p in ["az-a", "az-b"] {
        wait_evidence(&evidence(d, p), Duration::from_secs(20), |ev| {
            !markers(ev, label).is_empty()
        })
        .await;
    }
    let given = doc(d).markers[0].at;
    wait_syncs(d, &["az-a", "az-b"], crate_now(), 4).await;
    let s_a = run_a.stop().await;
    let s_b = run_b.stop().await;
    assert_eq!((s_a.state_sync_failures, s_b.state_sync_failures), (0, 0));

    for p in ["az-a", "az-b"] {
        let ev = read_evidence(&evidence(d, p));
        let m = markers(&ev, label);
        assert_eq!(m.len(), 1, "{p}: {m:?}");
        let m = m[0];
        assert_eq!(m["prober"], p);
        assert_eq!(m["service"], SERVICE);
        assert_eq!(m["marker_kind"], "fault");
        assert_eq!(m["by"], "alice");
        assert_eq!(m["given_at"], given);
        assert!(m["at_ms"].as_i64().unwrap() >= given, "{m}");
        assert!(
            ev.iter().any(|v| v["kind"] == "stop"),
            "{p} stopped cleanly"
        );
    }
    let taken: Vec<String> = doc(d).markers[0].taken.keys().cloned().collect();
    assert_eq!(taken, ["az-a", "az-b"]);
}

fn crate_now() -> i64 {
    readyprobe::clock::Clock::start().now_ms()
}

/// `--evidence`: one parseable `marker` line appended after the last record (a torn last
/// line stays a bad line of its own); the store is untouched; a symbolic link and a missing
/// file are refused with 74.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_appends_one_whole_line_and_touches_no_store() {
    let dns = DnsServer::start("orders.internal.example").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, &dns, 9, "az-a");
    let file = d.join("copy.jsonl");
    let first = r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-queue","prober":"az-a","kind":"evidence_reopened","path":"x"}"#;
    std::fs::write(&file, format!("{first}\n{{\"at\":")).unwrap();
    let mark = |f: &Path, label: &str| {
        cli(&[
            "drill",
            "mark",
            "--config",
            cfg.to_str().unwrap(),
            "--evidence",
            f.to_str().unwrap(),
            "--label",
            label,
            "--by",
            "bob",
            "--prober-id",
            "az-a",
        ])
    };
    let (code, out, err) = mark(&file, "restored writer path");
    assert_eq!(code, 0, "{out}{err}");
    let items: Vec<_> = readyprobe::record::read_lines(std::io::BufReader::new(
        std::fs::File::open(&file).unwrap(),
    ))
    .collect();
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(items[1].is_err(), "the torn line stays one bad line");
    let m = items[2].as_ref().unwrap();
    let v = serde_json::to_value(m).unwrap();
    assert_eq!(v["kind"], "marker");
    assert_eq!(v["marker_kind"], "note");
    assert_eq!(v["label"], "restored writer path");
    assert_eq!(v["by"], "bob");
    assert_eq!(
        (v["service"].as_str(), v["prober"].as_str()),
        (Some(SERVICE), Some("az-a"))
    );
    assert_eq!(v["given_at"], v["at_ms"]);
    assert!(std::fs::read_to_string(&file).unwrap().ends_with("}\n"));
    assert!(!d.join("state").exists(), "the store was not touched");

    let link = d.join("link.jsonl");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let before = std::fs::read(&file).unwrap();
    let (code, _, err) = mark(&link, "via a link");
    assert_eq!(code, 74, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let (code, _, err) = mark(&d.join("missing.jsonl"), "nowhere");
    assert_eq!(code, 74, "{err}");
    assert!(!d.join("missing.jsonl").exists());
}

/// A label with a control character, an empty one or one over 200 characters is a usage error
/// (64), and nothing is written to the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_label_exits_64_and_writes_nothing() {
    let dns = DnsServer::start("orders.internal.example").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, &dns, 9, "az-a");
    let long = "x".repeat(201);
    for label in ["blocked\nwriter", "\u{1b}[2Jcleared", " ", long.as_str()] {
        let (code, out, err) = cli(&[
            "drill",
            "mark",
            "--config",
            cfg.to_str().unwrap(),
            "--label",
            label,
        ]);
        assert_eq!(code, 64, "{label:?}: {out}{err}");
        assert!(err.starts_with("error: --label"), "{err}");
    }
    assert!(doc(d).markers.is_empty());
    assert!(!d.join("state").exists());
}
