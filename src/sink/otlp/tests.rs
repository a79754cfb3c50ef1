//! The OTLP encoder against exact expected output, and the judge of a collector's answers.

use super::*;
use crate::datum::{BranchTick, publish_failure_datums, tick_datums};
use expect_test::expect;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use std::fmt::Write;

fn origin() -> Origin {
    Origin {
        prober_id: "az-a".into(),
        namespace: "Readyprobe".into(),
    }
}

fn attrs(a: &[KeyValue]) -> String {
    a.iter()
        .map(
            |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => format!("{}={s}", kv.key),
                other => format!("{}={other:?}", kv.key),
            },
        )
        .collect::<Vec<_>>()
        .join(",")
}

fn number(p: &NumberDataPoint) -> String {
    let v = match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v.to_string(),
        other => format!("{other:?}"),
    };
    format!(
        "  {{{}}} start={} time={} {v}",
        attrs(&p.attributes),
        p.start_time_unix_nano,
        p.time_unix_nano
    )
}

/// The request as one line per resource attribute, metric and point.
fn render(r: &ExportMetricsServiceRequest) -> String {
    let mut out = String::new();
    for rm in &r.resource_metrics {
        let res = rm.resource.as_ref().map(|r| attrs(&r.attributes));
        writeln!(out, "resource {}", res.unwrap_or_default()).unwrap();
        for sm in &rm.scope_metrics {
            let scope = sm.scope.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            writeln!(out, "scope {scope}").unwrap();
            for m in &sm.metrics {
                match m.data.as_ref().unwrap() {
                    metric::Data::Gauge(g) => {
                        writeln!(out, "{} [{}] gauge", m.name, m.unit).unwrap();
                        for p in &g.data_points {
                            writeln!(out, "{}", number(p)).unwrap();
                        }
                    }
                    metric::Data::Sum(s) => {
                        let t = AggregationTemporality::try_from(s.aggregation_temporality);
                        let mono = s.is_monotonic;
                        writeln!(out, "{} [{}] sum {t:?} monotonic={mono}", m.name, m.unit)
                            .unwrap();
                        for p in &s.data_points {
                            writeln!(out, "{}", number(p)).unwrap();
                        }
                    }
                    metric::Data::Histogram(h) => {
                        let t = AggregationTemporality::try_from(h.aggregation_temporality);
                        writeln!(out, "{} [{}] histogram {t:?}", m.name, m.unit).unwrap();
                        for p in &h.data_points {
                            writeln!(
                                out,
                                "  {{{}}} start={} time={} count={} sum={:?} min={:?} max={:?} buckets={:?} bounds={}",
                                attrs(&p.attributes),
                                p.start_time_unix_nano,
                                p.time_unix_nano,
                                p.count,
                                p.sum,
                                p.min,
                                p.max,
                                p.bucket_counts,
                                p.explicit_bounds.len()
                            )
                            .unwrap();
                        }
                    }
                    other => writeln!(out, "{} unexpected {other:?}", m.name).unwrap(),
                }
            }
        }
    }
    out
}

/// A tick of one branch with TLS, two steps and a failed attempt, a non-finite success rate
/// (skipped), and a publish failure count: every kind of metric the sink sends.
#[test]
fn a_tick_encodes_to_the_expected_otlp_metrics() {
    let tick = BranchTick {
        branch: "primary".into(),
        readiness: Some(1.0),
        is_ready: true,
        is_known: true,
        success_rate: Some(f64::NAN),
        attempts: 3,
        failed: 1,
        step_durations: vec![("connect", vec![0.5, 12.0, 12.0]), ("tls", vec![30.0])],
        cert_not_after: Some(120_000 + 10 * 86_400_000),
    };
    let mut datums = tick_datums("orders-db", &[tick], 120_000);
    datums.extend(publish_failure_datums(
        "orders-db",
        &[(PublishFailureClass::PublishTimeout, 2)],
        120_000,
    ));
    // The previous tick was at 75 s (this one is late): the counts' span starts there, not one
    // interval (60 s) back.
    crate::datum::counted_since(&mut datums, 75_000);
    let (req, points) = encode(&origin(), 60_000, &datums);
    assert_eq!(points, datums.len() - 1, "the NaN success rate is skipped");
    expect![[r#"
        resource service.name=readyprobe,service.instance.id=az-a,readyprobe.namespace=Readyprobe
        scope readyprobe
        readyprobe.readiness [1] gauge
          {service=orders-db,branch=primary} start=0 time=120000000000 1
        readyprobe.attempts [{attempt}] sum Ok(Delta) monotonic=true
          {service=orders-db,branch=primary} start=75000000000 time=120000000000 3
        readyprobe.failed_attempts [{attempt}] sum Ok(Delta) monotonic=true
          {service=orders-db,branch=primary} start=75000000000 time=120000000000 1
        readyprobe.certificate_expiry_days [d] gauge
          {service=orders-db,branch=primary} start=0 time=120000000000 10
        readyprobe.step_duration [ms] histogram Ok(Delta)
          {service=orders-db,branch=primary,step=connect} start=75000000000 time=120000000000 count=3 sum=Some(24.5) min=Some(0.5) max=Some(12.0) buckets=[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] bounds=14
          {service=orders-db,branch=primary,step=tls} start=75000000000 time=120000000000 count=1 sum=Some(30.0) min=Some(30.0) max=Some(30.0) buckets=[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0] bounds=14
        readyprobe.heartbeat [1] gauge
          {service=orders-db} start=0 time=120000000000 1
        readyprobe.both_branches_unready [1] gauge
          {service=orders-db} start=0 time=120000000000 0
        readyprobe.publish_failures [{batch}] sum Ok(Delta) monotonic=true
          {service=orders-db,class=publish_timeout} start=75000000000 time=120000000000 2
    "#]]
    .assert_eq(&render(&req));
    // What goes on the wire decodes back to the same request.
    let back = ExportMetricsServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back, req);
}

#[test]
fn names_and_units_follow_the_contract() {
    let got: Vec<(String, &str)> = contract::METRICS
        .iter()
        .map(|m| (metric_name(m.name), unit_of(m.name, m.unit)))
        .collect();
    let want = [
        ("readyprobe.readiness", "1"),
        ("readyprobe.success_rate", "%"),
        ("readyprobe.attempts", "{attempt}"),
        ("readyprobe.failed_attempts", "{attempt}"),
        ("readyprobe.step_duration", "ms"),
        ("readyprobe.certificate_expiry_days", "d"),
        ("readyprobe.heartbeat", "1"),
        ("readyprobe.both_branches_unready", "1"),
        ("readyprobe.publish_failures", "{batch}"),
        ("readyprobe.service_unavailable", "1"),
        ("readyprobe.store_sync_failures", "{sync}"),
        ("readyprobe.selected_branch", "1"),
        ("readyprobe.stable_name_success", "1"),
    ];
    let want: Vec<(String, &str)> = want.iter().map(|(n, u)| (n.to_string(), *u)).collect();
    assert_eq!(got, want);
}

#[test]
fn only_non_finite_datums_gives_no_point() {
    let d = crate::datum::transition_datum("s", "primary", f64::INFINITY, 1);
    let (req, points) = encode(&origin(), 60_000, &[d]);
    assert_eq!(points, 0);
    assert!(req.resource_metrics[0].scope_metrics[0].metrics.is_empty());
}

fn protobuf() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    h
}

fn partial(rejected: i64) -> Vec<u8> {
    ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: rejected,
            error_message: "metric name not allowed".into(),
        }),
    }
    .encode_to_vec()
}

/// Each answer and what it becomes: how many points were taken, or the class (and whether the
/// sink queue retries it).
#[test]
fn answers_are_judged_by_status_and_partial_success() {
    use PublishFailureClass as C;
    let ok = |status: u16, body: &[u8], headers: &http::HeaderMap| {
        judge(
            http::StatusCode::from_u16(status).unwrap(),
            headers,
            body,
            10,
        )
    };
    let none = http::HeaderMap::new();
    assert_eq!(ok(200, b"", &none).unwrap(), (10, None));
    assert_eq!(ok(200, &partial(0), &protobuf()).unwrap(), (10, None));
    // Some rejected: the rest counts as sent, and what the collector said is kept.
    let (taken, note) = ok(200, &partial(3), &protobuf()).unwrap();
    assert_eq!(taken, 7);
    assert_eq!(
        note.as_deref(),
        Some("the collector rejected 3 of 10 data points: metric name not allowed")
    );
    // A negative rejected count is no collector's answer (the probe kind says so too).
    let negative = ok(200, &partial(-1), &protobuf()).unwrap_err();
    assert_eq!(negative.class, C::PublishRejected);
    assert!(
        negative.message.contains("negative"),
        "{}",
        negative.message
    );
    let all = ok(200, &partial(10), &protobuf()).unwrap_err();
    assert_eq!(all.class, C::PublishRejected);
    assert!(
        all.message.contains("metric name not allowed"),
        "{}",
        all.message
    );
    let mut html = http::HeaderMap::new();
    html.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/html"),
    );
    assert_eq!(
        ok(200, b"<html>login</html>", &html).unwrap_err().class,
        C::PublishRejected
    );
    // google.rpc.Status { code: 3, message: "bad resource" }, by hand.
    let mut status = vec![0x08, 0x03, 0x12, 12];
    status.extend_from_slice(b"bad resource");
    let e = ok(400, &status, &protobuf()).unwrap_err();
    assert_eq!(e.class, C::PublishRejected);
    assert!(!e.retryable());
    assert!(
        e.message.contains("400 Bad Request: bad resource"),
        "{}",
        e.message
    );
    // One class rule for every sink (any 5xx is `publish_5xx`); the retry is OTLP's own.
    for (s, class, retry) in [
        (429, C::PublishThrottled, true),
        (502, C::Publish5xx, true),
        (503, C::Publish5xx, true),
        (504, C::Publish5xx, true),
        (408, C::PublishHttp408, true),
        (500, C::Publish5xx, false),
        (501, C::Publish5xx, false),
        (505, C::Publish5xx, false),
        (404, C::PublishRejected, false),
        (413, C::PublishRejected, false),
        (401, C::PublishCredentials, false),
        (403, C::PublishCredentials, false),
    ] {
        let status = http::StatusCode::from_u16(s).unwrap();
        let e = ok(s, b"", &none).unwrap_err();
        assert_eq!(e.class, class, "{s}");
        assert_eq!(e.retryable() && retry_status(status), retry, "{s}");
    }
}

#[test]
fn secret_header_values_are_redacted_from_errors() {
    let h = SinkHeader {
        name: http::HeaderName::from_static("authorization"),
        value: SecretCell::fixed("Bearer s3cr3t-token".into()),
        secret: true,
    };
    assert_eq!(format!("{h:?}"), "authorization: <redacted>");
    let e = SinkError {
        message: "the collector answered 400: token Bearer s3cr3t-token is not allowed".into(),
        class: PublishFailureClass::PublishRejected,
    };
    let r = OtlpSettings::redactor_of(&[h]);
    let e = redact(e, &r);
    assert!(!e.message.contains("s3cr3t"), "{}", e.message);
    assert!(e.message.contains("<redacted>"));
}

/// A collector quoting the token without its scheme, in another case, or split by a newline:
/// no part of it is left.
#[test]
fn parts_of_a_secret_header_value_are_redacted_from_errors() {
    let token = "otlp-T0ken-5e7a-91b2-LongerPart-0d1e";
    let h = SinkHeader {
        name: http::HeaderName::from_static("authorization"),
        value: SecretCell::fixed(format!("Bearer {token}")),
        secret: true,
    };
    let r = OtlpSettings::redactor_of(&[h]);
    let (a, b) = token.split_at(token.len() / 2);
    for said in [
        format!("token {token} is not allowed"),
        format!("token {} is not allowed", token.to_uppercase()),
        format!("token {a}\n{b} is not allowed"),
    ] {
        let e = SinkError {
            message: said.clone(),
            class: PublishFailureClass::PublishRejected,
        };
        let out = redact(e, &r).message;
        for part in [a, b, "T0ken-5e7a", "LongerPart"] {
            assert!(
                !out.to_lowercase().contains(&part.to_lowercase()),
                "{said} -> {out}"
            );
        }
        assert!(out.contains("<redacted>"), "{out}");
    }
}

/// The histogram's bounds are the contract's buckets (the `/metrics` ones), in ms.
#[test]
fn step_duration_bounds_are_the_contracts_in_ms() {
    let ms = step_duration_bounds_ms();
    assert_eq!(ms.len(), crate::contract::STEP_DURATION_BUCKETS.len());
    assert_eq!((ms[0], ms[1], ms[ms.len() - 1]), (1.0, 2.5, 30_000.0));
    assert!(ms.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_refusals_retry_after_in_seconds_is_read() {
    use http::StatusCode as S;
    let with = |v: &str| {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_str(v).unwrap(),
        );
        h
    };
    let secs = |s| Some(std::time::Duration::from_secs(s));
    assert_eq!(retry_after(S::TOO_MANY_REQUESTS, &with("30")), secs(30));
    assert_eq!(retry_after(S::SERVICE_UNAVAILABLE, &with(" 2 ")), secs(2));
    assert_eq!(
        retry_after(S::TOO_MANY_REQUESTS, &with("99999999")),
        secs(3600)
    );
    assert_eq!(retry_after(S::OK, &with("30")), None);
    let date = with("Wed, 21 Oct 2026 07:28:00 GMT");
    assert_eq!(retry_after(S::TOO_MANY_REQUESTS, &date), None);
    assert_eq!(retry_after(S::TOO_MANY_REQUESTS, &with("-1")), None);
    assert_eq!(
        retry_after(S::TOO_MANY_REQUESTS, &http::HeaderMap::new()),
        None
    );
}
