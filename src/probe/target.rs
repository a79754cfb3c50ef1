//! What a branch is probed with, prepared once at start-up: the [`BranchProbe`] and its
//! kind-specific [`Target`] (settings plus the secrets and TLS client configuration read then).
//!
//! A leaf: the step context and every kind read these types without importing each other.

use crate::config::{Branch, HttpProbe, MysqlProbe, OtlpProbe, PostgresProbe, StepTimeouts};
use crate::secrets::SecretCell;
pub use crate::secrets::redactor::{MIN_TRANSFORMED_SECRET_CHARS, REDACTED, Redactor};
use std::sync::Arc;
use std::time::Duration;

/// Everything needed to probe one branch, prepared once at start-up.
#[derive(Debug, Clone)]
pub struct BranchProbe {
    pub branch: Branch,
    pub prober_id: String,
    /// The service's stable name, which no branch attempt may resolve through.
    pub stable_name: String,
    /// Address records the `resolve` step asks for.
    pub address_family: crate::config::AddressFamily,
    /// Attempt deadline, from its start.
    pub timeout: Duration,
    pub step_timeouts: StepTimeouts,
    pub target: Target,
    /// Whether every TLS session of an attempt verifies the server's chain and name
    /// (`verify_identity`); recorded on every attempt as `tls_verified`.
    pub tls_verified: bool,
    /// Removes the configured secrets from text the target sends back.
    pub redactor: Redactor,
    /// The stable-name probe's end-to-end attempt ([`BranchProbe::through_stable_name`]):
    /// `branch.endpoint` is the stable name, which the `resolve` step then follows instead of
    /// refusing (`dns_stable_name`).
    pub end_to_end: bool,
}

impl BranchProbe {
    /// This branch's probe made the end-to-end attempt through the service's stable name: what
    /// a client does. The endpoint is the stable name (resolved, and what TLS certificates are
    /// checked against); kind, steps, port, TLS, credentials and templates stay the branch's
    /// (`{{branch}}` still names it); the `mysql` and `postgres` canary rows are keyed
    /// [`crate::config::END_TO_END_KEY`], never a branch's.
    pub fn through_stable_name(&self) -> BranchProbe {
        let mut p = self.clone();
        p.branch.endpoint = p.stable_name.clone();
        p.end_to_end = true;
        p
    }

    /// The `branch` column of this probe's canary row (`mysql`, `postgres`): the branch name, or
    /// [`crate::config::END_TO_END_KEY`] for the end-to-end attempt.
    pub fn canary_key(&self) -> &str {
        if self.end_to_end {
            crate::config::END_TO_END_KEY
        } else {
            &self.branch.name
        }
    }
}

/// Kind-specific prepared target; one variant per probe kind.
#[derive(Debug, Clone)]
pub enum Target {
    Mysql(Box<MysqlTarget>),
    Postgres(Box<PostgresTarget>),
    Tcp(TcpTarget),
    Http(Box<HttpTarget>),
    Otlp(Box<OtlpTarget>),
}

impl Target {
    /// The secrets this target sends: the MySQL password, secret header values.
    pub fn secrets(&self) -> Vec<SecretCell> {
        match self {
            Target::Mysql(t) => vec![t.password.clone()],
            Target::Postgres(t) => vec![t.password.clone()],
            Target::Tcp(_) => Vec::new(),
            Target::Http(t) => secret_values(&t.headers),
            Target::Otlp(t) => secret_values(&t.headers),
        }
    }

    /// The same target with `password` as the database password (a branch's RDS IAM token);
    /// kinds without one are returned as they are.
    #[must_use]
    pub fn with_database_password(&self, password: SecretCell) -> Target {
        match self {
            Target::Mysql(t) => Target::Mysql(Box::new(MysqlTarget {
                password,
                ..(**t).clone()
            })),
            Target::Postgres(t) => Target::Postgres(Box::new(PostgresTarget {
                password,
                ..(**t).clone()
            })),
            other => other.clone(),
        }
    }

    /// The server denied an attempt that sent this target's secrets: each one that can be read
    /// again is (at most once a minute).
    pub fn report_denied(&self) {
        for s in self.secrets() {
            s.report_denied();
        }
    }

    /// The config keys of the secrets shorter than [`MIN_TRANSFORMED_SECRET_CHARS`]: weak, and
    /// redacted only exactly (every occurrence in other words too).
    pub fn short_secret_keys(&self) -> Vec<String> {
        let short = |v: &str| v.chars().count() < MIN_TRANSFORMED_SECRET_CHARS;
        let headers = |kind: &str, hs: &[Header]| -> Vec<String> {
            hs.iter()
                .filter(|h| h.secret && short(&h.value.get()))
                .map(|h| format!("probe.{kind}.headers.{}", h.name))
                .collect()
        };
        match self {
            Target::Mysql(t) if short(&t.password.get()) => vec!["probe.mysql.password".into()],
            Target::Postgres(t) if short(&t.password.get()) => {
                vec!["probe.postgres.password".into()]
            }
            Target::Mysql(_) | Target::Postgres(_) | Target::Tcp(_) => Vec::new(),
            Target::Http(t) => headers("http", &t.headers),
            Target::Otlp(t) => headers("otlp", &t.headers),
        }
    }

    /// The kind's TLS client configuration; `None` when TLS is off.
    pub fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        match self {
            Target::Mysql(t) => t.tls.as_ref(),
            Target::Postgres(t) => t.tls.as_ref(),
            Target::Tcp(t) => t.tls.as_ref(),
            Target::Http(t) => t.tls.as_ref(),
            Target::Otlp(t) => t.tls.as_ref(),
        }
    }
}

fn secret_values(headers: &[Header]) -> Vec<SecretCell> {
    headers
        .iter()
        .filter(|h| h.secret)
        .map(|h| h.value.clone())
        .collect()
}

/// A request header with its value resolved.
#[derive(Clone)]
pub struct Header {
    pub name: http::HeaderName,
    /// The value (a template), read at each attempt; never logged when `secret`.
    pub value: SecretCell,
    /// Whether the value came from a secret reference.
    pub secret: bool,
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.secret {
            write!(f, "{}: <redacted>", self.name)
        } else {
            write!(f, "{}: {:?}", self.name, &*self.value.get())
        }
    }
}

/// A prepared mysql probe for one branch: settings plus the secret and TLS config read at start.
#[derive(Clone)]
pub struct MysqlTarget {
    /// Settings from the config.
    pub settings: MysqlProbe,
    /// The password, read at each attempt (never logged).
    pub password: SecretCell,
    /// rustls client configuration of the `tls` step, whose session then carries `auth`, `write`
    /// and `verify` (`None` when ssl_mode is disabled).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for MysqlTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlTarget")
            .field("settings", &self.settings)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A prepared postgres probe for one branch: settings plus the secret and TLS config read at
/// start.
#[derive(Clone)]
pub struct PostgresTarget {
    /// Settings from the config.
    pub settings: PostgresProbe,
    /// The password, read at each attempt (never logged).
    pub password: SecretCell,
    /// rustls client configuration of the `tls` step, whose session then carries `auth`, `write`
    /// and `verify` (`None` when ssl_mode is disabled).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTarget")
            .field("settings", &self.settings)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A prepared http probe: settings plus header secrets read at start-up.
#[derive(Clone)]
pub struct HttpTarget {
    pub settings: HttpProbe,
    /// Headers with secrets resolved (secret values never logged).
    pub headers: Vec<Header>,
    /// rustls client configuration (`None` for plain HTTP).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("request", &self.settings.request)
            .field("headers", &self.headers)
            .finish()
    }
}

/// A prepared otlp probe.
#[derive(Clone)]
pub struct OtlpTarget {
    pub settings: OtlpProbe,
    /// Headers with secrets resolved (secret values never logged).
    pub headers: Vec<Header>,
    /// rustls client configuration (`None` for plain HTTP).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for OtlpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpTarget")
            .field("path", &self.settings.path)
            .finish()
    }
}

/// A prepared tcp probe.
#[derive(Debug, Clone)]
pub struct TcpTarget {
    /// rustls client configuration (`None` when ssl_mode is disabled).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}
