//! The `otlp` sink: the contract's datums as OTLP metrics, POSTed as OTLP/HTTP protobuf to a
//! collector, with the pure encoder ([`encode`]) kept apart from sending ([`OtlpSink`]).
//!
//! It always gets the full set of datums (`publish.metrics` limits `cloudwatch` and `emf`
//! only). One connection per try (a batch a tick), the try bounded by `[publish.otlp] timeout`,
//! the answer read up to [`MAX_RESPONSE_BYTES`]; retries, queueing and `publish` records are the
//! sink queue's ([`super::SinkQueue`]).

use super::{Datum, SendFuture, Sink, SinkError, Value};
use crate::contract::{self, Unit};
use crate::readiness::Millis;
use crate::record::PublishFailureClass;
use crate::secrets::SecretCell;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use rustls::ClientConfig;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// The bucket bounds of the `readyprobe.step_duration` histogram, ms: a DNS answer or a local
/// connect (1 ms) up to a step at its timeout (10 s).
pub const STEP_DURATION_BOUNDS_MS: [f64; 13] = [
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0,
];

/// Largest answer body read from the collector, bytes (a real one is empty or a few hundred).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The `User-Agent` of every export.
const USER_AGENT: &str = concat!("readyprobe/", env!("CARGO_PKG_VERSION"));

/// The metric names of the contract sent as per-tick counts: a monotonic `Sum` with delta
/// temporality (each datum counts what happened since the previous tick).
const DELTA_COUNTS: [&str; 4] = [
    contract::ATTEMPTS.name,
    contract::FAILED_ATTEMPTS.name,
    contract::PUBLISH_FAILURES.name,
    contract::STORE_SYNC_FAILURES.name,
];

/// `readyprobe.` and the snake_case of a contract name: `StepDuration` → `readyprobe.step_duration`.
pub fn metric_name(contract_name: &str) -> String {
    let mut out = String::from("readyprobe.");
    for (i, c) in contract_name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The UCUM unit of a contract metric: `ms`, `%`, `d` (days), an annotation for counts of
/// things (`{attempt}`, `{batch}`, `{sync}`), else `1`.
pub fn unit_of(contract_name: &str, unit: Unit) -> &'static str {
    match (contract_name, unit) {
        (_, Unit::Milliseconds) => "ms",
        (_, Unit::Percent) => "%",
        (n, _) if n == contract::CERTIFICATE_EXPIRY_DAYS.name => "d",
        (n, _) if n == contract::ATTEMPTS.name || n == contract::FAILED_ATTEMPTS.name => {
            "{attempt}"
        }
        (n, _) if n == contract::PUBLISH_FAILURES.name => "{batch}",
        (n, _) if n == contract::STORE_SYNC_FAILURES.name => "{sync}",
        _ => "1",
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// Who sends: the resource of every export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `service.instance.id`: the prober id.
    pub prober_id: String,
    /// `readyprobe.namespace`: the CloudWatch namespace of the datums.
    pub namespace: String,
}

/// The bucket counts of `samples` over [`STEP_DURATION_BOUNDS_MS`] (a value equal to a bound
/// falls in that bound's bucket, as OTLP says: upper bounds are inclusive).
fn bucket_counts(samples: &[f64]) -> Vec<u64> {
    let mut counts = vec![0u64; STEP_DURATION_BOUNDS_MS.len() + 1];
    for s in samples {
        let i = STEP_DURATION_BOUNDS_MS
            .iter()
            .position(|b| s <= b)
            .unwrap_or(STEP_DURATION_BOUNDS_MS.len());
        counts[i] += 1;
    }
    counts
}

/// ms since the epoch as ns (0 before the epoch).
fn nanos(ms: Millis) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

/// The data of one datum, as an empty metric of its kind with one point.
fn data_of(d: &Datum, interval_ms: Millis) -> metric::Data {
    let attributes: Vec<KeyValue> = d
        .dimensions
        .iter()
        .map(|(k, v)| kv(&k.to_ascii_lowercase(), v))
        .collect();
    let time_unix_nano = nanos(d.timestamp);
    let start_time_unix_nano = nanos(d.timestamp - interval_ms);
    let delta = AggregationTemporality::Delta as i32;
    match &d.value {
        Value::Samples(s) => {
            let point = HistogramDataPoint {
                attributes,
                start_time_unix_nano,
                time_unix_nano,
                count: s.len() as u64,
                sum: Some(s.iter().sum()),
                bucket_counts: bucket_counts(s),
                explicit_bounds: STEP_DURATION_BOUNDS_MS.to_vec(),
                min: s.iter().copied().reduce(f64::min),
                max: s.iter().copied().reduce(f64::max),
                ..Default::default()
            };
            metric::Data::Histogram(Histogram {
                data_points: vec![point],
                aggregation_temporality: delta,
            })
        }
        Value::Single(v) if DELTA_COUNTS.contains(&d.metric) => {
            let point = NumberDataPoint {
                attributes,
                start_time_unix_nano,
                time_unix_nano,
                value: Some(number_data_point::Value::AsDouble(*v)),
                ..Default::default()
            };
            metric::Data::Sum(Sum {
                data_points: vec![point],
                aggregation_temporality: delta,
                is_monotonic: true,
            })
        }
        Value::Single(v) => {
            let point = NumberDataPoint {
                attributes,
                time_unix_nano,
                value: Some(number_data_point::Value::AsDouble(*v)),
                ..Default::default()
            };
            metric::Data::Gauge(Gauge {
                data_points: vec![point],
            })
        }
    }
}

/// Add the one point of `from` to `into` (both of one metric, so of one kind).
fn merge(into: &mut metric::Data, from: metric::Data) {
    match (into, from) {
        (metric::Data::Gauge(a), metric::Data::Gauge(b)) => a.data_points.extend(b.data_points),
        (metric::Data::Sum(a), metric::Data::Sum(b)) => a.data_points.extend(b.data_points),
        (metric::Data::Histogram(a), metric::Data::Histogram(b)) => {
            a.data_points.extend(b.data_points);
        }
        _ => {}
    }
}

/// The export request of `datums` (pure) and how many data points it holds: a metric per
/// contract name (in order of first appearance), a point per finite datum (non-finite ones are
/// skipped), `interval_ms` the span a delta count covers (the publish interval).
pub fn encode(
    origin: &Origin,
    interval_ms: Millis,
    datums: &[Datum],
) -> (ExportMetricsServiceRequest, usize) {
    let mut metrics: Vec<Metric> = Vec::new();
    let mut points = 0;
    for d in datums.iter().filter(|d| d.is_finite()) {
        let data = data_of(d, interval_ms);
        points += 1;
        let name = metric_name(d.metric);
        match metrics.iter_mut().find(|m| m.name == name) {
            Some(Metric {
                data: Some(into), ..
            }) => merge(into, data),
            _ => metrics.push(Metric {
                name,
                unit: unit_of(d.metric, d.unit).into(),
                data: Some(data),
                ..Default::default()
            }),
        }
    }
    let resource = Resource {
        attributes: vec![
            kv("service.name", "readyprobe"),
            kv("service.instance.id", &origin.prober_id),
            kv("readyprobe.namespace", &origin.namespace),
        ],
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: "readyprobe".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (request, points)
}

/// One request header of the sink; a secret one's value never reaches a log or an error.
#[derive(Clone)]
pub struct SinkHeader {
    /// The header's name.
    pub name: http::HeaderName,
    /// Its value, read at each try (a Secrets Manager one follows refreshes).
    pub value: SecretCell,
    /// Whether the value came from a secret reference.
    pub secret: bool,
}

impl std::fmt::Debug for SinkHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.secret {
            write!(f, "{}: <redacted>", self.name)
        } else {
            write!(f, "{}: {:?}", self.name, &*self.value.get())
        }
    }
}

/// Where and how the sink sends, shared by the sinks of every namespace.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    /// The export URL.
    pub endpoint: http::Uri,
    /// Request headers.
    pub headers: Vec<SinkHeader>,
    /// Timeout of one try.
    pub timeout: Duration,
    /// Tries per batch.
    pub max_tries: u32,
    /// The TLS client configuration of an `https` endpoint.
    pub tls: Option<Arc<ClientConfig>>,
    /// The publish interval, the span of a delta count.
    pub interval: Duration,
}

/// The `otlp` sink of one namespace. Built broken (every send fails with its reason) when its
/// settings could not be prepared: a header secret or the CA bundle unavailable.
#[derive(Debug)]
pub struct OtlpSink {
    settings: Result<Arc<OtlpSettings>, SinkError>,
    origin: Origin,
    /// The `Retry-After` of the last answer, if a refusal carried one.
    retry_after: Option<Duration>,
}

impl OtlpSink {
    /// The sink of `origin`'s namespace, or one whose every send fails with `broken`.
    pub fn new(settings: Result<Arc<OtlpSettings>, SinkError>, origin: Origin) -> Self {
        OtlpSink {
            settings,
            origin,
            retry_after: None,
        }
    }
}

impl Sink for OtlpSink {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn max_tries(&self) -> u32 {
        self.settings.as_ref().map_or(1, |s| s.max_tries)
    }

    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a> {
        Box::pin(async move {
            let s = match &self.settings {
                Ok(s) => s.clone(),
                Err(e) => {
                    return Err(SinkError {
                        message: e.message.clone(),
                        class: e.class,
                    });
                }
            };
            let interval_ms = Millis::try_from(s.interval.as_millis()).unwrap_or(Millis::MAX);
            let (request, points) = encode(&self.origin, interval_ms, datums);
            if points == 0 {
                return Ok(0);
            }
            let body = Bytes::from(request.encode_to_vec());
            let answer = tokio::time::timeout(s.timeout, export(&s, body)).await;
            let answer = answer.unwrap_or_else(|_| {
                Err(SinkError {
                    message: format!(
                        "POST {}: no answer within {}",
                        s.endpoint,
                        humantime::format_duration(s.timeout)
                    ),
                    class: PublishFailureClass::PublishTimeout,
                })
            });
            self.retry_after = None;
            let (status, headers, body) = answer.map_err(|e| redact(e, &s.headers))?;
            self.retry_after = retry_after(status, &headers);
            judge(status, &headers, &body, points).map_err(|e| redact(e, &s.headers))
        })
    }
}

/// `e` with every secret header value in its message replaced: a collector may quote a request.
fn redact(mut e: SinkError, headers: &[SinkHeader]) -> SinkError {
    for h in headers.iter().filter(|h| h.secret) {
        for v in h.value.values() {
            if v.len() >= 4 {
                e.message = e.message.replace(&*v, "<redacted>");
            }
        }
    }
    e
}

/// A connection or exchange failure: the collector was not reached, or the connection broke.
fn unreachable(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError {
        message: format!("{what}: {e}"),
        class: PublishFailureClass::PublishUnreachable,
    }
}

/// A byte stream hyper speaks HTTP/1.1 over: plain TCP or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One connection to the collector: TCP, then TLS for `https`.
async fn connect(s: &OtlpSettings) -> Result<Box<dyn Io>, SinkError> {
    let host = s.endpoint.host().unwrap_or_default();
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = s
        .endpoint
        .port_u16()
        .unwrap_or(if s.tls.is_some() { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((bare.as_str(), port))
        .await
        .map_err(|e| unreachable(&format!("connecting to {host}:{port}"), e))?;
    let _ = tcp.set_nodelay(true);
    let Some(cfg) = &s.tls else {
        return Ok(Box::new(tcp));
    };
    let name = rustls_pki_types::ServerName::try_from(bare)
        .map_err(|e| unreachable(&format!("TLS server name {host}"), e))?;
    let tls = tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| unreachable(&format!("TLS handshake with {host}:{port}"), e))?;
    Ok(Box::new(tls))
}

/// What the collector answered: status, headers, body (at most [`MAX_RESPONSE_BYTES`]; empty for
/// a refusal whose body could not be read whole, which its status judges).
type Answer = (http::StatusCode, http::HeaderMap, Bytes);

/// POST `body` to the endpoint on a connection of its own; the collector's answer.
async fn export(s: &OtlpSettings, body: Bytes) -> Result<Answer, SinkError> {
    let io = connect(s).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| unreachable("HTTP handshake", e))?;
    // Aborted however the exchange ends, a timeout dropping this future included: a silent
    // collector keeps no task and no socket.
    let _conn = AbortOnDrop(tokio::spawn(conn));
    async {
        let authority = s.endpoint.authority().map_or("", |a| a.as_str());
        let path = s.endpoint.path_and_query().map_or("/", |p| p.as_str());
        let mut req = http::Request::builder()
            .method(http::Method::POST)
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::USER_AGENT, USER_AGENT)
            .body(Full::new(body))
            .map_err(|e| SinkError {
                message: format!("cannot build the request: {e}"),
                class: PublishFailureClass::PublishRejected,
            })?;
        for h in &s.headers {
            let value = http::HeaderValue::from_str(&h.value.get()).map_err(|_| SinkError {
                message: format!("header {}: the value is not a valid header value", h.name),
                class: PublishFailureClass::PublishRejected,
            })?;
            req.headers_mut().insert(h.name.clone(), value);
        }
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(&format!("POST {}", s.endpoint), e))?;
        let (parts, body) = resp.into_parts();
        let body = match Limited::new(body, MAX_RESPONSE_BYTES).collect().await {
            Ok(body) => body.to_bytes(),
            // A refusal is judged by its status whatever its body (a proxy's long error page).
            Err(_) if !parts.status.is_success() => Bytes::new(),
            Err(e) if e.is::<LengthLimitError>() => {
                return Err(SinkError {
                    message: format!(
                        "the collector answered {} with a body over {MAX_RESPONSE_BYTES} bytes, not an OTLP answer; nothing says the points were taken",
                        parts.status
                    ),
                    class: PublishFailureClass::PublishRejected,
                });
            }
            Err(e) => {
                let what = format!("reading the answer (at most {MAX_RESPONSE_BYTES} bytes)");
                return Err(unreachable(&what, e));
            }
        };
        Ok((parts.status, parts.headers, body))
    }
    .await
}

/// A task aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The longest `Retry-After` taken as said: longer is as good as "not within this window".
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long a refusal (429, 503, any non-2xx) asks the sink to wait by its `Retry-After` in
/// seconds (pure); `None` for a 2xx, without the header, or with an HTTP date (not read here).
pub fn retry_after(status: http::StatusCode, headers: &http::HeaderMap) -> Option<Duration> {
    if status.is_success() {
        return None;
    }
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    let secs = v.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// The body of a failed OTLP/HTTP export (`google.rpc.Status`), as far as it is read here.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// The class of a refused export by its status, as OTLP/HTTP says: 429, 502, 503 and 504 are
/// worth a retry (as is 408, a proxy's); 401 and 403 are credentials; anything else the same
/// request would meet again.
fn class_of_status(status: http::StatusCode) -> PublishFailureClass {
    use PublishFailureClass as C;
    match status.as_u16() {
        408 => C::PublishHttp408,
        429 => C::PublishThrottled,
        502..=504 => C::Publish5xx,
        401 | 403 => C::PublishCredentials,
        _ => C::PublishRejected,
    }
}

/// Judge the collector's answer to an export of `points` data points (pure): how many it took.
///
/// # Errors
/// A non-2xx (its class by status, its message from the `google.rpc.Status` body); a 2xx that
/// is not an OTLP answer, or that rejected every point (`publish_rejected`).
pub fn judge(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
    points: usize,
) -> Result<usize, SinkError> {
    if !status.is_success() {
        let said = RpcStatus::decode(body)
            .ok()
            .filter(|s| !s.message.is_empty())
            .map(|s| format!(": {}", s.message))
            .unwrap_or_default();
        return Err(SinkError {
            message: format!("the collector answered {status}{said}"),
            class: class_of_status(status),
        });
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let not_otlp = |why: String| SinkError {
        message: format!(
            "the collector answered {status} {why}; nothing says the points were taken"
        ),
        class: PublishFailureClass::PublishRejected,
    };
    if !body.is_empty() && !content_type.is_none_or(|v| v.starts_with("application/x-protobuf")) {
        return Err(not_otlp(format!(
            "with content-type {content_type:?}, not an OTLP protobuf answer"
        )));
    }
    let resp = ExportMetricsServiceResponse::decode(body)
        .map_err(|e| not_otlp(format!("with a body that is not an export response ({e})")))?;
    let Some(p) = resp.partial_success else {
        return Ok(points);
    };
    let rejected = usize::try_from(p.rejected_data_points).unwrap_or(0);
    if rejected == 0 {
        return Ok(points);
    }
    if rejected >= points {
        let message = if p.error_message.is_empty() {
            "(no message)"
        } else {
            &p.error_message
        };
        return Err(SinkError {
            message: format!(
                "the collector rejected every data point ({rejected} of {points}): {message}"
            ),
            class: PublishFailureClass::PublishRejected,
        });
    }
    Ok(points - rejected)
}

#[cfg(test)]
mod tests;
