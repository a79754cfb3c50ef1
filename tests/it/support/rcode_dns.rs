//! A minimal loopback DNS responder for conditions the authoritative test server does not
//! produce: a fixed error response code (SERVFAIL, REFUSED) for every query, or no answer at all
//! (a dead nameserver). It answers real DNS messages over UDP; nothing else.

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use std::net::SocketAddr;
use tokio::net::UdpSocket;

/// A running responder; stops when dropped.
pub struct RcodeDns {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RcodeDns {
    /// Answer every query with `rcode` and no records.
    pub async fn start(rcode: ResponseCode) -> RcodeDns {
        Self::spawn(Some(rcode)).await
    }

    /// Receive queries and never answer (a dead or blackholed nameserver).
    pub async fn blackhole() -> RcodeDns {
        Self::spawn(None).await
    }

    async fn spawn(rcode: Option<ResponseCode>) -> RcodeDns {
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind UDP");
        let addr = sock.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                    break;
                };
                let Some(rcode) = rcode else { continue };
                let Ok(req) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let mut resp = Message::error_msg(req.metadata.id, req.metadata.op_code, rcode);
                resp.metadata.message_type = MessageType::Response;
                resp.add_queries(req.queries.clone());
                if let Ok(bytes) = resp.to_vec() {
                    let _ = sock.send_to(&bytes, peer).await;
                }
            }
        });
        RcodeDns { addr, task }
    }

    /// The UDP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RcodeDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}
