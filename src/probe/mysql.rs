//! The `mysql` probe kind: the MySQL protocol prelude for the `tls` step, then `auth`, the marked
//! `write` and the `verify` read-back through mysql_async; and the one place MySQL errors are
//! classified.
//!
//! The `tls` step reads the server greeting on the connection opened by `connect`, sends an
//! SSLRequest and performs the handshake itself, so the step has its own duration and exact TLS
//! failure classes. `mysql_async` owns its connection, so `auth` opens a second one (with the same
//! TLS policy, the certificate checked against the endpoint name via a hostname override); its
//! duration therefore includes that connection's TCP and TLS set-up.

use crate::clock::rfc3339;
use crate::config::{MysqlProbe, SslMode};
use crate::failure::{FailureClass, Step};
use mysql_async::prelude::Queryable;
use mysql_async::{OptsBuilder, SslOpts};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use super::attempt::ServerIdentity;
use super::connect::Connected;
use super::ctx::{StepCtx, StepError, StepFailure};
pub use super::target::MysqlTarget;

const CLIENT_LONG_PASSWORD: u32 = 0x0000_0001;
const CLIENT_PROTOCOL_41: u32 = 0x0000_0200;
const CLIENT_SSL: u32 = 0x0000_0800;
const CLIENT_SECURE_CONNECTION: u32 = 0x0000_8000;
const UTF8MB4_GENERAL_CI: u8 = 45;

/// Longest polite disconnect after the last step: it runs outside every step, within what is
/// left of the attempt deadline.
const DISCONNECT_WAIT: Duration = Duration::from_millis(500);

/// The canary row as read back by `verify`: marker, seq, `@@hostname`, `@@server_id`,
/// `@@read_only`, `@@innodb_read_only`.
type CanaryRow = (String, u64, String, u64, u8, u8);

/// Run `tls` (when enabled), `auth`, `write` and `verify` after `connect` succeeded.
///
/// # Errors
/// The failing step and its class.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    target: &MysqlTarget,
    Connected { stream, addr }: Connected,
) -> Result<(), StepFailure> {
    // The canary row's `observed_at` (DATETIME, UTC).
    let observed_at = rfc3339(ctx.clock.now_ms())
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string();
    let version = match ctx.tls {
        Some(cfg) => tls(ctx, cfg.clone(), stream).await?,
        None => {
            drop(stream);
            String::new()
        }
    };
    // auth: a mysql_async connection with the same TLS policy.
    let opts = conn_opts(target, addr, ctx.endpoint());
    let mut conn = ctx
        .steps
        .run(Step::Auth, async {
            mysql_async::Conn::new(opts)
                .await
                .map_err(|e| classify_mysql(&e))
        })
        .await?;
    let result = write_and_verify(ctx, &target.settings, &mut conn, &observed_at, version).await;
    // Disconnect outside every step so a slow server cannot stretch the attempt past its
    // deadline; past the deadline the connection is simply dropped.
    let left = ctx.steps.deadline.left().min(DISCONNECT_WAIT);
    if !left.is_zero() {
        let _ = tokio::time::timeout(left, conn.disconnect()).await;
    }
    result
}

/// The `tls` step: the server greeting, an SSLRequest, the handshake; returns the server version
/// from the greeting.
async fn tls(
    ctx: &mut StepCtx<'_>,
    cfg: Arc<rustls::ClientConfig>,
    mut stream: TcpStream,
) -> Result<String, StepFailure> {
    let endpoint = ctx.endpoint();
    let (version, info) = ctx
        .steps
        .run(Step::Tls, async move {
            let greeting = read_greeting(&mut stream).await?;
            if greeting.capabilities & CLIENT_SSL == 0 {
                return Err(StepError {
                    class: FailureClass::TlsNotOffered,
                    message: "the server does not offer TLS (no CLIENT_SSL capability)".into(),
                });
            }
            stream.write_all(&ssl_request()).await.map_err(io_err)?;
            let (mut tls, info) = super::tls::handshake(cfg, endpoint, stream).await?;
            // Close politely; the server logs an aborted connection otherwise.
            let _ = tls.shutdown().await;
            Ok((greeting.version, info))
        })
        .await?;
    ctx.learned.tls = Some(info);
    Ok(version)
}

/// The SSLRequest packet (protocol 4.1, sequence id 1) that asks the server to start TLS.
fn ssl_request() -> Vec<u8> {
    let caps = CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION;
    let mut pkt = Vec::with_capacity(36);
    pkt.extend_from_slice(&32u32.to_le_bytes()[..3]);
    pkt.push(1); // sequence id
    pkt.extend_from_slice(&caps.to_le_bytes());
    pkt.extend_from_slice(&(16u32 * 1024 * 1024).to_le_bytes());
    pkt.push(UTF8MB4_GENERAL_CI);
    pkt.extend_from_slice(&[0u8; 23]);
    pkt
}

/// The `write` step (the marked upsert of this prober's canary row) and the `verify` step (read
/// it back with the server's identity). The identity goes into the attempt as soon as it is
/// read, also when the marker does not match.
async fn write_and_verify(
    ctx: &mut StepCtx<'_>,
    s: &MysqlProbe,
    conn: &mut mysql_async::Conn,
    observed_at: &str,
    version: String,
) -> Result<(), StepFailure> {
    let table = format!("`{}`.`{}`", s.database, s.table);
    // The end-to-end attempt has a row of its own: it never overwrites a branch's.
    let (prober_id, branch) = (&ctx.probe.prober_id, ctx.probe.canary_key());
    let (marker, seq) = (ctx.marker.as_str(), ctx.seq);
    ctx.steps
        .run(Step::Write, async {
            conn.exec_drop(
                format!(
                    "INSERT INTO {table} (prober_id, branch, marker, seq, observed_at) \
                     VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
                     marker = VALUES(marker), seq = VALUES(seq), observed_at = VALUES(observed_at)"
                ),
                (prober_id, branch, marker, seq, observed_at),
            )
            .await
            .map_err(|e| classify_mysql(&e))
        })
        .await?;
    let row: Option<CanaryRow> = ctx
        .steps
        .run(Step::Verify, async {
            conn.exec_first(
                format!(
                    "SELECT marker, seq, @@hostname, @@server_id, @@read_only, @@innodb_read_only \
                     FROM {table} WHERE prober_id = ? AND branch = ?"
                ),
                (prober_id, branch),
            )
            .await
            .map_err(|e| classify_mysql(&e))
        })
        .await?;
    let Some((got_marker, got_seq, hostname, server_id, read_only, innodb_read_only)) = row else {
        return Err(ctx.steps.fail_last(
            Step::Verify,
            FailureClass::VerifyMismatch,
            "the canary row written by this attempt is not there".into(),
        ));
    };
    let identity = ctx.learned.server.insert(ServerIdentity {
        hostname,
        server_id,
        read_only: read_only != 0,
        innodb_read_only: innodb_read_only != 0,
        version,
    });
    // A user with SUPER or READ_ONLY ADMIN writes through read_only; the application's users
    // cannot, so the branch cannot do its job whatever this write did.
    if identity.read_only || identity.innodb_read_only {
        let message = format!(
            "server {} reports {} = 1: the write went through only because the probe user bypasses it (SUPER or READ_ONLY ADMIN); the application's writes are refused",
            identity.hostname,
            if identity.read_only {
                "@@read_only"
            } else {
                "@@innodb_read_only"
            }
        );
        return Err(ctx
            .steps
            .fail_last(Step::Verify, FailureClass::ServerReadOnly, message));
    }
    if got_marker != marker || got_seq != seq {
        let message = format!(
            "read back marker {got_marker} seq {got_seq}, wrote {marker} seq {seq} (server {})",
            identity.hostname
        );
        return Err(ctx
            .steps
            .fail_last(Step::Verify, FailureClass::VerifyMismatch, message));
    }
    Ok(())
}

fn io_err(e: std::io::Error) -> StepError {
    StepError {
        class: super::connect::classify_io(&e),
        message: e.to_string(),
    }
}

struct Greeting {
    version: String,
    capabilities: u32,
}

/// Read the server's initial handshake packet (protocol 10) or its error packet.
async fn read_greeting(stream: &mut TcpStream) -> Result<Greeting, StepError> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.map_err(io_err)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    if len == 0 || len > 64 * 1024 {
        return Err(protocol(format!("greeting of {len} bytes")));
    }
    let mut p = vec![0u8; len];
    stream.read_exact(&mut p).await.map_err(io_err)?;
    parse_greeting(&p)
}

fn protocol(msg: String) -> StepError {
    StepError {
        class: FailureClass::ProtocolError,
        message: msg,
    }
}

fn parse_greeting(p: &[u8]) -> Result<Greeting, StepError> {
    if p[0] == 0xff {
        // ERR packet: 0xff, code u16, message (no SQL state before auth).
        let code = if p.len() >= 3 {
            u16::from_le_bytes([p[1], p[2]])
        } else {
            0
        };
        let message = String::from_utf8_lossy(p.get(3..).unwrap_or_default()).to_string();
        let e = mysql_async::Error::Server(mysql_async::ServerError {
            code,
            message: message.clone(),
            state: String::new(),
        });
        return Err(StepError {
            class: classify_mysql(&e).class,
            message: format!("server refused the connection: ERROR {code}: {message}"),
        });
    }
    if p[0] != 10 {
        return Err(protocol(format!("unsupported protocol version {}", p[0])));
    }
    let nul = p[1..]
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| protocol("greeting without server version".into()))?;
    let version = String::from_utf8_lossy(&p[1..1 + nul]).to_string();
    let mut i = 1 + nul + 1 + 4 + 8 + 1; // version NUL, connection id, auth data 1, filler
    let lower = p
        .get(i..i + 2)
        .ok_or_else(|| protocol("short greeting".into()))?;
    let mut caps = u16::from_le_bytes([lower[0], lower[1]]) as u32;
    i += 2 + 1 + 2; // lower flags, charset, status
    if let Some(upper) = p.get(i..i + 2) {
        caps |= (u16::from_le_bytes([upper[0], upper[1]]) as u32) << 16;
    }
    Ok(Greeting {
        version,
        capabilities: caps,
    })
}

fn conn_opts(target: &MysqlTarget, addr: SocketAddr, endpoint: &str) -> OptsBuilder {
    let s = &target.settings;
    let mut b = OptsBuilder::default()
        .ip_or_hostname(addr.ip().to_string())
        .tcp_port(addr.port())
        .user(Some(s.user.clone()))
        .pass(Some(target.password.clone()))
        .db_name(Some(s.database.clone()))
        .prefer_socket(false)
        .stmt_cache_size(0);
    let ssl = match s.ssl_mode {
        SslMode::Disabled => None,
        SslMode::Required => Some(
            SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        ),
        SslMode::VerifyCa | SslMode::VerifyIdentity => {
            let mut o = SslOpts::default()
                .with_disable_built_in_roots(true)
                .with_root_certs(
                    target
                        .pems
                        .ca
                        .iter()
                        .map(|pem| pem.to_vec().into())
                        .collect(),
                )
                .with_danger_tls_hostname_override(Some(endpoint.to_string()));
            if s.ssl_mode == SslMode::VerifyCa {
                o = o.with_danger_skip_domain_validation(true);
            }
            Some(o)
        }
    };
    let ssl = match (ssl, &target.pems.identity) {
        (Some(o), Some((cert, key))) => Some(o.with_client_identity(Some(
            mysql_async::ClientIdentity::new(cert.to_vec().into(), key.to_vec().into()),
        ))),
        (o, _) => o,
    };
    b = b.ssl_opts(ssl);
    b
}

/// Map a mysql_async error to a failure class. The one place MySQL errors are classified.
pub fn classify_mysql(e: &mysql_async::Error) -> StepError {
    use mysql_async::{DriverError, Error, IoError};
    let class = match e {
        Error::Server(s) => classify_server_code(s.code),
        Error::Io(IoError::Io(io)) => {
            match io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(r) => super::tls::classify_tls(r),
                None => super::connect::classify_io(io),
            }
        }
        #[allow(unreachable_patterns)]
        Error::Io(_) => FailureClass::TlsHandshake,
        Error::Driver(DriverError::ConnectionClosed) => FailureClass::ServerGoneAway,
        Error::Driver(_) | Error::Url(_) | Error::Other(_) => FailureClass::ProtocolError,
    };
    StepError {
        class,
        message: e.to_string(),
    }
}

/// Map a MySQL/MariaDB server error code to a failure class.
pub fn classify_server_code(code: u16) -> FailureClass {
    match code {
        // 1036: a table opened read-only, as every InnoDB table is under `innodb_read_only`.
        1036 | 1290 | 1836 => FailureClass::ServerReadOnly,
        // 3118 (MySQL) and 4151 (MariaDB): the account is locked.
        1044 | 1045 | 1142 | 1143 | 1698 | 3118 | 3159 | 4151 => FailureClass::AuthDenied,
        1040 | 1203 => FailureClass::TooManyConnections,
        1205 | 1213 => FailureClass::LockWaitTimeout,
        1053 | 1927 | 2006 | 2013 => FailureClass::ServerGoneAway,
        _ => FailureClass::ServerError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: u16) -> mysql_async::Error {
        mysql_async::Error::Server(mysql_async::ServerError {
            code,
            message: "m".into(),
            state: "HY000".into(),
        })
    }

    #[test]
    fn classify_table() {
        let cases = [
            (server(1290), FailureClass::ServerReadOnly),
            (server(1836), FailureClass::ServerReadOnly),
            (server(1036), FailureClass::ServerReadOnly),
            (server(1045), FailureClass::AuthDenied),
            (server(3159), FailureClass::AuthDenied),
            (server(3118), FailureClass::AuthDenied),
            (server(4151), FailureClass::AuthDenied),
            (server(1040), FailureClass::TooManyConnections),
            (server(1205), FailureClass::LockWaitTimeout),
            (server(1213), FailureClass::LockWaitTimeout),
            (server(2006), FailureClass::ServerGoneAway),
            (server(1146), FailureClass::ServerError),
            (
                mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed),
                FailureClass::ServerGoneAway,
            ),
            (
                mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                ))),
                FailureClass::TcpRefused,
            ),
            (
                mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
                ))),
                FailureClass::TlsUntrusted,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(classify_mysql(&e).class, want, "{e}");
        }
    }

    #[test]
    fn greeting_parse() {
        let mut p = vec![10u8];
        p.extend_from_slice(b"10.11.19-MariaDB\0");
        p.extend_from_slice(&[1, 0, 0, 0]);
        p.extend_from_slice(&[0; 8]);
        p.push(0);
        p.extend_from_slice(&(CLIENT_SSL as u16 | 0x200).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[2, 0]);
        p.extend_from_slice(&[0xff, 0x81]);
        let g = parse_greeting(&p).unwrap();
        assert_eq!(g.version, "10.11.19-MariaDB");
        assert_ne!(g.capabilities & CLIENT_SSL, 0);
        let mut err = vec![0xffu8];
        err.extend_from_slice(&1040u16.to_le_bytes());
        err.extend_from_slice(b"Too many connections");
        assert_eq!(
            parse_greeting(&err).err().unwrap().class,
            FailureClass::TooManyConnections
        );
    }
}
