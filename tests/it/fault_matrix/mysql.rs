//! MySQL rows: the server refuses the identity, is full, read-only, locked, restarted or killed.

use super::*;
use crate::support::config::secret_file;
use crate::support::fixture::wait_evidence;
use mysql_async::prelude::Queryable;

/// The canary row this prober writes (`prober_id = "it"`, branch `primary`).
const CANARY_ROW: &str = "readyprobe.canary WHERE prober_id = 'it' AND branch = 'primary'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_wrong_password() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let wrong = row.dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-password").unwrap();
    let config = row
        .db_config()
        .set("probe.mysql", "password", secret_file(&wrong));
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "auth", "auth_denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_account_locked() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    row.db()
        .root_exec("ALTER USER 'readyprobe'@'%' ACCOUNT LOCK")
        .await;
    let got = row.run(&row.db_config(), THREE_TICKS).await;
    all_fail(&got, "auth", "auth_denied");
    assert!(
        got[0]["message"].as_str().unwrap().contains("locked"),
        "{}",
        got[0]
    );
}

/// `max_connections = 10` (MariaDB's least), all held by sessions of an ordinary user: the
/// server greets (one slot is kept for administrators) and refuses the login with error 1040.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_too_many_connections() {
    let Some(row) = Row::with_db(&["--max-connections=10"]).await else {
        return;
    };
    let opts: mysql_async::Opts = row.db().client_opts("readyprobe", PASSWORD).into();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(
            mysql_async::Conn::new(opts.clone())
                .await
                .expect("hold a session"),
        );
    }
    let got = row.run(&row.db_config(), THREE_TICKS).await;
    all_fail(&got, "auth", "too_many_connections");
    for c in held {
        let _ = c.disconnect().await;
    }
}

/// As above, and an administrator's session in the slot kept for administrators: the server
/// answers the connection with error 1040 instead of its greeting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_too_many_connections_at_the_greeting() {
    let Some(row) = Row::with_db(&["--max-connections=10"]).await else {
        return;
    };
    let opts: mysql_async::Opts = row.db().client_opts("readyprobe", PASSWORD).into();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(
            mysql_async::Conn::new(opts.clone())
                .await
                .expect("hold a session"),
        );
    }
    let admin = row
        .db()
        .root_conn()
        .await
        .expect("the administrators' slot");
    let got = row.run(&row.db_config(), THREE_TICKS).await;
    all_fail(&got, "tls", "too_many_connections");
    let _ = admin.disconnect().await;
    for c in held {
        let _ = c.disconnect().await;
    }
}

/// `read_only = ON` and the probe's ordinary user: the write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_read_only() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    row.db().set_read_only(true).await;
    let got = row.run(&row.db_config(), THREE_TICKS).await;
    all_fail(&got, "write", "server_read_only");
}

/// A root session holds the canary row's lock (a long `innodb_lock_wait_timeout`, the server's
/// default 50 s): each attempt's write waits and is cut by the attempt deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lock_wait_on_the_canary_row() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let _lock = hold_canary_row(row.db()).await;
    let got = row.run(&row.db_config(), THREE_TICKS).await;
    all_fail(&got, "write", "deadline_exceeded");
    for a in &got {
        assert!(took(a) >= TIMEOUT_MS - 50, "waited for the lock: {a}");
    }
}

/// A graceful restart of the server while the prober runs: attempts during it fail fast, none
/// hangs, and the first attempt after it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_server_restarted_between_attempts() {
    let Some(mut row) = Row::with_db(&[]).await else {
        return;
    };
    let run = row.start(&row.db_config(), Duration::from_millis(6500));
    wait_evidence(&row.evidence(), Duration::from_secs(10), |ev| {
        !attempts(ev, "primary").is_empty()
    })
    .await;
    let db = row.db.as_mut().unwrap();
    db.restart().await;
    let restarted_at = readyprobe::clock::Clock::start().now_ms();
    run.finish().await;
    let got = row.attempts();
    assert_eq!(got[0]["result"], "success", "{}", got[0]);
    let after: Vec<_> = got
        .iter()
        .filter(|a| a["started_at"].as_i64().unwrap() > restarted_at)
        .collect();
    assert!(!after.is_empty(), "attempts after the restart: {got:#?}");
    for a in after {
        assert_eq!(a["result"], "success", "{a}");
    }
}

/// SIGKILL while an attempt's write waits for the canary row's lock: that attempt ends at once
/// with the connection gone, the next one is refused at `connect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_server_killed_mid_attempt() {
    let Some(mut row) = Row::with_db(&[]).await else {
        return;
    };
    let lock = hold_canary_row(row.db()).await;
    let run = row.start(&row.db_config(), THREE_TICKS);
    wait_for_blocked_write(row.db()).await;
    let killed_at = readyprobe::clock::Clock::start().now_ms();
    row.db.as_mut().unwrap().kill();
    drop(lock);
    run.finish().await;
    let got = row.attempts();
    let (killed, later): (Vec<_>, Vec<_>) = got
        .iter()
        .partition(|a| a["started_at"].as_i64().unwrap() <= killed_at);
    let last = killed.last().expect("the attempt that was killed");
    assert_eq!(failure(last), ("write", "server_gone_away"), "{last}");
    assert!(
        last["finished_at"].as_i64().unwrap() - killed_at < SLACK_MS,
        "ended at the kill, not at the deadline: {last}"
    );
    assert!(!later.is_empty(), "an attempt after the kill: {got:#?}");
    for a in later {
        assert_eq!(failure(a), ("connect", "tcp_refused"), "{a}");
    }
}

/// A root session (its own connection, kept open) holding the canary row's lock; the row is
/// created first if the prober has not written it yet.
async fn hold_canary_row(db: &MariaDb) -> mysql_async::Conn {
    let mut conn = db.root_conn().await.expect("root connection");
    conn.query_drop(
        "INSERT IGNORE INTO readyprobe.canary (prober_id, branch, marker, seq, observed_at) \
         VALUES ('it', 'primary', 'held', 0, NOW(3))",
    )
    .await
    .expect("seed the canary row");
    conn.query_drop("BEGIN").await.expect("begin");
    let _: Vec<String> = conn
        .query(format!("SELECT marker FROM {CANARY_ROW} FOR UPDATE"))
        .await
        .expect("lock the canary row");
    conn
}

/// Waits until the prober's write is blocked in the server (a statement of user `readyprobe`
/// waiting for a row lock).
async fn wait_for_blocked_write(db: &MariaDb) {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n: Vec<u64> = db
            .root_query(
                "SELECT COUNT(*) FROM information_schema.processlist \
                 WHERE user = 'readyprobe' AND info LIKE 'INSERT INTO%'",
            )
            .await;
        if n.first().copied().unwrap_or(0) > 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the prober's write never blocked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
