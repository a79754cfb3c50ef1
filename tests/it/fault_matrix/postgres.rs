//! PostgreSQL rows: the server refuses the password, is full, holds the canary row's lock,
//! restarts while a write waits, or stops answering in the middle of the authentication.

use super::*;
use crate::support::faults::proxy::{Fault, FaultProxy};
use crate::support::postgres::{PgOptions, PgWorld, Postgres, bindir};
use std::process::{Child, Command, Stdio};

impl PgWorld {
    /// Run `readyprobe run` on `config` for `duration`; the branch's attempts, timing checked.
    async fn run(&self, config: &ConfigBuilder, duration: Duration) -> Vec<Value> {
        self.start(config, duration).finish().await;
        self.attempts()
    }

    fn start(&self, config: &ConfigBuilder, duration: Duration) -> Running {
        let cfg = config.load(&self.dir.path().join("fault.toml"));
        Running::start(cfg, Some(duration))
    }

    fn attempts(&self) -> Vec<Value> {
        let ev = read_evidence(&self.evidence());
        let got: Vec<Value> = attempts(&ev, "primary").into_iter().cloned().collect();
        check_timing(&got);
        got
    }

    /// The row's config (the fault matrix's interval and deadline) for `port`.
    fn row_config(&self, port: u16) -> ConfigBuilder {
        self.config(port, INTERVAL_MS as u64, TIMEOUT_MS as u64)
    }
}

/// `psql` sessions held open in the background (killed on drop).
struct Held(Vec<Child>);

impl Drop for Held {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` sessions of `user` on the cluster's unix socket (trust), each running `sql` (psql sends
/// a `-c` string as one query: one transaction).
fn hold(pg: &Postgres, user: &str, sql: &str, n: usize) -> Held {
    let socket = pg.data().parent().unwrap().to_path_buf();
    Held(
        (0..n)
            .map(|_| {
                Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(bindir().expect("PostgreSQL binaries").join("psql"))
                    .arg("-h")
                    .arg(&socket)
                    .args(["-p", &pg.port().to_string(), "-U", user, "-d", "readyprobe"])
                    .args(["-X", "-q", "-c", sql])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("psql")
            })
            .collect(),
    )
}

/// Until `sql` (a count) says at least `n`.
async fn wait_count(pg: &Postgres, sql: &str, n: u64) {
    crate::support::wait_for(Duration::from_secs(20), sql, || async {
        pg.psql("readyprobe", sql)
            .await
            .parse::<u64>()
            .is_ok_and(|c| c >= n)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wrong_password() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let wrong = w.dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-password").unwrap();
    let config = w
        .row_config(w.pg.port())
        .set("probe.postgres", "password", secret_file(&wrong));
    let got = w.run(&config, THREE_TICKS).await;
    all_fail(&got, "auth", "auth_denied");
    assert!(
        got[0]["message"].as_str().unwrap().contains("28P01"),
        "{}",
        got[0]
    );
}

/// `max_connections = 5` (3 kept for superusers), both other slots held by sessions of the
/// probe role: the server refuses the login with `53300`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_too_many_connections() {
    let opts = PgOptions {
        max_connections: 5,
        ..PgOptions::default()
    };
    let Some(w) = PgWorld::start_or_skip(opts).await else {
        return;
    };
    let _held = fill_slots(&w.pg, 2).await;
    let got = w.run(&w.row_config(w.pg.port()), THREE_TICKS).await;
    all_fail(&got, "auth", "too_many_connections");
}

/// `n` sessions of the probe role, held until every one is connected. Connections count against
/// the limit whoever makes them, so a session that arrived while this function's own count query
/// (a superuser's) took a slot was refused and exited: it is started again.
async fn fill_slots(pg: &Postgres, n: usize) -> Held {
    const COUNT: &str = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'readyprobe'";
    const SQL: &str = "SELECT pg_sleep(60)";
    let mut held = hold(pg, "readyprobe", SQL, n);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        for c in &mut held.0 {
            if c.try_wait().expect("psql").is_some() {
                *c = std::mem::take(&mut hold(pg, "readyprobe", SQL, 1).0).remove(0);
            }
        }
        let count = pg.psql("readyprobe", COUNT).await.parse::<usize>();
        if count.as_ref().is_ok_and(|&c| c >= n) {
            return held;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} sessions of the probe role not connected within 20 s: {count:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sessions waiting for the canary row's lock, by the probe role.
const BLOCKED: &str = "SELECT count(*) FROM pg_stat_activity \
     WHERE usename = 'readyprobe' AND wait_event_type = 'Lock'";

/// A session (its own, kept open) holding the canary row's lock, the row created first.
fn hold_canary_row(pg: &Postgres) -> Held {
    hold(
        pg,
        "postgres",
        "INSERT INTO public.canary VALUES ('it', 'primary', 'held', 0, now()) \
         ON CONFLICT DO NOTHING; \
         SELECT 1 FROM public.canary WHERE prober_id = 'it' AND branch = 'primary' FOR UPDATE; \
         SELECT pg_sleep(60)",
        1,
    )
}

/// The canary row is locked: each write waits for the session's `lock_timeout` (three
/// quarters of the write's budget) and fails `lock_wait_timeout`, within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lock_wait_on_the_canary_row() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let _lock = hold_canary_row(&w.pg);
    wait_count(
        &w.pg,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND granted",
        1,
    )
    .await;
    let got = w.run(&w.row_config(w.pg.port()), THREE_TICKS).await;
    all_fail(&got, "write", "lock_wait_timeout");
    for a in &got {
        assert!(a["message"].as_str().unwrap().contains("55P03"), "{a}");
    }
}

/// A fast restart while an attempt's write waits for the canary row's lock: that attempt ends
/// at once (`57P01`, the connection is gone), attempts during the restart fail fast, none hangs,
/// and the attempts after it succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_mid_attempt() {
    let Some(mut w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let lock = hold_canary_row(&w.pg);
    let run = w.start(&w.row_config(w.pg.port()), Duration::from_millis(5500));
    wait_count(&w.pg, BLOCKED, 1).await;
    let restart_at = readyprobe::clock::Clock::start().now_ms();
    w.pg.restart().await;
    let restarted_at = readyprobe::clock::Clock::start().now_ms();
    drop(lock);
    run.finish().await;
    let got = w.attempts();
    let cut = got
        .iter()
        .rfind(|a| a["started_at"].as_i64().unwrap() <= restart_at)
        .expect("the attempt the restart cut");
    assert_eq!(failure(cut), ("write", "server_gone_away"), "{cut}");
    assert!(cut["message"].as_str().unwrap().contains("57P01"), "{cut}");
    for a in got
        .iter()
        .filter(|a| a["started_at"].as_i64().unwrap() > restart_at)
    {
        if a["started_at"].as_i64().unwrap() > restarted_at {
            assert_eq!(a["result"], "success", "{a}");
        } else if a["result"] == "failure" {
            let (_, class) = failure(a);
            assert!(
                ["cannot_connect_now", "tcp_refused", "server_gone_away"].contains(&class),
                "{a}"
            );
        }
    }
    assert!(
        got.iter()
            .any(|a| a["started_at"].as_i64().unwrap() > restarted_at),
        "attempts after the restart: {got:#?}"
    );
}

/// The server stops answering in the middle of the authentication: a proxy passes the startup
/// and the server's SASL request, then holds the client's SCRAM first message. The `auth`
/// step is cut by its deadline. (TLS off so that the proxy can see the message.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stops_answering_mid_auth() {
    let Some(w) = PgWorld::start_or_skip(PgOptions::default()).await else {
        return;
    };
    let proxy = FaultProxy::start(
        w.pg.addr(),
        Fault::TrickleFrom {
            pattern: b"SCRAM-SHA-256".to_vec(),
            every: Duration::from_secs(30),
        },
    )
    .await;
    let config = w.row_config(proxy.addr().port()).tls("disabled", None).set(
        "probe.tls",
        "danger_send_secrets_unverified",
        true,
    );
    let got = w.run(&config, THREE_TICKS).await;
    all_fail(&got, "auth", "deadline_exceeded");
    drop(proxy);
}
