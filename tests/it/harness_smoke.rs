//! Smoke tests of the support harness itself: each real component (MariaDB with TLS, the DNS
//! server, the CloudWatch emulator) does what the product tests rely on.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use aws_smithy_types::DateTime;
use hickory_resolver::proto::rr::{RData, RecordType};
use mysql_async::{Conn, Opts, SslOpts, prelude::*};

use crate::support::{
    cloudwatch::{MetricQuery, cloudwatch_or_skip, get_metric_values, unique_namespace},
    dns::{DnsServer, test_resolver},
    mariadb::{CANARY_USER, ER_OPTION_PREVENTS_STATEMENT, MariaDb, split_sql_script},
    tls::{ServerCert, TestCa},
};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const DB_NAME: &str = "db1.orders.internal.example";
/// Has a quote and a backslash, to prove the canary script's password substitution escapes.
const CANARY_PASSWORD: &str = "pa'ss\\word-1";

/// TLS client options trusting only `ca`, verifying the certificate against `name` while the
/// TCP connection goes to 127.0.0.1 (what the prober does: connect by IP, verify the DNS name).
fn verified_tls(ca: &Path, name: &str) -> SslOpts {
    SslOpts::default()
        .with_root_certs(vec![ca.to_path_buf().into()])
        .with_disable_built_in_roots(true)
        .with_danger_tls_hostname_override(Some(name.to_string()))
}

async fn canary_conn(db: &MariaDb, ssl: SslOpts) -> Result<Conn, mysql_async::Error> {
    let opts: Opts = db
        .client_opts(CANARY_USER, CANARY_PASSWORD)
        .ssl_opts(ssl)
        .into();
    tokio::time::timeout(Duration::from_secs(10), Conn::new(opts))
        .await
        .expect("connect did not finish within 10 s")
}

async fn ssl_version(conn: &mut Conn) -> String {
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_version'")
        .await
        .expect("SHOW STATUS");
    row.map(|(_, v)| v).unwrap_or_default()
}

async fn write_canary(conn: &mut Conn, seq: u64) -> Result<(), mysql_async::Error> {
    conn.exec_drop(
        "INSERT INTO readyprobe.canary (prober_id, branch, marker, seq, observed_at) \
         VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3)) \
         ON DUPLICATE KEY UPDATE marker = VALUES(marker), seq = VALUES(seq), \
         observed_at = VALUES(observed_at)",
        ("smoke", "writer", format!("{seq:032x}"), seq),
    )
    .await
}

/// The client address of the session as the server sees it: `localhost` over the unix socket,
/// `127.0.0.1:<port>` over TCP.
async fn transport(conn: &mut Conn) -> String {
    let host: Option<String> = conn
        .query_first("SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()")
        .await
        .expect("own processlist row");
    host.unwrap_or_default()
}

fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

#[test]
fn sql_splitter_handles_comments_and_quotes() {
    let script = "-- header; with a semicolon\n\
                  CREATE TABLE t (a INT COMMENT 'x; y -- not a comment', b TEXT); # trailing\n\
                  /* block; comment */ INSERT INTO t VALUES (1, 'it''s; \\' fine');\n\
                  SELECT \"a;b\", `c;d`;\n  \n-- end\n";
    assert_eq!(
        split_sql_script(script),
        vec![
            "CREATE TABLE t (a INT COMMENT 'x; y -- not a comment', b TEXT)".to_string(),
            "INSERT INTO t VALUES (1, 'it''s; \\' fine')".to_string(),
            "SELECT \"a;b\", `c;d`".to_string(),
        ]
    );
    // The real canary script splits into its statements, placeholder replaced.
    let stmts = split_sql_script(&crate::support::mariadb::canary_sql("pw"));
    assert!(stmts.len() >= 3, "{stmts:#?}");
    assert!(
        stmts
            .iter()
            .all(|s| !s.contains("@PASSWORD@") && !s.starts_with("--"))
    );
}

#[tokio::test]
async fn mariadb_tls_canary_and_read_only() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&[DB_NAME], &[LOCALHOST]);
    let Some(db) = MariaDb::start_or_skip(Some(&cert)).await else {
        return;
    };
    db.install_canary(CANARY_PASSWORD).await;

    // Canary user over TLS, verified against the DNS name while connected to 127.0.0.1.
    let mut conn = canary_conn(&db, verified_tls(cert.ca_pem_path(), DB_NAME))
        .await
        .unwrap_or_else(|e| panic!("TLS connect as canary: {e}\nserver log:\n{}", db.log()));
    let tls = ssl_version(&mut conn).await;
    assert!(tls.starts_with("TLSv1."), "session is not TLS: {tls:?}");
    let user: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(user.as_deref(), Some("readyprobe@%"));

    write_canary(&mut conn, 1).await.expect("canary insert");
    write_canary(&mut conn, 2).await.expect("canary upsert");
    let seq: Option<u64> = conn
        .query_first("SELECT seq FROM readyprobe.canary WHERE prober_id = 'smoke'")
        .await
        .unwrap();
    assert_eq!(seq, Some(2));

    // read_only: the unprivileged canary user is refused with 1290 on the same session…
    db.set_read_only(true).await;
    let err = write_canary(&mut conn, 3)
        .await
        .expect_err("write on read_only server");
    assert_eq!(
        server_code(&err),
        Some(ER_OPTION_PREVENTS_STATEMENT),
        "{err}"
    );
    // …while root (privileged) is not, as documented in the canary script.
    db.root_exec("UPDATE readyprobe.canary SET seq = 10 WHERE prober_id = 'smoke'")
        .await;
    db.set_read_only(false).await;
    write_canary(&mut conn, 4)
        .await
        .expect("write after read_only off");
    conn.disconnect().await.unwrap();

    // Verification is really on: IP SAN works without an override, a wrong name and a foreign
    // CA are refused.
    let by_ip = SslOpts::default()
        .with_root_certs(vec![cert.ca_pem_path().to_path_buf().into()])
        .with_disable_built_in_roots(true);
    canary_conn(&db, by_ip)
        .await
        .expect("verify by IP SAN")
        .disconnect()
        .await
        .unwrap();
    let wrong_name = canary_conn(&db, verified_tls(cert.ca_pem_path(), "other.example")).await;
    assert!(wrong_name.is_err(), "wrong DNS name accepted");
    let other_ca = TestCa::named("some other CA");
    let foreign = canary_conn(&db, verified_tls(other_ca.ca_pem_path(), DB_NAME)).await;
    assert!(foreign.is_err(), "certificate from a foreign CA accepted");
}

/// Documents a mysql_async trap for the prober: with the default `prefer_socket = true`, after
/// connecting over TCP to a loopback server mysql_async reads `@@socket` and silently reconnects
/// over that unix socket. Without TLS it succeeds (the TCP path is no longer what is probed);
/// with TLS the socket attempt fails (the SSL request is sent, no handshake follows) and the TCP
/// session is kept, at the cost of a wasted connection. Either way: set `prefer_socket(false)`.
#[tokio::test]
async fn mysql_async_prefer_socket_default_behaviour() {
    let ca = TestCa::new();
    let cert = ca.server_cert(&[DB_NAME], &[LOCALHOST]);
    let Some(db) = MariaDb::start_or_skip(Some(&cert)).await else {
        return;
    };
    db.install_canary(CANARY_PASSWORD).await;
    let base = db.client_opts(CANARY_USER, CANARY_PASSWORD);

    let mut plain = Conn::new(base.clone().prefer_socket(true))
        .await
        .expect("plain");
    assert_eq!(
        transport(&mut plain).await,
        "localhost",
        "expected the unix socket"
    );
    plain.disconnect().await.unwrap();

    let mut explicit = Conn::new(base.clone()).await.expect("prefer_socket(false)");
    assert!(transport(&mut explicit).await.starts_with("127.0.0.1:"));
    explicit.disconnect().await.unwrap();

    let tls = verified_tls(cert.ca_pem_path(), DB_NAME);
    let mut secure = Conn::new(base.prefer_socket(true).ssl_opts(tls))
        .await
        .expect("TLS");
    assert!(transport(&mut secure).await.starts_with("127.0.0.1:"));
    assert!(ssl_version(&mut secure).await.starts_with("TLSv1."));
    secure.disconnect().await.unwrap();
}

#[tokio::test]
async fn client_rejects_expired_server_cert() {
    let ca = TestCa::new();
    let expired: ServerCert = ca.expired_server_cert(&[DB_NAME], &[LOCALHOST]);
    let Some(db) = MariaDb::start_or_skip(Some(&expired)).await else {
        return;
    };
    db.install_canary(CANARY_PASSWORD).await;
    let err = canary_conn(&db, verified_tls(expired.ca_pem_path(), DB_NAME))
        .await
        .expect_err("expired certificate accepted");
    assert!(
        format!("{err:?}").contains("Expired"),
        "expected an expiry error, got {err:?}"
    );
}

#[tokio::test]
async fn mariadb_kill_freeze_stop_restart() {
    let Some(mut db) = MariaDb::start_or_skip(None).await else {
        return;
    };
    db.root_exec("CREATE DATABASE smoke").await;
    db.root_exec("CREATE TABLE smoke.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        .await;
    db.root_exec("INSERT INTO smoke.t VALUES (1)").await;
    let root_opts: Opts = db.client_opts("root", "").into();
    let root_tcp = || root_opts.clone();
    Conn::new(root_tcp())
        .await
        .expect("root over TCP")
        .disconnect()
        .await
        .unwrap();

    // Killed: connections are refused at once.
    let pid = db.pid().expect("running");
    db.kill();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists"
    );
    assert!(!db.is_running());
    let refused = Conn::new(root_tcp())
        .await
        .expect_err("connect to killed server");
    assert!(matches!(refused, mysql_async::Error::Io(_)), "{refused:?}");

    // Restart after SIGKILL: crash recovery keeps committed data, same port.
    let port = db.port();
    db.restart().await;
    assert_eq!(db.port(), port);
    let ids: Vec<i32> = db.root_query("SELECT id FROM smoke.t").await;
    assert_eq!(ids, vec![1]);

    // Frozen: TCP connects (kernel backlog) but the handshake never comes.
    db.freeze();
    let hung = tokio::time::timeout(Duration::from_secs(1), Conn::new(root_tcp())).await;
    assert!(hung.is_err(), "frozen server answered: {hung:?}");
    db.thaw();
    Conn::new(root_tcp())
        .await
        .expect("after thaw")
        .disconnect()
        .await
        .unwrap();

    // Graceful stop, then start again.
    let pid = db.pid().expect("running");
    db.stop().await;
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists"
    );
    db.restart().await;
    let ids: Vec<i32> = db.root_query("SELECT id FROM smoke.t").await;
    assert_eq!(ids, vec![1]);
}

#[tokio::test]
async fn dns_server_answers_and_changes_live() {
    let dns = DnsServer::start("orders.internal.example.").await;
    assert_eq!(dns.zone(), "orders.internal.example.");
    let resolver = dns.resolver();
    let writer = dns.fqdn("writer");
    assert_eq!(writer, "writer.orders.internal.example.");

    dns.set_a("db1", Ipv4Addr::new(127, 0, 0, 11), 30).await;
    dns.set_a("db2", Ipv4Addr::new(127, 0, 0, 12), 30).await;
    let a = resolver
        .lookup(dns.fqdn("db1"), RecordType::A)
        .await
        .expect("A db1");
    let answer = &a.answers()[0];
    assert_eq!(answer.ttl, 30);
    assert_eq!(answer.data, RData::A(Ipv4Addr::new(127, 0, 0, 11).into()));

    // CNAME chased inside the zone.
    dns.set_cname("writer", "db1", 5).await;
    let ips: Vec<IpAddr> = resolver
        .lookup_ip(&*writer)
        .await
        .expect("writer")
        .iter()
        .collect();
    assert_eq!(ips, vec![IpAddr::from([127, 0, 0, 11])]);

    // Failover: repoint the CNAME (absolute target); the very next query sees it.
    dns.set_cname("writer", "db2.orders.internal.example.", 5)
        .await;
    let ips: Vec<IpAddr> = resolver
        .lookup_ip(&*writer)
        .await
        .expect("writer")
        .iter()
        .collect();
    assert_eq!(ips, vec![IpAddr::from([127, 0, 0, 12])]);

    // Replace a CNAME by addresses, including several at once.
    dns.set_addrs(
        "writer",
        &[IpAddr::from([127, 0, 0, 21]), IpAddr::from([127, 0, 0, 22])],
        5,
    )
    .await;
    let mut ips: Vec<IpAddr> = resolver
        .lookup_ip(&*writer)
        .await
        .expect("writer")
        .iter()
        .collect();
    ips.sort();
    assert_eq!(
        ips,
        vec![IpAddr::from([127, 0, 0, 21]), IpAddr::from([127, 0, 0, 22])]
    );

    // Removed: NXDOMAIN.
    dns.remove("writer").await;
    let err = resolver
        .lookup_ip(&*writer)
        .await
        .expect_err("removed name resolved");
    assert!(err.is_nx_domain(), "{err:?}");

    // TCP answers too.
    let tcp_only = {
        use hickory_resolver::{
            Resolver,
            config::{
                ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
            },
            net::runtime::TokioRuntimeProvider,
        };
        let mut conn = ConnectionConfig::tcp();
        conn.port = dns.addr().port();
        let config = ResolverConfig::from_name_servers(vec![NameServerConfig::new(
            dns.addr().ip(),
            true,
            vec![conn],
        )]);
        let mut opts = ResolverOpts::default();
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        Resolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(opts)
            .build()
            .unwrap()
    };
    let ips: Vec<IpAddr> = tcp_only
        .lookup_ip(dns.fqdn("db2"))
        .await
        .expect("TCP")
        .iter()
        .collect();
    assert_eq!(ips, vec![IpAddr::from([127, 0, 0, 12])]);

    // Dropped: the port stops answering.
    let addr = dns.addr();
    drop(dns);
    tokio::task::yield_now().await;
    let gone = test_resolver(addr)
        .lookup_ip("db2.orders.internal.example.")
        .await;
    assert!(gone.is_err(), "stopped server answered: {gone:?}");
}

#[tokio::test]
async fn cloudwatch_put_and_get_round_trip() {
    let Some(client) = cloudwatch_or_skip().await else {
        return;
    };
    let namespace = unique_namespace("harness_smoke::cloudwatch_put_and_get_round_trip");
    let now = SystemTime::now();
    client
        .put_metric_data()
        .namespace(&namespace)
        .metric_data(
            MetricDatum::builder()
                .metric_name("ProbeSuccess")
                .dimensions(Dimension::builder().name("Branch").value("writer").build())
                .timestamp(DateTime::from(now))
                .value(42.0)
                .unit(StandardUnit::Count)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PutMetricData: {}",
                aws_sdk_cloudwatch::error::DisplayErrorContext(&e)
            )
        });

    let query = MetricQuery::new(&namespace, "ProbeSuccess").dims(&[("Branch", "writer")]);
    let values = query
        .poll(&client, Duration::from_secs(10), |v| !v.is_empty())
        .await;
    assert_eq!(
        values.iter().map(|(_, v)| *v).sum::<f64>(),
        42.0,
        "{values:?}"
    );
    // One bucket: the minute `now` falls in.
    let (ts, _) = values[0];
    let minute_start = UNIX_EPOCH
        + Duration::from_secs(now.duration_since(UNIX_EPOCH).unwrap().as_secs() / 60 * 60);
    assert_eq!(ts, minute_start, "{values:?}");

    // The positional helper agrees, and other dimensions / namespaces see nothing.
    let start = now - Duration::from_secs(600);
    let end = now + Duration::from_secs(300);
    let same = get_metric_values(
        &client,
        &namespace,
        "ProbeSuccess",
        &[("Branch", "writer")],
        start,
        end,
        60,
        "Sum",
    )
    .await;
    assert_eq!(same, values);
    let other_dim = get_metric_values(
        &client,
        &namespace,
        "ProbeSuccess",
        &[("Branch", "reader")],
        start,
        end,
        60,
        "Sum",
    )
    .await;
    assert!(other_dim.is_empty(), "{other_dim:?}");
    let other_ns = MetricQuery::new(&unique_namespace("nobody"), "ProbeSuccess")
        .dims(&[("Branch", "writer")])
        .fetch(&client)
        .await;
    assert!(other_ns.is_empty(), "{other_ns:?}");
}
