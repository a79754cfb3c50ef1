//! The `postgres` probe kind: `tls`, `auth`, the marked `write` and the `verify` read-back on the
//! one connection `connect` opened, and the one place PostgreSQL errors (SQLSTATEs) are
//! classified.
//!
//! The protocol is spoken here ([`session`]) with the messages and SCRAM of `postgres-protocol`,
//! as `mysql_common` serves the `mysql` kind, not through `tokio-postgres`: its `connect_raw`
//! runs the startup, the authentication and the wait for `ReadyForQuery` as one future, sends
//! an `md5` or cleartext password whenever the server asks (the kind must refuse them on a
//! session that does not verify the server, before anything is sent), and takes channel
//! binding only from a TLS stream it negotiated itself. With the messages in hand the kind keeps
//! its own steps, each under its own deadline and class: `tls` sends the `SSLRequest` on the
//! connected stream and runs the shared handshake (`super::tls`); `auth` is the startup message
//! and the SCRAM-SHA-256 exchange (SCRAM-SHA-256-PLUS, bound to the server certificate, when
//! the server offers it over TLS) up to `ReadyForQuery`; `write` the upsert of this prober's
//! canary row (committed: a simple query outside a transaction block); `verify` the read-back
//! with the session's `transaction_read_only` and `pg_is_in_recovery()`.

mod session;

use crate::clock::rfc3339;
use crate::config::PostgresProbe;
use crate::failure::{FailureClass, Step};
use postgres_protocol::escape::{escape_identifier, escape_literal};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use super::attempt::ServerIdentity;
use super::attempt::server_text as shown;
use super::connect::Connected;
use super::ctx::{StepCtx, StepError, StepFailure};
pub use super::target::PostgresTarget;
use session::{Login, Session, TextRow};

/// Longest polite disconnect after the last step: it runs outside every step, within what is
/// left of the attempt deadline.
const DISCONNECT_WAIT: Duration = Duration::from_millis(500);

/// Run `tls` (when enabled), `auth`, `write` and `verify` on the connection `connect` opened.
///
/// # Errors
/// The failing step and its class.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    target: &PostgresTarget,
    Connected { stream, .. }: Connected,
) -> Result<(), StepFailure> {
    match ctx.tls {
        Some(cfg) => {
            let (session, binding) = tls(ctx, cfg.clone(), stream).await?;
            converse(ctx, target, session, binding).await
        }
        None => converse(ctx, target, Session::new(stream), None).await,
    }
}

/// A session on the TLS stream over the attempt's connection.
type TlsSession = Session<tokio_rustls::client::TlsStream<TcpStream>>;

/// The `tls` step: `SSLRequest`, then the handshake; the session continues on the TLS stream
/// with the certificate's `tls-server-end-point` hash for channel binding.
async fn tls(
    ctx: &mut StepCtx<'_>,
    cfg: Arc<rustls::ClientConfig>,
    stream: TcpStream,
) -> Result<(TlsSession, Option<Vec<u8>>), StepFailure> {
    let endpoint = ctx.endpoint();
    let (session, info, binding) = ctx
        .steps
        .run(Step::Tls, async move {
            let mut plain = Session::new(stream);
            if !plain.ssl_request().await? {
                return Err(StepError {
                    class: FailureClass::TlsNotOffered,
                    message: "the server does not offer TLS (it answered SSLRequest with N)".into(),
                });
            }
            let (tls, info) = super::tls::handshake(cfg, endpoint, plain.into_stream()).await?;
            let binding = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|leaf| end_point_hash(leaf.as_ref()));
            Ok((Session::new(tls), info, binding))
        })
        .await?;
    ctx.learned.tls = Some(info);
    Ok((session, binding))
}

/// RFC 5929 `tls-server-end-point`: the certificate's hash with its signature's hash function,
/// SHA-256 for MD5 and SHA-1. `None` when the certificate cannot be parsed or its algorithm
/// names no hash (Ed25519): SCRAM then goes without channel binding.
fn end_point_hash(der: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::digest::{SHA256, SHA384, SHA512, digest};
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let algorithm = match cert.signature_algorithm.algorithm.to_id_string().as_str() {
        // sha384WithRSAEncryption, ecdsa-with-SHA384
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => &SHA384,
        // sha512WithRSAEncryption, ecdsa-with-SHA512
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => &SHA512,
        // md5, sha1, sha256 with RSA; ecdsa-with-SHA1, ecdsa-with-SHA256; RSASSA-PSS (SHA-256,
        // the usual parameters)
        "1.2.840.113549.1.1.4"
        | "1.2.840.113549.1.1.5"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.113549.1.1.10"
        | "1.2.840.10045.4.1"
        | "1.2.840.10045.4.3.2" => &SHA256,
        _ => return None,
    };
    Some(digest(algorithm, der).as_ref().to_vec())
}

/// `auth`, `write` and `verify` on `session`, then the disconnect.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &mut StepCtx<'_>,
    target: &PostgresTarget,
    mut session: Session<S>,
    channel_binding: Option<Vec<u8>>,
) -> Result<(), StepFailure> {
    let s = &target.settings;
    // The password as it is now: a refreshed secret is sent from the next attempt on.
    let password = target.password.get();
    let login = Login {
        user: &s.user,
        password: &password,
        database: &s.database,
        verified: ctx.probe.tls_verified && ctx.tls.is_some(),
        channel_binding,
    };
    ctx.steps
        .run(Step::Auth, async {
            Ok(session.authenticate(&login).await?)
        })
        .await?;
    let version = shown(&session.version);
    let result = write_and_verify(ctx, s, &mut session, version).await;
    // Disconnect outside every step so a slow server cannot stretch the attempt past its
    // deadline; past the deadline the connection is simply dropped.
    let left = ctx.steps.deadline.left().min(DISCONNECT_WAIT);
    if !left.is_zero() {
        let _ = tokio::time::timeout(left, session.terminate()).await;
    }
    result
}

/// The canary row as read back by `verify`: marker, seq, `transaction_read_only`,
/// `pg_is_in_recovery()`, and the server's name (`cluster_name` or its address).
struct CanaryRow {
    marker: Option<String>,
    seq: Option<String>,
    read_only: bool,
    in_recovery: bool,
    hostname: String,
}

impl CanaryRow {
    fn from_text(row: TextRow) -> Result<CanaryRow, StepError> {
        let [marker, seq, read_only, in_recovery, hostname]: [Option<String>; 5] =
            row.try_into().map_err(|r: TextRow| StepError {
                class: FailureClass::ProtocolError,
                message: format!("the read-back returned {} columns, not 5", r.len()),
            })?;
        Ok(CanaryRow {
            marker,
            seq,
            read_only: read_only.as_deref() == Some("on"),
            in_recovery: in_recovery.as_deref() == Some("t"),
            hostname: hostname.unwrap_or_default(),
        })
    }
}

/// The `write` step (the marked upsert of this prober's canary row, committed) and the `verify`
/// step (read it back with the session's read-only state). The identity goes into the attempt
/// as soon as it is read, also when the marker does not match.
async fn write_and_verify<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &mut StepCtx<'_>,
    s: &PostgresProbe,
    session: &mut Session<S>,
    version: String,
) -> Result<(), StepFailure> {
    let table = format!(
        "{}.{}",
        escape_identifier(&s.schema),
        escape_identifier(&s.table)
    );
    // The end-to-end attempt has a row of its own: it never overwrites a branch's.
    let (prober_id, branch) = (
        escape_literal(&ctx.probe.prober_id),
        escape_literal(ctx.probe.canary_key()),
    );
    let (marker, seq) = (ctx.marker.as_str(), ctx.seq);
    let observed_at = escape_literal(&rfc3339(ctx.clock.now_ms()));
    // A write waiting on the canary row's lock ends as 55P03 before the step deadline cuts it.
    let lock_timeout_ms = (ctx.steps.deadline.step(Step::Write).limit.as_millis() * 3 / 4).max(1);
    // One simple query: one implicit transaction, committed when the upsert succeeds.
    let upsert = format!(
        "SET lock_timeout = {lock_timeout_ms}; \
         INSERT INTO {table} (prober_id, branch, marker, seq, observed_at) \
         VALUES ({prober_id}, {branch}, {}, {seq}, {observed_at}) \
         ON CONFLICT (prober_id, branch) DO UPDATE SET marker = EXCLUDED.marker, \
         seq = EXCLUDED.seq, observed_at = EXCLUDED.observed_at",
        escape_literal(marker),
    );
    ctx.steps
        .run(Step::Write, async {
            session.query(&upsert).await?;
            Ok(())
        })
        .await?;
    let select = format!(
        "SELECT marker, seq::text, current_setting('transaction_read_only'), pg_is_in_recovery(), \
         COALESCE(NULLIF(current_setting('cluster_name'), ''), host(inet_server_addr()), '') \
         FROM {table} WHERE prober_id = {prober_id} AND branch = {branch}"
    );
    let row = ctx
        .steps
        .run(Step::Verify, async {
            session
                .only_row(&select)
                .await?
                .map(CanaryRow::from_text)
                .transpose()
        })
        .await?;
    let Some(row) = row else {
        return Err(ctx.steps.fail_last(
            Step::Verify,
            FailureClass::VerifyMismatch,
            "the canary row written by this attempt is not there".into(),
        ));
    };
    let identity = ctx.learned.server.insert(ServerIdentity {
        hostname: shown(&row.hostname),
        server_id: 0,
        read_only: row.read_only,
        innodb_read_only: false,
        in_recovery: row.in_recovery,
        version,
    });
    if identity.read_only || identity.in_recovery {
        let message = format!(
            "server {} reports {}: the application's writes are refused",
            identity.hostname,
            if identity.in_recovery {
                "pg_is_in_recovery() = true (a standby)"
            } else {
                "transaction_read_only = on"
            }
        );
        return Err(ctx
            .steps
            .fail_last(Step::Verify, FailureClass::ServerReadOnly, message));
    }
    if row.marker.as_deref() != Some(marker) || row.seq != Some(seq.to_string()) {
        let message = format!(
            "read back marker {} seq {}, wrote {marker} seq {seq} (server {})",
            row.marker.as_deref().map_or("NULL".into(), shown),
            row.seq.as_deref().map_or("NULL".into(), shown),
            identity.hostname
        );
        return Err(ctx
            .steps
            .fail_last(Step::Verify, FailureClass::VerifyMismatch, message));
    }
    Ok(())
}

/// Map a session error to a failure class. The one place PostgreSQL errors are classified.
pub fn classify_postgres(e: &session::Error) -> StepError {
    use session::Error;
    let class = match e {
        Error::Server { code, .. } => classify_sqlstate(code),
        Error::Io(io) => super::tls::classify_stream_io(io),
        Error::Closed => FailureClass::ServerGoneAway,
        Error::Protocol(_) => FailureClass::ProtocolError,
        Error::Method(_) => FailureClass::AuthDenied,
        Error::ManyRows => FailureClass::VerifyMismatch,
    };
    StepError {
        class,
        message: e.to_string(),
    }
}

impl From<session::Error> for StepError {
    fn from(e: session::Error) -> Self {
        classify_postgres(&e)
    }
}

/// Map a SQLSTATE to a failure class: exact codes first, then their class (first two
/// characters).
pub fn classify_sqlstate(code: &str) -> FailureClass {
    use FailureClass as C;
    match code {
        // read_only_sql_transaction: a hot standby, default_transaction_read_only.
        "25006" => C::ServerReadOnly,
        // cannot_connect_now: starting up, shutting down, recovery without hot standby.
        "57P03" => C::CannotConnectNow,
        "53300" => C::TooManyConnections,
        // insufficient_privilege: a GRANT on the canary table is missing.
        "42501" => C::AuthDenied,
        // invalid_catalog_name (database), invalid_schema_name, undefined_table.
        "3D000" | "3F000" | "42P01" => C::CanaryMissing,
        // lock_not_available (lock_timeout), serialization_failure, deadlock_detected.
        "55P03" | "40001" | "40P01" => C::LockWaitTimeout,
        // query_canceled: statement_timeout, or a cancel request.
        "57014" => C::DeadlineExceeded,
        // admin_shutdown, crash_shutdown: the server is going away.
        "57P01" | "57P02" => C::ServerGoneAway,
        _ => match code.get(..2) {
            // invalid_authorization_specification, invalid_password
            Some("28") => C::AuthDenied,
            // connection_exception
            Some("08") => C::ServerGoneAway,
            // insufficient_resources (disk full, out of memory)
            Some("53") => C::TooManyConnections,
            _ => C::ServerError,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use session::Error;

    fn server(code: &str) -> Error {
        Error::Server {
            severity: "ERROR".into(),
            code: code.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn classify_table() {
        use FailureClass as C;
        let cases = [
            (server("25006"), C::ServerReadOnly),
            (server("57P03"), C::CannotConnectNow),
            (server("53300"), C::TooManyConnections),
            (server("28P01"), C::AuthDenied),
            (server("28000"), C::AuthDenied),
            (server("42501"), C::AuthDenied),
            (server("3D000"), C::CanaryMissing),
            (server("3F000"), C::CanaryMissing),
            (server("42P01"), C::CanaryMissing),
            (server("40001"), C::LockWaitTimeout),
            (server("40P01"), C::LockWaitTimeout),
            (server("55P03"), C::LockWaitTimeout),
            (server("57014"), C::DeadlineExceeded),
            (server("57P01"), C::ServerGoneAway),
            (server("08006"), C::ServerGoneAway),
            (server("42601"), C::ServerError),
            (server(""), C::ServerError),
            (Error::Closed, C::ServerGoneAway),
            (
                Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                C::TcpReset,
            ),
            (
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
                )),
                C::TlsUntrusted,
            ),
            (Error::Protocol("x".into()), C::ProtocolError),
            (Error::ManyRows, C::VerifyMismatch),
            (Error::Method("md5".into()), C::AuthDenied),
        ];
        for (e, want) in cases {
            assert_eq!(classify_postgres(&e).class, want, "{e}");
        }
    }

    #[test]
    fn a_row_is_read_as_text() {
        let text = |v: &str| Some(v.to_string());
        let row = CanaryRow::from_text(vec![
            text("m"),
            text("7"),
            text("off"),
            text("t"),
            text("pg-a"),
        ])
        .expect("five columns");
        assert!(!row.read_only && row.in_recovery);
        assert_eq!(row.hostname, "pg-a");
        let e = CanaryRow::from_text(vec![text("m")]).err().expect("short");
        assert_eq!(e.class, FailureClass::ProtocolError);
    }
}
