//! The `otlp` probe kind: an OTLP/HTTP protobuf export of one marked gauge data point to an
//! OpenTelemetry ingestion gateway, using the official protobuf types. Success needs a 2xx
//! **and** no partial-success rejection in the response body.

use crate::failure::{FailureClass, Step};
use crate::otlp_wire::{Verdict, kv, verdict};
use http_body_util::Full;
use hyper::body::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

pub use super::attempt::OtlpObservation;
use super::connect::Connected;
use super::ctx::{StepCtx, StepError, StepFailure};
use super::http_client::{Connection, Vars, apply_headers, fail, host_header, tls_or_plain};
pub use super::target::OtlpTarget;

/// Name of the exported gauge.
pub const CANARY_METRIC: &str = "readyprobe.canary";
/// Attribute carrying the attempt's marker.
pub const MARKER_ATTRIBUTE: &str = "readyprobe.marker";

/// The export request for one attempt (pure): one gauge data point, value = the sequence
/// number, carrying the marker, branch and prober as attributes.
pub fn export_request(v: &Vars<'_>, time_unix_nano: u64) -> ExportMetricsServiceRequest {
    let point = NumberDataPoint {
        attributes: vec![
            kv(MARKER_ATTRIBUTE, v.marker),
            kv("readyprobe.branch", v.branch),
            kv("readyprobe.prober_id", v.prober_id),
        ],
        time_unix_nano,
        value: Some(number_data_point::Value::AsInt(v.seq as i64)),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "readyprobe")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: CANARY_METRIC.into(),
                    description: "readyprobe marked canary data point".into(),
                    unit: "1".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![point],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Run `tls` (when enabled) and `write` (the export and its response checks).
///
/// # Errors
/// The failing step and its class.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    t: &OtlpTarget,
    Connected { stream, .. }: Connected,
) -> Result<(), StepFailure> {
    ctx.learned.otlp = Some(OtlpObservation::default());
    let time_unix_nano = u64::try_from(ctx.clock.now_ms()).unwrap_or(0) * 1_000_000;
    let io = tls_or_plain(ctx, stream).await?;
    let host = host_header(ctx.endpoint(), ctx.probe.branch.port, ctx.tls.is_some());
    let v = Vars::of(ctx.probe, &ctx.marker, ctx.seq);
    let observed = ctx.learned.otlp.get_or_insert_default();
    ctx.steps
        .run(Step::Write, async {
            let mut conn = Connection::open(io).await?;
            let body = export_request(&v, time_unix_nano).encode_to_vec();
            let mut req = http::Request::builder()
                .method(http::Method::POST)
                .uri(&t.settings.path)
                .header(http::header::HOST, &host)
                .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                .header(http::header::USER_AGENT, super::http_client::USER_AGENT)
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| {
                    fail(
                        FailureClass::ProtocolError,
                        format!("cannot build the request: {e}"),
                    )
                })?;
            apply_headers(&mut req, &t.headers, &v)?;
            let (status, headers, body) = conn.send(req).await?;
            check_answer(&t.settings.path, status, &headers, &body, observed)
        })
        .await
}

/// Check the gateway's answer to the export (pure): a 2xx carrying an export response with no
/// rejected data point. What the gateway said goes into `observed` either way.
///
/// # Errors
/// `http_status` for a non-2xx, `otlp_rejected` for a partial success that rejected data,
/// `protocol_error` for an answer that is not an OTLP export response.
fn check_answer(
    path: &str,
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
    observed: &mut OtlpObservation,
) -> Result<(), StepError> {
    observed.status = Some(status.as_u16());
    match verdict(status, headers, body) {
        Verdict::Refused { message, .. } => {
            let said = message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            observed.message = message;
            Err(fail(
                FailureClass::HttpStatus,
                format!("POST {path} answered {status}{said}"),
            ))
        }
        // A 2xx must carry an export response (an empty body is an empty response); anything
        // else (an HTML page, JSON, garbage, a negative rejected count) is not an OTLP
        // gateway's answer.
        Verdict::NotOtlp { why, .. } => Err(fail(
            FailureClass::ProtocolError,
            format!("answered {status} {why}"),
        )),
        Verdict::Accepted { rejected, message } => {
            observed.message.clone_from(&message);
            if rejected == 0 {
                return Ok(());
            }
            observed.rejected = Some(i64::try_from(rejected).unwrap_or(i64::MAX));
            Err(fail(
                FailureClass::OtlpRejected,
                format!(
                    "the gateway accepted the request but rejected {rejected} data point(s): {}",
                    message.as_deref().unwrap_or("(no message)")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value;

    #[test]
    fn export_carries_the_marker() {
        let v = Vars {
            marker: "m1",
            seq: 3,
            prober_id: "p",
            branch: "primary",
            endpoint: "otel.example",
        };
        let bytes = export_request(&v, 42).encode_to_vec();
        let back = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
        let m = &back.resource_metrics[0].scope_metrics[0].metrics[0];
        assert_eq!(m.name, CANARY_METRIC);
        let Some(metric::Data::Gauge(g)) = &m.data else {
            panic!("gauge")
        };
        let p = &g.data_points[0];
        assert_eq!(p.time_unix_nano, 42);
        assert_eq!(p.attributes[0].key, MARKER_ATTRIBUTE);
        assert_eq!(
            p.attributes[0].value.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("m1".into()))
        );
    }
}
