//! `[publish]`: the publish tick, the CloudWatch namespace and the metric sinks.

use super::issues::Issues;
use super::raw::RawPublish;
use super::values::SinkKind;
use crate::clock::fmt_duration;
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
    /// CloudWatch sink settings.
    pub cloudwatch: CloudWatch,
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

/// Check an endpoint URL's authority (user info already refused): a DNS host name or an IP
/// literal (`[…]` for IPv6), and a port of 1–65535 if one is given.
fn check_authority(authority: &str) -> Result<(), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or("its IPv6 address has no closing ']'")?;
        v6.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("[{v6}] is not an IPv6 address"))?;
        match after.strip_prefix(':') {
            Some(p) => ("", Some(p)),
            None if after.is_empty() => ("", None),
            None => return Err(format!("unexpected {after:?} after the IPv6 address")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if let Some(p) = port
        && !(p.bytes().all(|b| b.is_ascii_digit()) && matches!(p.parse::<u16>(), Ok(1..)))
    {
        return Err(format!("port {p:?} is not 1–65535"));
    }
    if host.is_empty() {
        return Ok(()); // an IPv6 literal, checked above
    }
    let last = host.trim_end_matches('.').rsplit('.').next().unwrap_or("");
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        // A name whose last label is a number is an IPv4 address to a URL parser.
        return host
            .parse::<std::net::Ipv4Addr>()
            .map(|_| ())
            .map_err(|_| format!("{host:?} is not an IPv4 address"));
    }
    super::service::check_hostname(host.strip_suffix('.').unwrap_or(host))
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
        Some(a) if !a.host().is_empty() => {
            check_authority(a.as_str()).map_err(|why| format!("{}: {why}", shown()))
        }
        _ => Err(format!("{} has no host", shown())),
    }
}

/// Validate `[publish]`.
pub(super) fn section(raw: RawPublish, issues: &mut Issues<'_>) -> Option<Publish> {
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
            "lists no sink; readiness would be published nowhere (use \"emf\" and/or \"cloudwatch\")",
        );
    }
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
        cloudwatch: CloudWatch {
            region: cw.region,
            endpoint_url: cw.endpoint_url,
            operation_timeout: operation_timeout.min(interval),
            max_attempts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
