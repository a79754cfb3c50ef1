//! The `tls` step: a rustls handshake over an established stream, with MySQL ssl-mode semantics,
//! and the one place TLS errors are classified.
//!
//! The server certificate is always checked against the endpoint **name**, even though the
//! connection goes to a resolved IP address.

use crate::config::{ClientIdentityFiles, MinVersion, SslMode};
use crate::failure::{FailureClass, Step};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

pub use super::attempt::TlsInfo;
use super::ctx::{StepCtx, StepError, StepFailure};

/// Why a TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS setup: {0}")]
pub struct TlsSetupError(pub String);

/// The server leaf certificate as presented in an attempt, whether or not it verified.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeenCertificate {
    /// `notAfter`, ms since the epoch.
    pub not_after: Option<i64>,
    /// Subject distinguished name, e.g. `CN=db-a.example, O=Example`.
    pub subject: Option<String>,
}

tokio::task_local! {
    /// The last server leaf certificate a verifier saw in this attempt.
    static SEEN: std::cell::RefCell<Option<SeenCertificate>>;
}

/// Run `f` (an attempt) and return what it returned plus the last server leaf certificate
/// presented during it, verified or not.
pub async fn with_seen_certificate<F: std::future::Future>(
    f: F,
) -> (F::Output, Option<SeenCertificate>) {
    SEEN.scope(std::cell::RefCell::new(None), async move {
        let out = f.await;
        (out, SEEN.with(|c| c.borrow_mut().take()))
    })
    .await
}

/// Records the leaf's `notAfter`, then lets the inner verifier decide; with `ignore_name`
/// (ssl-mode `verify_ca`) the chain must still verify but a name mismatch is accepted.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ServerCertVerifier>,
    ignore_name: bool,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen = seen_certificate(end_entity.as_ref());
        let _ = SEEN.try_with(|c| c.replace(Some(seen)));
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.ignore_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Seed the crypto library's random generator (its first use gathers entropy for tens of
/// milliseconds) and start each key exchange once, so that the first attempt's `tls` step
/// measures the handshake, not the library's start-up. Once per process, from [`client_config`],
/// that is when the probes are prepared.
fn warm_up(provider: &CryptoProvider) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = provider.secure_random.fill(&mut [0u8; 32]);
        for group in &provider.kx_groups {
            let _ = group.start();
        }
    });
}

/// Build the client configuration for an ssl-mode. `None` for [`SslMode::Disabled`].
///
/// # Errors
/// [`TlsSetupError`] when the CA bundle or the client identity cannot be read.
pub fn client_config(
    mode: SslMode,
    ca: Option<&Path>,
    min_version: MinVersion,
    identity: Option<&ClientIdentityFiles>,
) -> Result<Option<Arc<ClientConfig>>, TlsSetupError> {
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let kind_provider = provider();
    if mode != SslMode::Disabled {
        warm_up(&kind_provider);
    }
    let builder = ClientConfig::builder_with_provider(kind_provider)
        .with_protocol_versions(versions)
        .map_err(|e| TlsSetupError(e.to_string()))?;
    let builder = match mode {
        SslMode::Disabled => return Ok(None),
        SslMode::Required => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Recording {
                inner: Arc::new(AcceptAny(provider())),
                ignore_name: false,
            })),
        SslMode::VerifyCa | SslMode::VerifyIdentity => {
            let path = ca.ok_or_else(|| TlsSetupError("ssl_ca is required".into()))?;
            let roots = Arc::new(load_roots(path)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsSetupError(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Recording {
                    inner: webpki,
                    ignore_name: mode == SslMode::VerifyCa,
                }))
        }
    };
    let cfg = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&id.cert)
                .map_err(|e| {
                    TlsSetupError(format!(
                        "cannot read client certificate {}: {e}",
                        id.cert.display()
                    ))
                })?
                .collect::<Result<_, _>>()
                .map_err(|e| TlsSetupError(format!("bad PEM in {}: {e}", id.cert.display())))?;
            if certs.is_empty() {
                return Err(TlsSetupError(format!(
                    "{} holds no certificate",
                    id.cert.display()
                )));
            }
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&id.key).map_err(|e| {
                TlsSetupError(format!("cannot read client key {}: {e}", id.key.display()))
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| TlsSetupError(format!("client identity: {e}")))?
        }
    };
    Ok(Some(Arc::new(cfg)))
}

/// [`client_config`] for a kind's shared TLS settings.
///
/// # Errors
/// As [`client_config`].
pub fn client_config_for(
    s: &crate::config::TlsSettings,
) -> Result<Option<Arc<ClientConfig>>, TlsSetupError> {
    client_config(
        s.ssl_mode,
        s.ssl_ca.as_deref(),
        s.tls_min_version,
        s.client_identity.as_ref(),
    )
}

/// `notAfter` of a DER certificate, ms since the epoch (`None` when it cannot be parsed).
pub fn not_after_ms(der: &[u8]) -> Option<i64> {
    seen_certificate(der).not_after
}

/// What a DER certificate says about the server (nothing when it cannot be parsed).
fn seen_certificate(der: &[u8]) -> SeenCertificate {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => SeenCertificate {
            not_after: Some(cert.validity().not_after.timestamp() * 1000),
            subject: Some(cert.subject().to_string()),
        },
        Err(_) => SeenCertificate::default(),
    }
}

/// Read a PEM CA bundle.
///
/// # Errors
/// [`TlsSetupError`] naming the file when it is unreadable or holds no usable certificate.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsSetupError(format!("cannot read CA bundle {}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsSetupError(format!("bad PEM in {}: {e}", path.display())))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsSetupError(format!(
            "{} holds no usable CA certificate",
            path.display()
        )));
    }
    Ok(roots)
}

/// The `tls` step over `stream` (a TCP connection, or one a kind's protocol prelude prepared):
/// the handshake checked against the endpoint name; the session facts go into the attempt.
///
/// # Errors
/// The handshake's failure, classified by [`classify_tls`], or the step's timeout.
pub async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &mut StepCtx<'_>,
    config: Arc<ClientConfig>,
    stream: S,
) -> Result<tokio_rustls::client::TlsStream<S>, StepFailure> {
    let endpoint = ctx.endpoint();
    let (tls, info) = ctx
        .steps
        .run(Step::Tls, handshake(config, endpoint, stream))
        .await?;
    ctx.learned.tls = Some(info);
    Ok(tls)
}

/// Perform the handshake, checking the certificate against `endpoint` (a DNS name).
///
/// # Errors
/// A [`StepError`] classified by [`classify_tls`].
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    config: Arc<ClientConfig>,
    endpoint: &str,
    stream: S,
) -> Result<(tokio_rustls::client::TlsStream<S>, TlsInfo), StepError> {
    let name = ServerName::try_from(endpoint.to_string()).map_err(|e| StepError {
        class: FailureClass::TlsHandshake,
        message: format!("{endpoint:?} is not a valid TLS server name: {e}"),
    })?;
    let tls = TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| StepError {
            class: classify_stream_io(&e),
            message: format!("TLS handshake with {endpoint}: {e}"),
        })?;
    let (_, conn) = tls.get_ref();
    let info = TlsInfo {
        version: conn
            .protocol_version()
            .map(|v| format!("{v:?}"))
            .unwrap_or_default(),
        cipher_suite: conn
            .negotiated_cipher_suite()
            .map(|c| format!("{:?}", c.suite()))
            .unwrap_or_default(),
        peer_certificates: conn.peer_certificates().map(|c| c.len()).unwrap_or(0),
        leaf_not_after: conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|leaf| not_after_ms(leaf.as_ref())),
    };
    Ok((tls, info))
}

/// Classify an I/O error of a stream that may be a TLS session: rustls's own error by
/// [`classify_tls`], anything else as the connection's ([`super::connect::classify_io`]).
pub fn classify_stream_io(e: &std::io::Error) -> FailureClass {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(r) => classify_tls(r),
        None => super::connect::classify_io(e),
    }
}

/// Map a rustls error to a failure class.
pub fn classify_tls(e: &rustls::Error) -> FailureClass {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => match c {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                FailureClass::TlsNameMismatch
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                FailureClass::TlsExpired
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                FailureClass::TlsNotYetValid
            }
            _ => FailureClass::TlsUntrusted,
        },
        E::PeerIncompatible(p) => {
            use rustls::PeerIncompatible as P;
            match p {
                P::ServerDoesNotSupportTls12Or13
                | P::ServerTlsVersionIsDisabledByOurConfig
                | P::Tls12NotOffered
                | P::Tls12NotOfferedOrEnabled
                | P::SupportedVersionsExtensionRequired => FailureClass::TlsProtocolVersion,
                _ => FailureClass::TlsHandshake,
            }
        }
        E::AlertReceived(rustls::AlertDescription::ProtocolVersion) => {
            FailureClass::TlsProtocolVersion
        }
        _ => FailureClass::TlsHandshake,
    }
}

/// ssl-mode `required`: encrypt, accept any certificate (handshake signatures still checked).
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        use rustls::Error as E;
        let cases = [
            (
                E::InvalidCertificate(CertificateError::UnknownIssuer),
                FailureClass::TlsUntrusted,
            ),
            (
                E::InvalidCertificate(CertificateError::BadSignature),
                FailureClass::TlsUntrusted,
            ),
            (
                E::InvalidCertificate(CertificateError::NotValidForName),
                FailureClass::TlsNameMismatch,
            ),
            (
                E::InvalidCertificate(CertificateError::Expired),
                FailureClass::TlsExpired,
            ),
            (
                E::InvalidCertificate(CertificateError::NotValidYet),
                FailureClass::TlsNotYetValid,
            ),
            (
                E::PeerIncompatible(rustls::PeerIncompatible::ServerDoesNotSupportTls12Or13),
                FailureClass::TlsProtocolVersion,
            ),
            (
                E::AlertReceived(rustls::AlertDescription::ProtocolVersion),
                FailureClass::TlsProtocolVersion,
            ),
            (
                E::AlertReceived(rustls::AlertDescription::HandshakeFailure),
                FailureClass::TlsHandshake,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(classify_tls(&e), want, "{e}");
        }
    }
}
