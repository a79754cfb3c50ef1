//! The durable shared state store: one control document per service ([`ControlDoc`]) that a
//! long-running prober, scheduled-task runs and the operator CLI share.
//!
//! Every change is a read-modify-write through [`Store::update`], serialised so that no writer
//! silently overwrites another: the `file` store holds an exclusive lock on a lock file beside
//! the document and replaces the document atomically (temporary file, fsync, rename), so a crash
//! mid-write leaves the previous version; the `s3` store writes with `If-Match` / `If-None-Match`
//! conditions and, on a lost race, re-reads the fresh document and applies the change again.
//! A corrupt or unreadable document is an error: nothing silently starts as `ready` from it.
//!
//! A hung file system must not hang the prober: file-store operations run on blocking threads and
//! answer within [`FILE_OP_BOUND`], open nothing that could block (`O_NONBLOCK`, regular files
//! only) and read at most [`MAX_DOC_BYTES`].

use crate::config::safe;
use crate::control::{CONTROL_VERSION, ControlDoc};
use crate::regular_file::{open_regular, refuse_non_regular};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest control document read, in bytes (16 MiB). A real one holds a few prober states and
/// at most a bounded list of approvals and overrides, so a few KiB; anything this large is not a
/// control document, and reading it whole (e.g. `/dev/zero` behind the path) would exhaust memory.
pub const MAX_DOC_BYTES: u64 = 16 * 1024 * 1024;

/// Largest control document written, in bytes of compact JSON (8 MiB, half the read cap
/// [`MAX_DOC_BYTES`]): a write over it first drops what is history, then caps the attempts each
/// prober's snapshots keep ([`ControlDoc::fit`]).
pub const DOC_BUDGET_BYTES: usize = 8 * 1024 * 1024;

/// A state store problem.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Could not read or write.
    #[error("state store {location}: {reason}")]
    Io {
        /// File path or `s3://bucket/key`.
        location: String,
        /// What failed.
        reason: String,
    },
    /// Not a valid control document.
    #[error(
        "state store {location} holds a corrupt document or one of another format: {reason}; move it aside to start from `initial`"
    )]
    Corrupt {
        /// File path or `s3://bucket/key`.
        location: String,
        /// Why.
        reason: String,
    },
    /// A write that even pruned would be larger than readers accept: refused, nothing written.
    #[error(
        "state store {location}: refusing to write a control document of {bytes} bytes, over the {} MiB readers accept, even after dropping decided approvals, recorded drill markers and old attempts; nothing was written (too many undecided approvals or markers?)",
        MAX_DOC_BYTES / (1024 * 1024)
    )]
    TooLarge {
        /// File path or `s3://bucket/key`.
        location: String,
        /// Size of the document that was refused (compact JSON).
        bytes: usize,
    },
    /// Too many lost races in a row.
    #[error("state store {location}: gave up after {tries} conflicting writes")]
    Contended {
        /// `s3://bucket/key`.
        location: String,
        /// Writes tried.
        tries: u32,
    },
}

/// Parse and check a control document (pure).
///
/// # Errors
/// [`StateError::Corrupt`] for bad JSON, another version or another service, or an instant
/// outside 1970 to year 9999 (naming the field). Over-long texts and duplicate approval ids
/// are not errors: they are cut and dropped ([`crate::control::bound_texts`]).
pub fn parse_doc(location: &str, bytes: &[u8], service: &str) -> Result<ControlDoc, StateError> {
    let corrupt = |reason: String| StateError::Corrupt {
        location: location.to_string(),
        reason,
    };
    let mut doc: ControlDoc = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if doc.version != CONTROL_VERSION {
        return Err(corrupt(format!(
            "version {} (expected {CONTROL_VERSION})",
            doc.version
        )));
    }
    if doc.service != service {
        return Err(corrupt(format!("it belongs to service {:?}", doc.service)));
    }
    if let Some((field, t)) = crate::control::time_out_of_range(&doc) {
        return Err(corrupt(format!(
            "{field} is {t}, outside 0 (1970) to {} (year 9999) ms since the epoch",
            crate::clock::MAX_RFC3339_MS
        )));
    }
    crate::control::bound_texts(&mut doc);
    Ok(doc)
}

/// Refuse a document over [`MAX_DOC_BYTES`] (`len` is what was read, or announced).
fn check_size(location: &str, len: u64) -> Result<(), StateError> {
    if len > MAX_DOC_BYTES {
        return Err(StateError::Corrupt {
            location: location.to_string(),
            reason: format!(
                "larger than {} MiB, far more than any control document",
                MAX_DOC_BYTES / (1024 * 1024)
            ),
        });
    }
    Ok(())
}

/// Encode `doc` as written: compact JSON, brought down to [`DOC_BUDGET_BYTES`] when larger
/// ([`ControlDoc::fit`], which changes `doc` to what is written).
///
/// # Errors
/// [`StateError::TooLarge`] when it would still be over [`MAX_DOC_BYTES`], which readers
/// refuse: nothing may write what no reader can read.
fn encode(location: &str, doc: &mut ControlDoc) -> Result<Vec<u8>, StateError> {
    let to_vec = |d: &ControlDoc| {
        serde_json::to_vec(d).map_err(|e| StateError::Io {
            location: location.to_string(),
            reason: format!("encode: {e}"),
        })
    };
    let mut body = to_vec(doc)?;
    if body.len() > DOC_BUDGET_BYTES {
        doc.fit(DOC_BUDGET_BYTES);
        body = to_vec(doc)?;
    }
    if body.len() as u64 > MAX_DOC_BYTES {
        return Err(StateError::TooLarge {
            location: location.to_string(),
            bytes: body.len(),
        });
    }
    Ok(body)
}

/// A store of one service's control document.
#[derive(Debug, Clone)]
pub enum Store {
    /// A directory on a (durable) file system.
    File(FileStore),
    /// An S3 object.
    S3(S3Store),
}

impl Store {
    /// Where it lives, for messages.
    pub fn location(&self) -> String {
        match self {
            Store::File(f) => f.path.display().to_string(),
            Store::S3(s) => format!("s3://{}/{}", s.bucket, s.key),
        }
    }

    /// Read the document; an empty one when none exists yet. The file store answers within
    /// [`FILE_OP_BOUND`].
    ///
    /// # Errors
    /// [`StateError`] when it cannot be read or is corrupt, or the file system gives no answer
    /// in time.
    pub async fn load(&self) -> Result<ControlDoc, StateError> {
        match self {
            Store::File(f) => {
                let g = f.clone();
                f.off_runtime(FILE_OP_BOUND, move || g.load()).await
            }
            Store::S3(s) => s.load().await.map(|(d, _)| d),
        }
    }

    /// Make the next [`update`](Self::update) write the document even when it only refreshes
    /// the probers' `saved_at` and retained attempts (the file store leaves such writes out,
    /// [`REFRESH_EVERY`]): the final save of a run.
    pub fn save_next(&self) {
        if let Store::File(f) = self {
            f.save_next();
        }
    }

    /// Apply `change` to the current document and write it back without losing a concurrent
    /// writer's change. `change` may run more than once (after a lost race it sees the fresh
    /// document), so it must depend only on the document it is given and on captured values.
    ///
    /// The file store answers within [`FILE_OP_BOUND`]; callers that need less wrap the call in
    /// their own timeout.
    ///
    /// # Errors
    /// [`StateError`] from reading, parsing or writing, or from `change` itself, or when the file
    /// system gives no answer in time.
    pub async fn update<F>(&self, change: F) -> Result<ControlDoc, StateError>
    where
        F: FnMut(&mut ControlDoc) -> Result<(), StateError> + Send + 'static,
    {
        match self {
            Store::File(f) => {
                let g = f.clone();
                f.off_runtime(FILE_OP_BOUND, move || g.update(change)).await
            }
            Store::S3(s) => s.update(change).await,
        }
    }
}

/// How long a file-store writer waits for the lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Longest wait for one file-store operation (a read, or a locked read-modify-write including
/// up to [`LOCK_WAIT`] for the lock). The operation runs on a blocking thread; past this bound
/// the caller gets an error and the thread is left to finish (or hang) on its own, so a hung
/// file system never holds a runtime worker, and at exit the runtime does not wait for it.
pub const FILE_OP_BOUND: Duration = Duration::from_secs(10);

/// How many file-store operations may run at once in the process ([`FileStore`]).
pub const FILE_OPS: usize = 8;
static FILE_OP_PERMITS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(FILE_OPS);

/// The file store: `dir/control-<service>.json`, guarded by `dir/control-<service>.lock`.
///
/// A running prober syncs every service's document every `state.poll_interval`; most of the
/// time nobody else wrote it since. So the store keeps the document as it last read or wrote
/// it, with the file's identity then ([`FileId`]), and under the lock reads the file again only
/// when its identity changed. A write that would change nothing is left out, and so is one that
/// would only refresh `saved_at` and the retained attempts, up to [`REFRESH_EVERY`] in a row.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
    lock: PathBuf,
    service: String,
    /// The document as this store last read or wrote it, shared by the clones of the store.
    last: Arc<Mutex<Option<(FileId, ControlDoc)>>>,
    /// Updates in a row whose write was skipped as a mere refresh ([`refresh_only`]), and
    /// whether the next one writes anyway ([`Store::save_next`]).
    skipped: Arc<Mutex<(u32, bool)>>,
}

/// At most this many updates in a row skip a write that would only refresh the probers'
/// `saved_at` and retained attempts ([`refresh_only`]); the next one writes. A running prober
/// syncs every `state.poll_interval`, so its saved readiness is at most this many intervals old
/// (a minute at the default 10 s) unless something else changed, which is written at once.
/// Writing a document (a new file, fsync, rename, fsync of the directory) was about 40 % of the
/// process's CPU with 500 services (benchmark).
pub const REFRESH_EVERY: u32 = 6;

/// Whether `after` differs from `before` only in what every sync of a prober refreshes: each
/// prober's `saved_at` and the attempts retained in its branch snapshots. State, holding clocks,
/// approvals and decisions, overrides, instances and drill markers all count as changes (pure).
fn refresh_only(before: &ControlDoc, after: &ControlDoc) -> bool {
    let same_prober = |a: &crate::control::ProberState, b: &crate::control::ProberState| {
        a.branches.len() == b.branches.len()
            && a.branches
                .iter()
                .zip(&b.branches)
                .all(|((ka, sa), (kb, sb))| {
                    ka == kb
                        && sa.state == sb.state
                        && sa.since == sb.since
                        && sa.unready_holding_since == sb.unready_holding_since
                        && sa.ready_holding_since == sb.ready_holding_since
                })
    };
    before.version == after.version
        && before.service == after.service
        && before.approvals == after.approvals
        && before.overrides == after.overrides
        && before.instances == after.instances
        && before.markers == after.markers
        && before.probers.len() == after.probers.len()
        && before
            .probers
            .iter()
            .zip(&after.probers)
            .all(|((ka, a), (kb, b))| ka == kb && same_prober(a, b))
}

/// What tells one version of a file from another without reading it: another writer replaces
/// the document by a rename (a new inode: the temporary file exists beside the old one, so it
/// cannot reuse its number), and a write in place changes its size or its change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

impl FileStore {
    /// The store of `service` in `dir`.
    pub fn new(dir: &Path, service: &str) -> Self {
        FileStore {
            path: dir.join(format!("control-{}.json", safe(service))),
            lock: dir.join(format!("control-{}.lock", safe(service))),
            service: service.to_string(),
            last: Arc::default(),
            skipped: Arc::default(),
        }
    }

    /// The document path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Create the temporary file a write goes through before its rename onto the document:
    /// a new file (`O_CREAT | O_EXCL`, which also refuses a symbolic link) under a random name,
    /// so nothing planted beside the document (a hard or symbolic link to a file elsewhere) is
    /// ever written through.
    fn create_tmp(&self) -> std::io::Result<(PathBuf, File)> {
        let mut tries = 0;
        loop {
            // Not derived from the document's name: the longest service name already fills
            // a file name, and the random part makes the name unpredictable.
            let tmp = self.path.with_file_name(format!(
                ".control.tmp.{}.{:016x}",
                std::process::id(),
                rand::random::<u64>()
            ));
            let opened = OpenOptions::new()
                .create_new(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(&tmp);
            match opened {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => {
                    tries += 1;
                }
                r => return r.map(|f| (tmp, f)),
            }
        }
    }

    fn io(&self, what: &str, e: std::io::Error) -> StateError {
        StateError::Io {
            location: self.path.display().to_string(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Run a blocking file-store operation on the blocking pool; an error after `bound`.
    ///
    /// At most [`FILE_OPS`] run at once in the process, whatever the number of services: each
    /// holds its permit on its thread until it returns, so a thousand services syncing in the
    /// same second, or a hung file system, never take more blocking threads than that.
    async fn off_runtime<T, F>(&self, bound: Duration, op: F) -> Result<T, StateError>
    where
        F: FnOnce() -> Result<T, StateError> + Send + 'static,
        T: Send + 'static,
    {
        let run = async {
            let permit = FILE_OP_PERMITS.acquire().await;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                op()
            })
            .await
        };
        match tokio::time::timeout(bound, run).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(self.io("file store task", std::io::Error::other(e))),
            Err(_) => Err(StateError::Io {
                location: self.path.display().to_string(),
                reason: format!(
                    "no answer from the file system within {}",
                    crate::clock::fmt_duration(bound)
                ),
            }),
        }
    }

    /// Read and parse the document, with the identity of the file read (`None` when there is
    /// none yet).
    fn read(&self) -> Result<(ControlDoc, Option<FileId>), StateError> {
        let file = match open_regular(&self.path, OpenOptions::new().read(true)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((ControlDoc::new(&self.service), None));
            }
            Err(e) => return Err(self.io("open", e)),
        };
        let id = file.metadata().map(|m| FileId::of(&m)).ok();
        let mut bytes = Vec::new();
        file.take(MAX_DOC_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io("read", e))?;
        let location = self.path.display().to_string();
        check_size(&location, bytes.len() as u64)?;
        Ok((parse_doc(&location, &bytes, &self.service)?, id))
    }

    /// Whether a write of `after` over `before` may be left out: it changes nothing, or only
    /// refreshes ([`refresh_only`]) and fewer than [`REFRESH_EVERY`] were left out before it.
    fn may_skip(&self, before: &ControlDoc, after: &ControlDoc) -> bool {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        let (count, save_next) = &mut *skipped;
        let skip = after == before
            || (!*save_next && *count + 1 < REFRESH_EVERY && refresh_only(before, after));
        if skip {
            *count += 1;
        } else {
            (*count, *save_next) = (0, false);
        }
        skip
    }

    /// Make the next [`update`](Self::update) write even if it only refreshes.
    pub fn save_next(&self) {
        self.skipped.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<(FileId, ControlDoc)>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The document as it is now (call it under the lock): the copy kept from the last read or
    /// write when the file is still that version, else read from the file (and kept).
    fn current(&self) -> Result<ControlDoc, StateError> {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|m| FileId::of(&m));
        if let (Some(now), Some((id, doc))) = (now, &*self.last())
            && now == *id
        {
            return Ok(doc.clone());
        }
        let (doc, id) = self.read()?;
        *self.last() = id.map(|id| (id, doc.clone()));
        Ok(doc)
    }

    /// Read the document (no lock: the rename makes every read see a whole version).
    ///
    /// # Errors
    /// As [`Store::load`].
    pub fn load(&self) -> Result<ControlDoc, StateError> {
        // The lock file is opened only by a write, much later than `run`'s start, which reads
        // through here: a link, FIFO or directory at its place is refused now, so `run` does not
        // start only to fail every sync.
        refuse_non_regular(&self.lock).map_err(|e| self.io("lock file", e))?;
        self.read().map(|(doc, _)| doc)
    }

    fn acquire(&self, lock: &std::fs::File) -> Result<(), StateError> {
        // Bounded wait for the lock: a stuck holder must not hold a writer for ever.
        let give_up = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(()),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(StateError::Io {
                        location: self.path.display().to_string(),
                        reason: format!(
                            "lock file {} held by another process for more than {} s",
                            self.lock.display(),
                            LOCK_WAIT.as_secs()
                        ),
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(self.io("lock", e)),
            }
        }
    }

    /// Locked read-modify-write with an atomic replace.
    ///
    /// # Errors
    /// As [`Store::update`].
    pub fn update<F>(&self, mut change: F) -> Result<ControlDoc, StateError>
    where
        F: FnMut(&mut ControlDoc) -> Result<(), StateError>,
    {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| self.io("create directory", e))?;
        // Lock, then make sure the lock file we hold is still the one at that path (someone may
        // have removed it, which would let a second writer lock a fresh file meanwhile).
        let lock = loop {
            let lock = open_regular(
                &self.lock,
                OpenOptions::new().create(true).truncate(false).write(true),
            )
            .map_err(|e| self.io(&format!("open lock file {}", self.lock.display()), e))?;
            self.acquire(&lock)?;
            use std::os::unix::fs::MetadataExt;
            let held = lock.metadata().map(|m| (m.dev(), m.ino())).ok();
            let at_path = std::fs::symlink_metadata(&self.lock)
                .map(|m| (m.dev(), m.ino()))
                .ok();
            if held.is_some() && held == at_path {
                break lock;
            }
        };
        let before = self.current()?;
        let mut doc = before.clone();
        change(&mut doc)?;
        if self.last().is_some() && self.may_skip(&before, &doc) {
            return Ok(doc);
        }
        let body = encode(&self.path.display().to_string(), &mut doc)?;
        let (tmp, mut f) = self
            .create_tmp()
            .map_err(|e| self.io("create a temporary file", e))?;
        let write = || -> std::io::Result<Option<FileId>> {
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            // The identity after the rename (which may change the inode's change time).
            let id = f.metadata().map(|m| FileId::of(&m)).ok();
            drop(f);
            let d = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_DIRECTORY)
                .open(dir);
            if let Ok(d) = d {
                let _ = d.sync_all();
            }
            Ok(id)
        };
        let r = write();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
            *self.last() = None;
        }
        let id = r.map_err(|e| self.io(&format!("write {}", tmp.display()), e))?;
        *self.last() = id.map(|id| (id, doc.clone()));
        drop(lock); // releases the lock
        Ok(doc)
    }
}

/// The S3 store: one object, written with conditional requests.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
    service: String,
}

/// A one-line account of an SDK error: the service's code and message, or the transport error.
fn brief<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> String
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_s3::error::SdkError;
    match e {
        SdkError::ServiceError(s) => format!(
            "{}: {}",
            s.err().code().unwrap_or("error"),
            s.err().message().unwrap_or("(no message)")
        ),
        other => {
            let mut msg = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(x) = src {
                msg = format!("{msg}: {x}");
                src = x.source();
            }
            msg
        }
    }
}

/// Bound of one S3 call, the response body included, s.
pub const S3_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts of one [`S3Store::update`] before giving up on a contended object.
pub const S3_MAX_TRIES: u32 = 16;

impl S3Store {
    /// A store at `s3://bucket/<key_prefix>control-<service>.json`, with a client from the
    /// default AWS chain plus the given region / endpoint (path-style addressing when an endpoint
    /// is given, as emulators and VPC endpoints need).
    pub async fn new(cfg: &crate::config::S3State, service: &str) -> Self {
        let target = crate::aws::AwsTarget {
            region: cfg.region.clone(),
            endpoint_url: cfg.endpoint_url.clone(),
            timeouts: crate::aws::Timeouts {
                operation: S3_OPERATION_TIMEOUT,
                attempt: Duration::from_secs(4),
                connect: crate::aws::client::CONNECT_TIMEOUT,
            },
            retries: crate::aws::Retries::SdkDefault,
            // A little over the document cap, so an oversized body is refused by `check_size`
            // with its own message; the limit stops an endless error body.
            max_response_bytes: MAX_DOC_BYTES as usize + 64 * 1024,
            role: None,
        };
        let s3cfg = target.session().await.s3().build();
        S3Store {
            client: aws_sdk_s3::Client::from_conf(s3cfg),
            bucket: cfg.bucket.clone(),
            key: format!("{}control-{}.json", cfg.key_prefix, safe(service)),
            service: service.to_string(),
        }
    }

    fn location(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    fn io(&self, what: &str, e: impl std::fmt::Display) -> StateError {
        StateError::Io {
            location: self.location(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Read the document and its ETag (`None` when the object does not exist).
    ///
    /// # Errors
    /// As [`Store::load`].
    pub async fn load(&self) -> Result<(ControlDoc, Option<String>), StateError> {
        // The SDK's operation timeout ends when the response head arrives; the body is read
        // after, so a peer trickling it would hold the load (and `run`'s start) for ever.
        match tokio::time::timeout(S3_OPERATION_TIMEOUT, self.load_unbounded()).await {
            Ok(r) => r,
            Err(_) => Err(self.io(
                "GetObject",
                format!(
                    "no whole answer within {} s",
                    S3_OPERATION_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    async fn load_unbounded(&self) -> Result<(ControlDoc, Option<String>), StateError> {
        let r = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .send()
            .await;
        match r {
            Ok(mut o) => {
                let etag = o.e_tag().map(str::to_string);
                let location = self.location();
                check_size(&location, o.content_length().unwrap_or(0).max(0) as u64)?;
                let mut bytes = Vec::new();
                while let Some(chunk) = o
                    .body
                    .try_next()
                    .await
                    .map_err(|e| self.io("read body", e))?
                {
                    bytes.extend_from_slice(&chunk);
                    check_size(&location, bytes.len() as u64)?;
                }
                Ok((parse_doc(&location, &bytes, &self.service)?, etag))
            }
            Err(e) => {
                if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                    Ok((ControlDoc::new(&self.service), None))
                } else {
                    Err(self.io("GetObject", brief(&e)))
                }
            }
        }
    }

    /// Conditional read-modify-write; a lost race (HTTP 412 or 409) is retried from the fresh
    /// document, at most [`S3_MAX_TRIES`] times.
    ///
    /// # Errors
    /// As [`Store::update`], or [`StateError::Contended`].
    pub async fn update<F>(&self, mut change: F) -> Result<ControlDoc, StateError>
    where
        F: FnMut(&mut ControlDoc) -> Result<(), StateError>,
    {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
        for attempt in 1..=S3_MAX_TRIES {
            if tokio::time::Instant::now() > give_up {
                break;
            }
            let (mut doc, etag) = self.load().await?;
            change(&mut doc)?;
            let body = encode(&self.location(), &mut doc)?;
            let mut put = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(&self.key)
                .content_type("application/json")
                .body(body.into());
            put = match &etag {
                Some(t) => put.if_match(t),
                None => put.if_none_match("*"),
            };
            match put.send().await {
                Ok(_) => return Ok(doc),
                Err(e) => {
                    let status = e.raw_response().map(|r| r.status().as_u16());
                    if matches!(status, Some(412) | Some(409)) {
                        tracing::debug!(attempt, "state store write lost a race; retrying");
                        let jitter = rand::random_range(0..20u64 * u64::from(attempt));
                        tokio::time::sleep(Duration::from_millis(10 + jitter)).await;
                        continue;
                    }
                    return Err(self.io("PutObject", brief(&e)));
                }
            }
        }
        Err(StateError::Contended {
            location: self.location(),
            tries: S3_MAX_TRIES,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::{ReadinessState, Snapshot};

    fn snap() -> Snapshot {
        Snapshot {
            state: ReadinessState::Ready,
            since: Some(5),
            unready_holding_since: None,
            ready_holding_since: None,
            attempts: vec![],
            flaps: vec![],
        }
    }

    #[test]
    fn file_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "orders-db");
        assert_eq!(store.load().unwrap(), ControlDoc::new("orders-db"));
        let doc = store
            .update(|d| {
                d.probers.insert(
                    "p1".into(),
                    crate::control::ProberState {
                        saved_at: 10,
                        branches: [("primary".to_string(), snap())].into(),
                    },
                );
                Ok(())
            })
            .unwrap();
        assert_eq!(store.load().unwrap(), doc);
        let other = FileStore::new(dir.path(), "other");
        std::fs::copy(store.path(), other.path()).unwrap();
        assert!(matches!(other.load(), Err(StateError::Corrupt { .. })));
        std::fs::write(store.path(), "{\"version\":2,").unwrap();
        assert!(matches!(store.load(), Err(StateError::Corrupt { .. })));
        assert!(matches!(
            store.update(|_| Ok(())),
            Err(StateError::Corrupt { .. })
        ));
    }

    /// Instants outside 1970 to year 9999 make the document corrupt, and the reason names the
    /// field.
    #[test]
    fn a_time_out_of_range_is_corrupt_naming_its_field() {
        let doc = |field: &str, value: i64| {
            let v = serde_json::json!({
                "version": CONTROL_VERSION,
                "service": "s",
                "probers": {"p1": {"saved_at": 10, "branches": {}}},
                "overrides": {"primary": {"force": "ready", "by": "a", "reason": "b",
                              "at": 1, "expires_at": 2}},
            });
            let mut text = v.to_string();
            text = text.replace(
                &format!(
                    "\"{field}\":{}",
                    if field == "saved_at" {
                        10
                    } else if field == "at" {
                        1
                    } else {
                        2
                    }
                ),
                &format!("\"{field}\":{value}"),
            );
            parse_doc("loc", text.as_bytes(), "s")
        };
        assert!(doc("saved_at", 10).is_ok());
        for (field, value, path) in [
            ("saved_at", i64::MAX, "probers.p1.saved_at"),
            ("saved_at", -1, "probers.p1.saved_at"),
            ("at", i64::MIN, "overrides.primary.at"),
            ("expires_at", i64::MAX, "overrides.primary.expires_at"),
            (
                "expires_at",
                crate::clock::MAX_RFC3339_MS + 1,
                "overrides.primary.expires_at",
            ),
        ] {
            match doc(field, value) {
                Err(StateError::Corrupt { reason, .. }) => {
                    assert!(
                        reason.contains(path) && reason.contains(&value.to_string()),
                        "{reason}"
                    );
                }
                other => panic!("{field} = {value}: {other:?}"),
            }
        }
        assert!(doc("expires_at", crate::clock::MAX_RFC3339_MS).is_ok());
    }

    #[test]
    fn concurrent_file_writers_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let s = store.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        s.update(move |d| {
                            d.approvals.push(crate::control::Approval {
                                id: format!("{t}-{i}"),
                                branch: "primary".into(),
                                by: "op".into(),
                                reason: "r".into(),
                                at: 0,
                                expires_at: 1,
                                decisions: Default::default(),
                            });
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let doc = store.load().unwrap();
        // MAX_APPROVALS bounds the list only when pruned; nothing pruned here.
        assert_eq!(doc.approvals.len(), 200);
    }

    /// The store reads the file again only when it is another version than the one it last read
    /// or wrote: a change by another store (a rename) and one written in place (as an editor
    /// would) are both seen; a change to nothing writes nothing.
    #[test]
    fn an_update_sees_every_other_writer_and_skips_a_write_that_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let prober = FileStore::new(dir.path(), "s");
        let operator = FileStore::new(dir.path(), "s");
        let approval = |id: &str| crate::control::Approval {
            id: id.into(),
            branch: "primary".into(),
            by: "op".into(),
            reason: "r".into(),
            at: 0,
            expires_at: 1,
            decisions: Default::default(),
        };
        let ids = |d: &ControlDoc| d.approvals.iter().map(|a| a.id.clone()).collect::<Vec<_>>();
        prober
            .update(|d| {
                d.approvals.push(approval("a"));
                Ok(())
            })
            .unwrap();
        operator
            .update(|d| {
                d.approvals.push(approval("b"));
                Ok(())
            })
            .unwrap();
        assert_eq!(ids(&prober.update(|_| Ok(())).unwrap()), ["a", "b"]);
        // Written in place, same inode: its size or change time tells.
        let mut edited = operator.load().unwrap();
        edited.approvals.push(approval("c"));
        std::fs::write(prober.path(), serde_json::to_vec(&edited).unwrap()).unwrap();
        assert_eq!(ids(&prober.update(|_| Ok(())).unwrap()), ["a", "b", "c"]);
        // A change to nothing leaves the file as it is (the same inode, not rewritten).
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(prober.path()).unwrap().ino();
        prober.update(|_| Ok(())).unwrap();
        assert_eq!(std::fs::metadata(prober.path()).unwrap().ino(), ino);
        prober
            .update(|d| {
                d.approvals.push(approval("d"));
                Ok(())
            })
            .unwrap();
        assert_ne!(std::fs::metadata(prober.path()).unwrap().ino(), ino);
        assert_eq!(ids(&operator.load().unwrap()), ["a", "b", "c", "d"]);
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn io_reason(r: Result<ControlDoc, StateError>) -> String {
        match r {
            Err(StateError::Io { reason, .. }) => reason,
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_fifo_as_the_document_or_lock_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let file = FileStore::new(dir.path(), "s");
        let store = Store::File(file.clone());
        // With no writer on the other end, a plain open of the FIFO would block for ever; the
        // blocking thread would then keep the process from exiting. A hang fails the test by its
        // 10 s bound instead of the expected error at once.
        mkfifo(file.path());
        let reason = io_reason(store.load().await);
        assert!(reason.contains("not a regular file"), "{reason}");
        let reason = io_reason(store.update(|_| Ok(())).await);
        assert!(reason.contains("not a regular file"), "{reason}");
        std::fs::remove_file(file.path()).unwrap();
        let _ = std::fs::remove_file(&file.lock);
        mkfifo(&file.lock);
        let reason = io_reason(store.update(|_| Ok(())).await);
        assert!(reason.contains("open lock file"), "{reason}");
    }

    #[test]
    fn a_device_or_an_oversized_file_is_refused_without_reading_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        std::fs::create_dir(store.path()).unwrap();
        let reason = io_reason(store.load());
        assert!(reason.contains("not a regular file"), "{reason}");
        std::fs::remove_dir(store.path()).unwrap();
        // A sparse file one byte over the cap: refused as corrupt, not parsed.
        let f = std::fs::File::create(store.path()).unwrap();
        f.set_len(MAX_DOC_BYTES + 1).unwrap();
        match store.load() {
            Err(StateError::Corrupt { reason, .. }) => {
                assert!(reason.contains("larger than 16 MiB"), "{reason}");
            }
            other => panic!("expected corrupt, got {other:?}"),
        }
    }

    /// A link planted at each name the store opens (document, lock) pointing outside the
    /// directory: every operation that would open it fails naming the link, and the file it
    /// points to is neither read, created nor written. (The temporary file has a random name
    /// and is created new: `a_hard_link_at_the_temporary_name_is_not_written_through`.)
    #[test]
    fn a_symlink_at_any_store_file_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        let valid = serde_json::to_vec(&ControlDoc::new("s")).unwrap();
        let names = [store.path.clone(), store.lock.clone()];
        for (i, link) in names.iter().enumerate() {
            let target = outside.path().join(format!("target-{i}"));
            std::fs::write(&target, &valid).unwrap();
            let missing = outside.path().join(format!("missing-{i}"));
            for to in [&target, &missing] {
                // (The lock file an earlier round created is replaced by the link.)
                let _ = std::fs::remove_file(link);
                std::os::unix::fs::symlink(to, link).unwrap();
                let results = vec![store.update(|_| Ok(())), store.load()];
                for r in results {
                    let reason = io_reason(r);
                    let named = format!("{} is a symbolic link", link.display());
                    assert!(reason.contains(&named), "{reason}");
                }
                let _ = std::fs::remove_file(link);
            }
            assert_eq!(std::fs::read(&target).unwrap(), valid, "{}", link.display());
            assert!(
                !missing.exists(),
                "{} created through a link",
                missing.display()
            );
        }
    }

    /// A hard link planted at the name the temporary file used to have (predictable: the
    /// process id) to a file outside the directory: a write never writes through it.
    #[test]
    fn a_hard_link_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "root:*:0:0\n").unwrap();
        let old_name = dir
            .path()
            .join(format!("control-s.json.tmp.{}", std::process::id()));
        std::fs::hard_link(&outside, &old_name).unwrap();
        store
            .update(|d| {
                d.approvals.push(approval_of("a", "r"));
                Ok(())
            })
            .unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "root:*:0:0\n");
        assert_eq!(store.load().unwrap().approvals.len(), 1);
        // Nothing of the write is left beside the document but the planted link.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let planted = old_name.file_name().unwrap().to_string_lossy().into_owned();
        let mut expected = [
            "control-s.json",
            "control-s.lock",
            planted.as_str(),
            "outside",
        ];
        expected.sort_unstable();
        assert_eq!(names, expected);
    }

    fn approval_of(id: &str, reason: &str) -> crate::control::Approval {
        crate::control::Approval {
            id: id.into(),
            branch: "primary".into(),
            by: "op".into(),
            reason: reason.into(),
            at: 0,
            expires_at: 1,
            decisions: Default::default(),
        }
    }

    /// A hand-edited document with over-long texts is read with each cut to its bound
    /// (characters, multi-byte ones whole) ending in an ellipsis, so no record, log line or
    /// `status` copies it whole; texts within their bound are read as written.
    #[test]
    fn over_long_texts_are_cut_to_their_bound_when_read() {
        use crate::control::{MAX_BY_CHARS, MAX_LABEL_CHARS, MAX_REASON_CHARS};
        let long = |n: usize| "é".repeat(n);
        let mut doc = ControlDoc::new("s");
        let mut a = approval_of("a1", &long(1_000_000));
        a.by = long(200_000);
        doc.approvals.push(a);
        doc.approvals
            .push(approval_of("a2", &long(MAX_REASON_CHARS)));
        doc.overrides.insert(
            "primary".into(),
            crate::control::Override {
                force: crate::control::Forced::Unready,
                by: long(200_000),
                reason: long(1_000_000),
                at: 0,
                expires_at: 1,
            },
        );
        doc.markers.push(crate::control::Marker {
            id: "m1".into(),
            kind: crate::control::MarkerKind::Note,
            label: long(5_000),
            by: long(5_000),
            at: 0,
            taken: Default::default(),
        });
        let bytes = serde_json::to_vec(&doc).unwrap();
        let read = parse_doc("here", &bytes, "s").unwrap();
        let cut = |n: usize| format!("{}…", long(n - 1));
        assert_eq!(read.approvals[0].by, cut(MAX_BY_CHARS));
        assert_eq!(read.approvals[0].reason, cut(MAX_REASON_CHARS));
        assert_eq!(
            read.approvals[1].reason,
            long(MAX_REASON_CHARS),
            "within bound"
        );
        let o = &read.overrides["primary"];
        assert_eq!(
            (&o.by, &o.reason),
            (&cut(MAX_BY_CHARS), &cut(MAX_REASON_CHARS))
        );
        assert_eq!(read.markers[0].label, cut(MAX_LABEL_CHARS));
        assert_eq!(read.markers[0].by, cut(MAX_BY_CHARS));
    }

    /// Two approvals with one id (a hand edit, a copy-paste): the first is kept, later ones are
    /// dropped when read, so a prober decides and records that id once.
    #[test]
    fn a_duplicate_approval_id_keeps_the_first() {
        let mut doc = ControlDoc::new("s");
        for (id, reason) in [("a1", "first"), ("a2", "other"), ("a1", "second")] {
            doc.approvals.push(approval_of(id, reason));
        }
        let bytes = serde_json::to_vec(&doc).unwrap();
        let read = parse_doc("here", &bytes, "s").unwrap();
        let got: Vec<(&str, &str)> = read
            .approvals
            .iter()
            .map(|a| (a.id.as_str(), a.reason.as_str()))
            .collect();
        assert_eq!(got, [("a1", "first"), ("a2", "other")]);
    }

    /// Probers at the largest window (20,000 attempts per branch, two branches each), as many as
    /// would write a document far over the read cap: every write succeeds, is compact JSON, and
    /// stays readable; each prober keeps the same number of its newest attempts.
    #[test]
    fn many_probers_at_the_largest_window_still_fit_the_read_cap() {
        use crate::readiness::AttemptRecord;
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        let n = crate::config::MAX_WINDOW_ATTEMPTS as i64;
        let t0: i64 = 1_764_900_000_000;
        for p in 0..8 {
            store
                .update(move |d| {
                    let snap = Snapshot {
                        attempts: (0..n)
                            .map(|i| AttemptRecord {
                                finished_at: t0 + i * 1000,
                                success: i % 7 != 0,
                                class: None,
                            })
                            .collect(),
                        ..snap()
                    };
                    d.probers.insert(
                        format!("prober-{p}"),
                        crate::control::ProberState {
                            saved_at: t0 + n * 1000,
                            branches: [
                                ("primary".to_string(), snap.clone()),
                                ("secondary".to_string(), snap),
                            ]
                            .into(),
                        },
                    );
                    Ok(())
                })
                .unwrap();
            let len = std::fs::metadata(store.path()).unwrap().len();
            assert!(len <= DOC_BUDGET_BYTES as u64, "write {p}: {len} bytes");
        }
        let text = std::fs::read(store.path()).unwrap();
        assert!(!text.starts_with(b"{\n"), "not compact");
        let doc = FileStore::new(dir.path(), "s").load().unwrap();
        assert_eq!(doc.probers.len(), 8);
        let kept: Vec<usize> = doc
            .probers
            .values()
            .flat_map(|p| p.branches.values().map(|b| b.attempts.len()))
            .collect();
        assert!(kept.iter().all(|k| *k == kept[0] && *k > 1000), "{kept:?}");
        let newest = &doc.probers["prober-0"].branches["primary"].attempts;
        assert_eq!(newest.last().unwrap().finished_at, t0 + (n - 1) * 1000);
    }

    /// What pruning cannot bring under the cap (here undecided approvals with huge reasons, which
    /// the CLI refuses but an old binary or a hand edit could write) is refused with a clear
    /// error, and the document before it stays as it was, readable.
    #[test]
    fn a_write_still_over_the_cap_is_refused_and_the_document_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        store
            .update(|d| {
                d.approvals.push(approval_of("first", "r"));
                Ok(())
            })
            .unwrap();
        let big = "x".repeat(256 * 1024);
        let r = store.update(move |d| {
            for i in 0..70 {
                let mut a = approval_of(&format!("a{i}"), &big);
                a.expires_at = i64::MAX / 2;
                d.approvals.push(a);
            }
            Ok(())
        });
        match r {
            Err(StateError::TooLarge { bytes, .. }) => {
                assert!(bytes > MAX_DOC_BYTES as usize, "{bytes}");
            }
            other => panic!(
                "expected too large, got {:?}",
                other.map(|d| d.approvals.len())
            ),
        }
        let e = store.update(|_| Ok(())).map(|d| d.approvals.len());
        assert_eq!(e.unwrap(), 1);
        assert_eq!(
            FileStore::new(dir.path(), "s")
                .load()
                .unwrap()
                .approvals
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_stuck_operation_answers_with_an_error_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "s");
        // The operation blocks until released, after the assertion: only the bound can end the
        // wait, whatever the machine's load.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let r = store
            .off_runtime(Duration::from_millis(50), move || {
                let _ = held.recv();
                Ok(ControlDoc::new("s"))
            })
            .await;
        let reason = io_reason(r);
        assert!(
            reason.contains("no answer from the file system within 50ms"),
            "{reason}"
        );
        // The operation may never have started (waiting for a permit): nothing to release then.
        let _ = release.send(());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_than_file_ops_operations_run_at_once() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let mut ops = tokio::task::JoinSet::new();
        for i in 0..5 * FILE_OPS {
            let store = FileStore::new(dir.path(), &format!("s{i}"));
            let (running, most, release) = (running.clone(), most.clone(), release.clone());
            ops.spawn(async move {
                store
                    .off_runtime(Duration::from_secs(60), move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        while !release.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok(ControlDoc::new("s"))
                    })
                    .await
            });
        }
        // Wait until the permits are all taken, then give the others time to (wrongly) start.
        for _ in 0..2000 {
            if running.load(Ordering::SeqCst) >= FILE_OPS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = most.load(Ordering::SeqCst);
        release.store(true, Ordering::SeqCst);
        while let Some(r) = ops.join_next().await {
            assert!(r.unwrap().is_ok());
        }
        assert_eq!(seen, FILE_OPS, "operations running at once");
    }
}
