//! `[publish]`: the publish tick, the CloudWatch namespace and the metric sinks.

use super::issues::Issues;
use super::otlp_sink::OtlpSink;
use super::raw::{RawPublish, RawTarget, RawTargets};
use super::region::region_problem;
use super::values::SinkKind;
use crate::clock::fmt_duration;
pub use crate::contract::MetricsProfile;
use std::path::Path;
use std::time::Duration;

/// The shortest `PutMetricData` try timeout: a TLS handshake and a request to a regional
/// endpoint need most of a second, so a shorter one fails every publish.
const MIN_OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// CloudWatch limit: a namespace is 1–255 characters.
const MAX_NAMESPACE_LEN: usize = 255;

/// Where and how readiness is published.
#[derive(Debug, Clone, PartialEq)]
pub struct Publish {
    /// Publish tick. Default 60 s (CloudWatch standard resolution).
    pub interval: Duration,
    /// CloudWatch namespace. Default `Readyprobe`.
    pub namespace: String,
    /// Metric sinks, without duplicates. Default `[emf]` (EMF JSON on stdout).
    pub sinks: Vec<SinkKind>,
    /// Which metrics the `cloudwatch` and `emf` sinks get (`otlp` gets every one). Default
    /// `full`.
    pub metrics: MetricsProfile,
    /// CloudWatch sink settings.
    pub cloudwatch: CloudWatch,
    /// OTLP sink settings, when `sinks` lists `otlp`.
    pub otlp: Option<OtlpSink>,
}

/// Settings of the CloudWatch sink.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudWatch {
    /// Region; default from the AWS chain (`AWS_REGION`, profile, ECS metadata).
    pub region: Option<String>,
    /// Endpoint override (e.g. an emulator or a VPC interface endpoint): an http(s) URL with a
    /// host.
    pub endpoint_url: Option<String>,
    /// Timeout of one `PutMetricData` try. Default 10 s, at least 1 s, capped at the publish interval so one
    /// tick's publish never overlaps the next.
    pub operation_timeout: Duration,
    /// Tries per batch (first try included) for retryable failures (throttling, 5xx, timeouts,
    /// connection errors), all within the batch's publish window. Default 3.
    pub max_attempts: u32,
    /// `role_arn` and `external_id`: the role the datums are published with, assumed through
    /// STS from the default chain; `None`: the chain's own credentials.
    pub role: Option<AssumeRole>,
}

/// An IAM role to publish with, assumed through STS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRole {
    /// `arn:<partition>:iam::<account id>:role/<path/name>`.
    pub role_arn: String,
    /// The `ExternalId` the role's trust policy asks for.
    pub external_id: Option<String>,
}

impl AssumeRole {
    /// The 12-digit account id of the role (checked by validation).
    pub fn account(&self) -> &str {
        self.role_arn.split(':').nth(4).unwrap_or("")
    }

    /// The role's name: the last part of its path.
    pub fn name(&self) -> &str {
        self.role_arn.rsplit('/').next().unwrap_or("")
    }
}

/// Where one service's datums go: a region, an endpoint and credentials (a role or the chain's).
/// Every other CloudWatch setting (timeout, tries, namespace) is `[publish]`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishTarget {
    /// Unique within its service: `<region or "default">`, plus `@<account id>/<role name>` with
    /// a role, unless named in the config. The `target` of its `publish` records.
    pub name: String,
    /// Region; `None`: the default chain's.
    pub region: Option<String>,
    /// Endpoint override; `None`: the chain's, else AWS's.
    pub endpoint_url: Option<String>,
    /// The role published with; `None`: the chain's credentials.
    pub role: Option<AssumeRole>,
}

impl PublishTarget {
    /// The default name of a target: `<region or "default">[@<account id>/<role name>]`.
    pub fn default_name(region: Option<&str>, role: Option<&AssumeRole>) -> String {
        let mut name = region.unwrap_or("default").to_string();
        if let Some(r) = role {
            name.push_str(&format!("@{}/{}", r.account(), r.name()));
        }
        name
    }

    /// Whether both targets send to one place: the same region, endpoint and role (the
    /// external id aside), whatever their names.
    pub fn same_destination(&self, other: &PublishTarget) -> bool {
        self.region == other.region
            && self.endpoint_url == other.endpoint_url
            && self.role.as_ref().map(|r| &r.role_arn) == other.role.as_ref().map(|r| &r.role_arn)
    }
}

impl Publish {
    /// The target of a service that names none: `[publish.cloudwatch]`'s.
    pub fn default_target(&self) -> PublishTarget {
        let cw = &self.cloudwatch;
        PublishTarget {
            name: PublishTarget::default_name(cw.region.as_deref(), cw.role.as_ref()),
            region: cw.region.clone(),
            endpoint_url: cw.endpoint_url.clone(),
            role: cw.role.clone(),
        }
    }
}

/// Longest STS `RoleSessionName`.
const MAX_SESSION_NAME: usize = 64;

/// The STS session name of prober `prober_id`: `readyprobe-<prober_id>`, each character
/// outside STS's `[A-Za-z0-9_+=,.@-]` replaced by `-`, at most 64 characters.
pub fn session_name(prober_id: &str) -> String {
    format!("readyprobe-{prober_id}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(MAX_SESSION_NAME)
        .collect()
}

/// Most publish targets of one service.
pub const MAX_TARGETS: usize = 10;

/// Longest target name, characters.
const MAX_TARGET_NAME: usize = 128;

/// An IAM role ARN: `arn:<partition>:iam::<12 digits>:role/<path/name>`, the name 1–64 of
/// `[A-Za-z0-9+=,.@_-]`, the path of printable ASCII.
fn check_role_arn(arn: &str) -> Result<(), String> {
    let shown = format!("{:?}", arn.chars().take(100).collect::<String>());
    let want = "an IAM role ARN is arn:<partition>:iam::<12-digit account id>:role/<name>, e.g. \"arn:aws:iam::123456789012:role/readyprobe-publish\"";
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [arn_word, partition, service, region, account, resource] = parts[..] else {
        return Err(format!("{shown} is not an ARN; {want}"));
    };
    if arn_word != "arn"
        || partition.is_empty()
        || !partition
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'-')
        || service != "iam"
        || !region.is_empty()
    {
        return Err(format!("{shown} is not an IAM ARN; {want}"));
    }
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{shown}: the account id must be 12 digits; {want}"));
    }
    let Some(path) = resource.strip_prefix("role/") else {
        return Err(format!("{shown} names no role (role/<name>); {want}"));
    };
    let name = path.rsplit('/').next().unwrap_or("");
    let name_ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b));
    if !name_ok || path.len() > 576 || !path.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(format!(
            "{shown}: a role name is 1–64 of A-Z a-z 0-9 + = , . @ _ - (after an optional path)"
        ));
    }
    Ok(())
}

/// AWS's `ExternalId` rule: 2–1224 characters of `[A-Za-z0-9+=,.@:/-]`. Never echoed.
fn check_external_id(id: &str) -> Result<(), String> {
    let ok = (2..=1224).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@:/-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(
            "must be 2–1224 characters of A-Z a-z 0-9 + = , . @ : / - (AWS's ExternalId rule)"
                .into(),
        )
    }
}

/// The role of a table with `role_arn` and `external_id` (each possibly inherited), checked;
/// errors on `<key>.role_arn` and `<key>.external_id`.
fn role_of(
    key: &str,
    role_arn: Option<String>,
    external_id: Option<String>,
    issues: &mut Issues<'_>,
) -> Option<AssumeRole> {
    let mut ok = true;
    if let Some(arn) = &role_arn
        && let Err(why) = check_role_arn(arn)
    {
        issues.error(format!("{key}.role_arn"), why);
        ok = false;
    }
    if let Some(id) = &external_id {
        if let Err(why) = check_external_id(id) {
            issues.error(format!("{key}.external_id"), why);
            ok = false;
        } else if role_arn.is_none() {
            issues.error(
                format!("{key}.external_id"),
                "is only read with role_arn: it is the ExternalId of the role assumed; set role_arn or remove it",
            );
            ok = false;
        }
    }
    let role_arn = role_arn.filter(|_| ok)?;
    Some(AssumeRole {
        role_arn,
        external_id,
    })
}

/// Validate a service's `publish` (written at `key`, e.g. `service[1].publish`): its targets,
/// each key not written taken from `[publish.cloudwatch]`; `[publish.cloudwatch]`'s own target
/// when the service names none. `None` when `[publish]` itself did not validate.
pub(super) fn targets(
    raw: Option<RawTargets>,
    key: &str,
    publish: Option<&Publish>,
    issues: &mut Issues<'_>,
) -> Option<Vec<PublishTarget>> {
    let publish = publish?;
    let list = match raw {
        None => return Some(vec![publish.default_target()]),
        Some(RawTargets::One(t)) => vec![(key.to_string(), t)],
        Some(RawTargets::Many(ts)) => ts
            .into_iter()
            .enumerate()
            .map(|(i, t)| (format!("{key}[{i}]"), t))
            .collect(),
    };
    if list.is_empty() {
        issues.error(
            key,
            "lists no target; remove it to publish to [publish.cloudwatch]'s",
        );
        return None;
    }
    if list.len() > MAX_TARGETS {
        issues.error(
            key,
            format!(
                "lists {} targets; at most {MAX_TARGETS} (each is a sink of its own: a queue, a client and a PutMetricData call per tick, its series billed)",
                list.len()
            ),
        );
        return None;
    }
    if !publish.sinks.contains(&SinkKind::CloudWatch) {
        issues.error(
            key,
            "names CloudWatch targets, but publish.sinks lacks \"cloudwatch\": add it, or remove this key",
        );
        return None;
    }
    let mut out: Vec<PublishTarget> = Vec::new();
    let mut ok = true;
    for (k, t) in list {
        // The name's own line when written, else the target's.
        let name_key = if t.name.is_some() {
            format!("{k}.name")
        } else {
            k.clone()
        };
        match one_target(&k, t, &publish.cloudwatch, issues) {
            Some(t) if out.iter().any(|o| o.name == t.name) => {
                issues.error(
                    name_key,
                    format!("target name {:?} is used twice in this service (names default to region@account/role): give one a name", t.name),
                );
                ok = false;
            }
            Some(t) => match out.iter().find(|o| o.same_destination(&t)) {
                Some(o) => {
                    issues.error(
                        name_key,
                        format!("is the same destination as target {:?} (region, endpoint and role): every datum would be sent and billed twice; remove one", o.name),
                    );
                    ok = false;
                }
                None => out.push(t),
            },
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// One target of a service, its unset keys from `[publish.cloudwatch]`.
fn one_target(
    key: &str,
    t: RawTarget,
    cw: &CloudWatch,
    issues: &mut Issues<'_>,
) -> Option<PublishTarget> {
    let mut ok = true;
    if let Some(why) = t.region.as_deref().and_then(region_problem) {
        issues.error(format!("{key}.region"), why);
        ok = false;
    }
    if let Some(url) = &t.endpoint_url
        && let Err(why) = check_endpoint_url(url)
    {
        issues.error(format!("{key}.endpoint_url"), why);
        ok = false;
    }
    if let Some(n) = &t.name {
        let name_ok = (1..=MAX_TARGET_NAME).contains(&n.chars().count())
            && n.chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '\''));
        if !name_ok {
            issues.error(
                format!("{key}.name"),
                "must be 1–128 printable ASCII characters without spaces or quotes",
            );
            ok = false;
        }
    }
    let cw_role = cw.role.as_ref();
    let role_arn = t.role_arn.or(cw_role.map(|r| r.role_arn.clone()));
    let external_id = t
        .external_id
        .or(cw_role.and_then(|r| r.external_id.clone()));
    let wants_role = role_arn.is_some();
    let role = role_of(key, role_arn, external_id, issues);
    if !ok || (wants_role && role.is_none()) {
        return None;
    }
    let region = t.region.or(cw.region.clone());
    Some(PublishTarget {
        name: t
            .name
            .unwrap_or_else(|| PublishTarget::default_name(region.as_deref(), role.as_ref())),
        region,
        endpoint_url: t.endpoint_url.or(cw.endpoint_url.clone()),
        role,
    })
}

/// CloudWatch's namespace rule: 1–255 of `0-9 A-Z a-z . - _ / # :` and space, not starting
/// with `AWS/` (reserved) or `:`.
pub(super) fn namespace_ok(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= MAX_NAMESPACE_LEN
        && !ns.starts_with("AWS/")
        && !ns.starts_with(':')
        && ns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_/#: ".contains(c))
}

/// Check an AWS endpoint override: an absolute `http` or `https` URL with a host, and no user
/// name or password in it (the SDK signs requests; credentials never belong in a URL).
///
/// # Errors
/// A message saying what is wrong.
pub(super) fn check_endpoint_url(url: &str) -> Result<(), String> {
    // A URL with `@` may carry a password: never echoed.
    let shown = || {
        if url.contains('@') {
            "the URL".to_string()
        } else {
            format!("{:?}", url.chars().take(100).collect::<String>())
        }
    };
    let uri: http::Uri = url.parse().map_err(|e| {
        format!(
            "{} is not a URL ({e}); write e.g. \"https://monitoring.eu-west-1.amazonaws.com\"",
            shown()
        )
    })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{} must start with http:// or https://", shown()));
    }
    match uri.authority() {
        Some(a) if a.as_str().contains('@') => Err(format!(
            "{} carries a user name or password; the SDK signs requests, remove them",
            shown()
        )),
        Some(a) if !a.host().is_empty() => super::endpoint::check_authority(a.as_str())
            .map_err(|why| format!("{}: {why}", shown())),
        _ => Err(format!("{} has no host", shown())),
    }
}

/// Validate `[publish]`.
pub(super) fn section(raw: RawPublish, base: &Path, issues: &mut Issues<'_>) -> Option<Publish> {
    let interval = raw.interval.unwrap_or(Duration::from_secs(60));
    if interval < Duration::from_secs(1) {
        issues.error("publish.interval", "must be at least 1s");
    }
    let namespace = raw
        .namespace
        .unwrap_or_else(|| crate::contract::DEFAULT_NAMESPACE.into());
    if !namespace_ok(&namespace) {
        issues.error(
            "publish.namespace",
            "CloudWatch namespaces are 1–255 characters of 0-9 A-Z a-z . - _ / # : and space, not starting with \"AWS/\" or ':'",
        );
    }
    let mut sinks: Vec<SinkKind> = Vec::new();
    for s in raw.sinks.unwrap_or_else(|| vec![SinkKind::Emf]) {
        if !sinks.contains(&s) {
            sinks.push(s);
        }
    }
    if sinks.is_empty() {
        issues.error(
            "publish.sinks",
            "lists no sink; readiness would be published nowhere (use \"emf\", \"cloudwatch\" and/or \"otlp\")",
        );
    }
    let listed = sinks.contains(&SinkKind::Otlp);
    let otlp = super::otlp_sink::section(raw.otlp, listed, interval, base, issues);
    let cw = raw.cloudwatch;
    let operation_timeout = cw.operation_timeout.unwrap_or(Duration::from_secs(10));
    if operation_timeout < MIN_OPERATION_TIMEOUT {
        issues.error(
            "publish.cloudwatch.operation_timeout",
            format!(
                "{} is shorter than the minimum, 1s: no PutMetricData call could finish in it",
                humantime::format_duration(operation_timeout)
            ),
        );
    }
    if let Some(url) = &cw.endpoint_url
        && let Err(why) = check_endpoint_url(url)
    {
        issues.error("publish.cloudwatch.endpoint_url", why);
    }
    if let Some(why) = cw.region.as_deref().and_then(region_problem) {
        issues.error("publish.cloudwatch.region", why);
    }
    let role = role_of(
        "publish.cloudwatch",
        cw.role_arn.clone(),
        cw.external_id.clone(),
        issues,
    );
    let max_attempts = cw.max_attempts.unwrap_or(3);
    if !(1..=10).contains(&max_attempts) {
        issues.error("publish.cloudwatch.max_attempts", "must be 1–10");
    }
    if sinks.contains(&SinkKind::CloudWatch) && interval < Duration::from_secs(60) {
        issues.warn(format!(
            "publish.interval is {}; CloudWatch standard resolution stores one value per 60 s, so a shorter tick only adds samples to the same minute",
            fmt_duration(interval)
        ));
    }
    Some(Publish {
        interval,
        namespace,
        sinks,
        metrics: raw.metrics.unwrap_or_default(),
        cloudwatch: CloudWatch {
            region: cw.region,
            endpoint_url: cw.endpoint_url,
            operation_timeout: operation_timeout.min(interval),
            max_attempts,
            role,
        },
        otlp,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Every sink kind the config accepts gets its own answer from the one rule of which sinks
    /// `publish.metrics` limits: a new kind must be decided here, never limited or left full
    /// by a default.
    #[test]
    fn every_sink_kind_has_an_explicit_metrics_profile_answer() {
        use strum::IntoEnumIterator;
        for kind in SinkKind::iter() {
            let limited = match kind {
                SinkKind::CloudWatch | SinkKind::Emf => true,
                SinkKind::Otlp => false,
            };
            let name: &str = kind.into();
            assert_eq!(MetricsProfile::Control.limits(name), limited, "{name}");
            assert!(!MetricsProfile::Full.limits(name), "{name}");
        }
    }

    #[test]
    fn namespaces_follow_cloudwatch_rules() {
        for ok in ["Readyprobe", "Team/Orders db_1.x-y#2:z", &"a".repeat(255)] {
            assert!(namespace_ok(ok), "{ok:?}");
        }
        for bad in [
            "",
            "AWS/RDS",
            ":x",
            "N\u{1b}[31m\u{7}\u{0}x",
            "tab\there",
            "naïve",
            "a,b",
            &"a".repeat(256),
        ] {
            assert!(!namespace_ok(bad), "{bad:?}");
        }
    }

    #[test]
    fn endpoint_hosts_and_ports_are_checked() {
        for ok in [
            "http://127.0.0.1:4566",
            "https://monitoring.eu-west-1.amazonaws.com",
            "https://monitoring.eu-west-1.amazonaws.com.",
            "http://[::1]:4566",
            "http://[fd00::2]",
            "http://localhost:65535/",
            "http://vpce-0a1b.monitoring.eu-west-1.vpce.amazonaws.com:1",
        ] {
            assert_eq!(check_endpoint_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://127.0.0.1:99999", "1–65535"),
            ("http://127.0.0.1:0", "1–65535"),
            ("http://a..b", "label"),
            ("http://-bad-.com", "'-'"),
            ("http://ex\u{e4}mple.com", "URL"),
            ("http://300.1.1.1", "IPv4"),
            ("http://1.2.3", "IPv4"),
            ("http://[::g]:80", "IPv6"),
        ] {
            let got = check_endpoint_url(bad);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(why)),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn session_names_follow_sts_rules() {
        assert_eq!(session_name("p1.eu_a-2"), "readyprobe-p1.eu_a-2");
        let long = session_name(&"x".repeat(64));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("readyprobe-xxx"));
        assert_eq!(session_name("a b/c"), "readyprobe-a-b-c");
    }

    /// One `tcp` service publishing to CloudWatch and EMF: the config the tests of the
    /// `[publish]` tables (here and in `otlp_sink.rs`) and of `[serve]` edit.
    pub(in crate::config) const ONE: &str = r#"
prober_id = "az-a"
[publish]
sinks = ["cloudwatch", "emf"]
[publish.cloudwatch]
region = "eu-west-1"
[probe]
kind = "tcp"
[service]
name = "orders-db"
stable_name = "db.orders.internal.example"
[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "db-primary.orders.internal.example"
port = 3306
"#;

    /// `text` parsed as the file `/etc/rp/t.toml` (relative paths resolve to `/etc/rp/`).
    pub(in crate::config) fn parse(
        text: &str,
    ) -> Result<crate::config::Config, Vec<crate::config::Issue>> {
        crate::config::parse(std::path::Path::new("/etc/rp/t.toml"), text).map_err(|e| e.issues)
    }

    /// `text` with `line` added after `after`.
    fn with(after: &str, line: &str) -> String {
        ONE.replacen(after, &format!("{after}\n{line}"), 1)
    }

    const ARN: &str = "arn:aws:iam::111122223333:role/net/readyprobe-publish";

    #[test]
    fn metrics_profile_defaults_to_full_and_names_a_bad_value() {
        assert_eq!(parse(ONE).unwrap().publish.metrics, MetricsProfile::Full);
        let c = parse(&with("[publish]", r#"metrics = "control""#)).unwrap();
        assert_eq!(c.publish.metrics, MetricsProfile::Control);
        let issues = parse(&with("[publish]", r#"metrics = "lean""#)).unwrap_err();
        let text = format!("{issues:?}");
        assert!(text.contains("lean") && text.contains("control"), "{text}");
        assert!(
            text.contains("line: 4") || text.contains("line: Some(4)"),
            "{text}"
        );
    }

    #[test]
    fn targets_default_to_publish_cloudwatch_and_inherit_its_keys() {
        let c = parse(ONE).unwrap();
        let t = &c.services[0].publish_targets;
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].name.as_str(), t[0].role.as_ref()),
            ("eu-west-1", None)
        );
        let text = with(
            "region = \"eu-west-1\"",
            &format!("role_arn = \"{ARN}\"\nexternal_id = \"ext-1234\""),
        );
        let c = parse(&text).unwrap();
        let d = &c.services[0].publish_targets[0];
        assert_eq!(d.name, "eu-west-1@111122223333/readyprobe-publish");
        assert_eq!(d, &c.publish.default_target());
        let role = d.role.as_ref().unwrap();
        assert_eq!(
            (role.account(), role.name()),
            ("111122223333", "readyprobe-publish")
        );
        assert_eq!(role.external_id.as_deref(), Some("ext-1234"));
        // A service's targets: unset keys from [publish.cloudwatch].
        let text = with(
            "stable_name = \"db.orders.internal.example\"",
            "publish = [{ region = \"us-east-1\" }, { name = \"local\", endpoint_url = \"http://127.0.0.1:4566\", role_arn = \"arn:aws:iam::000000000000:role/x\" }]",
        );
        let text = text.replacen(
            "region = \"eu-west-1\"",
            &format!("region = \"eu-west-1\"\nrole_arn = \"{ARN}\""),
            1,
        );
        let c = parse(&text).unwrap();
        let t = &c.services[0].publish_targets;
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name, "us-east-1@111122223333/readyprobe-publish");
        assert_eq!(t[0].region.as_deref(), Some("us-east-1"));
        assert_eq!(t[1].name, "local");
        assert_eq!(t[1].region.as_deref(), Some("eu-west-1"));
        assert_eq!(t[1].endpoint_url.as_deref(), Some("http://127.0.0.1:4566"));
        assert_eq!(t[1].role.as_ref().unwrap().account(), "000000000000");
        // One inline table is one target.
        let text = with(
            "stable_name = \"db.orders.internal.example\"",
            "publish = { region = \"us-west-2\" }",
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.services[0].publish_targets[0].name, "us-west-2");
    }

    /// Each case: (config text, key, text on the line the error must name).
    fn target_key_cases() -> Vec<(String, &'static str, &'static str)> {
        let svc = "stable_name = \"db.orders.internal.example\"";
        let cw = "region = \"eu-west-1\"";
        vec![
            (
                with(cw, "role_arn = \"arn:aws:iam::1234:role/x\""),
                "publish.cloudwatch.role_arn",
                "role_arn",
            ),
            (
                with(cw, "role_arn = \"arn:aws:s3:::bucket\""),
                "publish.cloudwatch.role_arn",
                "role_arn",
            ),
            (
                with(cw, "role_arn = \"arn:aws:iam::111122223333:user/x\""),
                "publish.cloudwatch.role_arn",
                "role_arn",
            ),
            (
                with(cw, "role_arn = \"arn:aws:iam::111122223333:role/bad name\""),
                "publish.cloudwatch.role_arn",
                "role_arn",
            ),
            (
                with(cw, "external_id = \"abc\""),
                "publish.cloudwatch.external_id",
                "external_id",
            ),
            (
                with(cw, &format!("role_arn = \"{ARN}\"\nexternal_id = \"a\"")),
                "publish.cloudwatch.external_id",
                "external_id",
            ),
            (
                with(cw, "region = \"EU West\""),
                "publish.cloudwatch.region",
                "EU West",
            ),
            (
                with(svc, "publish = { region = \"eu_west_1\" }"),
                "service.publish.region",
                "publish =",
            ),
            (
                with(
                    svc,
                    "publish = [{ region = \"us-east-1\" }, { role_arn = \"nope\" }]",
                ),
                "service.publish[1].role_arn",
                "publish =",
            ),
            (
                with(svc, "publish = { external_id = \"ext-1\" }"),
                "service.publish.external_id",
                "publish =",
            ),
            (
                with(svc, "publish = { endpoint_url = \"ftp://x\" }"),
                "service.publish.endpoint_url",
                "publish =",
            ),
            (
                with(svc, "publish = { name = \"a b\" }"),
                "service.publish.name",
                "publish =",
            ),
            (
                with(
                    svc,
                    "publish = [{ region = \"us-east-1\" }, { region = \"us-east-1\" }]",
                ),
                "service.publish[1]",
                "publish =",
            ),
            (with(svc, "publish = []"), "service.publish", "publish ="),
            (
                with(svc, "publish = { regin = \"us-east-1\" }"),
                "service.publish.regin",
                "publish =",
            ),
            (
                with(svc, "publish = \"us-east-1\""),
                "service.publish",
                "publish =",
            ),
            (
                with(svc, "publish = { region = \"us-east-1\" }")
                    .replace("[\"cloudwatch\", \"emf\"]", "[\"emf\"]"),
                "service.publish",
                "publish =",
            ),
        ]
    }

    #[test]
    fn every_target_key_error_names_its_key_and_line() {
        let svc = "stable_name = \"db.orders.internal.example\"";
        let cases = target_key_cases();
        for (text, key, needle) in cases {
            let got = parse(&text).expect_err(&text);
            let hit = got.iter().find(|i| i.key == key);
            assert!(hit.is_some(), "{key}: {got:?}\n{text}");
            let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
            assert_eq!(hit.unwrap().line, Some(line), "{key}: {got:?}");
        }
        // The external id is never echoed.
        let text = with(svc, "publish = { external_id = \"s3cr3t-but-short!\" }");
        let got = parse(&text).unwrap_err();
        assert!(got.iter().all(|i| !i.message.contains("s3cr3t")), "{got:?}");
    }

    #[test]
    fn a_target_name_means_one_target_across_services() {
        let fleet = r#"
[publish]
sinks = ["cloudwatch"]
[probe]
kind = "tcp"
[[service]]
name = "a"
stable_name = "a.internal.example"
publish = { name = "net", region = "eu-west-1" }
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "a1.internal.example"
port = 1
[[service]]
name = "b"
stable_name = "b.internal.example"
publish = [{ name = "net", region = "eu-west-2" }]
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "b1.internal.example"
port = 1
"#;
        let got = parse(fleet).unwrap_err();
        assert_eq!(got[0].key, "service[1].publish", "{got:?}");
        let line = fleet.lines().position(|l| l.contains("eu-west-2")).unwrap() + 1;
        assert_eq!(got[0].line, Some(line));
        let ok = fleet.replace("eu-west-2", "eu-west-1");
        let c = parse(&ok).unwrap();
        assert_eq!(c.services[1].publish_targets, c.services[0].publish_targets);
        // A key error inside the fleet form names the service.
        let bad = fleet.replace(
            "{ name = \"net\", region = \"eu-west-2\" }",
            "{ role_arn = \"x\" }",
        );
        let got = parse(&bad).unwrap_err();
        assert!(
            got.iter()
                .any(|i| i.key == "service[1].publish[0].role_arn"),
            "{got:?}"
        );
    }
}
