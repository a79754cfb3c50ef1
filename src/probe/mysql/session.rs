//! The MySQL client protocol on the stream the `mysql` kind owns: the greeting, the SSLRequest,
//! the handshake response and authentication, text queries, `COM_QUIT`. Framing and packet
//! layouts come from `mysql_common`; this file only sequences them. Every packet read is capped at
//! [`MAX_PACKET`]; the caller bounds every call in time (its step).

use bytes::BytesMut;
use mysql_common::constants::{CapabilityFlags, StatusFlags};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    AuthPlugin, AuthSwitchRequest, Column, CommonOkPacket, ErrPacket, HandshakePacket,
    HandshakeResponse, OkPacketDeserializer, SslRequest,
};
use mysql_common::proto::codec::PacketCodec;
use mysql_common::proto::codec::error::PacketCodecError;
use mysql_common::proto::{MySerialize, Text};
use mysql_common::row::RowDeserializer;
use mysql_common::row::convert::{FromRow, from_row_opt};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest packet accepted from the server: the greeting, the auth exchange and the canary row
/// are far smaller; anything longer is a `protocol_error`, never buffered.
pub const MAX_PACKET: usize = 64 * 1024;
/// `utf8mb4_general_ci`: the session's character set, as [`literal`]'s hex literals say.
const UTF8MB4_GENERAL_CI: u8 = 45;
/// Packets the authentication exchange may take before it is a protocol error.
const MAX_AUTH_PACKETS: usize = 6;
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;

/// What the client offers; the session uses what the server offers too.
fn client_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_LONG_FLAG
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_TRANSACTIONS
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
}

/// Why a conversation with the server failed; classified by `super::classify_mysql`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server's ERR packet.
    #[error("ERROR {code}{}: {message}", state.as_deref().map(|s| format!(" ({s})")).unwrap_or_default())]
    Server {
        code: u16,
        state: Option<String>,
        message: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// End of stream in the middle of the conversation.
    #[error("the server closed the connection")]
    Closed,
    /// The server broke the protocol (malformed, unexpected or oversized packet).
    #[error("{0}")]
    Protocol(String),
    /// A query that reads one row by its primary key returned more than one.
    #[error(
        "the read-back returned more than one row: (prober_id, branch) must be the canary table's primary key"
    )]
    ManyRows,
    /// The probe user's authentication plugin is not one readyprobe speaks.
    #[error(
        "the server asks for authentication plugin {0:?}, which readyprobe does not speak: give the probe user mysql_native_password or caching_sha2_password"
    )]
    Plugin(String),
    /// The server asks for `mysql_clear_password` on a session without TLS.
    #[error(
        "the server asks for mysql_clear_password on a session without TLS: the password is not sent in clear text"
    )]
    ClearWithoutTls,
}

fn codec_error(e: PacketCodecError) -> Error {
    match e {
        PacketCodecError::Io(e) => Error::Io(e),
        PacketCodecError::PacketTooLarge => {
            Error::Protocol(format!("the server sent a packet over {MAX_PACKET} bytes"))
        }
        other => Error::Protocol(other.to_string()),
    }
}

fn malformed(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Protocol(format!("malformed {what}: {e}"))
}

/// The server's initial handshake packet, as far as the session needs it.
#[derive(Debug, Clone)]
pub struct Greeting {
    /// The server version string, e.g. `5.5.5-10.11.19-MariaDB`.
    pub version: String,
    parsed_version: (u16, u16, u16),
    capabilities: CapabilityFlags,
    nonce: Vec<u8>,
    plugin: Option<AuthPlugin<'static>>,
}

impl Greeting {
    /// Whether the server offers TLS (the `CLIENT_SSL` capability).
    pub fn offers_tls(&self) -> bool {
        self.capabilities.contains(CapabilityFlags::CLIENT_SSL)
    }
}

/// Who logs in, and whether the session is encrypted (the clear password of
/// `caching_sha2_password`'s full authentication goes only over TLS).
pub struct Login<'a> {
    pub user: &'a str,
    pub password: &'a str,
    pub database: &'a str,
    pub tls: bool,
}

/// The protocol state of a session, apart from its stream (kept across the TLS upgrade).
#[derive(Debug)]
pub struct Framing {
    codec: PacketCodec,
    input: BytesMut,
    capabilities: CapabilityFlags,
    status: StatusFlags,
}

/// One MySQL session on `S` (a TCP stream, or the TLS stream over it).
#[derive(Debug)]
pub struct Session<S> {
    stream: S,
    framing: Framing,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// A session on a fresh connection: nothing read yet.
    pub fn new(stream: S) -> Self {
        let mut codec = PacketCodec::default();
        codec.max_allowed_packet = MAX_PACKET;
        Session {
            stream,
            framing: Framing {
                codec,
                input: BytesMut::new(),
                capabilities: client_capabilities(),
                status: StatusFlags::empty(),
            },
        }
    }

    /// The session continued on another stream (the TLS stream over the old one).
    pub fn resume(stream: S, framing: Framing) -> Self {
        Session { stream, framing }
    }

    /// The stream and the protocol state, to upgrade the stream.
    pub fn into_parts(self) -> (S, Framing) {
        (self.stream, self.framing)
    }

    /// Read the server's greeting (or the ERR packet it sends instead, e.g. too many
    /// connections) and settle the capabilities both sides use.
    pub async fn greeting(&mut self) -> Result<Greeting, Error> {
        let p = self.read_packet().await?;
        if p.first() == Some(&0xff) {
            // Before the handshake the server assumes no client capabilities.
            return Err(server_error(&p, CapabilityFlags::empty()));
        }
        // `mysql_common` takes the nonce's second part as `len as i8 - 8` bytes, which overflows
        // for 0x80..=0x87; servers send 21, and no length over 0x7f makes sense.
        let nonce_len = p.get(1..).and_then(|v| v.iter().position(|&b| b == 0));
        if let Some(&len) = nonce_len
            .and_then(|nul| p.get(nul + 22))
            .filter(|&&l| l > 0x7f)
        {
            return Err(Error::Protocol(format!(
                "malformed greeting: auth-plugin-data length {len}"
            )));
        }
        let g = ParseBuf(&p)
            .parse::<HandshakePacket>(())
            .map_err(malformed("greeting"))?;
        if g.protocol_version() != 10 {
            return Err(Error::Protocol(format!(
                "unsupported protocol version {}",
                g.protocol_version()
            )));
        }
        self.framing.capabilities = client_capabilities() & g.capabilities();
        self.framing.status = g.status_flags();
        Ok(Greeting {
            version: g.server_version_str().into_owned(),
            parsed_version: g.server_version_parsed().unwrap_or((0, 0, 0)),
            capabilities: g.capabilities(),
            nonce: g.nonce(),
            plugin: g.auth_plugin().map(AuthPlugin::into_owned),
        })
    }

    /// Ask the server to start TLS; the TLS handshake follows on the stream.
    pub async fn ssl_request(&mut self) -> Result<(), Error> {
        self.framing.capabilities |= CapabilityFlags::CLIENT_SSL;
        let request = SslRequest::new(
            self.framing.capabilities,
            MAX_PACKET as u32,
            UTF8MB4_GENERAL_CI,
        );
        self.write_struct(&request).await?;
        if !self.framing.input.is_empty() {
            return Err(Error::Protocol(
                "the server sent data before the TLS handshake".into(),
            ));
        }
        Ok(())
    }

    /// The handshake response and the authentication exchange, up to the server's OK.
    pub async fn authenticate(&mut self, g: &Greeting, login: &Login<'_>) -> Result<(), Error> {
        let mut plugin = match &g.plugin {
            Some(AuthPlugin::CachingSha2Password) => AuthPlugin::CachingSha2Password,
            _ => AuthPlugin::MysqlNativePassword,
        };
        let mut nonce = g.nonce.clone();
        let data = scramble(&plugin, login.password, &nonce);
        let response = HandshakeResponse::new(
            data.as_deref(),
            g.parsed_version,
            Some(login.user.as_bytes()),
            Some(login.database.as_bytes()),
            Some(plugin.clone()),
            self.framing.capabilities,
            None,
            MAX_PACKET as u32,
        );
        self.write_struct(&response).await?;
        let mut switched = false;
        for _ in 0..MAX_AUTH_PACKETS {
            let p = self.read_packet().await?;
            match p.first() {
                Some(0x00) => return self.take_ok(&p),
                Some(0xff) => return Err(server_error(&p, self.framing.capabilities)),
                Some(0xfe) if p.len() == 1 => {
                    return Err(Error::Plugin("mysql_old_password".into()));
                }
                Some(0xfe) if !switched => {
                    switched = true;
                    let request = ParseBuf(&p)
                        .parse::<AuthSwitchRequest>(())
                        .map_err(malformed("auth switch request"))?;
                    if request.auth_plugin() == AuthPlugin::MysqlClearPassword {
                        // RDS IAM: the token itself, so only inside TLS.
                        plugin = AuthPlugin::MysqlClearPassword;
                        self.clear_password(login).await?;
                        continue;
                    }
                    plugin = supported(request.auth_plugin())?;
                    nonce = request.plugin_data().to_vec();
                    let data = scramble(&plugin, login.password, &nonce);
                    self.write_packet(data.as_deref().unwrap_or_default())
                        .await?;
                }
                Some(0x01) if plugin == AuthPlugin::CachingSha2Password => {
                    self.caching_sha2_more(&p, login, &nonce).await?;
                }
                _ => return Err(unexpected("during authentication", &p)),
            }
        }
        Err(Error::Protocol(format!(
            "authentication not finished after {MAX_AUTH_PACKETS} packets"
        )))
    }

    /// `mysql_clear_password`: the password, NUL-terminated, as it is; refused on a session
    /// without TLS (the server then sees no password at all).
    async fn clear_password(&mut self, login: &Login<'_>) -> Result<(), Error> {
        if !login.tls {
            return Err(Error::ClearWithoutTls);
        }
        let mut password = login.password.as_bytes().to_vec();
        password.push(0);
        self.write_packet(&password).await
    }

    /// `caching_sha2_password`'s extra round: fast authentication succeeded (the server then
    /// sends OK), or full authentication: the clear password over TLS, else encrypted with the
    /// server's RSA key.
    async fn caching_sha2_more(
        &mut self,
        p: &[u8],
        login: &Login<'_>,
        nonce: &[u8],
    ) -> Result<(), Error> {
        match p.get(1) {
            Some(0x03) => Ok(()),
            Some(0x04) => {
                let mut password = login.password.as_bytes().to_vec();
                password.push(0);
                if login.tls {
                    return self.write_packet(&password).await;
                }
                self.write_packet(&[0x02]).await?;
                let key = self.read_packet().await?;
                let pem = match key.split_first() {
                    Some((0x01, pem)) => pem,
                    _ => return Err(unexpected("instead of the server's RSA key", &key)),
                };
                let encrypted = rsa_encrypt(&password, nonce, pem)?;
                self.write_packet(&encrypted).await
            }
            _ => Err(unexpected("during caching_sha2_password", p)),
        }
    }

    /// A statement that returns no rows (`COM_QUERY`), up to its OK.
    pub async fn execute(&mut self, sql: &str) -> Result<(), Error> {
        self.query(sql).await?;
        let p = self.read_packet().await?;
        match p.first() {
            Some(0x00) => self.take_ok(&p),
            Some(0xff) => Err(server_error(&p, self.framing.capabilities)),
            _ => Err(unexpected("instead of OK (a result set?)", &p)),
        }
    }

    /// Whether the server reports an open transaction (autocommit off): a write is not there
    /// for anyone else until it is committed.
    pub fn in_transaction(&self) -> bool {
        self.framing
            .status
            .contains(StatusFlags::SERVER_STATUS_IN_TRANS)
    }

    /// A query's only row as `T` (`None` when it returned no row); a second row is
    /// [`Error::ManyRows`].
    pub async fn only_row<T: FromRow>(&mut self, sql: &str) -> Result<Option<T>, Error> {
        self.query(sql).await?;
        let p = self.read_packet().await?;
        let count = match p.first() {
            Some(0xff) => return Err(server_error(&p, self.framing.capabilities)),
            Some(0x00) | None => return Err(unexpected("instead of a result set", &p)),
            _ => ParseBuf(&p)
                .checked_eat_lenenc_int()
                .ok_or_else(|| unexpected("as the column count", &p))?,
        };
        if count == 0 || count > 64 {
            return Err(Error::Protocol(format!("a result set of {count} columns")));
        }
        let mut columns = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let p = self.read_packet().await?;
            columns.push(
                ParseBuf(&p)
                    .parse::<Column>(())
                    .map_err(malformed("column definition"))?,
            );
        }
        let columns: Arc<[Column]> = columns.into();
        // The EOF after the column definitions (no CLIENT_DEPRECATE_EOF is asked for).
        let p = self.read_packet().await?;
        if p.first() != Some(&0xfe) {
            return Err(unexpected("after the column definitions", &p));
        }
        let mut first = None;
        loop {
            let p = self.read_packet().await?;
            match p.first() {
                Some(0xfe) if p.len() < 9 => return Ok(first),
                // No row of a 64 KiB packet starts with 0xfe: an OK ending the rows, which
                // only CLIENT_DEPRECATE_EOF (not asked for) allows.
                Some(0xfe) => return Err(unexpected("in place of the EOF after the rows", &p)),
                Some(0xff) => return Err(server_error(&p, self.framing.capabilities)),
                _ if first.is_some() => return Err(Error::ManyRows),
                _ => first = Some(text_row(&p, &columns)?),
            }
        }
    }

    /// Say goodbye (`COM_QUIT`) and close the stream (a TLS close_notify first).
    pub async fn quit(mut self) {
        self.framing.codec.reset_seq_id();
        if self.write_packet(&[COM_QUIT]).await.is_ok() {
            let _ = self.stream.shutdown().await;
        }
    }

    async fn query(&mut self, sql: &str) -> Result<(), Error> {
        self.framing.codec.reset_seq_id();
        let mut payload = Vec::with_capacity(1 + sql.len());
        payload.push(COM_QUERY);
        payload.extend_from_slice(sql.as_bytes());
        self.write_packet(&payload).await
    }

    fn take_ok(&mut self, p: &[u8]) -> Result<(), Error> {
        let ok = ParseBuf(p)
            .parse::<OkPacketDeserializer<CommonOkPacket>>(self.framing.capabilities)
            .map_err(malformed("OK packet"))?
            .into_inner();
        self.framing.status = ok.status_flags();
        Ok(())
    }

    async fn read_packet(&mut self) -> Result<Vec<u8>, Error> {
        let mut packet = Vec::new();
        let f = &mut self.framing;
        loop {
            if f.codec
                .decode(&mut f.input, &mut packet)
                .map_err(codec_error)?
            {
                return Ok(packet);
            }
            f.input.reserve(4096);
            if self.stream.read_buf(&mut f.input).await? == 0 {
                return Err(Error::Closed);
            }
        }
    }

    async fn write_packet(&mut self, payload: &[u8]) -> Result<(), Error> {
        let mut out = BytesMut::with_capacity(payload.len() + 4);
        self.framing
            .codec
            .encode(&mut &*payload, &mut out)
            .map_err(codec_error)?;
        self.stream.write_all(&out).await?;
        Ok(self.stream.flush().await?)
    }

    async fn write_struct(&mut self, s: &impl MySerialize) -> Result<(), Error> {
        let mut payload = Vec::new();
        s.serialize(&mut payload);
        self.write_packet(&payload).await
    }
}

/// `text` as an SQL string literal that reads the same whether or not the session takes a
/// backslash as an escape: the login's OK does not tell (`init_connect` may set
/// `NO_BACKSLASH_ESCAPES` after it). Plain text is quoted as it is, any other in hex.
pub fn literal(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || " .:_-~".contains(c))
    {
        return format!("'{text}'");
    }
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    format!("_utf8mb4 X'{hex}'")
}

/// The plugins readyprobe speaks; any other is [`Error::Plugin`] (`gen_data` of some others
/// panics without optional `mysql_common` features, so it is never called for them).
fn supported(plugin: AuthPlugin<'_>) -> Result<AuthPlugin<'static>, Error> {
    match plugin {
        AuthPlugin::MysqlNativePassword => Ok(AuthPlugin::MysqlNativePassword),
        AuthPlugin::CachingSha2Password => Ok(AuthPlugin::CachingSha2Password),
        other => Err(Error::Plugin(
            String::from_utf8_lossy(other.as_bytes()).into_owned(),
        )),
    }
}

/// The password scrambled for `plugin` (one of [`supported`]); `None` for an empty password.
fn scramble(plugin: &AuthPlugin<'_>, password: &str, nonce: &[u8]) -> Option<Vec<u8>> {
    match plugin {
        AuthPlugin::MysqlNativePassword | AuthPlugin::CachingSha2Password => {
            plugin.gen_data(Some(password), nonce).map(|d| d.to_vec())
        }
        _ => None,
    }
}

/// `password` (NUL-terminated) XOR the nonce, RSA-OAEP (SHA-1) encrypted with the server's
/// public key (PEM), as `caching_sha2_password` wants it without TLS.
fn rsa_encrypt(password: &[u8], nonce: &[u8], pem: &[u8]) -> Result<Vec<u8>, Error> {
    use aws_lc_rs::rsa::{OAEP_SHA1_MGF1SHA1, OaepPublicEncryptingKey, PublicEncryptingKey};
    use rustls::pki_types::SubjectPublicKeyInfoDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |why: String| Error::Protocol(format!("the server's RSA key: {why}"));
    if nonce.is_empty() {
        return Err(bad("no nonce to mix the password with".into()));
    }
    let der = SubjectPublicKeyInfoDer::from_pem_slice(pem).map_err(|e| bad(e.to_string()))?;
    let key = PublicEncryptingKey::from_der(der.as_ref()).map_err(|e| bad(e.to_string()))?;
    let key = OaepPublicEncryptingKey::new(key).map_err(|e| bad(e.to_string()))?;
    let mixed: Vec<u8> = password
        .iter()
        .zip(nonce.iter().cycle())
        .map(|(p, n)| p ^ n)
        .collect();
    let mut out = vec![0u8; key.ciphertext_size()];
    let n = key
        .encrypt(&OAEP_SHA1_MGF1SHA1, &mixed, &mut out, None)
        .map_err(|_| bad("the password is too long for it".into()))?
        .len();
    out.truncate(n);
    Ok(out)
}

/// A text-protocol row of exactly one value per column, as `T`.
fn text_row<T: FromRow>(p: &[u8], columns: &Arc<[Column]>) -> Result<T, Error> {
    let mut buf = ParseBuf(p);
    let row = buf
        .parse::<RowDeserializer<(), Text>>(columns.clone())
        .map_err(malformed("row"))?
        .into_inner();
    if !buf.0.is_empty() {
        return Err(Error::Protocol(format!(
            "a row with more than its {} values",
            columns.len()
        )));
    }
    from_row_opt::<T>(row).map_err(|e| Error::Protocol(format!("unexpected row: {e}")))
}

/// The server's ERR packet as an [`Error`].
fn server_error(p: &[u8], capabilities: CapabilityFlags) -> Error {
    match ParseBuf(p).parse::<ErrPacket>(capabilities) {
        Ok(ErrPacket::Error(e)) => Error::Server {
            code: e.error_code(),
            state: e.sql_state_ref().map(|s| s.as_str().into_owned()),
            // The server's words go into logs and evidence: no line breaks or escapes.
            message: e.message_str().replace(char::is_control, "\u{fffd}"),
        },
        Ok(ErrPacket::Progress(_)) => Error::Protocol("an unasked-for progress report".into()),
        Err(e) => Error::Protocol(format!("malformed ERR packet: {e}")),
    }
}

fn unexpected(when: &str, p: &[u8]) -> Error {
    match p.first() {
        Some(b) => Error::Protocol(format!(
            "unexpected packet (0x{b:02x}, {} bytes) {when}",
            p.len()
        )),
        None => Error::Protocol(format!("unexpected empty packet {when}")),
    }
}

#[cfg(test)]
mod tests {
    //! The server side is a fake on an in-memory pipe: MariaDB has no `caching_sha2_password`
    //! and cannot send an oversized greeting; the real exchanges are in tests/it. Each fake owns
    //! its end and drops it when done, so a client waiting for more fails instead of hanging.
    use super::*;
    use tokio::io::DuplexStream;

    const NONCE: &[u8; 20] = b"0123456789abcdefghij";

    fn pair() -> (Session<DuplexStream>, Session<DuplexStream>) {
        let (a, b) = tokio::io::duplex(1 << 20);
        (Session::new(a), Session::new(b))
    }

    fn greeting_packet(plugin: &str) -> Vec<u8> {
        let caps = client_capabilities() | CapabilityFlags::CLIENT_CONNECT_WITH_DB;
        // The second part of the nonce ends in a NUL, as servers send it.
        let scramble_2 = [&NONCE[8..], &[0][..]].concat();
        let mut p = Vec::new();
        HandshakePacket::new(
            10,
            &b"8.4.0"[..],
            7,
            NONCE[..8].try_into().unwrap(),
            Some(&scramble_2[..]),
            caps,
            UTF8MB4_GENERAL_CI,
            StatusFlags::SERVER_STATUS_AUTOCOMMIT,
            Some(plugin.as_bytes()),
        )
        .serialize(&mut p);
        p
    }

    const OK: &[u8] = &[0, 0, 0, 2, 0, 0, 0];

    fn login(tls: bool) -> Login<'static> {
        Login {
            user: "readyprobe",
            password: "s3cret-pw",
            database: "readyprobe",
            tls,
        }
    }

    /// The client's side: greeting, then authentication.
    async fn client(mut c: Session<DuplexStream>, tls: bool) -> Result<(), Error> {
        let g = c.greeting().await?;
        c.authenticate(&g, &login(tls)).await
    }

    #[tokio::test]
    async fn caching_sha2_fast_path_and_full_auth_over_tls() {
        for tls in [false, true] {
            let (c, mut s) = pair();
            let server = async move {
                s.write_packet(&greeting_packet("caching_sha2_password"))
                    .await
                    .unwrap();
                let response = s.read_packet().await.unwrap();
                let r = ParseBuf(&response).parse::<HandshakeResponse>(()).unwrap();
                assert_eq!(r.user(), b"readyprobe");
                assert_eq!(
                    r.scramble_buf(),
                    &AuthPlugin::CachingSha2Password
                        .gen_data(Some("s3cret-pw"), NONCE)
                        .unwrap()[..]
                );
                if tls {
                    s.write_packet(&[0x01, 0x04]).await.unwrap();
                    assert_eq!(s.read_packet().await.unwrap(), b"s3cret-pw\0");
                } else {
                    s.write_packet(&[0x01, 0x03]).await.unwrap();
                }
                s.write_packet(OK).await.unwrap();
            };
            let (got, ()) = tokio::join!(client(c, tls), server);
            got.unwrap();
        }
    }

    #[tokio::test]
    async fn caching_sha2_full_auth_without_tls_encrypts_with_the_servers_key() {
        use aws_lc_rs::encoding::AsDer;
        use aws_lc_rs::rsa::PrivateDecryptingKey;
        use aws_lc_rs::rsa::{KeySize, OAEP_SHA1_MGF1SHA1, OaepPrivateDecryptingKey};
        use base64::Engine;
        let private = PrivateDecryptingKey::generate(KeySize::Rsa2048).unwrap();
        let der = private.public_key().as_der().unwrap();
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der.as_ref())
        );
        let private = OaepPrivateDecryptingKey::new(private).unwrap();
        let (c, mut s) = pair();
        let server = async move {
            s.write_packet(&greeting_packet("caching_sha2_password"))
                .await
                .unwrap();
            s.read_packet().await.unwrap();
            s.write_packet(&[0x01, 0x04]).await.unwrap();
            assert_eq!(s.read_packet().await.unwrap(), [0x02], "asks for the key");
            let mut key = vec![0x01];
            key.extend_from_slice(pem.as_bytes());
            s.write_packet(&key).await.unwrap();
            let sealed = s.read_packet().await.unwrap();
            let mut out = vec![0u8; private.min_output_size()];
            let plain = private
                .decrypt(&OAEP_SHA1_MGF1SHA1, &sealed, &mut out, None)
                .unwrap();
            let password: Vec<u8> = plain
                .iter()
                .zip(NONCE.iter().cycle())
                .map(|(p, n)| p ^ n)
                .collect();
            assert_eq!(password, b"s3cret-pw\0");
            s.write_packet(OK).await.unwrap();
        };
        let (got, ()) = tokio::join!(client(c, false), server);
        got.unwrap();
    }

    #[tokio::test]
    async fn a_bad_rsa_key_is_a_protocol_error_not_a_panic() {
        let (c, mut s) = pair();
        let server = async move {
            s.write_packet(&greeting_packet("caching_sha2_password"))
                .await
                .unwrap();
            s.read_packet().await.unwrap();
            s.write_packet(&[0x01, 0x04]).await.unwrap();
            s.read_packet().await.unwrap();
            s.write_packet(b"\x01-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
                .await
                .unwrap();
        };
        let (got, ()) = tokio::join!(client(c, false), server);
        assert!(
            matches!(&got, Err(Error::Protocol(m)) if m.contains("RSA key")),
            "{got:?}"
        );
    }

    #[tokio::test]
    async fn an_auth_switch_to_native_password_is_followed_and_to_another_plugin_refused() {
        for (plugin, want) in [
            ("mysql_native_password", None),
            ("client_ed25519", Some("client_ed25519")),
            ("dialog", Some("dialog")),
        ] {
            let (c, mut s) = pair();
            let server = async move {
                s.write_packet(&greeting_packet("mysql_native_password"))
                    .await
                    .unwrap();
                s.read_packet().await.unwrap();
                let mut switch = vec![0xfe];
                switch.extend_from_slice(plugin.as_bytes());
                switch.push(0);
                switch.extend_from_slice(b"ABCDEFGHIJKLMNOPQRST\0");
                s.write_packet(&switch).await.unwrap();
                if want.is_none() {
                    let expected = AuthPlugin::MysqlNativePassword
                        .gen_data(Some("s3cret-pw"), b"ABCDEFGHIJKLMNOPQRST")
                        .unwrap();
                    assert_eq!(s.read_packet().await.unwrap(), &expected[..]);
                    s.write_packet(OK).await.unwrap();
                }
            };
            let (got, ()) = tokio::join!(client(c, true), server);
            match want {
                None => got.unwrap(),
                Some(name) => {
                    let e = got.unwrap_err();
                    assert!(matches!(&e, Error::Plugin(p) if p == name), "{e:?}");
                    assert!(e.to_string().contains(name), "{e}");
                }
            }
        }
    }

    /// RDS IAM's `mysql_clear_password`: the password as it is inside TLS; without TLS the
    /// server gets nothing and the attempt fails.
    #[tokio::test]
    async fn mysql_clear_password_sends_the_password_only_over_tls() {
        for tls in [true, false] {
            let (c, mut s) = pair();
            let server = async move {
                s.write_packet(&greeting_packet("mysql_native_password"))
                    .await
                    .unwrap();
                let response = s.read_packet().await.unwrap();
                let r = ParseBuf(&response).parse::<HandshakeResponse>(()).unwrap();
                assert!(!r.scramble_buf().windows(9).any(|w| w == b"s3cret-pw"));
                s.write_packet(b"\xfemysql_clear_password\0").await.unwrap();
                match s.read_packet().await {
                    Ok(p) => {
                        assert!(tls, "a password without TLS: {p:?}");
                        assert_eq!(p, b"s3cret-pw\0");
                        s.write_packet(OK).await.unwrap();
                    }
                    Err(e) => assert!(!tls, "{e}"),
                }
            };
            let (got, ()) = tokio::join!(client(c, tls), server);
            if tls {
                got.unwrap();
            } else {
                let e = got.unwrap_err();
                assert!(e.to_string().contains("without TLS"), "{e}");
            }
        }
    }

    #[tokio::test]
    async fn an_oversized_packet_is_refused_before_it_is_read() {
        let (mut c, s) = pair();
        let (mut raw, _) = s.into_parts();
        // A header announcing 1 MiB - 1 and no body: the client must not wait for it.
        raw.write_all(&[0xff, 0xff, 0x0f, 0]).await.unwrap();
        let e = c.greeting().await.unwrap_err();
        assert!(
            matches!(&e, Error::Protocol(m) if m.contains("over 65536")),
            "{e:?}"
        );
    }

    /// `mysql_common` takes the second nonce part's length as `byte as i8 - 8`, which overflows
    /// (a panic with overflow checks) for 0x80..=0x87.
    #[tokio::test]
    async fn an_absurd_nonce_length_in_the_greeting_is_a_protocol_error() {
        for len in [0x80, 0x85, 0xff] {
            let (mut c, mut s) = pair();
            let mut g = greeting_packet("mysql_native_password");
            let at = 1 + g[1..].iter().position(|&b| b == 0).unwrap() + 21;
            g[at] = len;
            s.write_packet(&g).await.unwrap();
            let e = c.greeting().await.unwrap_err();
            assert!(
                matches!(&e, Error::Protocol(m) if m.contains(&format!("length {len}"))),
                "{len:#x}: {e:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_err_packet_instead_of_the_greeting_is_the_servers_error() {
        let (mut c, mut s) = pair();
        let mut err = vec![0xff];
        err.extend_from_slice(&1040u16.to_le_bytes());
        err.extend_from_slice(b"Too many connections");
        s.write_packet(&err).await.unwrap();
        let e = c.greeting().await.unwrap_err();
        assert!(
            matches!(&e, Error::Server { code: 1040, message, .. } if message == "Too many connections"),
            "{e:?}"
        );
    }

    #[test]
    fn literals_read_the_same_in_both_escaping_modes() {
        assert_eq!(literal("primary"), "'primary'");
        assert_eq!(literal("2026-12-01 10:00:00.5"), "'2026-12-01 10:00:00.5'");
        assert_eq!(literal("~stable_name"), "'~stable_name'");
        assert_eq!(literal("a'\\\""), "_utf8mb4 X'61275c22'");
    }
}
