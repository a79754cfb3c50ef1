//! The `http` kind against a real HTTPS server on loopback (certificates from the test CA): the
//! marked request on the write path, its checks, the answering branch, and the read-back.

use crate::support::config::ConfigBuilder;
use crate::support::dns::DnsServer;
use crate::support::tls::TestCa;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Outcome, prepare, run_attempt};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

const NAME: &str = "api-primary.orders.internal.example";
const TOKEN: &str = "Bearer s3cret-token";

/// How the test server misbehaves.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Good,
    Status500,
    WrongId,
    WrongBranch,
    Forgetful,
    /// Good answers, but every connection is closed after one response.
    Closing,
}

struct Server {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(ca: &TestCa) -> Server {
    let cert = ca.server_cert(&[NAME], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mode = Arc::new(Mutex::new(Mode::Good));
    let store: Arc<Mutex<HashSet<String>>> = Default::default();
    let m = mode.clone();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (acceptor, mode, store) = (acceptor.clone(), m.clone(), store.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (mode, store) = (mode.clone(), store.clone());
                        async move {
                            let mode = *mode.lock().unwrap();
                            let auth_ok = req
                                .headers()
                                .get("authorization")
                                .is_some_and(|v| v == TOKEN);
                            let host = req.headers().get("host").cloned();
                            let (method, path) =
                                (req.method().clone(), req.uri().path().to_string());
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let resp = |status: u16, branch: &str, body: String| {
                                hyper::Response::builder()
                                    .status(status)
                                    .header(
                                        "connection",
                                        if mode == Mode::Closing {
                                            "close"
                                        } else {
                                            "keep-alive"
                                        },
                                    )
                                    .header("x-branch", branch)
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap()
                            };
                            if !auth_ok || host.is_none() {
                                return Ok::<_, std::convert::Infallible>(resp(
                                    401,
                                    "primary",
                                    "{}".into(),
                                ));
                            }
                            Ok(match (method.as_str(), path.as_str()) {
                                ("POST", "/orders") => {
                                    let v: serde_json::Value =
                                        serde_json::from_slice(&body).unwrap();
                                    let marker = v["canary"].as_str().unwrap().to_string();
                                    if mode != Mode::Forgetful {
                                        store.lock().unwrap().insert(marker.clone());
                                    }
                                    match mode {
                                        Mode::Status500 => resp(500, "primary", "oops".into()),
                                        Mode::WrongId => {
                                            resp(201, "primary", r#"{"id":"other"}"#.into())
                                        }
                                        Mode::WrongBranch => resp(
                                            201,
                                            "secondary",
                                            format!(r#"{{"id":"{marker}"}}"#),
                                        ),
                                        _ => {
                                            resp(201, "primary", format!(r#"{{"id":"{marker}"}}"#))
                                        }
                                    }
                                }
                                ("GET", p) if p.starts_with("/orders/") => {
                                    let m = &p["/orders/".len()..];
                                    if store.lock().unwrap().contains(m) {
                                        resp(
                                            200,
                                            "primary",
                                            format!(r#"{{"id":"{m}","state":"stored"}}"#),
                                        )
                                    } else {
                                        resp(404, "primary", "not found".into())
                                    }
                                }
                                _ => resp(404, "primary", "no route".into()),
                            })
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Server { port, mode, task }
}

/// The http kind's config: a marked POST with checks on the answer, and a read-back.
fn config(
    dir: &std::path::Path,
    dns: &DnsServer,
    port: u16,
    ca: &std::path::Path,
) -> ConfigBuilder {
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    ConfigBuilder::new(dir, "orders-api", "api.orders.internal.example")
        .nameserver(dns.addr())
        .kind("http")
        .tls("verify_identity", Some(ca))
        .set("probe.http", "port", i64::from(port))
        .set("probe.http", "method", "POST")
        .set("probe.http", "path", "/orders")
        .set(
            "probe.http",
            "body",
            r#"{"canary": "{{marker}}", "seq": {{seq}}}"#,
        )
        .set(
            "probe.http",
            "expect_status",
            toml::Value::Array(vec![201.into()]),
        )
        .merge(
            r#"[probe.http]
headers = { "content-type" = "application/json", authorization = { file = "token" } }
expect_json = { pointer = "/id", equals = "{{marker}}" }
expect_header = { name = "x-branch", equals = "{{branch}}" }
"#,
        )
        .set("probe.http.verify", "path", "/orders/{{marker}}")
        .branch("primary", "PRIMARY", NAME, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_request_checks_and_read_back() {
    let ca = TestCa::new();
    let server = start(&ca).await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("api-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        config(dir.path(), &dns, server.port, ca.ca_pem_path()).load(&dir.path().join("http.toml"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let clock = Clock::start();
    let mut seq = 0;
    let mut attempt = |mode: Mode| {
        *server.mode.lock().unwrap() = mode;
        seq += 1;
        let (probe, resolver, clock) = (&probes[0], &resolver, &clock);
        let s = seq;
        async move { run_attempt(probe, resolver, clock, s).await }
    };

    // A server that closes after each response still passes: verify opens its own connection.
    let a = attempt(Mode::Closing).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let a = attempt(Mode::Good).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let steps: Vec<_> = a.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(steps, ["resolve", "connect", "tls", "write", "verify"]);
    let obs = a.http.as_ref().unwrap();
    assert_eq!((obs.status, obs.verify_status), (Some(201), Some(200)));

    for (mode, want) in [
        (Mode::Status500, (Step::Write, FailureClass::HttpStatus)),
        (Mode::WrongId, (Step::Write, FailureClass::HttpBodyMismatch)),
        (
            Mode::WrongBranch,
            (Step::Write, FailureClass::HttpWrongBranch),
        ),
        (
            Mode::Forgetful,
            (Step::Verify, FailureClass::VerifyMismatch),
        ),
    ] {
        let a = attempt(mode).await;
        match &a.outcome {
            Outcome::Failure { step, class, .. } => {
                assert_eq!((*step, *class), want, "{mode:?}: {a:?}")
            }
            Outcome::Success => panic!("{mode:?} must fail: {a:?}"),
        }
    }
    // The secret header value never appears in the attempt record.
    let a = attempt(Mode::Good).await;
    assert!(!serde_json::to_string(&a).unwrap().contains("s3cret"));
}

/// A server that speaks first (a MySQL greeting, an SSH banner) is not HTTP: the attempt fails at
/// `write`, classified by the connection's own error where the client saw one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_first_is_a_protocol_error() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").await;
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            });
        }
    });
    let ca = TestCa::new();
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("api-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, port, ca.ca_pem_path())
        .tls("disabled", None)
        .set("probe.tls", "danger_send_secrets_unverified", true)
        .load(&dir.path().join("http.toml"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 1).await;
    // Which of the two the HTTP client reports depends on whether the unsolicited bytes are read
    // before the request goes out; either way it is a failure at `write`, never a success.
    match &a.outcome {
        Outcome::Failure { step, class, .. } => assert!(
            *step == Step::Write
                && matches!(
                    class,
                    FailureClass::ProtocolError | FailureClass::ServerGoneAway
                ),
            "{a:?}"
        ),
        other => panic!("{other:?}"),
    }
    server.abort();
}

/// What the echo server sends back.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Echo {
    /// `201`, the Authorization value as the `x-branch` header, `{"id":"<marker>"}`.
    Header,
    /// `201`, the right `x-branch`, the Authorization value as the JSON `id`.
    Json,
    /// `200`, the right `x-branch` and id, the Authorization value in every header and body.
    Everywhere,
    /// As `Header`, with the Authorization value transformed first.
    HeaderAs(Transform),
}

/// How a hostile peer transforms the Authorization value it echoes.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Transform {
    /// The token after `Bearer `.
    TokenOnly,
    /// The token, base64-encoded.
    Base64,
    /// The token, percent-encoded, lower-case hex.
    Percent,
    /// The token, upper-cased.
    Upper,
    /// The token as a JSON string, quoted as a JSON string again.
    JsonTwice,
    /// The first 14 characters of the token.
    Prefix,
    /// The last 13 characters of the token.
    Suffix,
}

impl Transform {
    pub fn apply(self, auth: &str) -> String {
        use base64::Engine;
        let token = auth.strip_prefix("Bearer ").unwrap_or(auth);
        match self {
            Transform::TokenOnly => token.to_string(),
            Transform::Base64 => base64::engine::general_purpose::STANDARD.encode(token),
            Transform::Percent => {
                percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
                    .to_lowercase()
            }
            Transform::Upper => token.to_uppercase(),
            Transform::JsonTwice => {
                serde_json::to_string(&serde_json::to_string(token).unwrap()).unwrap()
            }
            Transform::Prefix => token.chars().take(14).collect(),
            Transform::Suffix => token[token.len().saturating_sub(13)..].to_string(),
        }
    }
}

/// An HTTPS server for `name` that reflects the request's Authorization header back as
/// `mode` says: the hostile peer redaction is for. Aborted on drop.
pub struct EchoServer {
    pub port: u16,
    pub mode: Arc<Mutex<Echo>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EchoServer {
    pub async fn start(ca: &TestCa, name: &str) -> EchoServer {
        let cert = ca.server_cert(&[name], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Echo::Header));
        let m = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let (acceptor, mode) = (acceptor.clone(), m.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(s).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let mode = *mode.lock().unwrap();
                            async move { Ok::<_, std::convert::Infallible>(echo(mode, req).await) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        EchoServer { port, mode, task }
    }

    pub fn set(&self, mode: Echo) {
        *self.mode.lock().unwrap() = mode;
    }
}

async fn echo(
    mode: Echo,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let marker = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["canary"].as_str().map(String::from))
        .unwrap_or_default();
    let (status, branch, id) = match mode {
        Echo::Header => (201, auth.clone(), marker),
        Echo::Json => (201, "primary".to_string(), auth.clone()),
        Echo::Everywhere => (200, "primary".to_string(), marker),
        Echo::HeaderAs(t) => (201, t.apply(&auth), marker),
    };
    let json = serde_json::json!({ "id": id, "you_sent": auth, "twice": [auth, auth] });
    hyper::Response::builder()
        .status(status)
        .header("x-branch", branch)
        .header("x-echo", &auth)
        .header("www-authenticate", &auth)
        .body(Full::new(Bytes::from(json.to_string())))
        .unwrap()
}

/// A server that reflects the Authorization value into a response header and the JSON body:
/// the mismatch messages that quote them carry `<redacted>` instead, in the attempt and its
/// evidence line, also when the secret contains characters `{:?}` and JSON escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflected_secret_is_redacted_from_messages_and_evidence() {
    const SECRET: &str = "Bearer S3cr3t-\"echo\"-7f3a";
    let ca = TestCa::new();
    let server = EchoServer::start(&ca, NAME).await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("api-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, server.port, ca.ca_pem_path())
        .unset("probe.http", "expect_status")
        .load(&dir.path().join("http.toml"));
    std::fs::write(dir.path().join("token"), format!("{SECRET}\n")).unwrap();
    let (resolver, probes) = prepare(&cfg).unwrap();
    for (seq, mode, class) in [
        (1, Echo::Header, FailureClass::HttpWrongBranch),
        (2, Echo::Json, FailureClass::HttpBodyMismatch),
    ] {
        server.set(mode);
        let a = run_attempt(&probes[0], &resolver, &Clock::start(), seq).await;
        let Outcome::Failure {
            class: got,
            message,
            ..
        } = &a.outcome
        else {
            panic!("{mode:?} must fail: {a:?}");
        };
        assert_eq!(*got, class, "{a:?}");
        assert!(message.contains("<redacted>"), "{mode:?}: {message}");
        let line = serde_json::to_string(&a).unwrap();
        assert!(!line.contains("S3cr3t"), "{mode:?}: {line}");
        assert!(!format!("{a:?}").contains("S3cr3t"), "{mode:?}");
    }
}

/// A peer that echoes the token transformed (without its scheme, base64, percent-encoded,
/// upper-cased, JSON-quoted twice, a prefix, a suffix) into the `x-branch` header the
/// `http_wrong_branch` message quotes: no 12-character run of the token, in any of those forms,
/// reaches the message, the evidence line or the attempt's `Debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transformed_echo_of_the_secret_is_redacted() {
    const SECRET: &str = "Bearer s3cr\"et\\Tok+/=xyzLONGSECRETVALUE";
    let ca = TestCa::new();
    let server = EchoServer::start(&ca, NAME).await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("api-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &dns, server.port, ca.ca_pem_path())
        .unset("probe.http", "expect_status")
        .load(&dir.path().join("http.toml"));
    std::fs::write(dir.path().join("token"), format!("{SECRET}\n")).unwrap();
    let (resolver, probes) = prepare(&cfg).unwrap();
    let transforms = [
        Transform::TokenOnly,
        Transform::Base64,
        Transform::Percent,
        Transform::Upper,
        Transform::JsonTwice,
        Transform::Prefix,
        Transform::Suffix,
    ];
    for (seq, t) in (1..).zip(transforms) {
        server.set(Echo::HeaderAs(t));
        let a = run_attempt(&probes[0], &resolver, &Clock::start(), seq).await;
        let Outcome::Failure { class, message, .. } = &a.outcome else {
            panic!("{t:?} must fail: {a:?}");
        };
        assert_eq!(*class, FailureClass::HttpWrongBranch, "{a:?}");
        assert!(message.contains("<redacted>"), "{t:?}: {message}");
        let echoed = t.apply(SECRET);
        let line = serde_json::to_string(&a).unwrap();
        let debug = format!("{a:?}");
        let chars: Vec<char> = echoed.chars().collect();
        for w in chars.windows(12).map(|w| w.iter().collect::<String>()) {
            for (what, text) in [("line", &line), ("debug", &debug)] {
                let quoted = format!("{w:?}");
                let quoted = &quoted[1..quoted.len() - 1];
                assert!(
                    !text.contains(&w) && !text.contains(quoted),
                    "{t:?}: {w:?} in the {what}: {text}"
                );
            }
        }
    }
}
