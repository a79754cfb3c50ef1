//! A local OTLP/HTTP receiver that decodes the real protobuf: it answers as its mode (or a
//! script of modes, one per request) says, and keeps every export it decoded. Shared by the
//! `otlp` probe kind's tests and the `otlp` sink's.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Accept,
    Partial,
    BadRequest,
    Unavailable,
    /// 200 with an HTML page (a login portal, a proxy error page).
    Html,
    /// A partial success rejecting every point ([`ECHO_REJECTED`]) whose message quotes the
    /// request's Authorization value twice.
    EchoAuth,
    /// A partial success rejecting every point whose message quotes the token after `Bearer `,
    /// split in the middle by a newline.
    EchoTokenSplit,
    /// Accept the connection and the request, never answer.
    Silent,
    /// 200 with a 100 KiB body (over the sink's answer cap).
    HugeAccept,
    /// 500, empty.
    InternalError,
    /// 503 with a 100 KiB HTML page (over the sink's answer cap).
    HugeUnavailable,
}

/// A local OTLP/HTTP receiver: answers as `mode` says (after the modes queued in `script`, one
/// per request) and keeps every export it decoded, with the markers of the probe's.
pub struct Receiver {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    shared: Arc<Shared>,
    pub markers: Arc<Mutex<Vec<String>>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// What the receiver's connections share beyond the mode.
#[derive(Default)]
pub struct Shared {
    /// Modes for the next requests, first first; then `mode`.
    script: Mutex<VecDeque<Mode>>,
    /// Every export decoded, with the status answered (`None`: never answered) and its headers.
    requests: Mutex<Vec<Received>>,
}

/// One export the receiver decoded.
#[derive(Clone, Debug)]
pub struct Received {
    pub request: ExportMetricsServiceRequest,
    pub status: Option<u16>,
    pub headers: hyper::HeaderMap,
}

impl Receiver {
    /// A receiver of plain OTLP/HTTP on 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A receiver of OTLP/HTTP over TLS with `tls` on 127.0.0.1.
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> Self {
        Self::start_with(Some(tokio_rustls::TlsAcceptor::from(tls))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Accept));
        let markers: Arc<Mutex<Vec<String>>> = Default::default();
        let shared: Arc<Shared> = Default::default();
        let (m, seen, sh) = (mode.clone(), markers.clone(), shared.clone());
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let (m, seen, sh) = (m.clone(), seen.clone(), sh.clone());
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(s, m, seen, sh).await,
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(s).await {
                                serve(s, m, seen, sh).await;
                            }
                        }
                    }
                });
            }
        });
        Receiver {
            port,
            mode,
            shared,
            markers,
            task,
        }
    }

    /// Answer every later request as `mode` says.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Answer the next requests as `modes` say, one each, before the current mode.
    pub fn script(&self, modes: &[Mode]) {
        self.shared.script.lock().unwrap().extend(modes);
    }

    /// Every export decoded so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Serve one connection's requests.
async fn serve<S>(s: S, m: Arc<Mutex<Mode>>, seen: Arc<Mutex<Vec<String>>>, sh: Arc<Shared>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (m, seen, sh) = (m.clone(), seen.clone(), sh.clone());
        async move { Ok::<_, std::convert::Infallible>(answer(req, &m, &seen, &sh).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(s), svc)
        .await;
}

type Reply = hyper::Response<Full<Bytes>>;

/// The rejected count of the echo modes: more than any export holds, so the whole export is
/// refused and the message reaches the error.
pub const ECHO_REJECTED: i64 = 1_000_000;

/// Decode the export, keep it (and its marker, if the probe's), answer as the script or the
/// current mode says (400 for a request that is not a protobuf export).
async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    mode: &Mutex<Mode>,
    seen: &Mutex<Vec<String>>,
    shared: &Shared,
) -> Reply {
    let ok_type = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/x-protobuf");
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)")
        .to_string();
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    // The sink gzips (`Content-Encoding: gzip`), the probe kind does not.
    let body = if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        let mut plain = Vec::new();
        let unzipped = std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(body.as_ref()),
            &mut plain,
        );
        if unzipped.is_err() {
            return reply(400, Default::default());
        }
        Bytes::from(plain)
    } else {
        body
    };
    let decoded = ExportMetricsServiceRequest::decode(body.as_ref()).ok();
    let (true, Some(request)) = (ok_type, decoded) else {
        return reply(400, Default::default());
    };
    if let Some(marker) = marker_of(&request) {
        seen.lock().unwrap().push(marker);
    }
    let scripted = shared.script.lock().unwrap().pop_front();
    let mode = scripted.unwrap_or(*mode.lock().unwrap());
    let index = {
        let mut all = shared.requests.lock().unwrap();
        all.push(Received {
            request,
            status: None,
            headers,
        });
        all.len() - 1
    };
    if mode == Mode::Silent {
        return std::future::pending().await;
    }
    let answer = reply_for(mode, &auth);
    shared.requests.lock().unwrap()[index].status = Some(answer.status().as_u16());
    answer
}

/// The answer of `mode` (`auth`: the request's Authorization value, for the echo modes).
fn reply_for(mode: Mode, auth: &str) -> Reply {
    match mode {
        Mode::Accept => reply(200, Default::default()),
        Mode::Partial => reply(
            200,
            ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess {
                    rejected_data_points: 1,
                    error_message: "metric name readyprobe.canary not allowed".into(),
                }),
            },
        ),
        Mode::BadRequest => {
            // google.rpc.Status { code: 3, message: "bad resource" }, by hand.
            let mut b = vec![0x08, 0x03, 0x12, 12];
            b.extend_from_slice(b"bad resource");
            hyper::Response::builder()
                .status(400)
                .header("content-type", "application/x-protobuf")
                .body(Full::new(Bytes::from(b)))
                .unwrap()
        }
        Mode::Unavailable => reply(503, Default::default()),
        Mode::InternalError => reply(500, Default::default()),
        Mode::EchoAuth => reply(
            200,
            ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess {
                    rejected_data_points: ECHO_REJECTED,
                    error_message: format!("token {auth} is not allowed here ({auth})"),
                }),
            },
        ),
        Mode::EchoTokenSplit => {
            let token = auth.strip_prefix("Bearer ").unwrap_or(auth);
            let (a, b) = token.split_at(token.len() / 2);
            reply(
                200,
                ExportMetricsServiceResponse {
                    partial_success: Some(ExportMetricsPartialSuccess {
                        rejected_data_points: ECHO_REJECTED,
                        error_message: format!("token {a}\n{b} is not allowed"),
                    }),
                },
            )
        }
        Mode::Html => hyper::Response::builder()
            .status(200)
            .header("content-type", "text/html")
            .body(Full::new(Bytes::from("<html>sign in</html>")))
            .unwrap(),
        Mode::HugeAccept | Mode::HugeUnavailable => {
            let (status, content_type) = if mode == Mode::HugeAccept {
                (200, "application/x-protobuf")
            } else {
                (503, "text/html")
            };
            hyper::Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(Full::new(Bytes::from(vec![b'x'; 100 * 1024])))
                .unwrap()
        }
        Mode::Silent => unreachable!("answered above"),
    }
}

fn reply(status: u16, resp: ExportMetricsServiceResponse) -> Reply {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(resp.encode_to_vec())))
        .unwrap()
}

/// The `readyprobe.marker` attribute of the export's first data point.
fn marker_of(r: &ExportMetricsServiceRequest) -> Option<String> {
    let m = r
        .resource_metrics
        .first()?
        .scope_metrics
        .first()?
        .metrics
        .first()?;
    let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Gauge(g)) = &m.data else {
        return None;
    };
    let attr = g
        .data_points
        .first()?
        .attributes
        .iter()
        .find(|a| a.key == "readyprobe.marker")?;
    match attr.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}
