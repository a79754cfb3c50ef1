//! The `otlp` sink on the real binary, against the local OTLP/HTTP receiver (it decodes the real
//! protobuf) and CloudWatch (LocalStack): the datums arrive with their names, units and
//! attributes; `publish.metrics = "control"` limits CloudWatch while OTLP gets every metric; a
//! 503 is retried, a 400 is not; a silent collector delays no other sink.
//!
//! No real OpenTelemetry Collector binary is available here (it is no Debian, PyPI or npm
//! package), so the receiver stands in for one.

use crate::publish_faults::{Run, config_builder, run_binary, target};
use crate::support::cloudwatch::{self as ls, cloudwatch_or_skip, unique_namespace};
use crate::support::config::{ConfigBuilder, secret_env};
use crate::support::dns::DnsServer;
use crate::support::fixture::{ConfigOpts, Pipeline};
use crate::support::otlp_receiver::{Mode, Received, Receiver};
use crate::support::publish_records::assert_each_one_try;
use crate::support::tls::TestCa;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, Metric, metric};
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "Bearer otlp-T0ken-5e7a-91b2";

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    let a = attrs.iter().find(|a| a.key == key)?;
    match a.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// Every metric the receiver got, each with its resource's attributes.
fn metrics(received: &[Received]) -> Vec<(Vec<KeyValue>, Metric)> {
    received
        .iter()
        .flat_map(|r| &r.request.resource_metrics)
        .flat_map(|rm| {
            let res = rm.resource.clone().unwrap_or_default().attributes;
            rm.scope_metrics
                .iter()
                .flat_map(|s| s.metrics.clone())
                .map(move |m| (res.clone(), m))
        })
        .collect()
}

fn names(received: &[Received]) -> BTreeSet<String> {
    metrics(received).into_iter().map(|(_, m)| m.name).collect()
}

/// The CloudWatch metric names of namespace `ns` in LocalStack.
async fn cloudwatch_names(client: &aws_sdk_cloudwatch::Client, ns: &str) -> BTreeSet<String> {
    let out = client
        .list_metrics()
        .namespace(ns)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ListMetrics: {e:?}"));
    out.metrics()
        .iter()
        .filter_map(|m| m.metric_name().map(str::to_string))
        .collect()
}

/// Poll LocalStack (every 500 ms, 30 s at most) until namespace `ns` holds `metric`.
async fn wait_for_metric(client: &aws_sdk_cloudwatch::Client, ns: &str, metric: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if cloudwatch_names(client, ns).await.contains(metric) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{metric} never reached CloudWatch in {ns}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn evidence_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("evidence.jsonl")).unwrap_or_default()
}

/// Wait for `Readiness` in namespace `ns`, then check it holds the control series only.
async fn assert_control_only(cw: &aws_sdk_cloudwatch::Client, ns: &str) {
    wait_for_metric(cw, ns, "Readiness").await;
    let on_cw = cloudwatch_names(cw, ns).await;
    for m in &on_cw {
        let control = [
            "Readiness",
            "Heartbeat",
            "BothBranchesUnready",
            "ServiceUnavailable",
        ];
        assert!(
            control.contains(&m.as_str()),
            "{m} reached CloudWatch under control"
        );
    }
}

/// Check the kind, unit and temporality of the readiness, step duration and attempts metrics;
/// the branches readiness names and the steps step durations name.
fn shapes(all: &[(Vec<KeyValue>, Metric)]) -> (BTreeSet<String>, BTreeSet<String>) {
    let delta = AggregationTemporality::Delta as i32;
    let mut steps = BTreeSet::new();
    let mut branches = BTreeSet::new();
    for (_, m) in all {
        match (m.name.as_str(), m.data.as_ref().unwrap()) {
            ("readyprobe.readiness", metric::Data::Gauge(g)) => {
                assert_eq!(m.unit, "1");
                for pt in &g.data_points {
                    assert_eq!(
                        string_attr(&pt.attributes, "service").as_deref(),
                        Some("orders-db")
                    );
                    branches.extend(string_attr(&pt.attributes, "branch"));
                }
            }
            ("readyprobe.step_duration", metric::Data::Histogram(h)) => {
                assert_eq!((m.unit.as_str(), h.aggregation_temporality), ("ms", delta));
                for pt in &h.data_points {
                    assert!(pt.count > 0 && pt.bucket_counts.iter().sum::<u64>() == pt.count);
                    assert_eq!(pt.bucket_counts.len(), pt.explicit_bounds.len() + 1);
                    steps.extend(string_attr(&pt.attributes, "step"));
                }
            }
            ("readyprobe.attempts", metric::Data::Sum(s)) => {
                assert_eq!(m.unit, "{attempt}");
                assert!(s.is_monotonic && s.aggregation_temporality == delta);
            }
            ("readyprobe.readiness" | "readyprobe.step_duration" | "readyprobe.attempts", d) => {
                panic!("{}: wrong kind {d:?}", m.name)
            }
            _ => {}
        }
    }
    (branches, steps)
}

/// Two real MariaDB branches over TLS, sinks `cloudwatch` (LocalStack) and `otlp`, `metrics =
/// "control"`: the receiver gets every metric (step durations as delta histograms, attempts as
/// delta sums, readiness as a gauge) with the contract's attributes and the prober's resource,
/// and the header secret; CloudWatch gets only the control series; each sink's batches are its
/// own, and the token is nowhere in the evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_gets_every_metric_while_control_limits_cloudwatch() {
    let Some(cw) = cloudwatch_or_skip().await else {
        return;
    };
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let ns = unique_namespace("otlp_gets_every_metric");
    let opts = ConfigOpts {
        namespace: &ns,
        sinks: &["cloudwatch", "otlp"],
        endpoint: Some(ls::endpoint()),
        ..ConfigOpts::default()
    };
    let mut headers = toml::Table::new();
    headers.insert("authorization".into(), secret_env("OTLP_TOKEN"));
    headers.insert("x-tenant".into(), "orders".into());
    let text = p
        .builder(&opts)
        .top("prober_id", "az-a")
        .set("publish", "metrics", "control")
        .set("publish.otlp", "endpoint", receiver.url())
        .set("publish.otlp", "headers", toml::Value::Table(headers))
        .build();
    let cfg = p.dir.path().join("run.toml");
    std::fs::write(&cfg, text).unwrap();
    let wanted = [
        "readyprobe.readiness",
        "readyprobe.step_duration",
        "readyprobe.attempts",
        "readyprobe.heartbeat",
    ];
    let dir = p.dir.path().to_path_buf();
    let run = run_binary(&cfg, 40, &[("OTLP_TOKEN", TOKEN)], &[], |_| {
        let got = names(&receiver.received());
        let sent = evidence_text(&dir)
            .matches("\"sink\":\"cloudwatch\"")
            .count();
        wanted.iter().all(|w| got.contains(*w)) && sent >= 2
    })
    .await;
    let received = receiver.received();
    assert!(!received.is_empty());
    for r in &received {
        assert_eq!(r.headers["authorization"], TOKEN);
        assert_eq!(r.headers["x-tenant"], "orders");
        assert_eq!(r.headers["content-encoding"], "gzip");
    }
    let all = metrics(&received);
    for (res, _) in &all {
        assert_eq!(
            string_attr(res, "service.name").as_deref(),
            Some("readyprobe")
        );
        assert_eq!(
            string_attr(res, "service.instance.id").as_deref(),
            Some("az-a")
        );
        assert_eq!(string_attr(res, "readyprobe.namespace"), Some(ns.clone()));
    }
    let got = names(&received);
    for w in wanted {
        assert!(got.contains(w), "{w} missing from {got:?}");
    }
    let (branches, steps) = shapes(&all);
    assert_eq!(branches, ["primary", "secondary"].map(String::from).into());
    for s in ["connect", "tls", "auth"] {
        assert!(steps.contains(s), "no {s} step duration: {steps:?}");
    }
    // CloudWatch: the control series only.
    assert_control_only(&cw, &ns).await;
    // Every batch is accounted per sink: an otlp batch is never a cloudwatch one.
    let batches = |sink: &str| -> BTreeSet<u64> {
        run.publishes(sink)
            .iter()
            .filter(|p| p["reason"] == "tick")
            .filter_map(|p| p["batch"].as_u64())
            .collect()
    };
    let (o, c) = (batches("otlp"), batches("cloudwatch"));
    assert!(!o.is_empty() && !c.is_empty());
    assert!(o.is_disjoint(&c), "{o:?} {c:?}");
    assert!(
        run.publishes("otlp")
            .iter()
            .all(|p| p["outcome"] == "sent" || p["outcome"] == "abandoned_at_shutdown"),
        "{:?}",
        run.publishes("otlp")
    );
    let all_evidence = evidence_text(p.dir.path());
    assert!(!all_evidence.contains("otlp-T0ken"), "the token leaked");
}

/// The tcp rig of the publish tests, ready from the start, with sinks `emf` and `otlp` to
/// `endpoint` (the OTLP tests add their keys, then write it).
pub(crate) fn otlp_rig(dir: &Path, dns: &DnsServer, port: u16, endpoint: &str) -> ConfigBuilder {
    config_builder(dir, dns, port, "http://127.0.0.1:9")
        .set("readiness", "initial", "ready")
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "otlp".into()]),
        )
        .set("publish.otlp", "endpoint", endpoint)
}

/// The `otlp` publish records of a run.
fn otlp_records(run: &Run) -> Vec<&Json> {
    run.publishes("otlp")
}

/// A 503 then a 200 whose partial success rejected one point: one batch, two tries, sent, one
/// point short, the collector's message in its record and a warning in the log. Then a 400 with a `google.rpc.Status`: failed
/// at once as `publish_rejected`, its message carried, never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_and_a_400_is_not() {
    let receiver = Receiver::start().await;
    receiver.script(&[Mode::Unavailable, Mode::Partial]);
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = otlp_rig(dir.path(), &dns, port, &receiver.url()).write(&dir.path().join("run.toml"));
    let ev = dir.path().join("evidence.jsonl");
    let mut switched = false;
    let run = run_binary(&cfg, 30, &[], &[], |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        if !switched && text.contains("\"sink\":\"otlp\"") && text.contains("\"tries\":2") {
            receiver.set(Mode::BadRequest);
            switched = true;
        }
        switched && text.matches("\"class\":\"publish_rejected\"").count() >= 2
    })
    .await;
    let recs = otlp_records(&run);
    let first = recs
        .iter()
        .find(|p| p["outcome"] != "abandoned_at_shutdown")
        .unwrap();
    assert_eq!(
        (&first["outcome"], &first["tries"]),
        (&"sent".into(), &2.into()),
        "{first}"
    );
    // The retry met a partial success rejecting one point: counted, the rest sent.
    let datums = first["datums"].as_u64().unwrap();
    assert_eq!(first["sent"].as_u64(), Some(datums - 1), "{first}");
    // What the collector said of the point it refused is kept, the batch still sent.
    assert_eq!(
        first["error"].as_str(),
        Some(format!("the collector rejected 1 of {datums} data points: metric name readyprobe.canary not allowed").as_str()),
        "{first}"
    );
    assert!(
        run.log.contains("published in part") && run.log.contains("readyprobe.canary not allowed"),
        "{}",
        run.log
    );
    let statuses: Vec<Option<u16>> = receiver.received().iter().map(|r| r.status).collect();
    assert_eq!(&statuses[..2], [Some(503), Some(200)], "{statuses:?}");
    assert_each_one_try(
        &recs,
        ("class", "publish_rejected"),
        2,
        ("outcome", "failed"),
        "400 Bad Request: bad resource",
    );
}

/// A collector that accepts connections and never answers: each otlp batch ends as
/// `publish_timeout` (its connection closed, nothing left hanging), and CloudWatch (LocalStack) gets the very same tick batches, sent, its
/// `Readiness` datum arriving as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_collector_delays_no_other_sink() {
    let Some(cw) = cloudwatch_or_skip().await else {
        return;
    };
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    // Accepted, read, never answered; each connection the sink closes is counted.
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = closed.clone();
    let _hold = tokio::spawn(async move {
        while let Ok((mut s, _)) = silent.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = vec![0u8; 64 * 1024];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let ns = unique_namespace("a_silent_collector");
    let cfg = config_builder(dir.path(), &dns, port, &ls::endpoint())
        .set("readiness", "initial", "ready")
        .set("publish", "namespace", ns.as_str())
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["emf".into(), "cloudwatch".into(), "otlp".into()]),
        )
        .set("publish.otlp", "endpoint", silent_url.as_str())
        .write(&dir.path().join("run.toml"));
    let ev = dir.path().join("evidence.jsonl");
    // A timed-out try closes its connection at once (no task or socket is left to the silent
    // peer): by the third timeout, at least two were closed while the run went on.
    let mut closed_while_running = 0;
    let run = run_binary(&cfg, 30, &[], &[], |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        closed_while_running = closed.load(std::sync::atomic::Ordering::SeqCst);
        // Tick batches of the otlp sink.
        let timed_out = text
            .lines()
            .filter(|l| {
                l.contains("\"sink\":\"otlp\"")
                    && l.contains("\"reason\":\"tick\"")
                    && l.contains("\"class\":\"publish_timeout\"")
            })
            .count();
        timed_out >= 3 && closed_while_running >= 2
    })
    .await;
    assert!(closed_while_running >= 2, "{closed_while_running} closed");
    let timed_out: Vec<u64> = otlp_records(&run)
        .iter()
        .filter(|p| p["reason"] == "tick" && p["class"] == "publish_timeout")
        .map(|p| p["batch"].as_u64().unwrap())
        .collect();
    assert!(timed_out.len() >= 3, "{:?}", otlp_records(&run));
    let cw_recs = run.publishes("cloudwatch");
    for b in &timed_out {
        let p = cw_recs
            .iter()
            .find(|p| p["batch"].as_u64() == Some(*b))
            .unwrap_or_else(|| panic!("batch {b} never reached CloudWatch: {cw_recs:?}"));
        assert_eq!(p["outcome"], "sent", "{p}");
    }
    wait_for_metric(&cw, &ns, "Readiness").await;
}

/// An `https` collector: with `ssl_ca` its CA, the exports arrive over TLS (the secret header
/// with them); with another CA's, the chain is refused, every batch is `publish_unreachable`
/// naming the certificate problem, and nothing reaches the collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_collector_is_verified() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&["localhost"], &[Ipv4Addr::LOCALHOST.into()]);
    let receiver = Receiver::start_tls(cert.rustls_server_config()).await;
    let other = TestCa::named("another CA");
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let endpoint = format!("https://127.0.0.1:{}", receiver.port);
    for (ca_path, trusted) in [(ca.ca_pem_path(), true), (other.ca_pem_path(), false)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config_builder(dir.path(), &dns, port, "http://127.0.0.1:9")
            .set(
                "publish",
                "sinks",
                toml::Value::Array(vec!["emf".into(), "otlp".into()]),
            )
            .set("publish.otlp", "endpoint", endpoint.as_str())
            .set(
                "publish.otlp",
                "ssl_ca",
                crate::support::config::path(ca_path),
            )
            .set("publish.otlp", "headers", {
                let mut h = toml::Table::new();
                h.insert("authorization".into(), secret_env("OTLP_TOKEN"));
                toml::Value::Table(h)
            })
            .write(&dir.path().join("run.toml"));
        let ev = dir.path().join("evidence.jsonl");
        let before = receiver.received().len();
        let run = run_binary(&cfg, 30, &[("OTLP_TOKEN", TOKEN)], &[], |_| {
            let text = std::fs::read_to_string(&ev).unwrap_or_default();
            let done = if trusted {
                "\"outcome\":\"sent\""
            } else {
                "\"class\":\"publish_unreachable\""
            };
            text.lines()
                .filter(|l| l.contains("\"sink\":\"otlp\"") && l.contains(done))
                .count()
                >= 2
        })
        .await;
        let recs = otlp_records(&run);
        let got = &receiver.received()[before..];
        if trusted {
            assert!(recs.iter().any(|p| p["outcome"] == "sent"), "{recs:?}");
            assert!(!got.is_empty());
            assert!(got.iter().all(|r| r.headers["authorization"] == TOKEN));
        } else {
            assert!(got.is_empty(), "an export crossed an unverified session");
            let failed: Vec<_> = recs.iter().filter(|p| p["outcome"] == "failed").collect();
            assert!(failed.len() >= 2, "{recs:?}");
            for p in failed {
                assert_eq!(p["class"], "publish_unreachable", "{p}");
                let e = p["error"].as_str().unwrap();
                assert!(
                    e.contains("TLS handshake") && e.contains("certificate"),
                    "{e}"
                );
            }
        }
        assert!(!evidence_text(dir.path()).contains("otlp-T0ken"));
    }
}

/// A long token the collector echoes whole, or without `Bearer ` and split by a newline.
const LONG_TOKEN: &str = "Bearer otlp-T0ken-5e7a-91b2-LongerPart-0d1e";

/// A collector quoting the Authorization value, then just the token split by a newline, in the
/// answer that refuses the export: the `publish` records and the log carry `<redacted>` and no
/// part of the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_echoing_the_token_leaks_no_part_of_it() {
    let receiver = Receiver::start().await;
    receiver.script(&[Mode::EchoAuth]);
    receiver.set(Mode::EchoTokenSplit);
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = otlp_rig(dir.path(), &dns, port, &receiver.url())
        .set("publish.otlp", "headers", {
            let mut h = toml::Table::new();
            h.insert("authorization".into(), secret_env("OTLP_TOKEN"));
            toml::Value::Table(h)
        })
        .write(&dir.path().join("run.toml"));
    let ev = dir.path().join("evidence.jsonl");
    let run = run_binary(&cfg, 30, &[("OTLP_TOKEN", LONG_TOKEN)], &[], |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("\"sink\":\"otlp\"") && l.contains("publish_rejected"))
            .count()
            >= 2
    })
    .await;
    let refused: Vec<_> = otlp_records(&run)
        .into_iter()
        .filter(|p| p["class"] == "publish_rejected")
        .collect();
    assert!(refused.len() >= 2, "{:?}", otlp_records(&run));
    for p in &refused[..2] {
        let e = p["error"].as_str().unwrap();
        assert!(e.contains("<redacted>") && e.contains("not allowed"), "{e}");
    }
    let token = LONG_TOKEN.strip_prefix("Bearer ").unwrap();
    let (a, b) = token.split_at(token.len() / 2);
    let evidence = evidence_text(dir.path());
    assert!(run.log.contains("publish_rejected"), "{}", run.log);
    for part in [token, a, b, "T0ken-5e7a", "LongerPart"] {
        assert!(!evidence.contains(part), "{part} in the evidence");
        assert!(!run.log.contains(part), "{part} in the log");
    }
}

/// `count` `Attempts` datums of distinct branches, at now.
fn many_datums(count: usize) -> Vec<readyprobe::sink::Datum> {
    let now = crate::support::fake_cloudwatch::now_ms();
    (0..count)
        .map(|i| readyprobe::sink::Datum {
            metric: "Attempts",
            dimensions: vec![("Service", "s".into()), ("Branch", format!("b{i}"))],
            value: readyprobe::sink::Value::Single(1.0),
            unit: readyprobe::sink::Unit::Count,
            timestamp: now,
            since: Some(now - 60_000),
        })
        .collect()
}

/// The sink itself against the receiver, plain HTTP, 3 tries.
fn sink_to(receiver: &Receiver) -> readyprobe::sink::otlp::OtlpSink {
    use readyprobe::sink::otlp::{Origin, OtlpSettings, OtlpSink};
    let settings = OtlpSettings {
        endpoint: format!("{}/v1/metrics", receiver.url()).parse().unwrap(),
        headers: Vec::new(),
        timeout: Duration::from_secs(10),
        max_tries: 3,
        tls: None,
        interval: Duration::from_secs(60),
        redactor: OtlpSettings::redactor_of(&[]),
    };
    let origin = Origin {
        prober_id: "p1".into(),
        namespace: "Readyprobe".into(),
    };
    OtlpSink::new(Ok(std::sync::Arc::new(settings)), origin)
}

/// 5,000 datums go as three requests of at most 2,000 points; the second one meets a 503, and
/// the retry of the batch resumes there: every point arrives once, and `sent` adds them up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_is_split_and_a_retry_resumes() {
    use readyprobe::sink::Sink;
    use readyprobe::sink::otlp::MAX_POINTS_PER_REQUEST;
    let receiver = Receiver::start().await;
    receiver.script(&[Mode::Accept, Mode::Unavailable]);
    let mut sink = sink_to(&receiver);
    let datums = many_datums(5_000);
    let e = sink.send(&datums).await.unwrap_err();
    assert_eq!(e.class, readyprobe::record::PublishFailureClass::Publish5xx);
    assert!(sink.retryable(&e));
    assert_eq!(sink.send(&datums).await.unwrap(), 5_000);
    assert_eq!(sink.settle(), None);
    let got = receiver.received();
    let points = |r: &Received| -> usize {
        metrics(std::slice::from_ref(r))
            .iter()
            .map(|(_, m)| match m.data.as_ref().unwrap() {
                metric::Data::Sum(s) => s.data_points.len(),
                other => panic!("{other:?}"),
            })
            .sum()
    };
    let shape: Vec<(Option<u16>, usize)> = got.iter().map(|r| (r.status, points(r))).collect();
    assert_eq!(
        shape,
        [
            (Some(200), MAX_POINTS_PER_REQUEST),
            (Some(503), MAX_POINTS_PER_REQUEST),
            (Some(200), MAX_POINTS_PER_REQUEST),
            (Some(200), 5_000 - 2 * MAX_POINTS_PER_REQUEST),
        ]
    );
}

/// An answer over the 64 KiB cap is judged by its status: a 200 is an accepted export (sent,
/// never retried), a 503 with a large page is `publish_5xx` (retried), neither is
/// `publish_unreachable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_is_judged_by_its_status() {
    use readyprobe::record::PublishFailureClass as C;
    use readyprobe::sink::Sink;
    let receiver = Receiver::start().await;
    let mut sink = sink_to(&receiver);
    let datums = many_datums(3);
    receiver.set(Mode::HugeUnavailable);
    let e = sink.send(&datums).await.unwrap_err();
    assert_eq!(e.class, C::Publish5xx, "{}", e.message);
    assert!(sink.retryable(&e));
    sink.settle();
    receiver.set(Mode::HugeAccept);
    assert_eq!(sink.send(&datums).await.unwrap(), 3);
    let statuses: Vec<_> = receiver.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Some(503), Some(200)]);
}

/// A 500 is `publish_5xx` like any 5xx (one class rule for every sink), but OTLP/HTTP says not
/// to retry it: one try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_classed_5xx_and_not_retried() {
    use readyprobe::sink::Sink;
    let receiver = Receiver::start().await;
    receiver.set(Mode::InternalError);
    let mut sink = sink_to(&receiver);
    let e = sink.send(&many_datums(3)).await.unwrap_err();
    assert_eq!(e.class, readyprobe::record::PublishFailureClass::Publish5xx);
    assert!(!sink.retryable(&e), "{}", e.message);
}
