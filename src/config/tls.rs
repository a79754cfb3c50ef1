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
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    /// ssl-mode. Default `verify_identity`; `disabled` for the `tcp` kind.
    pub ssl_mode: SslMode,
    /// CA bundle (required for `verify_ca`/`verify_identity`).
    pub ssl_ca: Option<PathBuf>,
    /// Client certificate and key, for servers that require one.
    pub client_identity: Option<ClientIdentityFiles>,
    /// Minimum TLS version. Default 1.2.
    pub tls_min_version: MinVersion,
    /// `danger_send_secrets_unverified`: send the kind's secrets over a session that does not
    /// verify the server's chain and name (or no TLS). Default false.
    pub danger_send_secrets_unverified: bool,
}

impl TlsSettings {
    /// Whether every session verifies the server's certificate chain **and** its name
    /// (`verify_identity`): the only sessions a secret is sent over unless the danger key allows
    /// it. `verify_ca` does not count: any certificate from the same CA (another branch, another
    /// service) would receive the secret.
    pub fn verified(&self) -> bool {
        self.ssl_mode == SslMode::VerifyIdentity
    }
}

const DANGER_KEY: &str = "probe.tls.danger_send_secrets_unverified";

/// The rule for a kind that sends secrets (`secret_keys`, the config keys holding them): only
/// over a verified session, unless the danger key allows it (then a warning). The danger key
/// without an unverified session carrying a secret is a warning too: it does nothing.
pub(super) fn guard_secrets(tls: &TlsSettings, secret_keys: &[String], issues: &mut Issues<'_>) {
    let mode = tls.ssl_mode;
    let what = match mode {
        SslMode::Disabled => "does not use TLS",
        SslMode::Required => "does not verify the server's certificate",
        SslMode::VerifyCa => "does not check that the certificate is for the endpoint name",
        SslMode::VerifyIdentity => "",
    };
    match (tls.verified() || secret_keys.is_empty(), tls.danger_send_secrets_unverified) {
        (true, false) => {}
        (true, true) => issues.warn(format!(
            "{DANGER_KEY} has no effect: no secret is sent over an unverified session"
        )),
        (false, false) => issues.error(
            format!("{PREFIX}.ssl_mode"),
            format!(
                "ssl_mode \"{mode}\" {what}, so {} would go to whichever server answers: use ssl_mode = \"verify_identity\" with ssl_ca, or accept the risk with {DANGER_KEY} = true",
                secret_keys.join(", ")
            ),
        ),
        (false, true) => issues.warn(format!(
            "{DANGER_KEY} is true: ssl_mode \"{mode}\" {what}, and {} is sent anyway; a server that is not the branch can capture it (evidence records tls_verified: false)",
            secret_keys.join(", ")
        )),
    }
}

/// The rule for an RDS IAM token as a database password (`key`): it travels in clear text inside
/// the session, so only a `verify_identity` session carries it; the danger key does not lift
/// this (a captured token logs in for 15 minutes as the probe user from anywhere).
pub(super) fn guard_rds_iam(
    tls: &TlsSettings,
    key: &str,
    password: &super::secret::SecretRef,
    issues: &mut Issues<'_>,
) {
    if matches!(password, super::secret::SecretRef::RdsIam { .. }) && !tls.verified() {
        issues.error(
            key,
            format!(
                "an RDS IAM token is sent as a clear-text password: only over ssl_mode = \"verify_identity\" (with ssl_ca), which [probe.tls] does not set (ssl_mode \"{}\"); {DANGER_KEY} does not allow it",
                tls.ssl_mode
            ),
        );
    }
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
    let danger_send_secrets_unverified = raw.danger_send_secrets_unverified.unwrap_or(false);
    if kind == KindName::Tcp && danger_send_secrets_unverified {
        issues.warn(format!(
            "{DANGER_KEY} has no effect: the tcp kind sends no secret"
        ));
    }
    Some(TlsSettings {
        ssl_mode,
        ssl_ca,
        client_identity,
        tls_min_version: raw.tls_min_version.unwrap_or(MinVersion::Tls12),
        danger_send_secrets_unverified,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    fn config(tls: &str, kind: &str) -> String {
        let kind_table = match kind {
            "mysql" => "[probe.mysql]\nuser = \"u\"\npassword = { env = \"PW\" }\n",
            _ => "[probe.http]\npath = \"/\"\nheaders = { authorization = { env = \"T\" } }\n",
        };
        format!(
            "[service]\nname = \"s\"\nstable_name = \"s.example\"\n[probe]\nkind = \"{kind}\"\n[probe.tls]\n{tls}\n{kind_table}[[branch]]\nname = \"a\"\nrole = \"PRIMARY\"\nendpoint = \"a.example\"\n"
        )
    }

    fn errors(text: &str) -> Vec<String> {
        match parse(Path::new("/c/x.toml"), text) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .issues
                .iter()
                .map(|i| format!("{}:{} {}", i.line.unwrap_or(0), i.key, i.message))
                .collect(),
        }
    }

    #[test]
    fn a_secret_goes_only_over_a_verified_session_unless_the_danger_key_allows_it() {
        for kind in ["mysql", "http"] {
            for mode in ["disabled", "required", "verify_ca"] {
                let tls = format!("ssl_mode = \"{mode}\"\nssl_ca = \"ca.pem\"");
                let e = errors(&config(&tls, kind));
                assert_eq!(e.len(), 1, "{kind} {mode}: {e:?}");
                assert!(
                    e[0].starts_with("7:probe.tls.ssl_mode ")
                        && e[0].contains("danger_send_secrets_unverified = true")
                        && e[0].contains(if kind == "mysql" {
                            "probe.mysql.password"
                        } else {
                            "probe.http.headers.authorization"
                        }),
                    "{kind} {mode}: {e:?}"
                );
                let allowed = format!("{tls}\ndanger_send_secrets_unverified = true");
                let cfg = parse(Path::new("/c/x.toml"), &config(&allowed, kind))
                    .unwrap_or_else(|e| panic!("{kind} {mode}: {e}"));
                assert!(
                    cfg.warnings.iter().any(|w| w
                        .contains("probe.tls.danger_send_secrets_unverified is true: ssl_mode")),
                    "{kind} {mode}: {:?}",
                    cfg.warnings
                );
            }
            let verified = "ssl_mode = \"verify_identity\"\nssl_ca = \"ca.pem\"";
            assert_eq!(errors(&config(verified, kind)), Vec::<String>::new());
            let useless = format!("{verified}\ndanger_send_secrets_unverified = true");
            let cfg = parse(Path::new("/c/x.toml"), &config(&useless, kind)).unwrap();
            assert!(
                cfg.warnings.iter().any(|w| w.contains("has no effect")),
                "{:?}",
                cfg.warnings
            );
        }
    }
}
