//! What a branch is probed with, prepared once at start-up: the [`BranchProbe`] and its
//! kind-specific [`Target`] (settings plus the secrets and TLS client configuration read then).
//!
//! A leaf: the step context and every kind read these types without importing each other.

use crate::config::{Branch, HttpProbe, MysqlProbe, OtlpProbe, StepTimeouts};
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
}

/// What replaces a secret in text read back from a target.
pub const REDACTED: &str = "<redacted>";

/// The configured secrets' values (the MySQL password, secret header values) and the one
/// function that removes them from text a target sent back: server messages, header values,
/// bodies, mismatch messages. Each secret is matched as written and as it looks quoted by
/// `{:?}` or as a JSON string; where secrets overlap, the longest match wins, so a secret that
/// is part of another never leaves the rest of the longer one behind.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<Arc<aho_corasick::AhoCorasick>>,
}

impl Redactor {
    /// A redactor of `secrets` (empty ones are ignored).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut patterns: Vec<String> = Vec::new();
        for s in secrets.into_iter().filter(|s| !s.is_empty()) {
            let debug = format!("{s:?}");
            let json = serde_json::to_string(s).unwrap_or_default();
            for p in [s, unquote(&debug), unquote(&json)] {
                if !p.is_empty() && !patterns.iter().any(|q| q == p) {
                    patterns.push(p.to_string());
                }
            }
        }
        if patterns.is_empty() {
            return Redactor::default();
        }
        let matcher = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()
            .map(Arc::new);
        Redactor { matcher }
    }

    /// `text` with every occurrence of every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        match &self.matcher {
            Some(m) => m.replace_all(text, &vec![REDACTED; m.patterns_len()]),
            None => text.to_string(),
        }
    }

    /// [`Redactor::redact`] in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if self
            .matcher
            .as_ref()
            .is_some_and(|m| m.is_match(text.as_str()))
        {
            *text = self.redact(text);
        }
    }
}

/// `s` without its first and last character (the quotes of a quoted string).
fn unquote(s: &str) -> &str {
    s.get(1..s.len().saturating_sub(1)).unwrap_or_default()
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.matcher.as_ref().map_or(0, |m| m.patterns_len());
        write!(f, "Redactor({n} patterns)")
    }
}

/// Kind-specific prepared target; one variant per probe kind.
#[derive(Debug, Clone)]
pub enum Target {
    Mysql(Box<MysqlTarget>),
    Tcp(TcpTarget),
    Http(Box<HttpTarget>),
    Otlp(Box<OtlpTarget>),
}

impl Target {
    /// The resolved secrets this target sends: the MySQL password, secret header values.
    pub fn secrets(&self) -> Vec<&str> {
        match self {
            Target::Mysql(t) => vec![t.password.as_str()],
            Target::Tcp(_) => Vec::new(),
            Target::Http(t) => secret_values(&t.headers),
            Target::Otlp(t) => secret_values(&t.headers),
        }
    }

    /// The kind's TLS client configuration; `None` when TLS is off.
    pub fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        match self {
            Target::Mysql(t) => t.tls.as_ref(),
            Target::Tcp(t) => t.tls.as_ref(),
            Target::Http(t) => t.tls.as_ref(),
            Target::Otlp(t) => t.tls.as_ref(),
        }
    }
}

fn secret_values(headers: &[Header]) -> Vec<&str> {
    headers
        .iter()
        .filter(|h| h.secret)
        .map(|h| h.value.as_str())
        .collect()
}

/// A request header with its value resolved.
#[derive(Clone)]
pub struct Header {
    pub name: http::HeaderName,
    /// The value (a template); never logged when `secret`.
    pub value: String,
    /// Whether the value came from a secret reference.
    pub secret: bool,
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.secret {
            write!(f, "{}: <redacted>", self.name)
        } else {
            write!(f, "{}: {:?}", self.name, self.value)
        }
    }
}

/// A prepared mysql probe for one branch: settings plus the secret and TLS config read at start.
#[derive(Clone)]
pub struct MysqlTarget {
    /// Settings from the config.
    pub settings: MysqlProbe,
    /// The resolved password (never logged).
    pub password: String,
    /// rustls client configuration for the `tls` step (`None` when ssl_mode is disabled).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The PEM files read at start-up, handed to the MySQL driver for the `auth` step's session
    /// so it trusts the same bundle as the `tls` step and never reads a file per attempt.
    pub pems: TlsPems,
}

/// The CA bundle and client identity PEMs as read (capped) at start-up; empty where not
/// configured or not used by the ssl_mode.
#[derive(Clone, Default)]
pub struct TlsPems {
    /// `ssl_ca`'s contents.
    pub ca: Option<Pem>,
    /// `ssl_cert` and `ssl_key`'s contents.
    pub identity: Option<(Pem, Pem)>,
}

/// A PEM file's contents.
pub type Pem = Arc<[u8]>;

impl std::fmt::Debug for MysqlTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlTarget")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_every_secret_is_redacted_longest_first() {
        let r = Redactor::new(["pw", "pw-longer", "tok\"en\\x", ""]);
        assert_eq!(
            r.redact("a pw-longer b pw c pwpw"),
            "a <redacted> b <redacted> c <redacted><redacted>"
        );
        // As quoted by `{:?}` and by JSON: the escaped form is matched too.
        let quoted = format!("{:?} {}", "tok\"en\\x", serde_json::json!("tok\"en\\x"));
        assert_eq!(r.redact(&quoted), "\"<redacted>\" \"<redacted>\"");
        assert_eq!(r.redact("nothing here"), "nothing here");
        assert_eq!(Redactor::default().redact("pw"), "pw");
        assert_eq!(format!("{r:?}"), "Redactor(4 patterns)");
    }
}
