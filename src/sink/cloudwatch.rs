//! The `cloudwatch` sink: `PutMetricData` through the AWS SDK, with the pure encoder and batcher
//! kept apart from sending.
//!
//! Limits enforced here come from the PutMetricData API: at most 1000 datums and 1 MB of request
//! payload per call; values must be finite; `StorageResolution` is 60 (standard resolution, the
//! only kind a Route 53 health check's alarm may use).

use super::{Datum, SendFuture, Sink, SinkError, Value};
use crate::aws::{AwsTarget, CodeKind, Retries, Timeouts};
use crate::config::{CloudWatch as CwConfig, PublishTarget};
use crate::readiness::Millis;
use crate::record::PublishFailureClass;
use aws_sdk_cloudwatch::config::http::HttpResponse;
use aws_sdk_cloudwatch::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_cloudwatch::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_cloudwatch::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit, StatisticSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// PutMetricData limit: datums per request.
pub const MAX_DATUMS_PER_REQUEST: usize = 1000;
/// PutMetricData limit: request payload, bytes.
pub const MAX_REQUEST_BYTES: usize = 1_000_000;
/// Largest response body read from CloudWatch, bytes (1 MiB; a real answer is a few hundred).
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Encode one datum (pure). `None` for a non-finite datum.
pub fn encode(d: &Datum) -> Option<MetricDatum> {
    if !d.is_finite() {
        return None;
    }
    let mut b = MetricDatum::builder()
        .metric_name(d.metric)
        .timestamp(DateTime::from_millis(d.timestamp))
        .storage_resolution(crate::contract::STORAGE_RESOLUTION)
        .unit(match d.unit {
            super::Unit::None => StandardUnit::None,
            super::Unit::Percent => StandardUnit::Percent,
            super::Unit::Count => StandardUnit::Count,
            super::Unit::Milliseconds => StandardUnit::Milliseconds,
        });
    for (k, v) in &d.dimensions {
        b = b.dimensions(Dimension::builder().name(*k).value(v).build());
    }
    b = match &d.value {
        Value::Single(v) => b.value(*v),
        Value::Samples(s) => {
            let sum: f64 = s.iter().sum();
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            b.statistic_values(
                StatisticSet::builder()
                    .sample_count(s.len() as f64)
                    .sum(sum)
                    .minimum(min)
                    .maximum(max)
                    .build(),
            )
        }
    };
    Some(b.build())
}

/// PutMetricData limit: a datum's timestamp may be at most two weeks in the past.
pub const MAX_AGE_MS: Millis = 14 * 86_400_000;
/// PutMetricData limit: a datum's timestamp may be at most two hours in the future.
pub const MAX_AHEAD_MS: Millis = 2 * 3_600_000;
/// Margin kept inside both limits, for clock skew and time on the wire.
const VALIDITY_MARGIN_MS: Millis = 300_000;

/// Whether CloudWatch would accept `d`'s timestamp when it arrives at `now` (pure): not more
/// than two weeks old, not more than two hours ahead, with a margin of five minutes.
pub fn within_validity(d: &Datum, now: Millis) -> bool {
    d.timestamp >= now - MAX_AGE_MS + VALIDITY_MARGIN_MS
        && d.timestamp <= now + MAX_AHEAD_MS - VALIDITY_MARGIN_MS
}

/// A conservative upper bound of one datum's size on the wire, bytes.
pub fn estimated_size(d: &Datum) -> usize {
    // Fixed fields (name, unit, timestamp, resolution, value or statistic set) plus dimensions;
    // CBOR is more compact than this, so the bound errs on the safe side.
    200 + d.metric.len()
        + d.dimensions
            .iter()
            .map(|(k, v)| 16 + k.len() + v.len())
            .sum::<usize>()
}

/// Split datums into requests within the PutMetricData limits (pure). Non-finite datums and
/// ones CloudWatch would refuse at `now` as too old or too far ahead are left out; their count
/// is returned second.
pub fn batches(datums: &[Datum], now: Millis) -> (Vec<Vec<&Datum>>, usize) {
    let mut out: Vec<Vec<&Datum>> = Vec::new();
    let mut skipped = 0;
    let mut cur: Vec<&Datum> = Vec::new();
    let mut bytes = 0;
    for d in datums {
        if !d.is_finite() || !within_validity(d, now) {
            skipped += 1;
            continue;
        }
        let sz = estimated_size(d);
        if !cur.is_empty()
            && (cur.len() == MAX_DATUMS_PER_REQUEST || bytes + sz > MAX_REQUEST_BYTES)
        {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += sz;
        cur.push(d);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    (out, skipped)
}

/// Sends to CloudWatch. The SDK makes one attempt per call; the runner retries retryable
/// failures itself (see [`classify_error`]) within the batch's publish window, up to
/// `max_attempts` tries, so every try is visible in the evidence.
#[derive(Debug, Clone)]
pub struct CloudWatchSink {
    client: CloudWatchClient,
    namespace: String,
    /// This sink's own: the client is shared by every namespace's sink.
    signed: Signed,
}

/// One SDK client of one target (region, endpoint, credentials or role, timeouts, body
/// limit), built at its first call and shared by every namespace's [`CloudWatchSink`] of that
/// target (cloning shares it).
#[derive(Debug, Clone)]
pub struct CloudWatchClient {
    client: Arc<tokio::sync::OnceCell<aws_sdk_cloudwatch::Client>>,
    aws: AwsTarget,
    max_tries: u32,
    /// The target's name when a service named it ([`crate::sink::SinkId::target`]).
    target: Option<Arc<str>>,
}

/// Set once the current call has a signed request: a call cut short before that spent its time
/// obtaining credentials (a provider that fails retries within its own budget, longer than a
/// publish window), which is a credentials failure, not a slow CloudWatch.
#[derive(Debug, Clone, Default)]
struct Signed(Arc<AtomicBool>);

impl Signed {
    fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl Intercept for Signed {
    fn name(&self) -> &'static str {
        "readyprobe-signed"
    }

    fn read_after_signing(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// The message of a call cut short before its request was signed.
const NO_CREDENTIALS_IN_TIME: &str = "PutMetricData failed: no credentials before the timeout (the credentials provider did not answer in time)";

impl CloudWatchClient {
    /// The client of `[publish.cloudwatch]`'s own target (the default chain, or its role with
    /// the session of prober `readyprobe`), built now.
    pub async fn new(cfg: &CwConfig, publish_interval: Duration) -> Self {
        let default = PublishTarget {
            name: String::new(),
            region: cfg.region.clone(),
            endpoint_url: cfg.endpoint_url.clone(),
            role: cfg.role.clone(),
        };
        let c = Self::of_target(&default, None, "readyprobe", cfg, publish_interval);
        c.client().await;
        c
    }

    /// The client of target `t` (its sinks named `name`; `None` for the default target), for
    /// prober `prober_id`; built at its first call, so a target whose chain or role is slow to
    /// load delays no other target.
    pub fn of_target(
        t: &PublishTarget,
        name: Option<Arc<str>>,
        prober_id: &str,
        cfg: &CwConfig,
        publish_interval: Duration,
    ) -> Self {
        CloudWatchClient {
            client: Arc::default(),
            aws: target(t, prober_id, cfg, publish_interval),
            max_tries: cfg.max_attempts.max(1),
            target: name,
        }
    }

    async fn client(&self) -> &aws_sdk_cloudwatch::Client {
        self.client
            .get_or_init(|| async {
                let session = self.aws.session().await;
                aws_sdk_cloudwatch::Client::from_conf(session.cloudwatch().build())
            })
            .await
    }

    /// A credentials failure of a target with a role says which role could not be assumed
    /// and, when STS answered, what it said (its code and message, found in `source`'s chain).
    fn with_role(
        &self,
        mut e: SinkError,
        source: Option<&(dyn std::error::Error + 'static)>,
    ) -> SinkError {
        let (PublishFailureClass::PublishCredentials, Some(r)) = (e.class, &self.aws.role) else {
            return e;
        };
        let detail = source.and_then(sts_answer).unwrap_or_else(|| {
            let m = e.message.strip_prefix("PutMetricData failed: ");
            m.unwrap_or(&e.message).to_string()
        });
        e.message = one_line(&format!(
            "PutMetricData failed: could not assume role {} (session {}): {detail}",
            r.role_arn, r.session_name
        ));
        e
    }
}

/// What STS answered, `Code: message`, when `e`'s chain holds a service's error.
fn sts_answer(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut link = Some(e);
    while let Some(cur) = link {
        if let Some(m) = cur.downcast_ref::<aws_smithy_types::error::ErrorMetadata>() {
            return m.code().map(|code| match m.message() {
                Some(msg) => format!("STS answered {code}: {msg}"),
                None => format!("STS answered {code}"),
            });
        }
        link = cur.source();
    }
    None
}

/// Where the sink publishes: target `t`'s region, endpoint and role (the session named after
/// `prober_id`), one try per call (the runner retries, see [`classify_error`]) cut at
/// `operation_timeout` or `publish_interval` if shorter, bodies of at most
/// [`MAX_RESPONSE_BYTES`].
pub fn target(
    t: &PublishTarget,
    prober_id: &str,
    cfg: &CwConfig,
    publish_interval: Duration,
) -> AwsTarget {
    crate::aws::target_for(
        t,
        prober_id,
        Timeouts::per_call(cfg.operation_timeout.min(publish_interval)),
        Retries::Off,
        MAX_RESPONSE_BYTES,
    )
}

impl CloudWatchSink {
    /// A sink of its own client (see [`CloudWatchClient::new`]).
    pub async fn new(cfg: &CwConfig, namespace: &str, publish_interval: Duration) -> Self {
        let client = CloudWatchClient::new(cfg, publish_interval).await;
        CloudWatchSink::with_client(&client, namespace)
    }

    /// A sink for `namespace` sending through `client` (shared).
    pub fn with_client(client: &CloudWatchClient, namespace: &str) -> Self {
        CloudWatchSink {
            client: client.clone(),
            namespace: namespace.to_string(),
            signed: Signed::default(),
        }
    }
}

/// Longest cause kept from a failed call, chars: it goes into one warning and one evidence record
/// per failed batch, where the SDK's debug rendering (about 1 KB) would drown the rest.
pub const MAX_CAUSE_CHARS: usize = 200;

/// Class of an HTTP status that is a failure whatever the body says (a proxy's or load
/// balancer's answer often has no body the SDK can parse, so no error code).
fn class_of_status(status: u16) -> Option<PublishFailureClass> {
    match status {
        408 => Some(PublishFailureClass::PublishHttp408),
        429 => Some(PublishFailureClass::PublishThrottled),
        500..=599 => Some(PublishFailureClass::Publish5xx),
        _ => None,
    }
}

/// Class of a service error: by code where the service named one the table of
/// [`crate::aws::codes`] knows, else by HTTP status.
fn class_of_service(code: Option<&str>, status: u16) -> PublishFailureClass {
    match code.and_then(crate::aws::kind_of) {
        Some(CodeKind::Throttled) => PublishFailureClass::PublishThrottled,
        Some(CodeKind::ServerFault) => PublishFailureClass::Publish5xx,
        Some(k) if k.is_credentials() => PublishFailureClass::PublishCredentials,
        _ => class_of_status(status).unwrap_or(PublishFailureClass::PublishRejected),
    }
}

/// True when something in `e`'s source chain says credentials could not be had (the SDK
/// resolves them before sending, and reports a provider's failure as a dispatch failure).
fn credentials_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut link = Some(e);
    while let Some(cur) = link {
        if cur.to_string().to_ascii_lowercase().contains("credential") {
            return true;
        }
        link = cur.source();
    }
    false
}

/// Classify a failed call (throttled, timeout, 408, 5xx, credentials, rejected, unreachable;
/// the class says whether a later try may succeed) and say why it failed in one bounded line.
pub fn classify_error<E>(e: &SdkError<E, HttpResponse>) -> SinkError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    classify_call("PutMetricData", e)
}

/// [`classify_error`] for a failed call of operation `op` of any AWS SDK client (the evidence
/// uploader's `PutObject` too).
pub fn classify_call<E>(op: &str, e: &SdkError<E, HttpResponse>) -> SinkError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    use PublishFailureClass as C;
    let class = match e {
        SdkError::TimeoutError(_) => C::PublishTimeout,
        SdkError::DispatchFailure(d) if d.as_connector_error().is_some_and(|c| c.is_timeout()) => {
            C::PublishTimeout
        }
        SdkError::DispatchFailure(_) if credentials_failed(e) => C::PublishCredentials,
        SdkError::DispatchFailure(_) => C::PublishUnreachable,
        SdkError::ServiceError(s) => class_of_service(s.err().code(), s.raw().status().as_u16()),
        SdkError::ResponseError(r) => {
            class_of_status(r.raw().status().as_u16()).unwrap_or(C::PublishUnreachable)
        }
        SdkError::ConstructionFailure(_) if credentials_failed(e) => C::PublishCredentials,
        SdkError::ConstructionFailure(_) => C::PublishRejected,
        _ => C::PublishUnreachable,
    };
    SinkError {
        message: one_line(&format!("{op} failed: {}", cause(e))),
        class,
    }
}

/// The cause of a failed call: the service's error code and message, or what the connection
/// did ("connection refused", "timeout", "dns error: ..."), never the SDK's debug dump.
fn cause<E>(e: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e {
        SdkError::ServiceError(s) => match (s.err().code(), s.err().message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_string(),
            // A proxy's answer (HTML, plain text, no body): the parser's complaint about it says
            // nothing useful; the status does.
            (None, _) => {
                let status = s.raw().status().as_u16();
                let reason = http::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("");
                format!("HTTP {status} {reason} (no error code in the response)")
            }
        },
        SdkError::TimeoutError(_) => format!("timeout: {}", innermost(e)),
        SdkError::DispatchFailure(d) if d.as_connector_error().is_some_and(|c| c.is_timeout()) => {
            "timeout".into()
        }
        SdkError::DispatchFailure(_) => transport_cause(e),
        SdkError::ResponseError(r) => format!(
            "HTTP {}: unreadable response: {}",
            r.raw().status().as_u16(),
            innermost(e)
        ),
        SdkError::ConstructionFailure(_) => format!("request not built: {}", innermost(e)),
        _ => innermost(e),
    }
}

/// What the connector reported, named by the I/O error kind where there is one.
fn transport_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut link = Some(e);
    while let Some(cur) = link {
        if cur.to_string() == "dns error" {
            return format!("dns error: {}", innermost(cur));
        }
        if let Some(io) = cur.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            let named = match io.kind() {
                K::ConnectionRefused => "connection refused",
                K::ConnectionReset => "connection reset",
                K::ConnectionAborted => "connection aborted",
                K::TimedOut => "timeout",
                K::HostUnreachable => "host unreachable",
                K::NetworkUnreachable => "network unreachable",
                K::AddrNotAvailable => "address not available",
                _ => return format!("transport error: {io}"),
            };
            return named.into();
        }
        link = cur.source();
    }
    format!("transport error: {}", innermost(e))
}

/// The display of the deepest error in the source chain: the most specific message.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Collapse whitespace to single spaces, escape other control characters (an endpoint's message
/// must not drive the terminal a log is read on: `\x1b` becomes `\u{1b}`) and cut at
/// [`MAX_CAUSE_CHARS`] (pure).
fn one_line(s: &str) -> String {
    let flat: String = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .flat_map(|c| {
            let esc = c.is_control().then(|| c.escape_default());
            esc.into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect();
    match flat.char_indices().nth(MAX_CAUSE_CHARS - 1) {
        Some((cut, _)) if flat.chars().count() > MAX_CAUSE_CHARS => {
            format!("{}…", flat[..cut].trim_end())
        }
        _ => flat,
    }
}

impl Sink for CloudWatchSink {
    fn name(&self) -> &'static str {
        "cloudwatch"
    }

    fn target(&self) -> Option<Arc<str>> {
        self.client.target.clone()
    }

    fn max_tries(&self) -> u32 {
        self.client.max_tries
    }

    fn cut_short(&self) -> SinkError {
        if self.signed.get() {
            SinkError {
                message: "the publish window closed before the send finished".into(),
                class: PublishFailureClass::PublishTimeout,
            }
        } else {
            let e = SinkError {
                message: NO_CREDENTIALS_IN_TIME.into(),
                class: PublishFailureClass::PublishCredentials,
            };
            self.client.with_role(e, None)
        }
    }

    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a> {
        Box::pin(async move {
            let (reqs, skipped) = batches(datums, crate::clock::Clock::start().now_ms());
            if skipped > 0 {
                tracing::warn!(
                    skipped,
                    "datums left out: not finite, or outside CloudWatch's accepted time range"
                );
            }
            let mut sent = 0;
            for req in reqs {
                let data: Vec<MetricDatum> = req.iter().filter_map(|d| encode(d)).collect();
                let n = data.len();
                self.signed.reset();
                let client = self.client.client().await;
                client
                    .put_metric_data()
                    .namespace(&self.namespace)
                    .set_metric_data(Some(data))
                    .customize()
                    .interceptor(self.signed.clone())
                    .send()
                    .await
                    .map_err(|e| match e {
                        SdkError::TimeoutError(_) if !self.signed.get() => {
                            let e = SinkError {
                                message: NO_CREDENTIALS_IN_TIME.into(),
                                class: PublishFailureClass::PublishCredentials,
                            };
                            self.client.with_role(e, None)
                        }
                        e => self.client.with_role(classify_error(&e), Some(&e)),
                    })?;
                sent += n;
            }
            Ok(sent)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Unit;
    use strum::VariantArray;

    fn datum(i: usize) -> Datum {
        Datum {
            metric: "Attempts",
            dimensions: vec![("Service", "s".into()), ("Branch", format!("b{i}"))],
            value: Value::Single(i as f64),
            unit: Unit::Count,
            timestamp: 1_700_000_000_000,
            since: None,
        }
    }

    #[test]
    fn one_line_escapes_control_characters() {
        assert_eq!(
            one_line("a\n b\t\u{1b}]0;PWNED\u{7}\u{0}\u{9b}c"),
            r"a b \u{1b}]0;PWNED\u{7}\u{0}\u{9b}c"
        );
        let long = "\u{1b}".repeat(1000);
        assert!(one_line(&long).chars().count() <= MAX_CAUSE_CHARS + 1);
    }

    #[test]
    fn encodes_exact_datum() {
        let m = encode(&Datum {
            metric: "StepDuration",
            dimensions: vec![
                ("Service", "orders-db".into()),
                ("Branch", "primary".into()),
                ("Step", "write".into()),
            ],
            value: Value::Samples(vec![2.0, 4.0, 3.0]),
            unit: Unit::Milliseconds,
            timestamp: 1_700_000_000_123,
            since: None,
        })
        .unwrap();
        assert_eq!(m.metric_name(), Some("StepDuration"));
        assert_eq!(m.storage_resolution(), Some(60));
        assert_eq!(m.unit(), Some(&StandardUnit::Milliseconds));
        assert_eq!(
            m.timestamp().unwrap().to_millis().unwrap(),
            1_700_000_000_123
        );
        let s = m.statistic_values().unwrap();
        assert_eq!(
            (s.sample_count(), s.sum(), s.minimum(), s.maximum()),
            (Some(3.0), Some(9.0), Some(2.0), Some(4.0))
        );
        let dims: Vec<_> = m
            .dimensions()
            .iter()
            .map(|d| (d.name().unwrap(), d.value().unwrap()))
            .collect();
        assert_eq!(
            dims,
            [
                ("Service", "orders-db"),
                ("Branch", "primary"),
                ("Step", "write")
            ]
        );
        assert!(m.value().is_none());
    }

    #[test]
    fn batches_respect_count_limit_and_skip_non_finite() {
        let mut ds: Vec<Datum> = (0..2500).map(datum).collect();
        ds[7].value = Value::Single(f64::NAN);
        ds[8].value = Value::Single(f64::INFINITY);
        let (b, skipped) = batches(&ds, 1_700_000_000_000);
        assert_eq!(skipped, 2);
        assert_eq!(
            b.iter().map(|b| b.len()).collect::<Vec<_>>(),
            [1000, 1000, 498]
        );
        for batch in &b {
            assert!(batch.iter().map(|d| estimated_size(d)).sum::<usize>() <= MAX_REQUEST_BYTES);
        }
    }

    /// An error with a message and a source, like the connector's wrappers.
    #[derive(Debug)]
    struct Wrap(&'static str, Box<dyn std::error::Error + Send + Sync>);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    use aws_sdk_cloudwatch::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_cloudwatch::operation::put_metric_data::PutMetricDataError;
    use std::io::{Error as IoError, ErrorKind};
    type E = SdkError<PutMetricDataError, HttpResponse>;

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(
            http::StatusCode::from_u16(status).unwrap().into(),
            aws_smithy_types::body::SdkBody::empty(),
        )
    }

    fn service(code: &str, message: Option<&str>, status: u16) -> E {
        let mut m = ErrorMetadata::builder().code(code);
        if let Some(t) = message {
            m = m.message(t);
        }
        SdkError::service_error(PutMetricDataError::generic(m.build()), response(status))
    }

    /// The connector's chain for a failed connect, as hyper-util builds it.
    fn connect(step: &'static str, inner: IoError) -> E {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(Wrap(
            "client error (Connect)",
            Box::new(Wrap(step, Box::new(inner))),
        ))))
    }

    /// Each case: name, error, class, message (empty: cut at the bound, checked by shape).
    fn check(cases: Vec<(&str, E, PublishFailureClass, &str)>) {
        for (name, e, class, message) in cases {
            let got = classify_error(&e);
            assert_eq!(got.class, class, "{name}");
            assert!(
                got.message.chars().count() <= MAX_CAUSE_CHARS && !got.message.contains('\n'),
                "{name}: {}",
                got.message
            );
            if message.is_empty() {
                assert!(got.message.ends_with("x x x…"), "{name}: {}", got.message);
            } else {
                assert_eq!(got.message, message, "{name}");
            }
        }
    }

    use PublishFailureClass as C;

    /// A service error whose body the SDK could not parse (no code), as a proxy's bodiless
    /// answer gives.
    fn bodiless(status: u16) -> E {
        SdkError::service_error(
            PutMetricDataError::unhandled(Wrap(
                "unhandled error",
                Box::new(IoError::other("end of input bytes")),
            )),
            response(status),
        )
    }

    #[test]
    fn classify_service_errors() {
        let long = "x ".repeat(400);
        check(vec![
            (
                "throttled",
                service("Throttling", Some("Rate exceeded"), 400),
                C::PublishThrottled,
                "PutMetricData failed: Throttling: Rate exceeded",
            ),
            (
                "server fault",
                service("InternalFailure", None, 500),
                C::Publish5xx,
                "PutMetricData failed: InternalFailure",
            ),
            (
                "bad request, message on two lines",
                service("InvalidParameterValue", Some("NaN\nis not valid"), 400),
                C::PublishRejected,
                "PutMetricData failed: InvalidParameterValue: NaN is not valid",
            ),
            (
                "expired token",
                service(
                    "ExpiredToken",
                    Some("The security token included in the request is expired"),
                    403,
                ),
                C::PublishCredentials,
                "PutMetricData failed: ExpiredToken: The security token included in the request is expired",
            ),
            (
                "no error code",
                bodiless(404),
                C::PublishRejected,
                "PutMetricData failed: HTTP 404 Not Found (no error code in the response)",
            ),
            (
                "bodiless 408",
                bodiless(408),
                C::PublishHttp408,
                "PutMetricData failed: HTTP 408 Request Timeout (no error code in the response)",
            ),
            (
                "bodiless 429",
                bodiless(429),
                C::PublishThrottled,
                "PutMetricData failed: HTTP 429 Too Many Requests (no error code in the response)",
            ),
            (
                "a proxy's 503",
                bodiless(503),
                C::Publish5xx,
                "PutMetricData failed: HTTP 503 Service Unavailable (no error code in the response)",
            ),
            (
                "throttled by API Gateway's code",
                service("TooManyRequestsException", Some("Too Many Requests"), 400),
                C::PublishThrottled,
                "PutMetricData failed: TooManyRequestsException: Too Many Requests",
            ),
            (
                "an expired request",
                service("RequestExpired", Some("Request has expired"), 400),
                C::PublishCredentials,
                "PutMetricData failed: RequestExpired: Request has expired",
            ),
            (
                "long message",
                service("InvalidParameterValue", Some(&long), 400),
                C::PublishRejected,
                "",
            ),
        ]);
    }

    #[test]
    fn retryable_classes() {
        let retryable: Vec<_> = C::VARIANTS.iter().filter(|c| c.retryable()).collect();
        assert_eq!(
            retryable,
            [
                &C::PublishTimeout,
                &C::PublishThrottled,
                &C::PublishHttp408,
                &C::Publish5xx,
                &C::PublishUnreachable
            ]
        );
    }

    #[test]
    fn classify_transport_errors() {
        let no_name = "failed to lookup address information: Name or service not known";
        check(vec![
            (
                "refused",
                connect("tcp connect error", ErrorKind::ConnectionRefused.into()),
                C::PublishUnreachable,
                "PutMetricData failed: connection refused",
            ),
            (
                "reset",
                connect("connection error", ErrorKind::ConnectionReset.into()),
                C::PublishUnreachable,
                "PutMetricData failed: connection reset",
            ),
            (
                "dns",
                connect("dns error", IoError::other(no_name)),
                C::PublishUnreachable,
                &format!("PutMetricData failed: dns error: {no_name}"),
            ),
            (
                "credentials provider failed",
                SdkError::dispatch_failure(ConnectorError::other(
                    Box::new(Wrap(
                        "failed to load credentials",
                        Box::new(IoError::other("HTTP 500 from the container endpoint")),
                    )),
                    None,
                )),
                C::PublishCredentials,
                "PutMetricData failed: transport error: HTTP 500 from the container endpoint",
            ),
            (
                "connect timeout",
                SdkError::dispatch_failure(ConnectorError::timeout(Box::new(IoError::other(
                    "HTTP connect timeout occurred after 3s",
                )))),
                C::PublishTimeout,
                "PutMetricData failed: timeout",
            ),
            (
                "operation timeout",
                SdkError::timeout_error(IoError::other("operation timeout occurred after 5s")),
                C::PublishTimeout,
                "PutMetricData failed: timeout: operation timeout occurred after 5s",
            ),
            (
                "unreadable response",
                SdkError::response_error(IoError::other("body ended early"), response(502)),
                C::Publish5xx,
                "PutMetricData failed: HTTP 502: unreadable response: body ended early",
            ),
            (
                "not built",
                SdkError::construction_failure(IoError::other("no region")),
                C::PublishRejected,
                "PutMetricData failed: request not built: no region",
            ),
        ]);
    }

    #[test]
    fn validity_window_keeps_what_cloudwatch_accepts() {
        let now = 1_700_000_000_000;
        let at = |t| Datum {
            timestamp: t,
            ..datum(0)
        };
        let ds = vec![
            at(now - MAX_AGE_MS),             // two weeks old: refused
            at(now - MAX_AGE_MS + 600_000),   // inside the margin: sent
            at(now),                          // sent
            at(now + MAX_AHEAD_MS - 600_000), // sent
            at(now + MAX_AHEAD_MS),           // two hours ahead: refused
        ];
        let (b, skipped) = batches(&ds, now);
        assert_eq!(skipped, 2);
        let kept: Vec<_> = b[0].iter().map(|d| d.timestamp - now).collect();
        assert_eq!(kept, [-MAX_AGE_MS + 600_000, 0, MAX_AHEAD_MS - 600_000]);
    }

    #[test]
    fn batches_respect_size_limit() {
        let big = Datum {
            dimensions: vec![("Service", "x".repeat(1024)), ("Branch", "y".repeat(1024))],
            ..datum(0)
        };
        let ds = vec![big; 900];
        let (b, _) = batches(&ds, 1_700_000_000_000);
        assert!(b.len() > 1);
        for batch in &b {
            assert!(batch.iter().map(|d| estimated_size(d)).sum::<usize>() <= MAX_REQUEST_BYTES);
        }
    }
}
