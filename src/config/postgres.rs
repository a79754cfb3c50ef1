//! `[probe.postgres]`: the PostgreSQL writer probe's identity and canary table.

use super::issues::Issues;
use super::raw::RawPostgres;
use super::secret::SecretRef;
use super::tls::{TlsSettings, guard_rds_iam, guard_secrets};
use std::path::Path;

/// Settings of the `postgres` probe kind.
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresProbe {
    /// Default server port (5432); a branch may override it.
    pub port: u16,
    /// The probe role.
    pub user: String,
    /// The probe role's password, by reference.
    pub password: SecretRef,
    /// Database of the canary table. Default `readyprobe`.
    pub database: String,
    /// Schema of the canary table. Default `public`.
    pub schema: String,
    /// Canary table. Default `canary`.
    pub table: String,
    /// TLS, from `[probe.tls]` (`SSLRequest`, then the handshake). Default `verify_identity`.
    pub tls: TlsSettings,
}

/// PostgreSQL's longest identifier, bytes (`NAMEDATALEN` − 1): role, database and table names.
const MAX_NAME_BYTES: usize = 63;

/// An identifier readyprobe quotes into its statements: 1–63 characters of `[a-z0-9_]`, not
/// starting with a digit, so that it means the same quoted or not.
fn identifier_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Validate `[probe.postgres]` with the shared TLS settings.
pub(super) fn section(
    p: RawPostgres,
    tls: TlsSettings,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<PostgresProbe> {
    let mut name = |key: &str, value: Option<String>, default: &str| {
        let value = value.unwrap_or_else(|| default.into());
        if !identifier_ok(&value) {
            issues.error(
                format!("probe.postgres.{key}"),
                "must be 1–63 characters of [a-z0-9_], not starting with a digit",
            );
        }
        value
    };
    let database = name("database", p.database, "readyprobe");
    let schema = name("schema", p.schema, "public");
    let table = name("table", p.table, "canary");
    if p.user.is_empty() {
        issues.error("probe.postgres.user", "must not be empty");
    } else if p.user.chars().any(char::is_control) {
        issues.error(
            "probe.postgres.user",
            "must not hold a control character: no PostgreSQL role has one",
        );
    } else if p.user.len() > MAX_NAME_BYTES {
        issues.error(
            "probe.postgres.user",
            format!(
                "must be at most {MAX_NAME_BYTES} bytes (PostgreSQL's limit for a role name), it has {}",
                p.user.len()
            ),
        );
    }
    guard_secrets(&tls, &["probe.postgres.password".to_string()], issues);
    guard_rds_iam(&tls, "probe.postgres.password", &p.password, issues);
    Some(PostgresProbe {
        port: p.port.map_or(5432, |p| p.get()),
        user: p.user,
        password: p.password.relative_to(base),
        database,
        schema,
        table,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Issue, ProbeKind, parse};
    use std::path::Path;

    const BASE: &str = "[service]\nname = \"orders-pg\"\nstable_name = \"pg.orders.internal.example\"\n\n[probe]\nkind = \"postgres\"\n[probe.tls]\nssl_ca = \"ca.pem\"\n[probe.postgres]\npassword = { env = \"PW\" }\nuser = \"readyprobe\"\nEXTRA\n\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"pg-primary.orders.internal.example\"\n";

    fn issues(extra: &str) -> Vec<Issue> {
        match parse(Path::new("t.toml"), &BASE.replace("EXTRA", extra)) {
            Ok(_) => vec![],
            Err(e) => e.issues,
        }
    }

    #[test]
    fn defaults_are_port_5432_and_readyprobe_canary() {
        let c = parse(Path::new("t.toml"), &BASE.replace("EXTRA", "")).expect("valid");
        let ProbeKind::Postgres(p) = &c.services[0].probe.kind else {
            panic!("postgres kind");
        };
        assert_eq!(p.port, 5432);
        assert_eq!(c.services[0].branches[0].port, 5432);
        assert_eq!(
            (p.database.as_str(), p.schema.as_str(), p.table.as_str()),
            ("readyprobe", "public", "canary")
        );
    }

    /// Names are checked by key and line: upper case, a quote or a leading digit would need
    /// quoting rules the statements do not rely on; a role name is at most 63 bytes.
    #[test]
    fn bad_names_are_refused_by_key_and_line() {
        for (extra, key) in [
            ("table = \"Canary\"", "probe.postgres.table"),
            ("schema = \"a\\\"b\"", "probe.postgres.schema"),
            ("database = \"1db\"", "probe.postgres.database"),
            ("table = \"\"", "probe.postgres.table"),
        ] {
            let got = issues(extra);
            assert_eq!(got.len(), 1, "{extra}: {got:?}");
            assert_eq!(got[0].key, key, "{got:?}");
            assert_eq!(got[0].line, Some(12), "{got:?}");
        }
        let long = BASE
            .replace("EXTRA", "")
            .replace("\"readyprobe\"", &format!("\"{}\"", "u".repeat(64)));
        let got = parse(Path::new("t.toml"), &long).unwrap_err().issues;
        assert_eq!(got[0].key, "probe.postgres.user", "{got:?}");
        assert!(issues("schema = \"readyprobe\"\ntable = \"canary_2\"").is_empty());
    }

    /// Two postgres services probing one server's branch of one name with one canary table
    /// would write each other's row: an error naming the kind's key; a table of its own clears it.
    #[test]
    fn two_services_on_one_canary_row_are_an_error() {
        let service = |n: &str, extra: &str| {
            format!(
                "[[service]]\nname = \"{n}\"\nstable_name = \"{n}.internal.example\"\n{extra}[[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"pg.internal.example\"\n"
            )
        };
        let head = "[probe]\nkind = \"postgres\"\n[probe.tls]\nssl_ca = \"ca.pem\"\n[probe.postgres]\nuser = \"readyprobe\"\npassword = { env = \"PW\" }\n";
        let text = format!("{head}{}{}", service("a", ""), service("b", ""));
        let got = parse(Path::new("t.toml"), &text).unwrap_err().issues;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "service[1].branch[0].name", "{got:?}");
        assert!(
            got[0].message.contains("readyprobe.public.canary")
                && got[0].message.contains("probe.postgres.table"),
            "{got:?}"
        );
        let own = service("b", "probe = { postgres = { table = \"canary_b\" } }\n");
        let text = format!("{head}{}{own}", service("a", ""));
        assert!(parse(Path::new("t.toml"), &text).is_ok());
    }
}
