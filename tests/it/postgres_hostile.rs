//! The `postgres` kind against a scripted server that breaks the protocol (no real PostgreSQL
//! sends these): a refused `SSLRequest` under `verify_identity`, a giant message length, an
//! authentication method loop, endless rows. Each attempt must end as a failure of the right
//! step and class within its deadline, never a panic or a success, and the password never
//! goes out in the clear nor comes back in the attempt (what the evidence records).

use crate::support::config::{ConfigBuilder, path, secret_file};
use crate::support::dns::DnsServer;
use crate::support::fixture::*;
use crate::support::postgres::PG_PRIMARY;
use crate::support::tls::{ServerCert, TestCa};
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass as C, Step};
use readyprobe::probe::{Outcome, prepare, run_attempt};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

type Script = Box<
    dyn FnOnce(Box<dyn Stream>) -> Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> + Send,
>;

/// A backend message: its type, its length, `body`.
fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len() + 4).unwrap();
    [&[kind][..], &len.to_be_bytes(), body].concat()
}

fn auth(code: u32) -> Vec<u8> {
    msg(b'R', &code.to_be_bytes())
}

/// The startup answered: `AuthenticationOk`, `ReadyForQuery`.
fn ready() -> Vec<u8> {
    [auth(0), msg(b'Z', b"I")].concat()
}

fn data_row(value: &[u8]) -> Vec<u8> {
    let len = u32::try_from(value.len()).unwrap();
    msg(
        b'D',
        &[&1u16.to_be_bytes()[..], &len.to_be_bytes(), value].concat(),
    )
}

/// Read one frontend message with a type byte.
async fn recv(s: &mut Box<dyn Stream>) -> std::io::Result<Vec<u8>> {
    let mut h = [0u8; 5];
    s.read_exact(&mut h).await?;
    let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut body).await?;
    Ok(body)
}

/// Read the startup message (no type byte).
async fn startup(s: &mut Box<dyn Stream>) -> std::io::Result<()> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).await?;
    let mut body = vec![0u8; (u32::from_be_bytes(h) as usize).saturating_sub(4)];
    s.read_exact(&mut body).await.map(drop)
}

/// Hold the connection until the client closes it.
async fn hold(mut s: Box<dyn Stream>) -> std::io::Result<()> {
    let mut sink = [0u8; 4096];
    while s.read(&mut sink).await? > 0 {}
    Ok(())
}

fn script<F: Future<Output = std::io::Result<()>> + Send + 'static>(
    f: impl FnOnce(Box<dyn Stream>) -> F + Send + 'static,
) -> Script {
    Box::new(move |s| Box::pin(f(s)))
}

/// A byte stream that records what the client sends in the clear.
struct Heard<S> {
    inner: S,
    heard: Arc<Mutex<Vec<u8>>>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.heard.lock().unwrap().extend(new);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Answer the `SSLRequest` with 'S', the TLS handshake, then `then` inside TLS.
fn over_tls(cert: &ServerCert, then: Script) -> Script {
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
    script(move |mut s| async move {
        let mut req = [0u8; 8];
        s.read_exact(&mut req).await?;
        s.write_all(b"S").await?;
        let tls: Box<dyn Stream> = Box::new(acceptor.accept(s).await?);
        then(tls).await
    })
}

/// The scripts and the step and class each attempt must fail with.
fn cases(cert: &ServerCert) -> Vec<(&'static str, Script, (Step, C))> {
    let giant = [&[b'R'][..], &0x7fff_fff0u32.to_be_bytes()].concat();
    vec![
        (
            "SSLRequest refused ('N') under verify_identity",
            script(|mut s| async move {
                let mut req = [0u8; 8];
                s.read_exact(&mut req).await?;
                s.write_all(b"N").await?;
                // A prober that went on in the clear would send its startup message: ask it
                // for the password in cleartext, so that the check below sees it if it answers.
                startup(&mut s).await?;
                s.write_all(&auth(3)).await?;
                recv(&mut s).await?;
                hold(s).await
            }),
            (Step::Tls, C::TlsNotOffered),
        ),
        (
            "a giant message length",
            over_tls(
                cert,
                script(move |mut s| async move {
                    startup(&mut s).await?;
                    s.write_all(&giant).await?;
                    hold(s).await
                }),
            ),
            (Step::Auth, C::ProtocolError),
        ),
        (
            "an authentication method loop",
            over_tls(
                cert,
                script(|mut s| async move {
                    startup(&mut s).await?;
                    loop {
                        s.write_all(&auth(3)).await?;
                        recv(&mut s).await?;
                    }
                }),
            ),
            (Step::Auth, C::ProtocolError),
        ),
        (
            "endless rows",
            over_tls(
                cert,
                script(|mut s| async move {
                    startup(&mut s).await?;
                    s.write_all(&ready()).await?;
                    recv(&mut s).await?;
                    let row = data_row(b"x");
                    loop {
                        s.write_all(&row).await?;
                    }
                }),
            ),
            (Step::Write, C::ProtocolError),
        ),
    ]
}

/// A `postgres` probe of `primary` at `PG_PRIMARY:port`, verified against `ca`.
fn config(
    ca: &TestCa,
    dns: &DnsServer,
    dir: &std::path::Path,
    port: u16,
) -> readyprobe::config::Config {
    ConfigBuilder::new(dir, "orders-pg", "pg.orders.internal.example")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&dir.join("evidence.jsonl")))
        .nameserver(dns.addr())
        .set("dns", "timeout", "300ms")
        .kind("postgres")
        .set("probe", "interval", "5s")
        .set("probe", "timeout", format!("{TIMEOUT_MS}ms"))
        .tls("verify_identity", Some(ca.ca_pem_path()))
        .set("probe.postgres", "user", "readyprobe")
        .set(
            "probe.postgres",
            "password",
            secret_file(&dir.join("password")),
        )
        .branch("primary", "PRIMARY", PG_PRIMARY, Some(port))
        .load(&dir.join("hostile.toml"))
}

const TIMEOUT_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_postgres_server_ends_each_attempt_bounded_without_the_password() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&[PG_PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let dns = DnsServer::start(ZONE).await;
    dns.set_a("pg-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let password = format!("Hostile-Pg-{:016x}", rand::random::<u64>());
    std::fs::write(dir.path().join("password"), &password).unwrap();
    let cases = cases(&cert);
    let mut wrong = Vec::new();
    for (name, script, want) in cases {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let clear = heard.clone();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await?;
            script(Box::new(Heard {
                inner: s,
                heard: clear,
            }))
            .await
        });
        let cfg = config(&ca, &dns, dir.path(), port);
        let (resolver, probes) = prepare(&cfg).unwrap_or_else(|e| panic!("{e:?}"));
        let a = run_attempt(&probes[0], &resolver, &Clock::start(), 1).await;
        server.abort();
        let clear = heard.lock().unwrap().clone();
        let recorded = format!("{a:?}");
        let got = match &a.outcome {
            Outcome::Failure { step, class, .. } => Some((*step, *class)),
            Outcome::Success => None,
        };
        let budget = i64::try_from(TIMEOUT_MS).unwrap() + 1500;
        if got != Some(want)
            || a.finished_at - a.started_at > budget
            || recorded.contains(&password)
            || clear
                .windows(password.len())
                .any(|w| w == password.as_bytes())
        {
            wrong.push(format!("{name}: want {want:?}, got {a:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
