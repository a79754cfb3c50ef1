//! The stable-name probe against the in-process DNS server serving both branch names and the
//! stable name: the selection follows the failover record as the test flips it, and an answer no
//! branch has is flagged (its own class, record and WARN). Evidence only: no branch's attempts
//! change. The end-to-end attempt through the stable name on real MariaDB (TLS checked against
//! the stable name, a canary row of its own) and in `run` (recorded, `StableNameSuccess`, a dead
//! target); a branch endpoint that is a CNAME to the stable name fails `dns_stable_name`; reloads
//! start, restart and stop stable-name loops.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{Running, fleet_header, read_evidence, wait_evidence};
use readyprobe::config::{AddressFamily, Role};
use readyprobe::probe::stable_name::{BranchEndpoint, Selection, observe};
use readyprobe::sink::emf::EmfBuffer;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::instrument::WithSubscriber;

const ZONE: &str = "orders.internal.example";
const PRIMARY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const SECONDARY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);

async fn zone() -> DnsServer {
    let dns = DnsServer::start(ZONE).await;
    dns.set_a("mq-a", PRIMARY, 5).await;
    dns.set_a("mq-b", SECONDARY, 5).await;
    dns.set_a("mq", PRIMARY, 7).await;
    dns
}

fn last_round(ev: &[Value]) -> Option<&Value> {
    ev.iter().rev().find(|v| v["kind"] == "stable_name")
}

/// Wait until the EMF output's newest `SelectedBranch` value is `want`.
async fn wait_selected_datum(run: &Running, want: f64) {
    wait_datum(&run.emf, "SelectedBranch", want).await;
}

/// Wait until the EMF output's newest `metric` value is `want`.
async fn wait_datum(emf: &EmfBuffer, metric: &str, want: f64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let newest = emf.lines().iter().rev().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            v[metric].as_f64()
        });
        if newest == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{metric} {newest:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest round satisfies `pred`.
fn newest(pred: impl Fn(&Value) -> bool) -> impl Fn(&[Value]) -> bool {
    move |ev| last_round(ev).is_some_and(&pred)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selection_follows_the_failover_record_and_an_unknown_target_is_flagged() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let dns = zone().await;
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let cfg = ConfigBuilder::new(dir.path(), "orders-queue", &dns.fqdn("mq"))
        .nameserver(dns.addr())
        .set("dns", "timeout", "500ms")
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("publish", "interval", "1s")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&evidence))
        .set("stable_name_probe", "enabled", true)
        .set("stable_name_probe", "interval", "200ms")
        .branch("primary", "PRIMARY", &dns.fqdn("mq-a"), None)
        .branch("secondary", "SECONDARY", &dns.fqdn("mq-b"), None)
        .write(&dir.path().join("c.toml"));
    let cfg = readyprobe::config::load(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let run = Running::start(cfg, None);
    let wait = Duration::from_secs(15);

    let ev = wait_evidence(&evidence, wait, newest(|r| r["selected"] == "primary")).await;
    let r = last_round(&ev).unwrap();
    assert_eq!(r["service"], "orders-queue");
    assert_eq!(r["unknown_target"], false);
    assert_eq!(r["answers"][0]["data"], "127.0.0.1");
    assert_eq!(r["answers"][0]["ttl"], 7);
    wait_selected_datum(&run, 1.0).await;

    dns.set_a("mq", SECONDARY, 7).await;
    wait_evidence(&evidence, wait, newest(|r| r["selected"] == "secondary")).await;
    wait_selected_datum(&run, 2.0).await;

    dns.set_a("mq", ELSEWHERE, 7).await;
    let ev = wait_evidence(&evidence, wait, newest(|r| r["unknown_target"] == true)).await;
    let r = last_round(&ev).unwrap();
    assert!(r["selected"].is_null());
    // Its own class, the answer no branch has as the message.
    assert_eq!(r["class"], "stable_name_unknown_target", "{r}");
    assert!(r["error"].as_str().unwrap().contains("127.0.0.9"), "{r}");
    // End-to-end is off: no attempt through the stable name, no StableNameSuccess.
    assert!(r.get("end_to_end").is_none(), "{r}");
    wait_selected_datum(&run, 0.0).await;
    assert!(
        !run.emf
            .lines()
            .iter()
            .any(|l| l.contains("StableNameSuccess"))
    );

    dns.remove("mq").await;
    let ev = wait_evidence(&evidence, wait, newest(|r| r["class"] == "dns_nxdomain")).await;
    assert_eq!(last_round(&ev).unwrap()["unknown_target"], false);
    run.stop().await;
    drop(l);
}

/// Collects what a subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_no_branch_has_logs_a_warning() {
    let dns = zone().await;
    let resolver = dns.resolver();
    let branches = [
        ("primary", Role::Primary, "mq-a"),
        ("secondary", Role::Secondary, "mq-b"),
    ]
    .map(|(name, role, host)| BranchEndpoint {
        name: name.into(),
        role,
        endpoint: dns.fqdn(host),
    });
    let out = Captured::default();
    let w = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .finish();
    let subscriber = tracing::Dispatch::new(subscriber);
    let stable = dns.fqdn("mq");
    let round = |s: String| {
        let (r, b) = (resolver.clone(), branches.clone());
        async move { observe(&r, AddressFamily::Ipv4, "orders-queue", &s, &b).await }
    };
    let o = round(stable.clone())
        .with_subscriber(subscriber.clone())
        .await;
    assert_eq!(
        o.selection.as_ref().and_then(Selection::branch_name),
        Some("primary")
    );
    assert!(out.0.lock().unwrap().is_empty());

    dns.set_a("mq", ELSEWHERE, 7).await;
    // Other tests' `run`s hit the WARN's callsite too; one registering it while this test's
    // dispatcher registered can cache it as disabled: recompute with this dispatcher in place.
    tracing::callsite::rebuild_interest_cache();
    let o = round(stable).with_subscriber(subscriber).await;
    assert!(o.unknown_target());
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains("the failover records point somewhere this config does not know"),
        "{text}"
    );
    assert!(text.contains("127.0.0.9"), "{text}");
}

/// A listener on `ip`:`port` (0: any free port) that accepts, counts and closes; aborted on
/// drop.
struct Listener {
    port: u16,
    accepted: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Connections accepted so far.
    fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listener(ip: Ipv4Addr, port: u16) -> Listener {
    let l = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(s);
        }
    });
    Listener {
        port,
        accepted,
        task,
    }
}

/// The end-to-end attempt on real MariaDB, as `run` makes it: through the stable name (a
/// CNAME), `verify_identity` against the stable name, the marked write in a canary row of its
/// own next to the branch's. A branch certificate without the stable name fails it at `tls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_to_end_attempt_goes_through_the_stable_name_on_mariadb() {
    use crate::support::fixture::{
        ConfigOpts, PASSWORD, PRIMARY, Pipeline, SECONDARY, ZONE as DB_ZONE,
    };
    use crate::support::mariadb::MariaDb;
    use crate::support::tls::TestCa;
    use readyprobe::clock::Clock;
    use readyprobe::failure::{FailureClass, Step};
    use readyprobe::probe::{Outcome, prepare, run_attempt};

    let ca = TestCa::new();
    let lo = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let stable = format!("mysql.{DB_ZONE}");
    // The primary's certificate names the stable name too; the secondary's does not.
    let pc = ca.server_cert(&[PRIMARY, &stable], &lo);
    let sc = ca.server_cert(&[SECONDARY], &lo);
    let Some(primary) = MariaDb::start_or_skip(Some(&pc)).await else {
        return;
    };
    let Some(secondary) = MariaDb::start_or_skip(Some(&sc)).await else {
        return;
    };
    primary.install_canary(PASSWORD).await;
    secondary.install_canary(PASSWORD).await;
    let dns = DnsServer::start(DB_ZONE).await;
    dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mysql-secondary", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_cname("mysql", "mysql-primary", 7).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
    let p = Pipeline {
        ca,
        primary,
        secondary,
        dns,
        dir,
    };
    let opts = ConfigOpts {
        interval_ms: 2000,
        timeout_ms: 1500,
        policy: "[readiness]\nwindow = \"30s\"\nmin_attempts = 5\n",
        ..Default::default()
    };
    let cfg = p.config("e2e.toml", &opts);
    let (resolver, probes) = prepare(&cfg).unwrap();
    let probe = |b: &str| probes.iter().find(|p| p.branch.name == b).unwrap();
    let clock = Clock::start();

    let own = run_attempt(probe("primary"), &resolver, &clock, 1).await;
    assert_eq!(own.outcome, Outcome::Success, "{own:?}");
    let e2e = run_attempt(
        &probe("primary").through_stable_name(),
        &resolver,
        &clock,
        1,
    )
    .await;
    assert_eq!(e2e.outcome, Outcome::Success, "{e2e:?}");
    assert_eq!(e2e.answers[0].name, format!("{stable}."), "{e2e:?}");
    assert_eq!(e2e.answers[0].rtype, "CNAME", "{e2e:?}");
    assert_eq!(
        e2e.address.as_deref(),
        Some(p.primary.addr().to_string().as_str())
    );
    assert!(e2e.tls_verified, "{e2e:?}");
    // Two rows, each with its own marker: the end-to-end write never touches the branch's.
    let rows: Vec<(String, String)> = p
        .primary
        .root_query("SELECT branch, marker FROM readyprobe.canary ORDER BY branch")
        .await;
    assert_eq!(
        rows,
        [
            ("primary".to_string(), own.marker.clone()),
            ("~stable_name".to_string(), e2e.marker.clone()),
        ]
    );

    // The failover record now names the secondary, whose certificate lacks the stable name.
    p.dns.set_cname("mysql", "mysql-secondary", 7).await;
    let e2e = run_attempt(
        &probe("secondary").through_stable_name(),
        &resolver,
        &clock,
        2,
    )
    .await;
    match &e2e.outcome {
        Outcome::Failure { step, class, .. } => {
            assert_eq!(
                (*step, *class),
                (Step::Tls, FailureClass::TlsNameMismatch),
                "{e2e:?}"
            )
        }
        Outcome::Success => panic!("a certificate without the stable name passed: {e2e:?}"),
    }
    // The secondary's own attempt is unaffected: its certificate names its endpoint.
    let own = run_attempt(probe("secondary"), &resolver, &clock, 1).await;
    assert_eq!(own.outcome, Outcome::Success, "{own:?}");
}

/// `run` with `end_to_end`: each round's attempt through the stable name is in its record and
/// in `StableNameSuccess`; a dead target fails it (connect, `tcp_refused`) next to the unknown
/// target's class; no branch's attempts see any of it. A branch endpoint that is a CNAME to the
/// stable name fails its branch's attempts with `dns_stable_name`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_records_and_publishes_the_end_to_end_attempt() {
    let l = listener(PRIMARY, 0).await;
    let dns = zone().await;
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let cfg = ConfigBuilder::new(dir.path(), "orders-queue", &dns.fqdn("mq"))
        .nameserver(dns.addr())
        .set("dns", "timeout", "500ms")
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(l.port))
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("publish", "interval", "1s")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&evidence))
        .set("stable_name_probe", "enabled", true)
        .set("stable_name_probe", "interval", "200ms")
        .set("stable_name_probe", "end_to_end", true)
        .branch("primary", "PRIMARY", &dns.fqdn("mq-a"), None)
        .branch("secondary", "SECONDARY", &dns.fqdn("mq-b"), None)
        .write(&dir.path().join("c.toml"));
    let cfg = readyprobe::config::load(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let run = Running::start(cfg, None);
    let wait = Duration::from_secs(15);
    let e2e_result = |want: &'static str| newest(move |r| r["end_to_end"]["result"] == want);

    let ev = wait_evidence(&evidence, wait, e2e_result("success")).await;
    let r = last_round(&ev).unwrap();
    assert_eq!(r["selected"], "primary", "{r}");
    let e2e = &r["end_to_end"];
    assert_eq!(e2e["address"], format!("127.0.0.1:{}", l.port), "{r}");
    assert!(
        e2e["finished_at"].as_i64() >= e2e["started_at"].as_i64(),
        "{r}"
    );
    wait_datum(&run.emf, "StableNameSuccess", 1.0).await;

    // A dead target: the answer matches no branch and nothing listens there. (The attempt
    // resolves the name itself: in the round the flip lands between, it already fails while
    // the round's answer still selects the primary.)
    dns.set_a("mq", ELSEWHERE, 7).await;
    let dead_round =
        newest(|r| r["unknown_target"] == true && r["end_to_end"]["result"] == "failure");
    let ev = wait_evidence(&evidence, wait, dead_round).await;
    let r = last_round(&ev).unwrap();
    assert_eq!(r["unknown_target"], true, "{r}");
    assert_eq!(r["class"], "stable_name_unknown_target", "{r}");
    let e2e = &r["end_to_end"];
    assert_eq!(e2e["step"], "connect", "{r}");
    assert_eq!(e2e["class"], "tcp_refused", "{r}");
    let dead = format!("127.0.0.9:{}", l.port);
    assert!(e2e["message"].as_str().unwrap().contains(&dead), "{r}");
    wait_datum(&run.emf, "StableNameSuccess", 0.0).await;
    wait_datum(&run.emf, "SelectedBranch", 0.0).await;

    // A branch endpoint that is a CNAME to the stable name: its branch's attempts fail.
    dns.set_cname("mq-b", "mq", 5).await;
    let ev = wait_evidence(&evidence, wait, |ev| {
        ev.iter()
            .any(|v| v["kind"] == "attempt" && v["class"] == "dns_stable_name")
    })
    .await;
    let circular: Vec<&Value> = ev
        .iter()
        .filter(|v| v["kind"] == "attempt" && v["class"] == "dns_stable_name")
        .collect();
    assert!(
        circular
            .iter()
            .all(|a| a["branch"] == "secondary" && a["step"] == "resolve")
    );
    let summary = run.stop().await;

    // Evidence only: every attempt record is a branch's; the primary's never went anywhere
    // but its own address and never failed while the end-to-end attempts did.
    let ev = read_evidence(&evidence);
    let attempts: Vec<&Value> = ev.iter().filter(|v| v["kind"] == "attempt").collect();
    assert!(
        attempts
            .iter()
            .all(|a| a["branch"] == "primary" || a["branch"] == "secondary")
    );
    let primary: Vec<&&Value> = attempts
        .iter()
        .filter(|a| a["branch"] == "primary")
        .collect();
    assert!(primary.len() >= 5, "{} primary attempts", primary.len());
    assert!(
        primary
            .iter()
            .all(|a| a["result"] == "success" && a["address"] == format!("127.0.0.1:{}", l.port)),
        "a primary attempt failed or went elsewhere"
    );
    let counted: u64 = summary.attempts.values().sum();
    assert_eq!(counted, attempts.len() as u64, "{:?}", summary.attempts);
}

/// A `[[service]]` of the `tcp` kind: primary on `port` at 127.0.0.1, secondary at 127.0.0.2.
fn reload_service(name: &str, port: u16) -> String {
    format!(
        r#"
[[service]]
name = "{name}"
stable_name = "{name}.{ZONE}"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{name}-a.{ZONE}"
port = {port}
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "{name}-b.{ZONE}"
port = {port}
"#
    )
}

/// Replace the config file in one step and read it as a SIGHUP does.
fn reload_config(
    path: &Path,
    dns: &DnsServer,
    stable: (bool, bool),
    services: &str,
) -> Result<readyprobe::config::Config, readyprobe::config::ConfigError> {
    let dir = path.parent().unwrap();
    let evidence = dir.join("evidence.jsonl");
    let header = fleet_header("it", dir, &evidence, dns.addr(), ("Reload", "1s"), "tcp");
    let (enabled, end_to_end) = stable;
    let text = format!(
        "{header}\n[stable_name_probe]\nenabled = {enabled}\ninterval = \"200ms\"\nend_to_end = {end_to_end}\n{services}"
    );
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    readyprobe::config::load(path)
}

/// Records of `kind` for `service` in `ev`.
fn records<'a>(ev: &'a [Value], kind: &str, service: &str) -> Vec<&'a Value> {
    ev.iter()
        .filter(|v| v["kind"] == kind && v["service"] == service)
        .collect()
}

/// The position of the `n`th (from 0) `reload` record, once it is there.
fn reload_at(ev: &[Value], n: usize) -> Option<usize> {
    ev.iter()
        .enumerate()
        .filter(|(_, v)| v["kind"] == "reload")
        .nth(n)
        .map(|(i, _)| i)
}

/// Wait for the `n`th reload record and check it applied.
async fn applied(evidence: &Path, n: usize) {
    let ev = wait_evidence(evidence, Duration::from_secs(30), |ev| {
        reload_at(ev, n).is_some()
    })
    .await;
    let r = &ev[reload_at(&ev, n).unwrap()];
    assert_eq!(r["applied"], true, "{r}");
}

/// Reads of the config, as SIGHUPs send them.
type Reloads =
    tokio::sync::mpsc::Sender<Result<readyprobe::config::Config, readyprobe::config::ConfigError>>;

/// `run` in this process on `cfg`, its EMF output into `emf`: configs sent on the first value
/// are taken as SIGHUPs take them, the second stops it.
fn run_reloadable(
    cfg: readyprobe::config::Config,
    emf: &EmfBuffer,
) -> (
    Reloads,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<readyprobe::runner::RunSummary, readyprobe::runner::RunError>>,
) {
    use readyprobe::runner::{RunOptions, run_with_reloads};
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
        "test"
    };
    let opts = RunOptions {
        duration: None,
        grace: Duration::from_secs(1),
        emf_out: Some(emf.clone()),
        heartbeat: None,
    };
    let run = tokio::spawn(run_with_reloads(cfg, opts, stop, Some(rx)));
    (tx, stop_tx, run)
}

/// Ten stable-name intervals: the wait before counting what a loop did.
const TEN_ROUNDS: Duration = Duration::from_secs(2);

/// The `metric` datums of `service` in the EMF output timestamped after `after_ms`.
fn datums_after(emf: &EmfBuffer, metric: &str, service: &str, after_ms: i64) -> usize {
    emf.lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get(metric).is_some() && v["Service"] == service)
        .filter(|v| v["_aws"]["Timestamp"].as_i64().unwrap_or(0) > after_ms)
        .count()
}

/// After the reload that added beta and turned end-to-end on: at least three rounds of each
/// service in `after` (the evidence from that reload on) carry a successful end-to-end attempt.
fn assert_both_loops_run_end_to_end(after: &[Value]) {
    let beta_rounds = records(after, "stable_name", "beta");
    assert!(
        beta_rounds.len() >= 3,
        "beta: {} rounds after the reload",
        beta_rounds.len()
    );
    let with_e2e = |rs: &[&Value]| {
        rs.iter()
            .filter(|r| r["end_to_end"]["result"] == "success")
            .count()
    };
    assert!(with_e2e(&beta_rounds) >= 3, "{beta_rounds:?}");
    assert!(with_e2e(&records(after, "stable_name", "alpha")) >= 3);
}

/// Reloads manage stable-name loops as they do branch loops: an added service gets one, a
/// changed `[stable_name_probe]` (end-to-end turned on) restarts an unchanged service's, a
/// removed service's stops, and turning the probe off stops its rounds and its datums while
/// the service goes on. Each stable name points at an address of its own where only its
/// end-to-end attempts connect, so a loop that runs on unseen (its rounds dropped) is caught
/// by its connections. Counts are taken after waits of ten intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_start_restart_and_stop_stable_name_loops() {
    let l = listener(PRIMARY, 0).await;
    let own = [Ipv4Addr::new(127, 0, 0, 3), Ipv4Addr::new(127, 0, 0, 4)];
    let (la, lb) = (
        listener(own[0], l.port).await,
        listener(own[1], l.port).await,
    );
    let dns = DnsServer::start(ZONE).await;
    for (s, ip) in ["alpha", "beta"].into_iter().zip(own) {
        dns.set_a(&format!("{s}-a"), PRIMARY, 5).await;
        dns.set_a(&format!("{s}-b"), SECONDARY, 5).await;
        dns.set_a(s, ip, 7).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let (alpha, beta) = (
        reload_service("alpha", l.port),
        reload_service("beta", l.port),
    );
    let emf = EmfBuffer::new();
    let first = reload_config(&path, &dns, (true, false), &alpha).unwrap();
    let (tx, stop_tx, run) = run_reloadable(first, &emf);
    let ev = wait_evidence(&evidence, Duration::from_secs(30), |ev| {
        records(ev, "stable_name", "alpha").len() >= 3
    })
    .await;
    let rounds = records(&ev, "stable_name", "alpha");
    assert!(rounds.iter().all(|r| r.get("end_to_end").is_none()));
    assert!(rounds.iter().all(|r| r["unknown_target"] == true));
    assert_eq!(la.accepted(), 0, "an end-to-end attempt while it is off");

    // Add beta and turn end-to-end on: beta's rounds start, alpha's (unchanged) loop restarts
    // with end-to-end attempts.
    let both = format!("{alpha}{beta}");
    tx.send(reload_config(&path, &dns, (true, true), &both))
        .await
        .unwrap();
    applied(&evidence, 0).await;
    let ev = wait_evidence(&evidence, TEN_ROUNDS * 10, |ev| {
        let after = &ev[reload_at(ev, 0).unwrap()..];
        let e2e = |branch| {
            records(after, "stable_name", branch)
                .iter()
                .filter(|r| r["end_to_end"]["result"] == "success")
                .count()
        };
        e2e("alpha") >= 3 && e2e("beta") >= 3 && la.accepted() >= 3 && lb.accepted() >= 3
    })
    .await;
    let after = &ev[reload_at(&ev, 0).unwrap()..];
    assert_both_loops_run_end_to_end(after);
    assert!(la.accepted() >= 3 && lb.accepted() >= 3);

    // Remove alpha: its loop stops.
    tx.send(reload_config(&path, &dns, (true, true), &beta))
        .await
        .unwrap();
    applied(&evidence, 1).await;
    let before = la.accepted();
    tokio::time::sleep(TEN_ROUNDS).await;
    let ev = read_evidence(&evidence);
    let after = &ev[reload_at(&ev, 1).unwrap()..];
    assert!(
        records(after, "stable_name", "alpha").len() <= 1,
        "alpha's rounds go on"
    );
    let more = la.accepted() - before;
    assert!(
        more <= 1,
        "alpha's loop runs on: {more} more end-to-end attempts"
    );
    assert!(records(after, "stable_name", "beta").len() >= 3);

    // Turn the probe off: beta's loop and stable-name datums stop; its attempts go on.
    tx.send(reload_config(&path, &dns, (false, true), &beta))
        .await
        .unwrap();
    applied(&evidence, 2).await;
    let before = lb.accepted();
    tokio::time::sleep(TEN_ROUNDS + Duration::from_secs(1)).await;
    let more = lb.accepted() - before;
    assert!(
        more <= 1,
        "beta's loop runs on: {more} more end-to-end attempts"
    );
    let ev = read_evidence(&evidence);
    let at = reload_at(&ev, 2).unwrap();
    let after = &ev[at..];
    let rounds = records(after, "stable_name", "beta").len();
    assert!(
        rounds <= 1,
        "beta: {rounds} rounds after the probe was turned off"
    );
    assert!(records(after, "attempt", "beta").len() >= 5);
    // Datums of ticks at least one publish interval after the reload.
    let since = ev[at]["at_ms"].as_i64().unwrap() + 1100;
    assert!(datums_after(&emf, "Heartbeat", "beta", since) >= 1);
    assert_eq!(datums_after(&emf, "SelectedBranch", "beta", since), 0);
    assert_eq!(datums_after(&emf, "StableNameSuccess", "beta", since), 0);
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("run did not stop")
        .expect("run task panicked")
        .expect("run failed");
}
