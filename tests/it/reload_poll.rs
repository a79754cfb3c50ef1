//! Reloads without a signal: the built binary with `--config s3://bucket/key` against the S3
//! emulator through the real SDK (behind a loopback relay the test can cut), and with a local
//! file under `[reload] poll`. An edit is applied as a SIGHUP's reload (the same `reload`
//! record; an unchanged service keeps its readiness), an invalid edit is refused and recorded
//! with its reason, a deleted object and an unreachable endpoint are logged and the running
//! config kept; the next readable edit applies. SIGHUP reads an S3 config again too.

use crate::reload::{
    DEADLINE, config, fleet, of, reached_ready, reload_at, seqs, service, signal, stop,
};
use crate::support::fixture::wait_evidence;
use crate::support::run::run_command;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

const POLL: &str = "\n[reload]\npoll = \"1s\"\n";

/// A loopback relay to the emulator that can be cut: dropping it closes its listener and every
/// connection it carries, so the prober's next read finds the endpoint down.
struct Relay {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(upstream: SocketAddr) -> Relay {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        // Owned here: aborting the task drops the set, which aborts every connection.
        let mut conns = JoinSet::new();
        while let Ok((mut client, _)) = listener.accept().await {
            conns.spawn(async move {
                if let Ok(mut server) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    Relay { addr, task }
}

/// The emulator's S3, a fresh bucket on it, and its address; `None` (skipped, a failure under
/// `CI=true`) without an emulator.
async fn bucket_or_skip() -> Option<(aws_sdk_s3::Client, String, SocketAddr)> {
    if let Err(why) = crate::support::cloudwatch::health().await {
        crate::support::skip_or_panic(&format!("S3 emulator unavailable ({why})"));
        return None;
    }
    let endpoint = crate::support::cloudwatch::endpoint();
    let creds = aws_sdk_s3::config::Credentials::new("test", "test", None, None, "it");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .endpoint_url(&endpoint)
        .force_path_style(true)
        .build();
    let client = aws_sdk_s3::Client::from_conf(conf);
    let bucket = format!("readyprobe-cfg-{}", rand::random::<u32>());
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    let host = endpoint.trim_start_matches("http://");
    let addr = tokio::net::lookup_host(host)
        .await
        .unwrap()
        .next()
        .expect("emulator address");
    Some((client, bucket, addr))
}

async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, text: &str) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(text.as_bytes().to_vec().into())
        .send()
        .await
        .expect("put the config");
}

/// `run --config <source>`, with the emulator at `endpoint` through the SDK's default chain.
fn spawn_run(source: &str, endpoint: &str, stdout: &Path) -> tokio::process::Child {
    run_command(source, stdout, "1s")
        .envs([
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .spawn()
        .unwrap()
}

/// Poll the run's log (up to [`DEADLINE`]) until it has more than `after` lines containing all
/// of `words`; returns the number it has then.
async fn wait_log(log: &Path, words: &[&str], after: usize) -> usize {
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let n = text
            .lines()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .count();
        if n > after {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no log line with {words:?} within {DEADLINE:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reloads(ev: &[Value]) -> Vec<&Value> {
    ev.iter().filter(|v| v["kind"] == "reload").collect()
}

/// Edits of the S3 object, applied without a signal: a service added (the unchanged one keeps
/// its state: no transition), an invalid edit refused and recorded with the source, line and
/// key; the object deleted (logged, kept), then put back with a change (applied at a later
/// poll); the endpoint cut (logged, kept, probing goes on). SIGTERM then exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_config_edit_applies_without_a_signal_and_a_bad_one_keeps_the_old() {
    let Some((s3, bucket, upstream)) = bucket_or_skip().await else {
        return;
    };
    let relay = relay(upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta", "gamma"]).await;
    let port = |i: usize| f.ports[i].port;
    let key = "readyprobe/prod.toml";
    let source = format!("s3://{bucket}/{key}");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let log = stdout.with_extension("log");
    let text = |services: &str| config(dir.path(), &f.dns, "1s", &format!("{POLL}{services}"));
    let alpha = service("alpha", port(0), port(1));
    let beta = service("beta", port(2), port(3));
    put(&s3, &bucket, key, &text(&alpha)).await;
    let mut child = spawn_run(&source, &format!("http://{}", relay.addr), &stdout);
    let start = wait_evidence(&evidence, DEADLINE, |ev| {
        reached_ready(ev, "alpha", "primary") && reached_ready(ev, "alpha", "secondary")
    })
    .await;
    assert_eq!(
        of(&start, "start", "alpha", None)[0]["config"],
        source.as_str()
    );

    // 1. beta added by an edit of the object: applied, alpha untouched.
    put(&s3, &bucket, key, &text(&format!("{alpha}{beta}"))).await;
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0).is_some_and(|r| {
            reached_ready(&ev[r..], "beta", "primary")
                && of(&ev[r..], "attempt", "alpha", Some("primary")).len() >= 5
        })
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    assert_eq!(ev[r]["applied"], true, "{}", ev[r]);
    assert_eq!(ev[r]["added"], serde_json::json!(["beta"]), "{}", ev[r]);
    // alpha runs on untouched: no transition, and its loops' sequences go on (no restart).
    assert!(of(&ev[r..], "transition", "alpha", None).is_empty());
    for b in ["primary", "secondary"] {
        let all = seqs(&ev, "alpha", b);
        assert!(
            all.windows(2).all(|w| w[1] == w[0] + 1),
            "alpha/{b}: {all:?}"
        );
        assert!(seqs(&ev[r..], "alpha", b)[0] > 1, "alpha/{b} restarted");
    }
    wait_log(&log, &["config source changed", &source], 0).await;
    wait_log(&log, &["reload applied"], 0).await;

    // 2. An invalid edit: refused with its reason, named by the source's URL and line.
    let bad = text(&format!("{alpha}{beta}\nno_such_key = 1\n"));
    put(&s3, &bucket, key, &bad).await;
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 1).is_some_and(|r| {
            ["alpha", "beta"]
                .iter()
                .all(|s| of(&ev[r..], "attempt", s, Some("primary")).len() >= 5)
        })
    })
    .await;
    let refused = &ev[reload_at(&ev, 1).unwrap()];
    assert_eq!(refused["applied"], false, "{refused}");
    let problems = refused["problems"].to_string();
    assert!(problems.contains("no_such_key"), "{problems}");
    assert!(problems.contains(&format!("{source}:")), "{problems}");
    wait_log(&log, &["reload refused"], 0).await;

    // 3. The object deleted: logged, kept; probing goes on and nothing is reloaded.
    s3.delete_object()
        .bucket(&bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    wait_log(&log, &["cannot read the config source", "not_found"], 0).await;
    let before = crate::support::fixture::read_evidence(&evidence).len();
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        ev.len() > before && of(&ev[before..], "attempt", "beta", Some("primary")).len() >= 5
    })
    .await;
    assert_eq!(reloads(&ev).len(), 2, "a missing object reloads nothing");

    // 4. Put back with gamma added: read again at a later poll and applied.
    let gamma = service("gamma", port(4), port(5));
    put(&s3, &bucket, key, &text(&format!("{alpha}{beta}{gamma}"))).await;
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 2).is_some_and(|r| reached_ready(&ev[r..], "gamma", "primary"))
    })
    .await;
    let back = &ev[reload_at(&ev, 2).unwrap()];
    assert_eq!(back["applied"], true, "{back}");
    assert_eq!(back["added"], serde_json::json!(["gamma"]), "{back}");

    // 5. The endpoint cut: logged, kept, probing goes on.
    cut_endpoint(relay, &mut child, &log, &evidence, &source).await;
}

/// Cut the relay to the emulator: the failed read is logged with its class, the running
/// config kept and probing goes on (no reload); then SIGTERM exits 0.
async fn cut_endpoint(
    relay: Relay,
    child: &mut tokio::process::Child,
    log: &Path,
    evidence: &Path,
    source: &str,
) {
    drop(relay);
    wait_log(log, &["cannot read the config source", source], 1).await;
    let before = crate::support::fixture::read_evidence(evidence).len();
    let ev = wait_evidence(evidence, DEADLINE, |ev| {
        ev.len() > before
            && ["alpha", "beta", "gamma"]
                .iter()
                .all(|s| of(&ev[before..], "attempt", s, Some("primary")).len() >= 5)
    })
    .await;
    assert_eq!(reloads(&ev).len(), 3);
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.lines()
            .filter(|l| l.contains("cannot read the config source"))
            .any(|l| ["unreachable", "timeout"].iter().any(|c| l
                .contains(&format!("class=\"{c}\""))
                || l.contains(&format!("class={c}")))),
        "{text}"
    );

    signal(child, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
}

/// A local file under `[reload] poll`: an edit is applied without a signal, an invalid one
/// refused and recorded with the file and line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_local_config_applies_an_edit_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    let port = |i: usize| f.ports[i].port;
    let path = dir.path().join("polled.toml");
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let text = |services: &str| config(dir.path(), &f.dns, "1s", &format!("{POLL}{services}"));
    let alpha = service("alpha", port(0), port(1));
    crate::reload::write_config(&path, &text(&alpha));
    let source = path.to_str().unwrap();
    let mut child = spawn_run(source, "http://127.0.0.1:9", &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        reached_ready(ev, "alpha", "primary") && reached_ready(ev, "alpha", "secondary")
    })
    .await;

    let beta = service("beta", port(2), port(3));
    crate::reload::write_config(&path, &text(&format!("{alpha}{beta}")));
    let ev = wait_evidence(&evidence, DEADLINE, |ev| {
        reload_at(ev, 0).is_some_and(|r| reached_ready(&ev[r..], "beta", "primary"))
    })
    .await;
    let r = reload_at(&ev, 0).unwrap();
    assert_eq!(ev[r]["applied"], true, "{}", ev[r]);
    assert_eq!(ev[r]["added"], serde_json::json!(["beta"]), "{}", ev[r]);
    assert!(of(&ev[r..], "transition", "alpha", None).is_empty());

    let bad = text(&format!("{alpha}{beta}\n[publish]\n"));
    crate::reload::write_config(&path, &bad);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 1).is_some()).await;
    let refused = &ev[reload_at(&ev, 1).unwrap()];
    assert_eq!(refused["applied"], false, "{refused}");
    assert!(
        refused["problems"].to_string().contains("polled.toml:"),
        "{refused}"
    );

    stop(&mut child).await;
}

/// SIGHUP reads an S3 config again too (here with a poll too long to fire during the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_an_s3_config_again() {
    let Some((s3, bucket, upstream)) = bucket_or_skip().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha", "beta"]).await;
    let port = |i: usize| f.ports[i].port;
    let key = "hup.toml";
    let evidence = dir.path().join("evidence.jsonl");
    let stdout = dir.path().join("stdout.jsonl");
    let text = |services: &str| {
        let poll = "\n[reload]\npoll = \"1h\"\n";
        config(dir.path(), &f.dns, "1s", &format!("{poll}{services}"))
    };
    let alpha = service("alpha", port(0), port(1));
    put(&s3, &bucket, key, &text(&alpha)).await;
    let source = format!("s3://{bucket}/{key}");
    let mut child = spawn_run(&source, &format!("http://{upstream}"), &stdout);
    wait_evidence(&evidence, DEADLINE, |ev| {
        reached_ready(ev, "alpha", "primary")
    })
    .await;
    let beta = service("beta", port(2), port(3));
    put(&s3, &bucket, key, &text(&format!("{alpha}{beta}"))).await;
    signal(&child, libc::SIGHUP);
    let ev = wait_evidence(&evidence, DEADLINE, |ev| reload_at(ev, 0).is_some()).await;
    let r = &ev[reload_at(&ev, 0).unwrap()];
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(r["added"], serde_json::json!(["beta"]), "{r}");
    stop(&mut child).await;
}

/// `check` of an `s3://` config prices its poll (the 30 s default: 86,400 GETs a month); the
/// same config as a local file, polled or not, costs no request and prints no such line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prices_the_poll_of_an_s3_config_only() {
    let Some((s3, bucket, upstream)) = bucket_or_skip().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(&["alpha"]).await;
    let text = config(
        dir.path(),
        &f.dns,
        "1s",
        &service("alpha", f.ports[0].port, f.ports[1].port),
    );
    put(&s3, &bucket, "check.toml", &text).await;
    let check = |source: String| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(["check", "--config", &source])
            .envs([
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ENDPOINT_URL", &format!("http://{upstream}")),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let s3_plan = check(format!("s3://{bucket}/check.toml"));
    assert!(
        s3_plan.contains("config poll: every 30s, 86,400 GetObject requests a month per prober"),
        "{s3_plan}"
    );
    let file = dir.path().join("check.toml");
    std::fs::write(&file, format!("{text}{POLL}")).unwrap();
    let file_plan = check(file.display().to_string());
    assert!(!file_plan.contains("config poll"), "{file_plan}");
}
