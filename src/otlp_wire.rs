//! What the `otlp` probe kind and the `otlp` sink share of OTLP/HTTP, pure: a string attribute
//! ([`kv`]) and the one reading of a collector's answer to an export ([`verdict`]), which each
//! maps to its own classes (a probe's `FailureClass`, a sink's `PublishFailureClass`).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

/// A string attribute.
pub fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// The body of a failed OTLP/HTTP export (`google.rpc.Status`), as far as it is read here.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// What a collector's answer to an export says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A non-2xx: the export was refused; the `google.rpc.Status` message, if the body held one.
    Refused {
        status: http::StatusCode,
        message: Option<String>,
    },
    /// A 2xx that is no OTLP export response (`why`: what it is instead, e.g. `with
    /// content-type "text/html", not an OTLP protobuf answer`): nothing says the points were
    /// taken.
    NotOtlp {
        status: http::StatusCode,
        why: String,
    },
    /// A 2xx export response: `rejected` data points refused (0 or more), with the collector's
    /// message when it gave one.
    Accepted {
        rejected: u64,
        message: Option<String>,
    },
}

/// Read the answer to an export: status first (a refusal is a refusal whatever its body), then
/// a 2xx's body: empty, or an `application/x-protobuf` export response whose rejected count is
/// not negative.
pub fn verdict(status: http::StatusCode, headers: &http::HeaderMap, body: &[u8]) -> Verdict {
    let non_empty = |s: String| Some(s).filter(|m| !m.is_empty());
    if !status.is_success() {
        let message = RpcStatus::decode(body)
            .ok()
            .and_then(|s| non_empty(s.message));
        return Verdict::Refused { status, message };
    }
    let not_otlp = |why: String| Verdict::NotOtlp { status, why };
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !body.is_empty() && !content_type.is_none_or(|v| v.starts_with("application/x-protobuf")) {
        return not_otlp(format!(
            "with content-type {content_type:?}, not an OTLP protobuf answer"
        ));
    }
    let resp = match ExportMetricsServiceResponse::decode(body) {
        Ok(r) => r,
        Err(e) => return not_otlp(format!("with a body that is not an export response ({e})")),
    };
    let Some(p) = resp.partial_success else {
        return Verdict::Accepted {
            rejected: 0,
            message: None,
        };
    };
    match u64::try_from(p.rejected_data_points) {
        Ok(rejected) => Verdict::Accepted {
            rejected,
            message: non_empty(p.error_message),
        },
        Err(_) => not_otlp("with a negative rejected count".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;

    fn partial(rejected: i64, message: &str) -> Vec<u8> {
        ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: rejected,
                error_message: message.into(),
            }),
        }
        .encode_to_vec()
    }

    /// Every shape of answer, read once for the probe and the sink alike.
    #[test]
    fn answers_are_read_status_first() {
        let ok = http::StatusCode::OK;
        let mut pb = http::HeaderMap::new();
        pb.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        let accepted = |rejected, message: Option<&str>| Verdict::Accepted {
            rejected,
            message: message.map(str::to_string),
        };
        assert_eq!(verdict(ok, &pb, b""), accepted(0, None));
        assert_eq!(verdict(ok, &http::HeaderMap::new(), b""), accepted(0, None));
        assert_eq!(verdict(ok, &pb, &partial(0, "")), accepted(0, None));
        assert_eq!(verdict(ok, &pb, &partial(2, "no")), accepted(2, Some("no")));
        // A negative count is no answer a collector gives: neither a success nor a refusal.
        assert!(matches!(
            verdict(ok, &pb, &partial(-1, "")),
            Verdict::NotOtlp { why, .. } if why.contains("negative")
        ));
        let mut html = http::HeaderMap::new();
        html.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/html"),
        );
        assert!(matches!(
            verdict(ok, &html, b"<html>"),
            Verdict::NotOtlp { why, .. } if why.contains("\"text/html\"")
        ));
        assert!(matches!(
            verdict(ok, &pb, b"\xff\xff\xff"),
            Verdict::NotOtlp { why, .. } if why.contains("not an export response")
        ));
        // A refusal is read by its status, whatever its body says.
        let mut status = vec![0x08, 0x03, 0x12, 12];
        status.extend_from_slice(b"bad resource");
        let bad = http::StatusCode::BAD_REQUEST;
        assert_eq!(
            verdict(bad, &pb, &status),
            Verdict::Refused {
                status: bad,
                message: Some("bad resource".into())
            }
        );
        let unavailable = http::StatusCode::SERVICE_UNAVAILABLE;
        assert_eq!(
            verdict(unavailable, &html, &partial(0, "")),
            Verdict::Refused {
                status: unavailable,
                message: None
            }
        );
    }
}
