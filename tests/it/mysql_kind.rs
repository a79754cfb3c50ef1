//! Each step's failure classes, produced by real peers: a MariaDB that is read-only, frozen,
//! killed or guarded by a trigger; certificates from the wrong CA, for the wrong name, expired;
//! names the DNS server does not have.

use crate::support::config::{ConfigBuilder, secret_file};
use crate::support::fixture::*;
use crate::support::tls::TestCa;
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass, Step};
use readyprobe::probe::{Attempt, Outcome, prepare, run_attempt};
use std::net::{IpAddr, Ipv4Addr};

async fn attempt(p: &Pipeline, text: String, branch: &str) -> Attempt {
    let path = p.dir.path().join(format!("steps-{branch}.toml"));
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let probe = probes.iter().find(|b| b.branch.name == branch).unwrap();
    run_attempt(probe, &resolver, &Clock::start(), 1).await
}

fn failure(a: &Attempt) -> (Step, FailureClass) {
    match &a.outcome {
        Outcome::Failure { step, class, .. } => (*step, *class),
        Outcome::Success => panic!("expected a failure, got success: {a:?}"),
    }
}

fn builder(p: &Pipeline) -> ConfigBuilder {
    p.builder(&ConfigOpts {
        interval_ms: 2000,
        timeout_ms: 1500,
        policy: "[readiness]\nwindow = \"30s\"\nmin_attempts = 5\n",
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_succeeds_and_is_recorded() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let a = attempt(&p, builder(&p).build(), "primary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let steps: Vec<_> = a.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(
        steps,
        ["resolve", "connect", "tls", "auth", "write", "verify"]
    );
    assert!(a.steps.iter().all(|s| s.ok && s.duration_ms >= 0.0));
    assert_eq!(a.answers[0].name, format!("{PRIMARY}."));
    assert_eq!(a.answers[0].ttl, 5);
    assert_eq!(
        a.address.as_deref(),
        Some(p.primary.addr().to_string().as_str())
    );
    assert!(a.tls.as_ref().unwrap().version.contains("TLS"));
    let server = a.server.as_ref().unwrap();
    assert!(!server.read_only);
    assert!(server.version.contains("MariaDB"), "{server:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_classes_from_real_peers() {
    let Some(mut p) = Pipeline::start_or_skip().await else {
        return;
    };
    let config = builder(&p);
    let base = config.build();

    // resolve: the name is gone.
    p.dns.remove("mysql-secondary").await;
    assert_eq!(
        failure(&attempt(&p, base.clone(), "secondary").await),
        (Step::Resolve, FailureClass::DnsNxdomain)
    );
    p.dns.set_a("mysql-secondary", Ipv4Addr::LOCALHOST, 5).await;

    // resolve: the branch name leads through the stable name (a circular control loop).
    p.dns.set_a("mysql", Ipv4Addr::LOCALHOST, 5).await;
    p.dns.set_cname("mysql-secondary", "mysql", 5).await;
    let a = attempt(&p, base.clone(), "secondary").await;
    assert_eq!(
        failure(&a),
        (Step::Resolve, FailureClass::DnsStableName),
        "{a:?}"
    );
    p.dns.set_a("mysql-secondary", Ipv4Addr::LOCALHOST, 5).await;

    // tls: a CA bundle that did not sign the server certificate.
    let other = TestCa::named("some other CA");
    let t = config
        .clone()
        .tls("verify_identity", Some(other.ca_pem_path()))
        .build();
    assert_eq!(
        failure(&attempt(&p, t, "primary").await),
        (Step::Tls, FailureClass::TlsUntrusted)
    );

    // tls: a name the certificate is not for, pointing at the primary's server.
    p.dns.set_a("mysql-wrongname", Ipv4Addr::LOCALHOST, 5).await;
    let t = config
        .clone()
        .branch_set(
            "primary",
            "endpoint",
            "mysql-wrongname.orders.internal.example",
        )
        .build();
    assert_eq!(
        failure(&attempt(&p, t, "primary").await),
        (Step::Tls, FailureClass::TlsNameMismatch)
    );

    // auth: wrong password.
    std::fs::write(p.dir.path().join("wrong"), "not-the-password").unwrap();
    let t = config
        .clone()
        .set(
            "probe.mysql",
            "password",
            secret_file(&p.dir.path().join("wrong")),
        )
        .build();
    assert_eq!(
        failure(&attempt(&p, t, "primary").await),
        (Step::Auth, FailureClass::AuthDenied)
    );

    // write: read-only server.
    p.primary.set_read_only(true).await;
    assert_eq!(
        failure(&attempt(&p, base.clone(), "primary").await),
        (Step::Write, FailureClass::ServerReadOnly)
    );
    p.primary.set_read_only(false).await;

    // verify: something between write and read rewrites the row (a trigger here).
    for (name, event) in [("canary_mangle_i", "INSERT"), ("canary_mangle_u", "UPDATE")] {
        p.primary
            .root_exec(&format!(
                "CREATE TRIGGER readyprobe.{name} BEFORE {event} ON readyprobe.canary \
                 FOR EACH ROW SET NEW.marker = REPEAT('0', 32)"
            ))
            .await;
    }
    let a = attempt(&p, base.clone(), "primary").await;
    assert_eq!(
        failure(&a),
        (Step::Verify, FailureClass::VerifyMismatch),
        "{a:?}"
    );
    assert!(
        a.server.as_ref().is_some_and(|s| !s.hostname.is_empty()),
        "the server that answered the read-back is kept: {a:?}"
    );
    p.primary
        .root_exec("DROP TRIGGER readyprobe.canary_mangle_i")
        .await;
    p.primary
        .root_exec("DROP TRIGGER readyprobe.canary_mangle_u")
        .await;

    // a hung server: the greeting never comes; the attempt deadline cuts it.
    p.secondary.freeze();
    let a = attempt(&p, base.clone(), "secondary").await;
    p.secondary.thaw();
    assert_eq!(failure(&a), (Step::Tls, FailureClass::DeadlineExceeded));
    assert!(
        a.finished_at - a.started_at < 2000,
        "bounded by the 1.5 s attempt deadline"
    );

    // tls: an expired certificate.
    let expired =
        p.ca.expired_server_cert(&[SECONDARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    p.secondary.restart_with_tls(Some(&expired)).await;
    assert_eq!(
        failure(&attempt(&p, base.clone(), "secondary").await),
        (Step::Tls, FailureClass::TlsExpired)
    );

    // connect: nobody listens any more.
    p.secondary.kill();
    assert_eq!(
        failure(&attempt(&p, base, "secondary").await),
        (Step::Connect, FailureClass::TcpRefused)
    );
}
