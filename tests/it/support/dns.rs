//! In-process authoritative DNS server (hickory-server 0.26) on 127.0.0.1 over UDP and TCP,
//! serving one zone whose A/AAAA/CNAME records tests change live; plus a matching test resolver.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use hickory_resolver::{
    Resolver, TokioResolver,
    config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts},
    net::runtime::TokioRuntimeProvider,
};
use hickory_server::{
    Server,
    proto::rr::{
        LowerName, Name, RData, Record, RecordSet, RecordType, RrKey,
        rdata::{A, AAAA, CNAME, NS, SOA},
    },
    store::in_memory::InMemoryZoneHandler,
    zone_handler::{AxfrPolicy, Catalog, ZoneHandler, ZoneType},
};
use tokio::net::{TcpListener, UdpSocket};

/// An authoritative server for one zone on `127.0.0.1:<port>` (same port for UDP and TCP).
/// Dropping it stops it (its tasks are aborted; the sockets close).
///
/// Record changes are atomic: a query sees the old or the new records, never a gap.
/// The SOA minimum (negative-caching TTL) is 0.
pub struct DnsServer {
    addr: SocketAddr,
    origin: Name,
    zone: Arc<InMemoryZoneHandler>,
    server: Server<Catalog>,
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer")
            .field("addr", &self.addr)
            .field("origin", &self.origin.to_ascii())
            .finish()
    }
}

impl DnsServer {
    /// Starts serving `zone` (e.g. `orders.internal.example.`; the trailing dot is optional)
    /// with just SOA and NS records. Must be called inside a tokio runtime, which runs it.
    pub async fn start(zone: &str) -> DnsServer {
        let mut origin = Name::from_ascii(zone).unwrap_or_else(|e| panic!("zone {zone:?}: {e}"));
        origin.set_fqdn(true);
        let ns = Name::parse("ns1", Some(&origin)).expect("ns1 name");
        let hostmaster = Name::parse("hostmaster", Some(&origin)).expect("hostmaster name");

        let mut handler = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
            origin.clone(),
            ZoneType::Primary,
            AxfrPolicy::Deny,
        );
        let soa = SOA::new(ns.clone(), hostmaster, 1, 3600, 600, 86_400, 0);
        let records = [
            Record::from_rdata(origin.clone(), 3600, RData::SOA(soa)),
            Record::from_rdata(origin.clone(), 3600, RData::NS(NS(ns.clone()))),
            Record::from_rdata(ns, 3600, RData::A(A(Ipv4Addr::LOCALHOST))),
        ];
        for record in records {
            assert!(handler.upsert_mut(record, 1), "seed zone record");
        }
        let zone_handler = Arc::new(handler);

        let mut catalog = Catalog::new();
        catalog.upsert(
            LowerName::new(&origin),
            vec![zone_handler.clone() as Arc<dyn ZoneHandler>],
        );
        let mut server = Server::new(catalog);

        let (udp, tcp) = bind_udp_and_tcp().await;
        let addr = udp.local_addr().expect("udp local addr");
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 32);

        DnsServer {
            addr,
            origin,
            zone: zone_handler,
            server,
        }
    }

    /// The server address (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The zone apex, with the trailing dot.
    pub fn zone(&self) -> String {
        self.origin.to_ascii()
    }

    /// The fully qualified form of `name`: names ending in `.` are taken as absolute, others are
    /// relative to the zone (`"db1"` → `"db1.orders.internal.example."`), `"@"` is the apex.
    pub fn fqdn(&self, name: &str) -> String {
        self.name(name).to_ascii()
    }

    /// Makes `name` an A record for `ip` alone (replacing any A/AAAA/CNAME records there).
    pub async fn set_a(&self, name: &str, ip: Ipv4Addr, ttl: u32) {
        self.set_addrs(name, &[IpAddr::V4(ip)], ttl).await;
    }

    /// Makes `name` hold exactly these addresses (A and/or AAAA), replacing what was there.
    /// An empty list leaves the name existing with no address records (NODATA is not
    /// representable this way; use [`DnsServer::remove`] for NXDOMAIN).
    pub async fn set_addrs(&self, name: &str, ips: &[IpAddr], ttl: u32) {
        let name = self.name(name);
        let mut v4 = RecordSet::with_ttl(name.clone(), RecordType::A, ttl);
        let mut v6 = RecordSet::with_ttl(name.clone(), RecordType::AAAA, ttl);
        for ip in ips {
            match ip {
                IpAddr::V4(ip) => v4.add_rdata(RData::A(A(*ip))),
                IpAddr::V6(ip) => v6.add_rdata(RData::AAAA(AAAA(*ip))),
            };
        }
        self.replace(&name, [v4, v6]).await;
    }

    /// Makes `name` hold only a TXT record: it exists, with no address (queries for A/AAAA get
    /// NODATA).
    pub async fn set_txt(&self, name: &str, text: &str, ttl: u32) {
        let name = self.name(name);
        let mut set = RecordSet::with_ttl(name.clone(), RecordType::TXT, ttl);
        set.add_rdata(RData::TXT(hickory_resolver::proto::rr::rdata::TXT::new(
            vec![text.to_string()],
        )));
        self.replace(&name, [set]).await;
    }

    /// Makes `name` a CNAME to `target` (relative to the zone unless it ends in `.`), replacing
    /// whatever was at `name`. Targets inside the zone are chased by the server.
    pub async fn set_cname(&self, name: &str, target: &str, ttl: u32) {
        let name = self.name(name);
        let mut set = RecordSet::with_ttl(name.clone(), RecordType::CNAME, ttl);
        set.add_rdata(RData::CNAME(CNAME(self.name(target))));
        self.replace(&name, [set]).await;
    }

    /// Removes every record at `name` (queries then get NXDOMAIN). The apex can't be removed.
    pub async fn remove(&self, name: &str) {
        let name = self.name(name);
        assert!(name != self.origin, "refusing to remove the zone apex");
        self.replace(&name, []).await;
    }

    /// A resolver that asks only this server (UDP, TCP fallback), with no cache, no hosts file,
    /// a 2 s timeout and one attempt — so each lookup reflects the live zone.
    pub fn resolver(&self) -> TokioResolver {
        test_resolver(self.addr)
    }

    fn name(&self, name: &str) -> Name {
        if name == "@" {
            return self.origin.clone();
        }
        Name::parse(name, Some(&self.origin)).unwrap_or_else(|e| panic!("DNS name {name:?}: {e}"))
    }

    /// Atomically replaces all records at `name` by the non-empty sets given.
    async fn replace(&self, name: &Name, sets: impl IntoIterator<Item = RecordSet>) {
        let lower = LowerName::new(name);
        let mut records = self.zone.records_mut().await;
        records.retain(|key, _| key.name != lower);
        for set in sets {
            if !set.is_empty() {
                records.insert(RrKey::new(lower.clone(), set.record_type()), Arc::new(set));
            }
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        // Stop accepting; dropping `server` (its JoinSet) then aborts the tasks.
        self.server.shutdown_token().cancel();
    }
}

/// A resolver asking only `server` (UDP, then TCP), uncached, ignoring /etc/hosts.
pub fn test_resolver(server: SocketAddr) -> TokioResolver {
    let connections = [ConnectionConfig::udp(), ConnectionConfig::tcp()]
        .into_iter()
        .map(|mut c| {
            c.port = server.port();
            c
        })
        .collect();
    let config = ResolverConfig::from_name_servers(vec![NameServerConfig::new(
        server.ip(),
        true,
        connections,
    )]);
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.timeout = Duration::from_secs(2);
    // hickory counts retries: 0 means one query per lookup.
    opts.attempts = 0;
    opts.ndots = 0;
    Resolver::builder_with_config(config, TokioRuntimeProvider::default())
        .with_options(opts)
        .build()
        .expect("build test resolver")
}

/// Binds UDP on 127.0.0.1:0 and TCP on the same port (retrying if that TCP port is taken).
async fn bind_udp_and_tcp() -> (UdpSocket, TcpListener) {
    let mut last = None;
    for _ in 0..20 {
        let udp = UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind UDP 127.0.0.1:0");
        let addr = udp.local_addr().expect("udp local addr");
        match TcpListener::bind(addr).await {
            Ok(tcp) => return (udp, tcp),
            Err(e) => last = Some(e),
        }
    }
    panic!("no port free for both UDP and TCP on 127.0.0.1: {last:?}");
}
