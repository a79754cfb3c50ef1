//! `[evidence.s3]`: the evidence also leaves the host, a closed segment at a time, as gzipped
//! objects under one S3 prefix.

use super::issues::Issues;
use super::raw::RawEvidenceS3;
use super::region::s3_region_problem;
use std::time::Duration;

/// Default `segment`: how long a segment stays open.
pub const DEFAULT_SEGMENT: Duration = Duration::from_secs(60);

/// Shortest `segment` (each closed segment is one PUT).
pub const MIN_SEGMENT: Duration = Duration::from_secs(1);

/// Longest `segment`: the loss bound on a killed task.
pub const MAX_SEGMENT: Duration = Duration::from_secs(3600);

/// Largest `segment_max_mb`: `drill report` reads a segment whole, up to this by default.
pub const MAX_SEGMENT_MB: u64 = 64;

/// Longest `prefix`, bytes: S3 keys are at most 1,024 bytes, and the rest of the key (service,
/// prober, start and first `record_seq`) takes up to about 200.
const MAX_PREFIX_BYTES: usize = 512;

/// Where and how the evidence goes to S3.
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceS3 {
    /// Bucket.
    pub bucket: String,
    /// Key prefix; objects are `<prefix><service-or-all>/<prober>/<start>-<first record_seq>.jsonl.gz`.
    pub prefix: String,
    /// Region; default from the AWS chain.
    pub region: Option<String>,
    /// Endpoint override (emulator, VPC endpoint); implies path-style addressing.
    pub endpoint_url: Option<String>,
    /// A segment is closed (and queued for upload) this long after it opened.
    pub segment: Duration,
    /// ... or when it reaches this size, bytes.
    pub segment_max_bytes: u64,
    /// Most bytes of closed segments kept on local disk while they wait for upload; over it the
    /// oldest is dropped (counted, logged and recorded).
    pub spool_max_bytes: u64,
}

/// Validate `[evidence.s3]`.
pub(super) fn section(raw: RawEvidenceS3, issues: &mut Issues<'_>) -> Option<EvidenceS3> {
    let before = issues.errors.len();
    if let Err(why) = check_bucket(&raw.bucket) {
        issues.error("evidence.s3.bucket", why);
    }
    let prefix = raw.prefix.unwrap_or_else(|| "readyprobe/evidence/".into());
    if prefix.starts_with('/')
        || prefix.len() > MAX_PREFIX_BYTES
        || prefix.contains(char::is_control)
    {
        issues.error(
            "evidence.s3.prefix",
            format!("must not start with \"/\", must be at most {MAX_PREFIX_BYTES} bytes without control characters (e.g. \"readyprobe/evidence/\")"),
        );
    }
    if let Some(url) = &raw.endpoint_url
        && let Err(why) = super::publish::check_endpoint_url(url)
    {
        issues.error("evidence.s3.endpoint_url", why);
    }
    let with_endpoint = raw.endpoint_url.is_some();
    if let Some(why) = raw
        .region
        .as_deref()
        .and_then(|r| s3_region_problem(r, with_endpoint))
    {
        issues.error("evidence.s3.region", why);
    }
    let segment = raw.segment.unwrap_or(DEFAULT_SEGMENT);
    if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&segment) {
        issues.error("evidence.s3.segment", "must be 1s–1h");
    }
    let segment_mb = raw.segment_max_mb.unwrap_or(16);
    if !(1..=MAX_SEGMENT_MB).contains(&segment_mb) {
        issues.error(
            "evidence.s3.segment_max_mb",
            format!("must be 1–{MAX_SEGMENT_MB} (MiB)"),
        );
    }
    let spool_mb = raw.spool_max_mb.unwrap_or(256);
    if !(segment_mb..=1_048_576).contains(&spool_mb) {
        issues.error(
            "evidence.s3.spool_max_mb",
            "must be at least segment_max_mb and at most 1048576 (MiB): the spool holds at least one whole segment",
        );
    }
    if issues.errors.len() > before {
        return None;
    }
    Some(EvidenceS3 {
        bucket: raw.bucket,
        prefix,
        region: raw.region,
        endpoint_url: raw.endpoint_url,
        segment,
        segment_max_bytes: segment_mb * 1024 * 1024,
        spool_max_bytes: spool_mb * 1024 * 1024,
    })
}

/// Check an S3 bucket name: 3–63 characters of lower-case letters, digits, `.` and `-`,
/// beginning and ending with a letter or digit (S3's naming rules): `[evidence.s3] bucket`,
/// an `s3://` `--config` and `drill report --evidence s3://`.
///
/// # Errors
/// A sentence saying what a bucket name is.
pub fn check_bucket(b: &str) -> Result<(), String> {
    let ok_chars = b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if (3..=63).contains(&b.len()) && ok_chars && ends(b.chars().next()) && ends(b.chars().last()) {
        Ok(())
    } else {
        Err("must be an S3 bucket name: 3–63 characters of a-z, 0-9, \".\" and \"-\", starting and ending with a letter or digit".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(table: &str) -> Result<crate::config::Config, String> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/probes/tcp-liveness.toml"
        ))
        .unwrap();
        crate::config::parse(std::path::Path::new("t.toml"), &format!("{text}\n{table}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_bounds() {
        let c = parse("[evidence.s3]\nbucket = \"drills\"\n").unwrap();
        let s3 = c.evidence_s3.unwrap();
        assert_eq!(s3.prefix, "readyprobe/evidence/");
        assert_eq!(s3.segment, Duration::from_secs(60));
        assert_eq!(s3.segment_max_bytes, 16 << 20);
        assert_eq!(s3.spool_max_bytes, 256 << 20);
        assert!(parse("").unwrap().evidence_s3.is_none());
    }

    #[test]
    fn errors_name_line_and_key() {
        for (table, key) in [
            ("bucket = \"Drills\"", "evidence.s3.bucket"),
            ("bucket = \"d\"", "evidence.s3.bucket"),
            (
                "bucket = \"drills\"\nsegment = \"0s\"",
                "evidence.s3.segment",
            ),
            (
                "bucket = \"drills\"\nsegment = \"2h\"",
                "evidence.s3.segment",
            ),
            (
                "bucket = \"drills\"\nsegment_max_mb = 65",
                "evidence.s3.segment_max_mb",
            ),
            (
                "bucket = \"drills\"\nsegment_max_mb = 32\nspool_max_mb = 16",
                "evidence.s3.spool_max_mb",
            ),
            (
                "bucket = \"drills\"\nprefix = \"/x/\"",
                "evidence.s3.prefix",
            ),
            (
                "bucket = \"drills\"\nendpoint_url = \"ftp://x\"",
                "evidence.s3.endpoint_url",
            ),
            ("bucket = \"drills\"\nsegmant = \"1m\"", "segmant"),
        ] {
            let e = parse(&format!("[evidence.s3]\n{table}\n")).unwrap_err();
            assert!(e.contains(key), "{table}: {e}");
            assert!(e.contains("t.toml:"), "{table}: {e}");
        }
    }
}
