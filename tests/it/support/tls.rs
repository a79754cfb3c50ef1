//! Test certificate authority (rcgen): a throwaway CA that issues server certificates as PEM files.

use std::{
    fmt,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// One day, the slack put around "now" for certificates that should be valid.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A throwaway certificate authority. Its certificate is written to [`TestCa::ca_pem_path`].
///
/// Keys are ECDSA P-256 (rcgen's default), private keys are PKCS#8 PEM ("PRIVATE KEY"), which
/// MariaDB (OpenSSL) and rustls both accept.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    ca_pem_path: PathBuf,
    _dir: TempDir,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa")
            .field("ca_pem_path", &self.ca_pem_path)
            .finish()
    }
}

impl TestCa {
    /// Creates a CA named `readyprobe test CA`, valid from yesterday to ten years from now.
    pub fn new() -> TestCa {
        Self::named("readyprobe test CA")
    }

    /// Creates a CA with the given common name (two CAs with different names make a
    /// "wrong CA" test case).
    pub fn named(common_name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("empty SAN list");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "readyprobe tests");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        let now = SystemTime::now();
        params.not_before = (now - DAY).into();
        params.not_after = (now + 3650 * DAY).into();
        let key = KeyPair::generate().expect("generate CA key");
        let cert = params.self_signed(&key).expect("self-sign CA certificate");
        let ca_pem = cert.pem();

        let dir = tempfile::Builder::new()
            .prefix("readyprobe-ca-")
            .tempdir()
            .expect("create CA temp dir");
        let ca_pem_path = dir.path().join("ca.pem");
        std::fs::write(&ca_pem_path, &ca_pem).expect("write ca.pem");
        TestCa {
            issuer: Issuer::new(params, key),
            ca_pem,
            ca_pem_path,
            _dir: dir,
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Path of the CA certificate PEM file (lives as long as this `TestCa`).
    pub fn ca_pem_path(&self) -> &Path {
        &self.ca_pem_path
    }

    /// Issues a server certificate valid from yesterday until one year from now.
    ///
    /// The subject alternative names are exactly `dns_names` plus `ips`: nothing is added, so pass
    /// `127.0.0.1` in `ips` when a client verifies the server by that IP address (a client that
    /// connects by IP but verifies a DNS name only needs the DNS name).
    pub fn server_cert(&self, dns_names: &[&str], ips: &[IpAddr]) -> ServerCert {
        let now = SystemTime::now();
        self.server_cert_with_validity(dns_names, ips, now - DAY, now + 365 * DAY)
    }

    /// Issues a server certificate that expired an hour ago (valid from two days ago).
    pub fn expired_server_cert(&self, dns_names: &[&str], ips: &[IpAddr]) -> ServerCert {
        let now = SystemTime::now();
        self.server_cert_with_validity(
            dns_names,
            ips,
            now - 2 * DAY,
            now - Duration::from_secs(3600),
        )
    }

    /// Issues a client certificate (extended key usage clientAuth) for `common_name`, valid from
    /// yesterday for a year, for mTLS tests. The returned value's cert/key paths are the client's.
    pub fn client_cert(&self, common_name: &str) -> ServerCert {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("empty SAN list");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = SystemTime::now();
        params.not_before = (now - DAY).into();
        params.not_after = (now + 365 * DAY).into();
        self.issue(params, "readyprobe-client-")
    }

    /// Issues a server certificate with an explicit validity window.
    pub fn server_cert_with_validity(
        &self,
        dns_names: &[&str],
        ips: &[IpAddr],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> ServerCert {
        let sans: Vec<String> = dns_names
            .iter()
            .map(|n| n.to_string())
            .chain(ips.iter().map(|ip| ip.to_string()))
            .collect();
        let mut params = CertificateParams::new(sans).expect("valid subject alternative names");
        let cn = dns_names
            .first()
            .map(|n| n.to_string())
            .or_else(|| ips.first().map(|ip| ip.to_string()))
            .unwrap_or_else(|| "readyprobe test server".to_string());
        params.distinguished_name.push(DnType::CommonName, cn);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        self.issue(params, "readyprobe-cert-")
    }

    /// Sign `params` with a fresh key and write CA, certificate and key into a temp dir of their
    /// own (named with `prefix`).
    fn issue(&self, params: CertificateParams, prefix: &str) -> ServerCert {
        let key = KeyPair::generate().expect("generate key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign certificate");
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("create certificate temp dir");
        let write = |name: &str, contents: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {name}: {e}"));
            path
        };
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        ServerCert {
            ca_pem_path: write("ca.pem", &self.ca_pem),
            cert_pem_path: write("cert.pem", &cert_pem),
            key_pem_path: write("key.pem", &key_pem),
            ca_pem: self.ca_pem.clone(),
            cert_pem,
            key_pem,
            _dir: Arc::new(dir),
        }
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// A server certificate, its key and the issuing CA, each as PEM text and as a file.
///
/// The files live in a temp dir owned by this value (shared between clones), independent of the
/// `TestCa` that issued it, so a server can be restarted while the CA is long gone.
#[derive(Clone, Debug)]
pub struct ServerCert {
    ca_pem_path: PathBuf,
    cert_pem_path: PathBuf,
    key_pem_path: PathBuf,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    _dir: Arc<TempDir>,
}

impl ServerCert {
    /// A rustls server configuration serving this certificate (for in-test TLS servers).
    pub fn rustls_server_config(&self) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&self.cert_pem_path)
            .expect("read certificate")
            .collect::<Result<_, _>>()
            .expect("parse certificate");
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_file(&self.key_pem_path).expect("read key");
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server certificate");
        Arc::new(cfg)
    }

    /// The issuing CA certificate file (PEM).
    pub fn ca_pem_path(&self) -> &Path {
        &self.ca_pem_path
    }

    /// The server certificate file (PEM, leaf only).
    pub fn cert_pem_path(&self) -> &Path {
        &self.cert_pem_path
    }

    /// The server private key file (PKCS#8 PEM).
    pub fn key_pem_path(&self) -> &Path {
        &self.key_pem_path
    }

    /// The issuing CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}
