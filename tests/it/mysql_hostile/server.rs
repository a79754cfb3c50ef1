//! The scripted MySQL server of the hostile tests: packets framed with sequence ids on TCP or
//! TLS, the greeting, the login, the canary's result set, and scripts built from them.

use crate::support::tls::ServerCert;
use mysql_common::constants::{CapabilityFlags, ColumnType, StatusFlags};
use mysql_common::packets::{Column, HandshakePacket};
use mysql_common::proto::MySerialize;
use readyprobe::failure::{FailureClass, Step};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// The server's end of one connection: packets with sequence ids, on TCP or TLS, and every
/// byte the client sent in the clear.
pub struct Peer {
    pub io: Box<dyn Stream>,
    pub seq: u8,
    pub heard: Arc<Mutex<Vec<u8>>>,
}

pub type Served = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;
pub type Script = Box<dyn FnOnce(Peer) -> Served + Send>;

pub fn script<F: Future<Output = io::Result<()>> + Send + 'static>(
    f: impl FnOnce(Peer) -> F + Send + 'static,
) -> Script {
    Box::new(move |p| Box::pin(f(p)))
}

impl Peer {
    pub async fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.io.write_all(bytes).await?;
        self.io.flush().await
    }

    pub async fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        self.raw(&packet(self.seq.wrapping_sub(1), payload)).await
    }

    pub async fn recv(&mut self) -> io::Result<Vec<u8>> {
        let mut h = [0u8; 4];
        self.io.read_exact(&mut h).await?;
        self.seq = h[3].wrapping_add(1);
        let mut p = vec![0u8; u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize];
        self.io.read_exact(&mut p).await?;
        self.heard.lock().unwrap().extend([&h[..], &p].concat());
        Ok(p)
    }

    /// The text of the next `COM_QUERY`.
    pub async fn query(&mut self) -> io::Result<String> {
        let p = self.recv().await?;
        assert_eq!(p.first(), Some(&0x03), "a COM_QUERY");
        Ok(String::from_utf8_lossy(&p[1..]).into_owned())
    }

    /// Greeting (caching_sha2_password), handshake response, OK.
    pub async fn login(&mut self) -> io::Result<()> {
        self.login_with(&greeting(10, "caching_sha2_password", false))
            .await
    }

    /// `greeting`, handshake response, caching_sha2_password's fast authentication, OK.
    pub async fn login_with(&mut self, greeting: &[u8]) -> io::Result<()> {
        self.send(greeting).await?;
        self.recv().await?;
        self.send(&[0x01, 0x03]).await?;
        self.send(OK).await
    }

    /// Login, the INSERT answered OK: the marker and seq it wrote.
    pub async fn write(&mut self) -> io::Result<(String, String)> {
        self.login().await?;
        self.take_write().await
    }

    /// The INSERT answered OK: the marker and seq it wrote.
    pub async fn take_write(&mut self) -> io::Result<(String, String)> {
        let insert = self.query().await?;
        self.send(OK).await?;
        Ok(written(&insert))
    }

    pub async fn send_all(&mut self, packets: Vec<Vec<u8>>) -> io::Result<()> {
        for x in packets {
            self.send(&x).await?;
        }
        Ok(())
    }

    /// Greeting offering TLS, the SSLRequest, the handshake, then caching_sha2_password's full
    /// authentication: the password arrives in clear over the verified session.
    pub async fn login_tls(self, cert: &ServerCert, password: &str) -> io::Result<Peer> {
        let mut p = self;
        p.send(&greeting(10, "caching_sha2_password", true)).await?;
        assert_eq!(p.recv().await?.len(), 32, "an SSLRequest");
        let tls = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
        // What comes over TLS is not heard in the clear.
        let mut p = Peer {
            io: Box::new(tls.accept(p.io).await?),
            seq: p.seq,
            heard: Arc::default(),
        };
        p.recv().await?;
        p.send(&[0x01, 0x04]).await?;
        assert_eq!(p.recv().await?, format!("{password}\0").as_bytes());
        p.send(OK).await?;
        Ok(p)
    }

    /// Keep the connection open, reading whatever comes, until the client closes it.
    pub async fn hold(mut self) -> io::Result<()> {
        let mut sink = [0u8; 4096];
        loop {
            let n = self.io.read(&mut sink).await?;
            if n == 0 {
                return Ok(());
            }
            self.heard.lock().unwrap().extend_from_slice(&sink[..n]);
        }
    }
}

/// `payload` framed: its length, sequence id `seq`.
pub fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = (payload.len() as u32).to_le_bytes().to_vec();
    b[3] = seq;
    b.extend_from_slice(payload);
    b
}

pub const OK: &[u8] = &[0, 0, 0, 2, 0, 0, 0];
pub const EOF: &[u8] = &[0xfe, 0, 0, 2, 0];

pub fn greeting(protocol: u8, plugin: &str, ssl: bool) -> Vec<u8> {
    greeting_with(protocol, b"8.4.0-hostile", plugin, ssl)
}

pub fn greeting_with(protocol: u8, version: &[u8], plugin: &str, ssl: bool) -> Vec<u8> {
    let mut caps = CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | CapabilityFlags::CLIENT_CONNECT_WITH_DB;
    if ssl {
        caps |= CapabilityFlags::CLIENT_SSL;
    }
    let mut p = Vec::new();
    HandshakePacket::new(
        protocol,
        version,
        7,
        *b"01234567",
        Some(&b"89abcdefghij\0"[..]),
        caps,
        45,
        StatusFlags::SERVER_STATUS_AUTOCOMMIT,
        Some(plugin.as_bytes()),
    )
    .serialize(&mut p);
    p
}

/// Marker and seq of the canary INSERT (`VALUES ('it', 'primary', 'MARKER', SEQ, '...')`).
pub fn written(insert: &str) -> (String, String) {
    let values = insert.split("VALUES (").nth(1).expect("an INSERT");
    let v: Vec<&str> = values.split(", ").collect();
    (v[2].trim_matches('\'').to_string(), v[3].to_string())
}

pub fn row(values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        match v {
            None => out.push(0xfb),
            Some(b) if b.len() < 251 => out.push(b.len() as u8),
            Some(b) => {
                out.push(0xfd);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes()[..3]);
            }
        }
        out.extend_from_slice(v.unwrap_or_default());
    }
    out
}

/// The canary row as a server would answer it: marker, seq, host, id 7, not read-only.
pub fn canary<'a>(marker: &'a str, seq: &'a str, host: &'a [u8]) -> Vec<Option<&'a [u8]>> {
    let v: [&[u8]; 6] = [marker.as_bytes(), seq.as_bytes(), host, b"7", b"0", b"0"];
    v.map(Some).to_vec()
}

/// A result set of the canary's six columns and `rows`.
pub fn result(rows: &[Vec<Option<&[u8]>>]) -> Vec<Vec<u8>> {
    let mut column = Vec::new();
    Column::new(ColumnType::MYSQL_TYPE_VAR_STRING).serialize(&mut column);
    let mut out = vec![vec![6]];
    out.extend(std::iter::repeat_n(column, 6));
    out.push(EOF.to_vec());
    out.extend(rows.iter().map(|r| row(r)));
    out.push(EOF.to_vec());
    out
}

/// A case: its name, the server's script, and how the attempt must end (`None`: success).
pub type Case = (&'static str, Script, Option<(Step, FailureClass)>);

/// Send `bytes` as they are, then keep the connection open.
pub fn raw(bytes: &'static [u8]) -> Script {
    script(move |mut p| async move {
        p.raw(bytes).await?;
        p.hold().await
    })
}

/// Greet with `greeting`, read the handshake response, answer with `packets` (reading the
/// client's reply after each when `reply`), keep the connection open.
pub fn answer_login(greeting: Vec<u8>, packets: Vec<&'static [u8]>, reply: bool) -> Script {
    script(move |mut p| async move {
        p.send(&greeting).await?;
        p.recv().await?;
        for x in packets {
            p.send(x).await?;
            if reply {
                p.recv().await?;
            }
        }
        p.hold().await
    })
}

/// Log in, take the write, answer the read-back with what `answer` makes of the marker and
/// seq written, keep the connection open.
pub fn answer_read_back(
    answer: impl FnOnce(&str, &str) -> Vec<Vec<u8>> + Send + 'static,
) -> Script {
    script(move |mut p| async move {
        let (m, s) = p.write().await?;
        p.query().await?;
        p.send_all(answer(&m, &s)).await?;
        p.hold().await
    })
}
