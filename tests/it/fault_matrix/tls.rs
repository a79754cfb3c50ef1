//! TLS rows: the server's certificate changes under a running prober.

use super::*;
use crate::support::fixture::wait_evidence;

/// The server's certificate is replaced by one from another CA and reloaded (`FLUSH SSL`, no
/// restart) after the first attempt succeeded: the next attempt fails at `tls` as untrusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotated_to_an_untrusted_one() {
    let Some(row) = Row::with_db(&[]).await else {
        return;
    };
    let run = row.start(&row.db_config(), Duration::from_millis(3500));
    wait_evidence(&row.evidence(), Duration::from_secs(10), |ev| {
        !attempts(ev, "primary").is_empty()
    })
    .await;
    let other =
        TestCa::named("another CA").server_cert(&[PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let served = row.db().tls().unwrap();
    std::fs::write(served.cert_pem_path(), other.cert_pem()).unwrap();
    std::fs::write(served.key_pem_path(), other.key_pem()).unwrap();
    row.db().root_exec("FLUSH SSL").await;
    let rotated_at = readyprobe::clock::Clock::start().now_ms();
    run.finish().await;
    let got = row.attempts();
    assert_eq!(got[0]["result"], "success", "{}", got[0]);
    let after: Vec<_> = got
        .iter()
        .filter(|a| a["started_at"].as_i64().unwrap() > rotated_at)
        .cloned()
        .collect();
    assert!(!after.is_empty(), "an attempt after the rotation: {got:#?}");
    all_fail(&after, "tls", "tls_untrusted");
}
