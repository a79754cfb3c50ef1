//! The `otlp` kind against a local OTLP/HTTP receiver that decodes the real protobuf: accepted;
//! 200 with a partial-success rejection (a failure carrying the gateway's message); 4xx/5xx.

use crate::support::config::ConfigBuilder;
use crate::support::dns::DnsServer;
use crate::support::otlp_receiver::{Mode, Receiver};
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Attempt, Outcome, prepare, run_attempt};
use std::net::Ipv4Addr;

fn write_config(
    path: &std::path::Path,
    dir: &std::path::Path,
    dns: std::net::SocketAddr,
    port: u16,
) {
    config(dir, dns, port).write(path);
}

/// The otlp kind's config: plain OTLP/HTTP to `port` on the primary's name.
fn config(dir: &std::path::Path, dns: std::net::SocketAddr, port: u16) -> ConfigBuilder {
    ConfigBuilder::new(dir, "otel-gateway", "otel.telemetry.internal.example")
        .nameserver(dns)
        .kind("otlp")
        .set("probe.otlp", "port", i64::from(port))
        .tls("disabled", None)
        .branch(
            "primary",
            "PRIMARY",
            "otel-primary.telemetry.internal.example",
            None,
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_export_accepted_rejected_and_refused() {
    let receiver = Receiver::start().await;
    let dns = DnsServer::start("telemetry.internal.example").await;
    dns.set_a("otel-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("otlp.toml");
    write_config(&path, dir.path(), dns.addr(), receiver.port);
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let clock = Clock::start();

    receiver.set(Mode::Accept);
    let a = run_attempt(&probes[0], &resolver, &clock, 1).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    assert_eq!(
        receiver.markers.lock().unwrap().last(),
        Some(&a.marker),
        "the marker arrived in the protobuf"
    );

    receiver.set(Mode::Partial);
    let a = run_attempt(&probes[0], &resolver, &clock, 2).await;
    match &a.outcome {
        Outcome::Failure {
            step,
            class,
            message,
        } => {
            assert_eq!((*step, *class), (Step::Write, FailureClass::OtlpRejected));
            assert!(message.contains("not allowed"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let evidence = serde_json::to_value(&a).unwrap();
    assert_eq!(
        evidence["otlp"]["message"],
        "metric name readyprobe.canary not allowed"
    );
    assert_eq!(evidence["otlp"]["rejected"], 1);

    receiver.set(Mode::Html);
    let a = run_attempt(&probes[0], &resolver, &clock, 4).await;
    assert!(
        matches!(
            a.outcome,
            Outcome::Failure {
                step: Step::Write,
                class: FailureClass::ProtocolError,
                ..
            }
        ),
        "a 200 that is not an OTLP response is not a success: {a:?}"
    );

    for (m, status) in [(Mode::BadRequest, 400), (Mode::Unavailable, 503)] {
        receiver.set(m);
        let a = run_attempt(&probes[0], &resolver, &clock, 3).await;
        assert!(
            matches!(
                a.outcome,
                Outcome::Failure {
                    step: Step::Write,
                    class: FailureClass::HttpStatus,
                    ..
                }
            ),
            "{m:?}: {a:?}"
        );
        assert_eq!(a.otlp.as_ref().unwrap().status, Some(status));
        if m == Mode::BadRequest {
            assert_eq!(
                a.otlp.as_ref().unwrap().message.as_deref(),
                Some("bad resource")
            );
        }
    }
    receiver.task.abort();
}

/// One attempt over plain HTTP with `token` as the Authorization header (from a file), against a
/// receiver answering in `mode`; the receiver is returned so the test ends it.
async fn attempt_with_token(token: &str, mode: Mode) -> (Receiver, Attempt) {
    let receiver = Receiver::start().await;
    let dns = DnsServer::start("telemetry.internal.example").await;
    dns.set_a("otel-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), token).unwrap();
    let cfg = config(dir.path(), dns.addr(), receiver.port)
        .set("probe.tls", "danger_send_secrets_unverified", true)
        .merge("[probe.otlp]\nheaders = { authorization = { file = \"token\" } }\n")
        .load(&dir.path().join("otlp.toml"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    receiver.set(mode);
    let a = run_attempt(&probes[0], &resolver, &Clock::start(), 1).await;
    (receiver, a)
}

/// A gateway that quotes the Authorization value in its rejection: the attempt's message and the
/// recorded gateway message carry `<redacted>` instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_message_quoting_the_token_is_redacted() {
    const TOKEN: &str = "Bearer S3cr3t-otlp-41c9";
    let (receiver, a) = attempt_with_token(TOKEN, Mode::EchoAuth).await;
    let Outcome::Failure { class, message, .. } = &a.outcome else {
        panic!("{a:?}");
    };
    assert_eq!(*class, FailureClass::OtlpRejected, "{a:?}");
    assert_eq!(
        a.otlp.as_ref().unwrap().message.as_deref(),
        Some("token <redacted> is not allowed here (<redacted>)")
    );
    assert!(
        message.contains("token <redacted> is not allowed"),
        "{message}"
    );
    assert!(!serde_json::to_string(&a).unwrap().contains("S3cr3t"));
    assert!(!a.tls_verified, "plain HTTP");
    receiver.task.abort();
}

/// A gateway that quotes the token split in two by a newline: each half (at least 12 characters
/// long) is redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_message_splitting_the_token_is_redacted() {
    const TOKEN: &str = "Bearer S3cr3t-otlp-41c9-LongerPart-0d1e";
    let (receiver, a) = attempt_with_token(TOKEN, Mode::EchoTokenSplit).await;
    let Outcome::Failure { class, .. } = &a.outcome else {
        panic!("{a:?}");
    };
    assert_eq!(*class, FailureClass::OtlpRejected, "{a:?}");
    assert_eq!(
        a.otlp.as_ref().unwrap().message.as_deref(),
        // The space before the token is the secret's too (a run of it with `Bearer `'s space).
        Some("token<redacted>\n<redacted> is not allowed")
    );
    let line = serde_json::to_string(&a).unwrap();
    assert!(!line.contains("S3cr3t") && !line.contains("0d1e"), "{line}");
    receiver.task.abort();
}
