//! `[probe.tcp]`: resolve, connect and optionally TLS, a liveness-level probe.

use super::issues::Issues;
use super::raw::RawTcp;
use super::tls::TlsSettings;

/// Settings of the `tcp` probe kind.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpProbe {
    /// Default port; a branch may override it (one of the two is required).
    pub port: Option<u16>,
    /// TLS on the connection (`ssl_mode` default `disabled` for this kind).
    pub tls: TlsSettings,
}

/// Validate `[probe.tcp]` with the shared TLS settings.
pub(super) fn section(t: RawTcp, tls: TlsSettings, issues: &mut Issues<'_>) -> Option<TcpProbe> {
    issues.warn(
        "probe.kind \"tcp\" is a liveness-level probe: it proves the port answers (and TLS, if enabled), not that the branch can do its job; prefer a kind that exercises the real write path",
    );
    Some(TcpProbe {
        port: t.port.map(|p| p.get()),
        tls,
    })
}
