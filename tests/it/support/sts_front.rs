//! An STS endpoint on 127.0.0.1 for the role tests (`AWS_ENDPOINT_URL_STS`). LocalStack's STS
//! assumes any role (IAM enforcement is off) and issues credentials for an hour (the shortest
//! `DurationSeconds` is 900 s), so two conditions need a front: `Forward` passes each request
//! to LocalStack unchanged and only shortens the `Expiration` of the credentials it returns (they
//! stay LocalStack's own, valid in the role's account), so the SDK's cache must assume the role
//! again within seconds; `Refuse` answers as STS does when the role's trust policy refuses the
//! caller (403 `AccessDenied`). Every request is recorded with its form fields.

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Body = http_body_util::Full<hyper::body::Bytes>;

/// What the front does with a request.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// Forward to LocalStack; the credentials it returns expire this long after issue.
    Forward(Duration),
    /// 403 `AccessDenied`, as STS answers when the trust policy refuses the caller.
    Refuse,
}

/// One request: when (ms since the epoch), its form fields, and the status answered.
#[derive(Debug, Clone)]
pub struct StsCall {
    pub at: i64,
    pub form: Vec<(String, String)>,
    pub status: u16,
}

impl StsCall {
    /// A form field's value.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct StsFront {
    pub url: String,
    calls: Arc<Mutex<Vec<StsCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StsFront {
    /// Listen on an ephemeral port of 127.0.0.1; `upstream` is LocalStack's `host:port`.
    pub async fn start(mode: Mode, upstream: &str) -> StsFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let calls: Arc<Mutex<Vec<StsCall>>> = Arc::default();
        let (c, upstream) = (calls.clone(), upstream.to_string());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (c, upstream) = (c.clone(), upstream.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (c, upstream) = (c.clone(), upstream.clone());
                    async move { Ok::<_, Infallible>(handle(req, mode, &upstream, &c).await) }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        StsFront { url, calls, task }
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<StsCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The `AssumeRole` calls answered 200, in order.
    pub fn assumed(&self) -> Vec<StsCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.field("Action") == Some("AssumeRole") && c.status == 200)
            .collect()
    }
}

fn now_ms() -> i64 {
    super::fake_cloudwatch::now_ms()
}

async fn handle(
    req: Request<Incoming>,
    mode: Mode,
    upstream: &str,
    calls: &Mutex<Vec<StsCall>>,
) -> Response<Body> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let form: Vec<(String, String)> = url_form(&body);
    let (status, text) = match mode {
        Mode::Refuse => (403, refused(&form)),
        Mode::Forward(lifetime) => match forward(&parts, &body, upstream).await {
            Ok((status, text)) => (status, shorten(&text, lifetime)),
            Err(e) => (502, format!("front: {e}")),
        },
    };
    calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(StsCall {
            at: now_ms(),
            form,
            status,
        });
    Response::builder()
        .status(status)
        .header("content-type", "text/xml")
        .body(Body::from(text))
        .unwrap()
}

/// `a=b&c=d` decoded (`+` and `%XX`).
fn url_form(body: &[u8]) -> Vec<(String, String)> {
    let decode = |s: &str| -> String {
        let s = s.replace('+', " ");
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// STS's answer when the role's trust policy does not let the caller assume it.
fn refused(form: &[(String, String)]) -> String {
    let role = form
        .iter()
        .find(|(k, _)| k == "RoleArn")
        .map_or("", |(_, v)| v.as_str());
    format!(
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>\
         <Code>AccessDenied</Code><Message>User: arn:aws:iam::000000000000:root is not authorized to \
         perform: sts:AssumeRole on resource: {role}</Message></Error>\
         <RequestId>6b1d6a57-0000-4000-8000-000000000000</RequestId></ErrorResponse>"
    )
}

/// Send the request to LocalStack as it came (method, path, headers, body) over a connection of
/// its own; its status and body.
async fn forward(
    parts: &hyper::http::request::Parts,
    body: &[u8],
    upstream: &str,
) -> std::io::Result<(u16, String)> {
    let mut head = format!("{} {} HTTP/1.1\r\n", parts.method, parts.uri);
    for (k, v) in &parts.headers {
        if k == "connection" || k == "host" || k == "content-length" {
            continue;
        }
        head.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
    }
    head.push_str(&format!(
        "host: {upstream}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut s = TcpStream::connect(upstream).await?;
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::other("LocalStack did not answer in 10 s"))??;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(502);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The answer with its credentials' `<Expiration>` set `lifetime` from now.
fn shorten(text: &str, lifetime: Duration) -> String {
    let (Some(a), Some(b)) = (text.find("<Expiration>"), text.find("</Expiration>")) else {
        return text.to_string();
    };
    let at = humantime::format_rfc3339_seconds(SystemTime::now() + lifetime);
    format!("{}<Expiration>{at}{}", &text[..a], &text[b..])
}
