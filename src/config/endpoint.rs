//! The authority of an endpoint URL (a CloudWatch endpoint override, an OTLP collector), checked
//! the same way wherever a URL is configured.

/// Check an endpoint URL's authority (user info already refused): a DNS host name or an IP
/// literal (`[…]` for IPv6), and a port of 1–65535 if one is given.
pub(super) fn check_authority(authority: &str) -> Result<(), String> {
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
