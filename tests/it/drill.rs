//! Drill markers on real components: `drill mark` through the file store reaches every running
//! prober's evidence exactly once; `--evidence` appends one whole line to a file; bad labels
//! are usage errors that touch nothing. `drill report` on a recorded drill measures its phases.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{
    FAST_POLICY, Running, has_transition, read_evidence, transitions, wait_evidence,
};
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

/// A `tcp` service whose two branches each have their own listener, probed every 300 ms with
/// the compressed policy (unready after 1 s under 80%, ready after 3 s at 95%, no approval);
/// written as `dir/az-a.toml` by the caller.
fn two_branch_config(dir: &Path, dns: &DnsServer, ports: (u16, u16)) -> ConfigBuilder {
    ConfigBuilder::new(dir, SERVICE, "mq.orders.internal.example")
        .top("prober_id", "az-a")
        .nameserver(dns.addr())
        .set("dns", "timeout", "200ms")
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(ports.0))
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("publish", "interval", "1s")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("state", "poll_interval", "300ms")
        .set("evidence", "path", path(&evidence(dir, "az-a")))
        .merge(FAST_POLICY)
        .branch(
            "primary",
            "PRIMARY",
            "mq-a.orders.internal.example",
            Some(ports.0),
        )
        .branch(
            "secondary",
            "SECONDARY",
            "mq-b.orders.internal.example",
            Some(ports.1),
        )
}

/// The cells of the phase row `name` in the table after heading `heading` of `md`.
fn phase_row<'a>(md: &'a str, heading: &str, name: &str) -> Vec<&'a str> {
    let (_, table) = md
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in\n{md}"));
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| {name} |")))
        .unwrap_or_else(|| panic!("no row {name:?} after {heading:?} in\n{md}"));
    row.trim_matches('|').split(" | ").map(str::trim).collect()
}

/// Milliseconds of a duration cell (`1s 200ms`, `850ms`).
fn cell_ms(cell: &str) -> u64 {
    let d = humantime::parse_duration(cell).unwrap_or_else(|e| panic!("{cell:?}: {e}"));
    d.as_millis() as u64
}

/// A real drill: `run` on two tcp branches, a fault marker, the primary's listener stopped, a
/// restore marker, the listener back; then `drill report` measures the first phases (each
/// within a few probe intervals of what the test did) and names the records that are missing
/// for the others (no alarm lane, no stable-name probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_report_measures_a_recorded_failover_and_failback() {
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-a", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mq-b", Ipv4Addr::LOCALHOST, 5).await;
    let (a, b) = (listener().await, listener().await);
    let port_a = a.port;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = two_branch_config(d, &dns, (a.port, b.port)).write(&d.join("az-a.toml"));
    let run = Running::start(readyprobe::config::load(&cfg).unwrap(), None);
    let ev = evidence(d, "az-a");
    let ready = |b: &'static str| move |ev: &[Value]| has_transition(ev, b, "ready");
    wait_evidence(&ev, Duration::from_secs(30), ready("primary")).await;
    wait_evidence(&ev, Duration::from_secs(30), ready("secondary")).await;

    mark(&cfg, "fault", "stopped the primary listener");
    wait_evidence(&ev, Duration::from_secs(20), |ev| {
        !markers(ev, "stopped the primary listener").is_empty()
    })
    .await;
    drop(a);
    wait_evidence(&ev, Duration::from_secs(30), |ev| {
        has_transition(ev, "primary", "unready")
    })
    .await;
    // The listener back on its port, then the restore marker.
    let back = TcpListener::bind(("127.0.0.1", port_a)).await.unwrap();
    let back = tokio::spawn(async move { while back.accept().await.is_ok() {} });
    mark(&cfg, "restore", "started the primary listener");
    wait_evidence(&ev, Duration::from_secs(30), |ev| {
        transitions(ev, "primary")
            .iter()
            .filter(|t| t.1 == "ready")
            .count()
            == 2
    })
    .await;
    run.stop().await;
    back.abort();

    let out = d.join("report");
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        ev.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("Failover of primary"),
        "{html}"
    );
    assert!(
        stdout.contains("### Failover of primary") && stdout.contains("### Failback of primary"),
        "{stdout}"
    );
    assert!(
        md.contains("| probe | every 300ms, attempt timeout 250ms |"),
        "{md}"
    );
    assert!(md.contains("Problems\n\nNone"), "{md}");

    let fo = "### Failover of primary";
    // phase, at, since trigger, took, note
    let first = phase_row(&md, fo, "first failed attempt");
    assert!(first[1].starts_with("20"), "{first:?}");
    assert!(cell_ms(first[2]) < 10_000, "{first:?}");
    let detect = phase_row(&md, fo, "readiness 0 published");
    assert!(detect[1].starts_with("20"), "{detect:?}");
    // Unready needs 1 s under 80% in a 3 s window: a few probe intervals after the first failure.
    let took = cell_ms(detect[3]);
    assert!((500..=8_000).contains(&took), "{detect:?}");
    assert!(detect[4].contains("sent by sink emf"), "{detect:?}");
    let alarm = phase_row(&md, fo, "alarm in ALARM");
    assert_eq!(alarm[1], "—", "{alarm:?}");
    assert!(
        alarm[4].contains("no alarm lane (without --alarms"),
        "{alarm:?}"
    );
    for name in ["stable name answers with the other branch", "steady state"] {
        let row = phase_row(&md, fo, name);
        assert_eq!(row[1], "—", "{row:?}");
        assert!(row[4].contains("no stable_name records"), "{row:?}");
    }

    let fb = "### Failback of primary";
    let ok = phase_row(&md, fb, "first successful attempt");
    assert!(cell_ms(ok[2]) < 10_000, "{ok:?}");
    let pending = phase_row(&md, fb, "pending_approval entered");
    assert!(pending[4].contains("needs no approval"), "{pending:?}");
    let published = phase_row(&md, fb, "readiness 1 published");
    // Ready needs 3 s at 95%: at least that after the first success.
    assert!(
        (2_500..=15_000).contains(&cell_ms(published[3])),
        "{published:?}"
    );
}

/// Bad input: a missing evidence file, a directory, or an out path that is a file exit 74; an unknown
/// `--service` 64; a file with a bad line still makes a report that lists it. No config needed.
#[test]
fn drill_report_exit_codes_and_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ev = d.join("copy.jsonl");
    let line = r#"{"record_seq":1,"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-queue","prober":"az-a","kind":"evidence_reopened","path":"x"}"#;
    std::fs::write(&ev, format!("{line}\nnot json\n")).unwrap();
    let report = |evidence: &Path, out: &Path, more: &[&str]| {
        let args = [
            "drill",
            "report",
            "--evidence",
            evidence.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        cli(&[&args[..], more].concat())
    };
    let (code, out, err) = report(&ev, &d.join("r"), &[]);
    assert_eq!(code, 0, "{out}{err}");
    let md = std::fs::read_to_string(d.join("r/report.md")).unwrap();
    assert!(
        md.contains("copy.jsonl: line 2: not an evidence record"),
        "{md}"
    );
    let (code, _, err) = report(&d.join("missing.jsonl"), &d.join("r2"), &[]);
    assert_eq!(code, 74, "{err}");
    assert!(err.contains("cannot read evidence file"), "{err}");
    let (code, _, err) = report(&ev, &ev, &[]);
    assert_eq!(code, 74, "{err}");
    // A directory opens but cannot be read as evidence.
    let (code, _, err) = report(d, &d.join("r4"), &[]);
    assert_eq!(code, 74, "{err}");
    let (code, _, err) = report(&ev, &d.join("r3"), &["--service", "billing"]);
    assert_eq!(code, 64, "{err}");
    let (code, _, err) = cli(&["drill", "report", "--out", d.to_str().unwrap()]);
    assert_eq!(code, 64, "{err}");
    // Nothing to report: an empty file, or one of bad lines only.
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "not json\n").unwrap();
    let (code, _, err) = report(&empty, &d.join("r5"), &[]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("no evidence record"), "{err}");
    assert!(!d.join("r5").exists());
}

/// `drill mark --kind KIND --label LABEL --by alice` through the store of config `cfg`.
fn mark(cfg: &Path, kind: &str, label: &str) {
    let args = [
        "drill",
        "mark",
        "--config",
        cfg.to_str().unwrap(),
        "--kind",
        kind,
    ];
    let (code, out, err) = cli(&[&args[..], &["--label", label, "--by", "alice"]].concat());
    assert_eq!(code, 0, "{out}{err}");
}

/// In the evidence at `ev`: the time of the last stable-name round selecting `old` before the
/// first selecting `new`, and of that first one.
fn switch_rounds(ev: &Path, old: &str, new: &str) -> (i64, i64) {
    let rounds: Vec<(i64, Value)> = read_evidence(ev)
        .iter()
        .filter(|v| v["kind"] == "stable_name")
        .map(|v| (v["at_ms"].as_i64().unwrap(), v["selected"].clone()))
        .collect();
    let switch = rounds.iter().position(|r| r.1 == new).unwrap();
    let last_old = rounds[..switch].iter().rfind(|r| r.1 == old).unwrap();
    (last_old.0, rounds[switch].0)
}

/// An accepting listener on `ip`, port 0 or `port`.
async fn listener_on(ip: Ipv4Addr, port: u16) -> Listener {
    let l = TcpListener::bind((ip, port)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move { while l.accept().await.is_ok() {} });
    Listener { port, task }
}

/// ms since the epoch of an `at (UTC)` cell.
fn cell_at(cell: &str) -> i64 {
    let t = humantime::parse_rfc3339(cell).unwrap_or_else(|e| panic!("{cell:?}: {e}"));
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The newest stable-name round selects `branch`.
fn selects(branch: &'static str) -> impl Fn(&[Value]) -> bool {
    move |ev| {
        ev.iter()
            .rev()
            .find(|v| v["kind"] == "stable_name")
            .is_some_and(|r| r["selected"] == branch)
    }
}

/// True once three stable-name rounds after evidence record `from` selected `branch` and their
/// end-to-end attempts succeeded: the report's steady state has rounds to start from.
fn steady(from: usize, branch: &'static str) -> impl Fn(&[Value]) -> bool {
    move |ev| {
        ev.iter()
            .skip(from)
            .filter(|v| {
                v["kind"] == "stable_name"
                    && v["selected"] == branch
                    && v["end_to_end"]["result"] == "success"
            })
            .count()
            >= 3
    }
}

/// The failover's DNS selection, cache expiry, reconnect and steady state in report `md`,
/// against the flip at `flip_over` (ms since the epoch) and the rounds in evidence `ev`.
fn check_failover_dns_phases(md: &str, ev: &Path, flip_over: i64) {
    let fo = "### Failover of primary";
    // phase, at, since trigger, took, note
    let dns_sel = phase_row(md, fo, "stable name answers with the other branch");
    assert_eq!(dns_sel[4], "secondary", "{dns_sel:?}");
    let at = cell_at(dns_sel[1]);
    // The first round after the flip (a round started just before it may already see it):
    // rounds are 200 ms apart, with room for a loaded machine.
    assert!(
        (flip_over - 500..flip_over + 3_000).contains(&at),
        "{at} vs flip {flip_over}: {dns_sel:?}"
    );
    let expiry = phase_row(md, fo, "cache expiry");
    assert!(expiry[4].contains("TTL 2 s"), "{expiry:?}");
    // Exactly the last round naming the primary before the first naming the secondary, + 2 s.
    let (last_old, switch) = switch_rounds(ev, "primary", "secondary");
    assert_eq!(cell_at(expiry[1]), last_old + 2_000, "{expiry:?}");
    assert_eq!(switch, at);
    // The secondary listens on the same port: the first round naming it connects.
    let reconnect = phase_row(md, fo, "reconnect (end-to-end through the stable name)");
    let r = cell_at(reconnect[1]);
    assert!((at..at + 3_000).contains(&r), "{reconnect:?}");
    let steady = phase_row(md, fo, "steady state");
    assert!(
        steady[4].contains("selects secondary from here on; every end-to-end attempt succeeds"),
        "{steady:?}"
    );
    assert!(cell_at(steady[1]) >= at, "{steady:?}");
}

/// The failback's DNS selection, cache expiry, reconnect and steady state in report `md`,
/// against the flip back at `flip_back` (ms since the epoch).
fn check_failback_dns_phases(md: &str, flip_back: i64) {
    let fb = "### Failback of primary";
    let again = phase_row(md, fb, "stable name selects the branch again");
    let at = cell_at(again[1]);
    assert!(
        (flip_back - 500..flip_back + 3_000).contains(&at),
        "{at} vs flip {flip_back}: {again:?}"
    );
    let expiry = phase_row(md, fb, "cache expiry");
    assert!(
        expiry[4].contains("last answer naming another branch"),
        "{expiry:?}"
    );
    let reconnect = phase_row(md, fb, "reconnect (end-to-end through the stable name)");
    assert!(
        (at..at + 3_000).contains(&cell_at(reconnect[1])),
        "{reconnect:?}"
    );
    let steady = phase_row(md, fb, "steady state");
    assert!(
        steady[4].contains("selects primary from here on; every end-to-end attempt succeeds"),
        "{steady:?}"
    );
}

/// With the stable-name probe on (end-to-end attempt included), the DNS and client phases are
/// measured: the test flips the stable name's answer (TTL 2 s) once the primary is unready and
/// again once it is ready; the report's DNS selection follows each flip within a few rounds
/// (200 ms apart), the cache expiry is the last round naming the old branch plus 2 s, the
/// reconnect is the first end-to-end success after the switch, and the steady state holds from
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_report_measures_dns_selection_and_cache_expiry() {
    const A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-a", A, 5).await;
    dns.set_a("mq-b", B, 5).await;
    dns.set_a("mq", A, 2).await;
    // One port on both addresses: the end-to-end attempt connects to the service's port at
    // whatever address the stable name gives.
    let a = listener_on(A, 0).await;
    let b = listener_on(B, a.port).await;
    let port_a = a.port;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = two_branch_config(d, &dns, (a.port, b.port))
        .set("stable_name_probe", "enabled", true)
        .set("stable_name_probe", "interval", "200ms")
        .set("stable_name_probe", "end_to_end", true)
        .write(&d.join("az-a.toml"));
    let run = Running::start(readyprobe::config::load(&cfg).unwrap(), None);
    let ev = evidence(d, "az-a");
    let wait = Duration::from_secs(30);
    wait_evidence(&ev, wait, |ev| {
        has_transition(ev, "primary", "ready") && has_transition(ev, "secondary", "ready")
    })
    .await;
    wait_evidence(&ev, wait, selects("primary")).await;

    mark(&cfg, "fault", "stopped the primary listener");
    wait_evidence(&ev, wait, |ev| {
        !markers(ev, "stopped the primary listener").is_empty()
    })
    .await;
    drop(a);
    wait_evidence(&ev, wait, |ev| has_transition(ev, "primary", "unready")).await;
    let flip_over = crate_now();
    dns.set_a("mq", B, 2).await;
    let from = wait_evidence(&ev, wait, selects("secondary")).await.len();
    // Rounds go on naming the secondary for a while: the steady state.
    wait_evidence(&ev, wait, steady(from, "secondary")).await;

    let back = listener_on(A, port_a).await;
    mark(&cfg, "restore", "started the primary listener");
    wait_evidence(&ev, wait, |ev| {
        transitions(ev, "primary")
            .iter()
            .filter(|t| t.1 == "ready")
            .count()
            == 2
    })
    .await;
    let flip_back = crate_now();
    dns.set_a("mq", A, 2).await;
    let from = wait_evidence(&ev, wait, selects("primary")).await.len();
    wait_evidence(&ev, wait, steady(from, "primary")).await;
    run.stop().await;
    drop(back);

    let out = d.join("report");
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        ev.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("| stable_name_probe | every 200ms, with the end-to-end attempt |"),
        "{md}"
    );
    assert!(md.contains("| stable name TTL seen | 2 s |"), "{md}");

    check_failover_dns_phases(&md, &ev, flip_over);
    check_failback_dns_phases(&md, flip_back);
}

/// A lost evidence file: the next run numbers its records from 1 again. `drill report` over the
/// old file and the new one keeps both runs' records and names the reused numbers; a copy of
/// the old file given too adds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_report_keeps_both_runs_when_numbering_restarted() {
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-a", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mq-b", Ipv4Addr::LOCALHOST, 5).await;
    let (a, b) = (listener().await, listener().await);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = two_branch_config(d, &dns, (a.port, b.port)).write(&d.join("az-a.toml"));
    let ev = evidence(d, "az-a");
    let attempts = |ev: &[Value]| ev.iter().filter(|r| r["kind"] == "attempt").count();
    let mut runs = Vec::new();
    for n in 1..=2 {
        let run = Running::start(readyprobe::config::load(&cfg).unwrap(), None);
        wait_evidence(&ev, Duration::from_secs(30), |ev| attempts(ev) >= 4).await;
        run.stop().await;
        let kept = d.join(format!("run-{n}.jsonl"));
        std::fs::rename(&ev, &kept).unwrap();
        runs.push(kept);
    }
    let copy = d.join("run-1-copy.jsonl");
    std::fs::copy(&runs[0], &copy).unwrap();
    let records: Vec<Vec<Value>> = runs.iter().map(|r| read_evidence(r)).collect();
    let last_seq = |ev: &[Value]| ev.iter().filter_map(|r| r["record_seq"].as_u64()).max();
    assert_eq!(records[1][0]["record_seq"], 1, "{:?}", records[1][0]);
    let overlap = last_seq(&records[0]).min(last_seq(&records[1])).unwrap();

    let out = d.join("report");
    let mut args = vec!["drill", "report", "--out", out.to_str().unwrap()];
    for f in [&runs[0], &runs[1], &copy] {
        args.extend(["--evidence", f.to_str().unwrap()]);
    }
    let (code, stdout, err) = cli(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let reused: Vec<&str> = md.lines().filter(|l| l.contains("reused")).collect();
    assert_eq!(reused.len(), 1, "{md}");
    assert!(
        reused[0].contains(&format!(
            "prober az-a: record_seq 1–{overlap} reused by different records"
        )),
        "{md}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(&format!("record_seq 1–{overlap} reused")),
        "{html}"
    );
    // Every attempt of both runs is in the report, once.
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let drawn: usize = json["services"][0]["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["attempts"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        drawn,
        attempts(&records[0]) + attempts(&records[1]),
        "{json}"
    );
}
