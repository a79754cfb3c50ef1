//! `[probe.tls]`: the TLS settings every probe kind shares, with MySQL `--ssl-mode` semantics.
//!
//! Only the shape is checked here (a CA for the verifying modes, a certificate with its key);
//! whether the files exist and parse is the probe's start-up business (`probe::prepare`).

use super::issues::Issues;
use super::raw::RawTls;
use super::values::{KindName, MinVersion, SslMode};
use std::path::{Path, PathBuf};

/// A client certificate and key (PEM files) for servers that require mTLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentityFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The TLS settings shared by the probe kinds.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// ssl-mode. Default `verify_identity`; `disabled` for the `tcp` kind.
    pub ssl_mode: SslMode,
    /// CA bundle (required for `verify_ca`/`verify_identity`).
    pub ssl_ca: Option<PathBuf>,
    /// Client certificate and key, for servers that require one.
    pub client_identity: Option<ClientIdentityFiles>,
    /// Minimum TLS version. Default 1.2.
    pub tls_min_version: MinVersion,
}

const PREFIX: &str = "probe.tls";

/// A path from the config: must not be empty; relative paths resolve against `base` (the
/// config file's directory).
fn path(key: &str, p: PathBuf, base: &Path, issues: &mut Issues<'_>) -> PathBuf {
    if p.as_os_str().is_empty() {
        issues.error(
            key,
            "must name a file (absolute, or relative to the config file)",
        );
    }
    if p.is_relative() { base.join(p) } else { p }
}

/// Validate `[probe.tls]` for a probe `kind`.
pub(super) fn section(
    raw: RawTls,
    kind: KindName,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<TlsSettings> {
    let default_mode = match kind {
        KindName::Tcp => SslMode::Disabled,
        _ => SslMode::VerifyIdentity,
    };
    let ssl_mode = raw.ssl_mode.unwrap_or(default_mode);
    let ssl_ca = raw
        .ssl_ca
        .map(|p| path(&format!("{PREFIX}.ssl_ca"), p, base, issues));
    if matches!(ssl_mode, SslMode::VerifyCa | SslMode::VerifyIdentity) && ssl_ca.is_none() {
        issues.error(
            format!("{PREFIX}.ssl_ca"),
            format!(
                "ssl_mode {ssl_mode} needs ssl_ca, the PEM bundle of the CA that signs the server certificates"
            ),
        );
    }
    if ssl_mode == SslMode::Disabled {
        issues.warn(format!(
            "{PREFIX}.ssl_mode is \"disabled\": the probe does not exercise TLS, which the application may depend on"
        ));
    }
    let client_identity = match (raw.ssl_cert, raw.ssl_key) {
        (None, None) => None,
        (Some(c), Some(k)) => {
            if ssl_mode == SslMode::Disabled {
                issues.error(
                    format!("{PREFIX}.ssl_cert"),
                    "a client certificate needs TLS; ssl_mode is \"disabled\"",
                );
            }
            Some(ClientIdentityFiles {
                cert: path(&format!("{PREFIX}.ssl_cert"), c, base, issues),
                key: path(&format!("{PREFIX}.ssl_key"), k, base, issues),
            })
        }
        (Some(_), None) => {
            issues.error(
                format!("{PREFIX}.ssl_key"),
                "ssl_cert is set: give its key too",
            );
            None
        }
        (None, Some(_)) => {
            issues.error(
                format!("{PREFIX}.ssl_cert"),
                "ssl_key is set: give its certificate too",
            );
            None
        }
    };
    Some(TlsSettings {
        ssl_mode,
        ssl_ca,
        client_identity,
        tls_min_version: raw.tls_min_version.unwrap_or(MinVersion::Tls12),
    })
}
