//! `[evidence.s3]` against the emulator's S3 through the real SDK: segments reach the bucket
//! and `drill report --evidence s3://…` reads a drill over two runs from them; a SIGKILL loses at
//! most the segment being written (none on a persistent volume); an unreachable endpoint keeps
//! segments spooled and uploads them later; hostile objects are skipped, never read unbounded.

use crate::support::cloudwatch::endpoint;
use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{
    FAST_POLICY, Running, cloudwatch, has_transition, read_evidence, transitions, wait_evidence,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tokio::net::TcpListener;

const SERVICE: &str = "orders-queue";

/// An accepting TCP listener on loopback (port 0 or `port`); aborted on drop.
struct Listener {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listener(port: u16) -> Listener {
    let l = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move { while l.accept().await.is_ok() {} });
    Listener { port, task }
}

/// An S3 client on the emulator and a new bucket, or `None` after a loud skip.
async fn bucket_or_skip() -> Option<(aws_sdk_s3::Client, String)> {
    cloudwatch().await?;
    let conf = aws_sdk_s3::config::Builder::from(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(endpoint())
            .load()
            .await,
    )
    .force_path_style(true)
    .build();
    let client = aws_sdk_s3::Client::from_conf(conf);
    let bucket = format!("readyprobe-ev-{}", rand::random::<u32>());
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    Some((client, bucket))
}

/// A two-branch `tcp` service probed every 300 ms with the compressed policy, its evidence at
/// `dir/ev/evidence.jsonl` and also in `bucket` under `drills/`, a segment a second, through
/// `s3_endpoint`.
fn config(
    dir: &Path,
    dns: &DnsServer,
    ports: (u16, u16),
    bucket: &str,
    s3_endpoint: &str,
) -> PathBuf {
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
        .set(
            "evidence",
            "path",
            path(&dir.join("ev").join("evidence.jsonl")),
        )
        .set("evidence.s3", "bucket", bucket)
        .set("evidence.s3", "prefix", "drills/")
        .set("evidence.s3", "region", "us-east-1")
        .set("evidence.s3", "endpoint_url", s3_endpoint)
        .set("evidence.s3", "segment", "1s")
        .set("evidence.s3", "spool_max_mb", 16)
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
        .write(&dir.join("az-a.toml"))
}

async fn dns() -> DnsServer {
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("mq-a", Ipv4Addr::LOCALHOST, 5).await;
    dns.set_a("mq-b", Ipv4Addr::LOCALHOST, 5).await;
    dns
}

/// The readyprobe binary with `args`, S3 from the emulator through the default chain.
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every key under `prefix`.
async fn keys(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let r = s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .expect("list");
        out.extend(
            r.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
        token = r.next_continuation_token().map(String::from);
        if token.is_none() {
            return out;
        }
    }
}

/// Every record of every segment under `prefix`, gunzipped.
async fn records(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for k in keys(s3, bucket, prefix).await {
        let o = s3.get_object().bucket(bucket).key(&k).send().await.unwrap();
        let gz = o.body.collect().await.unwrap().into_bytes();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{k}: not gzip: {e}"));
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

fn seqs(records: &[Value]) -> Vec<u64> {
    let mut s: Vec<u64> = records
        .iter()
        .filter_map(|v| v["record_seq"].as_u64())
        .collect();
    s.sort_unstable();
    s
}

/// Poll until `pred` holds for the keys under `prefix` (60 s).
async fn wait_keys(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
    pred: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let k = keys(s3, bucket, prefix).await;
        if pred(&k) {
            return k;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "keys never matched: {k:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn mark(cfg: &Path, kind: &str, label: &str) {
    let (code, out, err) = cli(&[
        "drill",
        "mark",
        "--config",
        cfg.to_str().unwrap(),
        "--kind",
        kind,
        "--label",
        label,
        "--by",
        "alice",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Two runs (a failover in the first, the failback in the second) and their markers, read back
/// from S3 alone: the report shows both phases and no gap, with progress on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_over_two_runs_reads_back_from_s3() {
    let Some((s3, bucket)) = bucket_or_skip().await else {
        return;
    };
    let dns = dns().await;
    let (a, b) = (listener(0).await, listener(0).await);
    let port_a = a.port;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, &dns, (a.port, b.port), &bucket, &endpoint());
    let ev = d.join("ev").join("evidence.jsonl");
    let load = || readyprobe::config::load(&cfg).unwrap();

    let run = Running::start(load(), None);
    for branch in ["primary", "secondary"] {
        wait_evidence(&ev, Duration::from_secs(30), |ev| {
            has_transition(ev, branch, "ready")
        })
        .await;
    }
    let prefix = "drills/orders-queue/az-a/";
    wait_keys(&s3, &bucket, prefix, |k| !k.is_empty()).await;
    mark(&cfg, "fault", "stopped the primary listener");
    wait_evidence(&ev, Duration::from_secs(20), |ev| {
        ev.iter().any(|v| v["kind"] == "marker")
    })
    .await;
    drop(a);
    wait_evidence(&ev, Duration::from_secs(30), |ev| {
        has_transition(ev, "primary", "unready")
    })
    .await;
    run.stop().await;

    let back = listener(port_a).await;
    let run = Running::start(load(), None);
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
    drop(back);

    // What the local file holds, S3 holds too (the last segment was uploaded at stop).
    let local = seqs(&read_evidence(&ev));
    let remote = seqs(&records(&s3, &bucket, prefix).await);
    assert_eq!(remote, local, "every record reached S3, in order, once");
    for k in keys(&s3, &bucket, prefix).await {
        let name = k.strip_prefix(prefix).unwrap();
        assert!(
            name.len() > 17 && name.as_bytes()[8] == b'T' && name.ends_with(".jsonl.gz"),
            "{k}"
        );
    }

    let out = d.join("report");
    let url = format!("s3://{bucket}/drills/");
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        &url,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(
        err.contains("listed ") && err.contains(" segments"),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l.starts_with("read ") && {
            let (k, n) = l[5..].split_once('/').unwrap();
            k == n
        }),
        "{err}"
    );
    assert!(
        stdout.contains("### Failover of primary") && stdout.contains("### Failback of primary"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("stopped the primary listener"), "{md}");
    assert!(md.contains("started the primary listener"), "{md}");
    assert!(!md.contains("record_seq jumps"), "no gap: {md}");
    local_with_its_s3_copy_counts_once(&ev, &url, &out);
}

/// The local file `ev` with its S3 copy at `url`: every record is there twice, the same, and
/// counts once without a problem (the report equals the one from S3 alone, in `from_s3`).
fn local_with_its_s3_copy_counts_once(ev: &Path, url: &str, from_s3: &Path) {
    let both = from_s3.with_file_name("report-both");
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        ev.to_str().unwrap(),
        "--evidence",
        url,
        "--out",
        both.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    let md = std::fs::read_to_string(both.join("report.md")).unwrap();
    assert!(!md.contains("reused"), "{md}");
    let json = |dir: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
    };
    assert_eq!(json(&both)["services"], json(from_s3)["services"]);
}

/// Wait for the run at `child` to have `n` more segments in S3 than `before`, then SIGKILL it.
/// Returns the keys then.
async fn kill_after(
    child: &mut tokio::process::Child,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
    n: usize,
) -> Vec<String> {
    let before = keys(s3, bucket, prefix).await.len();
    let k = wait_keys(s3, bucket, prefix, |k| k.len() >= before + n).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    k
}

fn spawn_run(cfg: &Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The segments in the spool directory `dir`, open or closed.
fn spooled(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// The first `record_seq` of the segment at spool path `p`, from its name.
fn first_seq(p: &Path) -> u64 {
    let name = p.file_name().unwrap().to_string_lossy();
    name.split_once('-')
        .unwrap()
        .1
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// SIGKILL: the segments closed before it are in S3 already. On a persistent volume the next
/// start closes the segment that was open and uploads it, so nothing is lost; on a fresh disk
/// under the same prober id, numbering goes on from S3, the open segment is what is lost, and
/// the report names each killed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_loses_at_most_the_segment_being_written() {
    let Some((s3, bucket)) = bucket_or_skip().await else {
        return;
    };
    let dns = dns().await;
    let (a, b) = (listener(0).await, listener(0).await);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, &dns, (a.port, b.port), &bucket, &endpoint());
    let prefix = "drills/orders-queue/az-a/";
    let spool = d
        .join("ev")
        .join("evidence.spool")
        .join("orders-queue")
        .join("az-a");

    let mut child = spawn_run(&cfg);
    let at_kill = kill_after(&mut child, &s3, &bucket, prefix, 3).await;
    let open: Vec<PathBuf> = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".part"))
        .collect();
    // Persistent volume: the next run starts by closing and uploading what the killed one left.
    let (code, out, err) = cli(&["run", "--config", cfg.to_str().unwrap(), "--duration", "3s"]);
    assert_eq!(code, 0, "{out}{err}");
    let after = keys(&s3, &bucket, prefix).await;
    assert!(
        at_kill.iter().all(|k| after.contains(k)),
        "{at_kill:?} {after:?}"
    );
    for p in &open {
        let first = format!("-{}.jsonl.gz", first_seq(p));
        assert!(
            after.iter().any(|k| k.ends_with(&first)),
            "{p:?} uploaded: {after:?}"
        );
    }
    let all = seqs(&records(&s3, &bucket, prefix).await);
    let want: Vec<u64> = (1..=*all.last().unwrap()).collect();
    assert_eq!(all, want, "no record lost on a persistent volume");
    // The run's last segment went up at its stop: the spool is empty, S3 has the whole file.
    assert_eq!(spooled(&spool), Vec::<PathBuf>::new());
    assert_eq!(
        all,
        seqs(&read_evidence(&d.join("ev").join("evidence.jsonl")))
    );

    // A fresh disk (the task's storage gone) under the same prober id.
    let mut child = spawn_run(&cfg);
    kill_after(&mut child, &s3, &bucket, prefix, 2).await;
    let open: Vec<u64> = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".part"))
        .map(|p| first_seq(&p))
        .collect();
    let before = seqs(&records(&s3, &bucket, prefix).await);
    std::fs::remove_dir_all(d.join("ev")).unwrap();
    let (code, out, err) = cli(&["run", "--config", cfg.to_str().unwrap(), "--duration", "3s"]);
    assert_eq!(code, 0, "{out}{err}");
    let recs = records(&s3, &bucket, prefix).await;
    let all = seqs(&recs);
    let set: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(set.len(), all.len(), "no record_seq twice");
    // Numbering went on from the newest segment in S3: the killed run's open segment, never
    // uploaded, had the numbers after it.
    let last_up = *before.last().unwrap();
    assert!(
        open.iter().all(|f| *f == last_up + 1),
        "open {open:?} after {last_up}"
    );
    let newest_start = recs
        .iter()
        .filter(|v| v["kind"] == "start")
        .max_by_key(|v| v["at_ms"].as_i64())
        .unwrap();
    assert_eq!(newest_start["record_seq"], last_up + 1, "{newest_start}");
    let want: Vec<u64> = (1..=*all.last().unwrap()).collect();
    assert_eq!(all, want);
    assert_eq!(spooled(&spool), Vec::<PathBuf>::new());
    let local = seqs(&read_evidence(&d.join("ev").join("evidence.jsonl")));
    assert_eq!(
        all[all.len() - local.len()..],
        local[..],
        "S3 has the new run whole"
    );
    // The report says the run before was killed.
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        &format!("s3://{bucket}/drills/"),
        "--out",
        d.join("r").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    let md = std::fs::read_to_string(d.join("r/report.md")).unwrap();
    assert_eq!(
        md.matches("without a stop record").count(),
        2,
        "two kills: {md}"
    );
    assert!(!md.contains("goes back") && !md.contains("repeats"), "{md}");
}

/// A forwarder from `port` to the emulator, until dropped.
async fn forwarder(port: u16) -> tokio::task::JoinHandle<()> {
    let l = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let upstream = endpoint().trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        while let Ok((mut down, _)) = l.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    })
}

/// S3 unreachable: the segments wait in the spool, each failed upload is recorded with its
/// class and retry time; once S3 answers they all go up, in order, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_keeps_segments_spooled_until_it_answers() {
    let Some((s3, bucket)) = bucket_or_skip().await else {
        return;
    };
    let dns = dns().await;
    let (a, b) = (listener(0).await, listener(0).await);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A port nothing listens on yet: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config(
        d,
        &dns,
        (a.port, b.port),
        &bucket,
        &format!("http://127.0.0.1:{port}"),
    );
    let ev = d.join("ev").join("evidence.jsonl");
    let spool = d
        .join("ev")
        .join("evidence.spool")
        .join("orders-queue")
        .join("az-a");
    let closed = || -> usize {
        std::fs::read_dir(&spool).map_or(0, |r| {
            r.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "jsonl")
            })
            .count()
        })
    };
    let run = Running::start(readyprobe::config::load(&cfg).unwrap(), None);
    let failed = wait_evidence(&ev, Duration::from_secs(30), |ev| {
        ev.iter()
            .filter(|v| v["kind"] == "evidence_segment" && v["event"] == "upload_failed")
            .count()
            >= 2
    })
    .await;
    let f = failed
        .iter()
        .find(|v| v["kind"] == "evidence_segment")
        .unwrap();
    assert_eq!(f["class"], "publish_unreachable", "{f}");
    assert!(f["retry_in_ms"].as_u64().unwrap() >= 1000, "{f}");
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    while closed() < 3 {
        assert!(
            tokio::time::Instant::now() < end,
            "segments did not pile up in the spool"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let prefix = "drills/orders-queue/az-a/";
    assert!(keys(&s3, &bucket, prefix).await.is_empty());

    let fwd = forwarder(port).await;
    let end = tokio::time::Instant::now() + Duration::from_secs(90);
    while closed() > 0 || keys(&s3, &bucket, prefix).await.len() < 3 {
        assert!(
            tokio::time::Instant::now() < end,
            "the spool was not uploaded once S3 answered"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    run.stop().await;
    fwd.abort();
    let local = seqs(&read_evidence(&ev));
    let remote = seqs(&records(&s3, &bucket, prefix).await);
    // The run's last segment may still be in the spool (S3 answered late in the stop); every
    // record before it is in S3, once.
    assert_eq!(
        remote,
        local[..remote.len()],
        "in order, nothing lost, nothing twice"
    );
    assert!(
        remote.len() * 2 > local.len(),
        "{} of {}",
        remote.len(),
        local.len()
    );
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Hostile objects under the prefix: one too large, one not gzip, a gzip bomb, a key not of the
/// pattern. Each is skipped with a line on stderr; the report is made from the good segments;
/// `--from`/`--to` pick the segments of the window and the one open at its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_objects_are_skipped_with_a_line_never_read_unbounded() {
    let Some((s3, bucket)) = bucket_or_skip().await else {
        return;
    };
    let line = |seq: u64, ms: i64| {
        format!(
            "{{\"record_seq\":{seq},\"at\":\"x\",\"at_ms\":{ms},\"service\":\"{SERVICE}\",\"prober\":\"az-a\",\"kind\":\"evidence_reopened\",\"path\":\"p\"}}\n"
        )
    };
    // 2026-01-01T00:00:00Z
    let t0 = 1_767_225_600_000_i64;
    let random: Vec<u8> = (0..2 << 20).map(|_| rand::random::<u8>()).collect();
    let objects: Vec<(&str, Vec<u8>)> = vec![
        ("20260101T000000Z-1.jsonl.gz", gz(line(1, t0).as_bytes())),
        ("20260101T000100Z-2.jsonl.gz", random),
        (
            "20260101T000200Z-3.jsonl.gz",
            b"{\"plain\":\"text\"}\n".to_vec(),
        ),
        ("20260101T000300Z-4.jsonl.gz", gz(&vec![b'x'; 2 << 20])),
        (
            "20260101T000400Z-5.jsonl.gz",
            gz(line(5, t0 + 240_000).as_bytes()),
        ),
        ("notes.txt", b"hello".to_vec()),
    ];
    for (name, body) in objects {
        s3.put_object()
            .bucket(&bucket)
            .key(format!("h/{SERVICE}/az-a/{name}"))
            .body(body.into())
            .send()
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let url = format!("s3://{bucket}/h/");
    let base = [
        "drill",
        "report",
        "--evidence",
        &url,
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, err) = cli(&[&base[..], &["--max-segment-mb", "1"]].concat());
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(err.contains("listed 5 segments"), "{err}");
    assert!(
        err.contains("-2.jsonl.gz: stored larger than 1 MiB"),
        "{err}"
    );
    assert!(err.contains("-3.jsonl.gz: not gzip; skipped"), "{err}");
    assert!(
        err.contains("-4.jsonl.gz: gunzipped larger than 1 MiB"),
        "{err}"
    );
    assert!(err.contains("notes.txt: not a segment key"), "{err}");
    assert!(err.contains("read 5/5"), "{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("record_seq jumps from 1 to 5"), "{md}");

    // The window 00:02:30–00:03:30 needs the segment open at 00:02:30 (opened 00:02:00) and the
    // one opened in it.
    let window = [
        "--from",
        "2026-01-01T00:02:30Z",
        "--to",
        "2026-01-01T00:03:30Z",
    ];
    let (code, stdout, err) = cli(&[&base[..], &window[..]].concat());
    assert_eq!(code, 64, "nothing to report in that window: {stdout}{err}");
    assert!(err.contains("listed 2 segments"), "{err}");
    assert!(
        !err.contains("-1.jsonl.gz") && !err.contains("-5.jsonl.gz"),
        "{err}"
    );
    let (code, _, err) = cli(&["drill", "report", "--evidence", "s3://", "--out", "x"]);
    assert_eq!(code, 64, "{err}");
    let local = dir.path().join("local.jsonl");
    std::fs::write(&local, line(1, t0)).unwrap();
    let (code, _, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        local.to_str().unwrap(),
        "--out",
        "x",
        "--from",
        "2026-01-01T00:00:00Z",
    ]);
    assert_eq!(code, 64, "--from without an s3:// evidence: {err}");
    assert!(err.contains("--from and --to choose the segments"), "{err}");
}

/// A window whose `--from` is after its `--to` selects nothing: it is refused as a usage error
/// naming both bounds, before any S3 call, not read as an empty drill.
#[test]
fn a_window_that_ends_before_it_starts_is_refused() {
    let (code, stdout, err) = cli(&[
        "drill",
        "report",
        "--evidence",
        "s3://readyprobe-ev-window/drills/",
        "--from",
        "2026-12-01T11:00:00Z",
        "--to",
        "2026-12-01T10:00:00Z",
        "--out",
        "unused",
    ]);
    assert_eq!(code, 64, "{stdout}{err}");
    assert!(
        err.contains("--from") && err.contains("after --to"),
        "{err}"
    );
    assert!(
        !err.contains("listed"),
        "no listing for an empty window: {err}"
    );
}

/// A prefix one level short of the config's (`s3://bucket/` for `prefix = "deep/"`) finds
/// directories where segments belong: each is named on stderr, not passed over in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_below_the_prober_level_are_named_not_passed_over() {
    let Some((s3, bucket)) = bucket_or_skip().await else {
        return;
    };
    s3.put_object()
        .bucket(&bucket)
        .key(format!("deep/{SERVICE}/az-a/20260101T000000Z-1.jsonl.gz"))
        .body(gz(b"{}\n").into())
        .send()
        .await
        .unwrap();
    let url = format!("s3://{bucket}/");
    let (code, stdout, err) = cli(&["drill", "report", "--evidence", &url, "--out", "unused"]);
    assert_eq!(code, 64, "nothing read: {stdout}{err}");
    assert!(
        err.contains(&format!(
            "s3://{bucket}/deep/{SERVICE}/az-a/: a directory where segments belong"
        )),
        "{err}"
    );
}
