//! Configuration: strict TOML parsing (raw stage) and validation into [`Config`] (checked stage).
//!
//! Stage one deserialises into `Raw*` structs that reject unknown keys. Stage two resolves defaults
//! and checks the cross-field rules of the readiness contract (DESIGN.md): threshold ordering, a
//! window that can hold `min_attempts` at the probe interval, an attempt timeout shorter than the
//! interval, and a branch endpoint that is not the stable name. Every error names the file, the
//! line and the dotted key, and all errors are reported at once.

use crate::readiness::{Condition, Policy, ReadinessState};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// CloudWatch limit: a namespace is 1–255 characters.
const MAX_NAMESPACE_LEN: usize = 255;
/// CloudWatch limit: a dimension value is 1–1024 characters.
const MAX_DIMENSION_VALUE_LEN: usize = 1024;
/// Width of the `prober_id` and `branch` columns of the canary table (probes/mysql-canary.sql).
const MAX_CANARY_ID_LEN: usize = 64;

// ---------------------------------------------------------------------------------------------
// Raw stage
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    prober_id: Option<String>,
    state_dir: Option<PathBuf>,
    service: RawService,
    #[serde(default)]
    readiness: RawReadiness,
    #[serde(default)]
    publish: RawPublish,
    #[serde(default)]
    evidence: RawEvidence,
    #[serde(default)]
    state: RawState,
    #[serde(default)]
    dns: RawDns,
    probe: RawProbe,
    #[serde(default)]
    branch: Vec<RawBranch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: String,
    stable_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReadiness {
    window: Option<HumanDuration>,
    min_attempts: Option<u32>,
    declare_unready: Option<RawUnready>,
    declare_ready: Option<RawReady>,
    initial: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUnready {
    success_rate_below: Option<f64>,
    #[serde(rename = "for")]
    for_: Option<HumanDuration>,
    window: Option<HumanDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReady {
    success_rate_at_or_above: Option<f64>,
    #[serde(rename = "for")]
    for_: Option<HumanDuration>,
    window: Option<HumanDuration>,
    approval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPublish {
    interval: Option<HumanDuration>,
    namespace: Option<String>,
    sinks: Option<Vec<String>>,
    #[serde(default)]
    cloudwatch: RawCloudWatch,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCloudWatch {
    region: Option<String>,
    endpoint_url: Option<String>,
    operation_timeout: Option<HumanDuration>,
    max_attempts: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    store: Option<String>,
    poll_interval: Option<HumanDuration>,
    s3: Option<RawS3State>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawS3State {
    bucket: String,
    key_prefix: Option<String>,
    region: Option<String>,
    endpoint_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidence {
    path: Option<PathBuf>,
    max_size_mb: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDns {
    nameservers: Option<Vec<String>>,
    address_family: Option<String>,
    resolv_conf: Option<PathBuf>,
    timeout: Option<HumanDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    kind: String,
    interval: Option<HumanDuration>,
    timeout: Option<HumanDuration>,
    jitter: Option<HumanDuration>,
    #[serde(default)]
    step_timeout: RawStepTimeouts,
    mysql: Option<RawMysql>,
    tcp: Option<RawTcp>,
    http: Option<RawHttp>,
    otlp: Option<RawOtlp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOtlp {
    port: Option<u16>,
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    tls_min_version: Option<String>,
    path: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, RawHeaderValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    port: Option<u16>,
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    tls_min_version: Option<String>,
    method: Option<String>,
    path: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, RawHeaderValue>,
    body: Option<String>,
    expect_status: Option<Vec<u16>>,
    expect_body_contains: Option<String>,
    expect_json: Option<RawJsonExpect>,
    expect_header: Option<RawHeaderExpect>,
    verify: Option<RawHttpVerify>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawHeaderValue {
    Plain(String),
    Secret(RawSecretRef),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJsonExpect {
    pointer: String,
    equals: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderExpect {
    name: String,
    equals: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttpVerify {
    method: Option<String>,
    path: String,
    expect_status: Option<Vec<u16>>,
    expect_body_contains: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTcp {
    port: Option<u16>,
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    tls_min_version: Option<String>,
}

/// The TLS keys every kind shares.
struct RawTls {
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    tls_min_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStepTimeouts {
    resolve: Option<HumanDuration>,
    connect: Option<HumanDuration>,
    tls: Option<HumanDuration>,
    auth: Option<HumanDuration>,
    write: Option<HumanDuration>,
    verify: Option<HumanDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMysql {
    port: Option<u16>,
    user: String,
    password: RawSecret,
    database: Option<String>,
    table: Option<String>,
    ssl_mode: Option<String>,
    ssl_ca: Option<PathBuf>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    tls_min_version: Option<String>,
}

/// A secret reference, or anything else (an inline value), which validation refuses without
/// ever echoing it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawSecret {
    Ref(RawSecretRef),
    Inline(serde::de::IgnoredAny),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretRef {
    env: Option<String>,
    file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBranch {
    name: String,
    role: String,
    endpoint: String,
    port: Option<u16>,
}

/// A duration written as a string with a unit (`"500ms"`, `"5s"`, `"3m"`), parsed by humantime.
#[derive(Debug, Clone, Copy)]
struct HumanDuration(Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(HumanDuration).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration {s:?}: {e} (write a number and a unit, e.g. \"500ms\", \"5s\", \"3m\")"
            ))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Checked stage
// ---------------------------------------------------------------------------------------------

/// A validated configuration: defaults resolved, cross-field rules checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    /// This prober instance's id: the canary row key and the `prober` field of evidence.
    /// Default: the host name (an ECS task's host name is unique per task).
    pub prober_id: String,
    /// Directory of the readiness state file (`state-<service>-<prober_id>.json`). Default
    /// `state` beside the config file (relative paths resolve against the config's directory).
    pub state_dir: PathBuf,
    /// Where the shared control document (readiness, approvals, overrides) lives.
    pub state: StateCfg,
    /// The failed-over service.
    pub service: Service,
    /// The readiness policy shared by all branches.
    pub policy: Policy,
    /// Publishing settings.
    pub publish: Publish,
    /// Evidence JSON-lines file. Default `<state_dir>/evidence.jsonl`.
    pub evidence_path: PathBuf,
    /// Size at which the evidence file is rotated to `<path>.1`, bytes. Default 100 MiB.
    pub evidence_max_bytes: u64,
    /// DNS settings of the `resolve` step.
    pub dns: Dns,
    /// The probe run against every branch.
    pub probe: Probe,
    /// The branches, in config order.
    pub branches: Vec<Branch>,
    /// Non-fatal findings (e.g. a policy where one failure crosses a threshold).
    pub warnings: Vec<String>,
}

/// The shared state store.
#[derive(Debug, Clone)]
pub struct StateCfg {
    /// Which store.
    pub store: StoreKind,
    /// How often a running prober syncs with the store (saves its readiness, reads approvals
    /// and overrides). Default 10 s, capped at the publish interval.
    pub poll_interval: Duration,
}

/// A state store kind.
#[derive(Debug, Clone)]
pub enum StoreKind {
    /// `state_dir/control-<service>.json`.
    File,
    /// One S3 object.
    S3(S3State),
}

/// Settings of the S3 state store.
#[derive(Debug, Clone)]
pub struct S3State {
    /// Bucket.
    pub bucket: String,
    /// Key prefix (e.g. `readyprobe/`); the object is `<prefix>control-<service>.json`.
    pub key_prefix: String,
    /// Region; default from the AWS chain.
    pub region: Option<String>,
    /// Endpoint override (emulator, VPC endpoint); implies path-style addressing.
    pub endpoint_url: Option<String>,
}

/// The service being failed over.
#[derive(Debug, Clone)]
pub struct Service {
    /// Service name, the `Service` metric dimension (e.g. `orders-db`).
    pub name: String,
    /// The failover record name; branch probes never resolve it.
    pub stable_name: String,
}

/// Where and how readiness is published.
#[derive(Debug, Clone)]
pub struct Publish {
    /// Publish tick. Default 60 s (CloudWatch standard resolution).
    pub interval: Duration,
    /// CloudWatch namespace. Default `Readyprobe`.
    pub namespace: String,
    /// Metric sinks. Default `[emf]` (EMF JSON on stdout).
    pub sinks: Vec<SinkKind>,
    /// CloudWatch sink settings.
    pub cloudwatch: CloudWatch,
}

/// A metric sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// `PutMetricData` through the AWS SDK.
    CloudWatch,
    /// CloudWatch Embedded Metric Format JSON lines on stdout.
    Emf,
}

/// Settings of the CloudWatch sink.
#[derive(Debug, Clone)]
pub struct CloudWatch {
    /// Region; default from the AWS chain (`AWS_REGION`, profile, ECS metadata).
    pub region: Option<String>,
    /// Endpoint override (e.g. an emulator or a VPC interface endpoint).
    pub endpoint_url: Option<String>,
    /// Timeout of one `PutMetricData` try. Default 10 s, capped at the publish interval so one
    /// tick's publish never overlaps the next.
    pub operation_timeout: Duration,
    /// Tries per batch (first try included) for retryable failures (throttling, 5xx, timeouts,
    /// connection errors), all within the batch's publish window. Default 3.
    pub max_attempts: u32,
}

/// Settings of the `resolve` step.
#[derive(Debug, Clone)]
pub struct Dns {
    /// Explicit nameservers (`ip` or `ip:port`); `None` = read `resolv_conf`.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// resolv.conf path used when `nameservers` is absent. Default `/etc/resolv.conf`.
    pub resolv_conf: PathBuf,
    /// Timeout of one query to one nameserver. Default 1 s.
    pub timeout: Duration,
    /// Address records asked for. Default `ipv4_then_ipv6`.
    pub address_family: crate::probe::resolve::AddressFamily,
}

/// The probe run against each branch.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Time between attempt starts of one branch. Default 2 s.
    pub interval: Duration,
    /// Deadline of one whole attempt; must be shorter than `interval`. Default 80 % of the interval.
    pub timeout: Duration,
    /// Random delay added to each branch's first attempt, spreading branches apart. Default 10 %
    /// of the interval, at most 1 s.
    pub jitter: Duration,
    /// Per-step deadlines; each is also capped by what is left of the attempt deadline.
    pub step_timeouts: StepTimeouts,
    /// The kind-specific settings.
    pub kind: ProbeKind,
}

/// Per-step deadlines.
#[derive(Debug, Clone, Copy)]
pub struct StepTimeouts {
    /// `resolve` step deadline.
    pub resolve: Duration,
    /// `connect` step deadline.
    pub connect: Duration,
    /// `tls` step deadline.
    pub tls: Duration,
    /// `auth` step deadline.
    pub auth: Duration,
    /// `write` step deadline.
    pub write: Duration,
    /// `verify` step deadline.
    pub verify: Duration,
}

/// Kind-specific probe settings; one variant per probe kind.
#[derive(Debug, Clone)]
pub enum ProbeKind {
    /// The MySQL/MariaDB writer probe.
    Mysql(MysqlProbe),
    /// Resolve, connect and optionally TLS: a liveness-level probe.
    Tcp(TcpProbe),
    /// A marked HTTP request on the branch's write path, with checks and an optional read-back.
    Http(Box<HttpProbe>),
    /// An OTLP/HTTP export of one marked data point to a telemetry gateway.
    Otlp(OtlpProbe),
}

impl ProbeKind {
    /// The kind's config name.
    pub fn name(&self) -> &'static str {
        match self {
            ProbeKind::Mysql(_) => "mysql",
            ProbeKind::Tcp(_) => "tcp",
            ProbeKind::Http(_) => "http",
            ProbeKind::Otlp(_) => "otlp",
        }
    }
}

/// The TLS settings shared by the probe kinds (MySQL ssl-mode semantics).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// ssl-mode.
    pub ssl_mode: SslMode,
    /// CA bundle (required for `verify_ca`/`verify_identity`).
    pub ssl_ca: Option<PathBuf>,
    /// Client certificate and key, for servers that require one.
    pub client_identity: Option<crate::probe::tls::ClientIdentityFiles>,
    /// Minimum TLS version.
    pub tls_min_version: crate::probe::tls::MinVersion,
}

/// A header value: literal, or a secret by reference (never logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueSource {
    /// Literal text (may contain `{{...}}` template variables).
    Plain(String),
    /// Read at start-up.
    Secret(SecretRef),
}

/// One HTTP request of the `http` kind.
#[derive(Debug, Clone)]
pub struct HttpRequestSpec {
    /// Method, e.g. `POST`.
    pub method: http::Method,
    /// Path and query template, e.g. `/orders/{{marker}}`.
    pub path: String,
    /// Accepted status codes; empty = any 2xx.
    pub expect_status: Vec<u16>,
    /// Text (template) the body must contain.
    pub expect_body_contains: Option<String>,
}

/// Settings of the `http` probe kind: a marked request on the branch's real write path.
#[derive(Debug, Clone)]
pub struct HttpProbe {
    /// Port (default 443 with TLS, 80 without); a branch may override it.
    pub port: u16,
    /// TLS (`ssl_mode = "disabled"` for plain HTTP).
    pub tls: TlsSettings,
    /// The marked request (the `write` step).
    pub request: HttpRequestSpec,
    /// Request headers.
    pub headers: Vec<(http::HeaderName, HeaderValueSource)>,
    /// Body template, e.g. `{"canary": "{{marker}}"}`.
    pub body: Option<String>,
    /// JSON pointer (RFC 6901) in the response that must equal a template.
    pub expect_json: Option<(String, String)>,
    /// Response header that must equal a template (proves which branch answered).
    pub expect_header: Option<(http::HeaderName, String)>,
    /// Optional read-back request (the `verify` step).
    pub verify: Option<HttpRequestSpec>,
}

/// Settings of the `otlp` probe kind.
#[derive(Debug, Clone)]
pub struct OtlpProbe {
    /// Port (default 4318, OTLP/HTTP); a branch may override it.
    pub port: u16,
    /// TLS (`ssl_mode = "disabled"` for plain HTTP).
    pub tls: TlsSettings,
    /// Export path. Default `/v1/metrics`.
    pub path: String,
    /// Request headers (e.g. an auth token by reference).
    pub headers: Vec<(http::HeaderName, HeaderValueSource)>,
}

/// Settings of the `tcp` probe kind.
#[derive(Debug, Clone)]
pub struct TcpProbe {
    /// Default port; a branch may override it (one of the two is required).
    pub port: Option<u16>,
    /// TLS on the connection (`ssl_mode` default `disabled` for this kind).
    pub tls: TlsSettings,
}

/// Settings of the `mysql` probe kind.
#[derive(Debug, Clone)]
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
    /// MySQL ssl-mode semantics. Default `verify_identity`.
    pub ssl_mode: SslMode,
    /// PEM CA bundle that signs the server certificates (required for `verify_ca`/`verify_identity`).
    pub ssl_ca: Option<PathBuf>,
    /// Client certificate and key (MySQL `--ssl-cert` / `--ssl-key`) for a `REQUIRE X509` identity.
    pub client_identity: Option<crate::probe::tls::ClientIdentityFiles>,
    /// Minimum TLS version (`"1.2"` default, or `"1.3"`).
    pub tls_min_version: crate::probe::tls::MinVersion,
}

/// TLS policy with MySQL's `--ssl-mode` meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Config name (`disabled`, `required`, `verify_ca`, `verify_identity`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disabled => "disabled",
            SslMode::Required => "required",
            SslMode::VerifyCa => "verify_ca",
            SslMode::VerifyIdentity => "verify_identity",
        }
    }
}

/// A secret given by reference; the value itself never appears in config, logs or evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// Read from an environment variable (e.g. injected by ECS `secrets`).
    Env(String),
    /// Read from a file; one trailing newline is stripped.
    File(PathBuf),
}

impl SecretRef {
    /// Read the secret.
    ///
    /// # Errors
    /// [`SecretError`] naming the variable or file when it is unset, unreadable or empty.
    pub fn resolve(&self) -> Result<String, SecretError> {
        let value = match self {
            SecretRef::Env(var) => std::env::var(var).map_err(|_| SecretError {
                reference: self.to_string(),
                reason: "the environment variable is not set (or not valid UTF-8)".into(),
            })?,
            SecretRef::File(path) => {
                let mut v = std::fs::read_to_string(path).map_err(|e| SecretError {
                    reference: self.to_string(),
                    reason: e.to_string(),
                })?;
                if v.ends_with('\n') {
                    v.pop();
                    if v.ends_with('\r') {
                        v.pop();
                    }
                }
                v
            }
        };
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
        }
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

/// Route 53 failover role of a branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `PRIMARY` failover record.
    Primary,
    /// `SECONDARY` failover record.
    Secondary,
}

impl Role {
    /// Route 53 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "PRIMARY",
            Role::Secondary => "SECONDARY",
        }
    }
}

/// One failover branch.
#[derive(Debug, Clone)]
pub struct Branch {
    /// Branch name, the `Branch` metric dimension (e.g. `primary`).
    pub name: String,
    /// Route 53 failover role.
    pub role: Role,
    /// The branch-specific endpoint name, resolved on every attempt.
    pub endpoint: String,
    /// Server port.
    pub port: u16,
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    /// Dotted key path, e.g. `readiness.declare_ready.for` or `branch[1].endpoint`.
    pub key: String,
    /// 1-based line of the key in the file, when it appears there.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The problems, in file order where known.
    pub issues: Vec<Issue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.issues.len();
        write!(
            f,
            "{}: {n} error{}",
            self.path.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for i in &self.issues {
            match i.line {
                Some(l) => write!(
                    f,
                    "\n  {}:{l}: {}: {}",
                    self.path.display(),
                    i.key,
                    i.message
                )?,
                None => write!(f, "\n  {}: {}: {}", self.path.display(), i.key, i.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Read and validate a config file.
///
/// # Errors
/// [`ConfigError`] with every problem found: unreadable file, TOML syntax, unknown keys, wrong
/// types, bad durations and violated cross-field rules, each with line and key.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let fail = |message: String| ConfigError {
        path: path.to_owned(),
        issues: vec![Issue {
            key: "(file)".into(),
            line: None,
            message,
        }],
    };
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(fail("not a regular file".into()));
        }
        Ok(m) if m.len() > 1024 * 1024 => {
            return Err(fail("larger than 1 MiB; not a readyprobe config".into()));
        }
        _ => {}
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: path.to_owned(),
        issues: vec![Issue {
            key: "(file)".into(),
            line: None,
            message: format!("cannot read the config file: {e}"),
        }],
    })?;
    parse(path, &text)
}

/// Validate config text; `path` is used in messages and to resolve relative paths.
///
/// # Errors
/// As [`load`].
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        path: path.to_owned(),
        issues: vec![toml_issue(text, &e)],
    })?;
    let mut v = Validator {
        text,
        doc: toml_edit::Document::parse(text.to_owned()).ok(),
        issues: Vec::new(),
        warnings: Vec::new(),
    };
    let cfg = v.validate(path, raw);
    if let (true, Some(mut cfg)) = (v.issues.is_empty(), cfg) {
        cfg.warnings = v.warnings;
        Ok(cfg)
    } else {
        let mut issues = v.issues;
        issues.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
        Err(ConfigError {
            path: path.to_owned(),
            issues,
        })
    }
}

fn toml_issue(text: &str, e: &toml::de::Error) -> Issue {
    let msg = e.message().to_string();
    let (mut key, mut line) = match e.span() {
        Some(sp) => (key_at(text, sp.start), Some(line_of(text, sp.start))),
        None => (None, None),
    };
    // A missing field is reported on the table that lacks it (at the top: the whole file).
    if let Some(field) = between(&msg, "missing field `", "`") {
        let at_top = e.span().is_none_or(|sp| sp.start == 0);
        key = Some(match (at_top, key) {
            (true, _) | (_, None) => field.to_string(),
            (false, Some(k)) => {
                // On a `[table]` header line the table itself lacks the field.
                let on_header = e.span().is_some_and(|sp| {
                    text[sp.start.min(text.len())..]
                        .trim_start()
                        .starts_with('[')
                });
                if on_header {
                    format!("{k}.{field}")
                } else {
                    format!("{}.{field}", table_of(&k))
                }
            }
        });
        if at_top {
            line = None;
        }
    }
    // An unknown field inside an inline table is named by its own key.
    if let (Some(field), Some(k)) = (between(&msg, "unknown field `", "`"), &key)
        && !k.ends_with(field)
    {
        key = Some(format!("{k}.{field}"));
    }
    Issue {
        key: key.unwrap_or_else(|| "(syntax)".into()),
        line,
        message: msg,
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = s.find(start)? + start.len();
    let j = s[i..].find(end)? + i;
    Some(&s[i..j])
}

/// The table part of a dotted key (`probe.mysql.user` → `probe.mysql`).
fn table_of(key: &str) -> &str {
    key.rsplit_once('.').map(|(t, _)| t).unwrap_or(key)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Best-effort name of the key whose line contains `offset`: the table header in force (with
/// the index of an array-of-tables entry, e.g. `branch[1]`) plus the key at the start of that
/// line.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let line_no = line_of(text, offset);
    let mut table = String::new();
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("[[") {
            let name = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            table = format!("{name}[{n}]");
            *n += 1;
        } else if t.starts_with('[') {
            let name = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            // A sub-table of the last array entry, e.g. `[branch.tls]`, keeps its index.
            table = name;
        }
        if i + 1 == line_no {
            if t.starts_with('[') || t.starts_with('#') || t.is_empty() {
                return (!table.is_empty()).then(|| table.clone());
            }
            let k = t.split('=').next().unwrap_or("").trim();
            return Some(if table.is_empty() {
                k.to_string()
            } else if k.is_empty() {
                table.clone()
            } else {
                format!("{table}.{k}")
            });
        }
    }
    None
}

struct Validator<'a> {
    text: &'a str,
    doc: Option<toml_edit::Document<String>>,
    issues: Vec<Issue>,
    warnings: Vec<String>,
}

impl Validator<'_> {
    /// Line of a dotted key path (`a.b[1].c`) in the document, if present.
    fn line(&self, key: &str) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        let mut item: &toml_edit::Item = doc.as_item();
        let mut span = None;
        for part in key.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let (k, next) = item.as_table_like()?.get_key_value(name)?;
            span = k.span().or(span);
            item = next;
            if let Some(ix) = index {
                match item {
                    toml_edit::Item::ArrayOfTables(a) => {
                        let t = a.get(ix)?;
                        span = t.span().or(span);
                        // `[[branch]]` tables carry their span on the header.
                        return self.line_in_table(t, key, span);
                    }
                    toml_edit::Item::Value(toml_edit::Value::Array(a)) => {
                        let v = a.get(ix)?;
                        span = v.span().or(span);
                        return span.map(|s| line_of(self.text, s.start));
                    }
                    _ => return span.map(|s| line_of(self.text, s.start)),
                }
            }
        }
        span.map(|s| line_of(self.text, s.start))
    }

    fn line_in_table(
        &self,
        t: &toml_edit::Table,
        key: &str,
        header: Option<std::ops::Range<usize>>,
    ) -> Option<usize> {
        // The remainder after `name[ix].`
        let rest = key.split_once("].").map(|(_, r)| r);
        if let Some(rest) = rest {
            let mut item: Option<&toml_edit::Item> = None;
            let mut span = header.clone();
            let mut table_like: &dyn toml_edit::TableLike = t;
            for part in rest.split('.') {
                let Some((k, next)) = table_like.get_key_value(part) else {
                    break;
                };
                span = k.span().or(span);
                item = Some(next);
                match next.as_table_like() {
                    Some(tl) => table_like = tl,
                    None => break,
                }
            }
            let _ = item;
            return span.map(|s| line_of(self.text, s.start));
        }
        header.map(|s| line_of(self.text, s.start))
    }

    fn error(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let line = self.line(&key);
        self.issues.push(Issue {
            key,
            line,
            message: message.into(),
        });
    }

    fn validate(&mut self, path: &Path, raw: RawConfig) -> Option<Config> {
        let base = path.parent().unwrap_or(Path::new("."));
        let rel = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };

        // Service
        let service = Service {
            name: raw.service.name.trim().to_string(),
            stable_name: normalise_name(&raw.service.stable_name),
        };
        self.check_dimension("service.name", &service.name);
        if service.stable_name.is_empty() {
            self.error("service.stable_name", "must be the failover record name");
        }

        let prober_id = raw.prober_id.unwrap_or_else(default_prober_id);
        if let Err(msg) = check_prober_id(&prober_id) {
            self.error("prober_id", msg);
        }
        let state_dir = rel(raw.state_dir.unwrap_or_else(|| PathBuf::from("state")));
        let evidence_mb = raw.evidence.max_size_mb.unwrap_or(100);
        if !(1..=1_048_576).contains(&evidence_mb) {
            self.error("evidence.max_size_mb", "must be 1–1048576 (MiB)");
        }
        let evidence_max_bytes = evidence_mb.clamp(1, 1_048_576) * 1024 * 1024;
        let evidence_path = raw
            .evidence
            .path
            .map(&rel)
            .unwrap_or_else(|| state_dir.join("evidence.jsonl"));

        // Probe
        let interval = raw
            .probe
            .interval
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(2));
        if interval < Duration::from_millis(100) {
            self.error("probe.interval", "must be at least 100ms");
        }
        let timeout = raw.probe.timeout.map(|d| d.0).unwrap_or(interval * 4 / 5);
        if timeout >= interval {
            self.error(
                "probe.timeout",
                format!(
                    "the attempt timeout ({}) must be shorter than probe.interval ({}) so that at most one attempt per branch is in flight",
                    fmt_dur(timeout),
                    fmt_dur(interval)
                ),
            );
        }
        if timeout.is_zero() {
            self.error("probe.timeout", "must be greater than 0");
        }
        let jitter = raw
            .probe
            .jitter
            .map(|d| d.0)
            .unwrap_or_else(|| (interval / 10).min(Duration::from_secs(1)));
        if jitter >= interval {
            self.error("probe.jitter", "must be shorter than probe.interval");
        }
        let st = &raw.probe.step_timeout;
        let step = |d: Option<HumanDuration>| d.map(|d| d.0).unwrap_or(timeout);
        let step_timeouts = StepTimeouts {
            resolve: step(st.resolve),
            connect: step(st.connect),
            tls: step(st.tls),
            auth: step(st.auth),
            write: step(st.write),
            verify: step(st.verify),
        };
        for (k, d) in [
            ("resolve", st.resolve),
            ("connect", st.connect),
            ("tls", st.tls),
            ("auth", st.auth),
            ("write", st.write),
            ("verify", st.verify),
        ] {
            if let Some(d) = d {
                if d.0.is_zero() {
                    self.error(format!("probe.step_timeout.{k}"), "must be greater than 0");
                } else if d.0 > timeout {
                    self.warnings.push(format!(
                        "probe.step_timeout.{k} ({}) is longer than probe.timeout ({}); the attempt deadline applies first",
                        fmt_dur(d.0),
                        fmt_dur(timeout)
                    ));
                }
            }
        }

        if raw.probe.kind != "mysql" && raw.probe.mysql.is_some() {
            self.error(
                "probe.mysql",
                format!("is set but probe.kind is {:?}", raw.probe.kind),
            );
        }
        if raw.probe.kind != "otlp" && raw.probe.otlp.is_some() {
            self.error(
                "probe.otlp",
                format!("is set but probe.kind is {:?}", raw.probe.kind),
            );
        }
        if raw.probe.kind != "http" && raw.probe.http.is_some() {
            self.error(
                "probe.http",
                format!("is set but probe.kind is {:?}", raw.probe.kind),
            );
        }
        if raw.probe.kind != "tcp" && raw.probe.tcp.is_some() {
            self.error(
                "probe.tcp",
                format!("is set but probe.kind is {:?}", raw.probe.kind),
            );
        }
        let kind = match raw.probe.kind.as_str() {
            "mysql" => match raw.probe.mysql {
                Some(m) => self.mysql(m, &rel).map(ProbeKind::Mysql),
                None => {
                    self.error(
                        "probe.kind",
                        "kind \"mysql\" needs a [probe.mysql] table (user, password, ...)",
                    );
                    None
                }
            },
            "http" => match raw.probe.http {
                Some(h) => self.http(h, &rel).map(|h| ProbeKind::Http(Box::new(h))),
                None => {
                    self.error(
                        "probe.kind",
                        "kind \"http\" needs a [probe.http] table (at least `path`)",
                    );
                    None
                }
            },
            "otlp" => match raw.probe.otlp {
                Some(o) => self.otlp(o, &rel).map(ProbeKind::Otlp),
                None => {
                    self.error("probe.kind", "kind \"otlp\" needs a [probe.otlp] table");
                    None
                }
            },
            "tcp" => match raw.probe.tcp {
                Some(t) => self.tcp(t, &rel).map(ProbeKind::Tcp),
                None => {
                    self.error(
                        "probe.kind",
                        "kind \"tcp\" needs a [probe.tcp] table (at least `port` or a port per branch)",
                    );
                    None
                }
            },
            other => {
                self.error(
                    "probe.kind",
                    format!(
                        "unknown probe kind {other:?}; supported: \"mysql\", \"http\", \"otlp\", \"tcp\""
                    ),
                );
                None
            }
        };
        let default_port = match &kind {
            Some(ProbeKind::Mysql(m)) => Some(m.port),
            Some(ProbeKind::Tcp(t)) => t.port,
            Some(ProbeKind::Http(h)) => Some(h.port),
            Some(ProbeKind::Otlp(o)) => Some(o.port),
            None => Some(3306),
        };

        // Branches
        if raw.branch.is_empty() {
            self.error(
                "branch",
                "at least one [[branch]] is required (usually a PRIMARY and a SECONDARY)",
            );
        }
        let mut branches = Vec::new();
        let mut names = BTreeSet::new();
        let mut roles = BTreeSet::new();
        for (i, b) in raw.branch.into_iter().enumerate() {
            let name = b.name.trim().to_string();
            self.check_dimension(&format!("branch[{i}].name"), &name);
            if name.len() > MAX_CANARY_ID_LEN {
                self.error(
                    format!("branch[{i}].name"),
                    format!(
                        "must be at most {MAX_CANARY_ID_LEN} characters (canary table column width)"
                    ),
                );
            }
            if !names.insert(name.clone()) {
                self.error(
                    format!("branch[{i}].name"),
                    format!("duplicate branch name {name:?}"),
                );
            }
            let role = match b.role.to_ascii_uppercase().as_str() {
                "PRIMARY" => Some(Role::Primary),
                "SECONDARY" => Some(Role::Secondary),
                _ => {
                    self.error(
                        format!("branch[{i}].role"),
                        format!(
                            "unknown role {:?}; Route 53 failover roles are PRIMARY and SECONDARY",
                            b.role
                        ),
                    );
                    None
                }
            };
            if let Some(r) = role
                && !roles.insert(r.as_str())
            {
                self.error(
                    format!("branch[{i}].role"),
                    format!(
                        "a second {} branch; a failover record set has one of each",
                        r.as_str()
                    ),
                );
            }
            let endpoint = normalise_name(&b.endpoint);
            if b.port == Some(0) {
                self.error(format!("branch[{i}].port"), "must be 1–65535");
            }
            if endpoint.is_empty() {
                self.error(format!("branch[{i}].endpoint"), "must not be empty");
            } else if let Err(why) = check_hostname(&endpoint) {
                self.error(format!("branch[{i}].endpoint"), why);
            } else if endpoint.eq_ignore_ascii_case(&service.stable_name) {
                self.error(
                    format!("branch[{i}].endpoint"),
                    format!(
                        "{endpoint:?} is the service's stable name; a branch probe must use its branch-specific name, or it would measure whatever Route 53 answers (a circular control loop)"
                    ),
                );
            }
            let port = b.port.or(default_port);
            if port.is_none() && kind.is_some() {
                self.error(
                    format!("branch[{i}].port"),
                    "no port: set it here or in [probe.tcp]",
                );
            }
            if let (Some(r), Some(port)) = (role, port) {
                branches.push(Branch {
                    name,
                    role: r,
                    endpoint,
                    port,
                });
            }
        }

        let policy = self.policy(&raw.readiness, interval);

        // Publish
        let publish_interval = raw
            .publish
            .interval
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(60));
        if publish_interval < Duration::from_secs(1) {
            self.error("publish.interval", "must be at least 1s");
        }
        let namespace = raw.publish.namespace.unwrap_or_else(|| "Readyprobe".into());
        if namespace.is_empty()
            || namespace.len() > MAX_NAMESPACE_LEN
            || namespace.starts_with("AWS/")
            || namespace.starts_with(':')
            || !namespace.is_ascii()
        {
            self.error(
                "publish.namespace",
                "CloudWatch namespaces are 1–255 ASCII characters, must not start with \"AWS/\" or ':'",
            );
        }
        let mut sinks = Vec::new();
        for (i, s) in raw
            .publish
            .sinks
            .unwrap_or_else(|| vec!["emf".into()])
            .iter()
            .enumerate()
        {
            match s.as_str() {
                "emf" => sinks.push(SinkKind::Emf),
                "cloudwatch" => sinks.push(SinkKind::CloudWatch),
                other => self.error(
                    format!("publish.sinks[{i}]"),
                    format!("unknown sink {other:?}; supported: \"cloudwatch\", \"emf\""),
                ),
            }
        }
        if sinks.is_empty()
            && self
                .issues
                .iter()
                .all(|i| !i.key.starts_with("publish.sinks"))
        {
            self.error(
                "publish.sinks",
                "lists no sink; readiness would be published nowhere (use \"emf\" and/or \"cloudwatch\")",
            );
        }
        let mut seen = Vec::new();
        sinks.retain(|k| {
            let first = !seen.contains(k);
            seen.push(*k);
            first
        });
        let cw = raw.publish.cloudwatch;
        let op_timeout = cw
            .operation_timeout
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(10))
            .min(publish_interval);
        let max_attempts = cw.max_attempts.unwrap_or(3);
        if max_attempts == 0 || max_attempts > 10 {
            self.error("publish.cloudwatch.max_attempts", "must be 1–10");
        }
        if sinks.contains(&SinkKind::CloudWatch) && publish_interval < Duration::from_secs(60) {
            self.warnings.push(format!(
                "publish.interval is {}; CloudWatch standard resolution stores one value per 60 s, so a shorter tick only adds samples to the same minute",
                fmt_dur(publish_interval)
            ));
        }

        // State store
        let poll_interval = raw
            .state
            .poll_interval
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(10))
            .min(publish_interval);
        if poll_interval < Duration::from_millis(100) {
            self.error("state.poll_interval", "must be at least 100ms");
        }
        let store = match (raw.state.store.as_deref().unwrap_or("file"), raw.state.s3) {
            ("file", None) => Some(StoreKind::File),
            ("file", Some(_)) => {
                self.error(
                    "state.s3",
                    "is set but state.store is \"file\"; set store = \"s3\" or remove [state.s3]",
                );
                None
            }
            ("s3", Some(s3)) => {
                if s3.bucket.is_empty() {
                    self.error("state.s3.bucket", "must name a bucket");
                }
                let key_prefix = s3.key_prefix.unwrap_or_else(|| "readyprobe/".into());
                Some(StoreKind::S3(S3State {
                    bucket: s3.bucket,
                    key_prefix,
                    region: s3.region,
                    endpoint_url: s3.endpoint_url,
                }))
            }
            ("s3", None) => {
                self.error(
                    "state.store",
                    "\"s3\" needs a [state.s3] table with a bucket",
                );
                None
            }
            (other, _) => {
                self.error(
                    "state.store",
                    format!("unknown store {other:?}; supported: \"file\", \"s3\""),
                );
                None
            }
        };

        // DNS
        let mut nameservers = None;
        if let Some(list) = raw.dns.nameservers {
            let mut out = Vec::new();
            for (i, ns) in list.iter().enumerate() {
                match parse_nameserver(ns) {
                    Some(a) if a.port() == 0 => self.error(
                        format!("dns.nameservers[{i}]"),
                        format!("{ns:?}: port 0 is not a nameserver port"),
                    ),
                    Some(a) => out.push(a),
                    None => self.error(
                        format!("dns.nameservers[{i}]"),
                        format!("{ns:?} is not an IP address or IP:port"),
                    ),
                }
            }
            if out.is_empty() {
                self.error(
                    "dns.nameservers",
                    "must list at least one nameserver (or remove the key to use resolv.conf)",
                );
            }
            nameservers = Some(out);
        }
        use crate::probe::resolve::AddressFamily as Af;
        let address_family = match raw
            .dns
            .address_family
            .as_deref()
            .unwrap_or("ipv4_then_ipv6")
        {
            "ipv4_then_ipv6" => Af::Ipv4ThenIpv6,
            "ipv6_then_ipv4" => Af::Ipv6ThenIpv4,
            "ipv4" => Af::Ipv4,
            "ipv6" => Af::Ipv6,
            other => {
                self.error(
                    "dns.address_family",
                    format!("unknown {other:?}; use ipv4_then_ipv6, ipv6_then_ipv4, ipv4 or ipv6"),
                );
                Af::Ipv4ThenIpv6
            }
        };
        let dns = Dns {
            address_family,
            nameservers,
            resolv_conf: raw
                .dns
                .resolv_conf
                .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
            timeout: raw
                .dns
                .timeout
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(1)),
        };

        if !self.issues.is_empty() {
            return None;
        }
        Some(Config {
            source: path.to_owned(),
            prober_id,
            state_dir,
            state: StateCfg {
                store: store?,
                poll_interval,
            },
            service,
            policy: policy?,
            publish: Publish {
                interval: publish_interval,
                namespace,
                sinks,
                cloudwatch: CloudWatch {
                    region: cw.region,
                    endpoint_url: cw.endpoint_url,
                    operation_timeout: op_timeout,
                    max_attempts,
                },
            },
            evidence_path,
            evidence_max_bytes,
            dns,
            probe: Probe {
                interval,
                timeout,
                jitter,
                step_timeouts,
                kind: kind?,
            },
            branches,
            warnings: Vec::new(),
        })
    }

    fn check_dimension(&mut self, key: &str, value: &str) {
        if value.is_empty() || value.len() > MAX_DIMENSION_VALUE_LEN {
            self.error(
                key,
                "must be 1–1024 characters (it is a CloudWatch dimension value)",
            );
        }
    }

    /// The TLS keys shared by the probe kinds (`ssl_mode`, `ssl_ca`, `ssl_cert`, `ssl_key`,
    /// `tls_min_version`), validated under `prefix` (e.g. `probe.mysql`).
    fn tls(
        &mut self,
        prefix: &str,
        raw: RawTls,
        rel: &dyn Fn(PathBuf) -> PathBuf,
    ) -> Option<TlsSettings> {
        let ssl_mode = match raw.ssl_mode.as_deref().unwrap_or("verify_identity") {
            "disabled" => Some(SslMode::Disabled),
            "required" => Some(SslMode::Required),
            "verify_ca" => Some(SslMode::VerifyCa),
            "verify_identity" => Some(SslMode::VerifyIdentity),
            other => {
                self.error(
                    format!("{prefix}.ssl_mode"),
                    format!(
                        "unknown ssl_mode {other:?}; MySQL ssl-mode values: disabled, required, verify_ca, verify_identity"
                    ),
                );
                None
            }
        };
        let ssl_ca = raw.ssl_ca.map(rel);
        if matches!(ssl_mode, Some(SslMode::VerifyCa | SslMode::VerifyIdentity)) {
            match &ssl_ca {
                None => self.error(
                    format!("{prefix}.ssl_ca"),
                    format!(
                        "ssl_mode {} needs ssl_ca, the PEM bundle of the CA that signs the server certificates",
                        ssl_mode.map(SslMode::as_str).unwrap_or_default()
                    ),
                ),
                Some(p) if !p.is_file() => self.error(
                    format!("{prefix}.ssl_ca"),
                    format!("{} is not a readable file", p.display()),
                ),
                Some(_) => {}
            }
        }
        if ssl_mode == Some(SslMode::Disabled) {
            self.warnings.push(format!(
                "{prefix}.ssl_mode is \"disabled\": the probe does not exercise TLS, which the application may depend on"
            ));
        }
        let tls_min_version = match raw.tls_min_version.as_deref().unwrap_or("1.2") {
            "1.2" => crate::probe::tls::MinVersion::Tls12,
            "1.3" => crate::probe::tls::MinVersion::Tls13,
            other => {
                self.error(
                    format!("{prefix}.tls_min_version"),
                    format!(
                        "unsupported {other:?}; use \"1.2\" or \"1.3\" (older versions are not offered)"
                    ),
                );
                crate::probe::tls::MinVersion::Tls12
            }
        };
        let client_identity = match (raw.ssl_cert, raw.ssl_key) {
            (None, None) => None,
            (Some(c), Some(k)) => {
                let (c, k) = (rel(c), rel(k));
                for (key, p) in [("ssl_cert", &c), ("ssl_key", &k)] {
                    if !p.is_file() {
                        self.error(
                            format!("{prefix}.{key}"),
                            format!("{} is not a readable file", p.display()),
                        );
                    }
                }
                if ssl_mode == Some(SslMode::Disabled) {
                    self.error(
                        format!("{prefix}.ssl_cert"),
                        "a client certificate needs TLS; ssl_mode is \"disabled\"",
                    );
                }
                Some(crate::probe::tls::ClientIdentityFiles { cert: c, key: k })
            }
            (Some(_), None) => {
                self.error(
                    format!("{prefix}.ssl_key"),
                    "ssl_cert is set: give its key too",
                );
                None
            }
            (None, Some(_)) => {
                self.error(
                    format!("{prefix}.ssl_cert"),
                    "ssl_key is set: give its certificate too",
                );
                None
            }
        };
        Some(TlsSettings {
            ssl_mode: ssl_mode?,
            ssl_ca,
            client_identity,
            tls_min_version,
        })
    }

    fn mysql(&mut self, m: RawMysql, rel: &dyn Fn(PathBuf) -> PathBuf) -> Option<MysqlProbe> {
        let (env, file) = match m.password {
            RawSecret::Ref(r) => (r.env, r.file),
            RawSecret::Inline(_) => (None, None),
        };
        let password = match (env, file) {
            (Some(v), None) if !v.is_empty() => Some(SecretRef::Env(v)),
            (None, Some(f)) if !f.as_os_str().is_empty() => Some(SecretRef::File(rel(f))),
            _ => {
                self.error(
                    "probe.mysql.password",
                    "give exactly one reference: { env = \"VAR\" } or { file = \"/run/secrets/x\" } (secrets are never written inline)",
                );
                None
            }
        };
        let tls = self.tls(
            "probe.mysql",
            RawTls {
                ssl_mode: m.ssl_mode,
                ssl_ca: m.ssl_ca,
                ssl_cert: m.ssl_cert,
                ssl_key: m.ssl_key,
                tls_min_version: m.tls_min_version,
            },
            rel,
        );
        let ident_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let database = m.database.unwrap_or_else(|| "readyprobe".into());
        if !ident_ok(&database) {
            self.error(
                "probe.mysql.database",
                "must be 1–64 characters of [A-Za-z0-9_]",
            );
        }
        let table = m.table.unwrap_or_else(|| "canary".into());
        if !ident_ok(&table) {
            self.error(
                "probe.mysql.table",
                "must be 1–64 characters of [A-Za-z0-9_]",
            );
        }
        if m.user.is_empty() {
            self.error("probe.mysql.user", "must not be empty");
        }
        if m.port == Some(0) {
            self.error("probe.mysql.port", "must be 1–65535");
        }
        let tls = tls?;
        Some(MysqlProbe {
            port: m.port.unwrap_or(3306),
            user: m.user,
            password: password?,
            database,
            table,
            ssl_mode: tls.ssl_mode,
            ssl_ca: tls.ssl_ca,
            client_identity: tls.client_identity,
            tls_min_version: tls.tls_min_version,
        })
    }

    fn request_spec(
        &mut self,
        prefix: &str,
        method: Option<String>,
        path: String,
        expect_status: Option<Vec<u16>>,
        expect_body_contains: Option<String>,
        default_method: &str,
    ) -> Option<HttpRequestSpec> {
        let m = method.unwrap_or_else(|| default_method.into());
        let method = match http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()) {
            Ok(x) => Some(x),
            Err(_) => {
                self.error(
                    format!("{prefix}.method"),
                    format!("{m:?} is not an HTTP method"),
                );
                None
            }
        };
        if !path.starts_with('/') {
            self.error(
                format!("{prefix}.path"),
                "must start with '/' (the host is the branch's endpoint)",
            );
        } else {
            // Rendered with a sample marker, it must be a valid request target.
            let sample = path
                .replace("{{marker}}", "0123456789abcdef0123456789abcdef")
                .replace("{{seq}}", "1")
                .replace("{{prober_id}}", "p")
                .replace("{{branch}}", "b")
                .replace("{{endpoint}}", "e.example");
            if sample.parse::<http::uri::PathAndQuery>().is_err() {
                self.error(
                    format!("{prefix}.path"),
                    "is not a valid request path (spaces and other characters must be percent-encoded)",
                );
            }
        }
        let expect_status = expect_status.unwrap_or_default();
        if expect_status.iter().any(|c| !(100..=599).contains(c)) {
            self.error(
                format!("{prefix}.expect_status"),
                "status codes are 100–599",
            );
        }
        Some(HttpRequestSpec {
            method: method?,
            path,
            expect_status,
            expect_body_contains,
        })
    }

    fn headers(
        &mut self,
        prefix: &str,
        raw: std::collections::BTreeMap<String, RawHeaderValue>,
        rel: &dyn Fn(PathBuf) -> PathBuf,
    ) -> Vec<(http::HeaderName, HeaderValueSource)> {
        let mut headers = Vec::new();
        for (name, v) in raw {
            let Ok(hn) = http::HeaderName::from_bytes(name.as_bytes()) else {
                self.error(
                    format!("{prefix}.headers.{name}"),
                    "is not a valid header name",
                );
                continue;
            };
            const SENSITIVE: [&str; 5] = [
                "authorization",
                "proxy-authorization",
                "cookie",
                "x-api-key",
                "x-auth-token",
            ];
            match v {
                RawHeaderValue::Plain(_) if SENSITIVE.contains(&hn.as_str()) => self.error(
                    format!("{prefix}.headers.{name}"),
                    "carries a credential: give it by reference, { env = \"VAR\" } or { file = \"/run/secrets/x\" } (the inline value is not shown)",
                ),
                RawHeaderValue::Plain(p) if http::HeaderValue::from_str(&p).is_err() => self.error(
                    format!("{prefix}.headers.{name}"),
                    "is not a valid header value (control characters such as CR/LF are not allowed)",
                ),
                RawHeaderValue::Plain(p) => headers.push((hn, HeaderValueSource::Plain(p))),
                RawHeaderValue::Secret(r) => match (r.env, r.file) {
                    (Some(e), None) if !e.is_empty() => {
                        headers.push((hn, HeaderValueSource::Secret(SecretRef::Env(e))))
                    }
                    (None, Some(f)) if !f.as_os_str().is_empty() => {
                        headers.push((hn, HeaderValueSource::Secret(SecretRef::File(rel(f)))))
                    }
                    _ => self.error(
                        format!("{prefix}.headers.{name}"),
                        "a secret header value is { env = \"VAR\" } or { file = \"/path\" }",
                    ),
                },
            }
        }
        headers
    }

    fn otlp(&mut self, o: RawOtlp, rel: &dyn Fn(PathBuf) -> PathBuf) -> Option<OtlpProbe> {
        let tls = self.tls(
            "probe.otlp",
            RawTls {
                ssl_mode: o.ssl_mode,
                ssl_ca: o.ssl_ca,
                ssl_cert: o.ssl_cert,
                ssl_key: o.ssl_key,
                tls_min_version: o.tls_min_version,
            },
            rel,
        );
        if o.port == Some(0) {
            self.error("probe.otlp.port", "must be 1–65535");
        }
        let path = o.path.unwrap_or_else(|| "/v1/metrics".into());
        if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
            self.error(
                "probe.otlp.path",
                "must be a valid request path starting with '/' (percent-encode other characters)",
            );
        }
        let headers = self.headers("probe.otlp", o.headers, rel);
        Some(OtlpProbe {
            port: o.port.unwrap_or(4318),
            tls: tls?,
            path,
            headers,
        })
    }

    fn http(&mut self, h: RawHttp, rel: &dyn Fn(PathBuf) -> PathBuf) -> Option<HttpProbe> {
        let tls = self.tls(
            "probe.http",
            RawTls {
                ssl_mode: h.ssl_mode,
                ssl_ca: h.ssl_ca,
                ssl_cert: h.ssl_cert,
                ssl_key: h.ssl_key,
                tls_min_version: h.tls_min_version,
            },
            rel,
        );
        if h.port == Some(0) {
            self.error("probe.http.port", "must be 1–65535");
        }
        let request = self.request_spec(
            "probe.http",
            h.method,
            h.path,
            h.expect_status,
            h.expect_body_contains,
            "POST",
        );
        let headers = self.headers("probe.http", h.headers, rel);
        let expect_header = match h.expect_header {
            Some(e) => match http::HeaderName::from_bytes(e.name.as_bytes()) {
                Ok(n) => Some((n, e.equals)),
                Err(_) => {
                    self.error(
                        "probe.http.expect_header",
                        "name is not a valid header name",
                    );
                    None
                }
            },
            None => None,
        };
        if let Some(j) = &h.expect_json
            && !(j.pointer.is_empty() || j.pointer.starts_with('/'))
        {
            self.error(
                "probe.http.expect_json.pointer",
                "a JSON pointer (RFC 6901) is empty or starts with '/'",
            );
        }
        let verify = match h.verify {
            Some(v) => self.request_spec(
                "probe.http.verify",
                v.method,
                v.path,
                v.expect_status,
                v.expect_body_contains,
                "GET",
            ),
            None => None,
        };
        let tls = tls?;
        let port = h.port.unwrap_or(if tls.ssl_mode == SslMode::Disabled {
            80
        } else {
            443
        });
        Some(HttpProbe {
            port,
            tls,
            request: request?,
            headers,
            body: h.body,
            expect_json: h.expect_json.map(|j| (j.pointer, j.equals)),
            expect_header,
            verify,
        })
    }

    fn tcp(&mut self, t: RawTcp, rel: &dyn Fn(PathBuf) -> PathBuf) -> Option<TcpProbe> {
        if t.port == Some(0) {
            self.error("probe.tcp.port", "must be 1–65535");
        }
        let tls = self.tls(
            "probe.tcp",
            RawTls {
                ssl_mode: Some(t.ssl_mode.unwrap_or_else(|| "disabled".into())),
                ssl_ca: t.ssl_ca,
                ssl_cert: t.ssl_cert,
                ssl_key: t.ssl_key,
                tls_min_version: t.tls_min_version,
            },
            rel,
        );
        self.warnings.push(
            "probe.kind \"tcp\" is a liveness-level probe: it proves the port answers (and TLS, if enabled), not that the branch can do its job; prefer a kind that exercises the real write path".into(),
        );
        Some(TcpProbe {
            port: t.port,
            tls: tls?,
        })
    }

    fn policy(&mut self, r: &RawReadiness, interval: Duration) -> Option<Policy> {
        let window = r.window.map(|d| d.0).unwrap_or(Duration::from_secs(60));
        let min_attempts = r.min_attempts.unwrap_or(10);
        if min_attempts == 0 {
            self.error("readiness.min_attempts", "must be at least 1");
        }
        let (u_thr, u_for, u_win) = match &r.declare_unready {
            Some(u) => (u.success_rate_below, u.for_, u.window),
            None => (None, None, None),
        };
        let unready = Condition {
            threshold_percent: u_thr.unwrap_or(95.0),
            for_: u_for.map(|d| d.0).unwrap_or(Duration::from_secs(180)),
            window: u_win.map(|d| d.0).unwrap_or(window),
        };
        let (r_thr, r_for, r_win, approval) = match &r.declare_ready {
            Some(x) => (
                x.success_rate_at_or_above,
                x.for_,
                x.window,
                x.approval.clone(),
            ),
            None => (None, None, None, None),
        };
        let ready = Condition {
            threshold_percent: r_thr.unwrap_or(99.0),
            for_: r_for.map(|d| d.0).unwrap_or(Duration::from_secs(600)),
            window: r_win.map(|d| d.0).unwrap_or(window),
        };
        let approval_required = match approval.as_deref().unwrap_or("none") {
            "required" => true,
            "none" => false,
            other => {
                self.error(
                    "readiness.declare_ready.approval",
                    format!("unknown value {other:?}; use \"required\" or \"none\""),
                );
                false
            }
        };
        let initial = match r.initial.as_deref().unwrap_or("unknown") {
            "unknown" => ReadinessState::Unknown,
            "ready" => ReadinessState::Ready,
            "unready" => ReadinessState::Unready,
            other => {
                self.error(
                    "readiness.initial",
                    format!("unknown value {other:?}; use \"unknown\", \"ready\" or \"unready\""),
                );
                ReadinessState::Unknown
            }
        };
        if approval_required && initial == ReadinessState::Ready {
            self.warnings.push(
                "readiness.initial is \"ready\" while declare_ready.approval is \"required\": a fresh start publishes 1 without any approval".into(),
            );
        }
        for (key, thr) in [
            (
                "readiness.declare_unready.success_rate_below",
                unready.threshold_percent,
            ),
            (
                "readiness.declare_ready.success_rate_at_or_above",
                ready.threshold_percent,
            ),
        ] {
            if !(0.0..=100.0).contains(&thr) || !thr.is_finite() {
                self.error(key, "is a percentage: 0–100");
            }
        }
        if unready.threshold_percent <= 0.0 {
            self.warnings.push(
                "readiness.declare_unready.success_rate_below is 0: no success rate is below it, so a branch is never declared unready".into(),
            );
        }
        if ready.threshold_percent < unready.threshold_percent {
            self.error(
                "readiness.declare_ready.success_rate_at_or_above",
                format!(
                    "the ready threshold ({}%) is below the unready threshold ({}%): a branch could be declared ready at a rate that declares it unready",
                    ready.threshold_percent, unready.threshold_percent
                ),
            );
        }
        for (key, c, name) in [
            ("readiness.declare_unready", &unready, "unready"),
            ("readiness.declare_ready", &ready, "ready"),
        ] {
            let wkey =
                if (name == "unready" && u_win.is_some()) || (name == "ready" && r_win.is_some()) {
                    format!("{key}.window")
                } else {
                    "readiness.window".to_string()
                };
            let fits = attempts_in(c.window, interval);
            if fits < u64::from(min_attempts) {
                self.error(
                    wkey,
                    format!(
                        "a {} window holds at most {fits} attempts at probe.interval {}, fewer than readiness.min_attempts ({min_attempts}): the {name} condition could never hold",
                        fmt_dur(c.window),
                        fmt_dur(interval)
                    ),
                );
            } else if fits > 0 {
                let one_fail = (fits - 1) as f64 / fits as f64 * 100.0;
                let crosses = one_fail < c.threshold_percent;
                if crosses {
                    self.warnings.push(format!(
                        "{key}: one failure among {fits} attempts in the {} window gives {one_fail:.1}%, which {} the {}% threshold",
                        fmt_dur(c.window),
                        if name == "unready" { "already falls below" } else { "already misses" },
                        c.threshold_percent
                    ));
                }
            }
        }
        Some(Policy {
            min_attempts,
            declare_unready: unready,
            declare_ready: ready,
            approval_required,
            initial,
        })
    }
}

/// How many attempts finish in `window` at one attempt per `interval` (at least).
pub fn attempts_in(window: Duration, interval: Duration) -> u64 {
    if interval.is_zero() {
        return 0;
    }
    (window.as_millis() / interval.as_millis().max(1)) as u64
}

/// What one failed attempt does to a condition's success rate, as a sentence for `check`.
pub fn one_failure_effect(c: &Condition, interval: Duration, unready: bool) -> String {
    let n = attempts_in(c.window, interval);
    if n == 0 {
        return "window holds no attempt".into();
    }
    let rate = (n - 1) as f64 / n as f64 * 100.0;
    let crosses = rate < c.threshold_percent;
    let verdict = match (unready, crosses) {
        (true, true) => "below the threshold: a single failure starts the unready `for` clock",
        (true, false) => "still above the threshold",
        (false, true) => "misses the threshold: the ready condition demands zero failures",
        (false, false) => "still meets the threshold",
    };
    format!(
        "{n} attempts per {} window; one failure → {rate:.1}% ({verdict})",
        fmt_dur(c.window)
    )
}

/// Check that `name` is a DNS host name readyprobe can resolve: not an IP address (a branch is
/// probed by its name), at most 253 characters, labels of 1–63 characters of letters, digits,
/// `-` and `_`.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_hostname(name: &str) -> Result<(), String> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "{name:?} is an IP address; a branch is probed by its branch-specific DNS name, so the resolve step sees what the records say"
        ));
    }
    if name.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "{name:?} is not a valid host name (each dot-separated label is 1–63 characters)"
            ));
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "{name:?} is not a valid host name (letters, digits, '-' and '_' only; no scheme, port or path)"
            ));
        }
    }
    Ok(())
}

/// Check a prober id: 1–64 characters of `[A-Za-z0-9._-]` (canary column width; safe in a file
/// name).
///
/// # Errors
/// A message saying what is allowed.
pub fn check_prober_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > MAX_CANARY_ID_LEN
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "{id:?}: must be 1–{MAX_CANARY_ID_LEN} characters of [A-Za-z0-9._-] (it keys the canary row and the state file)"
        ));
    }
    Ok(())
}

fn normalise_name(s: &str) -> String {
    s.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn parse_nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    s.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, 53))
}

fn default_prober_id() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .map(|h| h.chars().take(MAX_CANARY_ID_LEN).collect())
        .unwrap_or_else(|| "readyprobe".into())
}

/// Format a duration the way config files write them (`1m30s`, `500ms`).
pub fn fmt_dur(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[probe]
kind = "mysql"

[probe.mysql]
user = "readyprobe"
password = { env = "PW" }
ssl_mode = "required"

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"
"#;

    fn issues(text: &str) -> Vec<Issue> {
        match parse(Path::new("t.toml"), text) {
            Ok(_) => vec![],
            Err(e) => e.issues,
        }
    }

    fn with(replace: &str, by: &str) -> String {
        assert!(BASE.contains(replace), "{replace}");
        BASE.replacen(replace, by, 1)
    }

    #[test]
    fn defaults_resolve() {
        let c = parse(Path::new("/etc/readyprobe/t.toml"), BASE).unwrap();
        assert_eq!(c.probe.interval, Duration::from_secs(2));
        assert_eq!(c.probe.timeout, Duration::from_millis(1600));
        assert_eq!(c.policy.min_attempts, 10);
        assert_eq!(c.policy.declare_unready.window, Duration::from_secs(60));
        assert_eq!(c.policy.declare_ready.for_, Duration::from_secs(600));
        assert_eq!(c.publish.sinks, [SinkKind::Emf]);
        assert_eq!(c.publish.namespace, "Readyprobe");
        assert_eq!(c.branches[0].port, 3306);
        assert_eq!(c.state_dir, PathBuf::from("/etc/readyprobe/state"));
        assert_eq!(c.policy.initial, ReadinessState::Unknown);
    }

    #[test]
    fn each_rule_names_its_key_and_line() {
        // (config text, key, text on the (last such) line the error must name; "" = not in the file)
        let cases: Vec<(String, &str, &str)> = vec![
            (
                with(
                    "[probe]\nkind = \"mysql\"",
                    "[probe]\nkind = \"mysql\"\ninterval = \"1s\"\ntimeout = \"1s\"",
                ),
                "probe.timeout",
                "timeout = ",
            ),
            (
                with("[probe]", "[readiness]\nmin_attempts = 40\n\n[probe]"),
                "readiness.window",
                "",
            ),
            (
                with(
                    "[probe]",
                    "[readiness]\ndeclare_ready = { success_rate_at_or_above = 90.0 }\n\n[probe]",
                ),
                "readiness.declare_ready.success_rate_at_or_above",
                "declare_ready",
            ),
            (
                with(
                    "mysql-secondary.orders.internal.example",
                    "MYSQL.orders.internal.example.",
                ),
                "branch[1].endpoint",
                "MYSQL.orders",
            ),
            (
                with("role = \"SECONDARY\"", "role = \"PRIMARY\""),
                "branch[1].role",
                "role = ",
            ),
            (
                with(
                    "password = { env = \"PW\" }",
                    "password = { env = \"PW\", file = \"/x\" }",
                ),
                "probe.mysql.password",
                "password =",
            ),
            (
                with("ssl_mode = \"required\"", "ssl_mode = \"verify_full\""),
                "probe.mysql.ssl_mode",
                "ssl_mode =",
            ),
            (
                with("ssl_mode = \"required\"", "ssl_mode = \"verify_identity\""),
                "probe.mysql.ssl_ca",
                "",
            ),
            (
                with("[probe]", "[dns]\nnameservers = [\"not-an-ip\"]\n\n[probe]"),
                "dns.nameservers[0]",
                "nameservers",
            ),
            (
                with("[probe]", "[state]\nstore = \"s3\"\n\n[probe]"),
                "state.store",
                "store =",
            ),
            (
                with(
                    "[probe]",
                    "[publish]\nsinks = [\"emf\", \"statsd\"]\n\n[probe]",
                ),
                "publish.sinks[1]",
                "sinks",
            ),
            (
                with("[service]", "prober_id = \"a b\"\n\n[service]"),
                "prober_id",
                "prober_id",
            ),
            (
                with("[probe]", "[publish]\nnamespace = \"AWS/RDS\"\n\n[probe]"),
                "publish.namespace",
                "namespace",
            ),
        ];
        for (text, key, needle) in cases {
            let got = issues(&text);
            let hit = got.iter().find(|i| i.key == key);
            assert!(hit.is_some(), "{key}: {got:?}\n{text}");
            if !needle.is_empty() {
                let lines: Vec<&str> = text.lines().collect();
                let line = lines.iter().rposition(|l| l.contains(needle)).unwrap() + 1;
                assert_eq!(hit.unwrap().line, Some(line), "{key}: {got:?}");
            }
        }
    }

    #[test]
    fn endpoints_sinks_ports_and_inline_secrets() {
        for (replace, by, key) in [
            (
                "mysql-primary.orders.internal.example",
                "127.0.0.1",
                "branch[0].endpoint",
            ),
            (
                "mysql-primary.orders.internal.example",
                "bad name!.example",
                "branch[0].endpoint",
            ),
            (
                "mysql-primary.orders.internal.example",
                "a..b.example",
                "branch[0].endpoint",
            ),
            (
                "role = \"PRIMARY\"",
                "role = \"PRIMARY\"\nport = 0",
                "branch[0].port",
            ),
            (
                "[probe]",
                "[publish]\nsinks = []\n\n[probe]",
                "publish.sinks",
            ),
            (
                "[probe]",
                "[dns]\nnameservers = [\"127.0.0.1:0\"]\n\n[probe]",
                "dns.nameservers[0]",
            ),
        ] {
            let got = issues(&with(replace, by));
            assert!(got.iter().any(|i| i.key == key), "{key}: {got:?}");
        }
        // An inline secret is refused without being echoed.
        let got = issues(&with(
            "password = { env = \"PW\" }",
            "password = \"hunter2\"",
        ));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "probe.mysql.password");
        assert!(!got[0].message.contains("hunter2"), "{got:?}");
        // Errors inside the second [[branch]] name its index.
        let got = issues(&with(
            "endpoint = \"mysql-secondary",
            "weight = 3\nendpoint = \"mysql-secondary",
        ));
        assert_eq!(got[0].key, "branch[1].weight", "{got:?}");
    }

    #[test]
    fn tcp_kind_needs_a_port_and_only_its_table() {
        let tcp = with("kind = \"mysql\"", "kind = \"tcp\"");
        let got = issues(&tcp);
        assert!(got.iter().any(|i| i.key == "probe.mysql"), "{got:?}");
        let tcp = tcp.replace(
            "[probe.mysql]\nuser = \"readyprobe\"\npassword = { env = \"PW\" }\nssl_mode = \"required\"",
            "[probe.tcp]\nssl_mode = \"disabled\"",
        );
        let got = issues(&tcp);
        assert!(got.iter().any(|i| i.key == "branch[0].port"), "{got:?}");
        let ok = tcp.replace(
            "ssl_mode = \"disabled\"",
            "ssl_mode = \"disabled\"\nport = 443",
        );
        let c = parse(Path::new("t.toml"), &ok).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.branches[1].port, 443);
        assert!(c.warnings.iter().any(|w| w.contains("liveness-level")));
    }

    #[test]
    fn credential_headers_only_by_reference() {
        let http = with(
            "[probe.mysql]\nuser = \"readyprobe\"\npassword = { env = \"PW\" }\nssl_mode = \"required\"",
            "[probe.http]\nssl_mode = \"disabled\"\npath = \"/orders\"\nheaders = { Authorization = \"Bearer hunter2\" }",
        )
        .replace("kind = \"mysql\"", "kind = \"http\"");
        let got = issues(&http);
        assert!(
            got.iter()
                .any(|i| i.key == "probe.http.headers.Authorization"),
            "{got:?}"
        );
        assert!(
            got.iter().all(|i| !i.message.contains("hunter2")),
            "{got:?}"
        );
        let ok = http.replace("\"Bearer hunter2\"", "{ env = \"TOKEN\" }");
        assert!(issues(&ok).is_empty(), "{:?}", issues(&ok));
        let bad_value = ok.replace(
            "{ env = \"TOKEN\" }",
            "{ env = \"TOKEN\" }, x-note = \"a\\r\\nX-Injected: 1\"",
        );
        let got = issues(&bad_value);
        assert!(
            got.iter().any(|i| i.key == "probe.http.headers.x-note"),
            "{got:?}"
        );
        let bad_path = ok.replace("path = \"/orders\"", "path = \"/a b\"");
        let got = issues(&bad_path);
        assert!(got.iter().any(|i| i.key == "probe.http.path"), "{got:?}");
    }

    #[test]
    fn serde_errors_name_line_and_key() {
        let got = issues(&with(
            "[probe]\nkind = \"mysql\"",
            "[probe]\nkind = \"mysql\"\ninterval = \"2 parsecs\"",
        ));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].line, Some(8));
        assert_eq!(got[0].key, "probe.interval");
        assert!(got[0].message.contains("invalid duration"), "{got:?}");
        let got = issues(&with("[probe.mysql]", "[probe.mysql]\npasword = \"x\""));
        assert_eq!(got[0].key, "probe.mysql.pasword");
        assert!(got[0].message.contains("unknown field"), "{got:?}");
    }

    #[test]
    fn warns_when_one_failure_crosses_a_threshold() {
        let c = parse(Path::new("t.toml"), BASE).unwrap();
        // 30 attempts per 60 s window: one failure = 96.7% (≥ 95, < 99).
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("declare_ready") && w.contains("96.7%"))
        );
        assert!(!c.warnings.iter().any(|w| w.contains("declare_unready")));
    }

    #[test]
    fn secrets_resolve_by_reference_only() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        assert_eq!(SecretRef::File(f.clone()).resolve().unwrap(), "s3cret");
        std::fs::write(&f, "").unwrap();
        let e = SecretRef::File(f).resolve().unwrap_err();
        assert!(e.to_string().contains("empty"));
        let e = SecretRef::Env("READYPROBE_UNIT_SURELY_UNSET".into())
            .resolve()
            .unwrap_err();
        assert!(e.to_string().contains("READYPROBE_UNIT_SURELY_UNSET"));
        assert!(!format!("{:?}", SecretRef::Env("X".into())).contains("s3cret"));
    }
}
