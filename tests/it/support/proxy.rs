//! A loopback TCP proxy that drops a seeded-random share of connections: "a few percent of
//! attempts fail at random", reproducibly, in front of a real server.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; stops when dropped.
pub struct NoisyProxy {
    addr: SocketAddr,
    dropped: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl NoisyProxy {
    /// Forward 127.0.0.1:<ephemeral> to `upstream`, closing each new connection at once with
    /// probability `drop_probability` (decided by an RNG seeded with `seed`).
    pub async fn start(upstream: SocketAddr, drop_probability: f64, seed: u64) -> NoisyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (d, a) = (dropped.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    break;
                };
                a.fetch_add(1, Ordering::Relaxed);
                if rng.random_bool(drop_probability) {
                    d.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let mut client = client;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        NoisyProxy {
            addr,
            dropped,
            accepted,
            task,
        }
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections closed on purpose so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for NoisyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
