//! The `http` probe kind: a marked request on the branch's real write path (e.g. `POST /orders`
//! on the branch's own name), checked for status, body and the answering branch, and an optional
//! read-back request. Resolve, connect and TLS are readyprobe's own steps; hyper speaks HTTP/1.1
//! over the connection they produced, one connection per attempt (never reused across attempts).

use crate::config::{HeaderValueSource, HttpProbe, HttpRequestSpec};
use crate::failure::{FailureClass, Step};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::{Deadline, StepError, Steps};

/// Largest response body read, bytes.
pub const MAX_BODY: usize = 1024 * 1024;

/// A prepared http probe: settings plus header secrets read at start-up.
#[derive(Clone)]
pub struct HttpTarget {
    /// Settings.
    pub settings: HttpProbe,
    /// Headers with secrets resolved (values never logged).
    pub headers: Vec<(http::HeaderName, String)>,
    /// rustls client configuration (`None` for plain HTTP).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("request", &self.settings.request)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Read header secrets.
///
/// # Errors
/// The secret's error.
pub fn resolve_headers(
    headers: &[(http::HeaderName, HeaderValueSource)],
) -> Result<Vec<(http::HeaderName, String)>, crate::config::SecretError> {
    headers
        .iter()
        .map(|(n, v)| {
            Ok((
                n.clone(),
                match v {
                    HeaderValueSource::Plain(s) => s.clone(),
                    HeaderValueSource::Secret(r) => r.resolve()?,
                },
            ))
        })
        .collect()
}

/// What the requests returned.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Default)]
pub struct HttpObservation {
    /// Status of the marked request.
    pub status: Option<u16>,
    /// Status of the verify request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_status: Option<u16>,
}

/// Template variables of one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// `{{marker}}`.
    pub marker: &'a str,
    /// `{{seq}}`.
    pub seq: u64,
    /// `{{prober_id}}`.
    pub prober_id: &'a str,
    /// `{{branch}}`.
    pub branch: &'a str,
    /// `{{endpoint}}`.
    pub endpoint: &'a str,
}

/// Substitute `{{marker}}`, `{{seq}}`, `{{prober_id}}`, `{{branch}}`, `{{endpoint}}` (pure).
pub fn render(template: &str, v: &Vars<'_>) -> String {
    template
        .replace("{{marker}}", v.marker)
        .replace("{{seq}}", &v.seq.to_string())
        .replace("{{prober_id}}", v.prober_id)
        .replace("{{branch}}", v.branch)
        .replace("{{endpoint}}", v.endpoint)
}

/// A byte stream hyper can speak over: plain TCP or our TLS stream.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub(crate) fn fail(class: FailureClass, message: String) -> StepError {
    StepError { class, message }
}

/// Map a hyper error to a failure class. The one place HTTP client errors are classified.
pub fn classify_hyper(e: &hyper::Error) -> FailureClass {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return FailureClass::ServerGoneAway;
    }
    if e.is_parse() || e.is_parse_status() {
        return FailureClass::ProtocolError;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            // A TLS alert or error surfacing on the HTTP connection (e.g. a client certificate
            // rejected after a TLS 1.3 handshake) keeps its TLS class.
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return super::tls::classify_tls(r);
            }
            return super::connect::classify_io(io);
        }
        src = s.source();
    }
    FailureClass::ProtocolError
}

/// [`send`], and when the request failed because the connection ended, the connection's own
/// error as the cause (a TLS alert, bytes that are not HTTP), which says more than "canceled".
pub(crate) async fn send_on(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    conn: &mut tokio::task::JoinHandle<Result<(), hyper::Error>>,
    req: http::Request<Full<Bytes>>,
) -> Result<(http::StatusCode, http::HeaderMap, Bytes), StepError> {
    let r = send(sender, req).await;
    match r {
        Err(e) if e.class == FailureClass::ServerGoneAway => {
            match tokio::time::timeout(std::time::Duration::from_millis(50), conn).await {
                Ok(Ok(Err(cause))) => Err(fail(
                    classify_hyper(&cause),
                    format!("{}: the connection failed: {cause}", e.message),
                )),
                _ => Err(e),
            }
        }
        other => other,
    }
}

pub(crate) async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> Result<(http::StatusCode, http::HeaderMap, Bytes), StepError> {
    // HTTP/1.1 takes one request at a time: wait until the previous exchange is done.
    sender
        .ready()
        .await
        .map_err(|e| fail(classify_hyper(&e), format!("HTTP connection: {e}")))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| fail(classify_hyper(&e), format!("HTTP request: {e}")))?;
    let (parts, body) = resp.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| match e.downcast_ref::<hyper::Error>() {
            Some(h) => fail(classify_hyper(h), format!("HTTP body: {h}")),
            None => fail(
                FailureClass::ProtocolError,
                format!("HTTP body: {e} (limit {MAX_BODY} bytes)"),
            ),
        })?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

fn status_ok(spec: &HttpRequestSpec, status: http::StatusCode) -> bool {
    if spec.expect_status.is_empty() {
        status.is_success()
    } else {
        spec.expect_status.contains(&status.as_u16())
    }
}

fn build(
    spec: &HttpRequestSpec,
    t: &HttpTarget,
    v: &Vars<'_>,
    host: &str,
    body: Option<String>,
) -> Result<http::Request<Full<Bytes>>, StepError> {
    let b = http::Request::builder()
        .method(spec.method.clone())
        .uri(render(&spec.path, v))
        .header(http::header::HOST, host)
        .header(
            http::header::USER_AGENT,
            concat!("readyprobe/", env!("CARGO_PKG_VERSION")),
        );
    let mut req = b
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| {
            fail(
                FailureClass::ProtocolError,
                format!("cannot build the request: {e}"),
            )
        })?;
    // Configured headers replace the defaults (e.g. Host), they never add a second one.
    for (n, val) in &t.headers {
        let value = http::HeaderValue::from_str(&render(val, v)).map_err(|_| {
            fail(
                FailureClass::ProtocolError,
                format!("header {n}: the rendered value is not a valid header value"),
            )
        })?;
        req.headers_mut().insert(n.clone(), value);
    }
    Ok(req)
}

/// The `tls` step when a client configuration is given, else the plain stream.
pub(crate) async fn tls_or_plain(
    tls: &Option<Arc<rustls::ClientConfig>>,
    steps: &mut Steps,
    deadline: &Deadline,
    stream: TcpStream,
    endpoint: &str,
    tls_out: &mut Option<super::tls::TlsInfo>,
) -> Result<Box<dyn Io>, (Step, StepError)> {
    Ok(match tls {
        Some(cfg) => {
            let cfg = cfg.clone();
            let (stream, info) = steps
                .run(Step::Tls, deadline.step(Step::Tls), async move {
                    super::tls::handshake(cfg, endpoint, stream).await
                })
                .await
                .map_err(|e| (Step::Tls, e))?;
            *tls_out = Some(info);
            Box::new(stream)
        }
        None => Box::new(stream),
    })
}

/// HTTP/1.1 over `io`: the request sender and the connection's task (abort it to close).
pub(crate) async fn open(
    io: Box<dyn Io>,
) -> Result<
    (
        hyper::client::conn::http1::SendRequest<Full<Bytes>>,
        tokio::task::JoinHandle<Result<(), hyper::Error>>,
    ),
    StepError,
> {
    let (snd, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| fail(classify_hyper(&e), format!("HTTP handshake: {e}")))?;
    Ok((snd, tokio::spawn(conn)))
}

/// Run `tls` (when enabled), `write` (the marked request) and `verify` (when configured).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    t: &HttpTarget,
    steps: &mut Steps,
    deadline: &Deadline,
    stream: TcpStream,
    port: u16,
    v: Vars<'_>,
    tls_out: &mut Option<super::tls::TlsInfo>,
    observed: &mut HttpObservation,
) -> Result<(), (Step, StepError)> {
    let s = &t.settings;
    let peer = stream.peer_addr().ok();
    let io = tls_or_plain(&t.tls, steps, deadline, stream, v.endpoint, tls_out).await?;
    let default_port = if t.tls.is_some() { 443 } else { 80 };
    let host = if port == default_port {
        v.endpoint.to_string()
    } else {
        format!("{}:{port}", v.endpoint)
    };
    let mut sender = None;
    let mut conn_task = None;
    let result = async {
        // write: handshake (HTTP/1.1 over our connection), the marked request, its checks.
        steps
            .run(Step::Write, deadline.step(Step::Write), async {
                let (mut snd, conn) = open(io).await?;
                let conn = conn_task.insert(conn);
                let req = build(&s.request, t, &v, &host, s.body.as_ref().map(|b| render(b, &v)))?;
                let (status, headers, body) = send_on(&mut snd, conn, req).await?;
                observed.status = Some(status.as_u16());
                sender = Some(snd);
                if !status_ok(&s.request, status) {
                    return Err(fail(
                        FailureClass::HttpStatus,
                        format!(
                            "{} {} answered {status}; accepted: {}",
                            s.request.method,
                            render(&s.request.path, &v),
                            if s.request.expect_status.is_empty() {
                                "2xx".to_string()
                            } else {
                                format!("{:?}", s.request.expect_status)
                            }
                        ),
                    ));
                }
                if let Some((name, want)) = &s.expect_header {
                    let want = render(want, &v);
                    let got = headers.get(name).and_then(|h| h.to_str().ok());
                    if got != Some(want.as_str()) {
                        return Err(fail(
                            FailureClass::HttpWrongBranch,
                            format!(
                                "response header {name} is {:?}, expected {want:?}: the answer did not come from branch {}",
                                got.unwrap_or("(absent)"),
                                v.branch
                            ),
                        ));
                    }
                }
                if let Some(want) = &s.request.expect_body_contains {
                    let want = render(want, &v);
                    if !String::from_utf8_lossy(&body).contains(&want) {
                        return Err(fail(
                            FailureClass::HttpBodyMismatch,
                            format!("response body does not contain {want:?}"),
                        ));
                    }
                }
                if let Some((pointer, want)) = &s.expect_json {
                    let want = render(want, &v);
                    let doc: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                        fail(FailureClass::HttpBodyMismatch, format!("response body is not JSON: {e}"))
                    })?;
                    let got = doc.pointer(pointer);
                    let matches = match got {
                        Some(serde_json::Value::String(s)) => s == &want,
                        // A number or boolean compares by its JSON text (`42`, `true`).
                        // Numbers compare by value (`1e2` = `100`), booleans and null by text.
                        Some(serde_json::Value::Number(n)) => {
                            match (n.as_f64(), want.parse::<f64>()) {
                                (Some(a), Ok(b)) => a == b,
                                _ => false,
                            }
                        }
                        Some(other) => serde_json::to_string(other).is_ok_and(|t| t == want),
                        None => false,
                    };
                    if !matches {
                        return Err(fail(
                            FailureClass::HttpBodyMismatch,
                            format!(
                                "JSON {pointer} is {}, expected {want:?}",
                                got.map(|g| {
                                    let mut t = g.to_string();
                                    if t.len() > 200 {
                                        t.truncate(t.floor_char_boundary(200));
                                        t.push('…');
                                    }
                                    t
                                })
                                .unwrap_or_else(|| "absent".into())
                            ),
                        ));
                    }
                }
                Ok(())
            })
            .await
            .map_err(|e| (Step::Write, e))?;

        // verify: the read-back request must find the marker.
        if let Some(spec) = &s.verify {
            // The read-back uses a connection of its own to the same address: a server may close
            // the write's connection (`Connection: close`, HTTP/1.0, keep-alive limits).
            drop(sender.take());
            steps
                .run(Step::Verify, deadline.step(Step::Verify), async {
                    let addr = peer.ok_or_else(|| {
                        fail(FailureClass::TcpReset, "the write connection has no peer address".into())
                    })?;
                    let stream = TcpStream::connect(addr).await.map_err(|e| {
                        fail(super::connect::classify_io(&e), format!("verify connect to {addr}: {e}"))
                    })?;
                    let io: Box<dyn Io> = match &t.tls {
                        Some(cfg) => Box::new(super::tls::handshake(cfg.clone(), v.endpoint, stream).await?.0),
                        None => Box::new(stream),
                    };
                    let (mut snd, mut conn) = open(io).await?;
                    let req = build(spec, t, &v, &host, None)?;
                    let r = send_on(&mut snd, &mut conn, req).await;
                    conn.abort();
                    let (status, _, body) = r?;
                    observed.verify_status = Some(status.as_u16());
                    if !status_ok(spec, status) {
                        return Err(fail(
                            FailureClass::VerifyMismatch,
                            format!(
                                "verify {} {} answered {status}",
                                spec.method,
                                render(&spec.path, &v)
                            ),
                        ));
                    }
                    let want = render(spec.expect_body_contains.as_deref().unwrap_or("{{marker}}"), &v);
                    if !String::from_utf8_lossy(&body).contains(&want) {
                        return Err(fail(
                            FailureClass::VerifyMismatch,
                            format!("verify response does not contain {want:?}"),
                        ));
                    }
                    Ok(())
                })
                .await
                .map_err(|e| (Step::Verify, e))?;
        }
        Ok(())
    }
    .await;
    // The connection ends with the attempt.
    drop(sender);
    if let Some(task) = conn_task {
        task.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let v = Vars {
            marker: "abc",
            seq: 7,
            prober_id: "az-a",
            branch: "primary",
            endpoint: "api.example",
        };
        assert_eq!(
            render(
                "/orders/{{marker}}?seq={{seq}}&p={{prober_id}}&b={{branch}}@{{endpoint}}",
                &v
            ),
            "/orders/abc?seq=7&p=az-a&b=primary@api.example"
        );
    }
}
