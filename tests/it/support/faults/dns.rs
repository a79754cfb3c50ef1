//! DNS faults the authoritative test server does not make: answers that come too late, and
//! truncated UDP answers (TC bit) with or without a TCP listener to retry on.

use hickory_resolver::proto::op::{Message, MessageType};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A running faulty nameserver; stops when dropped.
pub struct FaultDns {
    addr: SocketAddr,
    queries: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FaultDns {
    /// Relays each UDP query to `upstream` and its answer back, `delay` late.
    pub async fn slow(upstream: SocketAddr, delay: Duration) -> FaultDns {
        let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind UDP"));
        let addr = sock.local_addr().expect("addr");
        let queries = Arc::new(AtomicU64::new(0));
        let count = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, peer)) = sock.recv_from(&mut buf).await {
                count.fetch_add(1, Ordering::SeqCst);
                let (query, sock) = (buf[..n].to_vec(), sock.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Some(answer) = ask_udp(upstream, &query).await {
                        let _ = sock.send_to(&answer, peer).await;
                    }
                });
            }
        });
        FaultDns {
            addr,
            queries,
            tasks: vec![task],
        }
    }

    /// Answers every UDP query with an empty, truncated (TC) response. With `tcp_upstream`, a
    /// TCP listener on the same port relays the retry to that server's TCP side; without, the
    /// port has no TCP listener (the retry is refused).
    pub async fn truncated(tcp_upstream: Option<SocketAddr>) -> FaultDns {
        let (sock, listener) = bind_pair().await;
        let addr = sock.local_addr().expect("addr");
        let queries = Arc::new(AtomicU64::new(0));
        let count = queries.clone();
        let mut tasks = vec![tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, peer)) = sock.recv_from(&mut buf).await {
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(req) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
                resp.metadata.message_type = MessageType::Response;
                resp.metadata.truncation = true;
                resp.metadata.recursion_desired = req.metadata.recursion_desired;
                resp.add_queries(req.queries.clone());
                if let Ok(bytes) = resp.to_vec() {
                    let _ = sock.send_to(&bytes, peer).await;
                }
            }
        })];
        match (tcp_upstream, listener) {
            (Some(upstream), Some(listener)) => tasks.push(tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                }
            })),
            (Some(_), None) => unreachable!("bind_pair always binds TCP"),
            (None, listener) => drop(listener),
        }
        FaultDns {
            addr,
            queries,
            tasks,
        }
    }

    /// UDP queries received so far.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::SeqCst)
    }

    /// The address (UDP, and TCP when there is a listener).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for FaultDns {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One UDP query to `server`; its answer, or `None` after 5 s.
async fn ask_udp(server: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.ok()?;
    sock.send_to(query, server).await.ok()?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

/// UDP on 127.0.0.1:0 and TCP on the same port (retrying while that TCP port is taken), so a
/// caller can keep or close the TCP side.
async fn bind_pair() -> (UdpSocket, Option<TcpListener>) {
    for _ in 0..20 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind UDP");
        let port = udp.local_addr().expect("addr").port();
        if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
            return (udp, Some(tcp));
        }
    }
    panic!("no port free for both UDP and TCP on 127.0.0.1");
}

/// A UDP port on 127.0.0.1 where nothing listens (bound, read, released): a nameserver that is
/// down, whose host answers with ICMP port unreachable.
pub fn closed_udp_port() -> SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("bind UDP 127.0.0.1:0")
}
