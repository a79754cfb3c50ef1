//! The `tls` step: a rustls handshake over an established stream, with MySQL ssl-mode semantics,
//! and the one place TLS errors are classified.
//!
//! The server certificate is always checked against the endpoint **name**, even though the
//! connection goes to a resolved IP address.

use crate::config::SslMode;
use crate::failure::FailureClass;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use super::StepError;

/// What the handshake established.
#[derive(Debug, Clone, Serialize, Default)]
pub struct TlsInfo {
    /// Negotiated protocol version, e.g. `TLSv1_3`.
    pub version: String,
    /// Negotiated cipher suite.
    pub cipher_suite: String,
    /// Number of certificates the server presented.
    pub peer_certificates: usize,
}

/// Why a TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS setup: {0}")]
pub struct TlsSetupError(pub String);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Build the client configuration for an ssl-mode. `None` for [`SslMode::Disabled`].
///
/// # Errors
/// [`TlsSetupError`] when the CA bundle cannot be read or holds no certificate.
pub fn client_config(
    mode: SslMode,
    ca: Option<&Path>,
) -> Result<Option<Arc<ClientConfig>>, TlsSetupError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError(e.to_string()))?;
    let cfg = match mode {
        SslMode::Disabled => return Ok(None),
        SslMode::Required => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
            .with_no_client_auth(),
        SslMode::VerifyCa | SslMode::VerifyIdentity => {
            let path = ca.ok_or_else(|| TlsSetupError("ssl_ca is required".into()))?;
            let roots = Arc::new(load_roots(path)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsSetupError(e.to_string()))?;
            if mode == SslMode::VerifyCa {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(IgnoreName(webpki)))
                    .with_no_client_auth()
            } else {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            }
        }
    };
    Ok(Some(Arc::new(cfg)))
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
        .map_err(|e| {
            let class = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(r) => classify_tls(r),
                None => super::connect::classify_io(&e),
            };
            StepError {
                class,
                message: format!("TLS handshake with {endpoint}: {e}"),
            }
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
    };
    Ok((tls, info))
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

/// ssl-mode `verify_ca`: the chain must verify; a name mismatch is accepted.
#[derive(Debug)]
struct IgnoreName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for IgnoreName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
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
