//! The evidence uploader: a task that PUTs each closed segment of the spool
//! ([`super::segments`]) to S3, gzipped, at `<prefix><service-or-all>/<prober>/<start>-<first
//! record_seq>.jsonl.gz`, oldest first, and deletes it from the spool only once S3 has it.
//!
//! It never holds up probing: the writer thread closes segments and wakes it through a
//! `Notify`; the only thing it sends back is an `evidence_segment` record per failed upload, with
//! `try_send` into a bounded channel. A failed PUT (classed as a publish is, through
//! [`super::cloudwatch::classify_call`] and `aws::codes`) is logged with its class and the time
//! of the next try, counted per class, and retried with exponential backoff; the segments after
//! it wait, so they reach S3 in order. At stop, [`Uploader::finish`] uploads what the writer
//! closed last until a deadline; what is left stays in the spool for the next start.

use super::segments::{CLOSED, relative, scan};
use crate::config::EvidenceS3;
use crate::record::{EvidenceSegment, PublishFailureClass, Record, SegmentEvent};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Bound of one PUT, the whole call.
const PUT_TIMEOUT: Duration = Duration::from_secs(30);

/// First wait after a failed upload; it doubles with each failure in a row, up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Longest sleep with nothing to do: the spool is looked at again (a segment a peer process
/// left) at least this often.
const IDLE: Duration = Duration::from_secs(60);

/// Slack over `segment_max_mb` when reading a segment back: the writer closes a segment before
/// a batch would take it past its size, so a batch (at most 256 KiB) is all it can overshoot by.
const READ_SLACK: u64 = 1024 * 1024;

/// The running uploader.
#[derive(Debug)]
pub struct Uploader {
    task: JoinHandle<()>,
    drain: watch::Sender<Option<Instant>>,
    spool: PathBuf,
}

/// Where segments go.
#[derive(Debug, Clone)]
struct Dest {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    /// Largest segment file read back, bytes.
    max_read: u64,
}

impl Uploader {
    /// Start uploading the closed segments of `spool` (also those an earlier run left), woken by
    /// `wake` at each close; failed uploads are sent to the evidence writer through `notes`.
    pub async fn start(
        cfg: &EvidenceS3,
        spool: PathBuf,
        wake: Arc<Notify>,
        notes: SyncSender<Record>,
    ) -> Uploader {
        let target = crate::aws::AwsTarget {
            region: cfg.region.clone(),
            endpoint_url: cfg.endpoint_url.clone(),
            timeouts: crate::aws::Timeouts::per_call(PUT_TIMEOUT),
            retries: crate::aws::Retries::Off,
            max_response_bytes: 64 * 1024,
            role: None,
        };
        let dest = Dest {
            client: aws_sdk_s3::Client::from_conf(target.session().await.s3().build()),
            bucket: cfg.bucket.clone(),
            prefix: cfg.prefix.clone(),
            max_read: cfg.segment_max_bytes + READ_SLACK,
        };
        let (drain, drained) = watch::channel(None);
        let task = tokio::spawn(run(dest, spool.clone(), wake, notes, drained));
        Uploader { task, drain, spool }
    }

    /// Upload what is left in the spool until `deadline`, then stop. Returns how many closed
    /// segments stay in the spool (uploaded by the next start on the same disk, lost otherwise).
    pub async fn finish(mut self, deadline: Instant) -> usize {
        let _ = self.drain.send(Some(deadline));
        if tokio::time::timeout_at(deadline, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
        let spool = self.spool.clone();
        let left = tokio::task::spawn_blocking(move || scan(&spool, CLOSED).len())
            .await
            .unwrap_or(0);
        if left > 0 {
            tracing::warn!(
                spool = %self.spool.display(),
                segments = left,
                "evidence segments not uploaded by the end of the grace period stay in the spool; a start on the same disk uploads them"
            );
        }
        left
    }
}

/// How long a start may spend asking S3 where this prober's `record_seq` ended.
const LAST_SEQ_BUDGET: Duration = Duration::from_secs(5);

/// Most listing pages read looking for a prober's newest segment.
const LAST_SEQ_PAGES: usize = 50;

/// The highest `record_seq` in this prober's newest segment in S3 (`dir` is
/// `<service-or-all>/<prober>/`), for a start on a fresh disk (a new Fargate task under the same
/// prober id): its numbers go on from there, so the segments of both runs read as one sequence
/// and a lost segment still shows as a gap. `None` when there is none, or S3 does not answer
/// within [`LAST_SEQ_BUDGET`] (logged; numbering then starts from the local evidence).
pub async fn last_uploaded_seq(cfg: &EvidenceS3, dir: &str) -> Option<u64> {
    let target = crate::aws::AwsTarget {
        region: cfg.region.clone(),
        endpoint_url: cfg.endpoint_url.clone(),
        timeouts: crate::aws::Timeouts::per_call(LAST_SEQ_BUDGET),
        retries: crate::aws::Retries::Off,
        max_response_bytes: (cfg.segment_max_bytes + READ_SLACK) as usize,
        role: None,
    };
    let client = aws_sdk_s3::Client::from_conf(target.session().await.s3().build());
    let prefix = format!("{}{dir}", cfg.prefix);
    let ask = async {
        let key = newest_key(&client, &cfg.bucket, &prefix).await?;
        let Some(key) = key else {
            return Ok(None);
        };
        let o = client
            .get_object()
            .bucket(&cfg.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| super::cloudwatch::classify_call("GetObject", &e).message)?;
        let gz = o
            .body
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .into_bytes();
        let text = super::segments::gunzip(&gz, cfg.segment_max_bytes + READ_SLACK)
            .map_err(|e| format!("{key}: {e:?}"))?;
        let seq = text
            .split(|&b| b == b'\n')
            .filter_map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).ok()?["record_seq"].as_u64()
            })
            .max();
        Ok::<_, String>(seq)
    };
    match tokio::time::timeout(LAST_SEQ_BUDGET, ask).await {
        Ok(Ok(seq)) => seq.map(|s| s.min(super::evidence::SEQ_LIMIT)),
        Ok(Err(e)) => {
            tracing::warn!(prefix = %prefix, error = %e, "cannot read this prober's newest evidence segment; record_seq goes on from the local evidence");
            None
        }
        Err(_) => {
            tracing::warn!(prefix = %prefix, "S3 did not say where this prober's record_seq ended in time; it goes on from the local evidence");
            None
        }
    }
}

/// The newest segment's key under `prefix`, reading at most [`LAST_SEQ_PAGES`] pages.
async fn newest_key(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Result<Option<String>, String> {
    let mut last: Option<((i64, u64), String)> = None;
    let mut token: Option<String> = None;
    for _ in 0..LAST_SEQ_PAGES {
        let mut req = client.list_objects_v2().bucket(bucket).prefix(prefix);
        if let Some(t) = &token {
            req = req.continuation_token(t);
        }
        let r = req
            .send()
            .await
            .map_err(|e| super::cloudwatch::classify_call("ListObjectsV2", &e).message)?;
        // Keys sort by start, but within one second "-92" sorts after "-104": the newest is
        // the greatest (start, first record_seq).
        for k in r.contents().iter().filter_map(|o| o.key()) {
            let name = k.rsplit('/').next().unwrap_or(k);
            if let Some(at) = super::segments::parse_name(name, ".jsonl.gz")
                && last.as_ref().is_none_or(|(best, _)| at > *best)
            {
                last = Some((at, k.to_string()));
            }
        }
        token = r.next_continuation_token().map(str::to_string);
        if r.is_truncated() != Some(true) || token.is_none() {
            return Ok(last.map(|(_, k)| k));
        }
    }
    Err(format!("more than {LAST_SEQ_PAGES} pages of segments"))
}

/// What one pass over the spool ended with.
enum Pass {
    /// Everything closed so far is in S3.
    Empty,
    /// An upload failed: wait this long before the next try.
    Failed(Duration),
    /// The drain deadline passed.
    Late,
}

async fn run(
    dest: Dest,
    spool: PathBuf,
    wake: Arc<Notify>,
    notes: SyncSender<Record>,
    mut drain: watch::Receiver<Option<Instant>>,
) {
    let mut failures: BTreeMap<PublishFailureClass, u64> = BTreeMap::new();
    let mut in_a_row = 0u32;
    loop {
        let deadline = *drain.borrow_and_update();
        let pass = upload_all(&dest, &spool, deadline, |segment, class, message| {
            in_a_row = in_a_row.saturating_add(1);
            let count = failures.entry(class).or_default();
            *count += 1;
            let wait = backoff(in_a_row);
            tracing::warn!(
                segment = %segment,
                class = class.as_str(),
                retry_in_s = wait.as_secs_f64(),
                failures_of_class = *count,
                error = %message,
                "evidence segment upload failed; it stays in the spool and is tried again"
            );
            let _ = notes.try_send(Record::EvidenceSegment(EvidenceSegment {
                segment: segment.to_string(),
                event: SegmentEvent::UploadFailed,
                class: Some(class),
                retry_in_ms: Some(wait.as_millis() as u64),
                bytes: None,
                count: *count,
            }));
            wait
        })
        .await;
        match (pass, deadline) {
            (Pass::Late, _) | (_, Some(_)) => return,
            (Pass::Empty, None) => {
                in_a_row = 0;
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(IDLE) => {}
                    _ = drain.changed() => {}
                }
            }
            (Pass::Failed(wait), None) => {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = drain.changed() => {}
                }
            }
        }
    }
}

/// The wait after `n` failures in a row: 1 s doubling up to [`MAX_BACKOFF`], with up to a
/// fifth of jitter so that many probers do not retry in step.
fn backoff(n: u32) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1 << n.saturating_sub(1).min(6))
        .min(MAX_BACKOFF);
    let jitter = rand::random_range(0..=base.as_millis() as u64 / 5);
    base + Duration::from_millis(jitter)
}

/// Upload the spool's closed segments oldest first, until one fails (`failed` logs it and says
/// how long to wait) or `deadline` passes.
async fn upload_all(
    dest: &Dest,
    spool: &Path,
    deadline: Option<Instant>,
    mut failed: impl FnMut(&str, PublishFailureClass, &str) -> Duration,
) -> Pass {
    let root = spool.to_owned();
    let files = tokio::task::spawn_blocking(move || scan(&root, CLOSED))
        .await
        .unwrap_or_default();
    for path in files {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Pass::Late;
        }
        let key_tail = format!("{}.gz", relative(spool, &path));
        let (p, max) = (path.clone(), dest.max_read);
        let body = match tokio::task::spawn_blocking(move || gzip_file(&p, max)).await {
            Ok(Ok(Some(b))) => b,
            // Gone meanwhile (the spool bound dropped it), or empty.
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                // A segment that cannot be read cannot be sent: it is set aside (renamed), so it
                // neither blocks the ones after it nor is retried for ever.
                tracing::error!(segment = %key_tail, error = %e, "cannot read an evidence segment from the spool; set aside as .unreadable");
                let p = path.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    std::fs::rename(&p, p.with_extension("unreadable"))
                })
                .await;
                continue;
            }
            Err(_) => continue,
        };
        let key = format!("{}{key_tail}", dest.prefix);
        let put = dest
            .client
            .put_object()
            .bucket(&dest.bucket)
            .key(&key)
            .content_type("application/gzip")
            .body(body.into())
            .send()
            .await;
        match put {
            Ok(_) => {
                let p = path.clone();
                let removed = tokio::task::spawn_blocking(move || std::fs::remove_file(p))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
                if let Err(e) = removed
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::error!(segment = %key_tail, error = %e, "evidence segment uploaded but cannot be deleted from the spool; it will be uploaded again");
                }
                tracing::debug!(key = %key, "evidence segment uploaded");
            }
            Err(e) => {
                let err = super::cloudwatch::classify_call("PutObject", &e);
                return Pass::Failed(failed(&key_tail, err.class, &err.message));
            }
        }
    }
    Pass::Empty
}

/// The segment at `path` gzipped; `None` when it is gone or empty.
///
/// # Errors
/// Reading fails, or the file is larger than `max` bytes (not one the writer closed).
fn gzip_file(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let file = match crate::regular_file::open_regular(path, std::fs::OpenOptions::new().read(true))
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut raw = Vec::new();
    file.take(max + 1).read_to_end(&mut raw)?;
    if raw.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "larger than {max} bytes: not a segment this prober closed"
        )));
    }
    if raw.is_empty() {
        let _ = std::fs::remove_file(path);
        return Ok(None);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&raw)?;
    gz.finish().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let secs = |n| backoff(n).as_secs_f64();
        let within = |n, base: f64| (base..=base * 1.2).contains(&secs(n));
        assert!(within(1, 1.0) && within(2, 2.0) && within(4, 8.0));
        assert!(within(7, 60.0) && within(40, 60.0));
    }

    #[test]
    fn a_segment_gzips_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("20270115T080000Z-1.jsonl");
        std::fs::write(&p, b"{\"record_seq\":1}\n").unwrap();
        let gz = gzip_file(&p, 1024).unwrap().unwrap();
        let mut back = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, "{\"record_seq\":1}\n");
        assert!(gzip_file(&p, 4).is_err());
        assert!(
            gzip_file(&dir.path().join("gone.jsonl"), 4)
                .unwrap()
                .is_none()
        );
    }
}
