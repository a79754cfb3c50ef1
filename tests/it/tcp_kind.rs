//! The `tcp` probe kind against a real TLS server on loopback: resolve → connect → tls, the
//! certificate checked against the endpoint name; a liveness-level probe that `check` flags.

use crate::support::config::ConfigBuilder;
use crate::support::dns::DnsServer;
use crate::support::tls::TestCa;
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Outcome, prepare, run_attempt};
use std::net::{IpAddr, Ipv4Addr};
use tokio::net::TcpListener;

const NAME: &str = "gateway.orders.internal.example";

async fn tls_server(cert: &crate::support::tls::ServerCert) -> (u16, tokio::task::JoinHandle<()>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(s).await;
            });
        }
    });
    (port, task)
}

/// The tcp kind's config, TLS checked against the endpoint name.
fn config(
    dir: &std::path::Path,
    dns: &DnsServer,
    port: u16,
    ca: &std::path::Path,
) -> ConfigBuilder {
    ConfigBuilder::new(dir, "gateway", "gw.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .tls("verify_identity", Some(ca))
        .branch("primary", "PRIMARY", NAME, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_kind_resolves_connects_and_checks_tls() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&[NAME], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let (port, server) = tls_server(&cert).await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gateway", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tcp.toml");
    let cfg = config(dir.path(), &dns, port, ca.ca_pem_path()).load(&path);
    assert!(
        cfg.warnings.iter().any(|w| w.contains("liveness-level")),
        "{:?}",
        cfg.warnings
    );
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 1).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let steps: Vec<_> = a.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(steps, ["resolve", "connect", "tls"]);
    assert!(a.tls.as_ref().unwrap().leaf_not_after.is_some());

    // Untrusted CA → tls_untrusted; no listener → tcp_refused.
    let other = TestCa::named("other");
    let cfg = config(dir.path(), &dns, port, other.ca_pem_path()).load(&path);
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 2).await;
    assert!(
        matches!(
            a.outcome,
            Outcome::Failure {
                step: Step::Tls,
                class: FailureClass::TlsUntrusted,
                ..
            }
        ),
        "{a:?}"
    );
    server.abort();
    let _ = server.await;
    let cfg = config(dir.path(), &dns, port, ca.ca_pem_path()).load(&path);
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 3).await;
    assert!(
        matches!(
            a.outcome,
            Outcome::Failure {
                step: Step::Connect,
                class: FailureClass::TcpRefused,
                ..
            }
        ),
        "{a:?}"
    );
}

/// A TLS 1.3 server that requires a client certificate rejects it after the handshake; the tcp
/// kind must not report that as success. With the certificate it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_kind_reports_a_rejected_client_certificate() {
    use rustls::pki_types::pem::PemObject;
    let ca = TestCa::new();
    let cert = ca.server_cert(&[NAME], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca.ca_pem_path()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let client_verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(cert.cert_pem_path())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(cert.key_pem_path()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(s).await {
                    let mut b = [0u8; 1];
                    let _ = tokio::io::AsyncReadExt::read(&mut tls, &mut b).await;
                }
            });
        }
    });
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gateway", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tcp.toml");
    let base = config(dir.path(), &dns, port, ca.ca_pem_path());
    let cfg = base.load(&path);
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 1).await;
    assert!(
        matches!(
            a.outcome,
            Outcome::Failure {
                step: Step::Tls,
                ..
            }
        ),
        "no client certificate must not pass: {a:?}"
    );
    assert!(
        a.tls.is_some()
            && a.certificate_subject
                .as_deref()
                .is_some_and(|s| s.contains(NAME)),
        "what the handshake learned is kept: {a:?}"
    );
    let client = ca.client_cert("readyprobe-it");
    let cfg = base
        .client_cert(client.cert_pem_path(), client.key_pem_path())
        .load(&path);
    let (resolver, probes) = prepare(&cfg).unwrap();
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 2).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    server.abort();
}

/// Runs one `tcp` branch whose port refuses connections (every attempt fails `tcp_refused` at
/// `connect`) for `secs` seconds with `min_attempts` 2 and the timing `settings` add; returns the
/// evidence records.
/// Runs until `done(evidence)` holds, or `secs` at most (the assertions then say what is missing).
async fn run_refused_branch(
    secs: u64,
    settings: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    use crate::support::config::path;
    use crate::support::fixture::read_evidence;
    use readyprobe::runner::{RunOptions, run};
    use readyprobe::sink::emf::EmfBuffer;
    use std::time::Duration;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gateway", Ipv4Addr::LOCALHOST, 5).await;
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let builder = ConfigBuilder::new(dir.path(), "gateway", "gw.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .tls("disabled", None)
        .branch("primary", "PRIMARY", NAME, None)
        .set("readiness", "min_attempts", 2)
        .set("evidence", "path", path(&evidence));
    let cfg = settings(builder).load(&dir.path().join("tcp.toml"));
    let opts = RunOptions {
        duration: Some(Duration::from_secs(secs)),
        grace: Duration::from_secs(2),
        emf_out: Some(EmfBuffer::new()),
        heartbeat: None,
    };
    let ev = evidence.clone();
    let stop = async move {
        while !done(&read_evidence(&ev)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        "done"
    };
    run(cfg, opts, stop).await.unwrap();
    read_evidence(&evidence)
}

/// Adaptive probing end to end: a branch whose port refuses connections becomes suspect once
/// its unready condition holds (the second failure, `min_attempts` 2), and from then on its
/// attempts start every `suspect_interval` (250 ms) instead of every `interval` (1 s). Wide
/// margins: a gap counts as fast below 625 ms, halfway between the two; without adaptive
/// probing every gap is about 1 s and none counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_branch_is_probed_at_its_suspect_interval() {
    let records = run_refused_branch(
        8,
        |b| {
            b.set("probe", "interval", "1s")
                .set("probe", "timeout", "800ms")
                .set("probe", "suspect_interval", "250ms")
        },
        // Ten suspect gaps: enough to tell 250 ms from 1 s.
        |ev| ev.iter().filter(|r| r["kind"] == "attempt").count() >= 12,
    )
    .await;
    let start = records.iter().find(|r| r["kind"] == "start").unwrap();
    assert_eq!(start["suspect_interval_ms"], 250, "{start}");
    let attempts: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "attempt" && r["branch"] == "primary")
        .collect();
    assert!(
        attempts.iter().all(|a| a["class"] == "tcp_refused"),
        "{attempts:?}"
    );
    let starts: Vec<i64> = attempts
        .iter()
        .map(|a| a["started_at"].as_i64().unwrap())
        .collect();
    // From the second attempt on, the branch is suspect.
    let gaps: Vec<i64> = starts[1..].windows(2).map(|w| w[1] - w[0]).collect();
    let fast = gaps.iter().filter(|g| **g < 625).count();
    assert!(fast >= 4 && 2 * fast >= gaps.len(), "gaps (ms): {gaps:?}");
    // Never back to back (a refused attempt takes about a millisecond): the exact bound is the
    // scheduler's paused-time tests'; here a busy runtime may delay one start's clock reading.
    assert!(gaps.iter().all(|g| *g >= 100), "gaps (ms): {gaps:?}");
}

/// A rule fires when its `for` runs out, not at the next attempt: a refused port probed every
/// 5 s with a 7 s `for` (not a multiple of the interval) goes unready about 7 s after its
/// condition started holding; waiting for the next attempt would make it 10 s (3 s late). Wide
/// margin: less than 1 s late. The transition's `publish` record names its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_fires_when_its_for_runs_out_between_attempts() {
    let records = run_refused_branch(
        20,
        |b| {
            b.set("probe", "interval", "5s")
                .set("probe", "timeout", "2s")
                .set("readiness", "initial", "ready")
                .set("readiness", "window", "60s")
                .merge("[readiness]\ndeclare_unready = { success_rate_below = 95.0, for = \"7s\" }")
        },
        // The transition's publish is recorded after the transition.
        |ev| {
            ev.iter()
                .any(|r| r["kind"] == "publish" && r["reason"] == "transition")
        },
    )
    .await;
    let tr = records
        .iter()
        .find(|r| r["kind"] == "transition")
        .unwrap_or_else(|| panic!("no transition: {records:?}"));
    let t = &tr["transition"];
    assert_eq!(t["to"], "unready", "{tr}");
    let held = t["at"].as_i64().unwrap() - t["held_since"].as_i64().unwrap();
    assert!((7_000..8_000).contains(&held), "held {held} ms: {tr}");
    let batch = tr["batch"].as_u64().unwrap();
    let publish: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "publish" && r["batch"] == batch)
        .collect();
    assert!(
        publish.len() == 1 && publish[0]["reason"] == "transition",
        "{publish:?}"
    );
}
