//! The `mysql` probe kind: `tls`, `auth`, the marked `write` and the `verify` read-back on the
//! one connection `connect` opened, and the one place MySQL errors are classified.
//!
//! The `tls` step reads the server greeting, sends an SSLRequest and performs the handshake
//! itself (exact TLS failure classes, the certificate seen); `auth`, `write` and `verify` then
//! speak the MySQL protocol ([`session`], packets from `mysql_common`) on that TLS session, so the
//! verified session is the one that carries the password and the write, and an attempt is one
//! connection to the target. `auth` covers the handshake response and the authentication round
//! trips (and the greeting when TLS is off).

mod session;

use crate::clock::rfc3339;
use crate::config::MysqlProbe;
use crate::failure::{FailureClass, Step};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use super::attempt::ServerIdentity;
use super::attempt::server_text as shown;
use super::connect::Connected;
use super::ctx::{StepCtx, StepError, StepFailure};
pub use super::target::MysqlTarget;
use session::{Greeting, Login, Session, literal};

/// Longest polite disconnect after the last step: it runs outside every step, within what is
/// left of the attempt deadline.
const DISCONNECT_WAIT: Duration = Duration::from_millis(500);

/// A session on the TLS stream over the attempt's connection.
type TlsSession = Session<tokio_rustls::client::TlsStream<TcpStream>>;

/// The canary row as read back by `verify`: marker, seq (both NULL when something rewrote
/// them), `@@hostname` (bytes: any encoding), `@@server_id`, `@@read_only`, `@@innodb_read_only`.
type CanaryRow = (Option<Vec<u8>>, Option<u64>, Vec<u8>, u64, u8, u8);

/// Run `tls` (when enabled), `auth`, `write` and `verify` on the connection `connect` opened.
///
/// # Errors
/// The failing step and its class.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    target: &MysqlTarget,
    Connected { stream, .. }: Connected,
) -> Result<(), StepFailure> {
    let session = Session::new(stream);
    match ctx.tls {
        Some(cfg) => {
            let (session, greeting) = tls(ctx, cfg.clone(), session).await?;
            converse(ctx, target, session, Some(greeting)).await
        }
        None => converse(ctx, target, session, None).await,
    }
}

/// The `tls` step: the server greeting, an SSLRequest, the handshake; the session continues on
/// the TLS stream.
async fn tls(
    ctx: &mut StepCtx<'_>,
    cfg: Arc<rustls::ClientConfig>,
    mut session: Session<TcpStream>,
) -> Result<(TlsSession, Greeting), StepFailure> {
    let endpoint = ctx.endpoint();
    let (session, greeting, info) = ctx
        .steps
        .run(Step::Tls, async move {
            let greeting = session.greeting().await?;
            if !greeting.offers_tls() {
                return Err(StepError {
                    class: FailureClass::TlsNotOffered,
                    message: "the server does not offer TLS (no CLIENT_SSL capability)".into(),
                });
            }
            session.ssl_request().await?;
            let (stream, framing) = session.into_parts();
            let (tls, info) = super::tls::handshake(cfg, endpoint, stream).await?;
            Ok((Session::resume(tls, framing), greeting, info))
        })
        .await?;
    ctx.learned.tls = Some(info);
    Ok((session, greeting))
}

/// `auth`, `write` and `verify` on `session`, then the disconnect. `greeting` is `None` when the
/// `tls` step did not run (the `auth` step reads it then).
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &mut StepCtx<'_>,
    target: &MysqlTarget,
    mut session: Session<S>,
    greeting: Option<Greeting>,
) -> Result<(), StepFailure> {
    // The canary row's `observed_at` (DATETIME, UTC).
    let observed_at = rfc3339(ctx.clock.now_ms())
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string();
    let s = &target.settings;
    // The password as it is now: a refreshed secret is sent from the next attempt on.
    let password = target.password.get();
    let login = Login {
        user: &s.user,
        password: &password,
        database: &s.database,
        tls: greeting.is_some(),
    };
    let version = ctx
        .steps
        .run(Step::Auth, async {
            let greeting = match greeting {
                Some(g) => g,
                None => session.greeting().await?,
            };
            session.authenticate(&greeting, &login).await?;
            Ok(greeting.version)
        })
        .await?;
    let result = write_and_verify(ctx, s, &mut session, &observed_at, version).await;
    // Disconnect outside every step so a slow server cannot stretch the attempt past its
    // deadline; past the deadline the connection is simply dropped.
    let left = ctx.steps.deadline.left().min(DISCONNECT_WAIT);
    if !left.is_zero() {
        let _ = tokio::time::timeout(left, session.quit()).await;
    }
    result
}

/// The `write` step (the marked upsert of this prober's canary row) and the `verify` step (read
/// it back with the server's identity). The identity goes into the attempt as soon as it is
/// read, also when the marker does not match.
async fn write_and_verify<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &mut StepCtx<'_>,
    s: &MysqlProbe,
    session: &mut Session<S>,
    observed_at: &str,
    version: String,
) -> Result<(), StepFailure> {
    let table = format!("`{}`.`{}`", s.database, s.table);
    // The end-to-end attempt has a row of its own: it never overwrites a branch's.
    let (prober_id, branch) = (
        literal(&ctx.probe.prober_id),
        literal(ctx.probe.canary_key()),
    );
    let (marker, seq) = (ctx.marker.as_str(), ctx.seq);
    let upsert = format!(
        "INSERT INTO {table} (prober_id, branch, marker, seq, observed_at) \
         VALUES ({prober_id}, {branch}, {}, {seq}, {}) ON DUPLICATE KEY UPDATE \
         marker = VALUES(marker), seq = VALUES(seq), observed_at = VALUES(observed_at)",
        literal(marker),
        literal(observed_at),
    );
    ctx.steps
        .run(Step::Write, async {
            session.execute(&upsert).await?;
            // Autocommit off (the server's default or `init_connect`): without the commit the
            // write would be seen by this session's read-back only, then rolled back.
            if session.in_transaction() {
                session.execute("COMMIT").await?;
            }
            Ok(())
        })
        .await?;
    let select = format!(
        "SELECT marker, seq, @@hostname, @@server_id, @@read_only, @@innodb_read_only \
         FROM {table} WHERE prober_id = {prober_id} AND branch = {branch}"
    );
    let row: Option<CanaryRow> = ctx
        .steps
        .run(Step::Verify, async { Ok(session.only_row(&select).await?) })
        .await?;
    let Some((got_marker, got_seq, hostname, server_id, read_only, innodb_read_only)) = row else {
        return Err(ctx.steps.fail_last(
            Step::Verify,
            FailureClass::VerifyMismatch,
            "the canary row written by this attempt is not there".into(),
        ));
    };
    let identity = ctx.learned.server.insert(ServerIdentity {
        hostname: shown(&String::from_utf8_lossy(&hostname)),
        server_id,
        read_only: read_only != 0,
        innodb_read_only: innodb_read_only != 0,
        in_recovery: false,
        version: shown(&version),
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
    if got_marker.as_deref() != Some(marker.as_bytes()) || got_seq != Some(seq) {
        let message = format!(
            "read back marker {} seq {}, wrote {marker} seq {seq} (server {})",
            got_marker.map_or("NULL".into(), |m| shown(&String::from_utf8_lossy(&m))),
            got_seq.map_or("NULL".into(), |s| s.to_string()),
            identity.hostname
        );
        return Err(ctx
            .steps
            .fail_last(Step::Verify, FailureClass::VerifyMismatch, message));
    }
    Ok(())
}

/// Map a session error to a failure class. The one place MySQL errors are classified.
pub fn classify_mysql(e: &session::Error) -> StepError {
    use session::Error;
    let class = match e {
        Error::Server { code, .. } => classify_server_code(*code),
        Error::Io(io) => super::tls::classify_stream_io(io),
        Error::Closed => FailureClass::ServerGoneAway,
        Error::Protocol(_) => FailureClass::ProtocolError,
        Error::Plugin(_) | Error::ClearWithoutTls => FailureClass::AuthDenied,
        Error::ManyRows => FailureClass::VerifyMismatch,
    };
    StepError {
        class,
        message: e.to_string(),
    }
}

impl From<session::Error> for StepError {
    fn from(e: session::Error) -> Self {
        classify_mysql(&e)
    }
}

/// Map a MySQL/MariaDB server error code to a failure class.
pub fn classify_server_code(code: u16) -> FailureClass {
    match code {
        // 1036: a table opened read-only, as every InnoDB table is under `innodb_read_only`;
        // 1792: a read-only transaction, as every session's under `transaction_read_only`.
        1036 | 1290 | 1792 | 1836 => FailureClass::ServerReadOnly,
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
    use session::Error;

    fn server(code: u16) -> Error {
        Error::Server {
            code,
            state: Some("HY000".into()),
            message: "m".into(),
        }
    }

    #[test]
    fn classify_table() {
        let cases = [
            (server(1290), FailureClass::ServerReadOnly),
            (server(1836), FailureClass::ServerReadOnly),
            (server(1036), FailureClass::ServerReadOnly),
            (server(1792), FailureClass::ServerReadOnly),
            (server(1045), FailureClass::AuthDenied),
            (server(3159), FailureClass::AuthDenied),
            (server(3118), FailureClass::AuthDenied),
            (server(4151), FailureClass::AuthDenied),
            (server(1040), FailureClass::TooManyConnections),
            (server(1205), FailureClass::LockWaitTimeout),
            (server(1213), FailureClass::LockWaitTimeout),
            (server(2006), FailureClass::ServerGoneAway),
            (server(1146), FailureClass::ServerError),
            (Error::Closed, FailureClass::ServerGoneAway),
            (
                Error::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
                FailureClass::ServerGoneAway,
            ),
            (
                Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                FailureClass::TcpReset,
            ),
            (
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
                )),
                FailureClass::TlsUntrusted,
            ),
            (Error::Protocol("x".into()), FailureClass::ProtocolError),
            (Error::ManyRows, FailureClass::VerifyMismatch),
            (
                Error::Plugin("client_ed25519".into()),
                FailureClass::AuthDenied,
            ),
            (Error::ClearWithoutTls, FailureClass::AuthDenied),
        ];
        for (e, want) in cases {
            assert_eq!(classify_mysql(&e).class, want, "{e}");
        }
    }
}
