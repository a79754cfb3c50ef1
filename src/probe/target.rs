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

/// A prepared mysql probe for one branch: settings plus the secret and TLS config read at start.
#[derive(Clone)]
pub struct MysqlTarget {
    /// Settings from the config.
    pub settings: MysqlProbe,
    /// The resolved password (never logged).
    pub password: String,
    /// rustls client configuration for the `tls` step (`None` when ssl_mode is disabled).
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

/// A prepared http probe: settings plus header secrets read at start-up.
#[derive(Clone)]
pub struct HttpTarget {
    pub settings: HttpProbe,
    /// Headers with secrets resolved (values never logged).
    pub headers: Vec<(http::HeaderName, String)>,
    /// rustls client configuration (`None` for plain HTTP).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("request", &self.settings.request)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A prepared otlp probe.
#[derive(Clone)]
pub struct OtlpTarget {
    pub settings: OtlpProbe,
    /// Headers with secrets resolved (values never logged).
    pub headers: Vec<(http::HeaderName, String)>,
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
