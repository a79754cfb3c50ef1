//! The `otlp` sink: the contract's datums as OTLP metrics, POSTed as OTLP/HTTP protobuf to a
//! collector, with the pure encoder ([`encode`]) kept apart from sending ([`OtlpSink`]).
//!
//! It always gets the full set of datums (`publish.metrics` limits `cloudwatch` and `emf`
//! only). A batch is a request per [`MAX_POINTS_PER_REQUEST`] points, gzipped, each on a
//! connection of its own, the try bounded by `[publish.otlp] timeout`,
//! the answer read up to [`MAX_RESPONSE_BYTES`]; retries, queueing and `publish` records are the
//! sink queue's ([`super::SinkQueue`]).

use super::{Datum, SendFuture, Sink, SinkError, Value};
use crate::contract::{self, Unit};
use crate::otlp_wire::{Verdict, kv, verdict};
use crate::probe::http_client::{Io, USER_AGENT};
use crate::readiness::Millis;
use crate::record::PublishFailureClass;
use crate::secrets::SecretCell;
use crate::secrets::redactor::Redactor;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use rustls::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

/// The bucket bounds of the `readyprobe.step_duration` histogram, ms: the contract's
/// [`contract::STEP_DURATION_BUCKETS`] (seconds), converted.
pub fn step_duration_bounds_ms() -> Vec<f64> {
    contract::STEP_DURATION_BUCKETS
        .iter()
        .map(|s| (s * 1000.0 * 1000.0).round() / 1000.0)
        .collect()
}

/// Most data points in one export request: a batch of more (10,000 branches make 17.5 MB)
/// is sent as several requests, each answered on its own, their points added up.
pub const MAX_POINTS_PER_REQUEST: usize = 2_000;

/// Largest answer body read from the collector, bytes (a real one is empty or a few hundred).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

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

/// Who sends: the resource of every export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `service.instance.id`: the prober id.
    pub prober_id: String,
    /// `readyprobe.namespace`: the CloudWatch namespace of the datums.
    pub namespace: String,
}

/// The bucket counts of `samples` over `bounds` (a value equal to a bound falls in that bound's
/// bucket, as OTLP says: upper bounds are inclusive).
fn bucket_counts(samples: &[f64], bounds: &[f64]) -> Vec<u64> {
    let mut counts = vec![0u64; bounds.len() + 1];
    for s in samples {
        let i = bounds.iter().position(|b| s <= b).unwrap_or(bounds.len());
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
    // A count's span starts at the previous tick (the fold's `since`); a datum built elsewhere
    // is taken to span one publish interval.
    let start_time_unix_nano = nanos(d.since.unwrap_or(d.timestamp - interval_ms));
    let delta = AggregationTemporality::Delta as i32;
    match &d.value {
        Value::Samples(s) => {
            let bounds = step_duration_bounds_ms();
            let point = HistogramDataPoint {
                attributes,
                start_time_unix_nano,
                time_unix_nano,
                count: s.len() as u64,
                sum: Some(s.iter().sum()),
                bucket_counts: bucket_counts(s, &bounds),
                explicit_bounds: bounds,
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
    /// Removes the secret header values (parts, encodings, splits, refreshed values) from what
    /// the collector sends back: see [`OtlpSettings::redactor_of`].
    pub redactor: Redactor,
}

impl OtlpSettings {
    /// The redactor of `headers`' secret values.
    pub fn redactor_of(headers: &[SinkHeader]) -> Redactor {
        Redactor::of(
            headers
                .iter()
                .filter(|h| h.secret)
                .map(|h| h.value.clone())
                .collect(),
        )
    }
}

/// The `otlp` sink of one namespace. Built broken (every send fails with its reason) when its
/// settings could not be prepared: a header secret or the CA bundle unavailable.
#[derive(Debug)]
pub struct OtlpSink {
    settings: Result<Arc<OtlpSettings>, SinkError>,
    origin: Origin,
    /// The latest try met a status OTLP/HTTP says not to retry (whatever its class).
    final_status: bool,
    /// The batch in hand, while it is.
    progress: Option<Progress>,
    /// The `Retry-After` of the last answer, if a refusal carried one.
    retry_after: Option<Duration>,
}

impl OtlpSink {
    /// The sink of `origin`'s namespace, or one whose every send fails with `broken`.
    pub fn new(settings: Result<Arc<OtlpSettings>, SinkError>, origin: Origin) -> Self {
        OtlpSink {
            settings,
            origin,
            final_status: false,
            progress: None,
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

    fn retryable(&self, e: &SinkError) -> bool {
        e.retryable() && !self.final_status
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
            // A retry of this batch resumes after the requests already taken (kept in place:
            // a try the publish window cuts short keeps what it got).
            let key = (datums.as_ptr() as usize, datums.len());
            if self.progress.as_ref().is_none_or(|p| p.key != key) {
                self.progress = Some(Progress {
                    key,
                    ..Progress::default()
                });
            }
            let done = self.progress.as_ref().map_or(0, |p| p.requests);
            for chunk in datums.chunks(MAX_POINTS_PER_REQUEST).skip(done) {
                let (taken, note) = self
                    .export_chunk(&s, chunk)
                    .await
                    .map_err(|e| redact(e, &s.redactor))?;
                let p = self.progress.get_or_insert_with(Progress::default);
                p.requests += 1;
                p.sent += taken;
                p.notes.extend(note.map(|n| s.redactor.redact(&n)));
            }
            Ok(self.progress.as_ref().map_or(0, |p| p.sent))
        })
    }

    fn settle(&mut self) -> Option<String> {
        let notes = self.progress.take()?.notes;
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

/// How far the sink got with the batch in hand: the requests the collector took, the points
/// they carried, what partial successes said.
#[derive(Debug, Default)]
struct Progress {
    /// The batch's datums (address, length) while it is in hand.
    key: (usize, usize),
    requests: usize,
    sent: usize,
    notes: Vec<String>,
}

impl OtlpSink {
    /// Export one request's `datums`: the points taken and what a partial success said.
    async fn export_chunk(
        &mut self,
        s: &OtlpSettings,
        datums: &[Datum],
    ) -> Result<(usize, Option<String>), SinkError> {
        let interval_ms = Millis::try_from(s.interval.as_millis()).unwrap_or(Millis::MAX);
        let (request, points) = encode(&self.origin, interval_ms, datums);
        if points == 0 {
            return Ok((0, None));
        }
        let body = gzip(&request.encode_to_vec())?;
        let answer = tokio::time::timeout(s.timeout, export(s, body)).await;
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
        self.final_status = false;
        self.retry_after = None;
        answer.and_then(|(status, headers, body)| {
            self.final_status = !status.is_success() && !retry_status(status);
            self.retry_after = retry_after(status, &headers);
            judge(status, &headers, &body, points)
        })
    }
}

/// `bytes` gzipped (every export is sent `Content-Encoding: gzip`, which OTLP/HTTP collectors
/// accept: protobuf metrics shrink several times over).
fn gzip(bytes: &[u8]) -> Result<Bytes, SinkError> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::fast(),
    );
    gz.write_all(bytes)
        .and_then(|()| gz.finish())
        .map(Bytes::from)
        .map_err(|e| SinkError {
            message: format!("cannot gzip the export: {e}"),
            class: PublishFailureClass::PublishRejected,
        })
}

/// `e` with every secret header value in its message redacted: a collector may quote a
/// request's header whole, its token alone, or split.
fn redact(mut e: SinkError, redactor: &Redactor) -> SinkError {
    redactor.redact_in_place(&mut e.message);
    e
}

/// A connection or exchange failure: the collector was not reached, or the connection broke.
fn unreachable(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError {
        message: format!("{what}: {e}"),
        class: PublishFailureClass::PublishUnreachable,
    }
}

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
            .header(http::header::CONTENT_ENCODING, "gzip")
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
        let (mut parts, body) = resp.into_parts();
        let body = match Limited::new(body, MAX_RESPONSE_BYTES).collect().await {
            Ok(b) => b.to_bytes(),
            // Over the cap: the status decides alone (a 2xx is an accepted export whatever
            // else it says, a 503's large page is still a 503), judged as an empty answer.
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                parts.headers.remove(http::header::CONTENT_TYPE);
                Bytes::new()
            }
            Err(e) => {
                return Err(unreachable(
                    &format!("reading the answer (at most {MAX_RESPONSE_BYTES} bytes)"),
                    e,
                ));
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

/// The class of a refused export by its status, the rule every sink follows: 408, 429, any
/// 5xx, 401 and 403 have their own classes; anything else is `publish_rejected`.
fn class_of_status(status: http::StatusCode) -> PublishFailureClass {
    use PublishFailureClass as C;
    match status.as_u16() {
        408 => C::PublishHttp408,
        429 => C::PublishThrottled,
        500..=599 => C::Publish5xx,
        401 | 403 => C::PublishCredentials,
        _ => C::PublishRejected,
    }
}

/// Whether OTLP/HTTP says a refused export is worth another try, apart from its class: 408,
/// 429, 502, 503 and 504 only (a 500, 501 or 505 would meet the same answer again).
pub fn retry_status(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 502..=504)
}

/// Judge the collector's answer to an export of `points` data points (pure): how many it took,
/// and what a partial success that rejected some said.
///
/// # Errors
/// A non-2xx (its class by status, its message from the `google.rpc.Status` body); a 2xx that
/// is not an OTLP answer, or that rejected every point (`publish_rejected`).
pub fn judge(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
    points: usize,
) -> Result<(usize, Option<String>), SinkError> {
    let rejected_all = |message: String| SinkError {
        message,
        class: PublishFailureClass::PublishRejected,
    };
    match verdict(status, headers, body) {
        Verdict::Refused { message, .. } => Err(SinkError {
            message: format!(
                "the collector answered {status}{}",
                message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
            class: class_of_status(status),
        }),
        Verdict::NotOtlp { why, .. } => Err(rejected_all(format!(
            "the collector answered {status} {why}; nothing says the points were taken"
        ))),
        Verdict::Accepted { rejected: 0, .. } => Ok((points, None)),
        Verdict::Accepted { rejected, message } => {
            let rejected = usize::try_from(rejected).unwrap_or(usize::MAX);
            let said = message.as_deref().unwrap_or("(no message)");
            if rejected >= points {
                return Err(rejected_all(format!(
                    "the collector rejected every data point ({rejected} of {points}): {said}"
                )));
            }
            let note = format!("the collector rejected {rejected} of {points} data points: {said}");
            Ok((points - rejected, Some(note)))
        }
    }
}

#[cfg(test)]
mod tests;
