//! Secrets by reference: `{ env = "VAR" }`, `{ file = "/run/secrets/x" }` or
//! `{ secrets_manager = "name-or-arn", json_key = "password", refresh = "5m" }`, never inline; a
//! database password may instead be an RDS IAM token, `{ rds_iam = { region = "eu-west-1" } }`
//! (`rds_iam = {}` when every branch names its `region`).
//!
//! Parsing refuses an inline value without echoing it, and checks a Secrets Manager reference's
//! shape (name or ARN, key, refresh period, region). Reading a secret is the probe's start-up
//! business ([`SecretRef::resolve`], `secrets`); validation never reads one.

use super::region::region_problem;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A secret given by reference; the value itself never appears in config, logs or evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// Read from an environment variable (e.g. injected by ECS `secrets`).
    Env(String),
    /// Read from a file; one trailing newline is stripped. Relative paths are resolved against
    /// the config file's directory by validation.
    File(PathBuf),
    /// Read from AWS Secrets Manager with the prober's credentials, and read again every
    /// `refresh` and after an attempt the server denied.
    SecretsManager(SecretsManagerRef),
    /// No stored secret: an RDS IAM authentication token the prober signs for the branch's
    /// endpoint, port and the database user with its own credentials (a database password only,
    /// sent in clear text, so only over `verify_identity` sessions).
    RdsIam {
        /// The database's region (the token's signing scope) for a branch that names none
        /// (`Branch::token_region`); `None`: every branch names its own (config checks).
        region: Option<String>,
    },
}

/// A secret in AWS Secrets Manager: its `SecretString` (AWSCURRENT), or one key of it as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretsManagerRef {
    /// The secret's name (`rds!cluster-…` for an RDS-managed one) or full ARN.
    pub id: String,
    /// The key of the JSON object the secret holds (`password` for RDS); `None`: the whole
    /// `SecretString` is the value.
    pub json_key: Option<String>,
    /// How often the value is read again ([`MIN_REFRESH`]..=[`MAX_REFRESH`], default
    /// [`DEFAULT_REFRESH`]).
    pub refresh: Duration,
    /// The region asked; `None`: the ARN's, else the default chain's.
    pub region: Option<String>,
}

/// The default refresh period of a Secrets Manager secret.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);
/// The shortest refresh period: a denied attempt already triggers a read (at most once per
/// this), so a shorter period buys nothing but calls.
pub const MIN_REFRESH: Duration = Duration::from_secs(60);
/// The longest refresh period.
pub const MAX_REFRESH: Duration = Duration::from_secs(24 * 3600);
/// Secrets Manager's longest secret name, characters.
const MAX_NAME_CHARS: usize = 512;
/// Secrets Manager's longest ARN (name, suffix and prefix), characters.
const MAX_ARN_CHARS: usize = 2048;

impl SecretsManagerRef {
    /// The region to ask: the reference's, else the ARN's; `None`: the default chain's.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref().or_else(|| arn_region(&self.id))
    }
}

/// The region field of a Secrets Manager ARN (`arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME`).
fn arn_region(id: &str) -> Option<&str> {
    let mut parts = id.strip_prefix("arn:")?.splitn(5, ':');
    let (_partition, service, region) = (parts.next()?, parts.next()?, parts.next()?);
    (service == "secretsmanager" && !region.is_empty()).then_some(region)
}

/// Why `id` names no secret; `None` when it is a plausible name or ARN. Names take
/// Secrets Manager's characters (letters, digits, `/_+=.@-`) and `!` (RDS-managed names).
fn id_problem(id: &str) -> Option<String> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || "/_+=.@-!".contains(c);
    if id.is_empty() {
        return Some("secrets_manager: must name a secret (a name or an ARN)".into());
    }
    if let Some(rest) = id.strip_prefix("arn:") {
        let parts: Vec<&str> = rest.splitn(6, ':').collect();
        let shape =
            "secrets_manager: an ARN is arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME";
        return match parts[..] {
            [p, "secretsmanager", r, a, "secret", name]
                if !p.is_empty()
                    && !r.is_empty()
                    && a.len() == 12
                    && a.bytes().all(|b| b.is_ascii_digit())
                    && !name.is_empty()
                    && name.chars().all(name_char)
                    && id.chars().count() <= MAX_ARN_CHARS =>
            {
                None
            }
            _ => Some(shape.into()),
        };
    }
    if id.chars().count() > MAX_NAME_CHARS {
        return Some(format!(
            "secrets_manager: a secret name has at most {MAX_NAME_CHARS} characters"
        ));
    }
    (!id.chars().all(name_char)).then(|| {
        "secrets_manager: a secret name has only letters, digits and /_+=.@-! (an ARN starts with arn:)".into()
    })
}

/// The one shape a reference is written in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefTable {
    env: Option<String>,
    file: Option<PathBuf>,
    secrets_manager: Option<String>,
    json_key: Option<String>,
    refresh: Option<String>,
    region: Option<String>,
    rds_iam: Option<RdsIamTable>,
}

/// `rds_iam = { region = "…" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RdsIamTable {
    region: Option<String>,
}

impl RefTable {
    /// The reference, or why the table is none (never quoting a value: a table holds none).
    fn into_ref(self) -> Result<SecretRef, String> {
        let sm_only = self.json_key.is_some() || self.refresh.is_some() || self.region.is_some();
        if let Some(iam) = self.rds_iam {
            if self.env.is_some()
                || self.file.is_some()
                || self.secrets_manager.is_some()
                || sm_only
            {
                return Err(REF_SHAPE.into());
            }
            if let Some(p) = iam.region.as_deref().and_then(region_problem) {
                return Err(format!("rds_iam.region: {p}"));
            }
            return Ok(SecretRef::RdsIam { region: iam.region });
        }
        match (self.env, self.file, self.secrets_manager) {
            (Some(v), None, None) if !v.is_empty() && !sm_only => Ok(SecretRef::Env(v)),
            (None, Some(f), None) if !f.as_os_str().is_empty() && !sm_only => {
                Ok(SecretRef::File(f))
            }
            (None, None, Some(id)) => sm_ref(id, self.json_key, self.refresh, self.region),
            (None, None, None) | (Some(_), None, None) | (None, Some(_), None) if sm_only => Err(
                "json_key, refresh and region belong to a { secrets_manager = \"name-or-arn\" } reference".into(),
            ),
            _ => Err(REF_SHAPE.into()),
        }
    }
}

/// A checked Secrets Manager reference.
fn sm_ref(
    id: String,
    json_key: Option<String>,
    refresh: Option<String>,
    region: Option<String>,
) -> Result<SecretRef, String> {
    if let Some(p) = id_problem(&id) {
        return Err(p);
    }
    if json_key.as_deref().is_some_and(str::is_empty) {
        return Err("json_key: must not be empty (leave it out to use the whole secret)".into());
    }
    let refresh = match refresh {
        None => DEFAULT_REFRESH,
        Some(w) => match humantime::parse_duration(&w) {
            Ok(d) if (MIN_REFRESH..=MAX_REFRESH).contains(&d) => d,
            Ok(_) => return Err(format!("refresh: {w:?} is outside 1m..=24h")),
            Err(_) => return Err(format!("refresh: {w:?} is not a duration (e.g. \"5m\")")),
        },
    };
    if let Some(r) = &region {
        if let Some(p) = region_problem(r) {
            return Err(format!("region: {p}"));
        }
        if let Some(a) = arn_region(&id).filter(|a| a != r) {
            return Err(format!("region: {r:?} is not the ARN's region {a:?}"));
        }
    }
    Ok(SecretRef::SecretsManager(SecretsManagerRef {
        id,
        json_key,
        refresh,
        region,
    }))
}

const REF_SHAPE: &str = "give exactly one reference: { env = \"VAR\" }, { file = \"/run/secrets/x\" }, { secrets_manager = \"name-or-arn\", json_key = \"password\", refresh = \"5m\" } or, for a database password, { rds_iam = { region = \"eu-west-1\" } } (secrets are never written inline; the value is not shown)";

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A reference, or anything else: an inline value is refused without being echoed.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            Ref(RefTable),
            Inline(serde::de::IgnoredAny),
        }
        match Any::deserialize(d)? {
            Any::Ref(r) => r.into_ref(),
            Any::Inline(_) => Err(REF_SHAPE.into()),
        }
        .map_err(serde::de::Error::custom)
    }
}

impl SecretRef {
    /// The same reference with a relative file path resolved against `base`.
    pub(super) fn relative_to(self, base: &Path) -> Self {
        match self {
            SecretRef::File(p) if p.is_relative() => SecretRef::File(base.join(p)),
            other => other,
        }
    }

    /// Read the secret (an environment variable or a file; a Secrets Manager secret is read
    /// by the run's secret cache).
    ///
    /// # Errors
    /// [`SecretError`] naming the variable or file when it is unset, unreadable or empty.
    pub fn resolve(&self) -> Result<String, SecretError> {
        let value = match self {
            SecretRef::SecretsManager(_) | SecretRef::RdsIam { .. } => {
                return Err(SecretError {
                    reference: self.to_string(),
                    reason: "is read through the run's secret cache".into(),
                });
            }
            SecretRef::Env(var) => std::env::var(var).map_err(|_| SecretError {
                reference: self.to_string(),
                reason: "the environment variable is not set (or not valid UTF-8)".into(),
            })?,
            SecretRef::File(path) => {
                let bytes = std::fs::read(path).map_err(|e| SecretError {
                    reference: self.to_string(),
                    reason: e.to_string(),
                })?;
                return self.value_of_file_contents(bytes);
            }
        };
        self.checked(value)
    }

    /// The secret held by `bytes`, the file's contents read by the caller: one trailing newline
    /// (`\n` or `\r\n`) is not part of it.
    ///
    /// # Errors
    /// [`SecretError`] when the contents are not UTF-8 or the secret is empty.
    pub fn value_of_file_contents(&self, bytes: Vec<u8>) -> Result<String, SecretError> {
        let mut v = String::from_utf8(bytes).map_err(|_| SecretError {
            reference: self.to_string(),
            reason: "stream did not contain valid UTF-8".into(),
        })?;
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        self.checked(v)
    }

    /// `value` unless it is empty.
    ///
    /// # Errors
    /// [`SecretError`] when the secret is empty.
    pub fn checked(&self, value: String) -> Result<String, SecretError> {
        if value.is_empty() {
            return Err(SecretError {
                reference: self.to_string(),
                reason: "the secret is empty".into(),
            });
        }
        Ok(value)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(v) => write!(f, "environment variable {v}"),
            SecretRef::File(p) => write!(f, "file {}", p.display()),
            SecretRef::SecretsManager(r) => write!(f, "{r}"),
            SecretRef::RdsIam { region: Some(r) } => write!(f, "RDS IAM token ({r})"),
            SecretRef::RdsIam { region: None } => write!(f, "RDS IAM token (each branch's region)"),
        }
    }
}

impl fmt::Display for SecretsManagerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets Manager secret {}", self.id)?;
        if let Some(k) = &self.json_key {
            write!(f, " key {k}")?;
        }
        Ok(())
    }
}

/// A secret could not be read.
#[derive(Debug, thiserror::Error)]
#[error("secret from {reference} is unavailable: {reason}")]
pub struct SecretError {
    /// Which reference (never the value).
    pub reference: String,
    /// Why.
    pub reason: String,
}

/// A header value: literal, or a secret by reference (never logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueSource {
    /// Literal text (may contain `{{...}}` template variables).
    Plain(String),
    /// Read at start-up.
    Secret(SecretRef),
}

impl<'de> Deserialize<'de> for HeaderValueSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            Plain(String),
            Ref(RefTable),
            Other(serde::de::IgnoredAny),
        }
        match Any::deserialize(d)? {
            Any::Plain(p) => Ok(HeaderValueSource::Plain(p)),
            Any::Ref(r) => match r.into_ref() {
                Ok(SecretRef::RdsIam { .. }) => Err(
                    "rds_iam: an RDS IAM token is a database password, not a header value".into(),
                ),
                other => other.map(HeaderValueSource::Secret),
            },
            Any::Other(_) => Err(
                "a header value is a string, or a secret by reference: { env = \"VAR\" }, { file = \"/path\" } or { secrets_manager = \"name-or-arn\" }".into(),
            ),
        }
        .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Issue, ProbeKind, parse};

    const BASE: &str = "[service]\nname = \"orders-db\"\nstable_name = \"mysql.orders.internal.example\"\n\n[probe]\nkind = \"mysql\"\n[probe.tls]\nssl_mode = \"required\"\ndanger_send_secrets_unverified = true\n[probe.mysql]\nuser = \"readyprobe\"\npassword = PASSWORD\n\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"mysql-primary.orders.internal.example\"\n";

    fn password(reference: &str) -> Result<SecretRef, Vec<Issue>> {
        let text = BASE.replace("PASSWORD", reference);
        let cfg = parse(Path::new("t.toml"), &text).map_err(|e| e.issues)?;
        match &cfg.services[0].probe.kind {
            ProbeKind::Mysql(m) => Ok(m.password.clone()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_secrets_manager_reference_takes_a_name_or_an_arn_with_defaults() {
        let r = password(r#"{ secrets_manager = "rds!cluster-3f2a-9b", json_key = "password" }"#);
        let Ok(SecretRef::SecretsManager(r)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.id, "rds!cluster-3f2a-9b");
        assert_eq!(r.json_key.as_deref(), Some("password"));
        assert_eq!((r.refresh, r.region()), (DEFAULT_REFRESH, None));
        assert_eq!(
            r.to_string(),
            "Secrets Manager secret rds!cluster-3f2a-9b key password"
        );
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db/orders-AbCdEf";
        let r = password(&format!(
            r#"{{ secrets_manager = "{arn}", refresh = "1h" }}"#
        ));
        let Ok(SecretRef::SecretsManager(r)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            (r.refresh, r.region()),
            (Duration::from_secs(3600), Some("eu-west-1"))
        );
        let r = password(r#"{ secrets_manager = "db/orders", region = "us-east-2" }"#).unwrap();
        assert!(matches!(r, SecretRef::SecretsManager(ref s) if s.region() == Some("us-east-2")));
    }

    /// `rds_iam` is a database password signed per attempt: accepted over `verify_identity`
    /// only (the danger key does not lift it), with a region (its own or every branch's);
    /// refused as a header value.
    #[test]
    fn an_rds_iam_password_needs_a_region_and_verify_identity() {
        let verified = BASE.replace(
            "ssl_mode = \"required\"\ndanger_send_secrets_unverified = true",
            "ssl_mode = \"verify_identity\"\nssl_ca = \"/etc/ca.pem\"",
        );
        let parse_with = |base: &str, reference: &str| {
            parse(Path::new("t.toml"), &base.replace("PASSWORD", reference))
        };
        let iam = r#"{ rds_iam = { region = "eu-west-1" } }"#;
        let cfg = parse_with(&verified, iam).unwrap_or_else(|e| panic!("{e}"));
        let ProbeKind::Mysql(m) = &cfg.services[0].probe.kind else {
            unreachable!()
        };
        assert_eq!(
            m.password,
            SecretRef::RdsIam {
                region: Some("eu-west-1".into())
            }
        );
        assert_eq!(m.password.to_string(), "RDS IAM token (eu-west-1)");
        let issues = parse_with(BASE, iam).unwrap_err().issues;
        let errors: Vec<_> = issues
            .iter()
            .filter(|i| i.key == "probe.mysql.password")
            .collect();
        assert_eq!(errors.len(), 1, "{issues:?}");
        assert_eq!(errors[0].line, Some(12));
        assert!(errors[0].message.contains("verify_identity"), "{issues:?}");
        for (reference, want) in [
            (
                r#"{ rds_iam = {} }"#,
                "rds_iam names no region and branch[0] (\"primary\", line 14) names none: set rds_iam.region or branch[0].region",
            ),
            (
                r#"{ rds_iam = { region = "EU" } }"#,
                "rds_iam.region: \"EU\" is not an AWS region name",
            ),
            (
                r#"{ rds_iam = { region = "eu-west-1", user = "x" } }"#,
                "give exactly one reference",
            ),
            (
                r#"{ rds_iam = { region = "eu-west-1" }, env = "PW" }"#,
                "give exactly one reference",
            ),
        ] {
            let issues = parse_with(&verified, reference).unwrap_err().issues;
            assert_eq!(issues[0].key, "probe.mysql.password", "{reference}");
            assert!(issues[0].message.contains(want), "{reference}: {issues:?}");
        }
        let header: Result<HeaderValueSource, _> =
            toml::from_str::<toml::Table>(&format!("h = {iam}"))
                .unwrap()
                .remove("h")
                .unwrap()
                .try_into();
        assert!(
            header
                .unwrap_err()
                .to_string()
                .contains("not a header value")
        );
    }

    /// Each bad reference is refused on the key's line with what is wrong.
    #[test]
    fn a_bad_secrets_manager_reference_is_refused_by_key_and_line() {
        for (reference, want) in [
            (
                r#"{ secrets_manager = "" }"#,
                "secrets_manager: must name a secret",
            ),
            (
                r#"{ secrets_manager = "db orders" }"#,
                "a secret name has only letters",
            ),
            (
                r#"{ secrets_manager = "arn:aws:secretsmanager:eu-west-1:1234:secret:x" }"#,
                "an ARN is arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME",
            ),
            (
                r#"{ secrets_manager = "db", json_key = "" }"#,
                "json_key: must not be empty",
            ),
            (
                r#"{ secrets_manager = "db", refresh = "30s" }"#,
                "refresh: \"30s\" is outside 1m..=24h",
            ),
            (
                r#"{ secrets_manager = "db", refresh = "2d" }"#,
                "is outside 1m..=24h",
            ),
            (
                r#"{ secrets_manager = "db", refresh = "soon" }"#,
                "is not a duration",
            ),
            (
                r#"{ secrets_manager = "db", region = "EU" }"#,
                "region: \"EU\" is not an AWS region name",
            ),
            (
                r#"{ secrets_manager = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x", region = "us-east-1" }"#,
                "region: \"us-east-1\" is not the ARN's region \"eu-west-1\"",
            ),
            (
                r#"{ env = "PW", json_key = "password" }"#,
                "belong to a { secrets_manager",
            ),
            (
                r#"{ env = "PW", secrets_manager = "db" }"#,
                "give exactly one reference",
            ),
            (
                r#"{ secrets_manager = "db", other = 1 }"#,
                "give exactly one reference",
            ),
        ] {
            let issues = password(reference).expect_err(reference);
            assert_eq!(issues[0].key, "probe.mysql.password", "{reference}");
            assert_eq!(issues[0].line, Some(12), "{reference}");
            assert!(
                issues[0].message.contains(want),
                "{reference}: {}",
                issues[0].message
            );
        }
    }
}
