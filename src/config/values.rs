//! The closed vocabularies of a config file: the enums the raw stage deserialises (an unknown
//! value is a parse error naming the accepted ones) and the checked config carries on.
//!
//! A leaf: it imports nothing from the config's section modules, so the raw stage and every
//! section can share these names without importing each other. Each prints exactly the name it
//! is written with in a config file.

use crate::readiness::ReadinessState;
use serde::Deserialize;

/// A probe kind's config name (`probe.kind`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum KindName {
    /// The MySQL/MariaDB writer probe.
    Mysql,
    /// The PostgreSQL writer probe.
    Postgres,
    /// A marked HTTP request.
    Http,
    /// An OTLP/HTTP export.
    Otlp,
    /// Resolve, connect and optionally TLS.
    Tcp,
}

/// Route 53 failover role of a branch (config names `PRIMARY`, `SECONDARY`, read
/// case-insensitively).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::EnumString,
)]
#[serde(try_from = "String")]
#[strum(serialize_all = "UPPERCASE", ascii_case_insensitive)]
pub enum Role {
    /// `PRIMARY` failover record.
    Primary,
    /// `SECONDARY` failover record.
    Secondary,
}

impl TryFrom<String> for Role {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse().map_err(|_| {
            format!("unknown role {s:?}; Route 53 failover roles are PRIMARY and SECONDARY")
        })
    }
}

impl Role {
    /// Route 53 spelling.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// TLS policy with MySQL's `--ssl-mode` meaning (config names `disabled`, `required`,
/// `verify_ca`, `verify_identity`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum SslMode {
    /// No TLS.
    Disabled,
    /// TLS required, certificate not checked.
    Required,
    /// TLS required, certificate must chain to `ssl_ca`; name not checked.
    VerifyCa,
    /// TLS required, certificate must chain to `ssl_ca` and be valid for the endpoint name.
    VerifyIdentity,
}

impl SslMode {
    /// Config name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Minimum TLS protocol version the `tls` step accepts (config names `"1.2"`, `"1.3"`; older
/// versions are not offered).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3.
    #[serde(rename = "1.2")]
    #[strum(serialize = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    #[strum(serialize = "1.3")]
    Tls13,
}

impl MinVersion {
    /// Config name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which address records the `resolve` step asks for.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AddressFamily {
    /// A, then AAAA when the name has no A record (default).
    #[default]
    Ipv4ThenIpv6,
    /// AAAA, then A when the name has no AAAA record.
    Ipv6ThenIpv4,
    /// A only.
    Ipv4,
    /// AAAA only.
    Ipv6,
}

/// A metric sink (config names `cloudwatch`, `emf`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum SinkKind {
    /// `PutMetricData` through the AWS SDK.
    CloudWatch,
    /// CloudWatch Embedded Metric Format JSON lines on stdout.
    Emf,
    /// OTLP/HTTP protobuf export to an OpenTelemetry collector (`[publish.otlp]`).
    Otlp,
}

/// `route53.insufficient_data_health_status`: the vocabulary's, spelled as the API does.
pub use crate::aws_vocab::InsufficientDataHealthStatus as HealthStatus;

/// A store's config name (`state.store`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum StoreName {
    /// A file in `state_dir`.
    #[default]
    File,
    /// An S3 object (`[state.s3]`).
    S3,
}

/// Whether a fired ready condition waits for an operator (`readiness.declare_ready.approval`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Approval {
    /// Ready when the condition holds.
    #[default]
    None,
    /// `pending_approval` until an operator approves.
    Required,
}

/// The state before any evidence (`readiness.initial`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum InitialState {
    /// Nothing is published until the evidence decides.
    #[default]
    Unknown,
    /// Publishes 1 from the start.
    Ready,
    /// Publishes 0 from the start.
    Unready,
}

impl From<InitialState> for ReadinessState {
    fn from(s: InitialState) -> Self {
        match s {
            InitialState::Unknown => ReadinessState::Unknown,
            InitialState::Ready => ReadinessState::Ready,
            InitialState::Unready => ReadinessState::Unready,
        }
    }
}
