//! SIGHUP reloads: the built binary, `tcp` services on loopback listeners, real DNS, the real
//! signal. A service removed stops being probed and published, one added starts, an unchanged
//! one runs on untouched (its loops keep their sequence numbers: no schedule reset; no
//! transition), a changed branch restarts its loop and keeps its state; an invalid config or a
//! setting that needs a restart is refused and the old services run on. In process, unavailable
//! inputs at a reload. A corrupt control document stops only its own service. A reload waiting
//! on a dead S3 store (a proxy in front of the emulator) stalls no other service nor a stop, and
//! a removed service's attempt in flight is recorded as abandoned (and its state saved once);
//! adding many such services applies within the reload's own bound. A CA bundle replaced under
//! an unchanged config takes effect at SIGHUP; control characters of a path never reach stderr.
//! A reload turns adaptive probing (`probe.suspect_interval`) on and off again. Reloads never
//! erase a failing branch's evidence; a reload that would leave no service probed is refused; a
//! SIGHUP in the first milliseconds of `run` does not end it; a hung store does not hold the
//! final publish of a stop.

use crate::support::dns::DnsServer;
use crate::support::fixture::{fleet_header, read_evidence, wait_evidence};
use crate::support::run::run_command;
pub(crate) use crate::support::run::{DEADLINE, signal, spawn_graced, stop, write_config};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;

const ZONE: &str = "reload.internal.example";

/// A TCP listener on loopback that accepts and closes; aborted on drop.
pub(crate) struct Listener {
    pub(crate) port: u16,
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
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    Listener { port, task }
}

/// One `[[service]]` of the `tcp` kind with a primary and a secondary branch.
pub(crate) fn service(name: &str, primary: u16, secondary: u16) -> String {
    format!(
        r#"
[[service]]
name = "{name}"
stable_name = "{name}.{ZONE}"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{name}-primary.{ZONE}"
port = {primary}
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "{name}-secondary.{ZONE}"
port = {secondary}
"#
    )
}

/// The shared part of the config, with `publish_interval` and `extra` (services, or an error).
pub(crate) fn config(dir: &Path, dns: &DnsServer, publish_interval: &str, extra: &str) -> String {
    let evidence = dir.join("evidence.jsonl");
    let shared = ("Reload", publish_interval);
    let header = fleet_header("reload-test", dir, &evidence, dns.addr(), shared, "tcp");
    format!("{header}{extra}")
}

/// Records of `kind` for `service` (and `branch`, when given).
pub(crate) fn of<'a>(
    ev: &'a [Value],
    kind: &str,
    service: &str,
    branch: Option<&str>,
) -> Vec<&'a Value> {
    ev.iter()
        .filter(|v| v["kind"] == kind && v["service"] == service)
        .filter(|v| branch.is_none_or(|b| v["branch"] == b))
        .collect()
}

pub(crate) fn reached_ready(ev: &[Value], service: &str, branch: &str) -> bool {
    of(ev, "transition", service, Some(branch))
        .iter()
        .any(|t| t["transition"]["to"] == "ready")
}

/// The position in the file of the `n`th (from 0) `reload` record.
pub(crate) fn reload_at(ev: &[Value], n: usize) -> Option<usize> {
    ev.iter()
        .enumerate()
        .filter(|(_, v)| v["kind"] == "reload")
        .nth(n)
        .map(|(i, _)| i)
}

pub(crate) fn seqs(ev: &[Value], service: &str, branch: &str) -> Vec<u64> {
    of(ev, "attempt", service, Some(branch))
        .iter()
        .map(|a| a["seq"].as_u64().unwrap())
        .collect()
}

/// The services of the EMF `Heartbeat` datums timestamped after `after_ms`.
fn heartbeats_after(stdout: &Path, after_ms: i64) -> Vec<String> {
    let text = std::fs::read_to_string(stdout).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("Heartbeat").is_some())
        .filter(|v| v["_aws"]["Timestamp"].as_i64().unwrap() > after_ms)
        .map(|v| v["Service"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) struct Fleet {
    pub(crate) dns: DnsServer,
    /// Keeps the listeners open.
    pub(crate) ports: Vec<Listener>,
}

/// A DNS zone with `<service>-{primary,secondary}` for each service, and a listener per branch.
pub(crate) async fn fleet(services: &[&str]) -> Fleet {
    let dns = DnsServer::start(ZONE).await;
    let mut ports = Vec::new();
    for s in services {
        for b in ["primary", "secondary"] {
            dns.set_a(&format!("{s}-{b}"), Ipv4Addr::LOCALHOST, 5).await;
            ports.push(listener().await);
        }
    }
    Fleet { dns, ports }
}

fn spawn(cfg: &Path, stdout: &Path) -> tokio::process::Child {
    spawn_graced(cfg, stdout, "1s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_removes_and_changes_services_and_refuses_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta", "delta", "gamma"]).await;
    let port = |i: usize| f.ports[i].port;
    let spare = listener().await;
    let path = dir.path().join("reload.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let before = [
        service("alpha", port(0), port(1)),
        service("beta", port(2), port(3)),
        service("delta", port(4), port(5)),
    ]
    .concat();
    write_config(&path, &config(dir.path(), &f.dns, "1s", &before));
    let mut child = spawn(&path, &stdout);

    // 1. Every branch of the three services is ready.
    wait_evidence(&evidence, DEADLINE, |ev| {
        ["alpha", "beta", "delta"]
            .iter()
            .all(|s| reached_ready(ev, s, "primary") && reached_ready(ev, s, "secondary"))
    })
    .await;

    // 2. alpha removed, beta unchanged, delta's secondary on another port, gamma added.
    let after = [
        service("beta", port(2), port(3)),
        service("delta", port(4), spare.port),
        service("gamma", port(6), port(7)),
    ]
    .concat();
    write_config(&path, &config(dir.path(), &f.dns, "1s", &after));
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        let Some(r) = reload_at(ev, 0) else {
            return false;
        };
        let later = &ev[r..];
        reached_ready(later, "gamma", "primary")
            && reached_ready(later, "gamma", "secondary")
            && of(later, "attempt", "beta", Some("primary")).len() >= 10
            && of(later, "attempt", "delta", Some("secondary")).len() >= 10
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    let reload = &ev[r];
    assert_eq!(reload["applied"], true, "{reload}");
    assert_eq!(reload["added"], serde_json::json!(["gamma"]), "{reload}");
    assert_eq!(reload["removed"], serde_json::json!(["alpha"]), "{reload}");
    assert_eq!(reload["changed"], serde_json::json!(["delta"]), "{reload}");
    let (before_ev, later) = (&ev[..r], &ev[r..]);
    // alpha: nothing after the reload (an attempt in flight was dropped).
    assert!(of(later, "attempt", "alpha", None).is_empty());
    let reload_ms = reload["at_ms"].as_i64().unwrap();
    // gamma started as at start-up: a start record (written as the reload applies, before the
    // reload record), then its attempts.
    assert_eq!(of(&ev, "start", "gamma", None).len(), 1);
    // beta untouched: no transition, and each loop's sequence goes on (no schedule reset).
    assert!(of(later, "transition", "beta", None).is_empty());
    for b in ["primary", "secondary"] {
        let all = seqs(&ev, "beta", b);
        assert!(
            all.windows(2).all(|w| w[1] == w[0] + 1),
            "beta/{b}: {all:?}"
        );
        assert!(seqs(later, "beta", b)[0] > 1, "beta/{b} restarted");
    }
    // delta: primary untouched; secondary restarted (sequence from 1 again) and kept its state.
    assert!(of(later, "transition", "delta", None).is_empty());
    assert!(seqs(later, "delta", "primary")[0] > 1);
    let restarted = seqs(later, "delta", "secondary");
    let from = restarted
        .iter()
        .position(|s| *s == 1)
        .expect("delta/secondary restarted");
    let old_max = *seqs(before_ev, "delta", "secondary").last().unwrap();
    assert!(restarted[..from].iter().all(|s| *s <= old_max + 1));
    let new_ports: Vec<_> = of(later, "attempt", "delta", Some("secondary"))[from..]
        .iter()
        .map(|a| a["address"].as_str().unwrap_or_default().to_string())
        .collect();
    let spare_port = format!(":{}", spare.port);
    assert!(
        new_ports.iter().all(|a| a.ends_with(&spare_port)),
        "{new_ports:?}"
    );

    // Published: gamma, beta and delta after the reload, alpha no more.
    let published = heartbeats_after(&stdout, reload_ms);
    for s in ["beta", "delta", "gamma"] {
        assert!(published.iter().any(|p| p == s), "{s}: {published:?}");
    }
    assert!(!published.iter().any(|p| p == "alpha"), "{published:?}");

    // 3. An invalid config, then a setting that needs a restart: both refused, old ones run on.
    refused_reloads(&child, &path, &f.dns, &after).await;
    let log = std::fs::read_to_string(stdout.with_extension("log")).unwrap();
    assert!(log.contains("reload refused"), "{log}");
    assert!(log.contains("reload applied"), "{log}");

    signal(&child, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    let ev = read_evidence(&evidence);
    assert_eq!(ev.last().unwrap()["kind"], "stop");
}

/// Send an invalid config, then one that changes a setting needing a restart: both are refused
/// (named in the `reload` record) and the running services go on.
async fn refused_reloads(
    child: &tokio::process::Child,
    path: &Path,
    dns: &DnsServer,
    services: &str,
) {
    let dir = path.parent().unwrap();
    let evidence = dir.join("evidence.jsonl");
    let bad = format!("{services}\nno_such_key = 1\n");
    write_config(path, &config(dir, dns, "1s", &bad));
    signal(child, libc::SIGHUP);
    wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 1).is_some()).await;
    write_config(path, &config(dir, dns, "2s", services));
    signal(child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 2).is_some_and(|r| {
            ["beta", "delta", "gamma"]
                .iter()
                .all(|s| of(&ev[r..], "attempt", s, Some("primary")).len() >= 5)
        })
    })
    .await;
    let (invalid, restart) = (
        &ev[reload_at(&ev, 1).unwrap()],
        &ev[reload_at(&ev, 2).unwrap()],
    );
    assert_eq!(invalid["applied"], false);
    let problems = invalid["problems"].to_string();
    assert!(problems.contains("no_such_key"), "{problems}");
    assert!(
        problems.contains("reload.toml:"),
        "names file and line: {problems}"
    );
    assert_eq!(restart["applied"], false);
    assert!(
        restart["problems"].to_string().contains("publish.interval"),
        "{restart}"
    );
}

/// Two services, one with a corrupt control document: that one is reported unavailable (its
/// document left as it is), the other runs; the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_control_document_stops_only_its_service() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    let path = dir.path().join("corrupt.toml");
    let services = [
        service("alpha", f.ports[0].port, f.ports[1].port),
        service("beta", f.ports[2].port, f.ports[3].port),
    ]
    .concat();
    write_config(&path, &config(dir.path(), &f.dns, "1s", &services));
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let corrupt = state.join("control-beta.json");
    std::fs::write(&corrupt, b"{\"version\": 2, \"service\": ").unwrap();
    let out = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(["run", "--duration", "4s", "--grace", "1s", "--config"])
            .arg(&path)
            .output(),
    )
    .await
    .expect("run ends")
    .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("this service cannot start"), "{log}");
    let ev = read_evidence(&dir.path().join("evidence.jsonl"));
    let down = of(&ev, "service_unavailable", "beta", None);
    assert_eq!(down.len(), 1, "{ev:?}");
    assert!(
        down[0]["problems"]
            .to_string()
            .contains("control-beta.json"),
        "{}",
        down[0]
    );
    assert!(of(&ev, "attempt", "beta", None).is_empty());
    assert!(!of(&ev, "attempt", "alpha", Some("primary")).is_empty());
    assert_eq!(
        std::fs::read(&corrupt).unwrap(),
        b"{\"version\": 2, \"service\": ",
        "the corrupt document is never overwritten"
    );
    let unavailable: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("ServiceUnavailable").is_some())
        .collect();
    assert!(
        !unavailable.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(unavailable.iter().all(|v| v["Service"] == "beta"));
}

/// Polls `emf` (up to [`DEADLINE`]) for a `ServiceUnavailable` datum of `service`.
async fn wait_service_unavailable_datum(emf: &readyprobe::sink::emf::EmfBuffer, service: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let quoted = format!("\"{service}\"");
    while !emf
        .lines()
        .iter()
        .any(|l| l.contains("\"ServiceUnavailable\"") && l.contains(&quoted))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ServiceUnavailable datum for {service}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// In process, configs handed to `run_with_reloads` as the SIGHUP handler does: a changed
/// service whose new CA bundle is missing refuses the reload (the service runs on as it was);
/// an added one with a missing CA bundle is reported unavailable and the reload applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_inputs_refuse_a_changed_service_and_report_an_added_one() {
    use readyprobe::runner::{RunOptions, run_with_reloads};
    use readyprobe::sink::emf::EmfBuffer;
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    let path = dir.path().join("inproc.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let alpha = service("alpha", f.ports[0].port, f.ports[1].port);
    let missing_ca = format!(
        "probe = {{ tls = {{ ssl_mode = \"verify_ca\", ssl_ca = {:?} }} }}\n",
        dir.path().join("no-such-ca.pem")
    );
    // `probe = ...` goes right after the service's `stable_name`.
    let with_missing_ca = |svc: &str| {
        svc.replacen(
            "\n[[service.branch]]",
            &format!("\n{missing_ca}[[service.branch]]"),
            1,
        )
    };
    let load = |services: &str| {
        write_config(&path, &config(dir.path(), &f.dns, "1s", services));
        readyprobe::config::load(&path)
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
        "test"
    };
    let emf = EmfBuffer::new();
    let opts = RunOptions {
        duration: None,
        grace: Duration::from_secs(1),
        emf_out: Some(emf.clone()),
        heartbeat: None,
    };
    let run = tokio::spawn(run_with_reloads(
        load(&alpha).unwrap(),
        opts,
        stop,
        Some(rx),
    ));
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary")).len() >= 3
    })
    .await;

    tx.send(load(&with_missing_ca(&alpha))).await.unwrap();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0)
            .is_some_and(|r| of(&ev[r..], "attempt", "alpha", Some("primary")).len() >= 3)
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    assert_eq!(ev[r]["applied"], false, "{}", ev[r]);
    assert!(
        ev[r]["problems"].to_string().contains("no-such-ca.pem"),
        "{}",
        ev[r]
    );
    // alpha runs on as it was: its loop's sequence goes on.
    assert!(seqs(&ev[r..], "alpha", "primary")[0] > 1);

    let beta = with_missing_ca(&service("beta", f.ports[2].port, f.ports[3].port));
    tx.send(load(&format!("{alpha}{beta}"))).await.unwrap();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 1).is_some()).await;
    let reload = &ev[reload_at(&ev, 1).unwrap()];
    assert_eq!(reload["applied"], true, "{reload}");
    assert_eq!(
        reload["unavailable"],
        serde_json::json!(["beta"]),
        "{reload}"
    );
    assert_eq!(of(&ev, "service_unavailable", "beta", None).len(), 1);
    // Its ServiceUnavailable datum comes with the next tick.
    wait_service_unavailable_datum(&emf, "beta").await;

    // alpha removed and beta still unavailable: no service would be probed (at start, this
    // config exits 78), so the reload is refused and alpha runs on.
    tx.send(load(&beta)).await.unwrap();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 2)
            .is_some_and(|r| of(&ev[r..], "attempt", "alpha", Some("primary")).len() >= 3)
    })
    .await;
    let reload = &ev[reload_at(&ev, 2).unwrap()];
    assert_eq!(reload["applied"], false, "{reload}");
    assert!(
        reload["problems"].to_string().contains("no service probed"),
        "{reload}"
    );
    let _ = stop_tx.send(());
    let s = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
    // Only alpha ran (one service: keyed by branch name).
    let keys: Vec<&String> = s.final_states.keys().collect();
    assert_eq!(keys, ["primary", "secondary"]);
}

/// An HTTP proxy in front of the emulator's S3 that forwards every request except those whose
/// path contains `hang`, which it accepts and never answers: a store that is dead for one
/// service's control document only. Aborted on drop.
struct HangingS3 {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HangingS3 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn hanging_s3(hang: &'static str) -> HangingS3 {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    let upstream = crate::support::cloudwatch::endpoint();
    let authority = upstream.trim_start_matches("http://").to_string();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let authority = authority.clone();
            tokio::spawn(async move {
                let forward = move |req: hyper::Request<hyper::body::Incoming>| {
                    let authority = authority.clone();
                    async move {
                        if req.uri().path().contains(hang) {
                            std::future::pending::<()>().await;
                        }
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let up = tokio::net::TcpStream::connect(&authority).await.unwrap();
                        let (mut send, conn) =
                            hyper::client::conn::http1::handshake(TokioIo::new(up))
                                .await
                                .unwrap();
                        tokio::spawn(conn);
                        let req = hyper::Request::from_parts(parts, Full::new(body));
                        let (parts, body) = send.send_request(req).await.unwrap().into_parts();
                        let body: Bytes = body.collect().await?.to_bytes();
                        Ok::<_, hyper::Error>(hyper::Response::from_parts(parts, Full::new(body)))
                    }
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), hyper::service::service_fn(forward))
                    .await;
            });
        }
    });
    HangingS3 { port, task }
}

/// A bucket on the emulator, or `None` (skipped; a failure under `CI=true`) without one.
async fn s3_bucket_or_skip() -> Option<String> {
    if let Err(why) = crate::support::cloudwatch::health().await {
        crate::support::skip_or_panic(&format!("S3 emulator unavailable ({why})"));
        return None;
    }
    let creds = aws_sdk_s3::config::Credentials::new("test", "test", None, None, "it");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .endpoint_url(crate::support::cloudwatch::endpoint())
        .force_path_style(true)
        .build();
    let bucket = format!("readyprobe-reload-{}", rand::random::<u32>());
    aws_sdk_s3::Client::from_conf(conf)
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    Some(bucket)
}

fn spawn_with_aws(cfg: &Path, stdout: &Path) -> tokio::process::Child {
    run_command(cfg, stdout, "1s")
        .envs([
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .spawn()
        .unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls the run's log at `log_path` (up to 5 s) until a second reload is being prepared: the
/// config that waited behind the first has been taken.
async fn wait_second_reload_prepared(log_path: &Path) {
    let preparing = || {
        let log = std::fs::read_to_string(log_path).unwrap();
        log.matches("reload: preparing services beside the run")
            .count()
    };
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    while preparing() < 2 {
        assert!(
            tokio::time::Instant::now() < end,
            "the waiting config was not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A reload adds two services whose control documents the S3 store never serves (the
/// `s3` store gives up after 10 s): meanwhile the running service goes on being probed and
/// published at its pace; a second SIGHUP waits for the reload in flight and is taken after
/// it; SIGTERM while that one waits ends the process at once with exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_waiting_on_a_dead_store_stalls_nothing_else() {
    let Some(bucket) = s3_bucket_or_skip().await else {
        return;
    };
    let proxy = hanging_s3("control-slow").await;
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "slow1", "slow2"]).await;
    let port = |i: usize| f.ports[i].port;
    let path = dir.path().join("s3.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let s3_state = format!(
        "[state]\nstore = \"s3\"\npoll_interval = \"500ms\"\n\n[state.s3]\nbucket = \"{bucket}\"\nkey_prefix = \"it/\"\nregion = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:{}\"\n",
        proxy.port
    );
    let cfg = |services: &str| {
        let text = config(dir.path(), &f.dns, "1s", services);
        let with_s3 = text.replacen("[state]\npoll_interval = \"500ms\"\n", &s3_state, 1);
        assert_ne!(with_s3, text, "the shared header's [state] table moved");
        with_s3
    };
    let alpha = service("alpha", port(0), port(1));
    write_config(&path, &cfg(&alpha));
    let mut child = spawn_with_aws(&path, &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary")).len() >= 3
    })
    .await;

    let slow = [
        service("slow1", port(2), port(3)),
        service("slow2", port(4), port(5)),
    ];
    write_config(&path, &cfg(&format!("{alpha}{}", slow.concat())));
    let n0 = of(&read_evidence(&evidence), "attempt", "alpha", None).len();
    let hup_ms = now_ms();
    signal(&child, libc::SIGHUP);
    // Attempts every 300 ms on two branches and a 1 s publish tick go on: well within 6 s,
    // where a stalled loop would write nothing for 10 s.
    let ev = wait_evidence(&evidence, Duration::from_secs(6), |ev| {
        of(ev, "attempt", "alpha", None).len() >= n0 + 12
    })
    .await;
    crate::support::wait_for(
        Duration::from_secs(10),
        "two alpha heartbeats after the HUP",
        || async {
            heartbeats_after(&stdout, hup_ms)
                .iter()
                .filter(|s| *s == "alpha")
                .count()
                >= 2
        },
    )
    .await;
    signal(&child, libc::SIGHUP);
    let beats = heartbeats_after(&stdout, hup_ms);
    assert!(
        beats.iter().filter(|s| *s == "alpha").count() >= 2,
        "alpha published meanwhile: {beats:?}"
    );
    assert!(
        reload_at(&ev, 0).is_none(),
        "the reload still waits for the dead store"
    );
    let since_hup = Duration::from_millis((now_ms() - hup_ms) as u64);
    assert!(since_hup < Duration::from_secs(9), "{since_hup:?}");
    // Once the reads give up, the reload applies with the two left out, and the config that
    // waited (the second SIGHUP) is prepared next: the stop comes while it waits in turn.
    let ev = wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 0).is_some()).await;
    let reload = &ev[reload_at(&ev, 0).unwrap()];
    assert_eq!(reload["applied"], true, "{reload}");
    assert_eq!(
        reload["unavailable"],
        serde_json::json!(["slow1", "slow2"]),
        "{reload}"
    );
    let log_path = stdout.with_extension("log");
    wait_second_reload_prepared(&log_path).await;
    let term = tokio::time::Instant::now();
    signal(&child, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("SIGTERM ends the process without waiting for the reload")
        .unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        term.elapsed() < Duration::from_secs(4),
        "{:?}",
        term.elapsed()
    );
    assert!(log.contains("a reload is in progress"), "{log}");
    let ev = read_evidence(&evidence);
    assert_eq!(ev.last().unwrap()["kind"], "stop");
    assert!(
        reload_at(&ev, 1).is_none(),
        "the second reload was still waiting"
    );
    assert!(of(&ev, "start", "slow1", None).is_empty());
}

/// A reload that removes a service while its attempt is in flight records that attempt as
/// abandoned (cause `reload`): no attempt of a stopped loop goes unaccounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_services_attempt_in_flight_is_recorded_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    // alpha's branches accept and never answer the TLS handshake: each attempt runs to its
    // 1.9 s deadline of a 2 s interval.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let alpha = service("alpha", silent_port, silent_port).replacen(
        "\n[[service.branch]]",
        "\nprobe = { interval = \"2s\", timeout = \"1900ms\", jitter = \"0s\", tls = { ssl_mode = \"required\" } }\nreadiness = { window = \"30s\" }\n[[service.branch]]",
        1,
    );
    let beta = service("beta", f.ports[2].port, f.ports[3].port);
    let path = dir.path().join("abandon.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    write_config(
        &path,
        &config(dir.path(), &f.dns, "1s", &format!("{alpha}{beta}")),
    );
    let mut child = spawn(&path, &stdout);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        !of(ev, "attempt", "alpha", Some("primary")).is_empty()
    })
    .await;
    let last = *seqs(&ev, "alpha", "primary").last().unwrap();
    // The next attempt started right after: 300 ms into its 1.9 s, the reload removes alpha.
    tokio::time::sleep(Duration::from_millis(300)).await;
    write_config(&path, &config(dir.path(), &f.dns, "1s", &beta));
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0).is_some_and(|r| of(&ev[r..], "attempt", "beta", None).len() >= 4)
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    assert_eq!(ev[r]["removed"], serde_json::json!(["alpha"]), "{}", ev[r]);
    let cut = of(&ev, "attempt_abandoned", "alpha", Some("primary"));
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["cause"], "reload", "{}", cut[0]);
    // The one after the last that finished (at least the one running when the reload was sent).
    let finished = *seqs(&ev, "alpha", "primary").last().unwrap();
    assert!(finished >= last);
    assert_eq!(cut[0]["seq"].as_u64(), Some(finished + 1), "{}", cut[0]);
    // Every alpha attempt is accounted for: finished or abandoned, seq 1 up without a gap.
    for b in ["primary", "secondary"] {
        let mut all = seqs(&ev, "alpha", b);
        all.extend(
            of(&ev, "attempt_abandoned", "alpha", Some(b))
                .iter()
                .map(|a| a["seq"].as_u64().unwrap()),
        );
        all.sort_unstable();
        assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "alpha/{b}");
    }
    stop(&mut child).await;
    hold.abort();
    // alpha's final save ran once, through the sync queue, after any sync of it in flight.
    let log = std::fs::read_to_string(stdout.with_extension("log")).unwrap();
    assert_eq!(
        log.matches("saved the state of a service a reload removed")
            .count(),
        1,
        "{log}"
    );
}

/// A TLS listener on loopback serving `cert` (handshakes only); aborted on drop.
async fn tls_listener(cert: &crate::support::tls::ServerCert) -> Listener {
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(s).await;
            });
        }
    });
    Listener { port, task }
}

/// `svc` (one of [`service`]) with TLS checked against the endpoint name and the CA at `ca`.
fn with_tls(svc: &str, ca: &str) -> String {
    svc.replacen(
        "\n[[service.branch]]",
        &format!(
            "\nprobe = {{ tls = {{ ssl_mode = \"verify_identity\", ssl_ca = \"{ca}\" }} }}\n[[service.branch]]"
        ),
        1,
    )
}

/// An operator renews the CA bundle at the same path and sends SIGHUP with the config text
/// unchanged: the service's inputs are read again, it counts as changed, and its attempts now
/// verify against the new CA (here one that did not sign the server: `tls_untrusted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_a_replaced_ca_bundle_of_an_unchanged_service() {
    use crate::support::tls::TestCa;
    let dir = tempfile::tempdir().unwrap();
    let dns = DnsServer::start(ZONE).await;
    let names = [
        format!("alpha-primary.{ZONE}"),
        format!("alpha-secondary.{ZONE}"),
    ];
    for b in ["primary", "secondary"] {
        dns.set_a(&format!("alpha-{b}"), Ipv4Addr::LOCALHOST, 5)
            .await;
    }
    let ca = TestCa::new();
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let cert = ca.server_cert(&names_ref, &[]);
    let (p, s) = (tls_listener(&cert).await, tls_listener(&cert).await);
    let bundle = dir.path().join("ca-bundle.pem");
    std::fs::write(&bundle, ca.ca_pem()).unwrap();
    let alpha = with_tls(&service("alpha", p.port, s.port), bundle.to_str().unwrap());
    let path = dir.path().join("ca.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    write_config(&path, &config(dir.path(), &dns, "1s", &alpha));
    let mut child = spawn(&path, &stdout);
    let succeeded = |a: &Value| a["result"] == "success";
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary"))
            .iter()
            .filter(|a| succeeded(a))
            .count()
            >= 3
    })
    .await;

    // The bundle now holds another CA; the config file is not touched.
    let other = TestCa::named("renewed");
    std::fs::write(&bundle, other.ca_pem()).unwrap();
    signal(&child, libc::SIGHUP);
    let untrusted = |a: &Value| a["class"] == "tls_untrusted";
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0).is_some_and(|r| {
            ["primary", "secondary"].iter().all(|b| {
                of(&ev[r..], "attempt", "alpha", Some(b))
                    .iter()
                    .filter(|a| untrusted(a))
                    .count()
                    >= 3
            })
        })
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    assert_eq!(ev[r]["applied"], true, "{}", ev[r]);
    assert_eq!(ev[r]["changed"], serde_json::json!(["alpha"]), "{}", ev[r]);
    // Every attempt of a restarted loop (sequence from 1 again) failed as untrusted.
    for b in ["primary", "secondary"] {
        let later = of(&ev[r..], "attempt", "alpha", Some(b));
        let from = later
            .iter()
            .position(|a| a["seq"] == 1)
            .unwrap_or_else(|| panic!("alpha/{b} restarted: {later:?}"));
        assert!(
            later[from..].iter().all(|a| untrusted(a)),
            "{:?}",
            &later[from..]
        );
    }
    // The bundle gone: the reload is refused, naming it, and the service runs on as it was.
    std::fs::remove_file(&bundle).unwrap();
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 1)
            .is_some_and(|r| of(&ev[r..], "attempt", "alpha", Some("primary")).len() >= 3)
    })
    .await;
    let r = reload_at(&ev, 1).unwrap();
    assert_eq!(ev[r]["applied"], false, "{}", ev[r]);
    assert!(
        ev[r]["problems"].to_string().contains("ca-bundle.pem"),
        "{}",
        ev[r]
    );
    assert!(seqs(&ev[r..], "alpha", "primary")[0] > 1, "alpha restarted");
    let log = std::fs::read_to_string(stdout.with_extension("log")).unwrap();
    assert!(!log.contains("BEGIN CERTIFICATE"), "{log}");
    stop(&mut child).await;
}

/// A CA path with an escape character and a right-to-left override, in a service a reload
/// changes (refused: its CA cannot be read) and then in one it adds (unavailable): the problems
/// reach stderr escaped, never raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_of_a_reloaded_path_reach_stderr_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    let alpha = service("alpha", f.ports[0].port, f.ports[1].port);
    let bad = "/nonexistent/\\u001b[31mred\\u202Eevil.pem";
    let path = dir.path().join("escape.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    write_config(&path, &config(dir.path(), &f.dns, "1s", &alpha));
    let mut child = spawn(&path, &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        !of(ev, "attempt", "alpha", Some("primary")).is_empty()
    })
    .await;
    write_config(
        &path,
        &config(dir.path(), &f.dns, "1s", &with_tls(&alpha, bad)),
    );
    signal(&child, libc::SIGHUP);
    wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 0).is_some()).await;
    let beta = with_tls(&service("beta", f.ports[2].port, f.ports[3].port), bad);
    write_config(
        &path,
        &config(dir.path(), &f.dns, "1s", &format!("{alpha}{beta}")),
    );
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 1).is_some()).await;
    assert_eq!(ev[reload_at(&ev, 0).unwrap()]["applied"], false);
    let added = &ev[reload_at(&ev, 1).unwrap()];
    assert_eq!(added["unavailable"], serde_json::json!(["beta"]), "{added}");
    stop(&mut child).await;
    let log = std::fs::read_to_string(stdout.with_extension("log")).unwrap();
    assert!(log.contains("reload refused"), "{log}");
    assert!(log.contains("this service cannot start"), "{log}");
    assert!(log.contains("evil.pem"), "{log}");
    assert!(!log.contains('\u{1b}'), "raw ESC on stderr: {log:?}");
    assert!(!log.contains('\u{202e}'), "raw U+202E on stderr: {log:?}");
}

/// A reload adds 128 services whose control documents the store never serves: read 16 at a
/// time, each giving up after its own bound, they would hold the reload (and every SIGHUP
/// after it) for a minute or more. The reload's overall bound (20 s) applies it with them left
/// unavailable, each naming the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adding_many_services_on_a_dead_store_applies_within_its_bound() {
    let Some(bucket) = s3_bucket_or_skip().await else {
        return;
    };
    let proxy = hanging_s3("control-slow").await;
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let path = dir.path().join("many.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let s3_state = format!(
        "[state]\nstore = \"s3\"\npoll_interval = \"500ms\"\n\n[state.s3]\nbucket = \"{bucket}\"\nkey_prefix = \"it/\"\nregion = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:{}\"\n",
        proxy.port
    );
    let cfg = |services: &str| {
        let text = config(dir.path(), &f.dns, "1s", services);
        text.replacen("[state]\npoll_interval = \"500ms\"\n", &s3_state, 1)
    };
    let alpha = service("alpha", f.ports[0].port, f.ports[1].port);
    write_config(&path, &cfg(&alpha));
    let mut child = spawn_with_aws(&path, &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary")).len() >= 3
    })
    .await;

    let slow: String = (0..128)
        .map(|i| service(&format!("slow{i:03}"), 1, 1))
        .collect();
    write_config(&path, &cfg(&format!("{alpha}{slow}")));
    let hup = tokio::time::Instant::now();
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, Duration::from_secs(50), |ev| {
        reload_at(ev, 0).is_some()
    })
    .await;
    let took = hup.elapsed();
    let reload = &ev[reload_at(&ev, 0).unwrap()];
    assert_eq!(reload["applied"], true, "{reload}");
    assert_eq!(reload["unavailable"].as_array().unwrap().len(), 128);
    // 8 rounds of 16 loads of several seconds each: far above 40 s without the bound.
    assert!(took < Duration::from_secs(40), "{took:?}");
    let last = of(&ev, "service_unavailable", "slow127", None);
    assert_eq!(last.len(), 1);
    let problems = last[0]["problems"].to_string();
    assert!(
        problems.contains("was not loaded within the reload's 20s"),
        "{problems}"
    );
    stop(&mut child).await;
}

/// Start gaps (ms) of `service`'s primary attempts that started after `after_ms`.
pub(crate) fn start_gaps(ev: &[Value], service: &str, after_ms: i64) -> Vec<i64> {
    let starts: Vec<i64> = of(ev, "attempt", service, Some("primary"))
        .iter()
        .map(|a| a["started_at"].as_i64().unwrap())
        .filter(|t| *t > after_ms)
        .collect();
    starts.windows(2).map(|w| w[1] - w[0]).collect()
}

/// A reload that sets `probe.suspect_interval` restarts the loops of the service at it: its
/// unready primary (a closed port) is probed every 250 ms instead of every 1 s; a reload that
/// takes it away brings back the 1 s interval (the restarted loop is not paced by the old
/// one's setting). Wide margins: a gap is fast below 625 ms, halfway between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_adaptive_probing_on_and_off() {
    use readyprobe::runner::{RunOptions, run_with_reloads};
    use readyprobe::sink::emf::EmfBuffer;
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = closed.local_addr().unwrap().port();
    drop(closed);
    let path = dir.path().join("adaptive.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let with_probe = |suspect: &str| {
        let probe = format!(
            "probe = {{ interval = \"1s\", timeout = \"800ms\", jitter = \"0s\"{suspect} }}\nreadiness = {{ window = \"10s\" }}\n"
        );
        let svc = service("alpha", refused, f.ports[1].port).replacen(
            "\n[[service.branch]]",
            &format!("\n{probe}[[service.branch]]"),
            1,
        );
        write_config(&path, &config(dir.path(), &f.dns, "1s", &svc));
        readyprobe::config::load(&path)
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
        "test"
    };
    let opts = RunOptions {
        duration: None,
        grace: Duration::from_secs(1),
        emf_out: Some(EmfBuffer::new()),
        heartbeat: None,
    };
    let run = tokio::spawn(run_with_reloads(
        with_probe("").unwrap(),
        opts,
        stop,
        Some(rx),
    ));
    let unready = |ev: &[Value]| {
        of(ev, "transition", "alpha", Some("primary"))
            .iter()
            .find(|t| t["transition"]["to"] == "unready")
            .map(|t| t["at_ms"].as_i64().unwrap())
    };
    // Off: unready, and still every second.
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        unready(ev).is_some_and(|t| start_gaps(ev, "alpha", t).len() >= 3)
    })
    .await;
    let gaps = start_gaps(&ev, "alpha", unready(&ev).unwrap());
    assert!(gaps.iter().all(|g| *g >= 625), "off: {gaps:?}");

    // On: every 250 ms while unready.
    tx.send(with_probe(", suspect_interval = \"250ms\""))
        .await
        .unwrap();
    let at = |ev: &[Value], n| ev[reload_at(ev, n).unwrap()]["at_ms"].as_i64().unwrap();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0).is_some_and(|_| start_gaps(ev, "alpha", at(ev, 0)).len() >= 8)
    })
    .await;
    assert_eq!(ev[reload_at(&ev, 0).unwrap()]["applied"], true);
    let gaps = start_gaps(&ev, "alpha", at(&ev, 0));
    let fast = gaps.iter().filter(|g| **g < 625).count();
    assert!(fast >= 4 && 2 * fast >= gaps.len(), "on: {gaps:?}");

    // Off again: every second.
    tx.send(with_probe("")).await.unwrap();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 1).is_some_and(|_| start_gaps(ev, "alpha", at(ev, 1)).len() >= 3)
    })
    .await;
    let gaps = start_gaps(&ev, "alpha", at(&ev, 1));
    assert!(gaps.iter().all(|g| *g >= 625), "off again: {gaps:?}");
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
}

/// `alpha` (one of [`service`]) with `own` (service-level keys) before its branches.
fn with_own(svc: &str, own: &str) -> String {
    svc.replacen(
        "\n[[service.branch]]",
        &format!("\n{own}\n[[service.branch]]"),
        1,
    )
}

/// A port on loopback that refuses connections (bound, then closed).
async fn refused_port() -> u16 {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    port
}

/// A reload must never make a failing branch look better than its evidence. A primary that
/// starts ready (`initial = "ready"`) has every attempt refused, and SIGHUP comes every 1.5 s
/// with a changed non-target key (the probe timeout): its window and `for` clocks are carried
/// over each reload, so it goes unready. (Reset at each reload, 8 attempts of 300 ms plus a
/// 1 s `for` never fit between two reloads, and it stayed ready for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_keep_a_failing_branchs_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let refused = refused_port().await;
    let path = dir.path().join("kept.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let write = |n: u32| {
        let own = format!(
            "readiness = {{ initial = \"ready\", window = \"5s\", min_attempts = 8 }}\nprobe = {{ timeout = \"{}ms\" }}",
            200 + n % 2 * 20
        );
        let svc = with_own(&service("alpha", refused, f.ports[1].port), &own);
        write_config(&path, &config(dir.path(), &f.dns, "1s", &svc));
    };
    write(0);
    let mut child = spawn(&path, &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        !of(ev, "start", "alpha", None).is_empty()
    })
    .await;
    let unready_at = |ev: &[Value]| {
        ev.iter().position(|v| {
            v["kind"] == "transition"
                && v["service"] == "alpha"
                && v["branch"] == "primary"
                && v["transition"]["to"] == "unready"
        })
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut n = 0;
    let ev = loop {
        n += 1;
        write(n);
        signal(&child, libc::SIGHUP);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let ev = read_evidence(&evidence);
        if unready_at(&ev).is_some() {
            break ev;
        }
        let reloads = ev.iter().filter(|v| v["kind"] == "reload").count();
        assert!(
            tokio::time::Instant::now() < deadline,
            "alpha/primary still not unready after {reloads} reloads, every attempt refused"
        );
    };
    // The reloads applied and changed alpha, and at least one came before the transition.
    let first = reload_at(&ev, 0).expect("a reload record");
    assert_eq!(ev[first]["applied"], true, "{}", ev[first]);
    assert_eq!(ev[first]["changed"], serde_json::json!(["alpha"]));
    assert!(first < unready_at(&ev).unwrap());
    stop(&mut child).await;
}

/// Whether process `pid` ignores SIGPIPE, which the Rust runtime sets up just before `main`:
/// from then on, the process runs readyprobe's own code.
fn in_main(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGPIPE - 1)) != 0)
}

/// SIGHUPs in the first milliseconds of `run` (while it parses its arguments and builds its
/// runtime, before it reads the config) do not end the process, as SIGHUP's default action
/// would: it keeps running, then stops cleanly at SIGTERM. The test starts once the Rust
/// runtime's set-up ignored SIGPIPE, which comes after the binary's `.init_array` caught SIGHUP
/// (while the loader maps the program, before that, no program can catch a signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_right_after_spawn_does_not_kill_run() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let path = dir.path().join("early.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let svc = service("alpha", f.ports[0].port, f.ports[1].port);
    write_config(&path, &config(dir.path(), &f.dns, "1s", &svc));
    let mut child = spawn(&path, &stdout);
    let pid = child.id().expect("running");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !in_main(pid) {
        assert!(std::time::Instant::now() < deadline, "never reached main");
    }
    // A SIGHUP every 100 µs for the first 20 ms of `main`.
    for _ in 0..200 {
        signal(&child, libc::SIGHUP);
        std::thread::sleep(Duration::from_micros(100));
    }
    let waited = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
    assert!(waited.is_err(), "run ended at an early SIGHUP: {waited:?}");
    wait_evidence(&evidence, DEADLINE, |ev| {
        of(ev, "attempt", "alpha", Some("primary")).len() >= 2
    })
    .await;
    stop(&mut child).await;
}

/// A stop while the store hangs (its lock file held by someone else: the final save waits for
/// the lock): the last tick's datums are published and recorded at once, not after the final
/// save gave up at the end of the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_store_does_not_hold_the_final_publish() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let path = dir.path().join("hung.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let svc = service("alpha", f.ports[0].port, f.ports[1].port);
    write_config(&path, &config(dir.path(), &f.dns, "1s", &svc));
    let mut child = spawn_graced(&path, &stdout, "12s");
    let lock_path = dir.path().join("state").join("control-alpha.lock");
    wait_evidence(&evidence, DEADLINE, |ev| {
        lock_path.exists() && ev.iter().any(|v| v["kind"] == "publish")
    })
    .await;
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    // A sync in flight may hold the lock until it is done; the next ones cannot take it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&child, libc::SIGTERM);
    let stopped = tokio::time::Instant::now();
    let final_publish = |ev: &[Value]| {
        ev.iter()
            .any(|v| v["kind"] == "publish" && v["reason"] == "final" && v["outcome"] == "sent")
    };
    let deadline = stopped + Duration::from_secs(20);
    while !final_publish(&read_evidence(&evidence)) {
        assert!(tokio::time::Instant::now() < deadline, "no final publish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = stopped.elapsed();
    // The grace is 12 s; the final save is bounded by the lock wait (5 s) at the earliest.
    assert!(
        took < Duration::from_secs(4),
        "the final publish came {took:?} after SIGTERM"
    );
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    drop(lock);
}
