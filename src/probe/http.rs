//! The `http` probe kind: a marked request on the branch's real write path (e.g. `POST /orders`
//! on the branch's own name), checked for status, body and the answering branch, and an optional
//! read-back request. Resolve, connect and TLS are readyprobe's own steps; hyper speaks HTTP/1.1
//! over the connection they produced (see `http_client`).

use crate::config::HttpRequestSpec;
use crate::failure::{FailureClass, Step};
use http_body_util::Full;
use hyper::body::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;

pub use super::attempt::HttpObservation;
use super::connect::Connected;
use super::ctx::{StepCtx, StepError, StepFailure};
use super::http_client::{
    Connection, Io, Vars, apply_headers, fail, host_header, render, tls_or_plain,
};
pub use super::target::HttpTarget;
use super::target::Redactor;

/// Longest JSON value quoted in a mismatch message, bytes.
const MAX_QUOTED_JSON: usize = 200;

/// Run `tls` (when enabled), `write` (the marked request) and `verify` (when configured).
///
/// # Errors
/// The failing step and its class.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    t: &HttpTarget,
    Connected { stream, addr }: Connected,
) -> Result<(), StepFailure> {
    ctx.learned.http = Some(HttpObservation::default());
    let io = tls_or_plain(ctx, stream).await?;
    let tls = ctx.tls;
    let host = host_header(ctx.endpoint(), ctx.probe.branch.port, tls.is_some());
    let v = Vars::of(ctx.probe, &ctx.marker, ctx.seq);
    let observed = ctx.learned.http.get_or_insert_default();
    let redactor = &ctx.probe.redactor;
    ctx.steps
        .run(Step::Write, write(t, &v, &host, io, observed, redactor))
        .await?;
    if let Some(spec) = &t.settings.verify {
        // The read-back uses a connection of its own to the same address: a server may close
        // the write's connection (`Connection: close`, HTTP/1.0, keep-alive limits).
        let read_back = ReadBack {
            spec,
            addr,
            tls,
            host: &host,
        };
        ctx.steps
            .run(Step::Verify, read_back.run(t, &v, observed))
            .await?;
    }
    Ok(())
}

/// The `write` step: HTTP/1.1 over the attempt's connection, the marked request, its checks.
async fn write(
    t: &HttpTarget,
    v: &Vars<'_>,
    host: &str,
    io: Box<dyn Io>,
    observed: &mut HttpObservation,
    redactor: &Redactor,
) -> Result<(), StepError> {
    let s = &t.settings;
    let mut conn = Connection::open(io).await?;
    let req = build(
        &s.request,
        t,
        v,
        host,
        s.body.as_ref().map(|b| render(b, v)),
    )?;
    let (status, headers, body) = conn.send(req).await?;
    observed.status = Some(status.as_u16());
    if !status_ok(&s.request, status) {
        return Err(fail(
            FailureClass::HttpStatus,
            format!(
                "{} {} answered {status}; accepted: {}",
                s.request.method,
                render(&s.request.path, v),
                if s.request.expect_status.is_empty() {
                    "2xx".to_string()
                } else {
                    format!("{:?}", s.request.expect_status)
                }
            ),
        ));
    }
    if let Some((name, want)) = &s.expect_header {
        let want = render(want, v);
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
        let want = render(want, v);
        if !String::from_utf8_lossy(&body).contains(&want) {
            return Err(fail(
                FailureClass::HttpBodyMismatch,
                format!("response body does not contain {want:?}"),
            ));
        }
    }
    if let Some((pointer, want)) = &s.expect_json {
        check_json(&body, pointer, &render(want, v), redactor)?;
    }
    Ok(())
}

/// The value at `pointer` in the JSON `body` must equal `want` (pure). The value quoted in the
/// mismatch message is redacted before it is shortened, so no part of a secret survives the cut.
///
/// # Errors
/// `http_body_mismatch` when the body is not JSON or the value differs or is absent.
fn check_json(
    body: &[u8],
    pointer: &str,
    want: &str,
    redactor: &Redactor,
) -> Result<(), StepError> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        fail(
            FailureClass::HttpBodyMismatch,
            format!("response body is not JSON: {e}"),
        )
    })?;
    let got = doc.pointer(pointer);
    let matches = match got {
        Some(serde_json::Value::String(s)) => s == want,
        // Numbers compare by value (`1e2` = `100`), booleans and null by their JSON text.
        Some(serde_json::Value::Number(n)) => match (n.as_f64(), want.parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        Some(other) => serde_json::to_string(other).is_ok_and(|t| t == want),
        None => false,
    };
    if matches {
        return Ok(());
    }
    let quoted = got
        .map(|g| {
            let mut t = redactor.redact(&g.to_string());
            if t.len() > MAX_QUOTED_JSON {
                t.truncate(t.floor_char_boundary(MAX_QUOTED_JSON));
                t.push('…');
            }
            t
        })
        .unwrap_or_else(|| "absent".into());
    Err(fail(
        FailureClass::HttpBodyMismatch,
        format!("JSON {pointer} is {quoted}, expected {want:?}"),
    ))
}

/// The `verify` step's read-back request and where it goes.
struct ReadBack<'a> {
    spec: &'a HttpRequestSpec,
    /// The address the write went to.
    addr: SocketAddr,
    tls: Option<&'a Arc<rustls::ClientConfig>>,
    host: &'a str,
}

impl ReadBack<'_> {
    /// A new connection to the write's address; the read-back must answer an accepted status
    /// and contain the marker (or the configured text).
    async fn run(
        &self,
        t: &HttpTarget,
        v: &Vars<'_>,
        observed: &mut HttpObservation,
    ) -> Result<(), StepError> {
        let (spec, addr) = (self.spec, self.addr);
        let stream = TcpStream::connect(addr).await.map_err(|e| {
            fail(
                super::connect::classify_io(&e),
                format!("verify connect to {addr}: {e}"),
            )
        })?;
        let io: Box<dyn Io> = match self.tls {
            Some(cfg) => Box::new(
                super::tls::handshake(cfg.clone(), v.endpoint, stream)
                    .await?
                    .0,
            ),
            None => Box::new(stream),
        };
        let mut conn = Connection::open(io).await?;
        let req = build(spec, t, v, self.host, None)?;
        let r = conn.send(req).await;
        drop(conn);
        let (status, _, body) = r?;
        observed.verify_status = Some(status.as_u16());
        if !status_ok(spec, status) {
            return Err(fail(
                FailureClass::VerifyMismatch,
                format!(
                    "verify {} {} answered {status}",
                    spec.method,
                    render(&spec.path, v)
                ),
            ));
        }
        let want = render(
            spec.expect_body_contains.as_deref().unwrap_or("{{marker}}"),
            v,
        );
        if !String::from_utf8_lossy(&body).contains(&want) {
            return Err(fail(
                FailureClass::VerifyMismatch,
                format!("verify response does not contain {want:?}"),
            ));
        }
        Ok(())
    }
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
    let mut req = http::Request::builder()
        .method(spec.method.clone())
        .uri(render(&spec.path, v))
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, super::http_client::USER_AGENT)
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| {
            fail(
                FailureClass::ProtocolError,
                format!("cannot build the request: {e}"),
            )
        })?;
    apply_headers(&mut req, &t.headers, v)?;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_compare_by_type() {
        let body = br#"{"a": {"n": 1e2, "s": "x", "b": true}}"#;
        let r = Redactor::default();
        assert!(check_json(body, "/a/n", "100", &r).is_ok());
        assert!(check_json(body, "/a/s", "x", &r).is_ok());
        assert!(check_json(body, "/a/b", "true", &r).is_ok());
        let e = check_json(body, "/a/missing", "x", &r).unwrap_err();
        assert_eq!(e.class, FailureClass::HttpBodyMismatch);
        assert_eq!(e.message, r#"JSON /a/missing is absent, expected "x""#);
        let e = check_json(b"<html>", "/a", "x", &r).unwrap_err();
        assert_eq!(e.class, FailureClass::HttpBodyMismatch);
    }

    /// A secret echoed at the cut of the quoted value is redacted whole, not cut in two.
    #[test]
    fn a_quoted_json_value_is_redacted_before_it_is_shortened() {
        let secret = "Bearer S3cr3t-\"quoted\"-token";
        let r = Redactor::new([secret]);
        let echoed = serde_json::json!({ "auth": format!("{}{secret}", "x".repeat(180)) });
        let body = serde_json::to_vec(&echoed).unwrap();
        let e = check_json(&body, "/auth", "other", &r).unwrap_err();
        assert!(!e.message.contains("S3cr3t"), "{}", e.message);
        assert!(e.message.contains("<redacted>"), "{}", e.message);
    }
}
