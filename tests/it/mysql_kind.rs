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
    assert!(a.tls_verified, "verify_identity: chain and name checked");
}

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
}

/// Attempt records of a bounded in-process run of `text` (both branches).
async fn run_attempts(p: &Pipeline, name: &str, text: String) -> Vec<serde_json::Value> {
    let path = p.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(p.evidence());
    Running::start(cfg, Some(std::time::Duration::from_millis(1500)))
        .finish()
        .await;
    read_evidence(&p.evidence())
        .into_iter()
        .filter(|r| r["kind"] == "attempt")
        .collect()
}

/// ssl_mode `required` accepts any certificate, so the password would go to whichever server
/// answers: a config error naming the danger key, unless that key allows it; then `check` warns
/// and every attempt's evidence says `tls_verified: false`. Under verify_identity it says true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_goes_only_over_a_verified_session_unless_a_danger_key_allows_it() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let opts = ConfigOpts::default();
    let required = p.builder(&opts).tls("required", None);
    let path = p.dir.path().join("required.toml");
    std::fs::write(&path, required.build()).unwrap();
    for cmd in ["check", "run"] {
        let out = bin().arg(cmd).arg("--config").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{cmd}: {err}");
        assert!(
            err.contains(&format!("{}:", path.display()))
                && err.contains("probe.tls.ssl_mode")
                && err.contains("probe.tls.danger_send_secrets_unverified = true"),
            "{cmd}: {err}"
        );
    }
    assert!(!p.evidence().exists(), "nothing ran");

    let allowed = required.set("probe.tls", "danger_send_secrets_unverified", true);
    std::fs::write(&path, allowed.build()).unwrap();
    let out = bin()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("warning: probe.tls.danger_send_secrets_unverified is true"),
        "{text}"
    );
    let attempts = run_attempts(&p, "allowed.toml", allowed.build()).await;
    assert!(attempts.len() >= 2, "{attempts:?}");
    for a in &attempts {
        assert_eq!(a["result"], "success", "{a}");
        assert!(a["tls"]["version"].is_string(), "a TLS session: {a}");
        assert_eq!(a["tls_verified"], false, "{a}");
    }

    let attempts = run_attempts(&p, "verified.toml", p.builder(&opts).build()).await;
    assert!(attempts.len() >= 2, "{attempts:?}");
    for a in &attempts {
        assert_eq!(a["result"], "success", "{a}");
        assert_eq!(a["tls_verified"], true, "{a}");
    }
}

/// A probe user that may write through `read_only` (READ_ONLY ADMIN in MariaDB 10.11, or SUPER)
/// gets its write in, but the application's users would not: the attempt fails at `verify` as
/// `server_read_only`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_reports_read_only_fails_verify_even_when_the_write_went_through() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    p.primary
        .root_exec("GRANT READ_ONLY ADMIN ON *.* TO 'readyprobe'@'%'")
        .await;
    p.primary.set_read_only(true).await;
    let a = attempt(&p, builder(&p).build(), "primary").await;
    assert_eq!(
        failure(&a),
        (Step::Verify, FailureClass::ServerReadOnly),
        "{a:?}"
    );
    let write = a.steps.iter().find(|s| s.step == Step::Write).unwrap();
    assert!(write.ok, "the write itself went through: {a:?}");
    assert!(a.server.as_ref().is_some_and(|s| s.read_only), "{a:?}");
    let rows: Vec<String> = p
        .primary
        .root_query(&format!(
            "SELECT marker FROM readyprobe.canary WHERE marker = '{}'",
            a.marker
        ))
        .await;
    assert_eq!(rows.len(), 1, "the marked row is on the server");
    p.primary.set_read_only(false).await;
    let a = attempt(&p, builder(&p).build(), "primary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
}

/// A trigger between write and read rewrites the canary row: the read-back is a
/// `verify_mismatch` that keeps the server that answered (the triggers are dropped after).
async fn rewritten_row_is_a_verify_mismatch(p: &Pipeline, base: String) {
    for (name, event) in [("canary_mangle_i", "INSERT"), ("canary_mangle_u", "UPDATE")] {
        p.primary
            .root_exec(&format!(
                "CREATE TRIGGER readyprobe.{name} BEFORE {event} ON readyprobe.canary \
                 FOR EACH ROW SET NEW.marker = REPEAT('0', 32)"
            ))
            .await;
    }
    let a = attempt(p, base, "primary").await;
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
    rewritten_row_is_a_verify_mismatch(&p, base.clone()).await;

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

/// Under `innodb_read_only` a canary table of another engine (Aria here) still takes the write:
/// the server's own `@@innodb_read_only` fails the attempt at `verify` as `server_read_only`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_under_innodb_read_only_fails_verify_even_when_the_write_went_through() {
    use crate::support::mariadb::{MariaDb, MariaDbOptions, canary_sql, split_sql_script};
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let cert =
        p.ca.server_cert(&[PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let ro = MariaDb::start_with(MariaDbOptions {
        tls: Some(cert),
        extra_args: vec!["--innodb-read-only".into()],
    })
    .await;
    let script = canary_sql(PASSWORD).replace("ENGINE = InnoDB", "ENGINE = Aria");
    for stmt in split_sql_script(&script) {
        ro.root_exec(&stmt).await;
    }
    let text = p
        .builder(&ConfigOpts {
            interval_ms: 2000,
            timeout_ms: 1500,
            primary_port: Some(ro.port()),
            policy: "[readiness]\nwindow = \"30s\"\nmin_attempts = 5\n",
            ..Default::default()
        })
        .build();
    let a = attempt(&p, text, "primary").await;
    assert_eq!(
        failure(&a),
        (Step::Verify, FailureClass::ServerReadOnly),
        "{a:?}"
    );
    assert!(
        a.steps.iter().any(|s| s.step == Step::Write && s.ok),
        "{a:?}"
    );
    let s = a.server.as_ref().unwrap();
    assert!(s.innodb_read_only && !s.read_only, "{s:?}");
}

/// The CA bundle and client identity are read once at start-up: replacing the CA file afterwards
/// with a FIFO (whose `open` waits for a writer forever) and the certificate and key with junk
/// changes nothing: the attempt's one TLS session trusts the bundle as loaded then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_swapped_after_start_are_never_read_again() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let client = p.ca.client_cert("readyprobe-it");
    let copy = |name: &str, from: &std::path::Path| {
        let to = p.dir.path().join(name);
        std::fs::copy(from, &to).unwrap();
        to
    };
    let ca = copy("swapped-ca.pem", p.ca.ca_pem_path());
    let cert = copy("swapped-cert.pem", client.cert_pem_path());
    let key = copy("swapped-key.pem", client.key_pem_path());
    let text = builder(&p)
        .tls("verify_identity", Some(&ca))
        .client_cert(&cert, &key)
        .build();
    let path = p.dir.path().join("swapped.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let probe = probes.iter().find(|b| b.branch.name == "primary").unwrap();

    std::fs::remove_file(&ca).unwrap();
    let c = std::ffi::CString::new(ca.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let _unblock = Unblock(ca.clone());
    for f in [&cert, &key] {
        std::fs::write(f, "not PEM").unwrap();
    }
    for seq in 1..=3 {
        let a = run_attempt(probe, &resolver, &Clock::start(), seq).await;
        assert_eq!(a.outcome, Outcome::Success, "attempt {seq}: {a:?}");
    }
}

/// On drop, opens and closes the FIFO's write end, so a reader stuck opening it (a regression)
/// gets end-of-file and the runtime can shut down.
struct Unblock(std::path::PathBuf);

impl Drop for Unblock {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0);
    }
}

/// The server's `Connections` status counter (every connection it accepted), read on `root`'s
/// one connection so reading it adds nothing.
async fn connections(root: &mut mysql_async::Conn) -> u64 {
    use mysql_async::prelude::Queryable;
    let row: Option<(String, u64)> = root
        .query_first("SHOW GLOBAL STATUS LIKE 'Connections'")
        .await
        .unwrap();
    row.unwrap().1
}

/// One attempt is one connection to the target, with TLS and without: the session whose
/// certificate the `tls` step verified carries the password, the write and the read-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_is_one_connection() {
    const N: u64 = 5;
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let plain =
        builder(&p)
            .tls("disabled", None)
            .set("probe.tls", "danger_send_secrets_unverified", true);
    for (name, text) in [
        ("verify_identity", builder(&p).build()),
        ("disabled", plain.build()),
    ] {
        let path = p.dir.path().join(format!("one-connection-{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let (resolver, probes) = prepare(&cfg).unwrap();
        let probe = probes.iter().find(|b| b.branch.name == "primary").unwrap();
        let mut root = p.primary.root_conn().await.unwrap();
        let before = connections(&mut root).await;
        for seq in 1..=N {
            let a = run_attempt(probe, &resolver, &Clock::start(), seq).await;
            assert_eq!(a.outcome, Outcome::Success, "{name} attempt {seq}: {a:?}");
            assert_eq!(a.tls.is_some(), name != "disabled", "{a:?}");
        }
        let after = connections(&mut root).await;
        assert_eq!(after - before, N, "{name}: connections per {N} attempts");
        let _ = root.disconnect().await;
    }
}

/// A probe user identified by a plugin readyprobe does not speak (MariaDB's `ed25519`): the
/// server asks to switch to it and the attempt fails at `auth`, naming the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_auth_plugin_fails_auth_naming_it() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    if let Err(e) = p
        .primary
        .try_root_exec("INSTALL SONAME 'auth_ed25519'")
        .await
    {
        crate::support::skip_or_panic(&format!("MariaDB's auth_ed25519 plugin: {e}"));
        return;
    }
    p.primary
        .root_exec(&format!(
            "ALTER USER 'readyprobe'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('{PASSWORD}')"
        ))
        .await;
    let a = attempt(&p, builder(&p).build(), "primary").await;
    assert_eq!(failure(&a), (Step::Auth, FailureClass::AuthDenied), "{a:?}");
    let Outcome::Failure { message, .. } = &a.outcome else {
        unreachable!()
    };
    assert!(message.contains("client_ed25519"), "{message}");

    // Back to mysql_native_password: the same attempt succeeds.
    p.primary
        .root_exec(&format!(
            "ALTER USER 'readyprobe'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{PASSWORD}')"
        ))
        .await;
    let a = attempt(&p, builder(&p).build(), "primary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
}
