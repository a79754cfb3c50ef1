//! TCP rows: the path to the branch drops, refuses, resets or stalls.

use super::*;
use crate::support::faults::netns::{NetNs, Rule};
use crate::support::faults::proxy::{Fault, FaultProxy, SilentPeer};

/// Some MySQL port inside the namespace; nothing listens there, the firewall answers first.
const NS_PORT: u16 = 3306;

/// SYNs dropped by the namespace's firewall: `tcp_timeout` at `connect`, cut by the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_blackhole() {
    let Some(ns) = NetNs::start_or_skip(&[Rule::Drop(NS_PORT)]) else {
        return;
    };
    let row = Row::bare().await;
    row.dns.set_a("mysql-primary", ns.addr(), 5).await;
    let got = row.run(&row.config(NS_PORT), THREE_TICKS).await;
    all_fail(&got, "connect", "tcp_timeout");
    for a in &got {
        assert!(
            took(a) >= TIMEOUT_MS - 50,
            "waited out the deadline, no early give-up: {a}"
        );
    }
}

/// SYNs answered with a reset by the namespace's firewall: `tcp_refused` at `connect`, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_refused() {
    let Some(ns) = NetNs::start_or_skip(&[Rule::Reset(NS_PORT)]) else {
        return;
    };
    let row = Row::bare().await;
    row.dns.set_a("mysql-primary", ns.addr(), 5).await;
    let got = row.run(&row.config(NS_PORT), THREE_TICKS).await;
    all_fail(&got, "connect", "tcp_refused");
    for a in &got {
        assert!(took(a) < SLACK_MS, "a refusal is immediate: {a}");
    }
}

/// The proxy passes the greeting and the SSLRequest, then resets as the ClientHello arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_reset_mid_tls_handshake() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    // The SSLRequest is 36 bytes (4 header + 32 payload); the next byte starts the handshake.
    let proxy = FaultProxy::start(row.db().addr(), Fault::ResetAfter(37)).await;
    let got = row.run(&row.config(proxy.addr().port()), THREE_TICKS).await;
    all_fail(&got, "tls", "tcp_reset");
    assert!(proxy.faults() >= got.len() as u64);
}

/// Plaintext MySQL through the proxy, which resets the connection after the first bytes of the
/// write's statement have gone out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_reset_mid_query() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let proxy = FaultProxy::start(
        row.db().addr(),
        Fault::ResetAt {
            pattern: b"INSERT INTO".to_vec(),
            keep: 6,
        },
    )
    .await;
    let config = row.config(proxy.addr().port()).tls("disabled", None).set(
        "probe.tls",
        "danger_send_secrets_unverified",
        true,
    );
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "write", "tcp_reset");
}

/// A peer that accepts and never sends a greeting: the `tls` step waits for it until the
/// attempt deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_silent_peer() {
    let row = Row::bare().await;
    let peer = SilentPeer::start().await;
    let got = row.run(&row.config(peer.addr().port()), THREE_TICKS).await;
    all_fail(&got, "tls", "deadline_exceeded");
    assert_eq!(
        peer.accepted(),
        got.len() as u64,
        "one connection per attempt"
    );
}

/// Plaintext MySQL through the proxy, which trickles the write's statement one byte per 50 ms
/// (about 12 s for it): the `write` step overruns and the deadline cuts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_slow_write() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let proxy = FaultProxy::start(
        row.db().addr(),
        Fault::TrickleFrom {
            pattern: b"INSERT INTO".to_vec(),
            every: Duration::from_millis(50),
        },
    )
    .await;
    let config = row.config(proxy.addr().port()).tls("disabled", None).set(
        "probe.tls",
        "danger_send_secrets_unverified",
        true,
    );
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "write", "deadline_exceeded");
}
