//! The stable-name probe against the in-process DNS server serving both branch names and the
//! stable name: the selection follows the failover record as the test flips it, and an answer no
//! branch has is flagged (record and WARN). Evidence only: no branch's attempts change.

use crate::support::config::{ConfigBuilder, path};
use crate::support::dns::DnsServer;
use crate::support::fixture::{Running, wait_evidence};
use readyprobe::config::{AddressFamily, Role};
use readyprobe::probe::stable_name::{BranchEndpoint, Selection, observe};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::instrument::WithSubscriber;

const ZONE: &str = "orders.internal.example";
const PRIMARY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const SECONDARY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);

async fn zone() -> DnsServer {
    let dns = DnsServer::start(ZONE).await;
    dns.set_a("mq-a", PRIMARY, 5).await;
    dns.set_a("mq-b", SECONDARY, 5).await;
    dns.set_a("mq", PRIMARY, 7).await;
    dns
}

fn last_round(ev: &[Value]) -> Option<&Value> {
    ev.iter().rev().find(|v| v["kind"] == "stable_name")
}

/// Wait until the EMF output's newest `SelectedBranch` value is `want`.
async fn wait_selected_datum(run: &Running, want: f64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let newest = run.emf.lines().iter().rev().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            v["SelectedBranch"].as_f64()
        });
        if newest == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "SelectedBranch {newest:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest round satisfies `pred`.
fn newest(pred: impl Fn(&Value) -> bool) -> impl Fn(&[Value]) -> bool {
    move |ev| last_round(ev).is_some_and(&pred)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selection_follows_the_failover_record_and_an_unknown_target_is_flagged() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let dns = zone().await;
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let cfg = ConfigBuilder::new(dir.path(), "orders-queue", &dns.fqdn("mq"))
        .nameserver(dns.addr())
        .set("dns", "timeout", "500ms")
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("publish", "interval", "1s")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&evidence))
        .set("stable_name_probe", "enabled", true)
        .set("stable_name_probe", "interval", "200ms")
        .branch("primary", "PRIMARY", &dns.fqdn("mq-a"), None)
        .branch("secondary", "SECONDARY", &dns.fqdn("mq-b"), None)
        .write(&dir.path().join("c.toml"));
    let cfg = readyprobe::config::load(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let run = Running::start(cfg, None);
    let wait = Duration::from_secs(15);

    let ev = wait_evidence(&evidence, wait, newest(|r| r["selected"] == "primary")).await;
    let r = last_round(&ev).unwrap();
    assert_eq!(r["service"], "orders-queue");
    assert_eq!(r["unknown_target"], false);
    assert_eq!(r["answers"][0]["data"], "127.0.0.1");
    assert_eq!(r["answers"][0]["ttl"], 7);
    wait_selected_datum(&run, 1.0).await;

    dns.set_a("mq", SECONDARY, 7).await;
    wait_evidence(&evidence, wait, newest(|r| r["selected"] == "secondary")).await;
    wait_selected_datum(&run, 2.0).await;

    dns.set_a("mq", ELSEWHERE, 7).await;
    let ev = wait_evidence(&evidence, wait, newest(|r| r["unknown_target"] == true)).await;
    assert!(last_round(&ev).unwrap()["selected"].is_null());
    wait_selected_datum(&run, 0.0).await;

    dns.remove("mq").await;
    let ev = wait_evidence(&evidence, wait, newest(|r| !r["class"].is_null())).await;
    assert_eq!(last_round(&ev).unwrap()["class"], "dns_nxdomain");
    run.stop().await;
    drop(l);
}

/// Collects what a subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_no_branch_has_logs_a_warning() {
    let dns = zone().await;
    let resolver = dns.resolver();
    let branches = [
        ("primary", Role::Primary, "mq-a"),
        ("secondary", Role::Secondary, "mq-b"),
    ]
    .map(|(name, role, host)| BranchEndpoint {
        name: name.into(),
        role,
        endpoint: dns.fqdn(host),
    });
    let out = Captured::default();
    let w = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .finish();
    let subscriber = tracing::Dispatch::new(subscriber);
    let stable = dns.fqdn("mq");
    let round = |s: String| {
        let (r, b) = (resolver.clone(), branches.clone());
        async move { observe(&r, AddressFamily::Ipv4, "orders-queue", &s, &b).await }
    };
    let o = round(stable.clone())
        .with_subscriber(subscriber.clone())
        .await;
    assert_eq!(
        o.selection.as_ref().and_then(Selection::branch_name),
        Some("primary")
    );
    assert!(out.0.lock().unwrap().is_empty());

    dns.set_a("mq", ELSEWHERE, 7).await;
    let o = round(stable).with_subscriber(subscriber).await;
    assert!(o.unknown_target());
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains("the failover records point somewhere this config does not know"),
        "{text}"
    );
    assert!(text.contains("127.0.0.9"), "{text}");
}
