//! A loopback TCP proxy that breaks each connection at a chosen point of the client's byte
//! stream, and a peer that accepts connections and never speaks.
//!
//! The point is found in the bytes themselves (a count, or a pattern such as the `INSERT` of a
//! plaintext MySQL write), never by timing, so a row behaves the same on a loaded machine.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to every connection's client → server stream.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Forward the first `n` bytes the client sends, then reset both sides (RST).
    ResetAfter(usize),
    /// Forward until the client sends `pattern`, pass `keep` more bytes from its start, then
    /// reset both sides.
    ResetAt { pattern: Vec<u8>, keep: usize },
    /// Forward until the client sends `pattern`; from its start on, one byte per `every`.
    TrickleFrom { pattern: Vec<u8>, every: Duration },
}

/// A running proxy; stops (and drops its connections) when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Forward 127.0.0.1:<ephemeral> to `upstream`, applying `fault` to every connection.
    pub async fn start(upstream: SocketAddr, fault: Fault) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let faults = Arc::new(AtomicU64::new(0));
        let seen = faults.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                conns.spawn(relay(client, server, fault.clone(), seen.clone()));
            }
        });
        FaultProxy { addr, faults, task }
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections reached their fault point so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One proxied connection: server → client copied as is, client → server through `fault`.
async fn relay(mut client: TcpStream, mut server: TcpStream, fault: Fault, faults: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let reset = {
        let (mut client_r, mut client_w) = client.split();
        let (mut server_r, mut server_w) = server.split();
        tokio::select! {
            r = forward(&mut client_r, &mut server_w, &fault) => r,
            _ = tokio::io::copy(&mut server_r, &mut client_w) => false,
        }
    };
    if reset {
        // The fault point: the client gets a RST (zero linger), the server a vanished client.
        faults.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_zero_linger();
    }
}

/// Client → server under `fault`. True when the connection is to be reset now, false when it
/// ended by itself.
async fn forward(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    fault: &Fault,
) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    let mut sent = 0usize;
    // The last bytes seen, so a pattern split across two reads is still found.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let (pattern, at) = match fault {
            Fault::ResetAfter(limit) => {
                let pass = (*limit - sent).min(n);
                if to.write_all(&chunk[..pass]).await.is_err() {
                    return false;
                }
                sent += pass;
                if sent >= *limit {
                    return true;
                }
                continue;
            }
            Fault::ResetAt { pattern, .. } | Fault::TrickleFrom { pattern, .. } => {
                (pattern, find(&tail, chunk, pattern))
            }
        };
        let Some(at) = at else {
            if to.write_all(chunk).await.is_err() {
                return false;
            }
            remember(&mut tail, chunk, pattern.len());
            continue;
        };
        return match fault {
            Fault::ResetAt { keep, .. } => {
                let _ = to.write_all(&chunk[..(at + keep).min(n)]).await;
                let _ = to.flush().await;
                true
            }
            Fault::TrickleFrom { every, .. } => {
                if to.write_all(&chunk[..at]).await.is_ok() {
                    trickle(from, to, chunk[at..].to_vec(), *every).await;
                }
                false
            }
            Fault::ResetAfter(_) => unreachable!("handled above"),
        };
    }
}

/// From now on, one byte per `every`, `pending` first; until either side closes.
async fn trickle(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut pending: Vec<u8>,
    every: Duration,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if pending.is_empty() {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        tokio::time::sleep(every).await;
        let byte = pending.remove(0);
        if to.write_all(&[byte]).await.is_err() {
            return;
        }
    }
}

/// Where `pattern` starts in `chunk`, also when it began in `tail` (then at 0).
fn find(tail: &[u8], chunk: &[u8], pattern: &[u8]) -> Option<usize> {
    if let Some(i) = chunk.windows(pattern.len()).position(|w| w == pattern) {
        return Some(i);
    }
    let mut joined = tail.to_vec();
    joined.extend_from_slice(&chunk[..chunk.len().min(pattern.len())]);
    joined
        .windows(pattern.len())
        .any(|w| w == pattern)
        .then_some(0)
}

fn remember(tail: &mut Vec<u8>, chunk: &[u8], len: usize) {
    tail.extend_from_slice(chunk);
    let excess = tail.len().saturating_sub(len);
    tail.drain(..excess);
}

/// Accepts connections and holds them open without ever sending a byte: a peer whose process
/// hangs after `accept`.
pub struct SilentPeer {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentPeer {
    /// Listen on 127.0.0.1:<ephemeral>.
    pub async fn start() -> SilentPeer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
        SilentPeer {
            addr,
            accepted,
            task,
        }
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentPeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
