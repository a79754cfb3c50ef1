//! The raw stage: what a config file may contain, as serde types that reject unknown keys.
//!
//! Closed vocabularies (probe kind, role, ssl-mode, sinks, store, address family, TLS version,
//! approval, initial state) are enums here, so an unknown value is a parse error that names the
//! accepted ones; durations are humantime strings (`"500ms"`, `"5s"`, `"3m"`). Defaults and
//! cross-field rules are the validated stage's business.

use super::secret::{HeaderValueSource, SecretRef};
use super::values::{
    AddressFamily, Approval, HealthStatus, InitialState, KindName, MinVersion, Role, SinkKind,
    SslMode, StoreName,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::num::NonZeroU16;
use std::path::PathBuf;
use std::time::Duration;

/// The longest duration any key accepts. Longer ones are no readyprobe setting, and bounding
/// them keeps every product and sum of durations (window × attempts, deadlines from now) far from
/// overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A humantime duration (`"500ms"`, `"5s"`, `"3m"`) of at most [`MAX_DURATION`].
/// One beyond it is quoted as written: formatting the parsed value would saturate. One finer
/// than a nanosecond (`"0.0000001ms"`) is refused as such.
fn bounded_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    use serde::de::{Error, Unexpected};
    let Some(written) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let too_long = || {
        D::Error::custom(format!(
            "{written:?} is longer than the longest accepted duration, 366 days"
        ))
    };
    match humantime::parse_duration(&written) {
        Ok(v) if v > MAX_DURATION => Err(too_long()),
        Ok(v) => Ok(Some(v)),
        // humantime's one error for a number too large and for a fraction finer than 1ns: with
        // the fractions dropped, a value that parses within the bound was too fine, not too long.
        Err(humantime::DurationError::NumberOverflow)
            if humantime::parse_duration(&without_fractions(&written))
                .is_ok_and(|v| v <= MAX_DURATION) =>
        {
            Err(D::Error::custom(format!(
                "{written:?} is not a whole number of nanoseconds, the finest unit a duration can be written in; durations act to the millisecond"
            )))
        }
        Err(humantime::DurationError::NumberOverflow) => Err(too_long()),
        // humantime_serde's own message for a string that is no duration.
        Err(_) => Err(D::Error::invalid_value(
            Unexpected::Str(&written),
            &"a duration",
        )),
    }
}

/// `written` with every fraction (`.` and the digits after it) removed: `"0.0000001ms"` → `"0ms"`.
fn without_fractions(written: &str) -> String {
    let mut out = String::with_capacity(written.len());
    let mut in_fraction = false;
    for c in written.chars() {
        in_fraction = (in_fraction && c.is_ascii_digit()) || c == '.';
        if !in_fraction {
            out.push(c);
        }
    }
    out
}

/// A whole config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub prober_id: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub service: RawService,
    #[serde(default)]
    pub readiness: RawReadiness,
    #[serde(default)]
    pub publish: RawPublish,
    #[serde(default)]
    pub evidence: RawEvidence,
    #[serde(default)]
    pub state: RawState,
    #[serde(default)]
    pub dns: RawDns,
    #[serde(default)]
    pub route53: RawRoute53,
    #[serde(default)]
    pub stable_name_probe: RawStableNameProbe,
    #[serde(default)]
    pub reload: RawReload,
    pub serve: Option<RawServe>,
    pub probe: RawProbe,
    #[serde(default)]
    pub branch: Vec<RawBranch>,
}

/// A config file with several `[[service]]` entries. `[probe]` and `[readiness]` are defaults
/// here, kept as plain tables: each service's own tables are merged over them key by key before
/// they are read as [`RawProbe`] and [`RawReadiness`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleetConfig {
    pub prober_id: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub service: Vec<RawFleetService>,
    pub readiness: Option<toml::Table>,
    #[serde(default)]
    pub publish: RawPublish,
    #[serde(default)]
    pub evidence: RawEvidence,
    #[serde(default)]
    pub state: RawState,
    #[serde(default)]
    pub dns: RawDns,
    #[serde(default)]
    pub route53: RawRoute53,
    #[serde(default)]
    pub stable_name_probe: RawStableNameProbe,
    #[serde(default)]
    pub reload: RawReload,
    pub serve: Option<RawServe>,
    pub probe: Option<toml::Table>,
    /// Refused: in this form each service lists its own `[[service.branch]]`.
    pub branch: Option<toml::Value>,
}

/// One `[[service]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleetService {
    pub name: String,
    pub stable_name: String,
    pub namespace: Option<String>,
    pub publish: Option<RawTargets>,
    pub probe: Option<toml::Table>,
    pub readiness: Option<toml::Table>,
    #[serde(default)]
    pub branch: Vec<RawBranch>,
}

/// `[service]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    pub name: String,
    pub stable_name: String,
    pub publish: Option<RawTargets>,
}

/// A service's `publish`: one inline table or an array of them.
#[derive(Debug)]
pub(super) enum RawTargets {
    One(RawTarget),
    Many(Vec<RawTarget>),
}

impl<'de> Deserialize<'de> for RawTargets {
    /// A table is one target, an array several: each is read as [`RawTarget`] itself, so an
    /// unknown or mistyped key keeps its own message (an untagged enum would lose it).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawTargets;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table { region, role_arn, external_id, endpoint_url, name } or an array of them")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawTargets, A::Error> {
                let de = serde::de::value::MapAccessDeserializer::new(map);
                RawTarget::deserialize(de).map(RawTargets::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<RawTargets, A::Error> {
                let de = serde::de::value::SeqAccessDeserializer::new(seq);
                Vec::<RawTarget>::deserialize(de).map(RawTargets::Many)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// One publish target of a service.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub name: Option<String>,
    pub region: Option<String>,
    pub role_arn: Option<String>,
    pub external_id: Option<String>,
    pub endpoint_url: Option<String>,
}

/// `[readiness]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReadiness {
    #[serde(default, deserialize_with = "bounded_duration")]
    pub window: Option<Duration>,
    pub min_attempts: Option<u32>,
    pub declare_unready: Option<RawUnready>,
    pub declare_ready: Option<RawReady>,
    pub initial: Option<InitialState>,
    /// Failure class names, checked against [`crate::failure::FailureClass`] with line numbers.
    pub definitive_classes: Option<Vec<String>>,
    pub flap_damping: Option<RawFlapDamping>,
}

/// `readiness.flap_damping`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFlapDamping {
    pub enabled: Option<bool>,
    pub flaps: Option<u32>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub period: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub max_for: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub quiet: Option<Duration>,
}

/// `readiness.declare_unready`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUnready {
    pub success_rate_below: Option<f64>,
    #[serde(default, rename = "for", deserialize_with = "bounded_duration")]
    pub for_: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub definitive_for: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub window: Option<Duration>,
}

/// `readiness.declare_ready`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReady {
    pub success_rate_at_or_above: Option<f64>,
    #[serde(default, rename = "for", deserialize_with = "bounded_duration")]
    pub for_: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub window: Option<Duration>,
    pub approval: Option<Approval>,
}

/// `[publish]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPublish {
    #[serde(default, deserialize_with = "bounded_duration")]
    pub interval: Option<Duration>,
    pub namespace: Option<String>,
    pub sinks: Option<Vec<SinkKind>>,
    pub metrics: Option<crate::contract::MetricsProfile>,
    #[serde(default)]
    pub cloudwatch: RawCloudWatch,
    pub otlp: Option<RawOtlpSink>,
}

/// `[publish.otlp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOtlpSink {
    pub endpoint: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValueSource>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub timeout: Option<Duration>,
    pub max_tries: Option<u32>,
    pub ssl_ca: Option<PathBuf>,
}

/// `[publish.cloudwatch]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCloudWatch {
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    pub role_arn: Option<String>,
    pub external_id: Option<String>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub operation_timeout: Option<Duration>,
    pub max_attempts: Option<u32>,
}

/// `[state]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    pub store: Option<StoreName>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub poll_interval: Option<Duration>,
    pub s3: Option<RawS3State>,
}

/// `[state.s3]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawS3State {
    pub bucket: String,
    pub key_prefix: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

/// `[evidence]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEvidence {
    pub path: Option<PathBuf>,
    pub max_size_mb: Option<u64>,
    pub s3: Option<RawEvidenceS3>,
}

/// `[evidence.s3]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEvidenceS3 {
    pub bucket: String,
    pub prefix: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub segment: Option<Duration>,
    pub segment_max_mb: Option<u64>,
    pub spool_max_mb: Option<u64>,
}

/// `[route53]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute53 {
    pub hosted_zone_id: Option<String>,
    pub insufficient_data_health_status: Option<HealthStatus>,
    pub endpoint_url: Option<String>,
}

/// `[stable_name_probe]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStableNameProbe {
    pub enabled: Option<bool>,
    pub end_to_end: Option<bool>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub interval: Option<Duration>,
}

/// `[reload]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReload {
    #[serde(default, deserialize_with = "bounded_duration")]
    pub poll: Option<Duration>,
}

/// `[serve]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    pub listen: Option<String>,
    pub max_connections: Option<u64>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub request_timeout: Option<Duration>,
}

/// `[dns]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDns {
    pub nameservers: Option<Vec<String>>,
    pub address_family: Option<AddressFamily>,
    pub resolv_conf: Option<PathBuf>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub timeout: Option<Duration>,
}

/// `[probe]` with one sub-table per kind and the shared `[probe.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProbe {
    pub kind: KindName,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub interval: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub suspect_interval: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub timeout: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub jitter: Option<Duration>,
    #[serde(default)]
    pub step_timeout: RawStepTimeouts,
    pub tls: Option<RawTls>,
    pub mysql: Option<RawMysql>,
    pub postgres: Option<RawPostgres>,
    pub tcp: Option<RawTcp>,
    pub http: Option<RawHttp>,
    pub otlp: Option<RawOtlp>,
}

/// `[probe.step_timeout]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStepTimeouts {
    #[serde(default, deserialize_with = "bounded_duration")]
    pub resolve: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub connect: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub tls: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub auth: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub write: Option<Duration>,
    #[serde(default, deserialize_with = "bounded_duration")]
    pub verify: Option<Duration>,
}

/// `[probe.tls]`: the TLS keys every kind shares.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub ssl_mode: Option<SslMode>,
    pub ssl_ca: Option<PathBuf>,
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
    pub tls_min_version: Option<MinVersion>,
    pub danger_send_secrets_unverified: Option<bool>,
}

/// The keys that lived in each kind's table before `[probe.tls]`; named in the error that says
/// where they went.
pub(super) const MOVED_TLS_KEYS: [&str; 5] = [
    "ssl_mode",
    "ssl_ca",
    "ssl_cert",
    "ssl_key",
    "tls_min_version",
];

/// `[probe.mysql]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMysql {
    pub port: Option<NonZeroU16>,
    pub user: String,
    pub password: SecretRef,
    pub database: Option<String>,
    pub table: Option<String>,
}

/// `[probe.postgres]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPostgres {
    pub port: Option<NonZeroU16>,
    pub user: String,
    pub password: SecretRef,
    pub database: Option<String>,
    pub schema: Option<String>,
    pub table: Option<String>,
}

/// `[probe.tcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTcp {
    pub port: Option<NonZeroU16>,
}

/// `[probe.http]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub port: Option<NonZeroU16>,
    pub method: Option<String>,
    pub path: String,
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValueSource>,
    pub body: Option<String>,
    pub expect_status: Option<Vec<u16>>,
    pub expect_body_contains: Option<String>,
    pub expect_json: Option<RawJsonExpect>,
    pub expect_header: Option<RawHeaderExpect>,
    pub verify: Option<RawHttpVerify>,
}

/// `probe.http.expect_json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJsonExpect {
    pub pointer: String,
    pub equals: String,
}

/// `probe.http.expect_header`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHeaderExpect {
    pub name: String,
    pub equals: String,
}

/// `[probe.http.verify]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpVerify {
    pub method: Option<String>,
    pub path: String,
    pub expect_status: Option<Vec<u16>>,
    pub expect_body_contains: Option<String>,
}

/// `[probe.otlp]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOtlp {
    pub port: Option<NonZeroU16>,
    pub path: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValueSource>,
}

/// `[[branch]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBranch {
    pub name: String,
    pub role: Role,
    pub endpoint: String,
    pub port: Option<NonZeroU16>,
    pub region: Option<String>,
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    /// A duration beyond the bound is quoted as written, not as the saturated number of
    /// milliseconds it would have been; a malformed one keeps serde's message.
    #[test]
    fn an_out_of_range_duration_is_quoted_as_written() {
        let text = |interval: &str| {
            format!(
                "[service]\nname = \"s\"\nstable_name = \"s.internal.example\"\n[probe]\nkind = \"tcp\"\ninterval = \"{interval}\"\n[probe.tcp]\nport = 5432\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n"
            )
        };
        for written in [
            "999999999999d",
            "367d",
            "18446744073709551615s",
            "99999999999999999999999d",
        ] {
            let e = parse(Path::new("t.toml"), &text(written)).unwrap_err();
            assert_eq!(e.issues.len(), 1, "{written}: {:?}", e.issues);
            let i = &e.issues[0];
            assert_eq!(
                (i.key.as_str(), i.line),
                ("probe.interval", Some(6)),
                "{i:?}"
            );
            assert!(
                i.message
                    .starts_with(&format!("\"{written}\" is longer than")),
                "{written}: {i:?}"
            );
        }
        let e = parse(Path::new("t.toml"), &text("5 parsecs")).unwrap_err();
        assert!(
            e.issues[0].message.contains("expected a duration"),
            "{:?}",
            e.issues
        );
    }

    fn with_readiness(lines: &str) -> String {
        format!(
            "[service]\nname = \"s\"\nstable_name = \"s.internal.example\"\n[readiness]\n{lines}\n[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 5432\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n"
        )
    }

    /// A duration finer than humantime can hold (a fraction of a nanosecond) is said to be so,
    /// not called longer than the longest accepted duration.
    #[test]
    fn a_too_fine_duration_says_so() {
        for written in ["0.0000001ms", "1.5ns", "0.0000000001s"] {
            let e = parse(
                Path::new("t.toml"),
                &with_readiness(&format!("window = \"{written}\"")),
            )
            .unwrap_err();
            assert_eq!(e.issues.len(), 1, "{written}: {:?}", e.issues);
            let m = &e.issues[0].message;
            assert!(
                m.starts_with(&format!(
                    "\"{written}\" is not a whole number of nanoseconds"
                )),
                "{written}: {m}"
            );
        }
    }

    /// A cross-field rule quotes a duration the way it is written in the file, not normalised.
    #[test]
    fn a_written_duration_is_quoted_as_written_in_rule_messages() {
        let e = parse(Path::new("t.toml"), &with_readiness("window = \"25h\"")).unwrap_err();
        let m = &e.issues[0].message;
        assert!(
            m.starts_with("25h is longer than the longest readiness window"),
            "{m}"
        );
        let e = parse(
            Path::new("t.toml"),
            &with_readiness("flap_damping = { period = \"1500m\" }"),
        )
        .unwrap_err();
        let m = &e.issues[0].message;
        assert!(m.starts_with("1500m is longer than 24h"), "{m}");
    }
}
