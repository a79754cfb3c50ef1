//! Integration-test support harness: real throwaway MariaDB servers, a test CA, an in-process DNS
//! server and access to the CloudWatch emulator, plus the shared skip-or-fail policy.

// Shared harness: not every test binary module uses every helper.
#![allow(dead_code)]

pub mod cloudwatch;
pub mod config;
pub mod dns;
pub mod fake_cloudwatch;
pub mod faults;
pub mod fixture;
pub mod mariadb;
pub mod otlp_receiver;
pub mod postgres;
pub mod proxy;
pub mod publish_records;
pub mod rcode_dns;
pub mod run;
pub mod sts_front;
pub mod tls;

use std::{io::Write, net::TcpListener, time::Duration};

/// True when running under CI (`CI=true`, as `.ci/run` is invoked), where a missing external
/// component is a failure rather than a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The variable naming the file where every skip appends one line, `<test>\t<reason>`, so
/// `infra/local/test.sh` can count the tests that asserted nothing.
pub const SKIP_LOG_ENV: &str = "READYPROBE_SKIP_LOG";

/// Reports a missing external component: panics under CI, otherwise prints a loud `SKIPPED:` line
/// straight to the process's stderr (not captured by the test harness, so it shows in a plain
/// `cargo test` run), appends it to the file [`SKIP_LOG_ENV`] names, and returns, so the caller
/// can return early.
pub fn skip_or_panic(what: &str) {
    if in_ci() {
        panic!("CI=true and a required test component is unavailable: {what}");
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("<test>")
        .to_string();
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {test} — {what} (set CI=true to make this a failure) ***"
    );
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let line = format!("{test}\t{}\n", what.replace(['\n', '\r', '\t'], " "));
        // One write of one line on an O_APPEND file: lines of parallel tests never interleave.
        let logged = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = logged {
            panic!("cannot record the skip in {SKIP_LOG_ENV}={path:?}: {e}");
        }
    }
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` after `timeout`. For a test
/// that awaits a record, datum or file state before asserting on it: it goes on as soon as the
/// state is there, and a loaded machine only makes it wait longer, up to `timeout`.
/// (Evidence has its own [`fixture::wait_evidence`], which prints the records on failure.)
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read, released).
/// Racy by nature: callers that start servers on it should retry on "address in use".
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}
