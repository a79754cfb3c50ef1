//! `[serve]`: the prober's own HTTP endpoint (`/metrics`, `/healthz`, `/status`). Off unless the
//! table is present; it binds loopback unless `listen` says otherwise.

use super::issues::Issues;
use super::raw::RawServe;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The address a `[serve]` table without `listen` binds: loopback only, never every interface.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT);
/// The port of [`DEFAULT_LISTEN`] (the one OpenTelemetry's Prometheus exporter uses).
const DEFAULT_PORT: u16 = 9464;
/// `max_connections` when not set.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// The most `max_connections` accepts.
pub const MAX_CONNECTIONS: usize = 1024;
/// `request_timeout` when not set.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The accepted range of `request_timeout`.
const REQUEST_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(300));

/// The endpoint's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Serve {
    /// Where it listens. Default [`DEFAULT_LISTEN`].
    pub listen: SocketAddr,
    /// Connections served at once; one over it is accepted and closed at once.
    pub max_connections: usize,
    /// A request's headers must arrive within it, and its response be written within it.
    pub request_timeout: Duration,
}

/// Validate `[serve]`.
pub(super) fn section(raw: RawServe, issues: &mut Issues<'_>) -> Serve {
    let listen = match raw.listen.as_deref().map(str::trim) {
        None => DEFAULT_LISTEN,
        Some(text) => match text.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                issues.error(
                    "serve.listen",
                    format!(
                        "{text:?} is not an IP address and port (e.g. \"127.0.0.1:9464\" or \"[::1]:9464\")"
                    ),
                );
                DEFAULT_LISTEN
            }
        },
    };
    let max_connections = match raw.max_connections {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(n) if (1..=MAX_CONNECTIONS as u64).contains(&n) => n as usize,
        Some(n) => {
            issues.error(
                "serve.max_connections",
                format!("{n}: must be 1–{MAX_CONNECTIONS}"),
            );
            DEFAULT_MAX_CONNECTIONS
        }
    };
    let request_timeout = raw.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT);
    let (min, max) = REQUEST_TIMEOUT_RANGE;
    if !(min..=max).contains(&request_timeout) {
        issues.error(
            "serve.request_timeout",
            format!(
                "{}: must be {}–{}",
                issues.written("serve.request_timeout", request_timeout),
                crate::clock::fmt_duration(min),
                crate::clock::fmt_duration(max)
            ),
        );
    }
    Serve {
        listen,
        max_connections,
        request_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Issue;
    use crate::config::publish::tests::{ONE, parse};

    fn serve_of(table: &str) -> Result<Option<Serve>, Vec<Issue>> {
        parse(&format!("{ONE}{table}")).map(|c| c.serve)
    }

    #[test]
    fn off_without_the_table_and_loopback_with_an_empty_one() {
        assert_eq!(serve_of(""), Ok(None));
        let s = serve_of("[serve]\n").unwrap().unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:9464");
        assert_eq!(s.max_connections, 64);
        assert_eq!(s.request_timeout, Duration::from_secs(5));
        let s = serve_of(
            "[serve]\nlisten = \"[::1]:9100\"\nmax_connections = 1024\nrequest_timeout = \"250ms\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.listen.to_string(), "[::1]:9100");
        assert_eq!(s.max_connections, 1024);
        assert_eq!(s.request_timeout, Duration::from_millis(250));
    }

    #[test]
    fn bad_values_name_their_key_and_line() {
        let lines = ONE.lines().count();
        let issues = serve_of(
            "[serve]\nlisten = \"localhost:9464\"\nmax_connections = 0\nrequest_timeout = \"10m\"\n",
        )
        .unwrap_err();
        let got: Vec<(&str, Option<usize>)> =
            issues.iter().map(|i| (i.key.as_str(), i.line)).collect();
        assert_eq!(
            got,
            [
                ("serve.listen", Some(lines + 2)),
                ("serve.max_connections", Some(lines + 3)),
                ("serve.request_timeout", Some(lines + 4)),
            ],
            "{issues:?}"
        );
        assert!(issues[0].message.contains("not an IP address and port"));
        assert!(issues[1].message.contains("must be 1–1024"));
        assert!(
            issues[2].message.contains("10m: must be 100ms–5m"),
            "{issues:?}"
        );
        let issues = serve_of("[serve]\nmax_connections = 1025\n").unwrap_err();
        assert_eq!(issues[0].key, "serve.max_connections");
        let issues = serve_of("[serve]\nport = 9464\n").unwrap_err();
        assert!(issues[0].message.contains("port"), "{issues:?}");
    }
}
