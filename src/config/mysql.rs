//! `[probe.mysql]`: the MySQL/MariaDB writer probe's identity and canary table.

use super::issues::Issues;
use super::raw::RawMysql;
use super::secret::SecretRef;
use super::tls::{ClientIdentityFiles, TlsSettings, guard_rds_iam, guard_secrets};
use super::values::{MinVersion, SslMode};
use std::path::{Path, PathBuf};

/// Settings of the `mysql` probe kind.
#[derive(Debug, Clone, PartialEq)]
pub struct MysqlProbe {
    /// Default server port (3306); a branch may override it.
    pub port: u16,
    /// The probe identity.
    pub user: String,
    /// The probe identity's password, by reference.
    pub password: SecretRef,
    /// Database of the canary table. Default `readyprobe`.
    pub database: String,
    /// Canary table. Default `canary`.
    pub table: String,
    /// MySQL ssl-mode semantics, from `[probe.tls]`. Default `verify_identity`.
    pub ssl_mode: SslMode,
    /// PEM CA bundle that signs the server certificates (required for `verify_ca`/`verify_identity`).
    pub ssl_ca: Option<PathBuf>,
    /// Client certificate and key (MySQL `--ssl-cert` / `--ssl-key`) for a `REQUIRE X509` identity.
    pub client_identity: Option<ClientIdentityFiles>,
    /// Minimum TLS version (`"1.2"` default, or `"1.3"`).
    pub tls_min_version: MinVersion,
}

/// The longest user name MariaDB accepts (`mysql.user.User` is `char(80)`; MySQL's is 32).
const MAX_USER_CHARS: usize = 80;

/// A MySQL identifier readyprobe writes unquoted into its statements: 1–64 characters of
/// `[A-Za-z0-9_]`.
fn identifier_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Validate `[probe.mysql]` with the shared TLS settings.
pub(super) fn section(
    m: RawMysql,
    tls: TlsSettings,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<MysqlProbe> {
    let database = m.database.unwrap_or_else(|| "readyprobe".into());
    if !identifier_ok(&database) {
        issues.error(
            "probe.mysql.database",
            "must be 1–64 characters of [A-Za-z0-9_]",
        );
    }
    let table = m.table.unwrap_or_else(|| "canary".into());
    if !identifier_ok(&table) {
        issues.error(
            "probe.mysql.table",
            "must be 1–64 characters of [A-Za-z0-9_]",
        );
    }
    if m.user.is_empty() {
        issues.error("probe.mysql.user", "must not be empty");
    } else if m.user.chars().any(char::is_control) {
        issues.error(
            "probe.mysql.user",
            "must not hold a control character: no MariaDB or MySQL identity has one",
        );
    } else if m.user.chars().count() > MAX_USER_CHARS {
        issues.error(
            "probe.mysql.user",
            format!(
                "must be at most {MAX_USER_CHARS} characters (MariaDB's limit for a user name), it has {}",
                m.user.chars().count()
            ),
        );
    }
    guard_secrets(&tls, &["probe.mysql.password".to_string()], issues);
    guard_rds_iam(&tls, "probe.mysql.password", &m.password, issues);
    Some(MysqlProbe {
        port: m.port.map_or(3306, |p| p.get()),
        user: m.user,
        password: m.password.relative_to(base),
        database,
        table,
        ssl_mode: tls.ssl_mode,
        ssl_ca: tls.ssl_ca,
        client_identity: tls.client_identity,
        tls_min_version: tls.tls_min_version,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Issue, parse};
    use std::path::Path;

    const BASE: &str = "[service]\nname = \"orders-db\"\nstable_name = \"mysql.orders.internal.example\"\n\n[probe]\nkind = \"mysql\"\n[probe.tls]\nssl_mode = \"required\"\ndanger_send_secrets_unverified = true\n[probe.mysql]\npassword = { env = \"PW\" }\nuser = USER\n\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"mysql-primary.orders.internal.example\"\n";

    fn user_issues(user_toml: &str) -> Vec<Issue> {
        match parse(Path::new("t.toml"), &BASE.replace("USER", user_toml)) {
            Ok(_) => vec![],
            Err(e) => e.issues,
        }
    }

    /// MariaDB user names are at most 80 characters (`mysql.user.User` is `char(80)`); a control
    /// character is no identity anyone created. Both are refused by file, line and key.
    #[test]
    fn a_user_with_a_control_character_or_over_80_characters_is_refused() {
        for (user, why) in [
            (r#""ready\u0000probe""#, "control character"),
            (r#""ready\nprobe""#, "control character"),
            (r#""ready\u007fprobe""#, "control character"),
            (&format!("\"{}\"", "u".repeat(81)), "80 characters"),
            (&format!("\"{}\"", "u".repeat(5000)), "80 characters"),
        ] {
            let got = user_issues(user);
            assert_eq!(got.len(), 1, "{user}: {got:?}");
            assert_eq!(got[0].key, "probe.mysql.user", "{got:?}");
            assert_eq!(got[0].line, Some(12), "{got:?}");
            assert!(got[0].message.contains(why), "{user}: {got:?}");
        }
        for user in [
            r#""readyprobe""#,
            &format!("\"{}\"", "ü".repeat(80)),
            r#""probe@eu-west-1""#,
        ] {
            assert!(user_issues(user).is_empty(), "{user}");
        }
    }
}
