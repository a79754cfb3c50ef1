//! `[state]`: where the shared control document (readiness, approvals, overrides) lives.

use super::issues::Issues;
use super::raw::RawState;
use super::region::s3_region_problem;
use super::values::StoreName;
use std::time::Duration;

/// The shared state store, as configured (the runtime one is `state::Store`).
#[derive(Debug, Clone, PartialEq)]
pub struct StateConfig {
    /// Which store.
    pub store: StoreKind,
    /// How often a running prober syncs with the store (saves its readiness, reads approvals
    /// and overrides). Default 10 s, capped at the publish interval.
    pub poll_interval: Duration,
}

/// A state store kind with its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreKind {
    /// `state_dir/control-<service>.json`.
    File,
    /// One S3 object.
    S3(S3State),
}

/// Settings of the S3 state store.
#[derive(Debug, Clone, PartialEq)]
pub struct S3State {
    /// Bucket.
    pub bucket: String,
    /// Key prefix (e.g. `readyprobe/`); the object is `<prefix>control-<service>.json`.
    pub key_prefix: String,
    /// Region; default from the AWS chain.
    pub region: Option<String>,
    /// Endpoint override (emulator, VPC endpoint): an http(s) URL with a host; implies
    /// path-style addressing.
    pub endpoint_url: Option<String>,
}

/// Validate `[state]`; the poll interval is capped at `publish_interval`.
pub(super) fn section(
    raw: RawState,
    publish_interval: Duration,
    issues: &mut Issues<'_>,
) -> Option<StateConfig> {
    let poll_interval = raw
        .poll_interval
        .unwrap_or(Duration::from_secs(10))
        .min(publish_interval);
    if poll_interval < Duration::from_millis(100) {
        issues.error("state.poll_interval", "must be at least 100ms");
    }
    let store = match (raw.store.unwrap_or_default(), raw.s3) {
        (StoreName::File, None) => Some(StoreKind::File),
        (StoreName::File, Some(_)) => {
            issues.error(
                "state.s3",
                "is set but state.store is \"file\"; set store = \"s3\" or remove [state.s3]",
            );
            None
        }
        (StoreName::S3, Some(s3)) => {
            if s3.bucket.is_empty() {
                issues.error("state.s3.bucket", "must name a bucket");
            }
            if let Some(url) = &s3.endpoint_url
                && let Err(why) = super::publish::check_endpoint_url(url)
            {
                issues.error("state.s3.endpoint_url", why);
            }
            let with_endpoint = s3.endpoint_url.is_some();
            if let Some(why) = s3
                .region
                .as_deref()
                .and_then(|r| s3_region_problem(r, with_endpoint))
            {
                issues.error("state.s3.region", why);
            }
            Some(StoreKind::S3(S3State {
                bucket: s3.bucket,
                key_prefix: s3.key_prefix.unwrap_or_else(|| "readyprobe/".into()),
                region: s3.region,
                endpoint_url: s3.endpoint_url,
            }))
        }
        (StoreName::S3, None) => {
            issues.error(
                "state.store",
                "\"s3\" needs a [state.s3] table with a bucket",
            );
            None
        }
    };
    Some(StateConfig {
        store: store?,
        poll_interval,
    })
}

/// A service name made safe for a file or object name (other characters become `_`).
pub fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
