//! The PostgreSQL frontend/backend protocol (version 3.0) on the stream the `postgres` kind owns:
//! the `SSLRequest`, the startup message and authentication (SCRAM-SHA-256, with channel binding
//! when the server offers SCRAM-SHA-256-PLUS on a TLS session; `md5` and cleartext only when the
//! session allows passwords), simple queries, `Terminate`. Message layouts and SCRAM come from
//! `postgres-protocol`; this file only sequences them. Every message read is capped at
//! [`MAX_MESSAGE`]; the caller bounds every call in time (its step).

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, SCRAM_SHA_256, SCRAM_SHA_256_PLUS, ScramSha256,
};
use postgres_protocol::message::backend::{ErrorFields, Header, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest message accepted from the server: the auth exchange, parameter statuses and the
/// canary row are far smaller; anything longer is a `protocol_error`, never buffered.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Messages the authentication exchange may take before it is a protocol error.
const MAX_AUTH_MESSAGES: usize = 6;
/// Messages between `AuthenticationOk` and `ReadyForQuery` (parameter statuses, the key data,
/// notices) before it is a protocol error.
const MAX_STARTUP_MESSAGES: usize = 64;
/// Rows a query may return before it is a protocol error (the canary read-back wants one).
const MAX_ROWS: usize = 16;

/// Why a conversation with the server failed; classified by `super::classify_postgres`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server's `ErrorResponse`.
    #[error("{severity} {code}: {message}")]
    Server {
        severity: String,
        code: String,
        message: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// End of stream in the middle of the conversation.
    #[error("the server closed the connection")]
    Closed,
    /// The server broke the protocol (malformed, unexpected or oversized message).
    #[error("{0}")]
    Protocol(String),
    /// A query that reads one row by its primary key returned more than one.
    #[error(
        "the read-back returned more than one row: (prober_id, branch) must be the canary table's primary key"
    )]
    ManyRows,
    /// The server asks for a password method readyprobe refuses on this session, or one it
    /// does not speak; the password was not sent.
    #[error("{0}")]
    Method(String),
}

/// The startup parameters and the password.
pub struct Login<'a> {
    pub user: &'a str,
    pub password: &'a str,
    pub database: &'a str,
    /// Whether the session verifies the server's chain and name: `md5` and cleartext passwords
    /// are sent only then.
    pub verified: bool,
    /// The `tls-server-end-point` channel binding data (a hash of the server certificate), on
    /// a TLS session.
    pub channel_binding: Option<Vec<u8>>,
}

/// A conversation with one server.
pub struct Session<S> {
    stream: S,
    buf: BytesMut,
    /// `server_version` from the startup's parameter statuses.
    pub version: String,
}

/// One row of a simple query, as text (`None` for NULL).
pub type TextRow = Vec<Option<String>>;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub fn new(stream: S) -> Self {
        Session {
            stream,
            buf: BytesMut::new(),
            version: String::new(),
        }
    }

    /// The stream, once no message is pending (after [`Session::ssl_request`]).
    pub fn into_stream(self) -> S {
        self.stream
    }

    /// Send an `SSLRequest`; whether the server agreed (`S`) or not (`N`).
    ///
    /// # Errors
    /// I/O, or any other answer byte.
    pub async fn ssl_request(&mut self) -> Result<bool, Error> {
        let mut out = BytesMut::new();
        frontend::ssl_request(&mut out);
        self.stream.write_all(&out).await?;
        self.stream.flush().await?;
        let mut answer = [0u8; 1];
        if self.stream.read(&mut answer).await? == 0 {
            return Err(Error::Closed);
        }
        match answer[0] {
            b'S' => Ok(true),
            b'N' => Ok(false),
            // An ErrorResponse: a server too old for SSLRequest, or one refusing the session.
            b'E' => {
                self.buf.extend_from_slice(&answer);
                match self.read().await? {
                    Message::ErrorResponse(e) => Err(server_error(e.fields())),
                    _ => Err(Error::Protocol("malformed answer to SSLRequest".into())),
                }
            }
            other => Err(Error::Protocol(format!(
                "the server answered SSLRequest with byte {other:#04x}, not S or N"
            ))),
        }
    }

    /// The startup message, the authentication exchange, and the messages up to the first
    /// `ReadyForQuery`.
    ///
    /// # Errors
    /// The server's error, a refused method (nothing sent), I/O or a protocol error.
    pub async fn authenticate(&mut self, login: &Login<'_>) -> Result<(), Error> {
        let mut out = BytesMut::new();
        frontend::startup_message(
            [
                ("user", login.user),
                ("database", login.database),
                ("application_name", "readyprobe"),
                ("client_encoding", "UTF8"),
            ],
            &mut out,
        )?;
        self.send(&out).await?;
        let mut scram: Option<ScramSha256> = None;
        let mut done = false;
        for _ in 0..MAX_AUTH_MESSAGES {
            match self.read().await? {
                Message::AuthenticationOk => {
                    done = true;
                    break;
                }
                Message::AuthenticationSasl(body) => {
                    let mut mechanisms = Vec::new();
                    let mut it = body.mechanisms();
                    while let Some(m) = it.next().map_err(malformed)? {
                        mechanisms.push(m.to_string());
                    }
                    scram = Some(self.sasl_start(login, &mechanisms).await?);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let s = scram
                        .as_mut()
                        .ok_or_else(|| Error::Protocol("SASL continue before SASL".into()))?;
                    s.update(body.data()).map_err(sasl_error)?;
                    let mut out = BytesMut::new();
                    frontend::sasl_response(s.message(), &mut out)?;
                    self.send(&out).await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let s = scram
                        .as_mut()
                        .ok_or_else(|| Error::Protocol("SASL final before SASL".into()))?;
                    s.finish(body.data()).map_err(sasl_error)?;
                }
                Message::AuthenticationMd5Password(body) => {
                    refuse_unverified(login, "md5")?;
                    let hash = postgres_protocol::authentication::md5_hash(
                        login.user.as_bytes(),
                        login.password.as_bytes(),
                        body.salt(),
                    );
                    self.password(hash.as_bytes()).await?;
                }
                Message::AuthenticationCleartextPassword => {
                    refuse_unverified(login, "password (cleartext)")?;
                    self.password(login.password.as_bytes()).await?;
                }
                Message::ErrorResponse(e) => return Err(server_error(e.fields())),
                Message::NoticeResponse(_) => {}
                Message::AuthenticationGss
                | Message::AuthenticationGssContinue(_)
                | Message::AuthenticationSspi
                | Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential => {
                    return Err(Error::Method(
                        "the server asks for GSSAPI, SSPI, Kerberos or SCM authentication, which readyprobe does not speak: give the probe role a scram-sha-256 password".into(),
                    ));
                }
                other => return Err(unexpected("during authentication", &other)),
            }
        }
        if !done {
            return Err(Error::Protocol(format!(
                "authentication not finished after {MAX_AUTH_MESSAGES} messages"
            )));
        }
        self.until_ready().await
    }

    /// Choose the SCRAM mechanism and send the first message.
    async fn sasl_start(
        &mut self,
        login: &Login<'_>,
        mechanisms: &[String],
    ) -> Result<ScramSha256, Error> {
        let offers = |m: &str| mechanisms.iter().any(|x| x == m);
        let (binding, mechanism) = match &login.channel_binding {
            Some(cb) if offers(SCRAM_SHA_256_PLUS) => (
                ChannelBinding::tls_server_end_point(cb.clone()),
                SCRAM_SHA_256_PLUS,
            ),
            Some(_) => (ChannelBinding::unrequested(), SCRAM_SHA_256),
            None => (ChannelBinding::unsupported(), SCRAM_SHA_256),
        };
        if !offers(mechanism) && !offers(SCRAM_SHA_256) {
            return Err(Error::Method(format!(
                "the server offers SASL mechanisms {mechanisms:?}, none of which readyprobe speaks"
            )));
        }
        let scram = ScramSha256::new(login.password.as_bytes(), binding);
        let mut out = BytesMut::new();
        frontend::sasl_initial_response(mechanism, scram.message(), &mut out)?;
        self.send(&out).await?;
        Ok(scram)
    }

    async fn password(&mut self, p: &[u8]) -> Result<(), Error> {
        let mut out = BytesMut::new();
        frontend::password_message(p, &mut out)?;
        self.send(&out).await
    }

    /// Read up to `ReadyForQuery` after authentication, keeping `server_version`.
    async fn until_ready(&mut self) -> Result<(), Error> {
        for _ in 0..MAX_STARTUP_MESSAGES {
            match self.read().await? {
                Message::ReadyForQuery(_) => return Ok(()),
                Message::ParameterStatus(p) => {
                    if p.name().map_err(malformed)? == "server_version" {
                        self.version = p.value().map_err(malformed)?.to_string();
                    }
                }
                Message::BackendKeyData(_) | Message::NoticeResponse(_) => {}
                Message::ErrorResponse(e) => return Err(server_error(e.fields())),
                other => return Err(unexpected("after authentication", &other)),
            }
        }
        Err(Error::Protocol(format!(
            "no ReadyForQuery within {MAX_STARTUP_MESSAGES} messages after authentication"
        )))
    }

    /// Run one simple query (autocommit: it is committed when it succeeds) and return its rows.
    ///
    /// # Errors
    /// The server's error (the first), I/O, or a protocol error.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<TextRow>, Error> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out)?;
        self.send(&out).await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            // A FATAL error (an administrator's shutdown) is followed by the end of the stream:
            // the server's word is the better cause.
            let message = match self.read().await {
                Ok(m) => m,
                Err(e) => return Err(error.unwrap_or(e)),
            };
            match message {
                Message::ReadyForQuery(_) => break,
                Message::DataRow(row) => {
                    if rows.len() == MAX_ROWS {
                        return Err(Error::Protocol(format!(
                            "a query returned more than {MAX_ROWS} rows"
                        )));
                    }
                    let buf = row.buffer();
                    let values = row
                        .ranges()
                        .map(|r| Ok(r.map(|r| String::from_utf8_lossy(&buf[r]).into_owned())))
                        .collect()
                        .map_err(malformed)?;
                    rows.push(values);
                }
                Message::ErrorResponse(e) => {
                    error.get_or_insert(server_error(e.fields()));
                }
                Message::RowDescription(_)
                | Message::CommandComplete(_)
                | Message::EmptyQueryResponse
                | Message::NoticeResponse(_)
                | Message::ParameterStatus(_)
                | Message::NotificationResponse(_) => {}
                other => return Err(unexpected("in a query's answer", &other)),
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    /// The one row a query by primary key returns, if any.
    ///
    /// # Errors
    /// As [`Session::query`], and [`Error::ManyRows`].
    pub async fn only_row(&mut self, sql: &str) -> Result<Option<TextRow>, Error> {
        let mut rows = self.query(sql).await?;
        if rows.len() > 1 {
            return Err(Error::ManyRows);
        }
        Ok(rows.pop())
    }

    /// Say goodbye (`Terminate`) and close; errors are of no interest.
    pub async fn terminate(mut self) {
        let mut out = BytesMut::new();
        frontend::terminate(&mut out);
        let _ = self.stream.write_all(&out).await;
        let _ = self.stream.shutdown().await;
    }

    async fn send(&mut self, out: &[u8]) -> Result<(), Error> {
        self.stream.write_all(out).await?;
        self.stream.flush().await?;
        Ok(())
    }

    /// The next message, read up to [`MAX_MESSAGE`] bytes.
    async fn read(&mut self) -> Result<Message, Error> {
        loop {
            if let Some(h) = Header::parse(&self.buf).map_err(malformed)? {
                let len = usize::try_from(h.len()).unwrap_or(usize::MAX);
                if len > MAX_MESSAGE {
                    return Err(Error::Protocol(format!(
                        "the server sent a message over {MAX_MESSAGE} bytes (type {:?})",
                        char::from(h.tag())
                    )));
                }
            }
            if let Some(m) = Message::parse(&mut self.buf).map_err(malformed)? {
                return Ok(m);
            }
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(Error::Closed);
            }
        }
    }
}

/// `md5` and cleartext send the password (or a replayable hash of it): only to a server whose
/// certificate the session verified.
fn refuse_unverified(login: &Login<'_>, method: &str) -> Result<(), Error> {
    if login.verified {
        return Ok(());
    }
    Err(Error::Method(format!(
        "the server asks for {method} authentication, which readyprobe sends only over TLS with ssl_mode \"verify_identity\"; the password was not sent (give the probe role a scram-sha-256 password, or verify the server)"
    )))
}

/// A message the parser could not read (a field running past the message's own length, an
/// unknown type): the server broke the protocol, whatever `io::ErrorKind` the parser chose
/// (an `UnexpectedEof` here is no end of the stream).
fn malformed(e: std::io::Error) -> Error {
    Error::Protocol(format!("a malformed message from the server: {e}"))
}

fn sasl_error(e: std::io::Error) -> Error {
    Error::Protocol(format!("SCRAM exchange: {e}"))
}

/// An `ErrorResponse`'s severity, SQLSTATE and message.
fn server_error(mut fields: ErrorFields<'_>) -> Error {
    let (mut severity, mut code, mut message) = (String::new(), String::new(), String::new());
    loop {
        match fields.next() {
            Ok(Some(f)) => match f.type_() {
                b'V' => severity = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                b'S' if severity.is_empty() => {
                    severity = String::from_utf8_lossy(f.value_bytes()).into_owned()
                }
                b'C' => code = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                b'M' => message = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                _ => {}
            },
            Ok(None) => break,
            Err(_) => {
                return Error::Protocol("malformed ErrorResponse".into());
            }
        }
    }
    Error::Server {
        severity,
        code,
        message,
    }
}

fn unexpected(when: &str, m: &Message) -> Error {
    let name = match m {
        Message::AuthenticationSasl(_) => "AuthenticationSASL",
        Message::RowDescription(_) => "RowDescription",
        Message::DataRow(_) => "DataRow",
        Message::CopyInResponse(_) | Message::CopyOutResponse(_) => "a COPY response",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        _ => "a message",
    };
    Error::Protocol(format!("the server sent {name} {when}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use tokio::io::{AsyncReadExt, DuplexStream, duplex};

    fn login(verified: bool) -> Login<'static> {
        Login {
            user: "readyprobe",
            password: "pw-123456789",
            database: "readyprobe",
            verified,
            channel_binding: None,
        }
    }

    /// A backend message: tag, length, body.
    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_u8(tag);
        b.put_i32(i32::try_from(body.len()).unwrap() + 4);
        b.put_slice(body);
        b.to_vec()
    }

    /// A server that answers the startup with `auth` (an Authentication request) and records
    /// what the client sends after it.
    async fn server_asking(auth: Vec<u8>, mut server: DuplexStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        server.read_exact(&mut len).await.unwrap();
        let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        server.read_exact(&mut startup).await.unwrap();
        server.write_all(&auth).await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            server.read_to_end(&mut rest),
        )
        .await;
        rest
    }

    /// Cleartext and md5 over a session that does not verify the server: the attempt fails at
    /// auth and nothing of the password leaves.
    #[tokio::test]
    async fn cleartext_and_md5_are_refused_unverified_without_sending_the_password() {
        for auth in [
            message(b'R', &3i32.to_be_bytes()),
            message(b'R', &[0, 0, 0, 5, 1, 2, 3, 4]),
        ] {
            let (client, server) = duplex(4096);
            let srv = tokio::spawn(server_asking(auth, server));
            let mut session = Session::new(client);
            let e = session.authenticate(&login(false)).await.unwrap_err();
            assert!(matches!(e, Error::Method(_)), "{e}");
            drop(session);
            let sent = srv.await.unwrap();
            assert!(sent.is_empty(), "sent after the request: {sent:?}");
        }
    }

    /// Verified: the cleartext password goes out as a PasswordMessage.
    #[tokio::test]
    async fn cleartext_is_sent_when_verified() {
        let (client, server) = duplex(4096);
        let srv = tokio::spawn(server_asking(message(b'R', &3i32.to_be_bytes()), server));
        let mut session = Session::new(client);
        let got = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            session.authenticate(&login(true)),
        )
        .await;
        assert!(got.is_err(), "waits for the server's answer");
        drop(session);
        let sent = srv.await.unwrap();
        assert_eq!(sent[0], b'p');
        assert!(sent.ends_with(b"pw-123456789\0"), "{sent:?}");
    }

    /// A message longer than the cap is a protocol error before it is buffered.
    #[tokio::test]
    async fn an_oversized_message_is_a_protocol_error() {
        let (client, mut server) = duplex(4096);
        let mut head = vec![b'R'];
        head.extend_from_slice(&(i32::try_from(MAX_MESSAGE).unwrap() + 5).to_be_bytes());
        server.write_all(&head).await.unwrap();
        let mut session = Session::new(client);
        let Err(e) = session.read().await else {
            panic!("an oversized message was read");
        };
        assert!(matches!(e, Error::Protocol(_)), "{e}");
    }

    /// An ErrorResponse's SQLSTATE and message are kept.
    #[tokio::test]
    async fn an_error_response_carries_its_sqlstate() {
        let (client, mut server) = duplex(4096);
        let body = b"SFATAL\0VFATAL\0C53300\0Msorry, too many clients already\0\0";
        server.write_all(&message(b'E', body)).await.unwrap();
        let mut session = Session::new(client);
        let e = session.authenticate(&login(true)).await.unwrap_err();
        let Error::Server { code, message, .. } = e else {
            panic!("{e}");
        };
        assert_eq!(code, "53300");
        assert_eq!(message, "sorry, too many clients already");
    }

    /// A message cut short inside its own length (a DataRow whose column overruns it, an
    /// AuthenticationSASL without its terminator) is a broken protocol, not a server that went
    /// away: the connection is still open.
    #[tokio::test]
    async fn a_malformed_message_body_is_a_protocol_error() {
        let mut row = 5i16.to_be_bytes().to_vec();
        row.extend_from_slice(&1000i32.to_be_bytes());
        row.extend_from_slice(b"ab");
        let (client, mut server) = duplex(4096);
        server.write_all(&message(b'D', &row)).await.unwrap();
        server.write_all(&message(b'Z', b"I")).await.unwrap();
        let mut session = Session::new(client);
        let e = session.query("SELECT 1").await.unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
        let (client, mut server) = duplex(4096);
        let sasl = message(b'R', &[0, 0, 0, 10, b'S', b'C']);
        server.write_all(&sasl).await.unwrap();
        let mut session = Session::new(client);
        let e = session.authenticate(&login(true)).await.unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
        drop(server);
    }
}
