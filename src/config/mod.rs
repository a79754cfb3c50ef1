//! Configuration: strict TOML parsing (raw stage, [`raw`]) and validation into [`Config`]
//! (checked stage), one module per section.
//!
//! Stage one deserialises into `Raw*` types that reject unknown keys and unknown enum values.
//! Stage two resolves defaults and checks the cross-field rules of the readiness contract:
//! threshold ordering, a window that can hold `min_attempts` at the probe interval, an attempt
//! timeout shorter than the interval, and a branch endpoint that is not the stable name. Every
//! error names the file, the line and the dotted key; validation reports all of its errors at
//! once. Validation is pure: it reads no file (CA bundles, client certificates, secrets) and no
//! environment variable; those are the probe's start-up business (`probe::prepare`).

mod dns;
mod endpoint;
mod evidence;
mod fleet;
mod http;
mod issues;
mod mysql;
mod otlp;
mod otlp_sink;
mod postgres;
mod probe;
mod publish;
mod raw;
mod readiness;
mod region;
mod reload;
mod route53;
mod secret;
mod serve;
mod service;
mod source;
mod stable_name;
mod state;
mod tcp;
mod tls;
mod values;

pub use dns::Dns;
pub use evidence::{EvidenceS3, check_bucket};
pub use http::{HttpProbe, HttpRequestSpec};
pub use issues::{Issue, escape_controls, escape_controls_by_line};
pub use mysql::MysqlProbe;
pub use otlp::OtlpProbe;
pub use otlp_sink::OtlpSink;
pub use postgres::PostgresProbe;
pub use probe::{ProbeConfig, ProbeKind, StepTimeouts};
pub use publish::{AssumeRole, CloudWatch, MetricsProfile, Publish, PublishTarget, session_name};
pub use raw::MAX_DURATION;
pub use readiness::{MAX_WINDOW, MAX_WINDOW_ATTEMPTS, attempts_in, one_failure_effect};
pub use reload::MIN_POLL;
pub use route53::Route53;
pub use secret::{
    DEFAULT_REFRESH, HeaderValueSource, MAX_REFRESH, MIN_REFRESH, SecretError, SecretRef,
    SecretsManagerRef,
};
pub use serve::{DEFAULT_LISTEN, Serve};
pub use service::{Branch, Service, check_hostname};
pub use source::ConfigSource;
pub use stable_name::{END_TO_END_KEY, StableNameProbe};
pub use state::{S3State, StateConfig, StoreKind, safe};
pub use tcp::TcpProbe;
pub use tls::{ClientIdentityFiles, TlsSettings};
pub use values::{
    AddressFamily, Approval, HealthStatus, InitialState, KindName, MinVersion, Role, SinkKind,
    SslMode, StoreName,
};

use crate::readiness::Policy;
use issues::Issues;
use raw::{RawConfig, RawFleetConfig};
use service::MAX_CANARY_ID_LEN;
use std::fmt;
use std::path::{Path, PathBuf};

/// A config larger than this is not a readyprobe config, bytes (10,000 branches in the
/// `[[service.branch]]` form take about 1.1 MB); the cap of a file's and an S3 object's.
pub const MAX_CONFIG_BYTES: u64 = 8 * 1024 * 1024;

/// A validated configuration: defaults resolved, cross-field rules checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    /// This prober instance's id: the canary row key and the `prober` field of evidence.
    /// Default: the host name (an ECS task's host name is unique per task).
    pub prober_id: String,
    /// Directory of the `file` store's control documents (`control-<service>.json`). Default
    /// `state` beside the config file (relative paths resolve against the config's directory).
    pub state_dir: PathBuf,
    /// Where the shared control document (readiness, approvals, overrides) lives.
    pub state: StateConfig,
    /// Publishing settings.
    pub publish: Publish,
    /// Evidence JSON-lines file. Default `<state_dir>/evidence.jsonl`.
    pub evidence_path: PathBuf,
    /// Size at which the evidence file is rotated to `<path>.1`, bytes. Default 100 MiB.
    pub evidence_max_bytes: u64,
    /// `[evidence.s3]`: the evidence also goes to S3, a segment at a time.
    pub evidence_s3: Option<EvidenceS3>,
    /// DNS settings of the `resolve` step.
    pub dns: Dns,
    /// What `check --aws` expects of the Route 53 objects and where it finds them.
    pub route53: Route53,
    /// The evidence-only probe of each service's stable name.
    pub stable_name_probe: StableNameProbe,
    /// `[reload] poll`: how often the config's source is read again for a change; `None`
    /// when not set (a local file is then not polled; an S3 config is, every 30 s).
    pub reload_poll: Option<std::time::Duration>,
    /// `[serve]`: the HTTP endpoint (`/metrics`, `/healthz`, `/status`); `None`: not served.
    pub serve: Option<Serve>,
    /// The services, in config order (one for a config with a single `[service]` table).
    pub services: Vec<ServiceConfig>,
    /// Non-fatal findings (e.g. a policy where one failure crosses a threshold).
    pub warnings: Vec<String>,
}

/// One failed-over service: its branches and how they are probed, decided and published.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceConfig {
    /// The failed-over service.
    pub service: Service,
    /// The readiness policy of its branches.
    pub policy: Policy,
    /// The probe run against each of its branches.
    pub probe: ProbeConfig,
    /// Its branches, in config order.
    pub branches: Vec<Branch>,
    /// CloudWatch namespace of its datums. Default `publish.namespace`.
    pub namespace: String,
    /// Where its CloudWatch datums go: its `publish` targets, else `[publish.cloudwatch]`'s one
    /// (never empty).
    pub publish_targets: Vec<PublishTarget>,
}

impl Config {
    /// The service an operator command acts on: the one named, or the only one.
    ///
    /// # Errors
    /// A sentence naming the services when `name` is missing with several or names none of them.
    pub fn service(&self, name: Option<&str>) -> Result<&ServiceConfig, String> {
        let names = || {
            self.services
                .iter()
                .map(|s| s.service.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self
                .services
                .iter()
                .find(|s| s.service.name == n)
                .ok_or_else(|| {
                    format!("no service {n:?} in the config; its services: {}", names())
                }),
            None if self.services.len() == 1 => Ok(&self.services[0]),
            None => Err(format!(
                "the config has {} services; name one with --service ({})",
                self.services.len(),
                names()
            )),
        }
    }
}

/// Every problem found in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The problems, in file order where known.
    pub issues: Vec<Issue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys and messages may quote the file's text: escaped, so a hostile config cannot
        // drive the terminal or forge lines of this report.
        let n = self.issues.len();
        let file = self.path.display().to_string();
        let file = escape_controls(&file);
        write!(f, "{file}: {n} error{}", if n == 1 { "" } else { "s" })?;
        for i in &self.issues {
            let (key, message) = (escape_controls(&i.key), escape_controls(&i.message));
            match i.line {
                Some(l) => write!(f, "\n  {file}:{l}: {key}: {message}")?,
                None => write!(f, "\n  {file}: {key}: {message}")?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// One problem of the whole source (unreadable, too large), named `(file)`.
    pub fn file(path: &Path, message: String) -> Self {
        ConfigError {
            path: path.to_owned(),
            issues: vec![Issue {
                key: "(file)".into(),
                line: None,
                message,
            }],
        }
    }
}

/// Read and validate a config file.
///
/// # Errors
/// [`ConfigError`] with every problem found: unreadable file, TOML syntax, unknown keys, wrong
/// types, bad durations and violated cross-field rules, each with line and key.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    parse(path, &read_file(path)?)
}

/// Read a config file's text, refused when it is not a regular file or larger than
/// [`MAX_CONFIG_BYTES`].
///
/// # Errors
/// [`ConfigError`] naming the file and why it cannot be read.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(ConfigError::file(path, "not a regular file".into()));
        }
        Ok(m) if m.len() > MAX_CONFIG_BYTES => {
            return Err(ConfigError::file(path, TOO_LARGE.into()));
        }
        _ => {}
    }
    // Bounded also when the file grows after the size check.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| {
            use std::io::Read;
            f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)
        })
        .map_err(|e| ConfigError::file(path, format!("cannot read the config file: {e}")))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::file(path, TOO_LARGE.into()));
    }
    Ok(text)
}

/// Why a config over [`MAX_CONFIG_BYTES`] is refused.
pub const TOO_LARGE: &str = "larger than 8 MiB; not a readyprobe config";

/// Validate config text; `path` is used in messages and to resolve relative paths (against its
/// directory; a config named `s3://bucket/key` has none: against the working directory). The only
/// outside read is the host name, the default `prober_id`, when the file sets none.
///
/// # Errors
/// As [`load`].
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let fail = |issue: Issue| ConfigError {
        path: path.to_owned(),
        issues: vec![issue],
    };
    // One parse: the spanned tree feeds the deserialiser and locates validation errors.
    let doc = match toml::de::DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => return Err(fail(Issues::new(text, None).syntax_issue(&e, text))),
    };
    let mut issues = Issues::new(text, Some(doc.clone()));
    let fleet = matches!(
        doc.get_ref().get("service").map(|v| v.get_ref()),
        Some(toml::de::DeValue::Array(_))
    );
    let checked = if fleet {
        let raw: RawFleetConfig = serde_path_to_error::deserialize(toml::Deserializer::from(doc))
            .map_err(|e| fail(issues.serde_issue(&e)))?;
        let host = raw.prober_id.is_none().then(default_prober_id);
        fleet::validate(path, raw, host, &mut issues)
    } else {
        let raw: RawConfig = serde_path_to_error::deserialize(toml::Deserializer::from(doc))
            .map_err(|e| fail(issues.serde_issue(&e)))?;
        let host = raw.prober_id.is_none().then(default_prober_id);
        validate(path, raw, host, &mut issues)
    };
    match checked {
        Some(mut cfg) if issues.errors.is_empty() => {
            cfg.warnings = issues.warnings();
            Ok(cfg)
        }
        _ => {
            let mut list = issues.errors;
            list.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
            Err(ConfigError {
                path: path.to_owned(),
                issues: list,
            })
        }
    }
}

/// The settings every service shares, as written.
pub(super) struct RawShared {
    prober_id: Option<String>,
    state_dir: Option<PathBuf>,
    publish: raw::RawPublish,
    evidence: raw::RawEvidence,
    state: raw::RawState,
    dns: raw::RawDns,
    route53: raw::RawRoute53,
    stable_name_probe: raw::RawStableNameProbe,
    reload: raw::RawReload,
    serve: Option<raw::RawServe>,
}

/// The checked stage of the single-service form: every section in turn, all errors collected.
/// Pure: `host` is the default prober id, read by the caller.
fn validate(
    path: &Path,
    raw: RawConfig,
    host: Option<String>,
    issues: &mut Issues<'_>,
) -> Option<Config> {
    let base = source::base_dir(path);
    let mut raw_service = raw.service;
    let raw_targets = raw_service.publish.take();
    let service = service::section(raw_service, "service", issues)?;
    let shared = RawShared {
        prober_id: raw.prober_id,
        state_dir: raw.state_dir,
        publish: raw.publish,
        evidence: raw.evidence,
        state: raw.state,
        dns: raw.dns,
        route53: raw.route53,
        stable_name_probe: raw.stable_name_probe,
        reload: raw.reload,
        serve: raw.serve,
    };
    let config = shared_sections(path, shared, host, issues);
    let publish_targets = publish::targets(
        raw_targets,
        "service.publish",
        config.as_ref().map(|c| &c.publish),
        issues,
    );
    let interval = probe::interval(&raw.probe);
    let probe = probe::section(raw.probe, base, issues);
    let default_port = probe.as_ref().and_then(|p| p.kind.default_port());
    let branches = service::branches(
        raw.branch,
        "branch",
        &service,
        default_port,
        probe.is_some(),
        issues,
    )?;
    if let Some(p) = &probe {
        service::rds_iam_regions(p, &branches, "branch", issues);
    }
    let policy = readiness::section(&raw.readiness, interval, issues);
    if let (Some(p), Some(policy)) = (&probe, &policy) {
        readiness::suspect_fits(policy, (p.interval, p.suspect_interval), issues);
    }
    let mut config = config?;
    config.services.push(ServiceConfig {
        namespace: config.publish.namespace.clone(),
        service,
        policy: policy?,
        probe: probe?,
        branches,
        publish_targets: publish_targets?,
    });
    Some(config)
}

/// The shared sections: prober id, state directory, evidence, publish, state store and DNS.
/// The config it returns has no services yet.
pub(super) fn shared_sections(
    path: &Path,
    raw: RawShared,
    host: Option<String>,
    issues: &mut Issues<'_>,
) -> Option<Config> {
    let base = source::base_dir(path);
    let prober_id = raw
        .prober_id
        .or(host)
        .unwrap_or_else(|| "readyprobe".into());
    if let Err(msg) = check_prober_id(&prober_id) {
        issues.error("prober_id", msg);
    }
    let state_dir = raw.state_dir.unwrap_or_else(|| PathBuf::from("state"));
    let state_dir = if state_dir.is_relative() {
        base.join(state_dir)
    } else {
        state_dir
    };
    let evidence_mb = raw.evidence.max_size_mb.unwrap_or(100);
    if !(1..=1_048_576).contains(&evidence_mb) {
        issues.error("evidence.max_size_mb", "must be 1–1048576 (MiB)");
    }
    let evidence_path = match raw.evidence.path {
        Some(p) if p.is_relative() => base.join(p),
        Some(p) => p,
        None => state_dir.join("evidence.jsonl"),
    };
    let evidence_s3 = raw.evidence.s3.and_then(|s3| evidence::section(s3, issues));
    let publish = publish::section(raw.publish, base, issues);
    let publish_interval = publish.as_ref().map(|p| p.interval);
    let state = publish_interval.and_then(|i| state::section(raw.state, i, issues));
    let dns = dns::section(raw.dns, issues);
    let route53 = route53::section(raw.route53, issues);
    let stable_name_probe = stable_name::section(raw.stable_name_probe, issues);
    let reload_poll = reload::section(raw.reload, issues);
    let serve = raw.serve.map(|s| serve::section(s, issues));
    Some(Config {
        source: path.to_owned(),
        prober_id,
        state_dir,
        state: state?,
        publish: publish?,
        evidence_path,
        evidence_max_bytes: evidence_mb.clamp(1, 1_048_576) * 1024 * 1024,
        evidence_s3,
        dns: dns?,
        route53,
        stable_name_probe,
        reload_poll,
        serve,
        services: Vec::new(),
        warnings: Vec::new(),
    })
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
            "{id:?}: must be 1–{MAX_CANARY_ID_LEN} characters of [A-Za-z0-9._-] (it keys the canary row and its entry in the control document)"
        ));
    }
    Ok(())
}

/// The host name (`HOSTNAME`, else `/etc/hostname`), cut to the canary column width.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::{FlapDamping, ReadinessState};
    use std::time::Duration;

    #[test]
    fn a_file_over_the_size_cap_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        let mut text = BASE.to_string();
        text.push_str(&"#".repeat(MAX_CONFIG_BYTES as usize + 1 - text.len()));
        std::fs::write(&path, &text).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("larger than 8 MiB"), "{e}");
        text.pop();
        std::fs::write(&path, &text).unwrap();
        load(&path).unwrap();
    }

    const BASE: &str = r#"
[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[probe]
kind = "mysql"

[probe.tls]
ssl_mode = "required"
danger_send_secrets_unverified = true
[probe.mysql]
user = "readyprobe"
password = { env = "PW" }

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
    fn stable_name_probe_is_off_by_default_and_checked() {
        let c = parse(Path::new("t.toml"), BASE).unwrap();
        assert_eq!(c.stable_name_probe, StableNameProbe::default());
        assert!(!c.stable_name_probe.enabled);
        assert_eq!(c.stable_name_probe.interval, Duration::from_secs(30));
        let text = with(
            "[service]\n",
            "[stable_name_probe]\nenabled = true\ninterval = \"5s\"\n\n[service]\n",
        );
        let c = parse(Path::new("t.toml"), &text).unwrap();
        assert!(c.stable_name_probe.enabled);
        assert_eq!(c.stable_name_probe.interval, Duration::from_secs(5));
        assert!(!c.stable_name_probe.end_to_end);
        let text = with(
            "[service]\n",
            "[stable_name_probe]\nenabled = true\nend_to_end = true\n\n[service]\n",
        );
        assert!(
            parse(Path::new("t.toml"), &text)
                .unwrap()
                .stable_name_probe
                .end_to_end
        );
        let short = with(
            "[service]\n",
            "[stable_name_probe]\ninterval = \"10ms\"\n\n[service]\n",
        );
        let found = issues(&short);
        assert_eq!(found[0].key, "stable_name_probe.interval");
        assert!(found[0].line.is_some(), "{found:?}");
        let unknown = with(
            "[service]\n",
            "[stable_name_probe]\nevery = \"5s\"\n\n[service]\n",
        );
        assert!(issues(&unknown)[0].message.contains("every"));
    }

    #[test]
    fn reload_poll_is_unset_by_default_and_at_least_a_second() {
        assert_eq!(parse(Path::new("t.toml"), BASE).unwrap().reload_poll, None);
        let text = with("[service]\n", "[reload]\npoll = \"5s\"\n\n[service]\n");
        let c = parse(Path::new("t.toml"), &text).unwrap();
        assert_eq!(c.reload_poll, Some(Duration::from_secs(5)));
        let short = with("[service]\n", "[reload]\npoll = \"200ms\"\n\n[service]\n");
        let found = issues(&short);
        assert_eq!(found[0].key, "reload.poll");
        assert!(found[0].line.is_some(), "{found:?}");
        let unknown = with("[service]\n", "[reload]\nevery = \"5s\"\n\n[service]\n");
        assert!(issues(&unknown)[0].message.contains("every"));
    }

    /// Relative paths of a config read from S3 resolve against the working directory; a file's
    /// against its directory; problems name the source's URL.
    #[test]
    fn an_s3_configs_relative_paths_resolve_against_the_working_directory() {
        let text = with("[service]\n", "state_dir = \"st\"\n\n[service]\n");
        let s3 = parse(Path::new("s3://cfg-bucket/prod/a.toml"), &text).unwrap();
        assert_eq!(s3.state_dir, PathBuf::from("st"));
        assert_eq!(s3.evidence_path, PathBuf::from("st/evidence.jsonl"));
        let file = parse(Path::new("/etc/readyprobe/a.toml"), &text).unwrap();
        assert_eq!(file.state_dir, PathBuf::from("/etc/readyprobe/st"));
        let bad = with("[service]\n", "nope = 1\n[service]\n");
        let e = parse(Path::new("s3://cfg-bucket/prod/a.toml"), &bad).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("s3://cfg-bucket/prod/a.toml:2: nope"), "{e}");
    }

    /// The end-to-end attempt's canary key is no branch's name.
    #[test]
    fn the_end_to_end_canary_key_is_no_branch_name() {
        let text = with("name = \"secondary\"", "name = \"~stable_name\"");
        let found = issues(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "branch[1].name");
        assert!(found[0].message.contains("reserved"), "{found:?}");
    }

    #[test]
    fn route53_table_is_read_and_checked() {
        let c = parse(Path::new("t.toml"), BASE).unwrap();
        assert!(c.route53.hosted_zone_id.is_none());
        assert!(c.route53.insufficient_data_health_status.is_none());
        let text = with(
            "[service]\n",
            "[route53]\nhosted_zone_id = \"/hostedzone/Z0123ABC\"\ninsufficient_data_health_status = \"LastKnownStatus\"\n\n[service]\n",
        );
        let c = parse(Path::new("t.toml"), &text).unwrap();
        assert_eq!(c.route53.hosted_zone_id.as_deref(), Some("Z0123ABC"));
        assert_eq!(
            c.route53.insufficient_data_health_status,
            Some(HealthStatus::LastKnownStatus)
        );
        let bad = with(
            "[service]\n",
            "[route53]\nhosted_zone_id = \"z-1\"\nendpoint_url = \"ftp://x\"\n\n[service]\n",
        );
        let keys: Vec<String> = issues(&bad).into_iter().map(|i| i.key).collect();
        assert_eq!(keys, ["route53.hosted_zone_id", "route53.endpoint_url"]);
        let unknown = with(
            "[service]\n",
            "[route53]\ninsufficient_data_health_status = \"healthy\"\n\n[service]\n",
        );
        assert!(issues(&unknown)[0].message.contains("LastKnownStatus"));
    }

    /// Durations beyond a year are refused by key and line, never overflow later arithmetic.
    #[test]
    fn overlong_durations_are_errors_not_panics() {
        for (table, key) in [
            ("probe", "interval"),
            ("probe", "timeout"),
            ("probe", "jitter"),
        ] {
            let text = with(
                &format!("[{table}]\n"),
                &format!("[{table}]\n{key} = \"5000000000000000000s\"\n"),
            );
            let found = issues(&text);
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].key, format!("{table}.{key}"));
            assert!(found[0].message.contains("366 days"), "{found:?}");
        }
        let ok = with(
            "[probe]\n",
            "[probe]\ninterval = \"366d\"\ntimeout = \"1s\"\n",
        );
        assert!(issues(&ok).iter().all(|i| i.key != "probe.interval"));
    }

    #[test]
    fn defaults_resolve() {
        let c = parse(Path::new("/etc/readyprobe/t.toml"), BASE).unwrap();
        assert_eq!(c.services[0].probe.interval, Duration::from_secs(2));
        assert_eq!(c.services[0].probe.timeout, Duration::from_millis(1600));
        assert_eq!(c.services[0].policy.min_attempts, 10);
        assert_eq!(
            c.services[0].policy.declare_unready.window,
            Duration::from_secs(60)
        );
        assert_eq!(
            c.services[0].policy.declare_ready.for_,
            Duration::from_secs(600)
        );
        assert_eq!(c.publish.sinks, [SinkKind::Emf]);
        assert_eq!(c.publish.namespace, "Readyprobe");
        assert_eq!(c.services[0].branches[0].port, 3306);
        assert_eq!(c.state_dir, PathBuf::from("/etc/readyprobe/state"));
        assert_eq!(c.services[0].policy.initial, ReadinessState::Unknown);
        let def = c.services[0].policy.definitive.clone().unwrap();
        assert_eq!(def.for_, Duration::from_secs(20));
        assert_eq!(
            def.classes.into_iter().collect::<Vec<_>>(),
            crate::failure::FailureClass::default_definitive()
        );
    }

    #[test]
    fn definitive_rule_keys() {
        let text = with(
            "[probe]",
            "[readiness]\ndefinitive_classes = []\ndeclare_unready = { for = \"10s\" }\n\n[probe]",
        );
        let c = parse(Path::new("t.toml"), &text).unwrap();
        let def = c.services[0].policy.definitive.clone().unwrap();
        // Unwritten, definitive_for is at most `for`.
        assert_eq!(def.for_, Duration::from_secs(10));
        assert!(def.classes.is_empty());
        let text = with(
            "[probe]",
            "[readiness]\ndefinitive_classes = [\"tcp_timeout\"]\ndeclare_unready = { definitive_for = \"30s\" }\n\n[probe]",
        );
        let def = parse(Path::new("t.toml"), &text).unwrap().services[0]
            .policy
            .definitive
            .clone()
            .unwrap();
        assert_eq!(def.for_, Duration::from_secs(30));
        assert_eq!(
            def.classes.into_iter().collect::<Vec<_>>(),
            [crate::failure::FailureClass::TcpTimeout]
        );
        let got = issues(&with(
            "[probe]",
            "[readiness]\ndeclare_unready = { definitive_for = \"0s\" }\n\n[probe]",
        ));
        assert!(
            got.iter()
                .any(|i| i.message.contains("definitive_classes = []")),
            "{got:?}"
        );
    }

    #[test]
    fn flap_damping_keys() {
        let damping = |text: &str| {
            parse(Path::new("t.toml"), &with("[probe]", text))
                .unwrap()
                .services[0]
                .policy
                .damping
                .clone()
        };
        let h = |n: u64| Duration::from_secs(3600 * n);
        // On by default; max_for is at least declare_ready.for, quiet defaults to period.
        assert_eq!(damping("[probe]"), Some(FlapDamping::default()));
        let d = damping(
            "[readiness]\ndeclare_ready = { for = \"2h\" }\n\n[readiness.flap_damping]\nflaps = 5\nperiod = \"6h\"\n\n[probe]",
        )
        .unwrap();
        assert_eq!(
            (d.flaps, d.period, d.max_for, d.quiet),
            (5, h(6), h(2), h(6))
        );
        let d = damping("[readiness.flap_damping]\nmax_for = \"3h\"\nquiet = \"30m\"\n\n[probe]")
            .unwrap();
        assert_eq!((d.max_for, d.quiet), (h(3), Duration::from_secs(1800)));
        assert_eq!(
            damping("[readiness.flap_damping]\nenabled = false\n\n[probe]"),
            None
        );
        let got = issues(&with(
            "[probe]",
            "[readiness.flap_damping]\nflap = 3\n\n[probe]",
        ));
        assert!(got.iter().any(|i| i.message.contains("flap")), "{got:?}");
    }

    #[test]
    fn flap_damping_errors_name_their_key_and_line() {
        let cases: Vec<(String, &str, &str)> = vec![
            (
                with(
                    "[probe]",
                    "[readiness.flap_damping]\nperiod = \"30m\"\nquiet = \"2h\"\n\n[probe]",
                ),
                "readiness.flap_damping.quiet",
                "quiet",
            ),
            (
                with(
                    "[probe]",
                    "[readiness.flap_damping]\nmax_for = \"5m\"\n\n[probe]",
                ),
                "readiness.flap_damping.max_for",
                "max_for",
            ),
            (
                with(
                    "[probe]",
                    "[readiness.flap_damping]\nperiod = \"0s\"\nquiet = \"0s\"\n\n[probe]",
                ),
                "readiness.flap_damping.period",
                "period",
            ),
            (
                with(
                    "[probe]",
                    "[readiness.flap_damping]\nperiod = \"25h\"\n\n[probe]",
                ),
                "readiness.flap_damping.period",
                "period",
            ),
        ];
        for (text, key, needle) in cases {
            let got = issues(&text);
            let hit = got.iter().find(|i| i.key == key);
            assert!(hit.is_some(), "{key}: {got:?}\n{text}");
            let lines: Vec<&str> = text.lines().collect();
            let line = lines.iter().rposition(|l| l.contains(needle)).unwrap() + 1;
            assert_eq!(hit.unwrap().line, Some(line), "{key}: {got:?}");
        }
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
                "probe.tls.ssl_mode",
                "ssl_mode =",
            ),
            (
                with("ssl_mode = \"required\"", "ssl_mode = \"verify_identity\""),
                "probe.tls.ssl_ca",
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
        assert_each_names_key_and_line(cases);
    }

    #[test]
    fn each_readiness_rule_names_its_key_and_line() {
        let cases: Vec<(String, &str, &str)> = vec![
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
                    "[probe]",
                    "[readiness]\ndeclare_unready = { for = \"1m\", definitive_for = \"2m\" }\n\n[probe]",
                ),
                "readiness.declare_unready.definitive_for",
                "definitive_for",
            ),
            (
                with(
                    "[probe]",
                    "[readiness]\ndeclare_unready = { for = \"24h\", definitive_for = \"12h\" }\n\n[probe]",
                ),
                "readiness.declare_unready.definitive_for",
                "definitive_for",
            ),
            (
                with(
                    "[probe]",
                    "[readiness]\ndefinitive_classes = [\"server_read_only\", \"read_only\"]\n\n[probe]",
                ),
                "readiness.definitive_classes[1]",
                "definitive_classes",
            ),
        ];
        assert_each_names_key_and_line(cases);
    }

    /// Each case: (config text, key, text on the (last such) line the error must name; "" = not
    /// in the file).
    fn assert_each_names_key_and_line(cases: Vec<(String, &str, &str)>) {
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
        let tcp = tcp
            .replace(
                "[probe.mysql]\nuser = \"readyprobe\"\npassword = { env = \"PW\" }",
                "[probe.tcp]",
            )
            .replace("ssl_mode = \"required\"", "ssl_mode = \"disabled\"");
        let got = issues(&tcp);
        assert!(got.iter().any(|i| i.key == "branch[0].port"), "{got:?}");
        let ok = tcp.replace("[probe.tcp]", "[probe.tcp]\nport = 443");
        let c = parse(Path::new("t.toml"), &ok).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.services[0].branches[1].port, 443);
        assert!(c.warnings.iter().any(|w| w.contains("liveness-level")));
    }

    #[test]
    fn credential_headers_only_by_reference() {
        let http = with(
            "[probe.mysql]\nuser = \"readyprobe\"\npassword = { env = \"PW\" }",
            "[probe.http]\npath = \"/orders\"\nheaders = { Authorization = \"Bearer hunter2\" }",
        )
        .replace("kind = \"mysql\"", "kind = \"http\"")
        .replace("ssl_mode = \"required\"", "ssl_mode = \"disabled\"");
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
        let got = issues(&with("[probe]\nkind", "[probe]\nkind ="));
        assert_eq!(
            (got[0].key.as_str(), got[0].line),
            ("(syntax)", Some(7)),
            "{got:?}"
        );
    }

    /// `probe.suspect_interval`: off by default and at the interval itself; from 100 ms to the
    /// interval, shorter than the attempt timeout allowed; anything else an error naming key and
    /// line.
    #[test]
    fn suspect_interval_defaults_off_and_is_bounded() {
        let set = |v: &str| {
            with(
                "[probe]\nkind = \"mysql\"",
                &format!("[probe]\nkind = \"mysql\"\nsuspect_interval = \"{v}\""),
            )
        };
        let c = parse(Path::new("t.toml"), BASE).unwrap();
        assert_eq!(c.services[0].probe.suspect_interval, None);
        // The interval itself keeps it off.
        let c = parse(Path::new("t.toml"), &set("2s")).unwrap();
        assert_eq!(c.services[0].probe.suspect_interval, None);
        let c = parse(Path::new("t.toml"), &set("500ms")).unwrap();
        assert_eq!(
            c.services[0].probe.suspect_interval,
            Some(Duration::from_millis(500))
        );
        // A 1 h window fits at 2 s (1,800 attempts) but not at 100 ms (36,000).
        let long = format!("{}\n[readiness]\nwindow = \"1h\"\n", set("100ms"));
        let got = issues(&long);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "probe.suspect_interval");
        assert!(got[0].message.contains("36000 attempts"), "{got:?}");
        for (v, says) in [
            ("50ms", "at least 100ms"),
            ("3s", "must not be longer than probe.interval (2s)"),
        ] {
            let got = issues(&set(v));
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(
                (got[0].key.as_str(), got[0].line),
                ("probe.suspect_interval", Some(8))
            );
            assert!(got[0].message.contains(says), "{v}: {got:?}");
        }
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

    #[test]
    fn old_per_kind_tls_keys_name_their_new_table() {
        for key in [
            "ssl_mode",
            "ssl_ca",
            "ssl_cert",
            "ssl_key",
            "tls_min_version",
        ] {
            let got = issues(&with(
                "[probe.mysql]",
                &format!("[probe.mysql]\n{key} = \"x\""),
            ));
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].key, format!("probe.mysql.{key}"));
            assert_eq!(got[0].line, Some(13), "{got:?}");
            assert!(got[0].message.contains("[probe.tls]"), "{got:?}");
        }
    }

    #[test]
    fn validation_reads_no_file_and_no_environment() {
        // Files that exist nowhere and a variable that is surely unset: still a valid config.
        let text = with("ssl_mode = \"required\"", "ssl_mode = \"verify_ca\"\nssl_ca = \"/nonexistent/ca.pem\"\nssl_cert = \"client.pem\"\nssl_key = \"client.key\"")
            .replace("{ env = \"PW\" }", "{ file = \"secrets/pw\" }");
        let c = parse(Path::new("/etc/readyprobe/t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let ProbeKind::Mysql(m) = &c.services[0].probe.kind else {
            panic!("{:?}", c.services[0].probe.kind)
        };
        assert_eq!(m.ssl_ca.as_deref(), Some(Path::new("/nonexistent/ca.pem")));
        let id = m.client_identity.as_ref().unwrap();
        assert_eq!(id.cert, PathBuf::from("/etc/readyprobe/client.pem"));
        assert_eq!(
            m.password,
            SecretRef::File(PathBuf::from("/etc/readyprobe/secrets/pw"))
        );
        let got = issues(&text.replace("ssl_ca = \"/nonexistent/ca.pem\"", "ssl_ca = \"\""));
        assert!(got.iter().any(|i| i.key == "probe.tls.ssl_ca"), "{got:?}");
    }

    /// Every config enum prints exactly the name it is written with in a config file.
    #[test]
    fn config_enums_print_their_config_names() {
        use serde::de::value::{Error, StrDeserializer};
        use serde::de::{Deserialize, IntoDeserializer};
        use strum::IntoEnumIterator;
        fn check<T>()
        where
            T: IntoEnumIterator + std::fmt::Display + std::fmt::Debug + PartialEq,
            T: for<'de> Deserialize<'de> + Into<&'static str>,
        {
            for v in T::iter() {
                let name = v.to_string();
                let de: StrDeserializer<'_, Error> = name.as_str().into_deserializer();
                assert_eq!(T::deserialize(de).unwrap(), v, "{name}");
                assert_eq!(Into::<&'static str>::into(v), name);
            }
        }
        check::<SslMode>();
        check::<MinVersion>();
        check::<KindName>();
        check::<Role>();
        check::<SinkKind>();
        check::<StoreName>();
        check::<AddressFamily>();
        check::<Approval>();
        check::<InitialState>();
        assert_eq!(AddressFamily::Ipv4ThenIpv6.to_string(), "ipv4_then_ipv6");
        assert_eq!(SinkKind::CloudWatch.to_string(), "cloudwatch");
        assert_eq!(MinVersion::Tls13.as_str(), "1.3");
        assert_eq!(Role::try_from("Secondary".to_string()), Ok(Role::Secondary));
        let got = issues(&with("role = \"SECONDARY\"", "role = \"standby\""));
        assert_eq!(got[0].key, "branch[1].role", "{got:?}");
        assert!(got[0].message.contains("PRIMARY and SECONDARY"), "{got:?}");
    }

    /// Every example in `probes/` is valid on any machine: validation reads none of the files
    /// or variables an example names.
    #[test]
    fn examples_check() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // `scenario-*.toml` are `simulate` scenarios (tests/it/simulate.rs runs them).
            let scenario = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("scenario-"));
            if p.extension().is_some_and(|x| x == "toml") && !scenario {
                load(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 5, "only {n} example configs in {}", dir.display());
    }
}
