//! RDS IAM authentication through the binary (`readyprobe probe`), with fixed credentials from
//! the environment: the token the prober signs reaches the server as the password, inside the
//! verified TLS session only, and never comes back out of the prober.
//!
//! MySQL: a scripted server (no MariaDB asks for `mysql_clear_password` without PAM) that greets
//! with TLS, asks for `mysql_clear_password` inside it, takes the token, and answers with an
//! error quoting it.

use crate::mysql_hostile::server::{Peer, greeting};
use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::*;
use crate::support::tls::TestCa;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

const KEY_ID: &str = "AKIDREADYPROBEIT0001";
const SECRET_KEY: &str = "it-secret-key-0123456789abcdefghijklmnop";

/// `{ rds_iam = { region = "eu-west-1" } }`.
fn rds_iam() -> toml::Value {
    let mut inner = toml::Table::new();
    inner.insert("region".into(), "eu-west-1".into());
    let mut t = toml::Table::new();
    t.insert("rds_iam".into(), toml::Value::Table(inner));
    toml::Value::Table(t)
}

/// `readyprobe probe` with fixed credentials and no other source of them; its stdout and stderr.
async fn probe(config: &std::path::Path) -> (String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["probe", "--branch", "primary", "--config"])
        .arg(config)
        .env("AWS_ACCESS_KEY_ID", KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_REGION", "eu-west-1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out)
        .await
        .expect("probe ran past 60 s")
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn mysql_sends_the_token_by_clear_password_inside_tls_only_and_never_echoes_it() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&[PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let dns = DnsServer::start(ZONE).await;
    dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let clear = heard.clone();
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await?;
        let mut p = Peer {
            io: Box::new(s),
            seq: 0,
            heard: clear,
        };
        p.send(&greeting(10, "mysql_native_password", true)).await?;
        assert_eq!(p.recv().await?.len(), 32, "an SSLRequest");
        let tls = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
        let mut p = Peer {
            io: Box::new(tls.accept(p.io).await?),
            seq: p.seq,
            heard: Arc::default(),
        };
        p.recv().await?;
        p.send(b"\xfemysql_clear_password\0").await?;
        let token = p.recv().await?;
        let token = String::from_utf8(token[..token.len() - 1].to_vec()).unwrap();
        // The server quotes what it got, as a hostile or chatty one may.
        let mut err = vec![0xff, 0x15, 0x04];
        err.extend_from_slice(format!("#28000Access denied for token {token}").as_bytes());
        p.send(&err).await?;
        Ok::<_, std::io::Error>(token)
    });
    let config = ConfigBuilder::new(dir.path(), "orders-db", "mysql.orders.internal.example")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&dir.path().join("evidence.jsonl")))
        .nameserver(dns.addr())
        .kind("mysql")
        .set("probe", "timeout", "4s")
        .set("probe", "interval", "5s")
        .set("probe.mysql", "user", "readyprobe")
        .set("probe.mysql", "password", rds_iam())
        .tls("verify_identity", Some(ca.ca_pem_path()))
        .branch("primary", "PRIMARY", PRIMARY, Some(port))
        .branch("secondary", "SECONDARY", SECONDARY, Some(port))
        .write(&dir.path().join("iam.toml"));
    let (stdout, stderr) = probe(&config).await;
    let token = tokio::time::timeout(std::time::Duration::from_secs(5), server)
        .await
        .unwrap_or_else(|_| panic!("the server is still waiting\n{stdout}\n{stderr}"))
        .unwrap()
        .unwrap_or_else(|e| panic!("the server did not get a token: {e}\n{stdout}\n{stderr}"));
    let prefix = format!("{PRIMARY}:{port}/?Action=connect&DBUser=readyprobe&");
    assert!(token.starts_with(&prefix), "{token}");
    for part in [
        "X-Amz-Algorithm=AWS4-HMAC-SHA256",
        &format!("X-Amz-Credential={KEY_ID}%2F"),
        "%2Feu-west-1%2Frds-db%2Faws4_request",
        "X-Amz-Expires=900",
        "X-Amz-SignedHeaders=host",
        "X-Amz-Signature=",
    ] {
        assert!(token.contains(part), "{part} not in {token}");
    }
    assert!(!token.contains(SECRET_KEY));
    let signature = token.rsplit_once("X-Amz-Signature=").unwrap().1;
    assert_eq!(signature.len(), 64, "{token}");
    let clear = heard.lock().unwrap();
    assert!(
        !clear
            .windows(signature.len())
            .any(|w| w == signature.as_bytes()),
        "the token went out in the clear"
    );
    assert!(stdout.contains("auth_denied"), "{stdout}\n{stderr}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains(signature), "the token came back out: {text}");
    }
}

/// Without credentials the token cannot be signed: an unavailable input named by key, exit 78,
/// nothing probed.
#[tokio::test]
async fn without_credentials_the_token_is_an_unavailable_input() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let config = ConfigBuilder::new(dir.path(), "orders-db", "mysql.orders.internal.example")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .nameserver("127.0.0.1:9")
        .kind("mysql")
        .set("probe.mysql", "user", "readyprobe")
        .set("probe.mysql", "password", rds_iam())
        .tls("verify_identity", Some(ca.ca_pem_path()))
        .branch("primary", "PRIMARY", PRIMARY, None)
        .branch("secondary", "SECONDARY", SECONDARY, None)
        .write(&dir.path().join("iam.toml"));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["probe", "--branch", "primary", "--config"])
        .arg(&config)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out)
        .await
        .expect("probe ran past 60 s")
        .unwrap();
    let stderr = crate::support::run::unavailable_input(&out, "probe.mysql.password");
    assert!(stderr.contains("RDS IAM token"), "{stderr}");
}

/// A real PostgreSQL 15 whose probe role's password is the token (`ALTER ROLE … PASSWORD`,
/// `pg_hba` method `password`, so the server asks for it in clear text) accepts it over the
/// verified TLS session; the same reference without `verify_identity` is a config error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_accepts_the_token_as_its_password_over_verified_tls() {
    use crate::support::postgres::{PgOptions, PgWorld};
    use readyprobe::aws::rds_token::Signer;
    use readyprobe::probe::{Outcome, prepare_service, run_attempt};
    let opts = PgOptions {
        method: "password".into(),
        ..PgOptions::default()
    };
    let Some(w) = PgWorld::start_or_skip(opts).await else {
        return;
    };
    let builder = w
        .config(w.pg.port(), 4000, 3000)
        .set("probe.postgres", "password", rds_iam());
    let path = w.dir.path().join("pg.toml");
    std::fs::write(&path, builder.build()).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let secrets = readyprobe::secrets::SecretCache::default();
    let creds = aws_credential_types::Credentials::new(KEY_ID, SECRET_KEY, None, None, "it");
    secrets.set_signer("eu-west-1", Signer::fixed(creds)).await;
    secrets.read_missing(&cfg).await;
    let what = readyprobe::secrets::tokens::token_for(
        "eu-west-1",
        crate::support::postgres::PG_PRIMARY,
        w.pg.port(),
        "readyprobe",
    );
    let token = secrets.token_cell(&what).unwrap().get();
    assert!(token.contains("%2Frds-db%2Faws4_request"), "{token}");
    w.pg.psql(
        "postgres",
        &format!("ALTER ROLE readyprobe PASSWORD '{token}'"),
    )
    .await;
    let (resolver, probes) =
        prepare_service(&cfg, &cfg.services[0], &secrets).unwrap_or_else(|e| panic!("{e:?}"));
    let a = run_attempt(&probes[0], &resolver, &readyprobe::clock::Clock::start(), 1).await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}\n{}", w.pg.log());
    assert!(a.tls_verified);
    assert!(!w.pg.log().contains(&*token));
    // Unverified TLS: refused by the config, whatever the danger key says.
    let unverified = builder
        .tls("required", None)
        .set("probe.tls", "danger_send_secrets_unverified", true)
        .build();
    std::fs::write(&path, unverified).unwrap();
    let e = readyprobe::config::load(&path).unwrap_err();
    assert!(
        e.issues
            .iter()
            .any(|i| i.key == "probe.postgres.password" && i.message.contains("verify_identity")),
        "{e}"
    );
}
