//! `[serve]`: the prober's own HTTP endpoint (`/metrics`, `/healthz`, `/status`), bounded, on
//! its own thread so that no client can delay an attempt.
//!
//! The server runs on an OS thread of its own with a current-thread tokio runtime: a flood of
//! clients competes for that one thread, never for the main runtime's workers that run the
//! probes and the fold. The shell hands it plain data through a [`Feed`] (the effects it
//! executes, the time of the loop's last tick, the last synced control document per service)
//! and never waits for it. Bounds: at most `max_connections` connections at once (one more is
//! accepted and closed at once, and counted), the request line and headers within
//! `request_timeout` and [`MAX_HEADER_BYTES`], one request per connection and each connection
//! closed after twice `request_timeout` (the headers' time and the response's), GET and HEAD
//! only, and a request with a body answered 413 without its body being read. `/metrics` is
//! OpenMetrics for a scraper whose `Accept` asks for it, else the Prometheus text 0.0.4; scrapes
//! share an encoding for up to [`REUSE_FOR`] while no readiness gauge moved (`/status` while no
//! document was synced), and at most [`MAX_ENCODINGS`] distinct texts are alive (a large fleet's
//! text times a flood of slow readers would otherwise be the endpoint's memory).

pub mod exposition;

pub use exposition::Exposition;

use crate::clock::{Clock, Millis};
use crate::config::Serve;
use crate::control::ControlDoc;
use crate::fold::ServiceId;
use bytes::Bytes;
use http::header::{
    ACCEPT, ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, VARY,
};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics` for a scraper that accepts OpenMetrics ([`wants_openmetrics`]).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of `/metrics` for any other client: the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The most bytes of request line and headers a request may have (431 above).
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// The most header fields a request may have (431 above).
const MAX_HEADERS: usize = 32;
/// A connection's read buffer: room for the headers, nothing more.
const MAX_BUF_BYTES: usize = 16 * 1024;
/// `/healthz` is unhealthy when the loop's last tick is older than this many publish intervals.
pub const HEALTHY_TICKS: u32 = 3;
/// The pending-connection queue of the listening socket.
const BACKLOG: u32 = 1024;
/// How long one encoding of `/metrics` answers further scrapes while no readiness or fail-open
/// gauge moved ([`Exposition::changes`]): counters lag by at most this much, readiness by nothing.
pub const REUSE_FOR: Duration = Duration::from_secs(1);
/// The most distinct texts of `/metrics` and `/status` alive at once (each held until every
/// connection writing it is done): a flood of slow readers holds at most this many copies of a
/// large fleet's series or documents, and the endpoint's thread encodes no more; a request
/// beyond gets 503.
pub const MAX_ENCODINGS: usize = 4;
/// How often, at most, refused connections (and, apart, accept errors) are logged.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why the endpoint could not start: a start-up error of `run`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address could not be bound (in use, not local, not permitted).
    #[error("[serve] cannot listen on {addr}: {source}; set [serve] listen to a free address")]
    Bind {
        /// The address of `[serve] listen`.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The endpoint's thread or runtime could not be started.
    #[error("[serve] cannot start the endpoint's thread: {0}")]
    Thread(std::io::Error),
}

/// A service's control document as its last sync returned it, and when.
type Synced = (Millis, Arc<ControlDoc>);

/// What the shell hands the endpoint, as plain data; the endpoint only reads it. The shell
/// never blocks on it beyond a short lock that no reader holds while encoding.
#[derive(Debug)]
pub struct Feed {
    /// The series of `/metrics`, updated from each effect the shell executes.
    pub exposition: Exposition,
    prober: String,
    publish_interval: Duration,
    clock: Clock,
    /// When the run loop last ticked (ms since the epoch, on `clock`).
    last_tick: AtomicI64,
    /// Each running service's control document as of its last sync, and when it was handed
    /// here (ms since the epoch, on `clock`): `/status`'s `read_at`.
    status: Mutex<BTreeMap<ServiceId, Synced>>,
    /// The last text of `/metrics` per format (Prometheus text, OpenMetrics) and of `/status`.
    last: Mutex<[Option<Last>; 3]>,
    /// Documents synced or forgotten so far: a `/status` text made at the same count is current.
    syncs: AtomicU64,
    /// A permit per distinct encoding alive, [`MAX_ENCODINGS`] in all.
    encodings: Arc<Semaphore>,
}

/// The last encoding of `/metrics` in one format.
#[derive(Debug)]
struct Last {
    /// [`Exposition::changes`] when it was made.
    changes: u64,
    at: tokio::time::Instant,
    text: Bytes,
}

/// One encoding's text, holding one of the [`MAX_ENCODINGS`] permits until its last reader is
/// done with it.
struct Encoding {
    text: String,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Encoding {
    fn as_ref(&self) -> &[u8] {
        self.text.as_bytes()
    }
}

impl Feed {
    /// A feed for prober `prober` whose loop ticks every `publish_interval` on `clock`; the
    /// loop counts as having ticked now.
    pub fn new(prober: &str, publish_interval: Duration, clock: Clock) -> Self {
        Feed {
            exposition: Exposition::new(),
            prober: prober.to_string(),
            publish_interval,
            clock,
            last_tick: AtomicI64::new(clock.now_ms()),
            status: Mutex::default(),
            last: Mutex::default(),
            syncs: AtomicU64::new(0),
            encodings: Arc::new(Semaphore::new(MAX_ENCODINGS)),
        }
    }

    /// The run loop ticked at `now`.
    pub fn ticked(&self, now: Millis) {
        self.last_tick.store(now, Ordering::Relaxed);
    }

    /// Service `service`'s document as a sync returned it (or as loaded when it started),
    /// read now.
    pub fn synced(&self, service: ServiceId, doc: &ControlDoc) {
        let doc = Arc::new(doc.clone());
        let at = self.clock.now_ms();
        self.docs().insert(service, (at, doc));
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Service `service` stopped running (a reload removed it).
    pub fn forget(&self, service: ServiceId) {
        self.docs().remove(&service);
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    fn docs(&self) -> std::sync::MutexGuard<'_, BTreeMap<ServiceId, Synced>> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `/metrics` in OpenMetrics or the Prometheus text: the last encoding while it is younger
    /// than [`REUSE_FOR`] and no readiness or fail-open gauge moved since, else a new one;
    /// `None` when [`MAX_ENCODINGS`] are alive.
    fn metrics_text(&self, openmetrics: bool) -> Option<Bytes> {
        let slot = usize::from(openmetrics);
        self.encoded(slot, self.exposition.changes(), || {
            if openmetrics {
                self.exposition.encode()
            } else {
                self.exposition.encode_prometheus_text()
            }
        })
    }

    /// `/status` ([`Self::status_json`]): the last one while it is younger than [`REUSE_FOR`]
    /// and no document was synced since (its freshness ages then lag by that much at most),
    /// else a new one; `None` when [`MAX_ENCODINGS`] are alive.
    fn status_text(&self) -> Option<Bytes> {
        let syncs = self.syncs.load(Ordering::Relaxed);
        self.encoded(2, syncs, || self.status_json())
    }

    /// The text of answer `slot` made by `make`, or the last one while it is younger than
    /// [`REUSE_FOR`] and was made at the same `changes`; `None` when [`MAX_ENCODINGS`] distinct
    /// texts are alive.
    fn encoded(&self, slot: usize, changes: u64, make: impl FnOnce() -> String) -> Option<Bytes> {
        let now = tokio::time::Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let last = &mut last[slot];
        if let Some(l) = last.as_ref()
            && l.changes == changes
            && now.duration_since(l.at) < REUSE_FOR
        {
            return Some(l.text.clone());
        }
        // Its permit comes back once no connection is writing it.
        *last = None;
        let permit = self.encodings.clone().try_acquire_owned().ok()?;
        let text = Bytes::from_owner(Encoding {
            text: make(),
            _permit: permit,
        });
        *last = Some(Last {
            changes,
            at: now,
            text: text.clone(),
        });
        Some(text)
    }

    /// `/healthz`: whether the loop ticked within [`HEALTHY_TICKS`] publish intervals, and a
    /// line saying how long ago.
    fn health(&self) -> (bool, String) {
        let age = self
            .clock
            .now_ms()
            .saturating_sub(self.last_tick.load(Ordering::Relaxed))
            .max(0);
        let limit = self.publish_interval * HEALTHY_TICKS;
        let ago = crate::clock::fmt_duration_ms(age);
        if u128::from(age.unsigned_abs()) <= limit.as_millis() {
            (true, format!("ok: the run loop ticked {ago} ago\n"))
        } else {
            let limit = crate::clock::fmt_duration(limit);
            let line = format!(
                "unhealthy: the run loop last ticked {ago} ago, more than {limit} ({HEALTHY_TICKS} publish intervals)\n"
            );
            (false, line)
        }
    }

    /// `/status`: this prober's id and, per running service, its control document as
    /// `status --json` prints it, as of the service's last sync (`read_at`), its probers' ages
    /// as of now.
    fn status_json(&self) -> String {
        let docs: Vec<Synced> = self.docs().values().cloned().collect();
        let now = self.clock.now_ms();
        let services: serde_json::Map<String, serde_json::Value> = docs
            .iter()
            .map(|(read_at, d)| {
                let v = crate::control::with_freshness(d, *read_at, now);
                (d.service.clone(), v)
            })
            .collect();
        let v = serde_json::json!({ "prober": self.prober, "services": services });
        let mut text = serde_json::to_string_pretty(&v).unwrap_or_else(|_| "{}".into());
        text.push('\n');
        text
    }
}

/// The running endpoint. Dropping it (or [`stop`](Self::stop)) closes the listener and every
/// connection.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    stop: CancellationToken,
    refused: Arc<AtomicU64>,
}

impl Serving {
    /// Bind `settings.listen` and serve `feed` on a thread of its own.
    ///
    /// # Errors
    /// [`ServeError`] when the address cannot be bound or the thread not started.
    pub fn start(settings: &Serve, feed: Arc<Feed>) -> Result<Self, ServeError> {
        let stop = CancellationToken::new();
        let refused = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let server = Server {
            feed,
            max_connections: settings.max_connections,
            request_timeout: settings.request_timeout,
            stop: stop.clone(),
            refused: refused.clone(),
        };
        let listen = settings.listen;
        std::thread::Builder::new()
            .name("serve".into())
            .spawn(move || server.run(listen, tx))
            .map_err(ServeError::Thread)?;
        let addr = rx
            .recv()
            .map_err(|_| ServeError::Thread(std::io::Error::other("the thread ended")))??;
        tracing::info!(address = %addr, "serving /metrics on {addr}");
        Ok(Serving {
            addr,
            stop,
            refused,
        })
    }

    /// The bound address (the port chosen when `listen` asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections refused so far because `max_connections` were open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Close the listener and every connection (the thread ends on its own, at once).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the endpoint's thread owns.
struct Server {
    feed: Arc<Feed>,
    max_connections: usize,
    request_timeout: Duration,
    stop: CancellationToken,
    refused: Arc<AtomicU64>,
}

impl Server {
    /// The thread's body: a current-thread runtime, the listener (its address or error sent on
    /// `bound`), then the accept loop until the stop.
    fn run(
        self,
        listen: SocketAddr,
        bound: std::sync::mpsc::SyncSender<Result<SocketAddr, ServeError>>,
    ) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = bound.send(Err(ServeError::Thread(e)));
                return;
            }
        };
        rt.block_on(async move {
            let listener = match listener(listen) {
                Ok(l) => l,
                Err(source) => {
                    let _ = bound.send(Err(ServeError::Bind {
                        addr: listen,
                        source,
                    }));
                    return;
                }
            };
            let addr = listener.local_addr().unwrap_or(listen);
            if bound.send(Ok(addr)).is_err() {
                return;
            }
            self.accept_loop(listener).await;
        });
        // Dropping the runtime drops every connection still open.
    }

    /// Accept until the stop: a connection over `max_connections` is closed at once.
    async fn accept_loop(self, listener: TcpListener) {
        let slots = Arc::new(Semaphore::new(self.max_connections));
        // When a refusal and an accept error were last logged.
        let (mut refusal_logged, mut error_logged) = (None, None);
        let due = |last: &mut Option<tokio::time::Instant>| {
            let due = last.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY);
            if due {
                *last = Some(tokio::time::Instant::now());
            }
            due
        };
        loop {
            let stream = tokio::select! {
                () = self.stop.cancelled() => return,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors, most likely: wait rather than spin.
                        if due(&mut error_logged) {
                            tracing::warn!(error = %e, "serve: cannot accept a connection");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                drop(stream);
                let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if due(&mut refusal_logged) {
                    tracing::warn!(
                        refused = n,
                        max_connections = self.max_connections,
                        "serve: a connection over max_connections was closed unanswered"
                    );
                }
                continue;
            };
            let conn = connection(stream, slot, self.feed.clone(), self.request_timeout);
            tokio::spawn(conn);
        }
    }
}

/// A listening socket on `addr` with a backlog of [`BACKLOG`].
fn listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // A restart binds again while the last run's connections are in TIME_WAIT; a listener
    // still bound by another process is refused all the same.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serve one request on `stream`, holding `_slot` until the connection ends: its headers
/// within `timeout`, the whole connection within twice that.
async fn connection(
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    feed: Arc<Feed>,
    timeout: Duration,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| {
        let response = respond(&req, &feed);
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_BUF_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    // Errors (a client gone, headers too slow or too large) end the connection, nothing more.
    let _ = tokio::time::timeout(timeout * 2, conn).await;
}

/// The answer to `req`: 413 for a body, 405 for a method but GET and HEAD, then the route.
fn respond<B: Body>(req: &Request<B>, feed: &Feed) -> Response<Full<Bytes>> {
    if !req.body().is_end_stream() {
        // Never read: the connection closes after the answer.
        let mut r = plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a request has no body here\n",
        );
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => metrics(req, feed),
        "/healthz" => match feed.health() {
            (true, line) => plain(StatusCode::OK, line),
            (false, line) => plain(StatusCode::SERVICE_UNAVAILABLE, line),
        },
        "/status" => match feed.status_text() {
            Some(text) => with_type(StatusCode::OK, text, "application/json"),
            None => busy(),
        },
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found; this endpoint serves /metrics, /healthz and /status\n",
        ),
    }
}

/// `/metrics` in the format the request's `Accept` asks for; `Vary: Accept` tells a cache so.
/// 503 (retry after a second) while [`MAX_ENCODINGS`] are being written.
fn metrics<B>(req: &Request<B>, feed: &Feed) -> Response<Full<Bytes>> {
    let accept = req.headers().get_all(ACCEPT).iter();
    // A value that is not text names no media type this endpoint knows.
    let accept: Vec<&str> = accept.filter_map(|v| v.to_str().ok()).collect();
    let openmetrics = wants_openmetrics(&accept.join(","));
    let Some(text) = feed.metrics_text(openmetrics) else {
        return busy();
    };
    let content_type = if openmetrics {
        OPENMETRICS
    } else {
        PROMETHEUS_TEXT
    };
    let mut r = with_type(StatusCode::OK, text, content_type);
    r.headers_mut()
        .insert(VARY, HeaderValue::from_static("accept"));
    r
}

/// Whether an `Accept` value (the request's `Accept` fields joined by commas; empty when it has
/// none) asks for OpenMetrics: it names `application/openmetrics-text` with a q-value above 0,
/// and no higher than it gives `text/plain`. Wildcards name neither (`*/*`, curl's, gets the
/// Prometheus text 0.0.4, which every scraper reads); a q-value that is not a number counts as
/// 0. Prometheus asks for OpenMetrics first.
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
            .filter(|q| q.is_finite())
            .unwrap_or(0.0);
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            openmetrics = openmetrics.max(q);
        } else if media.eq_ignore_ascii_case("text/plain") {
            text = text.max(q);
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// 503 while [`MAX_ENCODINGS`] texts are being written: retry in a second.
fn busy() -> Response<Full<Bytes>> {
    let mut r = plain(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{MAX_ENCODINGS} answers of /metrics or /status are being written; retry\n"),
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn plain(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    with_type(status, body.into(), "text/plain; charset=utf-8")
}

fn with_type(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests;
