//! Evidence segments: the evidence writer's second output when `[evidence.s3]` is set. The
//! thread appends each batch of numbered lines to the open segment as well, a file
//! `<spool>/<service-or-all>/<prober>/<start>-<first record_seq>.jsonl.part`; it closes the
//! segment (renames it without `.part`) every `segment`, at `segment_max_mb` and at stop, and
//! wakes the uploader ([`super::evidence_s3`]), which deletes a closed segment once S3 has it.
//!
//! The spool is bounded: after each close, while the closed segments take more than
//! `spool_max_mb`, the oldest is deleted, and each deletion is reported back to the writer,
//! which counts, logs and records it. A `.part` left by a killed run is closed at the next start
//! (cut after its last whole line), so on a persistent volume even the segment being written
//! when the task died reaches S3.
//!
//! Names sort by time: `start` is the segment's opening time, UTC `YYYYMMDDTHHMMSSZ`, so the
//! relative path under the spool is the object key under the prefix, minus `.gz`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Suffix of a closed segment in the spool.
pub const CLOSED: &str = ".jsonl";

/// Suffix of the open segment.
const OPEN: &str = ".jsonl.part";

/// Most spool entries looked at in one scan, per directory level: a spool far past this is not
/// one readyprobe wrote.
pub const MAX_SCAN: usize = 100_000;

/// What the writer thread needs to cut segments.
#[derive(Debug, Clone)]
pub struct SegmentSpec {
    /// The spool root (beside the evidence file).
    pub spool: PathBuf,
    /// The service name, made safe for a key, or `all` for a run of several services.
    pub service: String,
    /// The prober id.
    pub prober: String,
    /// Longest time a segment stays open.
    pub segment: Duration,
    /// Size at which a segment is closed, bytes.
    pub max_bytes: u64,
    /// Most bytes of closed segments the spool keeps.
    pub spool_max_bytes: u64,
}

impl SegmentSpec {
    /// The directory this run's segments go to.
    pub fn dir(&self) -> PathBuf {
        self.spool.join(&self.service).join(&self.prober)
    }
}

/// The service part of a prober's segment keys: the service's name made safe for a key, or
/// `all` for a config of several services (their records share one evidence stream).
pub fn service_dir(cfg: &crate::config::Config) -> String {
    match &cfg.services[..] {
        [one] => crate::config::safe(&one.service.name),
        _ => "all".into(),
    }
}

/// The spool root beside the evidence file at `evidence`: `<evidence without extension>.spool`.
pub fn spool_beside(evidence: &Path) -> PathBuf {
    evidence.with_extension("spool")
}

/// A closed segment dropped from the spool to keep it within its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Its path relative to the spool (the object key without prefix and `.gz`).
    pub segment: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// The open segment.
#[derive(Debug)]
struct Open {
    path: PathBuf,
    file: File,
    size: u64,
    opened: std::time::Instant,
}

/// The writer thread's segments.
#[derive(Debug)]
pub struct Segments {
    spec: SegmentSpec,
    open: Option<Open>,
    wake: Arc<tokio::sync::Notify>,
    /// The error of the last failed segment write or close, while it repeats (logged once).
    error: Option<String>,
}

impl Segments {
    /// Create the spool directory, close any `.part` an earlier run left, and wake the uploader
    /// through `wake` at each close.
    ///
    /// # Errors
    /// The spool directory cannot be created.
    pub fn new(spec: SegmentSpec, wake: Arc<tokio::sync::Notify>) -> io::Result<Self> {
        std::fs::create_dir_all(spec.dir()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("evidence spool {}: {e}", spec.dir().display()),
            )
        })?;
        for part in scan(&spec.spool, OPEN) {
            if let Err(e) = close_part(&part) {
                tracing::error!(path = %part.display(), error = %e, "cannot close a segment left by an earlier run");
            }
        }
        wake.notify_one();
        Ok(Segments {
            spec,
            open: None,
            wake,
            error: None,
        })
    }

    /// Append `bytes` (whole numbered lines, the first numbered `first_seq`), opening a segment
    /// if none is open and closing the open one first when `bytes` would take it past its size.
    /// Returns the closed segments the spool bound dropped.
    pub fn append(&mut self, first_seq: u64, bytes: &[u8]) -> Vec<Dropped> {
        let mut dropped = Vec::new();
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.size > 0 && o.size + bytes.len() as u64 > self.spec.max_bytes)
        {
            dropped = self.close();
        }
        if self.open.is_none() {
            match self.start(first_seq) {
                Ok(o) => self.open = Some(o),
                Err(e) => {
                    self.failed("cannot open an evidence segment", &e);
                    return dropped;
                }
            }
        }
        if let Some(o) = &mut self.open {
            match o.file.write_all(bytes) {
                Ok(()) => o.size += bytes.len() as u64,
                Err(e) => {
                    // Cut back to whole lines; the lines lost show as a gap in S3.
                    let _ = o.file.set_len(o.size);
                    self.failed("cannot write an evidence segment", &e);
                }
            }
        }
        dropped
    }

    /// How long until the open segment is due to close (at most `segment`).
    pub fn until_due(&self) -> Duration {
        match &self.open {
            Some(o) => self.spec.segment.saturating_sub(o.opened.elapsed()),
            None => self.spec.segment,
        }
    }

    /// Close the open segment if its time has come.
    pub fn close_if_due(&mut self) -> Vec<Dropped> {
        if self.open.is_some() && self.until_due().is_zero() {
            self.close()
        } else {
            Vec::new()
        }
    }

    /// Close the open segment (if any): sync it, drop `.part`, wake the uploader, and keep the
    /// spool within its bound.
    pub fn close(&mut self) -> Vec<Dropped> {
        let Some(o) = self.open.take() else {
            return Vec::new();
        };
        let closed = o
            .file
            .sync_data()
            .and_then(|()| std::fs::rename(&o.path, closed_name(&o.path)));
        if let Err(e) = closed {
            self.failed("cannot close an evidence segment", &e);
        }
        self.wake.notify_one();
        bound(&self.spec.spool, self.spec.spool_max_bytes)
    }

    fn start(&self, first_seq: u64) -> io::Result<Open> {
        let name = format!("{}-{first_seq}{OPEN}", key_time(SystemTime::now()));
        let path = self.spec.dir().join(name);
        std::fs::create_dir_all(self.spec.dir())?;
        let file = crate::regular_file::open_regular(
            &path,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        Ok(Open {
            path,
            file,
            size: 0,
            opened: std::time::Instant::now(),
        })
    }

    fn failed(&mut self, what: &str, e: &io::Error) {
        let error = e.to_string();
        if self.error.as_ref() != Some(&error) {
            tracing::error!(spool = %self.spec.spool.display(), error = %error, "{what}; the records it misses show as a record_seq gap");
            self.error = Some(error);
        }
    }
}

/// `t` as a key's time: UTC `YYYYMMDDTHHMMSSZ`.
pub fn key_time(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.chars().filter(|c| !matches!(c, '-' | ':')).collect()
}

/// A key's time back as ms since the epoch, if `s` is one.
pub fn parse_key_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..15]
    );
    let t = humantime::parse_rfc3339(&iso).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// A segment's file name split: its start (ms since the epoch) and first `record_seq`, when
/// `name` is `<start>-<first seq><suffix>`.
pub fn parse_name(name: &str, suffix: &str) -> Option<(i64, u64)> {
    let stem = name.strip_suffix(suffix)?;
    let (time, seq) = stem.split_once('-')?;
    Some((parse_key_time(time)?, seq.parse().ok()?))
}

/// Why [`gunzip`] gave nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum Gunzip {
    /// It does not start as gzip does.
    NotGzip,
    /// It inflates past the cap.
    TooBig,
    /// It stops making sense part-way.
    Corrupt(String),
}

/// `gz` inflated, at most `max` bytes: a segment read back (`drill report`, and the start
/// that continues `record_seq` from S3).
///
/// # Errors
/// [`Gunzip`].
pub fn gunzip(gz: &[u8], max: u64) -> Result<Vec<u8>, Gunzip> {
    if !gz.starts_with(&[0x1f, 0x8b]) {
        return Err(Gunzip::NotGzip);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(gz)
        .take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| Gunzip::Corrupt(e.to_string()))?;
    if out.len() as u64 > max {
        return Err(Gunzip::TooBig);
    }
    Ok(out)
}

fn closed_name(part: &Path) -> PathBuf {
    let s = part.to_string_lossy();
    PathBuf::from(s.strip_suffix(".part").unwrap_or(&s).to_string())
}

/// Close a `.part` left by a killed run: cut after its last whole line, drop `.part` (an
/// empty one is deleted).
fn close_part(part: &Path) -> io::Result<()> {
    let file = crate::regular_file::open_regular(part, OpenOptions::new().read(true).write(true))?;
    let len = file.metadata()?.len();
    // Read backwards in blocks for the last newline; a segment is at most `segment_max_mb`.
    let mut keep = 0;
    let mut end = len;
    while end > 0 {
        let from = end.saturating_sub(64 * 1024);
        let mut buf = vec![0; (end - from) as usize];
        {
            use std::os::unix::fs::FileExt;
            file.read_exact_at(&mut buf, from)?;
        }
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            keep = from + i as u64 + 1;
            break;
        }
        end = from;
    }
    if keep == 0 {
        return std::fs::remove_file(part);
    }
    file.set_len(keep)?;
    file.sync_data()?;
    std::fs::rename(part, closed_name(part))
}

/// Files ending in `suffix` at `<spool>/<service>/<prober>/`, sorted by path (so by time
/// within a prober), at most [`MAX_SCAN`] per directory.
pub fn scan(spool: &Path, suffix: &str) -> Vec<PathBuf> {
    let dirs = |p: &Path| -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(p) else {
            return Vec::new();
        };
        rd.take(MAX_SCAN)
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    };
    let mut out = Vec::new();
    for service in dirs(spool) {
        for prober in dirs(&service) {
            let Ok(rd) = std::fs::read_dir(&prober) else {
                continue;
            };
            out.extend(
                rd.take(MAX_SCAN)
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(suffix)),
            );
        }
    }
    // Oldest first: by start, then first record_seq (as numbers: "-92" before "-104"), across
    // every directory.
    let order = |p: &PathBuf| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        name.as_deref()
            .and_then(|n| parse_name(n, suffix))
            .unwrap_or((i64::MAX, u64::MAX))
    };
    out.sort_by_cached_key(|p| (order(p), p.clone()));
    out
}

/// The relative path of spool file `path` under `spool` (`service/prober/name`).
pub fn relative(spool: &Path, path: &Path) -> String {
    path.strip_prefix(spool)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Delete the oldest closed segments while the closed ones take more than `max` bytes.
fn bound(spool: &Path, max: u64) -> Vec<Dropped> {
    let closed: Vec<(PathBuf, u64)> = scan(spool, CLOSED)
        .into_iter()
        .filter_map(|p| Some((p.clone(), std::fs::metadata(&p).ok()?.len())))
        .collect();
    let mut total: u64 = closed.iter().map(|(_, n)| n).sum();
    let mut dropped = Vec::new();
    for (p, n) in closed {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&p).is_ok() {
            total -= n;
            dropped.push(Dropped {
                segment: relative(spool, &p),
                bytes: n,
            });
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path, max: u64, spool_max: u64) -> SegmentSpec {
        SegmentSpec {
            spool: dir.join("evidence.spool"),
            service: "orders".into(),
            prober: "p1".into(),
            segment: Duration::from_secs(3600),
            max_bytes: max,
            spool_max_bytes: spool_max,
        }
    }

    #[test]
    fn key_times_sort_and_read_back() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(key_time(t), "20270115T080000Z");
        assert_eq!(parse_key_time("20270115T080000Z"), Some(1_800_000_000_000));
        assert_eq!(
            parse_name("20270115T080000Z-42.jsonl.gz", ".jsonl.gz"),
            Some((1_800_000_000_000, 42))
        );
        for bad in [
            "x.jsonl.gz",
            "20270115T080000Z.jsonl.gz",
            "2027-01-15-1.jsonl.gz",
        ] {
            assert_eq!(parse_name(bad, ".jsonl.gz"), None, "{bad}");
        }
    }

    /// A spool that cannot be made (a regular file where its directory goes) is refused with
    /// the spool's path and the kind of the failure, not the evidence file's alone.
    #[test]
    fn a_spool_that_cannot_be_made_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("evidence.spool"), b"x").unwrap();
        let wake = Arc::new(tokio::sync::Notify::new());
        let Err(e) = Segments::new(spec(dir.path(), 100, 250), wake) else {
            panic!("a spool over a regular file was made");
        };
        let spool = dir.path().join("evidence.spool");
        assert!(
            e.to_string().contains(&format!(
                "spool {}",
                spool.join("orders").join("p1").display()
            )),
            "{e}"
        );
        assert_eq!(e.kind(), io::ErrorKind::NotADirectory, "{e}");
    }

    /// Segments close at their size, the spool keeps within its bound by dropping the oldest,
    /// and a `.part` left by a killed run is closed at its last whole line by the next start.
    #[test]
    fn size_bound_and_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let wake = Arc::new(tokio::sync::Notify::new());
        let mut s = Segments::new(spec(dir.path(), 100, 250), wake.clone()).unwrap();
        let line = [b'x'; 59];
        let mut dropped = Vec::new();
        for seq in 1..=6 {
            let mut l = line.to_vec();
            l.push(b'\n');
            dropped.extend(s.append(seq, &l));
        }
        // Six 60-byte lines, one per segment (two do not fit in 100 bytes): five closed, one
        // open; the bound of 250 bytes keeps four closed.
        let closed = scan(&s.spec.spool, CLOSED);
        assert_eq!(closed.len(), 4, "{closed:?}");
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert!(dropped[0].segment.starts_with("orders/p1/"), "{dropped:?}");
        assert!(dropped[0].segment.ends_with("-1.jsonl"), "{dropped:?}");
        // A killed run: the open segment gets a torn line, and a new start closes it whole.
        let part = scan(&s.spec.spool, OPEN);
        assert_eq!(part.len(), 1);
        let mut f = OpenOptions::new().append(true).open(&part[0]).unwrap();
        f.write_all(b"{\"torn").unwrap();
        drop(s);
        let s2 = Segments::new(spec(dir.path(), 100, 250), wake).unwrap();
        assert!(scan(&s2.spec.spool, OPEN).is_empty());
        let last = scan(&s2.spec.spool, CLOSED).pop().unwrap();
        assert!(last.to_string_lossy().ends_with("-6.jsonl"), "{last:?}");
        assert_eq!(std::fs::read(&last).unwrap().len(), 60);
    }
}
