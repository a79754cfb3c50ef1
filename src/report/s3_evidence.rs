//! Evidence segments in S3 for `drill report --evidence s3://bucket/prefix/`: which segments a
//! window needs ([`list`]) and each one's lines ([`read`]), bounded everywhere. Keys are
//! `<prefix><service-or-all>/<prober>/<start>-<first record_seq>.jsonl.gz` with `start` as UTC
//! `YYYYMMDDTHHMMSSZ`, so within a prober's directory keys sort by time: the listing starts
//! after the window's start less the longest segment, keeps the last segment that opened before
//! the window (it may hold the window's first records) and stops at the first key after it.
//!
//! Bounds: at most [`Limits::max_keys`] keys and [`MAX_DIRS`] directories listed, at most
//! [`Limits::max_total_bytes`] of objects read in all, each object at most
//! [`Limits::max_object_bytes`] both as stored and gunzipped. An object over its cap, one that
//! is not gzip, a key not of the pattern and a directory below a prober's are skipped with a
//! sentence for stderr; the other bounds end the read with an error that says how to narrow it.

use crate::clock::Millis;
use crate::sink::segments::{Gunzip, gunzip};
use aws_sdk_s3::Client;
use std::time::Duration;

/// Suffix of a segment object.
pub const SUFFIX: &str = ".jsonl.gz";

/// Most directories (services, probers) listed under the prefix.
pub const MAX_DIRS: usize = 10_000;

/// Longest time one segment read may take, the body included.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a segment can stay open (`evidence.s3.segment` ≤ 1 h): the segment holding a
/// window's first records opened at most this long before it.
const LONGEST_SEGMENT_MS: Millis = 3_600_000;

/// Where the segments are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Bucket.
    pub bucket: String,
    /// Key prefix (the config's `evidence.s3.prefix`, or deeper: a service's or a prober's).
    pub prefix: String,
}

impl Location {
    /// `s3://bucket/prefix/` (the prefix may be empty).
    ///
    /// # Errors
    /// A sentence saying what a location looks like.
    pub fn parse(url: &str) -> Result<Location, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} is not an s3://bucket/prefix/ location"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{url:?} names no bucket (s3://bucket/prefix/)"));
        }
        crate::config::check_bucket(bucket).map_err(|why| format!("{url:?}: the bucket {why}"))?;
        Ok(Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The location of `key`, for messages.
    pub fn url_of(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

/// The read's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most keys listed in all.
    pub max_keys: usize,
    /// Most bytes of objects (as stored) read in all.
    pub max_total_bytes: u64,
    /// Largest object, as stored and gunzipped, bytes.
    pub max_object_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_keys: 100_000,
            max_total_bytes: 4 << 30,
            max_object_bytes: 64 << 20,
        }
    }
}

/// One segment of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its key.
    pub key: String,
    /// Its size as stored, bytes.
    pub size: u64,
}

/// A client of the default AWS chain (`AWS_REGION`, `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
/// profile, role); each call cut at `timeout`, 3 tries.
pub async fn client(timeout: Duration) -> Client {
    let target = crate::aws::AwsTarget {
        region: None,
        endpoint_url: None,
        timeouts: crate::aws::Timeouts::per_call(timeout),
        retries: crate::aws::Retries::Standard(3),
        max_response_bytes: 16 << 20,
        role: None,
    };
    let session = target.session().await;
    // The default chain's endpoint is honoured by the SDK itself; path-style addressing is
    // what emulators and VPC endpoints need when one is set.
    let custom = std::env::var_os("AWS_ENDPOINT_URL_S3").is_some()
        || std::env::var_os("AWS_ENDPOINT_URL").is_some();
    Client::from_conf(session.s3().force_path_style(custom).build())
}

/// The segments of `[from, to]` (ms since the epoch; open ends read everything) under `loc`,
/// oldest first per prober directory; `skipped` gets a sentence per key left out.
///
/// # Errors
/// [`ListError::Fail`] a listing call fails; [`ListError::Bound`] the listing passes
/// [`Limits::max_keys`] or [`MAX_DIRS`].
pub async fn list(
    client: &Client,
    loc: &Location,
    (from, to): (Option<Millis>, Option<Millis>),
    limits: Limits,
    skipped: &mut Vec<String>,
) -> Result<Vec<Segment>, ListError> {
    if client.config().region().is_none() {
        // The SDK would say "A region must be set", which names no setting to fix.
        return Err(ListError::Fail(format!(
            "cannot list {}: no AWS region: set AWS_REGION (or the profile's region)",
            loc.url_of(&loc.prefix)
        )));
    }
    let mut dirs = vec![(loc.prefix.clone(), 0usize)];
    let mut listed = 0usize;
    let mut seen_dirs = 0usize;
    let mut out = Vec::new();
    while let Some((dir, depth)) = dirs.pop() {
        // Service and prober directories (two levels below the prefix) are listed whole;
        // within a prober's, keys sort by time and the listing starts near the window.
        let start_after = (depth == 2)
            .then(|| from.map(|f| format!("{dir}{}", key_time(f - LONGEST_SEGMENT_MS))))
            .flatten();
        let mut page = ListPage::default();
        // The segments that opened last before the window (several when they opened within
        // one second: the key's time has no finer grain).
        let mut before: (Millis, Vec<Segment>) = (Millis::MIN, Vec::new());
        let first_of_dir = out.len();
        loop {
            page = list_page(client, loc, &dir, start_after.as_deref(), page.next)
                .await
                .map_err(ListError::Fail)?;
            listed += page.keys.len() + page.dirs.len();
            if listed > limits.max_keys {
                return Err(ListError::Bound(format!(
                    "more than {} keys under {}: narrow the window (--from, --to) or give a longer prefix (a service's or a prober's)",
                    limits.max_keys,
                    loc.url_of(&loc.prefix)
                )));
            }
            if depth < 2 {
                seen_dirs += page.dirs.len();
                if seen_dirs > MAX_DIRS {
                    return Err(ListError::Bound(format!(
                        "more than {MAX_DIRS} directories under {}: give a longer prefix",
                        loc.url_of(&loc.prefix)
                    )));
                }
                dirs.extend(page.dirs.iter().map(|d| (d.clone(), depth + 1)));
            } else {
                // Below a prober's directory: the prefix given is shorter than the config's.
                skipped.extend(page.dirs.iter().map(|d| {
                    format!(
                        "{}: a directory where segments belong (<prefix><service>/<prober>/<segment>); not read: give the config's evidence.s3.prefix",
                        loc.url_of(d)
                    )
                }));
            }
            let mut past = false;
            for (key, size) in std::mem::take(&mut page.keys) {
                let name = key.rsplit('/').next().unwrap_or(&key);
                let Some((start, _)) = crate::sink::segments::parse_name(name, SUFFIX) else {
                    skipped.push(format!(
                        "{}: not a segment key (<start>-<first record_seq>{SUFFIX}); skipped",
                        loc.url_of(&key)
                    ));
                    continue;
                };
                let seg = Segment { key, size };
                if from.is_some_and(|f| start < f - 999) {
                    if start > before.0 {
                        before = (start, Vec::new());
                    }
                    before.1.push(seg);
                } else if to.is_some_and(|t| start > t) {
                    past = true;
                    break;
                } else {
                    out.push(seg);
                }
            }
            if past || page.next.is_none() {
                break;
            }
        }
        // The segment open when the window began holds its first records.
        out.splice(first_of_dir..first_of_dir, before.1);
    }
    Ok(out)
}

/// Why a listing ended without its segments.
#[derive(Debug)]
pub enum ListError {
    /// S3 failed.
    Fail(String),
    /// The listing passed a bound: the window or the prefix needs narrowing.
    Bound(String),
}

/// One page of a listing.
#[derive(Debug, Default)]
struct ListPage {
    keys: Vec<(String, u64)>,
    dirs: Vec<String>,
    next: Option<String>,
}

async fn list_page(
    client: &Client,
    loc: &Location,
    dir: &str,
    start_after: Option<&str>,
    token: Option<String>,
) -> Result<ListPage, String> {
    let mut req = client
        .list_objects_v2()
        .bucket(&loc.bucket)
        .prefix(dir)
        .delimiter("/");
    if let Some(s) = start_after {
        req = req.start_after(s);
    }
    if let Some(t) = &token {
        req = req.continuation_token(t);
    }
    let r = req.send().await.map_err(|e| {
        format!(
            "cannot list {}: {}",
            loc.url_of(dir),
            crate::sink::cloudwatch::classify_call("ListObjectsV2", &e).message
        )
    })?;
    let next = r.next_continuation_token().map(str::to_string);
    if next.is_some() && next == token {
        return Err(format!(
            "listing {} repeats a page: stopped",
            loc.url_of(dir)
        ));
    }
    Ok(ListPage {
        keys: r
            .contents()
            .iter()
            .filter_map(|o| Some((o.key()?.to_string(), o.size().unwrap_or(0).max(0) as u64)))
            .collect(),
        dirs: r
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(str::to_string))
            .collect(),
        next: next.filter(|_| r.is_truncated() == Some(true)),
    })
}

/// Why a segment was not read.
#[derive(Debug)]
pub enum ReadError {
    /// The object is not a segment (too large, not gzip, corrupt): skip it and go on.
    Skip(String),
    /// S3 failed: the report would miss evidence it was asked for.
    Fail(String),
}

/// Segment `seg` gunzipped, its sizes capped at `limits.max_object_bytes`.
///
/// # Errors
/// [`ReadError`].
pub async fn read(
    client: &Client,
    loc: &Location,
    seg: &Segment,
    limits: Limits,
) -> Result<Vec<u8>, ReadError> {
    let max = limits.max_object_bytes;
    let url = loc.url_of(&seg.key);
    let too_big = |n: &str| {
        ReadError::Skip(format!(
            "{url}: {n} larger than {} MiB (--max-segment-mb); skipped",
            max >> 20
        ))
    };
    if seg.size > max {
        return Err(too_big("stored"));
    }
    let body = async {
        let mut o = client
            .get_object()
            .bucket(&loc.bucket)
            .key(&seg.key)
            .send()
            .await
            .map_err(|e| {
                ReadError::Fail(format!(
                    "cannot read {url}: {}",
                    crate::sink::cloudwatch::classify_call("GetObject", &e).message
                ))
            })?;
        let mut bytes = Vec::new();
        while let Some(chunk) = o
            .body
            .try_next()
            .await
            .map_err(|e| ReadError::Fail(format!("cannot read {url}: {e}")))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                return Err(too_big("stored"));
            }
        }
        Ok(bytes)
    };
    let gz = tokio::time::timeout(READ_TIMEOUT, body)
        .await
        .map_err(|_| {
            ReadError::Fail(format!(
                "cannot read {url}: no whole answer within {} s",
                READ_TIMEOUT.as_secs()
            ))
        })??;
    gunzip(&gz, max).map_err(|why| match why {
        Gunzip::NotGzip => ReadError::Skip(format!("{url}: not gzip; skipped")),
        Gunzip::TooBig => too_big("gunzipped"),
        Gunzip::Corrupt(e) => ReadError::Skip(format!("{url}: corrupt gzip ({e}); skipped")),
    })
}

/// A key's time for `ms` since the epoch.
fn key_time(ms: Millis) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    crate::sink::segments::key_time(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn locations() {
        let l = Location::parse("s3://drills/readyprobe/evidence/").unwrap();
        assert_eq!(l.bucket, "drills");
        assert_eq!(l.prefix, "readyprobe/evidence/");
        assert_eq!(Location::parse("s3://drills").unwrap().prefix, "");
        assert!(Location::parse("s3:///x").is_err());
        assert!(Location::parse("/tmp/x").is_err());
        // S3's naming rules, as the config's bucket: refused before any call.
        for bad in [
            "s3://Drills/x/",
            "s3://dr_ills/",
            "s3://ab/",
            "s3://-drills/",
            "s3://drills./",
        ] {
            let e = Location::parse(bad).unwrap_err();
            assert!(e.contains("bucket name"), "{bad}: {e}");
        }
    }

    #[test]
    fn gunzip_is_bounded() {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b'x'; 1 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 4096);
        assert_eq!(gunzip(&bomb, 1 << 10), Err(Gunzip::TooBig));
        assert_eq!(gunzip(&bomb, 1 << 20).unwrap().len(), 1 << 20);
        assert_eq!(gunzip(b"{\"plain\":1}", 1 << 20), Err(Gunzip::NotGzip));
        assert!(matches!(
            gunzip(&bomb[..20], 1 << 20),
            Err(Gunzip::Corrupt(_))
        ));
    }
}
