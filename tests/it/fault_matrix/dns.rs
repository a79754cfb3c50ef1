//! DNS rows: the branch's nameserver is down, slow, failing or truncating.

use super::*;
use crate::support::faults::dns::{FaultDns, closed_udp_port};
use crate::support::rcode_dns::RcodeDns;
use hickory_resolver::proto::op::ResponseCode;

/// Nothing listens on the nameserver's port. The resolver does not act on the host's ICMP port
/// unreachable, so a down server looks like a dead one: `dns_timeout` after one query timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_server_down() {
    let row = Row::bare().await;
    let config = row.config(3306).nameserver(closed_udp_port());
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "resolve", "dns_timeout");
    for a in &got {
        assert!(
            took(a) < DNS_TIMEOUT_MS + SLACK_MS,
            "one query timeout: {a}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answers_after_the_timeout() {
    let row = Row::bare().await;
    let slow = FaultDns::slow(row.dns.addr(), Duration::from_millis(1500)).await;
    let config = row.config(3306).nameserver(slow.addr());
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "resolve", "dns_timeout");
    // `dns.timeout` is per query, one query per attempt, no retries (a retry would double the
    // step's time on every dead nameserver).
    assert_eq!(slow.queries(), got.len() as u64, "one query per attempt");
    for a in &got {
        assert!(
            took(a) < DNS_TIMEOUT_MS + SLACK_MS,
            "cut at the query timeout, not the late answer: {a}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_servfail() {
    let row = Row::bare().await;
    let servfail = RcodeDns::start(ResponseCode::ServFail).await;
    let config = row.config(3306).nameserver(servfail.addr());
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "resolve", "dns_servfail");
}

/// A truncated UDP answer is retried over TCP; with the full answer there, the attempt succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_truncated_then_tcp_answers() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let tc = FaultDns::truncated(Some(row.dns.addr())).await;
    let config = row.db_config().nameserver(tc.addr());
    let got = row.run(&config, THREE_TICKS).await;
    for a in &got {
        assert_eq!(a["result"], "success", "{a}");
        assert_eq!(a["answers"][0]["data"], "127.0.0.1", "{a}");
    }
}

/// A truncated UDP answer and no TCP listener to retry on: no usable answer, told apart from a
/// timeout (the retry is refused at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_truncated_without_tcp() {
    let row = Row::bare().await;
    let tc = FaultDns::truncated(None).await;
    let config = row.config(3306).nameserver(tc.addr());
    let got = row.run(&config, THREE_TICKS).await;
    all_fail(&got, "resolve", "dns_error");
    for a in &got {
        assert!(took(a) < SLACK_MS, "no wait for a timeout: {a}");
    }
}
