//! The evidence sink: an append-only JSON-lines file of [`Record`]s. Each record is written as
//! one whole line with one `write_all`, so a crash or a SIGKILL leaves at worst a missing last
//! record, never a torn one that parses as something else; a write that fails part-way (a full
//! disk) is cut back off the file, so the next record starts on its own line.
//!
//! The file is bounded: when the next record would take it past `max_bytes`, it is renamed to
//! `<path>.1` (replacing the previous generation) and a fresh file is started, so a long-running
//! service keeps between one and two generations on disk. A rotation that fails (`<path>.1` a
//! directory) is logged and counted once, retried at each write, and the file meanwhile stays
//! within [`HARD_BOUND`] times the bound, giving up `attempt` records first.
//!
//! The file I/O runs on a dedicated thread fed by a bounded queue: a slow, full or hung disk
//! never blocks the runtime that probes and publishes. The async side only encodes a line and
//! hands it over; a full queue counts the record as failed, as a failed write would. The queue
//! holds [`queue_lines`] lines for the run's number of services, so the start-up burst (a
//! `start` record per service) always fits. The thread writes what has queued up meanwhile in
//! one `write` (whole lines only), at most one write per [`GATHER`]; when that fails it cuts the
//! file back and writes the lines one by one, so a full disk still loses whole records only.
//!
//! Every line starts with `record_seq`, the prober's record number: 1, 2, 3, … across restarts
//! and rotation (it continues from the highest number in the tail of the file, or of the
//! rotated generation when the file holds none). The writer thread numbers a line as it joins
//! a batch, so the file's numbers rise line by line; a record lost after that (a failed write)
//! or before it (a full queue, an encoding error) keeps its number, and the gap shows the loss.
//!
//! With `[evidence.s3]` the thread also cuts the same numbered lines into segments
//! ([`super::segments`]) for the uploader ([`super::evidence_s3`]); it wakes at least once a
//! second to close a segment that is due, and writes the `evidence_segment` records of
//! segments dropped from the spool and of failed uploads (sent to it by the uploader).

use super::segments::{Dropped, SegmentSpec, Segments};
use crate::readiness::Millis;
use crate::record::{Envelope, EvidenceReopened, EvidenceSegment, Record, SegmentEvent};
use serde::Deserialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use tokio::time::Instant;

/// Lines the queue to the writer thread holds at least. Attempt records are about 1 KB, so a
/// full queue is about 1 MB; at a few records per second it covers minutes of a stalled disk.
const QUEUE_LINES: usize = 1024;

/// Lines the queue holds per service of the run: its `start` record at start-up and the first
/// attempt of each branch, with room to spare. 5,000 services write 5,000 `start` records in the
/// same instant; a queue of [`QUEUE_LINES`] refused 1,301 of them (benchmark).
const LINES_PER_SERVICE: usize = 4;

/// Most bytes the writer thread joins into one `write`.
const BATCH_BYTES: usize = 256 * 1024;

/// How long the writer thread rests after a write before it looks at the queue again: records
/// that come meanwhile go out in the next write, and their senders need not wake the thread
/// (a futex call per record when it waits on an empty queue). With a thousand branches, about
/// 100 records a second, each write then carries a few records instead of one.
const GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// The queue size for a run of `services` services: every start-up record fits, whatever the
/// number of services.
pub fn queue_lines(services: usize) -> usize {
    QUEUE_LINES.saturating_add(services.saturating_mul(LINES_PER_SERVICE))
}

/// Log the first failure and then every this many, so a dead disk does not flood the log.
const LOG_EVERY: u64 = 100;

/// Bytes at the end of an evidence file read for its last `record_seq`: dozens of records (an
/// attempt record is about 1 KB), so a torn or unreadable last line still leaves whole ones.
const TAIL_BYTES: u64 = 64 * 1024;

/// The highest `record_seq` a writer goes on from: 2^53, the largest integer every JSON reader
/// keeps exact, and more records than a prober writes in centuries. A previous file whose tail
/// holds a higher number (edited, or hostile) is not followed past it, so numbers never wrap.
pub(crate) const SEQ_LIMIT: u64 = 1 << 53;

/// While the rotation fails, the file grows to at most this many times `max_bytes` with every
/// record, then to [`HARD_BOUND`] times with every record but `attempt`s (transitions, publishes,
/// markers: what a drill report needs most), then takes nothing: the two generations' disk
/// budget, and half as much again for the rare records.
const SOFT_BOUND: u64 = 2;

/// See [`SOFT_BOUND`].
const HARD_BOUND: u64 = 3;

/// Most bytes `"record_seq":N,` adds to a line (N up to 20 digits).
const SEQ_FIELD_MAX: usize = r#""record_seq":,"#.len() + 20;

/// Appends evidence records through a writer thread.
#[derive(Debug)]
pub struct EvidenceWriter {
    path: PathBuf,
    service: String,
    prober: String,
    /// `None` once closed.
    tx: Option<SyncSender<Msg>>,
    /// Signalled by the thread when it has drained the queue and synced the file.
    done: Option<mpsc::Receiver<()>>,
    counters: Arc<Counters>,
    /// Records refused because the queue was full.
    queue_full: u64,
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    failed: AtomicU64,
    /// The last `record_seq` given, to a record written or lost.
    last_seq: AtomicU64,
    /// Rotations that failed, once per failure (a new error, or the first after a success).
    rotation_failures: AtomicU64,
    /// Closed segments deleted unsent to keep the spool within its bound.
    segments_dropped: AtomicU64,
}

impl Counters {
    /// The next `record_seq`.
    fn next_seq(&self) -> u64 {
        // Saturates rather than wraps: a number that went back to 0 would read as another run.
        let add = |s: u64| Some(s.saturating_add(1));
        let prev = self
            .last_seq
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
        prev.unwrap_or_else(|s| s).saturating_add(1)
    }

    /// A record that will never reach the writer thread: counted as failed, and its number
    /// skipped, so the file shows the gap.
    fn lose(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.next_seq();
    }
}

#[derive(Debug)]
enum Msg {
    /// One whole line, newline included, and whether it is an `attempt` (the first records
    /// refused while the file cannot rotate).
    Line(String, bool),
    /// Reopen the file if it was removed or replaced; record `evidence_reopened` at this time
    /// (ms since the epoch) if so.
    CheckReplaced(Millis),
    /// Tests: hold the thread until the sender is dropped, as a hung disk would.
    #[cfg(test)]
    Stall(mpsc::Receiver<()>),
}

/// The segment output of a writer: where segments go, whom to wake when one closes, and the
/// records the uploader sends back (failed uploads) to be written with the others.
#[derive(Debug)]
pub struct SegmentOutput {
    /// Where and how segments are cut.
    pub spec: SegmentSpec,
    /// Woken at each closed segment (the uploader waits on it).
    pub wake: Arc<tokio::sync::Notify>,
    /// Records to write (the uploader's `evidence_segment` records).
    pub notes: Receiver<Record>,
    /// The last `record_seq` already in S3 (a fresh disk goes on from it), else 0.
    pub seq_floor: u64,
}

impl EvidenceWriter {
    /// Open (create or append) the evidence file, creating its directory, and start the writer
    /// thread behind a queue of `queue` lines ([`queue_lines`]). Opening is synchronous: it
    /// happens once at start-up, where a failure stops the run before anything is published.
    ///
    /// # Errors
    /// The I/O error, for the caller to report with the path.
    pub fn open(
        path: &Path,
        service: &str,
        prober: &str,
        max_bytes: u64,
        queue: usize,
    ) -> io::Result<Self> {
        Self::open_with(path, (service, prober), max_bytes, queue, None)
    }

    /// [`open`](Self::open), also cutting segments into `segments`' spool when given (whose
    /// leftovers of an earlier run are closed first).
    ///
    /// # Errors
    /// As [`open`](Self::open), or the spool directory cannot be created.
    pub fn open_with(
        path: &Path,
        (service, prober): (&str, &str),
        max_bytes: u64,
        queue: usize,
        segments: Option<SegmentOutput>,
    ) -> io::Result<Self> {
        let (segments, notes, floor) = match segments {
            Some(o) => (
                Some(Segments::new(o.spec, o.wake)?),
                Some(o.notes),
                o.seq_floor,
            ),
            None => (None, None, 0),
        };
        let mut file = open_append(path)?;
        let mut size = file.metadata()?.len();
        if ends_torn(&file, size)? {
            // A run killed mid-write left part of a line: end it, so this run's first record
            // starts a line of its own (the torn one reads back as one bad line).
            file.write_all(b"\n")?;
            size += 1;
        }
        let counters = Arc::new(Counters::default());
        counters.last_seq.store(
            last_record_seq(path, &file, size)?.max(floor),
            Ordering::Relaxed,
        );
        let state = FileState {
            path: path.to_owned(),
            file,
            size,
            max_bytes: max_bytes.max(4096),
            rotate_error: None,
            refusing: Refusing::Nothing,
            service: service.into(),
            prober: prober.into(),
            counters: counters.clone(),
            segments,
            notes,
            pending: Vec::new(),
        };
        let (tx, rx) = mpsc::sync_channel(queue.max(1));
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("evidence-writer".into())
            .spawn(move || state.run(rx, done_tx))?;
        Ok(EvidenceWriter {
            path: path.to_owned(),
            service: service.into(),
            prober: prober.into(),
            tx: Some(tx),
            done: Some(done_rx),
            counters,
            queue_full: 0,
        })
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the thread has written.
    pub fn written(&self) -> u64 {
        self.counters.written.load(Ordering::Relaxed)
    }

    /// Rotations that failed, once per failure: the first, and each with another error or after
    /// a rotation that worked (the writer retries at every write that would pass `max_bytes`).
    pub fn rotation_failures(&self) -> u64 {
        self.counters.rotation_failures.load(Ordering::Relaxed)
    }

    /// Closed segments deleted unsent to keep the spool within `spool_max_mb`.
    pub fn segments_dropped(&self) -> u64 {
        self.counters.segments_dropped.load(Ordering::Relaxed)
    }

    /// Records that could not be written (queue full, disk full, I/O error, writer closed).
    /// Probing and publishing go on: a full disk must not silence the readiness metric.
    pub fn failed(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }

    /// Append one typed record at `at` (ms since the epoch), in its [`Envelope`]. Never blocks;
    /// a failure is counted in [`failed`](Self::failed) and logged (the first, then every
    /// hundredth), never returned: evidence is a record of the control loop, not a reason to
    /// stop it.
    pub fn record(&mut self, at: Millis, record: &Record) {
        let service = self.service.clone();
        self.record_for(at, &service, record);
    }

    /// [`record`](Self::record) for the named service (a run with several services).
    pub fn record_for(&mut self, at: Millis, service: &str, record: &Record) {
        match Envelope::new(at, service, &self.prober, record).to_line() {
            Ok(line) => self.send(Msg::Line(line, matches!(record, Record::Attempt(_)))),
            Err(e) => {
                self.counters.lose();
                tracing::error!(kind = record.kind(), error = %e, "cannot encode an evidence record");
            }
        }
    }

    /// Ask the writer thread to reopen the file if it was removed or replaced under us (an
    /// operator's `rm`, a log shipper's move), so later records do not go into an unlinked
    /// inode. When it reopens, the thread records `evidence_reopened` at `at` (ms since the
    /// epoch) as the first line of the new file. Never blocks.
    pub fn reopen_if_replaced(&mut self, at: Millis) {
        self.send(Msg::CheckReplaced(at));
    }

    fn send(&mut self, msg: Msg) {
        let counts = matches!(msg, Msg::Line(..));
        let Some(tx) = &self.tx else {
            if counts {
                self.counters.lose();
            }
            return;
        };
        match tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                if counts {
                    self.counters.lose();
                }
                self.queue_full += 1;
                if self.queue_full % LOG_EVERY == 1 {
                    tracing::error!(
                        path = %self.path.display(),
                        refused = self.queue_full,
                        "evidence queue full: the disk is not keeping up; records are lost, probing and publishing go on"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                if counts {
                    self.counters.lose();
                }
                tracing::error!(path = %self.path.display(), "evidence writer thread ended; record lost");
            }
        }
    }

    /// Stop taking records and wait until `deadline` for the thread to write what is queued and
    /// sync the file. Returns true when it finished; otherwise the thread is left behind
    /// (detached: it does not keep the process alive) and whatever it still holds may be lost.
    /// Later records count as failed.
    ///
    /// The wait is on a blocking-pool thread in real time, so the runtime is not held and a
    /// paused test clock cannot cut it short.
    pub async fn close(&mut self, deadline: Instant) -> bool {
        drop(self.tx.take());
        let Some(done) = self.done.take() else {
            return true;
        };
        let budget = deadline.saturating_duration_since(Instant::now());
        // `Disconnected`: the thread ended without signalling (it panicked); nothing is left.
        let finished = tokio::task::spawn_blocking(move || {
            !matches!(
                done.recv_timeout(budget),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        })
        .await
        .unwrap_or(false);
        if !finished {
            tracing::warn!(
                path = %self.path.display(),
                waited_ms = budget.as_millis() as u64,
                "the evidence writer did not finish in time; records still queued may be lost"
            );
        }
        finished
    }
}

/// Whether a file of `size` bytes ends in anything but a newline.
pub(crate) fn ends_torn(file: &File, size: u64) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    if size == 0 {
        return Ok(false);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, size - 1)?;
    Ok(last != *b"\n")
}

/// The last `record_seq` of the evidence at `path`, open as `file` (`size` bytes): the highest in
/// the file's tail, else (a new file, or one with no numbered record) the highest in its rotated
/// generation's tail, else 0; at most [`SEQ_LIMIT`]. `drill mark --evidence` numbers its line from
/// this too.
///
/// # Errors
/// Reading either file fails (a missing rotated generation is no error); the error names the
/// rotated file when it is the one.
pub(crate) fn last_record_seq(path: &Path, file: &File, size: u64) -> io::Result<u64> {
    let last = newest_record_seq(path, file, size)?;
    if last > SEQ_LIMIT {
        tracing::warn!(
            path = %path.display(),
            record_seq = last,
            limit = SEQ_LIMIT,
            "the evidence ends in an implausible record_seq (edited?); numbering goes on from the limit"
        );
    }
    Ok(last.min(SEQ_LIMIT))
}

/// [`last_record_seq`] as found, unbounded.
fn newest_record_seq(path: &Path, file: &File, size: u64) -> io::Result<u64> {
    if let Some(seq) = tail_seq(file, size)? {
        return Ok(seq);
    }
    let old = rotated(path);
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", old.display()));
    let file = match crate::regular_file::open_regular(&old, OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(named(e)),
    };
    let size = file.metadata().map_err(named)?.len();
    Ok(tail_seq(&file, size).map_err(named)?.unwrap_or(0))
}

/// The part of a line [`tail_seq`] reads; every other field is passed over.
#[derive(Deserialize)]
struct SeqOnly {
    record_seq: Option<u64>,
}

/// The highest `record_seq` among the lines in the last [`TAIL_BYTES`] of `file` (`size`
/// bytes), if any has one. A line that does not parse (torn by a kill, cut by the start of the
/// read, written before records were numbered) is passed over.
fn tail_seq(file: &File, size: u64) -> io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let from = size.saturating_sub(TAIL_BYTES);
    let mut buf = vec![0u8; (size - from) as usize];
    let mut got = 0;
    // A file cut shorter meanwhile ends the read early; what was read still counts.
    while got < buf.len() {
        match file.read_at(&mut buf[got..], from + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut lines = buf[..got].split(|&b| b == b'\n');
    if from > 0 {
        // The read may begin inside a line.
        lines.next();
    }
    Ok(lines
        .filter_map(|l| serde_json::from_slice::<SeqOnly>(l).ok()?.record_seq)
        .max())
}

/// `line` (an [`Envelope`] line: a JSON object, newline included) with `"record_seq":seq` as its
/// first field, appended to `out`.
pub(crate) fn put_numbered(out: &mut Vec<u8>, seq: u64, line: &str) {
    debug_assert!(line.starts_with("{\""), "not an envelope line: {line}");
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{{\"record_seq\":{seq},");
    out.extend_from_slice(line.strip_prefix('{').unwrap_or(line).as_bytes());
}

/// Where the evidence file at `path` goes when it rotates: `<path>.1`.
fn rotated(path: &Path) -> PathBuf {
    path.with_extension(match path.extension() {
        Some(e) => format!("{}.1", e.to_string_lossy()),
        None => "1".into(),
    })
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    // Anything but a regular file is refused, a symbolic link included, with a message that
    // names it; nothing blocks on a FIFO (see `regular_file::open_regular`).
    crate::regular_file::open_regular(
        path,
        OpenOptions::new().read(true).create(true).append(true),
    )
}

/// What the file's bounds refuse while it cannot rotate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusing {
    Nothing,
    Attempts,
    Everything,
}

/// Whole lines the writer thread joins into one write, and where each ends.
#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// The first line's `record_seq`.
    first: u64,
}

impl Batch {
    /// Add `line`, numbered `seq`.
    fn push(&mut self, seq: u64, line: &str) {
        if self.ends.is_empty() {
            self.first = seq;
        }
        put_numbered(&mut self.bytes, seq, line);
        self.ends.push(self.bytes.len());
    }

    /// Empty it, keeping at most [`BATCH_BYTES`] of its buffer for the next one.
    fn clear(&mut self) {
        self.bytes.clear();
        self.bytes.shrink_to(BATCH_BYTES);
        self.ends.clear();
    }
}

/// The writer thread's side: the open file and its size.
struct FileState {
    path: PathBuf,
    file: File,
    /// Size of the current file, bytes.
    size: u64,
    /// Rotation threshold, bytes.
    max_bytes: u64,
    /// The error of the last rotation, while it keeps failing.
    rotate_error: Option<String>,
    /// What the bounds refuse now (logged when it changes).
    refusing: Refusing,
    service: String,
    prober: String,
    counters: Arc<Counters>,
    /// The segment output, with `[evidence.s3]`.
    segments: Option<Segments>,
    /// The uploader's records for the evidence.
    notes: Option<Receiver<Record>>,
    /// Records of the writer's own to write at the next turn (dropped segments).
    pending: Vec<Record>,
}

/// What the writer thread's wait for the queue gave.
enum Wait {
    Msg(Msg),
    /// Time to look at the open segment and the uploader's records.
    Tick,
    /// Every sender is gone and the queue drained.
    Closed,
}

/// Longest wait of the writer thread with segments: the uploader's records are written within
/// about this.
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

impl FileState {
    fn wait(&self, rx: &Receiver<Msg>) -> Wait {
        let Some(seg) = &self.segments else {
            return rx.recv().map_or(Wait::Closed, Wait::Msg);
        };
        let budget = seg
            .until_due()
            .clamp(std::time::Duration::from_millis(1), TICK);
        match rx.recv_timeout(budget) {
            Ok(m) => Wait::Msg(m),
            Err(mpsc::RecvTimeoutError::Timeout) => Wait::Tick,
            Err(mpsc::RecvTimeoutError::Disconnected) => Wait::Closed,
        }
    }

    fn run(mut self, rx: Receiver<Msg>, done: mpsc::Sender<()>) {
        let mut batch = Batch::default();
        let mut next = None;
        loop {
            let msg = match next.take() {
                Some(m) => m,
                None => match self.wait(&rx) {
                    Wait::Msg(m) => m,
                    Wait::Tick => {
                        self.housekeep(&mut batch);
                        continue;
                    }
                    Wait::Closed => break,
                },
            };
            match msg {
                Msg::Line(line, attempt) => {
                    self.take(&mut batch, &line, attempt);
                    // Join what is queued already, up to a rotation or BATCH_BYTES; anything
                    // else that comes waits until the batch is written. While the rotation
                    // fails, the bounds of `take` cut instead.
                    while batch.bytes.len() < BATCH_BYTES
                        && let Ok(m) = rx.try_recv()
                    {
                        match m {
                            Msg::Line(l, a)
                                if self.rotate_error.is_some()
                                    || self.fits(batch.bytes.len() + l.len() + SEQ_FIELD_MAX) =>
                            {
                                self.take(&mut batch, &l, a);
                            }
                            other => {
                                next = Some(other);
                                break;
                            }
                        }
                    }
                    if !batch.ends.is_empty() {
                        self.append(&mut batch);
                        std::thread::sleep(GATHER);
                    }
                }
                #[cfg(test)]
                Msg::Stall(release) => {
                    let _ = release.recv();
                }
                Msg::CheckReplaced(at) => {
                    if self.reopen_if_replaced() {
                        let path = self.path.display().to_string();
                        let r = Record::EvidenceReopened(EvidenceReopened { path });
                        match Envelope::new(at, &self.service, &self.prober, r).to_line() {
                            Ok(line) => {
                                batch.push(self.counters.next_seq(), &line);
                                self.append(&mut batch);
                            }
                            Err(e) => {
                                self.counters.next_seq();
                                self.count_failure(&e);
                            }
                        }
                    }
                }
            }
            self.housekeep(&mut batch);
        }
        // Every sender is gone: the queue is drained. The last segment closes with what the
        // uploader said meanwhile; what it says later is only logged.
        self.housekeep(&mut batch);
        if let Some(mut seg) = self.segments.take() {
            let dropped = seg.close();
            self.note_dropped(dropped);
            self.write_pending(&mut batch);
        }
        if let Err(e) = self.file.flush().and_then(|()| self.file.sync_data()) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot sync evidence");
        }
        let _ = done.send(());
    }

    /// With segments: close the open one when due, and write the records that wait (dropped
    /// segments, the uploader's failed uploads). `batch` is empty before and after.
    fn housekeep(&mut self, batch: &mut Batch) {
        let Some(seg) = &mut self.segments else {
            return;
        };
        let dropped = seg.close_if_due();
        self.note_dropped(dropped);
        if let Some(notes) = &self.notes {
            self.pending.extend(notes.try_iter().take(QUEUE_LINES));
        }
        self.write_pending(batch);
    }

    /// Count, log and (at the next write) record each segment the spool bound dropped.
    fn note_dropped(&mut self, dropped: Vec<Dropped>) {
        for d in dropped {
            let count = self
                .counters
                .segments_dropped
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            let segment = format!("{}.gz", d.segment);
            tracing::error!(
                segment = %segment,
                bytes = d.bytes,
                dropped = count,
                "evidence spool over spool_max_mb: the oldest segment not yet uploaded is deleted; its records are lost"
            );
            self.pending.push(Record::EvidenceSegment(EvidenceSegment {
                segment,
                event: SegmentEvent::Dropped,
                class: None,
                retry_in_ms: None,
                bytes: Some(d.bytes),
                count,
            }));
        }
    }

    /// Number and write the records in `pending`, at the wall clock's time.
    fn write_pending(&mut self, batch: &mut Batch) {
        if self.pending.is_empty() {
            return;
        }
        let at = crate::clock::Clock::start().now_ms();
        for r in std::mem::take(&mut self.pending) {
            match Envelope::new(at, &self.service, &self.prober, &r).to_line() {
                Ok(line) => batch.push(self.counters.next_seq(), &line),
                Err(e) => {
                    self.counters.next_seq();
                    self.count_failure(&e);
                }
            }
        }
        if !batch.ends.is_empty() {
            self.append(batch);
        }
    }

    /// Number `line` and add it to `batch`, unless the file cannot rotate and has reached its
    /// bound for such a record ([`SOFT_BOUND`], [`HARD_BOUND`]): then it is counted as failed,
    /// and its number left out shows the gap.
    fn take(&mut self, batch: &mut Batch, line: &str, attempt: bool) {
        if self.rotate_error.is_some() && batch.ends.is_empty() && !self.fits(line.len()) {
            // Retried here too: a file at its bound takes no write that would retry it.
            self.rotate();
        }
        let seq = self.counters.next_seq();
        let after = self.size + (batch.bytes.len() + line.len() + SEQ_FIELD_MAX) as u64;
        let refuse = match &self.rotate_error {
            None => Refusing::Nothing,
            Some(_) if after > self.max_bytes.saturating_mul(HARD_BOUND) => Refusing::Everything,
            Some(_) if after > self.max_bytes.saturating_mul(SOFT_BOUND) => Refusing::Attempts,
            Some(_) => Refusing::Nothing,
        };
        if refuse != self.refusing {
            self.refusing = refuse;
            match refuse {
                Refusing::Nothing => {}
                Refusing::Attempts => tracing::error!(
                    path = %self.path.display(),
                    bytes = self.size,
                    "the evidence file cannot rotate and has reached twice its max_size_mb: attempt records are dropped (counted), the others kept"
                ),
                Refusing::Everything => tracing::error!(
                    path = %self.path.display(),
                    bytes = self.size,
                    "the evidence file cannot rotate and has reached three times its max_size_mb: every record is dropped (counted) until it rotates"
                ),
            }
        }
        let refused = match refuse {
            Refusing::Nothing => false,
            Refusing::Attempts => attempt,
            Refusing::Everything => true,
        };
        if refused {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        } else {
            batch.push(seq, line);
        }
    }

    /// Whether `len` more bytes go into the current file without rotating it first.
    fn fits(&self, len: usize) -> bool {
        self.size + len as u64 <= self.max_bytes
    }

    /// Write `batch` (whole lines) with one `write_all`, rotating first when it does not fit;
    /// after a failure, cut the file back and write its lines one by one, so as many whole
    /// records as the disk takes are kept. Empties `batch`.
    fn append(&mut self, batch: &mut Batch) {
        if self.size > 0 && !self.fits(batch.bytes.len()) {
            self.rotate();
        }
        let lines = batch.ends.len();
        match self.write_whole(&batch.bytes, lines) {
            Ok(()) => {}
            Err(e) if lines <= 1 => self.count_failure(&e),
            Err(e) => {
                tracing::debug!(error = %e, lines, "evidence batch failed; writing its lines one by one");
                let mut from = 0;
                for &end in &batch.ends {
                    if let Err(e) = self.write_whole(&batch.bytes[from..end], 1) {
                        self.count_failure(&e);
                    }
                    from = end;
                }
            }
        }
        // After the file: a run killed in between has numbered the lines in the file, so the
        // next start goes on after them and the segment shows them as a gap, never as numbers
        // used twice.
        if let Some(seg) = &mut self.segments {
            let dropped = seg.append(batch.first, &batch.bytes);
            self.note_dropped(dropped);
        }
        batch.clear();
    }

    /// Append `bytes`, `lines` whole records, with one `write_all`. A failure cuts the file
    /// back to its length before, so the next write starts on a line of its own.
    fn write_whole(&mut self, bytes: &[u8], lines: usize) -> io::Result<()> {
        // The length before the write, from the file itself (a record written by another
        // process, or a truncation, since our last write is not lost by the cut below).
        let before = self.file.metadata().map(|m| m.len());
        match self.file.write_all(bytes) {
            Ok(()) => {
                self.counters
                    .written
                    .fetch_add(lines as u64, Ordering::Relaxed);
                self.size = before.unwrap_or(self.size) + bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A full disk takes part of a line before it fails.
                self.cut_back(before);
                Err(e)
            }
        }
    }

    /// Truncate the file to `before`, its length before a failed write.
    fn cut_back(&mut self, before: io::Result<u64>) {
        let cut = before.and_then(|len| self.file.set_len(len).map(|()| len));
        match cut {
            Ok(len) => self.size = len,
            Err(e) => tracing::error!(
                path = %self.path.display(),
                error = %e,
                "cannot cut a partly written evidence record; the file may hold a torn line"
            ),
        }
    }

    fn count_failure(&self, e: &dyn std::fmt::Display) {
        let failed = self.counters.failed.fetch_add(1, Ordering::Relaxed) + 1;
        if failed % LOG_EVERY == 1 {
            tracing::error!(
                path = %self.path.display(),
                error = %e,
                failed,
                "cannot write evidence; probing and publishing go on"
            );
        }
    }

    /// Reopen the file when the path no longer names the inode we write to. Returns true when
    /// it reopened.
    fn reopen_if_replaced(&mut self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let ours = self.file.metadata().map(|m| (m.dev(), m.ino())).ok();
        let on_disk = std::fs::metadata(&self.path)
            .map(|m| (m.dev(), m.ino()))
            .ok();
        if ours.is_some() && ours == on_disk {
            return false;
        }
        match open_append(&self.path) {
            Ok(f) => {
                self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
                self.file = f;
                tracing::warn!(path = %self.path.display(), "evidence file was removed or replaced; reopened");
                true
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(path = %self.path.display(), error = %e, "evidence file was removed and cannot be recreated");
                false
            }
        }
    }

    /// Rename the file to `<path>.1` and start a fresh one. A failure is logged and counted once
    /// (again when its error changes), and the file goes on growing within the bounds of
    /// [`take`](Self::take); the next write that would pass `max_bytes` tries again.
    fn rotate(&mut self) {
        let old = rotated(&self.path);
        let reopened = std::fs::rename(&self.path, &old).and_then(|_| open_append(&self.path));
        match reopened {
            Ok(f) => {
                self.file = f;
                self.size = 0;
                self.refusing = Refusing::Nothing;
                if self.rotate_error.take().is_some() {
                    tracing::warn!(path = %self.path.display(), previous = %old.display(), "evidence file rotated again after failed rotations");
                } else {
                    tracing::info!(path = %self.path.display(), previous = %old.display(), "evidence file rotated");
                }
            }
            Err(e) => {
                let error = e.to_string();
                if self.rotate_error.as_ref() != Some(&error) {
                    self.counters
                        .rotation_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        path = %self.path.display(),
                        previous = %old.display(),
                        error = %error,
                        "cannot rotate evidence; the file grows to twice max_size_mb with every record, to three times without attempt records, and retries at each write"
                    );
                    self.rotate_error = Some(error);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
