//! `[probe.http]`: a marked request on the branch's real write path, with checks on the answer
//! and an optional read-back (`[probe.http.verify]`). Also the header rules `otlp` shares.

use super::issues::Issues;
use super::raw::{RawHttp, RawHttpVerify};
use super::secret::HeaderValueSource;
use super::tls::{TlsSettings, guard_secrets};
use super::values::SslMode;
use std::collections::BTreeMap;
use std::path::Path;

/// One HTTP request of the `http` kind.
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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

/// Header names whose values are credentials: only by reference.
const SENSITIVE: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "x-auth-token",
];

/// Validate a headers table under `prefix`; secret file paths resolve against `base`.
pub(super) fn headers(
    prefix: &str,
    raw: BTreeMap<String, HeaderValueSource>,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Vec<(http::HeaderName, HeaderValueSource)> {
    let mut out = Vec::new();
    // Each header name with the key that gave it first: names that differ only in case are one
    // header, and which value would be sent (a secret or an inline one) must not be a guess.
    let mut seen: Vec<(http::HeaderName, String)> = Vec::new();
    for (name, v) in raw {
        let key = format!("{prefix}.headers.{name}");
        let Ok(hn) = http::HeaderName::from_bytes(name.as_bytes()) else {
            issues.error(key, "is not a valid header name");
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == hn) {
            let message =
                format!("names the same header as {first} (header names ignore case); keep one");
            issues.error(key, message);
            continue;
        }
        seen.push((hn.clone(), key.clone()));
        match v {
            HeaderValueSource::Plain(_) if SENSITIVE.contains(&hn.as_str()) => issues.error(
                key,
                "carries a credential: give it by reference, { env = \"VAR\" } or { file = \"/run/secrets/x\" } (the inline value is not shown)",
            ),
            HeaderValueSource::Plain(p) if http::HeaderValue::from_str(&p).is_err() => issues.error(
                key,
                "is not a valid header value (control characters such as CR/LF are not allowed)",
            ),
            HeaderValueSource::Plain(p) => out.push((hn, HeaderValueSource::Plain(p))),
            HeaderValueSource::Secret(r) => {
                out.push((hn, HeaderValueSource::Secret(r.relative_to(base))));
            }
        }
    }
    out
}

/// The config keys of the headers whose values are secrets, under `prefix`.
pub(super) fn secret_header_keys(
    prefix: &str,
    headers: &[(http::HeaderName, HeaderValueSource)],
) -> Vec<String> {
    headers
        .iter()
        .filter(|(_, v)| matches!(v, HeaderValueSource::Secret(_)))
        .map(|(n, _)| format!("{prefix}.headers.{n}"))
        .collect()
}

/// Validate one request (`probe.http` or `probe.http.verify`).
fn request_spec(
    prefix: &str,
    r: RawHttpVerify,
    default_method: &str,
    issues: &mut Issues<'_>,
) -> Option<HttpRequestSpec> {
    let m = r.method.unwrap_or_else(|| default_method.into());
    let method = http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok();
    if method.is_none() {
        issues.error(
            format!("{prefix}.method"),
            format!("{m:?} is not an HTTP method"),
        );
    }
    if !r.path.starts_with('/') {
        issues.error(
            format!("{prefix}.path"),
            "must start with '/' (the host is the branch's endpoint)",
        );
    } else {
        // Rendered with a sample marker, it must be a valid request target.
        let sample = r
            .path
            .replace("{{marker}}", "0123456789abcdef0123456789abcdef")
            .replace("{{seq}}", "1")
            .replace("{{prober_id}}", "p")
            .replace("{{branch}}", "b")
            .replace("{{endpoint}}", "e.example");
        if sample.parse::<http::uri::PathAndQuery>().is_err() {
            issues.error(
                format!("{prefix}.path"),
                "is not a valid request path (spaces and other characters must be percent-encoded)",
            );
        }
    }
    let expect_status = r.expect_status.unwrap_or_default();
    if expect_status.iter().any(|c| !(100..=599).contains(c)) {
        issues.error(
            format!("{prefix}.expect_status"),
            "status codes are 100–599",
        );
    }
    Some(HttpRequestSpec {
        method: method?,
        path: r.path,
        expect_status,
        expect_body_contains: r.expect_body_contains,
    })
}

/// Validate `[probe.http]` with the shared TLS settings.
pub(super) fn section(
    h: RawHttp,
    tls: TlsSettings,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<HttpProbe> {
    let main = RawHttpVerify {
        method: h.method,
        path: h.path,
        expect_status: h.expect_status,
        expect_body_contains: h.expect_body_contains,
    };
    let request = request_spec("probe.http", main, "POST", issues);
    let headers = headers("probe.http", h.headers, base, issues);
    guard_secrets(&tls, &secret_header_keys("probe.http", &headers), issues);
    let expect_header = match h.expect_header {
        Some(e) => match http::HeaderName::from_bytes(e.name.as_bytes()) {
            Ok(n) => Some((n, e.equals)),
            Err(_) => {
                issues.error(
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
        issues.error(
            "probe.http.expect_json.pointer",
            "a JSON pointer (RFC 6901) is empty or starts with '/'",
        );
    }
    let verify = h
        .verify
        .and_then(|v| request_spec("probe.http.verify", v, "GET", issues));
    let default_port = if tls.ssl_mode == SslMode::Disabled {
        80
    } else {
        443
    };
    Some(HttpProbe {
        port: h.port.map_or(default_port, |p| p.get()),
        tls,
        request: request?,
        headers,
        body: h.body,
        expect_json: h.expect_json.map(|j| (j.pointer, j.equals)),
        expect_header,
        verify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SecretRef;

    #[test]
    fn header_names_differing_only_in_case_are_an_error_naming_both_keys() {
        let mut issues = Issues::new("", None);
        let raw = BTreeMap::from([
            (
                "x-a".to_string(),
                HeaderValueSource::Secret(SecretRef::Env("TOKEN".into())),
            ),
            ("X-A".to_string(), HeaderValueSource::Plain("inline".into())),
            ("x-b".to_string(), HeaderValueSource::Plain("b".into())),
        ]);
        let out = headers("probe.http", raw, Path::new("/"), &mut issues);
        let errors: Vec<_> = issues
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.key, e.message))
            .collect();
        assert_eq!(
            errors,
            [
                "probe.http.headers.x-a: names the same header as probe.http.headers.X-A (header names ignore case); keep one"
            ]
        );
        assert_eq!(out.len(), 2);
    }
}
