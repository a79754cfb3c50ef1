//! `[publish.otlp]`: the OTLP metrics export sink (OTLP/HTTP protobuf to a collector).

use super::http::{headers, secret_header_keys};
use super::issues::Issues;
use super::raw::RawOtlpSink;
use super::secret::HeaderValueSource;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The path an endpoint without one is sent to (the OTLP/HTTP metrics path).
pub const DEFAULT_PATH: &str = "/v1/metrics";

/// The default timeout of one export try.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest timeout of one try: a connection, a TLS handshake and a request to a collector
/// take some hundreds of milliseconds across a network.
const MIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Settings of the OTLP sink.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpSink {
    /// The URL every export is POSTed to, e.g. `http://127.0.0.1:4318/v1/metrics` (an endpoint
    /// written without a path gets [`DEFAULT_PATH`]).
    pub endpoint: String,
    /// Request headers (e.g. an auth token by reference); a secret one is never logged.
    pub headers: Vec<(http::HeaderName, HeaderValueSource)>,
    /// Timeout of one try. Default 10 s, at least 500 ms, capped at the publish interval.
    pub timeout: Duration,
    /// Tries per batch (first try included) for retryable failures (429, 502, 503, 504,
    /// timeouts, connection errors), all within the batch's publish window. Default 3.
    pub max_tries: u32,
    /// The PEM bundle of the CA that signs the collector's certificate (`https` only; required
    /// there: the collector's chain and name are verified).
    pub ssl_ca: Option<PathBuf>,
}

impl OtlpSink {
    /// Whether the endpoint is `https`.
    pub fn is_https(&self) -> bool {
        self.endpoint.starts_with("https://")
    }
}

/// Whether `host` (as a URL writes it) is this machine: a secret header may go there in clear.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The endpoint checked, with [`DEFAULT_PATH`] when it names no path.
fn endpoint(url: &str) -> Result<String, String> {
    // A user name, a password or a query string may hold a credential: never shown.
    let shown = if url.contains(['@', '?', '#']) {
        "the URL".to_string()
    } else {
        format!("{:?}", url.chars().take(100).collect::<String>())
    };
    if url.contains(['?', '#']) {
        return Err(format!(
            "{shown} carries a query string or fragment (`?…`, `#…`): it would be in every error that names the endpoint; give a token as a header by reference (headers.authorization = {{ env = \"VAR\" }})"
        ));
    }
    let uri: http::Uri = url.parse().map_err(|e| {
        format!("{shown} is not a URL ({e}); write e.g. \"http://127.0.0.1:4318/v1/metrics\"")
    })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{shown} must start with http:// or https://"));
    }
    match uri.authority() {
        Some(a) if a.as_str().contains('@') => {
            return Err(format!(
                "{shown} carries a user name or password; give credentials as a header by reference (headers.authorization = {{ env = \"VAR\" }})"
            ));
        }
        Some(a) if !a.host().is_empty() => {
            super::endpoint::check_authority(a.as_str()).map_err(|why| format!("{shown}: {why}"))?
        }
        _ => return Err(format!("{shown} has no host")),
    }
    if matches!(uri.path(), "" | "/") {
        return Ok(format!("{}{DEFAULT_PATH}", url.trim_end_matches('/')));
    }
    Ok(url.to_string())
}

/// Validate `[publish.otlp]` (`raw`) given whether `publish.sinks` lists `otlp` and the
/// publish interval; `None` when the sink is not used or its table did not validate.
pub(super) fn section(
    raw: Option<RawOtlpSink>,
    listed: bool,
    interval: Duration,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<OtlpSink> {
    const KEY: &str = "publish.otlp";
    let raw = match (raw, listed) {
        (None, false) => return None,
        (None, true) => {
            issues.error(
                "publish.sinks",
                "lists \"otlp\" but [publish.otlp] is missing: set its endpoint, e.g. endpoint = \"http://127.0.0.1:4318\"",
            );
            return None;
        }
        (Some(_), false) => {
            issues.error(
                KEY,
                "is set, but publish.sinks lacks \"otlp\": add it, or remove this table",
            );
            return None;
        }
        (Some(r), true) => r,
    };
    let mut ok = true;
    let endpoint = match raw.endpoint.as_deref().map(endpoint) {
        Some(Ok(e)) => e,
        Some(Err(why)) => {
            issues.error(format!("{KEY}.endpoint"), why);
            ok = false;
            String::new()
        }
        None => {
            issues.error(
                KEY,
                "needs endpoint, the collector's OTLP/HTTP URL, e.g. endpoint = \"http://127.0.0.1:4318\"",
            );
            return None;
        }
    };
    let timeout = raw.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout < MIN_TIMEOUT {
        issues.error(
            format!("{KEY}.timeout"),
            format!(
                "{} is shorter than the minimum, 500ms: no export could finish in it",
                humantime::format_duration(timeout)
            ),
        );
        ok = false;
    }
    let max_tries = raw.max_tries.unwrap_or(3);
    if !(1..=10).contains(&max_tries) {
        issues.error(format!("{KEY}.max_tries"), "must be 1–10");
        ok = false;
    }
    let headers = headers(KEY, raw.headers, base, issues);
    let https = endpoint.starts_with("https://");
    let ssl_ca = ssl_ca(raw.ssl_ca, https, base, issues, &mut ok);
    if !https && ok {
        secrets_stay_local(&endpoint, &headers, issues, &mut ok);
    }
    ok.then_some(OtlpSink {
        endpoint,
        headers,
        timeout: timeout.min(interval),
        max_tries,
        ssl_ca,
    })
}

/// `ssl_ca` checked against the scheme (required for `https`, refused for `http`), relative
/// to the config's directory; `ok` cleared on an error.
fn ssl_ca(
    raw: Option<PathBuf>,
    https: bool,
    base: &Path,
    issues: &mut Issues<'_>,
    ok: &mut bool,
) -> Option<PathBuf> {
    const KEY: &str = "publish.otlp.ssl_ca";
    let (path, error) = match raw {
        Some(_) if !https => (
            None,
            Some("is only read for an https endpoint; publish.otlp.endpoint is http: remove it"),
        ),
        Some(p) if p.as_os_str().is_empty() => (
            None,
            Some("must name a file (absolute, or relative to the config file)"),
        ),
        Some(p) if p.is_relative() => (Some(base.join(p)), None),
        Some(p) => (Some(p), None),
        None if https => {
            issues.error(
                "publish.otlp.endpoint",
                "is https: set ssl_ca, the PEM bundle of the CA that signs the collector's certificate (its chain and name are verified)",
            );
            *ok = false;
            (None, None)
        }
        None => (None, None),
    };
    if let Some(why) = error {
        issues.error(KEY, why);
        *ok = false;
    }
    path
}

/// Refuse a secret header over plain `http` to another host: it would cross the network in
/// clear. A collector on this host (loopback) may take one.
fn secrets_stay_local(
    endpoint: &str,
    headers: &[(http::HeaderName, HeaderValueSource)],
    issues: &mut Issues<'_>,
    ok: &mut bool,
) {
    let host = endpoint
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_default();
    if is_loopback(&host) {
        return;
    }
    for key in secret_header_keys("publish.otlp", headers) {
        issues.error(
            key,
            "is a secret, and the endpoint is plain http to another host: it would cross the network in clear; use https (with ssl_ca), or a collector on this host",
        );
        *ok = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_the_metrics_path_when_they_name_none() {
        for (url, want) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/metrics"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/metrics"),
            (
                "https://otel.example:443/otlp/v1/metrics",
                "https://otel.example:443/otlp/v1/metrics",
            ),
            ("http://[::1]:4318", "http://[::1]:4318/v1/metrics"),
        ] {
            assert_eq!(endpoint(url).as_deref(), Ok(want), "{url}");
        }
        for (bad, why) in [
            ("ftp://x.example", "http://"),
            ("http://u:secretpw@x.example", "user name or password"),
            ("http://x.example/v1/metrics?token=secretpw", "query string"),
            ("http://x.example?secretpw", "query string"),
            ("http://x.example:4318/?api_key=secretpw", "query string"),
            ("http://x.example/v1/metrics#secretpw", "query string"),
            ("http://x.example:0", "1–65535"),
            ("not a url", "URL"),
        ] {
            let got = endpoint(bad);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(why)),
                "{bad}: {got:?}"
            );
            assert!(!got.unwrap_err().contains("secretpw"));
        }
    }

    #[test]
    fn loopback_hosts() {
        for h in ["127.0.0.1", "localhost", "[::1]", "127.3.4.5"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["10.0.0.1", "otel.example", "[fd00::1]"] {
            assert!(!is_loopback(h), "{h}");
        }
    }

    use crate::config::publish::tests::{ONE, parse};

    /// [`ONE`] with `otlp` in place of `emf` and its table.
    static BASE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        ONE.replace("\"emf\"]", "\"otlp\"]").replace(
            "[probe]",
            "[publish.otlp]\nendpoint = \"http://127.0.0.1:4318\"\n[probe]",
        )
    });

    #[test]
    fn the_table_parses_with_its_defaults() {
        let c = parse(&BASE).unwrap();
        let o = c.publish.otlp.unwrap();
        assert_eq!(o.endpoint, "http://127.0.0.1:4318/v1/metrics");
        assert_eq!((o.timeout, o.max_tries), (DEFAULT_TIMEOUT, 3));
        assert!(o.headers.is_empty() && o.ssl_ca.is_none());
        let text = BASE.replace(
            "endpoint = \"http://127.0.0.1:4318\"",
            "endpoint = \"https://otel.example:4318\"\nssl_ca = \"ca.pem\"\ntimeout = \"2s\"\nmax_tries = 5\nheaders = { authorization = { env = \"OTLP_TOKEN\" }, x-tenant = \"orders\" }",
        );
        let o = parse(&text).unwrap().publish.otlp.unwrap();
        assert_eq!(o.ssl_ca.as_deref(), Some(Path::new("/etc/rp/ca.pem")));
        assert_eq!((o.timeout, o.max_tries), (Duration::from_secs(2), 5));
        assert_eq!(o.headers.len(), 2);
        // A secret header may go to a collector on this host over http.
        let text = BASE.replace(
            "endpoint = \"http://127.0.0.1:4318\"",
            "endpoint = \"http://localhost:4318\"\nheaders = { authorization = { env = \"T\" } }",
        );
        assert!(parse(&text).is_ok());
    }

    /// Each bad table: its key and line, and no secret echoed.
    #[test]
    fn every_error_names_its_key_and_line() {
        let ep = "endpoint = \"http://127.0.0.1:4318\"";
        let cases = [
            (BASE.replace(ep, "endpoint = \"ftp://x\""), "publish.otlp.endpoint", "endpoint ="),
            (BASE.replace(ep, ""), "publish.otlp", "[publish.otlp]"),
            (BASE.replace(ep, &format!("{ep}\ntimeout = \"100ms\"")), "publish.otlp.timeout", "timeout"),
            (BASE.replace(ep, &format!("{ep}\nmax_tries = 0")), "publish.otlp.max_tries", "max_tries"),
            (BASE.replace(ep, &format!("{ep}\nssl_ca = \"ca.pem\"")), "publish.otlp.ssl_ca", "ssl_ca"),
            (BASE.replace(ep, "endpoint = \"https://otel.example\""), "publish.otlp.endpoint", "endpoint ="),
            (
                BASE.replace(ep, "endpoint = \"http://otel.example:4318\"\nheaders = { authorization = { env = \"T\" } }"),
                "publish.otlp.headers.authorization",
                "headers",
            ),
            (
                BASE.replace(ep, &format!("{ep}\nheaders = {{ authorization = \"Bearer s3cr3t\" }}")),
                "publish.otlp.headers.authorization",
                "headers",
            ),
            (BASE.replace(ep, &format!("{ep}\nbogus = 1")), "publish.otlp.bogus", "bogus"),
            (
                BASE.replace(ep, "endpoint = \"http://127.0.0.1:4318/v1/metrics?key=s3cr3t\""),
                "publish.otlp.endpoint",
                "endpoint =",
            ),
            (BASE.replace("sinks = [\"cloudwatch\", \"otlp\"]", "sinks = [\"cloudwatch\"]"), "publish.otlp", "[publish.otlp]"),
            (
                BASE.replace("[publish.otlp]\n", "").replace(ep, ""),
                "publish.sinks",
                "sinks =",
            ),
        ];
        for (text, key, needle) in cases {
            let got = parse(&text).expect_err(&text);
            let hit = got.iter().find(|i| i.key == key);
            assert!(hit.is_some(), "{key}: {got:?}\n{text}");
            let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
            assert_eq!(hit.unwrap().line, Some(line), "{key}: {got:?}");
            assert!(got.iter().all(|i| !i.message.contains("s3cr3t")), "{got:?}");
        }
    }
}
