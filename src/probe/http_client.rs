//! HTTP/1.1 client plumbing shared by the `http` and `otlp` kinds: the optional `tls` step over the
//! connection `connect` opened, hyper over that one connection (never reused across attempts),
//! bounded response bodies, template variables, and the one place hyper errors are classified.

use crate::failure::FailureClass;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::ctx::{StepCtx, StepError, StepFailure};
use super::target::{BranchProbe, Header};

/// Largest response body read, bytes.
pub const MAX_BODY: usize = 1024 * 1024;

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("readyprobe/", env!("CARGO_PKG_VERSION"));

/// How long a failed request waits for the connection task's own error (a TLS alert, bytes that
/// are not HTTP), which says more than "canceled".
const CONNECTION_CAUSE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Template variables of one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    pub marker: &'a str,
    pub seq: u64,
    pub prober_id: &'a str,
    pub branch: &'a str,
    pub endpoint: &'a str,
}

impl<'a> Vars<'a> {
    /// The variables of attempt `seq` with `marker` on `probe`'s branch.
    pub fn of(probe: &'a BranchProbe, marker: &'a str, seq: u64) -> Self {
        Vars {
            marker,
            seq,
            prober_id: &probe.prober_id,
            branch: &probe.branch.name,
            endpoint: &probe.branch.endpoint,
        }
    }
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

/// The `Host` header: the endpoint name, with the port unless it is the scheme's default.
pub(crate) fn host_header(endpoint: &str, port: u16, tls: bool) -> String {
    let default_port = if tls { 443 } else { 80 };
    if port == default_port {
        endpoint.to_string()
    } else {
        format!("{endpoint}:{port}")
    }
}

/// Set the configured headers, rendered with the template variables. They replace the defaults
/// (e.g. `Host`), they never add a second one.
///
/// # Errors
/// `protocol_error` when a rendered value is not a valid header value.
pub(crate) fn apply_headers(
    req: &mut http::Request<Full<Bytes>>,
    headers: &[Header],
    v: &Vars<'_>,
) -> Result<(), StepError> {
    for Header {
        name: n,
        value: val,
        ..
    } in headers
    {
        let value = http::HeaderValue::from_str(&render(&val.get(), v)).map_err(|_| {
            fail(
                FailureClass::ProtocolError,
                format!("header {n}: the rendered value is not a valid header value"),
            )
        })?;
        req.headers_mut().insert(n.clone(), value);
    }
    Ok(())
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

/// The status, headers and body (at most [`MAX_BODY`] bytes) of one exchange.
pub(crate) type Response = (http::StatusCode, http::HeaderMap, Bytes);

/// [`send`], and when the request failed because the connection ended, the connection's own
/// error as the cause.
async fn send_on(
    sender: &mut SendRequest<Full<Bytes>>,
    conn: &mut JoinHandle<Result<(), hyper::Error>>,
    req: http::Request<Full<Bytes>>,
) -> Result<Response, StepError> {
    match send(sender, req).await {
        Err(e) if e.class == FailureClass::ServerGoneAway => {
            match tokio::time::timeout(CONNECTION_CAUSE_WAIT, conn).await {
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

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> Result<Response, StepError> {
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

/// The `tls` step when the kind has TLS on, else the plain stream.
pub(crate) async fn tls_or_plain(
    ctx: &mut StepCtx<'_>,
    stream: TcpStream,
) -> Result<Box<dyn Io>, StepFailure> {
    Ok(match ctx.tls {
        Some(cfg) => Box::new(super::tls::run(ctx, cfg.clone(), stream).await?),
        None => Box::new(stream),
    })
}

/// One HTTP/1.1 connection of an attempt; its task is aborted when this is dropped, so the
/// connection ends with the attempt whichever way it ends.
pub(crate) struct Connection {
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<Result<(), hyper::Error>>,
}

impl Connection {
    /// Speak HTTP/1.1 over `io`.
    ///
    /// # Errors
    /// The classified handshake error.
    pub async fn open(io: Box<dyn Io>) -> Result<Self, StepError> {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| fail(classify_hyper(&e), format!("HTTP handshake: {e}")))?;
        Ok(Connection {
            sender,
            task: tokio::spawn(conn),
        })
    }

    /// One exchange; see [`send_on`].
    ///
    /// # Errors
    /// The classified request or body error.
    pub async fn send(&mut self, req: http::Request<Full<Bytes>>) -> Result<Response, StepError> {
        send_on(&mut self.sender, &mut self.task, req).await
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
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

    #[test]
    fn host_header_omits_the_default_port() {
        assert_eq!(host_header("a.example", 443, true), "a.example");
        assert_eq!(host_header("a.example", 80, false), "a.example");
        assert_eq!(host_header("a.example", 8443, true), "a.example:8443");
        assert_eq!(host_header("a.example", 443, false), "a.example:443");
    }
}
