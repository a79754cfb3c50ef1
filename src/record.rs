//! Evidence records as types: what one line of the evidence file holds, written by
//! [`EvidenceWriter`](crate::sink::evidence::EvidenceWriter) and read back by [`read_lines`].
//!
//! One line is an [`Envelope`] (when, which service, which prober) around one [`Record`], whose
//! `kind` field names the variant. Each kind has exactly one shape, so a reader (the drill report,
//! an operator's `jq`) never guesses which fields a line has. Field names are part of the
//! evidence contract: renaming one breaks saved files and the queries that read them.

use crate::clock::rfc3339;
use crate::control::{MarkerKind, Override};
use crate::probe::Attempt;
pub use crate::probe::stable_name::{EndToEnd, StableNameRecord};
use crate::readiness::{Millis, ReadinessState, Transition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, BufRead};

/// Longest line [`read_lines`] accepts, bytes. Attempt records are a few KB at most (step
/// messages are cut at 1 KB); anything near this limit is not evidence.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// One line of the evidence file. The writer serialises an `Envelope<&Record>` (no copy of the
/// record); a reader gets an `Envelope<Record>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<R = Record> {
    /// The prober's record number, read back from the line (the evidence writer puts it first
    /// on each line itself, so it is never serialised from here); `None` on a line of a
    /// version from before it.
    #[serde(default, skip_serializing)]
    pub record_seq: Option<u64>,
    /// When it happened, RFC 3339 UTC with milliseconds (for people and log tools).
    pub at: String,
    /// When it happened, ms since the UNIX epoch (for programs); a line with a time outside
    /// [`plausible_ms`]'s range is not an evidence record.
    #[serde(deserialize_with = "plausible_ms")]
    pub at_ms: Millis,
    /// The `Service` dimension of the run that wrote it.
    pub service: String,
    /// The prober id of the run that wrote it.
    pub prober: String,
    /// The record, with its `kind`.
    #[serde(flatten)]
    pub record: R,
}

impl<R: Serialize> Envelope<R> {
    /// Wrap `record` with its time (ms since the epoch) and origin.
    pub fn new(at_ms: Millis, service: &str, prober: &str, record: R) -> Self {
        Envelope {
            record_seq: None,
            at: rfc3339(at_ms),
            at_ms,
            service: service.into(),
            prober: prober.into(),
            record,
        }
    }

    /// One evidence line, newline included (pure).
    ///
    /// # Errors
    /// The serialiser's error (not expected for these types: every map key is a string).
    pub fn to_line(&self) -> serde_json::Result<String> {
        let mut s = serde_json::to_string(self)?;
        s.push('\n');
        Ok(s)
    }
}

/// One evidence record; `kind` on the line is the variant's snake_case name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Record {
    /// A run started.
    Start(Start),
    /// A probe attempt finished.
    Attempt(Attempt),
    /// An attempt was still running when shutdown's grace period ended.
    AttemptAbandoned(AttemptAbandoned),
    /// A branch's readiness changed state.
    Transition(TransitionRecord),
    /// A batch of datums was handed to a sink, or could not be.
    Publish(Publish),
    /// This prober decided an operator's approval.
    Approval(ApprovalRecord),
    /// An approval was decided as applied but the branch had left `pending_approval` meanwhile.
    ApprovalNotApplied(ApprovalNotApplied),
    /// An override started, was cleared, or expired.
    Override(OverrideRecord),
    /// A sync with the state store failed.
    StateSyncFailed(StateSyncFailed),
    /// No branch is ready (logged once per episode).
    BothBranchesUnready(BothBranchesUnready),
    /// The evidence file was removed or replaced and has been reopened.
    EvidenceReopened(EvidenceReopened),
    /// An evidence segment failed to upload to S3 (and is retried), or was dropped from the
    /// local spool to keep it within its bound (lost).
    EvidenceSegment(EvidenceSegment),
    /// Another `run` process saved readiness under this prober id since this one last did.
    DuplicateProber(DuplicateProber),
    /// A service of the config could not be prepared; the others run.
    ServiceUnavailable(ServiceUnavailable),
    /// A reload (SIGHUP, or a change a poll found) was applied or refused.
    Reload(Reload),
    /// An operator's drill marker (`drill mark`), recorded once by each prober.
    Marker(MarkerRecord),
    /// A round of the stable-name probe: what the failover record answered, and which branch
    /// that selects.
    StableName(StableNameRecord),
    /// A run stopped; its summary.
    Stop(Stop),
}

impl Record {
    /// The `kind` written on the line (the same name serde writes; a test holds them equal).
    pub fn kind(&self) -> &'static str {
        self.into()
    }
}

/// `start`: the configuration a run probes with and the state it continues from. The fields
/// after `restored` came later: absent in older files, they read as `None` or empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// The config's source: its file's path, or `s3://bucket/key`.
    pub config: String,
    /// The branches probed, in config order.
    pub branches: Vec<StartBranch>,
    /// How long the run is meant to last, ms; `None` until a signal.
    pub duration_ms: Option<u64>,
    /// Where the state store is (`path` or `s3://bucket/key`).
    pub state_store: String,
    /// Branches whose readiness was restored from the store.
    pub restored: Vec<Restored>,
    /// Time between two attempts of a branch, ms.
    #[serde(default)]
    pub probe_interval_ms: Option<u64>,
    /// An attempt's deadline, ms.
    #[serde(default)]
    pub probe_timeout_ms: Option<u64>,
    /// Time between two attempts of a suspect branch, ms; `None` when adaptive probing is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect_interval_ms: Option<u64>,
    /// Time between two publish ticks, ms.
    #[serde(default)]
    pub publish_interval_ms: Option<u64>,
    /// The readiness policy, one readable line per condition (as `check` prints it).
    #[serde(default)]
    pub policy: Vec<String>,
    /// Whether failing back needs an operator's approval.
    #[serde(default)]
    pub approval_required: Option<bool>,
    /// Time between two stable-name rounds, ms; `None` when the stable-name probe is off.
    #[serde(default)]
    pub stable_name_interval_ms: Option<u64>,
    /// Whether each stable-name round also makes the end-to-end attempt.
    #[serde(default)]
    pub stable_name_end_to_end: Option<bool>,
    /// The CloudWatch namespace the service's datums go to (where `drill report --alarms` looks
    /// for its alarms).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The readiness state a branch not in `restored` starts in (`readiness.initial`).
    #[serde(default)]
    pub initial: Option<ReadinessState>,
}

impl Start {
    /// The suspect interval, ms, when adaptive probing was on: `suspect_interval_ms` below
    /// `probe_interval_ms`. Older runs wrote the interval itself when it was off.
    pub fn suspect_interval(&self) -> Option<u64> {
        let on = |s: &u64| self.probe_interval_ms.is_none_or(|i| *s < i);
        self.suspect_interval_ms.filter(on)
    }
}

/// One branch in a `start` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartBranch {
    /// Branch name (the `Branch` dimension).
    pub name: String,
    /// Route 53 failover role, `PRIMARY` or `SECONDARY`.
    pub role: String,
    /// DNS name probed.
    pub endpoint: String,
    /// Port probed.
    pub port: u16,
}

/// One restored branch in a `start` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restored {
    /// Branch name.
    pub branch: String,
    /// State it continues in.
    pub state: ReadinessState,
    /// When that state was entered, ms since the epoch; `None` for the initial state.
    pub since: Option<Millis>,
}

/// `attempt_abandoned`: an attempt cut off at shutdown, or by a reload that stopped its loop
/// (it counts in no window).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptAbandoned {
    /// Branch name.
    pub branch: String,
    /// The attempt's per-branch sequence number.
    pub seq: u64,
    /// What cut it off when not shutdown (absent: shutdown's grace period ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<AbandonCause>,
}

/// What cut an attempt off, besides shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbandonCause {
    /// A reload removed its service, or changed or removed its branch, while it ran.
    Reload,
}

/// `transition`: a readiness change and what was published for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionRecord {
    /// Branch name.
    pub branch: String,
    /// The change and the window statistics behind it.
    pub transition: Transition,
    /// The value published at once (0 or 1, the override's when one is in force); `None` when
    /// nothing is published (state still unknown).
    pub published: Option<f64>,
    /// The override in force, if any.
    #[serde(rename = "override")]
    pub override_: Option<Override>,
    /// The id of the batch that published it (its `publish` records carry the same `batch`);
    /// absent when nothing was published, and in records written before ids were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
}

/// What became of one batch handed to one sink.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PublishOutcome {
    /// The sink sent it.
    Sent,
    /// Every try failed, or the publish window closed first.
    Failed,
    /// The sink's queue was full (the sink is slower than the publish rate); never tried.
    DroppedQueueFull,
    /// The sink's task had stopped; never tried.
    SinkStopped,
    /// Shutdown's grace period ended before the sink reported on it.
    AbandonedAtShutdown,
    /// Its window closed while it waited behind an outage: too old to be worth sending; never
    /// tried.
    Expired,
}

/// Why a publish failed, in a closed set an alarm or a query can rely on.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PublishFailureClass {
    /// No answer within the try's timeout, or the publish window closed first.
    PublishTimeout,
    /// The service throttled the call (`Throttling`, HTTP 429).
    PublishThrottled,
    /// HTTP 408 (request timeout), typically from a proxy or load balancer, often bodiless.
    #[serde(rename = "publish_http_408")]
    #[strum(serialize = "publish_http_408")]
    PublishHttp408,
    /// HTTP 5xx: the service or a proxy on the way failed.
    #[serde(rename = "publish_5xx")]
    #[strum(serialize = "publish_5xx")]
    Publish5xx,
    /// No usable credentials: the provider failed, or the service refused them (expired,
    /// unknown, bad signature).
    PublishCredentials,
    /// The service refused the request itself (a 4xx other than the above): retrying the same
    /// request cannot help.
    PublishRejected,
    /// The endpoint was not reached: DNS, refused, reset, unreachable.
    PublishUnreachable,
}

impl PublishFailureClass {
    /// The snake_case name, as in evidence and the `Class` dimension.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether a later try of the same request may succeed.
    pub fn retryable(self) -> bool {
        !matches!(
            self,
            PublishFailureClass::PublishCredentials | PublishFailureClass::PublishRejected
        )
    }
}

impl PublishOutcome {
    /// Whether the batch's datums did not reach the sink's destination.
    pub fn is_dropped(self) -> bool {
        self != PublishOutcome::Sent
    }
}

/// Why a batch was published.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PublishReason {
    /// The periodic publish tick.
    Tick,
    /// The last tick at shutdown.
    Final,
    /// A readiness transition, published at once.
    Transition,
    /// An override started, was cleared or expired, published at once.
    Override,
    /// The `PublishFailures` count of the previous tick's failed batches, to the `emf` sink alone.
    PublishFailures,
}

/// `publish`: one batch for one sink, whatever became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Publish {
    /// Sink name (`emf`, `cloudwatch`).
    pub sink: String,
    /// Why the batch was published.
    pub reason: PublishReason,
    /// Datums in the batch.
    pub datums: usize,
    /// Datums the sink confirmed sent.
    pub sent: usize,
    /// Send attempts made (0 when it never reached the sink).
    pub tries: u32,
    /// True unless `outcome` is `sent`; kept beside `outcome` for existing queries.
    pub dropped: bool,
    /// What became of it.
    pub outcome: PublishOutcome,
    /// One-line cause when it was not sent; for a sent batch, what the destination said of the
    /// datums it refused (an OTLP partial success), if anything.
    pub error: Option<String>,
    /// Why the last try failed, when it was tried and failed (`outcome` = `failed`).
    pub class: Option<PublishFailureClass>,
    /// The batch's id, unique within a run and shared by its records for every sink and by the
    /// `transition` record it published; absent in records written before ids were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The CloudWatch target (its name) a service's `publish` sent the batch to; absent for
    /// `[publish.cloudwatch]`'s own target and for the `emf` sink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Publish {
    /// A record with `dropped` derived from `outcome`.
    pub fn new(
        sink: &str,
        reason: PublishReason,
        datums: usize,
        sent: usize,
        tries: u32,
        outcome: PublishOutcome,
        error: Option<String>,
    ) -> Self {
        Publish {
            sink: sink.into(),
            reason,
            datums,
            sent,
            tries,
            dropped: outcome.is_dropped(),
            outcome,
            error,
            class: None,
            batch: None,
            target: None,
        }
    }

    /// The same record with the target it was sent to.
    pub fn with_target(self, target: Option<String>) -> Self {
        Publish { target, ..self }
    }

    /// The same record with the class of its failure.
    pub fn with_class(self, class: Option<PublishFailureClass>) -> Self {
        Publish { class, ..self }
    }

    /// The same record with its batch's id.
    pub fn with_batch(self, batch: u64) -> Self {
        Publish {
            batch: Some(batch),
            ..self
        }
    }
}

/// `approval`: this prober's decision on an operator's approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Branch approved.
    pub branch: String,
    /// The approval's id.
    pub approval_id: String,
    /// Who approved.
    pub by: String,
    /// The operator's reason.
    pub reason: String,
    /// When the approval was given, ms since the epoch.
    pub given_at: Millis,
    /// When it stops being valid, ms since the epoch.
    pub expires_at: Millis,
    /// Applied (true) or rejected.
    pub applied: bool,
    /// Why, in a sentence.
    pub detail: String,
}

/// `approval_not_applied`: decided as applied, but the branch had moved on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalNotApplied {
    /// Branch name.
    pub branch: String,
    /// The approval's id.
    pub approval_id: String,
    /// The state the branch was in instead of `pending_approval`.
    pub state: ReadinessState,
}

/// What happened to an override.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum OverrideAction {
    /// It started or changed.
    Set,
    /// An operator cleared it.
    Cleared,
    /// Its expiry passed.
    Expired,
    /// A prober's sync dropped it from the document, never applied: it was set more than the
    /// tolerated clock skew after the prober's clock ([`Override::ahead`]), so by a host whose
    /// clock runs ahead.
    DroppedAhead,
}

/// `override`: an override started, changed, was cleared or expired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverrideRecord {
    /// Branch name.
    pub branch: String,
    /// What happened.
    pub action: OverrideAction,
    /// The override set or expired; absent when cleared (the store no longer has it).
    #[serde(rename = "override", default, skip_serializing_if = "Option::is_none")]
    pub override_: Option<Override>,
}

/// Why a sync with the state store failed: the `Class` dimension of `StoreSyncFailures`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StoreSyncFailureClass {
    /// The document is not a valid control document (bad JSON, another version or service).
    Corrupt,
    /// The store could not be read or written (file system, S3 request, lock).
    Io,
    /// No answer within the sync's bound.
    Timeout,
    /// The write was refused: even pruned, the document is over what readers accept.
    TooLarge,
    /// Too many conflicting writers in a row (`s3` store).
    Contended,
}

impl StoreSyncFailureClass {
    /// The snake_case name, as in the `Class` dimension.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `state_sync_failed`: a read-modify-write of the control document failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateSyncFailed {
    /// What failed.
    pub error: String,
    /// Its class, as in the `StoreSyncFailures` datum; absent in evidence written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<StoreSyncFailureClass>,
    /// When the sync started, ms since the epoch; `None` for the final sync cut off at shutdown.
    pub started_at: Option<Millis>,
}

/// `service_unavailable`: `run` could not prepare this service (a secret, CA bundle or client
/// certificate unavailable) and probes the others; its `ServiceUnavailable` datum is 1 every tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceUnavailable {
    /// Each unavailable input, in a sentence naming its key.
    pub problems: Vec<String>,
}

/// `reload`: the config was re-read (SIGHUP, or a poll found it changed) and applied, or refused with the old config kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reload {
    /// True when the new config was applied; false when it was refused.
    pub applied: bool,
    /// Services that started (names).
    pub added: Vec<String>,
    /// Services that stopped.
    pub removed: Vec<String>,
    /// Running services whose settings changed.
    pub changed: Vec<String>,
    /// Services of the new config that could not be started (each has its
    /// `service_unavailable` record).
    pub unavailable: Vec<String>,
    /// Why it was refused: each config problem with file, line and key, or each setting that
    /// needs a restart.
    pub problems: Vec<String>,
    /// Branches it removed from running services (of `changed`), as the fold dropped them;
    /// absent when none, and in records written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_branches: Vec<RemovedBranch>,
}

/// A branch a reload removed from a service that runs on ([`Reload::removed_branches`]): its
/// datums stop, and an attempt of its stopped loop is evidence only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedBranch {
    /// Service name.
    pub service: String,
    /// Branch name.
    pub branch: String,
}

/// `marker`: an operator's drill marker. The envelope's `at` is when this prober recorded it
/// (its next store sync), `given_at` when the operator gave it; `marker_id` is the same in every
/// prober's evidence, so a merge of several probers' files keeps one of each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkerRecord {
    /// The marker's id.
    pub marker_id: String,
    /// `fault`, `restore` or `note`.
    pub marker_kind: MarkerKind,
    /// What the operator did.
    pub label: String,
    /// Who.
    pub by: String,
    /// When it was given, ms since the epoch (read as [`plausible_ms`]).
    #[serde(deserialize_with = "plausible_ms")]
    pub given_at: Millis,
}

/// A time read from evidence: 1970-01-01 to 9999-12-31 (what [`rfc3339`] writes), so that a
/// hostile or corrupt line (`at_ms` of `i64::MIN`) cannot overflow a reader's span arithmetic.
///
/// # Errors
/// A time outside that range, or not an integer.
pub fn plausible_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
    let ms = Millis::deserialize(d)?;
    if (0..=crate::clock::MAX_RFC3339_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(serde::de::Error::custom(format!(
            "time {ms} ms is outside 1970-01-01 to 9999-12-31"
        )))
    }
}

/// `both_branches_unready`: no branch is ready, so Route 53 fails open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BothBranchesUnready {
    /// What that means for DNS answers.
    pub explanation: String,
}

impl BothBranchesUnready {
    /// The record with its standard explanation.
    pub fn new() -> Self {
        BothBranchesUnready {
            explanation: "no branch is ready; with every failover health check unhealthy Route 53 answers with the primary record anyway (fail-open)".into(),
        }
    }
}

impl Default for BothBranchesUnready {
    fn default() -> Self {
        Self::new()
    }
}

/// `evidence_reopened`: the file was removed or replaced; records before this one may be in the
/// old file (or gone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceReopened {
    /// The evidence file's path.
    pub path: String,
}

/// `evidence_segment`: what happened to one segment of `[evidence.s3]` on its way to S3.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSegment {
    /// The segment: its key under the prefix (`<service-or-all>/<prober>/<start>-<first seq>.jsonl.gz`).
    pub segment: String,
    /// What happened.
    pub event: SegmentEvent,
    /// Why an upload failed, in the publish failure classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<PublishFailureClass>,
    /// When the failed upload is tried again, ms from this record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// The segment's size on local disk, bytes (of a dropped one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Events of this kind in this run so far (failed uploads of this class, or dropped
    /// segments), this one included.
    pub count: u64,
}

/// What happened to a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum SegmentEvent {
    /// A PUT failed; the segment stays in the spool and is tried again.
    UploadFailed,
    /// The spool was over `spool_max_mb`: the segment was deleted unsent, its records lost.
    Dropped,
}

/// `duplicate_prober`: two `run` processes share one prober id and overwrite each other's
/// readiness and canary rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuplicateProber {
    /// The state store where the other process's entry was found.
    pub state_store: String,
    /// This process's instance id.
    pub instance: String,
    /// The other process's instance id.
    pub other_instance: String,
    /// When the other process saved, ms since the epoch.
    pub other_saved_at: Millis,
}

/// `stop`: a run's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    /// Why it stopped (`duration`, `SIGTERM`, `SIGINT`, ...).
    pub reason: String,
    /// Finished attempts per branch.
    pub attempts: BTreeMap<String, u64>,
    /// Attempts abandoned at shutdown.
    pub abandoned: u64,
    /// Readiness transitions.
    pub transitions: u64,
    /// Batches not sent, per sink.
    pub dropped_batches: BTreeMap<String, u64>,
    /// Readiness state per branch at the end.
    pub final_states: BTreeMap<String, ReadinessState>,
    /// Approvals this prober applied.
    pub approvals_applied: u64,
    /// Approvals this prober rejected.
    pub approvals_rejected: u64,
    /// Failed syncs with the state store.
    pub state_sync_failures: u64,
    /// Evidence records that could not be written (this one excluded).
    pub evidence_write_failures: u64,
}

/// A line [`read_lines`] could not turn into an [`Envelope`].
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    /// 1-based line number.
    pub line: u64,
    /// What was wrong.
    pub reason: LineErrorReason,
}

/// What was wrong with a line.
#[derive(Debug, thiserror::Error)]
pub enum LineErrorReason {
    /// Reading failed; the iterator ends after this item.
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    /// Longer than [`MAX_LINE_BYTES`]; skipped without being held in memory.
    #[error("longer than {MAX_LINE_BYTES} bytes")]
    TooLong,
    /// Not an evidence record (torn, foreign, or of an unknown kind).
    #[error("not an evidence record: {0}")]
    Parse(#[from] serde_json::Error),
}

/// Read evidence lines, one item per non-blank line: the record, or why that line is not one.
/// A bad line never ends the iteration (only a read error does), and no line takes more than
/// [`MAX_LINE_BYTES`] of memory.
pub fn read_lines<R: BufRead>(reader: R) -> impl Iterator<Item = Result<Envelope, LineError>> {
    Lines {
        reader,
        line: 0,
        done: false,
    }
}

struct Lines<R> {
    reader: R,
    line: u64,
    done: bool,
}

impl<R: BufRead> Lines<R> {
    /// The next raw line without its newline, and whether it was cut at the limit; `None` at the
    /// end.
    fn raw_line(&mut self) -> Option<io::Result<(Vec<u8>, bool)>> {
        let mut buf = Vec::new();
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            };
            if chunk.is_empty() {
                return any.then_some(Ok((buf, too_long)));
            }
            any = true;
            let (take, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if buf.len() + take > MAX_LINE_BYTES {
                too_long = true;
                buf = Vec::new();
            } else if !too_long {
                buf.extend_from_slice(&chunk[..take]);
            }
            self.reader.consume(take + usize::from(end));
            if end {
                return Some(Ok((buf, too_long)));
            }
        }
    }
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<Envelope, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let raw = self.raw_line()?;
            self.line += 1;
            let line = self.line;
            let err = |reason| Some(Err(LineError { line, reason }));
            match raw {
                Err(e) => {
                    self.done = true;
                    return err(LineErrorReason::Io(e));
                }
                Ok((_, true)) => return err(LineErrorReason::TooLong),
                Ok((bytes, false)) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
                Ok((bytes, false)) => {
                    return Some(serde_json::from_slice(&bytes).map_err(|e| LineError {
                        line,
                        reason: e.into(),
                    }));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
