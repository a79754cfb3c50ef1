//! Publishing through CloudWatch outages, against the strict fake CloudWatch
//! (`support::fake_cloudwatch`) over the SDK's real protocol: every failure gets its class, each
//! try is one request, probing keeps its cadence, nothing CloudWatch would refuse is sent, and the
//! failures are counted on the EMF sink.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fake_cloudwatch::{CredsMode, FakeCloudWatch, FakeCredentials, Fault, now_ms};
use readyprobe::config::CloudWatch as CwConfig;
use readyprobe::record::PublishFailureClass as C;
use readyprobe::sink::cloudwatch::CloudWatchSink;
use readyprobe::sink::{Datum, Sink, Unit, Value};
use serde_json::Value as Json;
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::process::Command;

fn datum(metric: &'static str, value: f64, timestamp: i64) -> Datum {
    Datum {
        metric,
        dimensions: vec![
            ("Service", "orders-db".into()),
            ("Branch", "primary".into()),
        ],
        value: Value::Single(value),
        unit: Unit::None,
        timestamp,
        since: None,
    }
}

async fn sink(url: &str, timeout: Duration) -> CloudWatchSink {
    sink_tried(url, timeout, 1, Duration::from_secs(60)).await
}

/// A sink that tries a batch up to `max_attempts` times within `window`.
async fn sink_tried(
    url: &str,
    timeout: Duration,
    max_attempts: u32,
    window: Duration,
) -> CloudWatchSink {
    let cfg = CwConfig {
        region: Some("us-east-1".into()),
        endpoint_url: Some(url.into()),
        operation_timeout: timeout,
        max_attempts,
        role: None,
    };
    CloudWatchSink::new(&cfg, "Faults", window).await
}

/// `sink` behind its queue task, as the runner runs it: the queue, its reports, its tracker.
fn queued(
    sink: CloudWatchSink,
) -> (
    readyprobe::sink::SinkQueue,
    tokio::sync::mpsc::UnboundedReceiver<readyprobe::sink::SinkReport>,
    tokio_util::task::TaskTracker,
) {
    let (tx, reports) = tokio::sync::mpsc::unbounded_channel();
    let tracker = tokio_util::task::TaskTracker::new();
    let q = readyprobe::sink::SinkQueue::spawn(
        Box::new(sink),
        tx,
        &tracker,
        tokio_util::sync::CancellationToken::new(),
    )
    .datum_room(0); // one-datum batches: the batch count decides when the queue is full
    (q, reports, tracker)
}

/// Through the real SDK: the fake decodes exactly what was sent, the sink leaves out what
/// CloudWatch would refuse (NaN, a timestamp older than two weeks), and the fake itself refuses
/// such a datum when a client sends it anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_decodes_exactly_and_refuses_what_cloudwatch_refuses() {
    let fake = FakeCloudWatch::start().await;
    let mut s = sink(&fake.url, Duration::from_secs(5)).await;
    let now = now_ms();
    let stale = now - 15 * 86_400_000;
    let sent = s
        .send(&[
            datum("Readiness", 1.0, now),
            datum("Readiness", f64::NAN, now),
            datum("Readiness", 0.0, stale),
        ])
        .await
        .unwrap();
    assert_eq!(sent, 1);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].accepted(), "{:?}", seen[0]);
    assert_eq!(seen[0].namespace.as_deref(), Some("Faults"));
    let d = &seen[0].datums;
    assert_eq!(d.len(), 1);
    assert_eq!(
        (
            d[0].metric.as_str(),
            d[0].value,
            d[0].timestamp,
            d[0].unit.as_deref(),
            d[0].storage_resolution
        ),
        ("Readiness", Some(1.0), now, Some("None"), Some(60))
    );
    assert_eq!(d[0].dim("Branch"), Some("primary"));

    // A client that does send the stale datum is refused, with the error shape the SDK reads.
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&fake.url)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    let client = aws_sdk_cloudwatch::Client::new(&config);
    let err = client
        .put_metric_data()
        .namespace("Faults")
        .metric_data(readyprobe::sink::cloudwatch::encode(&datum("Readiness", 0.0, stale)).unwrap())
        .send()
        .await
        .unwrap_err();
    let e = readyprobe::sink::cloudwatch::classify_error(&err);
    assert_eq!(e.class, C::PublishRejected, "{}", e.message);
    assert!(e.message.contains("InvalidParameterValue"), "{}", e.message);
    assert_eq!(fake.seen().len(), 2);
}

/// `(name, request, accepted)`: each limit CloudWatch documents for PutMetricData, broken and
/// just met, at `now` (ms since the epoch).
fn documented_limit_cases(
    now: i64,
) -> Vec<(
    &'static str,
    Vec<aws_sdk_cloudwatch::types::MetricDatum>,
    bool,
)> {
    use aws_sdk_cloudwatch::types::{Dimension, MetricDatum};
    use aws_smithy_types::DateTime;
    let dim = |k: &str, v: &str| Dimension::builder().name(k).value(v).build();
    let m = |value: f64, ts: i64, dims: Vec<Dimension>| {
        MetricDatum::builder()
            .metric_name("Readiness")
            .value(value)
            .timestamp(DateTime::from_millis(ts))
            .set_dimensions(Some(dims))
            .build()
    };
    let ok = || m(1.0, now, vec![dim("Service", "orders-db")]);
    vec![
        ("valid", vec![ok()], true),
        ("NaN", vec![m(f64::NAN, now, vec![])], false),
        ("infinite", vec![m(f64::INFINITY, now, vec![])], false),
        ("beyond 2^360", vec![m(2f64.powi(361), now, vec![])], false),
        (
            "15 days old",
            vec![m(1.0, now - 15 * 86_400_000, vec![])],
            false,
        ),
        (
            "3 hours ahead",
            vec![m(1.0, now + 3 * 3_600_000, vec![])],
            false,
        ),
        (
            "31 dimensions",
            vec![m(
                1.0,
                now,
                (0..31).map(|i| dim(&format!("D{i}"), "v")).collect(),
            )],
            false,
        ),
        (
            "30 dimensions",
            vec![m(
                1.0,
                now,
                (0..30).map(|i| dim(&format!("D{i}"), "v")).collect(),
            )],
            true,
        ),
        (
            "control character",
            vec![m(1.0, now, vec![dim("Service", "a\u{7}b")])],
            false,
        ),
        (
            "non-ASCII value",
            vec![m(1.0, now, vec![dim("Service", "café")])],
            false,
        ),
        (
            "name 256 long",
            vec![m(1.0, now, vec![dim(&"n".repeat(256), "v")])],
            false,
        ),
        (
            "value 1025 long",
            vec![m(1.0, now, vec![dim("Service", &"v".repeat(1025))])],
            false,
        ),
        (
            "name starts with ':'",
            vec![m(1.0, now, vec![dim(":x", "v")])],
            false,
        ),
        ("1001 datums", (0..1001).map(|_| ok()).collect(), false),
        ("1000 datums", (0..1000).map(|_| ok()).collect(), true),
    ]
}

/// The fake refuses each request CloudWatch documents as invalid (sent by a raw SDK client,
/// which does not check), and accepts the same request made valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_enforces_the_documented_limits() {
    let fake = FakeCloudWatch::start().await;
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&fake.url)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    let client = aws_sdk_cloudwatch::Client::new(&config);
    let cases = documented_limit_cases(now_ms());
    for (name, data, accepted) in cases {
        let r = client
            .put_metric_data()
            .namespace("Faults")
            .set_metric_data(Some(data))
            .send()
            .await;
        match (r, accepted) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                let e = readyprobe::sink::cloudwatch::classify_error(&e);
                assert_eq!(e.class, C::PublishRejected, "{name}: {}", e.message);
                assert!(
                    e.message.contains("InvalidParameterValue"),
                    "{name}: {}",
                    e.message
                );
            }
            (r, _) => panic!("{name}: {r:?}"),
        }
    }
}

/// The sink splits a large batch within the limits the strict fake enforces: 2,500 datums with
/// long dimension values go out as requests of at most 1,000, every one accepted, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_is_split_within_the_limits() {
    let fake = FakeCloudWatch::start().await;
    let mut s = sink(&fake.url, Duration::from_secs(10)).await;
    let now = now_ms();
    let ds: Vec<Datum> = (0..2500)
        .map(|i| Datum {
            dimensions: vec![
                ("Service", "s".repeat(255)),
                ("Branch", format!("{i:0>255}")),
            ],
            ..datum("Attempts", f64::from(i), now)
        })
        .collect();
    assert_eq!(s.send(&ds).await.unwrap(), 2500);
    let seen = fake.seen();
    assert!(
        seen.iter().all(|r| r.accepted()),
        "{:?}",
        seen.iter().find(|r| !r.accepted())
    );
    let sizes: Vec<_> = seen.iter().map(|r| r.datums.len()).collect();
    assert!(
        sizes.iter().all(|n| *n <= 1000) && sizes.iter().sum::<usize>() == 2500,
        "{sizes:?}"
    );
    let values: Vec<f64> = seen
        .iter()
        .flat_map(|r| r.datums.iter().map(|d| d.value.unwrap()))
        .collect();
    assert_eq!(values, (0..2500).map(f64::from).collect::<Vec<_>>());
}

/// Each outage shape, one request each, gets its class through the SDK's real parsing; the
/// message stays one bounded line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outage_shape_gets_its_class() {
    let fake = FakeCloudWatch::start().await;
    let mut s = sink(&fake.url, Duration::from_millis(800)).await;
    let cases = [
        (Fault::Hang, C::PublishTimeout),
        (Fault::Throttle, C::PublishThrottled),
        (Fault::TooManyRequests, C::PublishThrottled),
        (Fault::Status(503), C::Publish5xx),
        (Fault::Status(500), C::Publish5xx),
        (Fault::Bodiless408, C::PublishHttp408),
        (Fault::Reset, C::PublishUnreachable),
    ];
    for (i, (fault, class)) in cases.into_iter().enumerate() {
        fake.set_fault(Some(fault));
        let e = s
            .send(&[datum("Readiness", 1.0, now_ms())])
            .await
            .unwrap_err();
        assert_eq!(e.class, class, "{fault:?}: {}", e.message);
        assert!(e.retryable(), "{fault:?}");
        assert!(
            e.message.len() <= 1024 && !e.message.contains('\n'),
            "{fault:?}: {}",
            e.message
        );
        assert_eq!(fake.seen().len(), i + 1, "{fault:?}: one request per try");
    }
    fake.set_fault(None);
    assert_eq!(
        s.send(&[datum("Readiness", 1.0, now_ms())]).await.unwrap(),
        1
    );
}

/// Through the sink's queue with the real SDK: each retryable outage shape gets exactly
/// `max_attempts` (3) requests within a 10 s window, then the batch is failed with its class; once
/// the fault clears, the next batch goes out in one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shape_is_tried_exactly_max_attempts_times() {
    use readyprobe::record::PublishOutcome;
    use readyprobe::sink::Queued;
    let fake = FakeCloudWatch::start().await;
    let sink = sink_tried(
        &fake.url,
        Duration::from_secs(1),
        3,
        Duration::from_secs(10),
    )
    .await;
    let (q, mut reports, _tracker) = queued(sink);
    let shapes = [
        (Some(Fault::Hang), Some(C::PublishTimeout)),
        (Some(Fault::Throttle), Some(C::PublishThrottled)),
        (Some(Fault::TooManyRequests), Some(C::PublishThrottled)),
        (Some(Fault::Status(503)), Some(C::Publish5xx)),
        (Some(Fault::Bodiless408), Some(C::PublishHttp408)),
        (Some(Fault::Reset), Some(C::PublishUnreachable)),
        (None, None),
    ];
    let mut before = 0;
    for (id, (fault, class)) in shapes.into_iter().enumerate() {
        fake.set_fault(fault);
        let b = Queued {
            id: id as u64,
            datums: vec![datum("Readiness", 1.0, now_ms())],
            deadline: tokio::time::Instant::now() + Duration::from_secs(10),
        };
        q.offer(b).unwrap();
        let r = tokio::time::timeout(Duration::from_secs(15), reports.recv())
            .await
            .expect("no report within the window")
            .unwrap();
        let requests = fake.seen().len() - before;
        before += requests;
        let want = if fault.is_some() { 3 } else { 1 };
        assert_eq!(
            (r.tries, requests),
            (want, want as usize),
            "{fault:?}: {r:?}"
        );
        assert_eq!(r.class, class, "{fault:?}: {r:?}");
        let outcome = match fault {
            Some(_) => PublishOutcome::Failed,
            None => PublishOutcome::Sent,
        };
        assert_eq!(r.outcome, outcome, "{fault:?}");
    }
}

/// Per outage shape, through the queue and the real SDK: five batches arrive while the first is
/// in hand and the fault lasts its three tries. The queue (4) drops the oldest waiting batch (2),
/// batch 1 fails after exactly 3 requests, then the rest go out newest first (6, 5, 4, 3), one
/// request each: 7 requests in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_each_shape_the_newest_batch_goes_first() {
    use readyprobe::record::PublishOutcome as O;
    use readyprobe::sink::Queued;
    let shapes = [
        (Fault::Hang, C::PublishTimeout),
        (Fault::Throttle, C::PublishThrottled),
        (Fault::TooManyRequests, C::PublishThrottled),
        (Fault::Status(500), C::Publish5xx),
        (Fault::Bodiless408, C::PublishHttp408),
        (Fault::Reset, C::PublishUnreachable),
    ];
    for (fault, class) in shapes {
        let fake = FakeCloudWatch::start().await;
        let sink = sink_tried(
            &fake.url,
            Duration::from_secs(1),
            3,
            Duration::from_secs(15),
        )
        .await;
        let (q, mut reports, tracker) = queued(sink);
        tracker.close();
        fake.set_fault_for(fault, 3);
        let now = now_ms();
        for id in 1..=6u64 {
            if id == 2 {
                // Batch 1 is in hand once its first request arrived.
                let t = tokio::time::Instant::now();
                while fake.seen().is_empty() {
                    assert!(t.elapsed() < Duration::from_secs(10), "no request");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            q.offer(Queued {
                id,
                datums: vec![datum("Readiness", id as f64, now)],
                deadline: tokio::time::Instant::now() + Duration::from_secs(15),
            })
            .unwrap();
        }
        drop(q);
        tokio::time::timeout(Duration::from_secs(30), tracker.wait())
            .await
            .expect("the queue did not drain");
        let mut got = Vec::new();
        while let Ok(r) = reports.try_recv() {
            got.push((r.batch, r.outcome, r.class, r.tries));
        }
        assert_eq!(
            got,
            [
                (2, O::DroppedQueueFull, None, 0),
                (1, O::Failed, Some(class), 3),
                (6, O::Sent, None, 1),
                (5, O::Sent, None, 1),
                (4, O::Sent, None, 1),
                (3, O::Sent, None, 1),
            ],
            "{fault:?}"
        );
        let seen = fake.seen();
        let delivered: Vec<_> = seen
            .iter()
            .map(|s| {
                (
                    s.fault,
                    s.datums
                        .iter()
                        .map(|d| d.value.unwrap())
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let f = Some(fault);
        assert_eq!(
            delivered,
            [
                (f, vec![1.0]),
                (f, vec![1.0]),
                (f, vec![1.0]),
                (None, vec![6.0]),
                (None, vec![5.0]),
                (None, vec![4.0]),
                (None, vec![3.0]),
            ],
            "{fault:?}"
        );
    }
}

/// A TCP listener for the probe to connect to (the `tcp` kind, no TLS).
pub(crate) async fn target() -> (u16, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    (port, task)
}

pub(crate) const NAME: &str = "gw-primary.orders.internal.example";

/// A run's config: a 500 ms tcp probe, a 1 s publish tick to `emf` and the fake CloudWatch.
pub(crate) fn config(
    dir: &std::path::Path,
    dns: &DnsServer,
    port: u16,
    cw: &str,
) -> std::path::PathBuf {
    config_builder(dir, dns, port, cw).write(&dir.join("run.toml"))
}

/// [`config`] before it is written.
pub(crate) fn config_builder(
    dir: &std::path::Path,
    dns: &DnsServer,
    port: u16,
    cw: &str,
) -> ConfigBuilder {
    ConfigBuilder::new(dir, "gateway", "gw.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe", "interval", "500ms")
        .set("probe", "timeout", "400ms")
        .set("probe", "jitter", "0s")
        .set("probe.tcp", "port", i64::from(port))
        .tls("disabled", None)
        .set("publish", "interval", "1s")
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "cloudwatch".into()]),
        )
        .set("publish.cloudwatch", "endpoint_url", cw)
        .set("publish.cloudwatch", "region", "us-east-1")
        .set("publish.cloudwatch", "max_attempts", 3)
        .set("evidence", "path", path(&dir.join("evidence.jsonl")))
        .branch("primary", "PRIMARY", NAME, None)
}

/// What a run left: evidence records and EMF lines.
pub(crate) struct Run {
    pub(crate) evidence: Vec<Json>,
    pub(crate) emf: Vec<Json>,
    /// The run's log (stderr).
    pub(crate) log: String,
    started: i64,
}

impl Run {
    pub(crate) fn publishes(&self, sink: &str) -> Vec<&Json> {
        self.evidence
            .iter()
            .filter(|v| v["kind"] == "publish" && v["sink"] == sink)
            .collect()
    }
}

/// Run the binary for `secs` at most with `env`, calling `during(elapsed)` every 100 ms; once it
/// returns true (the run has shown what the test needs), the run is stopped with SIGTERM.
pub(crate) async fn run_binary(
    cfg: &std::path::Path,
    secs: u64,
    env: &[(&str, &str)],
    remove: &[&str],
    mut during: impl FnMut(Duration) -> bool,
) -> Run {
    let started = now_ms();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_readyprobe"));
    cmd.args(["run", "--grace", "3s", "--duration"])
        .arg(format!("{secs}s"))
        .arg("--config")
        .arg(cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in remove {
        cmd.env_remove(k);
    }
    let child = cmd.spawn().unwrap();
    let pid = libc::pid_t::try_from(child.id().unwrap()).unwrap();
    let t0 = tokio::time::Instant::now();
    let out = tokio::spawn(child.wait_with_output());
    let mut stopping = false;
    while !out.is_finished() {
        if !stopping && during(t0.elapsed()) {
            // SAFETY: kill(2) on our own child, which has not been reaped (`out` is not finished).
            unsafe { libc::kill(pid, libc::SIGTERM) };
            stopping = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            t0.elapsed() < Duration::from_secs(secs + 30),
            "the run did not stop"
        );
    }
    let out = out.await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "exit status");
    let read = |s: &str| -> Vec<Json> {
        s.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let ev_path = cfg.parent().unwrap().join("evidence.jsonl");
    Run {
        evidence: read(&std::fs::read_to_string(ev_path).unwrap()),
        emf: read(&String::from_utf8_lossy(&out.stdout)),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
        started,
    }
}

/// Checks that hold for every outage shape, given when the outage was (ms since the epoch).
fn check_run(run: &Run, fake: &FakeCloudWatch, outage: (i64, i64), class: C) {
    let seen = fake.seen();
    let cw = run.publishes("cloudwatch");
    // Each try is one request: the tries the evidence counts are exactly the requests made.
    let tries: u64 = cw.iter().map(|p| p["tries"].as_u64().unwrap()).sum();
    assert_eq!(tries, seen.len() as u64, "tries vs requests");
    // Retries are bounded.
    assert!(cw.iter().all(|p| p["tries"].as_u64().unwrap() <= 3));
    // Every failure has the outage's class; dropped batches are counted in the stop record.
    let failed: Vec<_> = cw.iter().filter(|p| p["outcome"] == "failed").collect();
    assert!(!failed.is_empty(), "no publish failed during the outage");
    for p in &failed {
        assert_eq!(p["class"], class.as_str(), "{p}");
        assert!(p["error"].as_str().unwrap().len() <= 1024, "{p}");
    }
    let dropped = cw.iter().filter(|p| p["dropped"] == true).count() as u64;
    let stop = run.evidence.iter().find(|v| v["kind"] == "stop").unwrap();
    assert_eq!(
        stop["dropped_batches"]["cloudwatch"].as_u64().unwrap_or(0),
        dropped
    );
    // Publishing resumed after the outage.
    assert!(
        seen.iter().any(|s| s.accepted() && s.at > outage.1),
        "nothing accepted after the outage"
    );
    // Nothing stale was delivered: every accepted datum was at most one publish window (1 s,
    // plus 2 s of slack) old when it arrived, and none was refused by the strict fake.
    for s in &seen {
        assert_eq!(s.refused, None, "{s:?}");
        if s.accepted() {
            for d in &s.datums {
                assert!(
                    s.at - d.timestamp <= 3_000,
                    "stale datum delivered: {d:?} at {}",
                    s.at
                );
            }
        }
    }
    // Probing kept its cadence through the outage (500 ms: at least 60% of the attempts).
    let during = run
        .evidence
        .iter()
        .filter(|v| v["kind"] == "attempt")
        .filter(|v| (outage.0..outage.1).contains(&v["finished_at"].as_i64().unwrap()))
        .count() as i64;
    let expected = (outage.1 - outage.0) / 500;
    assert!(
        during * 10 >= expected * 6,
        "{during} attempts during a {} ms outage",
        outage.1 - outage.0
    );
    // The failures are counted on EMF, by class, and never more than failed.
    let counted: f64 = run
        .emf
        .iter()
        .filter(|l| l["PublishFailures"].is_number())
        .map(|l| {
            assert_eq!(l["Class"], class.as_str(), "{l}");
            assert_eq!(l["Service"], "gateway");
            l["PublishFailures"].as_f64().unwrap()
        })
        .sum();
    assert!(
        counted >= 1.0 && counted <= failed.len() as f64,
        "PublishFailures {counted}, failed batches {}",
        failed.len()
    );
    assert!(run.started < outage.0);
}

/// One outage shape end to end: healthy until a batch was accepted, then `fault` for 4 s, then
/// healthy until a batch was accepted again and 1.5 s more (the `PublishFailures` tick after the
/// last failure); 11 s at most.
async fn outage(fault: Fault, class: C) {
    let fake = FakeCloudWatch::start().await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, port, &fake.url);
    let mut window = (0, 0);
    let run = run_binary(&cfg, 11, &[], &[], |_| {
        let now = now_ms();
        let accepted_since = |t: i64| fake.seen().iter().any(|s| s.accepted() && s.at > t);
        if window.0 == 0 && accepted_since(0) {
            fake.set_fault(Some(fault));
            window.0 = now;
        }
        if window.0 != 0 && window.1 == 0 && now >= window.0 + 4_000 {
            fake.set_fault(None);
            window.1 = now;
        }
        window.1 != 0 && now >= window.1 + 1_500 && accepted_since(window.1)
    })
    .await;
    check_run(&run, &fake, window, class);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_hang() {
    outage(Fault::Hang, C::PublishTimeout).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_throttling() {
    outage(Fault::Throttle, C::PublishThrottled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_429() {
    outage(Fault::TooManyRequests, C::PublishThrottled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_5xx() {
    outage(Fault::Status(502), C::Publish5xx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_bodiless_408() {
    outage(Fault::Bodiless408, C::PublishHttp408).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_reset() {
    outage(Fault::Reset, C::PublishUnreachable).await;
}

/// Container credentials that expire: the endpoint fails while the SDK must renew them
/// (publishes fail as `publish_credentials`), then rotates, and publishing resumes; no request
/// ever reaches CloudWatch signed with an expired or unknown key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_credentials_expiry() {
    let fake = FakeCloudWatch::start().await;
    // The SDK renews 5–10 s before expiry: with 12 s, renewal is due 2–7 s after issue.
    let creds = FakeCredentials::start(Duration::from_secs(12)).await;
    fake.require(&creds);
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, port, &fake.url);
    let mut window = (0, 0);
    let env = [("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url.as_str())];
    let remove = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ];
    // The endpoint fails from the first issue on, past the latest renewal (7 s after issue),
    // then rotates; the run stops 1.5 s after a publish got through again, 16 s at most.
    let run = run_binary(&cfg, 16, &env, &remove, |_| {
        if window.0 == 0 && creds.requests().iter().any(|r| r.1 == 200) {
            creds.set_mode(CredsMode::Fail);
            window.0 = now_ms();
        }
        if window.0 != 0 && window.1 == 0 && now_ms() >= window.0 + 8_500 {
            creds.set_mode(CredsMode::Rotate);
            window.1 = now_ms();
        }
        window.1 != 0 && now_ms() >= window.1 + 1_500 && fake.seen().iter().any(|s| s.at > window.1)
    })
    .await;
    assert!(
        window.1 != 0,
        "the credentials were never issued, or never rotated"
    );
    let seen = fake.seen();
    assert!(
        seen.iter().all(|s| s.accepted()),
        "a request with expired or unknown credentials reached CloudWatch: {:?}",
        seen.iter().find(|s| !s.accepted())
    );
    let reqs = creds.requests();
    assert!(reqs.iter().any(|r| r.1 == 500), "{reqs:?}");
    assert!(reqs.iter().filter(|r| r.1 == 200).count() >= 2, "{reqs:?}");
    let cw = run.publishes("cloudwatch");
    let failed: Vec<_> = cw.iter().filter(|p| p["outcome"] == "failed").collect();
    assert!(!failed.is_empty());
    for p in &failed {
        assert_eq!(p["class"], "publish_credentials", "{p}");
        // No request goes out without credentials.
        let at = p["at_ms"].as_i64().unwrap();
        assert!(at > window.0, "{p}");
    }
    assert!(
        seen.iter().any(|s| s.at > window.1),
        "publishing did not resume after rotation"
    );
    let counted = run
        .emf
        .iter()
        .any(|l| l["PublishFailures"].is_number() && l["Class"] == "publish_credentials");
    assert!(counted, "no PublishFailures for publish_credentials on EMF");
}

/// An error message carrying terminal escape sequences (a title change, a bell) reaches the log
/// and evidence escaped, never raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_an_error_message_are_escaped() {
    let fake = FakeCloudWatch::start().await;
    let mut s = sink(&fake.url, Duration::from_secs(5)).await;
    fake.set_fault(Some(Fault::Rejected("bad \u{1b}]0;PWNED\u{7} value\u{0}")));
    let e = s
        .send(&[datum("Readiness", 1.0, now_ms())])
        .await
        .unwrap_err();
    assert_eq!(e.class, C::PublishRejected, "{}", e.message);
    assert!(
        !e.message.chars().any(char::is_control),
        "raw control character in {:?}",
        e.message
    );
    assert!(
        e.message.contains(r"bad \u{1b}]0;PWNED\u{7} value\u{0}"),
        "{}",
        e.message
    );
}

/// A listener that answers every request with `400` and a chunked body that never ends, written
/// as fast as the peer reads it.
pub(crate) async fn endless_400() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 400 Bad Request\r\nsmithy-protocol: rpc-v2-cbor\r\n\
                            content-type: application/cbor\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut chunk = format!("{:x}\r\n", 1 << 20).into_bytes();
                chunk.extend(std::iter::repeat_n(b'a', 1 << 20));
                chunk.extend_from_slice(b"\r\n");
                while s.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    (url, task)
}

/// The peak resident memory of a running process, kB (`VmHWM`).
pub(crate) fn peak_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// An endpoint answering `400` with an endless body: the run reads at most 1 MiB of it per try
/// (its peak memory stays far under 200 MB; unbounded, it grew past 1 GB within the 1 s timeout),
/// and every try fails as `publish_unreachable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_error_body_is_cut_off() {
    let (url, _l) = endless_400().await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, port, &url);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_readyprobe"));
    cmd.args(["run", "--grace", "3s", "--duration", "5s", "--config"])
        .arg(&cfg)
        .envs([
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let t0 = tokio::time::Instant::now();
    let mut peak = 0;
    let status = loop {
        if let Some(kb) = peak_kb(pid) {
            peak = peak.max(kb);
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "the run did not stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0));
    assert!(peak > 0, "no memory reading");
    assert!(peak < 200 * 1024, "peak resident memory {peak} kB");
    let evidence = std::fs::read_to_string(dir.path().join("evidence.jsonl")).unwrap();
    let failed: Vec<Json> = evidence
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|v| v["kind"] == "publish" && v["sink"] == "cloudwatch" && v["outcome"] == "failed")
        .collect();
    assert!(!failed.is_empty(), "no failed publish: {evidence}");
    for p in &failed {
        assert_eq!(p["class"], "publish_unreachable", "{p}");
    }
    eprintln!("peak resident memory {peak} kB");
}

/// `publish.metrics = "control"` end to end: the real binary sends CloudWatch (and EMF) only the
/// series alarms read, every handed datum is accounted in a `publish` record, and the evidence
/// still has every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_profile_sends_only_what_alarms_read() {
    const CONTROL: [&str; 4] = [
        "Readiness",
        "Heartbeat",
        "BothBranchesUnready",
        "ServiceUnavailable",
    ];
    let fake = FakeCloudWatch::start().await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_builder(dir.path(), &dns, port, &fake.url)
        .set("publish", "metrics", "control")
        .write(&dir.path().join("run.toml"));
    // Until three batches were accepted: attempts have finished by then (500 ms apart).
    let run = run_binary(&cfg, 20, &[], &[], |_| {
        fake.seen().iter().filter(|s| s.accepted()).count() >= 3
    })
    .await;
    let seen = fake.seen();
    let datums: Vec<_> = seen.iter().flat_map(|s| &s.datums).collect();
    assert!(datums.iter().any(|d| d.metric == "Heartbeat"), "{seen:?}");
    for d in &datums {
        assert!(CONTROL.contains(&d.metric.as_str()), "sent {d:?}");
    }
    for s in &seen {
        assert_eq!(s.refused, None, "{s:?}");
    }
    for l in &run.emf {
        let metric = l["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]
            .as_str()
            .unwrap();
        assert!(CONTROL.contains(&metric), "EMF {l}");
    }
    // Every accepted datum is one a `publish` record counts as sent, and no batch was dropped.
    let cw = run.publishes("cloudwatch");
    assert!(cw.iter().all(|p| p["outcome"] == "sent"), "{cw:?}");
    let sent: u64 = cw.iter().map(|p| p["sent"].as_u64().unwrap()).sum();
    let accepted = seen.iter().filter(|s| s.accepted()).map(|s| s.datums.len());
    assert_eq!(sent, accepted.sum::<usize>() as u64);
    // The detail stays in the evidence: every attempt is there, with its steps.
    let attempts: Vec<_> = run
        .evidence
        .iter()
        .filter(|v| v["kind"] == "attempt")
        .collect();
    assert!(attempts.len() >= 2, "{} attempts", attempts.len());
    let seqs: Vec<u64> = attempts
        .iter()
        .map(|a| a["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}
