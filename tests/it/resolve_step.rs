//! The `resolve` step's classes and behaviour against real DNS servers: NXDOMAIN, NODATA,
//! SERVFAIL, REFUSED, timeout; AAAA when a name has no A record; a live change seen by the very
//! next attempt; a dead first nameserver does not stall attempts.

use crate::support::dns::DnsServer;
use crate::support::rcode_dns::RcodeDns;
use hickory_resolver::proto::op::ResponseCode;
use readyprobe::config::Dns;
use readyprobe::failure::FailureClass;
use readyprobe::probe::resolve::{build_resolver, resolve};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const NAME: &str = "mysql-primary.orders.internal.example";

fn dns(servers: &[SocketAddr], timeout_ms: u64) -> Dns {
    Dns {
        nameservers: Some(servers.to_vec()),
        resolv_conf: "/nonexistent".into(),
        timeout: Duration::from_millis(timeout_ms),
        address_family: readyprobe::config::AddressFamily::Ipv4ThenIpv6,
    }
}

async fn class(servers: &[SocketAddr]) -> FailureClass {
    let r = build_resolver(&dns(servers, 300)).unwrap();
    resolve(&r, NAME).await.map(|_| ()).unwrap_err().class
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dns_failure_has_its_own_class() {
    let zone = DnsServer::start("orders.internal.example").await;
    assert_eq!(class(&[zone.addr()]).await, FailureClass::DnsNxdomain);
    zone.set_txt("mysql-primary", "no address here", 5).await;
    assert_eq!(class(&[zone.addr()]).await, FailureClass::DnsNodata);
    let servfail = RcodeDns::start(ResponseCode::ServFail).await;
    assert_eq!(class(&[servfail.addr()]).await, FailureClass::DnsServfail);
    let refused = RcodeDns::start(ResponseCode::Refused).await;
    assert_eq!(class(&[refused.addr()]).await, FailureClass::DnsRefused);
    let dead = RcodeDns::blackhole().await;
    assert_eq!(class(&[dead.addr()]).await, FailureClass::DnsTimeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aaaa_fallback_and_live_changes() {
    let zone = DnsServer::start("orders.internal.example").await;
    let r = build_resolver(&dns(&[zone.addr()], 500)).unwrap();
    zone.set_addrs("mysql-primary", &["::1".parse().unwrap()], 5)
        .await;
    let got = resolve(&r, NAME).await.unwrap();
    assert_eq!(got.addresses, vec!["::1".parse::<IpAddr>().unwrap()]);
    zone.set_a("mysql-primary", Ipv4Addr::new(127, 0, 0, 2), 7)
        .await;
    let got = resolve(&r, NAME).await.unwrap();
    assert_eq!(got.addresses, vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]);
    assert_eq!(
        got.answers[0].ttl, 7,
        "no cache: the server's TTL on every lookup"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_nameserver_does_not_stall_attempts() {
    let zone = DnsServer::start("orders.internal.example").await;
    zone.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dead = RcodeDns::blackhole().await;
    let r = build_resolver(&dns(&[dead.addr(), zone.addr()], 1000)).unwrap();
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        resolve(&r, NAME)
            .await
            .expect("the live nameserver answers");
        slowest = slowest.max(t.elapsed());
    }
    // Well inside one query timeout (1 s): the live server is asked without waiting it out.
    assert!(
        slowest < Duration::from_millis(700),
        "slowest lookup took {slowest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_family_preference_and_answer_metadata() {
    use readyprobe::config::AddressFamily;
    use readyprobe::probe::resolve::resolve_with;
    let zone = DnsServer::start("orders.internal.example").await;
    let r = build_resolver(&dns(&[zone.addr()], 500)).unwrap();
    zone.set_addrs(
        "mysql-primary",
        &["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
        5,
    )
    .await;
    let v4 = resolve_with(&r, NAME, AddressFamily::Ipv4ThenIpv6)
        .await
        .unwrap();
    assert_eq!(v4.addresses, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
    assert_eq!((v4.rcode.as_str(), v4.authoritative), ("NoError", true));
    let v6 = resolve_with(&r, NAME, AddressFamily::Ipv6ThenIpv4)
        .await
        .unwrap();
    assert_eq!(v6.addresses, vec!["::1".parse::<IpAddr>().unwrap()]);
    zone.set_addrs("mysql-primary", &["::1".parse().unwrap()], 5)
        .await;
    let e = resolve_with(&r, NAME, AddressFamily::Ipv4)
        .await
        .unwrap_err();
    assert_eq!(e.class, FailureClass::DnsNodata);
}
