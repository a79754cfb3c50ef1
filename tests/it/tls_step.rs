//! The `tls` step on real servers: minimum protocol version, client certificates (mTLS), and the
//! leaf certificate's expiry published as `CertificateExpiryDays`.

use crate::support::cloudwatch::{MetricQuery, endpoint, unique_namespace};
use crate::support::config::ConfigBuilder;
use crate::support::fixture::*;
use crate::support::mariadb::{MariaDb, MariaDbOptions};
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Attempt, Outcome, prepare, run_attempt};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

const LO: [IpAddr; 1] = [IpAddr::V4(Ipv4Addr::LOCALHOST)];

async fn attempt(p: &Pipeline, text: &str, branch: &str) -> Attempt {
    let path = p.dir.path().join(format!("tls-{branch}.toml"));
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let probe = probes.iter().find(|b| b.branch.name == branch).unwrap();
    run_attempt(probe, &resolver, &Clock::start(), 1).await
}

fn base(p: &Pipeline) -> ConfigBuilder {
    p.builder(&ConfigOpts {
        interval_ms: 2000,
        timeout_ms: 1500,
        policy: "[readiness]\nwindow = \"30s\"\nmin_attempts = 5\n",
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_below_the_minimum_version_is_tls_protocol_version() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let cert = p.ca.server_cert(&[SECONDARY], &LO);
    let Some(old) = MariaDb::start_with_or_skip(MariaDbOptions {
        tls: Some(cert),
        extra_args: vec!["--tls-version=TLSv1.2".into()],
    })
    .await
    else {
        return;
    };
    old.install_canary(PASSWORD).await;
    let text = base(&p).branch_set("secondary", "port", i64::from(old.port()));
    // TLS 1.2 is acceptable by default…
    let a = attempt(&p, &text.build(), "secondary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    assert!(a.tls.unwrap().version.contains("1_2"));
    // …and a clear class when the config demands 1.3.
    let a = attempt(
        &p,
        &text.set("probe.tls", "tls_min_version", "1.3").build(),
        "secondary",
    )
    .await;
    match a.outcome {
        Outcome::Failure { step, class, .. } => {
            assert_eq!((step, class), (Step::Tls, FailureClass::TlsProtocolVersion))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_required_by_the_server_and_given() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    p.primary
        .root_exec("ALTER USER 'readyprobe'@'%' REQUIRE X509")
        .await;
    let text = base(&p);
    let a = attempt(&p, &text.build(), "primary").await;
    match &a.outcome {
        Outcome::Failure { step, class, .. } => {
            assert_eq!(
                (*step, *class),
                (Step::Auth, FailureClass::AuthDenied),
                "{a:?}"
            )
        }
        other => panic!("without a client certificate: {other:?}"),
    }
    let client = p.ca.client_cert("readyprobe-it");
    let text = text.client_cert(client.cert_pem_path(), client.key_pem_path());
    let a = attempt(&p, &text.build(), "primary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_expiry_days_reach_cloudwatch() {
    let Some(mut p) = Pipeline::start_or_skip().await else {
        return;
    };
    let Some(cw) = cloudwatch().await else { return };
    let now = SystemTime::now();
    let ten_days = p.ca.server_cert_with_validity(
        &[PRIMARY],
        &LO,
        now - Duration::from_secs(86_400),
        now + Duration::from_secs(10 * 86_400),
    );
    p.primary.restart_with_tls(Some(&ten_days)).await;
    // The secondary's certificate expired two days ago: its attempts fail (`tls_expired`), and
    // the metric still says by how much.
    let expired = p.ca.server_cert_with_validity(
        &[SECONDARY],
        &LO,
        now - Duration::from_secs(30 * 86_400),
        now - Duration::from_secs(2 * 86_400),
    );
    p.secondary.restart_with_tls(Some(&expired)).await;
    let ns = unique_namespace("certexpiry");
    let leak: &'static str = Box::leak(ns.clone().into_boxed_str());
    let cfg = p.config(
        "cert.toml",
        &ConfigOpts {
            namespace: leak,
            sinks: &["cloudwatch"],
            endpoint: Some(endpoint()),
            ..Default::default()
        },
    );
    Running::start(cfg, Some(Duration::from_millis(2500)))
        .finish()
        .await;
    let got = MetricQuery::new(&ns, "CertificateExpiryDays")
        .dims(&[("Service", "orders-db"), ("Branch", "primary")])
        .stat("Maximum")
        .poll(&cw, Duration::from_secs(15), |v| !v.is_empty())
        .await;
    let days = got
        .iter()
        .map(|(_, v)| *v)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        (9.99..=10.0).contains(&days),
        "expected about 10 days, got {got:?}"
    );
    let other = MetricQuery::new(&ns, "CertificateExpiryDays")
        .dims(&[("Service", "orders-db"), ("Branch", "secondary")])
        .stat("Minimum")
        .poll(&cw, Duration::from_secs(15), |v| !v.is_empty())
        .await;
    let days = other.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min);
    assert!(
        (-2.01..=-1.99).contains(&days),
        "expected about -2 days, got {other:?}"
    );
}
