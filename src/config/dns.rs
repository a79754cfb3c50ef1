//! `[dns]`: how the `resolve` step asks, and whom.

use super::issues::Issues;
use super::probe::{MIN_TIMEOUT, too_short};
use super::raw::RawDns;
use super::values::AddressFamily;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the `resolve` step.
#[derive(Debug, Clone, PartialEq)]
pub struct Dns {
    /// Explicit nameservers (`ip` or `ip:port`); `None` = read `resolv_conf`.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// resolv.conf path used when `nameservers` is absent (read by the probe at start-up, not
    /// by validation). Default `/etc/resolv.conf`.
    pub resolv_conf: PathBuf,
    /// Timeout of one query to one nameserver. Default 1 s, at least 10 ms.
    pub timeout: Duration,
    /// Address records asked for. Default `ipv4_then_ipv6`.
    pub address_family: AddressFamily,
}

/// `ip` (port 53) or `ip:port`.
fn parse_nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    s.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, 53))
}

/// Validate `[dns]`.
pub(super) fn section(raw: RawDns, issues: &mut Issues<'_>) -> Option<Dns> {
    let nameservers = raw.nameservers.map(|list| {
        let mut out = Vec::new();
        for (i, ns) in list.iter().enumerate() {
            let key = format!("dns.nameservers[{i}]");
            match parse_nameserver(ns) {
                Some(a) if a.port() == 0 => {
                    issues.error(key, format!("{ns:?}: port 0 is not a nameserver port"));
                }
                Some(a) => out.push(a),
                None => issues.error(key, format!("{ns:?} is not an IP address or IP:port")),
            }
        }
        if out.is_empty() {
            issues.error(
                "dns.nameservers",
                "must list at least one nameserver (or remove the key to use resolv.conf)",
            );
        }
        out
    });
    let timeout = raw.timeout.unwrap_or(Duration::from_secs(1));
    if timeout < MIN_TIMEOUT {
        issues.error("dns.timeout", too_short(timeout, MIN_TIMEOUT));
    }
    Some(Dns {
        nameservers,
        resolv_conf: raw
            .resolv_conf
            .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
        timeout,
        address_family: raw.address_family.unwrap_or_default(),
    })
}
