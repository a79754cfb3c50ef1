//! `[probe.otlp]`: an OTLP/HTTP export of one marked data point to a telemetry gateway.

use super::http::{headers, secret_header_keys};
use super::issues::Issues;
use super::raw::RawOtlp;
use super::secret::HeaderValueSource;
use super::tls::{TlsSettings, guard_secrets};
use std::path::Path;

/// Settings of the `otlp` probe kind.
#[derive(Debug, Clone, PartialEq)]
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

/// Validate `[probe.otlp]` with the shared TLS settings.
pub(super) fn section(
    o: RawOtlp,
    tls: TlsSettings,
    base: &Path,
    issues: &mut Issues<'_>,
) -> Option<OtlpProbe> {
    let path = o.path.unwrap_or_else(|| "/v1/metrics".into());
    if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
        issues.error(
            "probe.otlp.path",
            "must be a valid request path starting with '/' (percent-encode other characters)",
        );
    }
    let headers = headers("probe.otlp", o.headers, base, issues);
    guard_secrets(&tls, &secret_header_keys("probe.otlp", &headers), issues);
    Some(OtlpProbe {
        port: o.port.map_or(4318, |p| p.get()),
        tls,
        path,
        headers,
    })
}
