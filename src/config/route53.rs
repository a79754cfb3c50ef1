//! `[route53]`: what `check --aws` expects of the health checks and where it finds the failover
//! records. `run` never reads it.

use super::issues::Issues;
use super::publish::check_endpoint_url;
use super::raw::RawRoute53;
use super::values::HealthStatus;

/// The longest hosted zone id Route 53 accepts, characters.
const MAX_ZONE_ID_LEN: usize = 32;

/// `[route53]`, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route53 {
    /// The hosted zone of every service's failover records (without `/hostedzone/`). Default:
    /// the private zone named by the stable name or its longest suffix.
    pub hosted_zone_id: Option<String>,
    /// The `InsufficientDataHealthStatus` every branch's health check must have. Default: any
    /// value, as long as one is set.
    pub insufficient_data_health_status: Option<HealthStatus>,
    /// Route 53 endpoint override (an emulator); default the global endpoint.
    pub endpoint_url: Option<String>,
}

/// Validate `[route53]`.
pub(super) fn section(raw: RawRoute53, issues: &mut Issues<'_>) -> Route53 {
    let hosted_zone_id = raw.hosted_zone_id.map(|id| {
        let id = id.trim();
        id.strip_prefix("/hostedzone/").unwrap_or(id).to_string()
    });
    if let Some(id) = &hosted_zone_id
        && (id.is_empty()
            || id.len() > MAX_ZONE_ID_LEN
            || !id
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
    {
        issues.error(
            "route53.hosted_zone_id",
            format!(
                "must be a hosted zone id: 1–{MAX_ZONE_ID_LEN} of A–Z and 0–9, e.g. \"Z0123456789ABCDEFGHIJ\""
            ),
        );
    }
    if let Some(url) = &raw.endpoint_url
        && let Err(why) = check_endpoint_url(url)
    {
        issues.error("route53.endpoint_url", why);
    }
    Route53 {
        hosted_zone_id,
        insufficient_data_health_status: raw.insufficient_data_health_status,
        endpoint_url: raw.endpoint_url,
    }
}
