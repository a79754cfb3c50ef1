//! A strict, capturing fake of CloudWatch's `PutMetricData` over the SDK's real protocol
//! (Smithy rpcv2Cbor), and a fake container-credentials endpoint whose credentials expire.
//!
//! LocalStack accepts what CloudWatch refuses (NaN, timestamps outside the accepted range), and
//! cannot fail on demand. This fake decodes each request's CBOR body, enforces the documented
//! PutMetricData limits (≤ 1,000 datums, ≤ 1 MB on the wire, gzip or not, finite values within ±2^360, timestamps at most
//! two weeks old and two hours ahead, ≤ 30 dimensions, names 1–255 and values 1–1024 ASCII
//! characters without control characters), records every request, and answers with the error
//! shapes the SDK parses: a CBOR map with `__type` and `message`, plus the `x-amzn-query-error`
//! header that carries the awsQuery-compatible code. Per request it can hang, throttle, answer
//! 429, 5xx or a bodiless 408, or reset the connection.

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use minicbor::data::Type;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::Notify;

type Body = http_body_util::Full<hyper::body::Bytes>;

/// PutMetricData limits, from the API reference.
pub const MAX_DATUMS: usize = 1000;
pub const MAX_BODY_BYTES: usize = 1_000_000;
pub const MAX_DIMENSIONS: usize = 30;
pub const MAX_DIMENSION_NAME: usize = 255;
pub const MAX_DIMENSION_VALUE: usize = 1024;
pub const MAX_AGE_MS: i64 = 14 * 86_400_000;
pub const MAX_AHEAD_MS: i64 = 2 * 3_600_000;

/// Wall clock, ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// What the fake does with the next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Never answers.
    Hang,
    /// 400 `Throttling`, as CloudWatch throttles.
    Throttle,
    /// 429 with a plain-text body, as a proxy throttles.
    TooManyRequests,
    /// This 5xx status with an HTML body, as a load balancer fails.
    Status(u16),
    /// 408 without a body.
    Bodiless408,
    /// The connection is reset (RST) after the request is read.
    Reset,
    /// 400 `InvalidParameterValue` with this message (say, one carrying escape sequences).
    Rejected(&'static str),
}

/// One datum as decoded from a request.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeDatum {
    pub metric: String,
    pub dimensions: Vec<(String, String)>,
    pub value: Option<f64>,
    /// Sample count, sum, minimum, maximum.
    pub statistics: Option<[f64; 4]>,
    pub unit: Option<String>,
    pub storage_resolution: Option<i64>,
    /// ms since the epoch.
    pub timestamp: i64,
}

impl FakeDatum {
    /// A dimension's value.
    pub fn dim(&self, name: &str) -> Option<&str> {
        self.dimensions
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived, ms since the epoch.
    pub at: i64,
    /// The fault injected, if any.
    pub fault: Option<Fault>,
    /// Status answered (`None`: no answer, hang or reset).
    pub status: Option<u16>,
    /// The access key id it was signed with.
    pub access_key: Option<String>,
    pub namespace: Option<String>,
    pub datums: Vec<FakeDatum>,
    /// Why the fake refused it, when it did.
    pub refused: Option<String>,
}

impl Seen {
    /// Accepted and stored.
    pub fn accepted(&self) -> bool {
        self.status == Some(200)
    }
}

#[derive(Default)]
struct State {
    fault: Option<Fault>,
    /// Requests the fault still applies to (`None`: until changed).
    budget: Option<usize>,
    seen: Vec<Seen>,
    creds: Option<FakeCredentials>,
}

/// The fake CloudWatch endpoint on 127.0.0.1.
pub struct FakeCloudWatch {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCloudWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeCloudWatch {
    /// Listen on an ephemeral port of 127.0.0.1.
    pub async fn start() -> FakeCloudWatch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // Dropping the socket then resets the connection instead of closing it.
                let _ = stream.set_zero_linger();
                let reset = Arc::new(Notify::new());
                let (st, reset2) = (st.clone(), reset.clone());
                let service = service_fn(move |req| {
                    let (st, reset) = (st.clone(), reset2.clone());
                    async move { Ok::<_, Infallible>(handle(req, &st, &reset).await) }
                });
                tokio::spawn(async move {
                    let conn =
                        http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = reset.notified() => {}
                    }
                });
            }
        });
        FakeCloudWatch { url, state, task }
    }

    /// Inject `fault` into every request from now on (`None`: answer normally).
    pub fn set_fault(&self, fault: Option<Fault>) {
        let mut s = self.lock();
        s.fault = fault;
        s.budget = None;
    }

    /// Inject `fault` into the next `n` requests only.
    pub fn set_fault_for(&self, fault: Fault, n: usize) {
        let mut s = self.lock();
        s.fault = Some(fault);
        s.budget = Some(n);
    }

    /// Accept only requests signed with unexpired credentials issued by `creds`.
    pub fn require(&self, creds: &FakeCredentials) {
        self.lock().creds = Some(creds.clone());
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn response(status: u16, headers: &[(&str, &str)], body: Vec<u8>) -> Response<Body> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::new(body.into())).unwrap()
}

/// An rpcv2Cbor error: `{"__type": …, "message": …}` and the awsQuery-compatible code.
fn cbor_error(status: u16, type_: &str, query_code: &str, message: &str) -> Response<Body> {
    let mut e = minicbor::Encoder::new(Vec::new());
    e.map(2)
        .and_then(|e| e.str("__type"))
        .and_then(|e| e.str(type_))
        .and_then(|e| e.str("message"))
        .and_then(|e| e.str(message))
        .unwrap();
    let fault = if status >= 500 { "Receiver" } else { "Sender" };
    let query = format!("{query_code};{fault}");
    response(
        status,
        &[
            ("smithy-protocol", "rpc-v2-cbor"),
            ("content-type", "application/cbor"),
            ("x-amzn-query-error", &query),
        ],
        e.into_writer(),
    )
}

fn invalid(message: &str) -> Response<Body> {
    cbor_error(
        400,
        "com.amazonaws.cloudwatch#InvalidParameterValueException",
        "InvalidParameterValue",
        message,
    )
}

/// The access key id of a SigV4 `Authorization` header.
fn access_key(req: &Request<Incoming>) -> Option<String> {
    let auth = req.headers().get("authorization")?.to_str().ok()?;
    let cred = auth.split("Credential=").nth(1)?;
    cred.split('/').next().map(str::to_string)
}

/// The answer an injected fault gives instead of CloudWatch's; `None` for none at all (the
/// request hangs, or its connection is reset).
fn fault_answer(fault: Fault) -> Option<Response<Body>> {
    match fault {
        Fault::Hang | Fault::Reset => None,
        Fault::Rejected(message) => Some(invalid(message)),
        Fault::Throttle => Some(cbor_error(
            400,
            "com.amazon.coral.availability#ThrottlingException",
            "Throttling",
            "Rate exceeded",
        )),
        Fault::TooManyRequests => Some(response(
            429,
            &[("content-type", "text/plain")],
            b"Too Many Requests".to_vec(),
        )),
        Fault::Status(code) => Some(response(
            code,
            &[("content-type", "text/html")],
            format!("<html><body><h1>{code}</h1>\n<p>upstream failed</p></body></html>")
                .into_bytes(),
        )),
        Fault::Bodiless408 => Some(response(408, &[], Vec::new())),
    }
}

async fn handle(req: Request<Incoming>, st: &Arc<Mutex<State>>, reset: &Notify) -> Response<Body> {
    use http_body_util::BodyExt;
    let at = now_ms();
    let key = access_key(&req);
    let headers_ok = req.uri().path()
        == "/service/GraniteServiceVersion20100801/operation/PutMetricData"
        && req.method() == hyper::Method::POST
        && req
            .headers()
            .get("smithy-protocol")
            .is_some_and(|v| v == "rpc-v2-cbor");
    let gzip = req
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == "gzip");
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES + 1);
    let body = limited
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .map_err(|_| ())
        .and_then(|b| if gzip { gunzip(&b) } else { Ok(b) });
    let (fault, creds) = {
        let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
        let fault = s.fault;
        if let Some(n) = s.budget.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.fault = None;
                s.budget = None;
            }
        }
        (fault, s.creds.clone())
    };
    let mut seen = Seen {
        at,
        fault,
        status: None,
        access_key: key.clone(),
        namespace: None,
        datums: Vec::new(),
        refused: None,
    };
    let decoded = match &body {
        Ok(b) => decode_request(b),
        Err(()) => Err(format!(
            "request body over {MAX_BODY_BYTES} bytes, or not valid gzip"
        )),
    };
    if let Ok((ns, datums)) = &decoded {
        seen.namespace = Some(ns.clone());
        seen.datums = datums.clone();
    }
    let answer = match fault {
        Some(f) => fault_answer(f),
        None => Some(
            match (
                headers_ok,
                decoded,
                creds.map(|c| c.check(key.as_deref(), at)),
            ) {
                (false, _, _) => invalid("not an rpcv2Cbor PutMetricData request"),
                (_, _, Some(Err((type_, code, message)))) => cbor_error(403, type_, code, &message),
                (_, Err(why), _) => invalid(&why),
                (_, Ok(_), _) => response(
                    200,
                    &[
                        ("smithy-protocol", "rpc-v2-cbor"),
                        ("content-type", "application/cbor"),
                    ],
                    vec![0xa0],
                ),
            },
        ),
    };
    seen.status = answer.as_ref().map(|r| r.status().as_u16());
    if let Some(r) = &answer
        && r.status() != 200
        && fault.is_none()
    {
        seen.refused = Some(format!("HTTP {}", r.status()));
    }
    st.lock().unwrap_or_else(|p| p.into_inner()).seen.push(seen);
    match (answer, fault) {
        (Some(r), _) => r,
        (None, Some(Fault::Reset)) => {
            reset.notify_one();
            std::future::pending().await
        }
        (None, _) => std::future::pending().await,
    }
}

/// Largest body the fake inflates a gzip request to, bytes.
const MAX_INFLATED_BYTES: u64 = 64 << 20;

/// Inflate a gzip body (the SDK compresses large PutMetricData requests), bounded.
fn gunzip(b: &[u8]) -> Result<Vec<u8>, ()> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .take(MAX_INFLATED_BYTES)
        .read_to_end(&mut out)
        .map_err(|_| ())?;
    Ok(out)
}

/// A decoded CBOR item (the subset rpcv2Cbor uses).
#[derive(Debug, Clone, PartialEq)]
enum Cbor {
    Int(i128),
    Float(f64),
    Text(String),
    Array(Vec<Cbor>),
    Map(Vec<(String, Cbor)>),
    Tag(u64, Box<Cbor>),
    Other,
}

impl Cbor {
    fn get(&self, key: &str) -> Option<&Cbor> {
        match self {
            Cbor::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Cbor::Text(s) => Some(s),
            _ => None,
        }
    }
    fn number(&self) -> Option<f64> {
        match self {
            Cbor::Int(i) => Some(*i as f64),
            Cbor::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// Decode one item; nesting is bounded.
fn item(d: &mut minicbor::Decoder<'_>, depth: usize) -> Result<Cbor, String> {
    let e = |e: minicbor::decode::Error| e.to_string();
    if depth > 16 {
        return Err("CBOR nested too deep".into());
    }
    Ok(match d.datatype().map_err(e)? {
        Type::U8 | Type::U16 | Type::U32 | Type::U64 => Cbor::Int(d.u64().map_err(e)?.into()),
        Type::I8 | Type::I16 | Type::I32 | Type::I64 => Cbor::Int(d.i64().map_err(e)?.into()),
        Type::Int => Cbor::Int(d.int().map_err(e)?.into()),
        Type::F16 => Cbor::Float(d.f16().map_err(e)?.into()),
        Type::F32 => Cbor::Float(d.f32().map_err(e)?.into()),
        Type::F64 => Cbor::Float(d.f64().map_err(e)?),
        Type::String => Cbor::Text(d.str().map_err(e)?.to_string()),
        Type::StringIndef => {
            let mut s = String::new();
            for part in d.str_iter().map_err(e)? {
                s.push_str(part.map_err(e)?);
            }
            Cbor::Text(s)
        }
        Type::Array | Type::ArrayIndef => {
            let n = d.array().map_err(e)?;
            let mut out = Vec::new();
            loop {
                if n.is_some_and(|n| out.len() as u64 == n) {
                    break;
                }
                if n.is_none() && d.datatype().map_err(e)? == Type::Break {
                    d.skip().map_err(e)?;
                    break;
                }
                out.push(item(d, depth + 1)?);
            }
            Cbor::Array(out)
        }
        Type::Map | Type::MapIndef => {
            let n = d.map().map_err(e)?;
            let mut out = Vec::new();
            loop {
                if n.is_some_and(|n| out.len() as u64 == n) {
                    break;
                }
                if n.is_none() && d.datatype().map_err(e)? == Type::Break {
                    d.skip().map_err(e)?;
                    break;
                }
                let k = match item(d, depth + 1)? {
                    Cbor::Text(k) => k,
                    other => return Err(format!("map key is not text: {other:?}")),
                };
                out.push((k, item(d, depth + 1)?));
            }
            Cbor::Map(out)
        }
        Type::Tag => {
            let t = d.tag().map_err(e)?;
            Cbor::Tag(t.as_u64(), Box::new(item(d, depth + 1)?))
        }
        _ => {
            d.skip().map_err(e)?;
            Cbor::Other
        }
    })
}

fn ascii_ok(s: &str, max: usize) -> bool {
    (1..=max).contains(&s.len())
        && s.is_ascii()
        && !s.chars().any(|c| c.is_ascii_control())
        && s.chars().any(|c| !c.is_ascii_whitespace())
}

/// A value CloudWatch accepts: finite, within ±2^360.
fn value_ok(v: f64) -> bool {
    v.is_finite() && v.abs() <= 2f64.powi(360)
}

/// Decode and check one `PutMetricData` body: the namespace and its datums, or why CloudWatch
/// would refuse it.
fn decode_request(body: &[u8]) -> Result<(String, Vec<FakeDatum>), String> {
    let mut d = minicbor::Decoder::new(body);
    let root = item(&mut d, 0)?;
    let ns = root
        .get("Namespace")
        .and_then(Cbor::text)
        .ok_or("no Namespace")?
        .to_string();
    let Some(Cbor::Array(data)) = root.get("MetricData") else {
        return Err("no MetricData".into());
    };
    if data.len() > MAX_DATUMS {
        return Err(format!("{} datums, more than {MAX_DATUMS}", data.len()));
    }
    let now = now_ms();
    let datums = data
        .iter()
        .map(|m| datum(m, now))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ns, datums))
}

fn datum(m: &Cbor, now: i64) -> Result<FakeDatum, String> {
    let metric = m
        .get("MetricName")
        .and_then(Cbor::text)
        .ok_or("no MetricName")?;
    let timestamp = match m.get("Timestamp") {
        Some(Cbor::Tag(1, t)) => (t.number().ok_or("timestamp is not a number")? * 1000.0) as i64,
        other => {
            return Err(format!(
                "{metric}: timestamp is not an epoch-seconds tag: {other:?}"
            ));
        }
    };
    if timestamp < now - MAX_AGE_MS || timestamp > now + MAX_AHEAD_MS {
        return Err(format!(
            "{metric}: timestamp {timestamp} is outside two weeks before to two hours after now"
        ));
    }
    let mut dimensions = Vec::new();
    if let Some(Cbor::Array(dims)) = m.get("Dimensions") {
        if dims.len() > MAX_DIMENSIONS {
            return Err(format!("{metric}: more than {MAX_DIMENSIONS} dimensions"));
        }
        for dim in dims {
            let (Some(k), Some(v)) = (
                dim.get("Name").and_then(Cbor::text),
                dim.get("Value").and_then(Cbor::text),
            ) else {
                return Err(format!("{metric}: a dimension without name or value"));
            };
            if !ascii_ok(k, MAX_DIMENSION_NAME) || k.starts_with(':') {
                return Err(format!("{metric}: bad dimension name {k:?}"));
            }
            if !ascii_ok(v, MAX_DIMENSION_VALUE) {
                return Err(format!("{metric}: bad dimension value {v:?}"));
            }
            dimensions.push((k.to_string(), v.to_string()));
        }
    }
    let value = m.get("Value").map(|v| v.number().unwrap_or(f64::NAN));
    let statistics = match m.get("StatisticValues") {
        Some(s) => {
            let f = |k| s.get(k).and_then(Cbor::number).unwrap_or(f64::NAN);
            Some([f("SampleCount"), f("Sum"), f("Minimum"), f("Maximum")])
        }
        None => None,
    };
    let numbers: Vec<f64> = value
        .into_iter()
        .chain(statistics.into_iter().flatten())
        .collect();
    if numbers.is_empty() || !numbers.iter().all(|v| value_ok(*v)) {
        return Err(format!(
            "{metric}: value missing, not finite or out of range"
        ));
    }
    Ok(FakeDatum {
        metric: metric.to_string(),
        dimensions,
        value,
        statistics,
        unit: m.get("Unit").and_then(Cbor::text).map(str::to_string),
        storage_resolution: match m.get("StorageResolution") {
            Some(Cbor::Int(i)) => Some(*i as i64),
            _ => None,
        },
        timestamp,
    })
}

/// What the credentials endpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredsMode {
    /// Issue a fresh key on each request.
    Rotate,
    /// Answer 500.
    Fail,
}

#[derive(Default)]
struct CredsState {
    mode: Option<CredsMode>,
    /// Issued key → expiry, ms since the epoch.
    issued: BTreeMap<String, i64>,
    requests: Vec<(i64, u16)>,
}

/// A container-credentials endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI`) on 127.0.0.1 whose
/// credentials expire `lifetime` after issue.
#[derive(Clone)]
pub struct FakeCredentials {
    pub url: String,
    lifetime: Duration,
    state: Arc<Mutex<CredsState>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl FakeCredentials {
    pub async fn start(lifetime: Duration) -> FakeCredentials {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v2/credentials/fake",
            listener.local_addr().unwrap()
        );
        let state: Arc<Mutex<CredsState>> = Arc::new(Mutex::new(CredsState {
            mode: Some(CredsMode::Rotate),
            ..Default::default()
        }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                let service = service_fn(move |_req: Request<Incoming>| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(issue(&st, lifetime)) }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        FakeCredentials {
            url,
            lifetime,
            state,
            task: Arc::new(task),
        }
    }

    pub fn set_mode(&self, mode: CredsMode) {
        self.lock().mode = Some(mode);
    }

    /// Each request to the endpoint: when, and the status answered.
    pub fn requests(&self) -> Vec<(i64, u16)> {
        self.lock().requests.clone()
    }

    /// The credentials' lifetime.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CredsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key` was issued here and is unexpired at `at`; else the error CloudWatch gives.
    fn check(
        &self,
        key: Option<&str>,
        at: i64,
    ) -> Result<(), (&'static str, &'static str, String)> {
        let s = self.lock();
        match key.and_then(|k| s.issued.get(k)) {
            None => Err((
                "com.amazon.coral.service#UnrecognizedClientException",
                "InvalidClientTokenId",
                "The security token included in the request is invalid.".into(),
            )),
            Some(exp) if at > *exp => Err((
                "com.amazon.coral.service#ExpiredTokenException",
                "ExpiredToken",
                "The security token included in the request is expired".into(),
            )),
            Some(_) => Ok(()),
        }
    }
}

impl Drop for FakeCredentials {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

fn issue(st: &Arc<Mutex<CredsState>>, lifetime: Duration) -> Response<Body> {
    let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
    let now = now_ms();
    if s.mode == Some(CredsMode::Fail) {
        s.requests.push((now, 500));
        return response(500, &[], b"credentials service unavailable".to_vec());
    }
    let key = format!("ASIAFAKE{:08}", s.issued.len() + 1);
    let expiry = now + lifetime.as_millis() as i64;
    s.issued.insert(key.clone(), expiry);
    s.requests.push((now, 200));
    let body = serde_json::json!({
        "AccessKeyId": key,
        "SecretAccessKey": "fake-secret",
        "Token": "fake-session-token",
        "Expiration": readyprobe::clock::rfc3339(expiry),
    });
    response(
        200,
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
}
