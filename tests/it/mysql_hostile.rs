//! The `mysql` kind against servers that break the protocol: a scripted server on loopback
//! (greeting, authentication, answers, each bent one way) and real MariaDB where it can produce
//! the condition (autocommit off, `NO_BACKSLASH_ESCAPES`). Every hostile answer must end the
//! attempt as a failure of the right step and class, within the deadline, without the password
//! in the message; never a success, never a panic.

use crate::support::config::{ConfigBuilder, path, secret_file};
use crate::support::dns::DnsServer;
use crate::support::fixture::*;
use crate::support::tls::{ServerCert, TestCa};
use readyprobe::clock::Clock;
use readyprobe::failure::{FailureClass as C, Step};
use readyprobe::probe::{Attempt, Outcome, prepare, run_attempt};
use server::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

pub(crate) mod server;

/// One attempt of `branch` of the config `b` (written into `dir`).
async fn attempt(b: &ConfigBuilder, dir: &std::path::Path, branch: &str) -> Attempt {
    let cfg = b.load(&dir.join("hostile.toml"));
    let (resolver, probes) = prepare(&cfg).unwrap();
    let probe = probes.iter().find(|x| x.branch.name == branch).unwrap();
    run_attempt(probe, &resolver, &Clock::start(), 1).await
}

/// A name for the scripted server, a CA that vouches for it, and the probe's password.
struct Rig {
    ca: TestCa,
    cert: ServerCert,
    dns: DnsServer,
    dir: tempfile::TempDir,
    password: String,
}

impl Rig {
    async fn new() -> Rig {
        let ca = TestCa::new();
        let cert = ca.server_cert(&[PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let dns = DnsServer::start(ZONE).await;
        dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
        let dir = tempfile::tempdir().unwrap();
        let password = format!("Hostile-Pw-{:016x}", rand::random::<u64>());
        std::fs::write(dir.path().join("password"), &password).unwrap();
        Rig {
            ca,
            cert,
            dns,
            dir,
            password,
        }
    }

    fn config(&self, port: u16, tls: bool, timeout_ms: u64) -> ConfigBuilder {
        let dir = self.dir.path();
        let b = ConfigBuilder::new(dir, "orders-db", "mysql.orders.internal.example")
            .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
            .set("evidence", "path", path(&dir.join("evidence.jsonl")))
            .nameserver(self.dns.addr())
            .set("dns", "timeout", "200ms")
            .kind("mysql")
            .set("probe", "interval", "5s")
            .set("probe", "timeout", format!("{timeout_ms}ms"))
            .set("probe.mysql", "user", "readyprobe")
            .set(
                "probe.mysql",
                "password",
                secret_file(&dir.join("password")),
            )
            .branch("primary", "PRIMARY", PRIMARY, Some(port))
            .branch("secondary", "SECONDARY", SECONDARY, Some(port));
        if tls {
            b.tls("verify_identity", Some(self.ca.ca_pem_path()))
        } else {
            b.tls("disabled", None)
                .set("probe.tls", "danger_send_secrets_unverified", true)
        }
    }

    /// One attempt against a server that runs `script` on its one connection.
    async fn against(&self, tls: bool, timeout_ms: u64, script: Script) -> Attempt {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let peer = Peer {
            io: Box::new(tokio::io::empty()),
            seq: 0,
            heard: heard.clone(),
        };
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await?;
            let io = Box::new(s);
            script(Peer { io, ..peer }).await
        });
        let cfg = self.config(port, tls, timeout_ms);
        let a = attempt(&cfg, self.dir.path(), "primary").await;
        server.abort();
        let heard = heard.lock().unwrap();
        let pw = self.password.as_bytes();
        assert!(
            !heard.windows(pw.len()).any(|w| w == pw),
            "the password went out in the clear: {a:?}"
        );
        let budget = i64::try_from(timeout_ms).unwrap() + 1500;
        assert!(
            a.finished_at - a.started_at <= budget,
            "the attempt ran past its deadline: {a:?}"
        );
        a
    }

    /// Run `cases` one after the other (3 s attempts: ample for a good conversation on a loaded
    /// machine, and what the two silent servers cost); panics listing every case that did not end as it
    /// should (a failure's step and class, or success), or whose message is long or holds the
    /// password or control characters.
    async fn run(&self, tls: bool, cases: Vec<Case>) {
        let mut wrong = Vec::new();
        for (name, script, want) in cases {
            let a = self.against(tls, 3000, script).await;
            let (got, message) = match &a.outcome {
                Outcome::Success => (None, ""),
                Outcome::Failure {
                    step,
                    class,
                    message,
                } => (Some((*step, *class)), &message[..]),
            };
            if got != want
                || message.contains(&self.password)
                || message.len() > 1100
                || message.chars().any(char::is_control)
            {
                wrong.push(format!("{name}: want {want:?}, got {:?}", a.outcome));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}

/// Scripts that bend the greeting or the authentication; the `tls` step is off, so `auth`
/// reads the greeting.
fn login_cases() -> Vec<Case> {
    let (native, sha2) = (
        greeting(10, "mysql_native_password", false),
        greeting(10, "caching_sha2_password", false),
    );
    let auth = |c| Some((Step::Auth, c));
    let switch: &[u8] = b"\xfemysql_native_password\0ABCDEFGHIJKLMNOPQRST\0";
    let bad_key: &[u8] = b"\x01-----BEGIN PUBLIC KEY-----\n\xff\n-----END PUBLIC KEY-----\n";
    let absurd_ok: &[u8] = &[
        0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc,
    ];
    let cut: &[u8] = &[80, 0, 0, 0, 10, b'8', b'.'];
    vec![
        (
            "greeting cut, then silence",
            raw(cut),
            auth(C::DeadlineExceeded),
        ),
        (
            "greeting cut, then close",
            script(move |mut p| async move { p.raw(cut).await }),
            auth(C::ServerGoneAway),
        ),
        (
            "length 0xFFFFFF",
            raw(&[0xff, 0xff, 0xff, 0]),
            auth(C::ProtocolError),
        ),
        (
            "zero-length greeting",
            raw(&[0, 0, 0, 0]),
            auth(C::ProtocolError),
        ),
        (
            "greeting with sequence id 5",
            script(|mut p| async move {
                p.seq = 5;
                p.send(&greeting(10, "mysql_native_password", false))
                    .await?;
                p.hold().await
            }),
            auth(C::ProtocolError),
        ),
        (
            "protocol version 9",
            answer_login(greeting(9, "mysql_native_password", false), vec![], false),
            auth(C::ProtocolError),
        ),
        (
            "auth switch after auth switch",
            answer_login(native.clone(), vec![switch; 8], true),
            auth(C::ProtocolError),
        ),
        (
            "auth switch to a plugin named with control characters",
            answer_login(
                native.clone(),
                vec![b"\xfeevil\x1b[2J\n\rplugin\0n\0"],
                false,
            ),
            auth(C::AuthDenied),
        ),
        (
            "auth switch to mysql_clear_password",
            answer_login(native.clone(), vec![b"\xfemysql_clear_password\0"], false),
            auth(C::AuthDenied),
        ),
        (
            "caching_sha2 full auth without TLS, a garbage RSA key",
            answer_login(sha2.clone(), vec![&[1, 4], bad_key], true),
            auth(C::ProtocolError),
        ),
        (
            "caching_sha2 fast auth succeeds, forever",
            answer_login(sha2, vec![&[1, 3]; 100], false),
            auth(C::ProtocolError),
        ),
        (
            "OK after login with absurd lengths",
            answer_login(native, vec![absurd_ok], false),
            auth(C::ProtocolError),
        ),
        (
            "greeting byte by byte with delays, then a good conversation",
            script(|mut p| async move {
                for b in packet(0, &greeting(10, "caching_sha2_password", false)) {
                    p.raw(&[b]).await?;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                p.seq = 1;
                p.recv().await?;
                p.send_all(vec![vec![1, 3], OK.to_vec()]).await?;
                let (m, s) = p.take_write().await?;
                p.query().await?;
                p.send_all(result(&[canary(&m, &s, b"fake-host")])).await?;
                p.hold().await
            }),
            None,
        ),
    ]
}

/// Scripts that log in, then bend the answers to the write and the read-back.
fn answer_cases(pw: String) -> Vec<Case> {
    let mut cases = write_answer_cases(pw);
    cases.extend(read_back_answer_cases());
    cases
}

/// Scripts that log in, then bend the answer to the canary write.
fn write_answer_cases(pw: String) -> Vec<Case> {
    let write = |c| Some((Step::Write, c));
    vec![
        (
            "the INSERT answered with a result set",
            script(|mut p| async move {
                p.login().await?;
                p.query().await?;
                p.send_all(result(&[])).await?;
                p.hold().await
            }),
            write(C::ProtocolError),
        ),
        (
            "an ERR with a 60 KiB message: control characters, the password",
            script(move |mut p| async move {
                p.login().await?;
                p.query().await?;
                let mut err = b"\xff\x7a\x04#HY000\r\nINFO forged log line\x1b[2J ".to_vec();
                err.extend(format!("{pw} ").repeat(2000).bytes());
                p.send(&err).await?;
                p.hold().await
            }),
            write(C::ServerError),
        ),
        (
            "the server closes after login",
            script(|mut p| async move { p.login().await }),
            write(C::ServerGoneAway),
        ),
    ]
}

/// Scripts that answer the write, then bend the result set of the read-back.
fn read_back_answer_cases() -> Vec<Case> {
    let verify = |c| Some((Step::Verify, c));
    let with = |f: fn(&mut Vec<Option<&[u8]>>)| {
        answer_read_back(move |m, s| {
            let mut r = canary(m, s, b"h");
            f(&mut r);
            result(&[r])
        })
    };
    vec![
        (
            "0 columns",
            answer_read_back(|_, _| vec![vec![0]]),
            verify(C::ProtocolError),
        ),
        (
            "1,000 columns",
            answer_read_back(|_, _| vec![vec![0xfc, 0xe8, 0x03]]),
            verify(C::ProtocolError),
        ),
        (
            "fewer values than columns",
            with(|r| r.truncate(4)),
            verify(C::ProtocolError),
        ),
        (
            "more values than columns",
            with(|r| r.push(Some(b"x"))),
            verify(C::ProtocolError),
        ),
        (
            "a NULL marker",
            with(|r| r[0] = None),
            verify(C::VerifyMismatch),
        ),
        (
            "seq not a number",
            with(|r| r[1] = Some(b"x1")),
            verify(C::ProtocolError),
        ),
        (
            "a non-UTF-8 hostname",
            with(|r| r[2] = Some(b"h\xff\xfe")),
            None,
        ),
        (
            "a row announced over 16 MiB",
            script(|mut p| async move {
                p.write().await?;
                p.query().await?;
                p.raw(&[0xff, 0xff, 0xff, 1]).await?;
                p.hold().await
            }),
            verify(C::ProtocolError),
        ),
        (
            "no EOF after the columns (deprecate-EOF style)",
            answer_read_back(|m, s| {
                let mut r = result(&[canary(m, s, b"h")]);
                r.remove(7);
                r
            }),
            verify(C::ProtocolError),
        ),
        (
            "the rows end with an OK-style 0xFE packet (deprecate-EOF style)",
            answer_read_back(|m, s| {
                let mut r = result(&[canary(m, s, b"h")]);
                *r.last_mut().unwrap() = b"\xfe\0\0\x02\0\0\0\x05hello".to_vec();
                r
            }),
            verify(C::ProtocolError),
        ),
        (
            "rows without end",
            script(|mut p| async move {
                let (m, s) = p.write().await?;
                p.query().await?;
                let mut r = result(&[]);
                r.pop();
                p.send_all(r).await?;
                loop {
                    p.send(&row(&canary(&m, &s, b"h"))).await?;
                }
            }),
            verify(C::VerifyMismatch),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_greetings_and_logins_fail_auth_in_bounded_time() {
    Rig::new().await.run(false, login_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_answers_to_the_write_and_read_back_never_succeed() {
    let rig = Rig::new().await;
    rig.run(false, answer_cases(rig.password.clone())).await;
}

/// Scripts that bend the TLS upgrade or stop on the TLS session.
fn tls_cases(cert: &ServerCert, pw: &str) -> Vec<Case> {
    let after_login = |f: fn(Peer) -> Served| {
        let (cert, pw) = (cert.clone(), pw.to_string());
        script(move |p| async move { f(p.login_tls(&cert, &pw).await?).await })
    };
    vec![
        (
            "no CLIENT_SSL in the greeting",
            answer_login(greeting(10, "mysql_native_password", false), vec![], false),
            Some((Step::Tls, C::TlsNotOffered)),
        ),
        (
            "CLIENT_SSL, then a plaintext answer to the SSLRequest",
            answer_login(greeting(10, "mysql_native_password", true), vec![OK], false),
            Some((Step::Tls, C::TlsHandshake)),
        ),
        (
            "an OK injected in plaintext before the TLS handshake",
            script(|mut p| async move {
                let mut both = packet(0, &greeting(10, "caching_sha2_password", true));
                both.extend(packet(2, OK));
                p.raw(&both).await?;
                p.hold().await
            }),
            Some((Step::Tls, C::ProtocolError)),
        ),
        (
            "a good conversation over TLS",
            after_login(|mut p| {
                Box::pin(async move {
                    let (m, s) = p.take_write().await?;
                    p.query().await?;
                    p.send_all(result(&[canary(&m, &s, b"tls-host")])).await?;
                    p.hold().await
                })
            }),
            None,
        ),
        (
            "the INSERT's answer stops mid-packet on the TLS session",
            after_login(|mut p| {
                Box::pin(async move {
                    p.query().await?;
                    p.raw(&[7, 0, 0, 1, 0]).await?;
                    p.hold().await
                })
            }),
            Some((Step::Write, C::DeadlineExceeded)),
        ),
        (
            "the TCP connection closes after login, without close_notify",
            after_login(|p| {
                Box::pin(async move {
                    drop(p);
                    Ok(())
                })
            }),
            Some((Step::Write, C::ServerGoneAway)),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tls_upgrades_and_sessions_fail_the_right_step() {
    let rig = Rig::new().await;
    rig.run(true, tls_cases(&rig.cert, &rig.password)).await;
}

/// What the server says about itself goes into every attempt record: a 60 KiB version and a
/// host name with control characters are cut and cleaned, and the attempt still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_identity_is_bounded_in_the_attempt() {
    let rig = Rig::new().await;
    let a = rig
        .against(
            false,
            3000,
            script(|mut p| async move {
                let version = [b'v'; 60_000];
                p.login_with(&greeting_with(10, &version, "caching_sha2_password", false))
                    .await?;
                let (m, s) = p.take_write().await?;
                p.query().await?;
                let host = [&b"host\n\x1b[2J"[..], &[b'h'; 60_000]].concat();
                p.send_all(result(&[canary(&m, &s, &host)])).await?;
                p.hold().await
            }),
        )
        .await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let server = a.server.unwrap();
    for text in [&server.version, &server.hostname] {
        assert!(text.chars().count() <= 255, "{} bytes", text.len());
        assert!(!text.chars().any(char::is_control), "{text:?}");
    }
    assert!(server.hostname.starts_with("host"), "{}", server.hostname);
}

fn real_config(p: &Pipeline) -> ConfigBuilder {
    p.builder(&ConfigOpts {
        interval_ms: 2000,
        timeout_ms: 1500,
        policy: "[readiness]\nwindow = \"30s\"\nmin_attempts = 5\n",
        ..Default::default()
    })
}

/// With autocommit off on the server the upsert opens a transaction: a success must mean the
/// row is committed, as another session sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_means_the_row_is_committed_even_with_autocommit_off() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    p.primary.root_exec("SET GLOBAL autocommit = 0").await;
    let a = attempt(&real_config(&p), p.dir.path(), "primary").await;
    assert_eq!(a.outcome, Outcome::Success, "{a:?}");
    let sql = format!(
        "SELECT marker FROM readyprobe.canary WHERE marker = '{}'",
        a.marker
    );
    let rows: Vec<String> = p.primary.root_query(&sql).await;
    assert_eq!(rows, [a.marker], "the marked row is committed");
}

/// A branch name with quotes and backslashes is written and read back exactly, whether the
/// server treats a backslash as an escape or not (`NO_BACKSLASH_ESCAPES`), also when
/// `init_connect` changes the mode after the login's OK said otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotes_and_backslashes_round_trip_in_both_escaping_modes() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let name = r#"it's \ "odd" \' \\ '' x"#;
    let cfg = real_config(&p).branch_set("primary", "name", name);
    let init = "SET GLOBAL init_connect = 'SET SESSION sql_mode = ";
    for (global, session) in [
        ("", "DEFAULT"),
        ("NO_BACKSLASH_ESCAPES", "DEFAULT"),
        ("", "''NO_BACKSLASH_ESCAPES''"),
        ("NO_BACKSLASH_ESCAPES", "''''"),
    ] {
        let set = format!("SET GLOBAL sql_mode = '{global}'");
        p.primary.root_exec(&set).await;
        p.primary.root_exec(&format!("{init}{session}'")).await;
        let mode = format!("{global} then {session}");
        let a = attempt(&cfg, p.dir.path(), name).await;
        assert_eq!(a.outcome, Outcome::Success, "sql_mode {mode:?}: {a:?}");
        let sql = format!(
            "SELECT branch FROM readyprobe.canary WHERE marker = '{}'",
            a.marker
        );
        let rows: Vec<String> = p.primary.root_query(&sql).await;
        assert_eq!(rows, [name], "sql_mode {mode:?}");
    }
}

/// A server whose sessions start read-only transactions (`transaction_read_only`) refuses the
/// application's writes as much as `read_only` does: `server_read_only`, not `server_error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_transactions_by_default_are_server_read_only() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    p.primary.root_exec("SET GLOBAL tx_read_only = 1").await;
    let a = attempt(&real_config(&p), p.dir.path(), "primary").await;
    match &a.outcome {
        Outcome::Failure { step, class, .. } => {
            assert_eq!((*step, *class), (Step::Write, C::ServerReadOnly), "{a:?}")
        }
        Outcome::Success => panic!("{a:?}"),
    }
}
