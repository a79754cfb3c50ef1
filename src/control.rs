//! The shared control document (pure): every prober's readiness snapshots, operator approvals,
//! overrides and drill markers of one service, and the rules that decide approvals, apply overrides and render
//! `status`. No I/O and no clock reads: the stores in `state.rs` move the document, and callers
//! pass the time.

use crate::readiness::{Millis, Policy, Readiness, ReadinessState, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

mod status_json;

pub use status_json::with_freshness;

/// Format version of the control document.
pub const CONTROL_VERSION: u32 = 2;
/// Approvals kept in the document: beyond this many, the oldest are dropped.
pub const MAX_APPROVALS: usize = 100;
/// A prober entry not saved for this long (ms) is dropped from the document: 7 days.
pub const PROBER_RETENTION_MS: Millis = 7 * 86_400_000;
/// An override is kept in the document this long (ms) after it expired, for `status` and the
/// record of who forced what: 1 day.
pub const OVERRIDE_RETENTION_MS: Millis = 86_400_000;
/// A decision this prober finds in the document under its own id, but has not recorded in this
/// run, is taken as news for this long (ms) after it was made: 10 minutes. That is a decision
/// whose write reached the store while its answer was lost (a timeout); an older one was made by
/// an earlier run, which recorded it then.
pub const LOST_DECISION_MS: Millis = 10 * 60_000;
/// An approval that expired more than this long (ms) ago is history, not news, to a prober that
/// never decided it (e.g. a new prober id): it is neither decided nor recorded. 10 minutes.
pub const APPROVAL_HISTORY_MS: Millis = 10 * 60_000;
/// A prober that saved within this long (ms) counts as running: it reads a new approval at its
/// next sync. 15 minutes; `approve` warns when only staler probers wait for the approval.
pub const PROBER_FRESH_MS: Millis = 15 * 60_000;

/// Drill markers kept in the document: beyond this many, the oldest are dropped.
pub const MAX_MARKERS: usize = 200;
/// A drill marker is kept in the document this long (ms) after it was given: 7 days, as long as
/// a prober entry.
pub const MARKER_RETENTION_MS: Millis = 7 * 86_400_000;
/// A marker given more than this long (ms) before a prober's sync is history, not news, to a
/// prober that has not recorded it (e.g. a new prober id): it is not recorded. 1 hour.
pub const MARKER_NEWS_MS: Millis = 3_600_000;

/// Longest override (ms): 30 days, long enough for a planned maintenance, short enough not to
/// be forgotten. `override --expires` refuses more; a prober applies a longer one written in the
/// document only up to this long after it was set ([`Override::ends_at`]).
pub const MAX_OVERRIDE_MS: Millis = 30 * 86_400_000;
/// Longest `by` of an approval, override or drill marker, characters: a name.
pub const MAX_BY_CHARS: usize = 100;
/// Longest `reason` of an approval or override, characters: a sentence or two, not a document.
pub const MAX_REASON_CHARS: usize = 1000;
/// Longest drill marker label, characters: one line of a timeline.
pub const MAX_LABEL_CHARS: usize = 200;

/// Clock skew tolerated between hosts sharing a document (ms): a prober entry saved further
/// ahead of the reader's clock counts as neither fresh nor worth keeping. 5 minutes.
pub const MAX_CLOCK_SKEW_MS: Millis = 5 * 60_000;

/// The first instant in `doc` outside `[0, year 9999]` (the range [`crate::clock::rfc3339`]
/// writes), as the field's path and value (pure).
pub fn time_out_of_range(doc: &ControlDoc) -> Option<(String, Millis)> {
    let mut times: Vec<(String, Millis)> = Vec::new();
    for (id, p) in &doc.probers {
        times.push((format!("probers.{id}.saved_at"), p.saved_at));
        for (b, snap) in &p.branches {
            let at = |f: &str| format!("probers.{id}.branches.{b}.{f}");
            let opts = [
                ("since", snap.since),
                ("unready_holding_since", snap.unready_holding_since),
                ("ready_holding_since", snap.ready_holding_since),
            ];
            times.extend(opts.into_iter().filter_map(|(f, t)| Some((at(f), t?))));
            for (i, a) in snap.attempts.iter().enumerate() {
                times.push((at(&format!("attempts[{i}].finished_at")), a.finished_at));
            }
        }
    }
    for (i, a) in doc.approvals.iter().enumerate() {
        times.push((format!("approvals[{i}].at"), a.at));
        times.push((format!("approvals[{i}].expires_at"), a.expires_at));
        for (id, d) in &a.decisions {
            times.push((format!("approvals[{i}].decisions.{id}.at"), d.at));
        }
    }
    for (b, o) in &doc.overrides {
        times.push((format!("overrides.{b}.at"), o.at));
        times.push((format!("overrides.{b}.expires_at"), o.expires_at));
    }
    for (i, m) in doc.markers.iter().enumerate() {
        times.push((format!("markers[{i}].at"), m.at));
        for (id, t) in &m.taken {
            times.push((format!("markers[{i}].taken.{id}"), *t));
        }
    }
    times
        .into_iter()
        .find(|(_, t)| !(0..=crate::clock::MAX_RFC3339_MS).contains(t))
}

/// Bring a document as read within the bounds the CLI keeps when it writes (pure): each `by`,
/// `reason` and marker label over [`MAX_BY_CHARS`], [`MAX_REASON_CHARS`] or
/// [`MAX_LABEL_CHARS`] is cut to it ([`clip`]), and of approvals sharing an id the first is
/// kept. A hand edit then cannot make every prober copy megabytes into each record, log line
/// and `status`, nor decide one id twice; a cut keeps the service probing where refusing the
/// document would stop every sync.
pub fn bound_texts(doc: &mut ControlDoc) {
    let mut ids = std::collections::BTreeSet::new();
    doc.approvals.retain(|a| ids.insert(a.id.clone()));
    for a in &mut doc.approvals {
        clip(&mut a.by, MAX_BY_CHARS);
        clip(&mut a.reason, MAX_REASON_CHARS);
    }
    for o in doc.overrides.values_mut() {
        clip(&mut o.by, MAX_BY_CHARS);
        clip(&mut o.reason, MAX_REASON_CHARS);
    }
    for m in &mut doc.markers {
        clip(&mut m.label, MAX_LABEL_CHARS);
        clip(&mut m.by, MAX_BY_CHARS);
    }
}

/// Cut `text` to at most `max` characters (not bytes), the last one an ellipsis, when longer.
pub fn clip(text: &mut String, max: usize) {
    if let Some((end, _)) = text.char_indices().nth(max) {
        let keep = text[..end].char_indices().nth(max.saturating_sub(1));
        text.truncate(keep.map_or(0, |(i, _)| i));
        text.push('…');
    }
}

/// Everything the probers and the operator CLI share about one service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ControlDoc {
    /// [`CONTROL_VERSION`].
    pub version: u32,
    /// Service name (a document of another service is refused).
    pub service: String,
    /// Readiness per prober id, then per branch.
    #[serde(default)]
    pub probers: BTreeMap<String, ProberState>,
    /// Operator approvals, oldest first.
    #[serde(default)]
    pub approvals: Vec<Approval>,
    /// Active (or expired, not yet pruned) overrides per branch.
    #[serde(default)]
    pub overrides: BTreeMap<String, Override>,
    /// Per prober id, the instance (one random id per `run` process) that last saved its entry:
    /// how a process tells that another one runs with its prober id ([`claim_instance`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, String>,
    /// Operator drill markers (`drill mark`), oldest first; absent in documents written before
    /// markers existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
}

impl ControlDoc {
    /// An empty document for `service`.
    pub fn new(service: &str) -> Self {
        ControlDoc {
            version: CONTROL_VERSION,
            service: service.to_string(),
            probers: BTreeMap::new(),
            approvals: Vec::new(),
            overrides: BTreeMap::new(),
            instances: BTreeMap::new(),
            markers: Vec::new(),
        }
    }

    /// Drop approvals beyond [`MAX_APPROVALS`] (oldest first), overrides that expired more than
    /// a day before `now` or were set in the future ([`Override::ahead`]), probers not saved for [`PROBER_RETENTION_MS`], and markers given
    /// more than [`MARKER_RETENTION_MS`] before `now` or beyond [`MAX_MARKERS`] (oldest first).
    pub fn prune(&mut self, now: Millis) {
        self.probers
            .retain(|_, p| p.saved_at.saturating_add(PROBER_RETENTION_MS) > now && !p.ahead(now));
        if self.approvals.len() > MAX_APPROVALS {
            let extra = self.approvals.len() - MAX_APPROVALS;
            self.approvals.drain(..extra);
        }
        self.overrides.retain(|_, o| {
            o.ends_at(now).saturating_add(OVERRIDE_RETENTION_MS) > now && !o.ahead(now)
        });
        let probers = &self.probers;
        self.instances.retain(|id, _| probers.contains_key(id));
        self.markers
            .retain(|m| m.at.saturating_add(MARKER_RETENTION_MS) > now);
        if self.markers.len() > MAX_MARKERS {
            let extra = self.markers.len() - MAX_MARKERS;
            self.markers.drain(..extra);
        }
    }
}

impl ControlDoc {
    /// Bring the document's compact JSON down to about `budget` bytes when it is larger (pure):
    /// first drop decided approvals, oldest first (each prober that decided one recorded it in
    /// its evidence), then drill markers a prober took, oldest first, then keep in every branch
    /// snapshot only the same number of newest attempts, the most that fit. Undecided approvals,
    /// markers no prober took yet, overrides and the probers' states are kept. A prober's
    /// snapshot then restores fewer attempts after a restart (its windows fill again as it
    /// probes); its live state is not touched. Returns the compact size after, bytes.
    pub fn fit(&mut self, budget: usize) -> usize {
        let mut size = json_len(&*self);
        size = drop_oldest(&mut self.approvals, size, budget, |a| {
            !a.decisions.is_empty()
        });
        size = drop_oldest(&mut self.markers, size, budget, |m| !m.taken.is_empty());
        if size > budget {
            self.cap_attempts(size - budget);
        }
        json_len(&*self)
    }

    /// Keep in every branch snapshot only its newest attempts, as many in each as leaves out at
    /// least `excess` bytes (or none at all).
    fn cap_attempts(&mut self, excess: usize) {
        // Per snapshot, the bytes of its oldest `j` attempts (each with its comma), j = 0..=len.
        let costs: Vec<Vec<usize>> = self
            .probers
            .values()
            .flat_map(|p| p.branches.values())
            .map(|b| {
                std::iter::once(0)
                    .chain(b.attempts.iter().scan(0, |sum, a| {
                        *sum += json_len(a) + 1;
                        Some(*sum)
                    }))
                    .collect()
            })
            .collect();
        let saved = |keep: usize| -> usize {
            costs
                .iter()
                .map(|c| c[(c.len() - 1).saturating_sub(keep)])
                .sum()
        };
        let longest = costs.iter().map(|c| c.len() - 1).max().unwrap_or(0);
        // The largest `keep` that saves enough: saving shrinks as `keep` grows.
        let (mut lo, mut hi) = (0, longest);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if saved(mid) >= excess {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        for p in self.probers.values_mut() {
            for b in p.branches.values_mut() {
                let extra = b.attempts.len().saturating_sub(lo);
                b.attempts.drain(..extra);
            }
        }
    }
}

/// Remove the oldest items of `items` that `droppable` allows until `size` (bytes, less each
/// item and its comma) is at most `budget`; returns the size left.
fn drop_oldest<T: Serialize>(
    items: &mut Vec<T>,
    mut size: usize,
    budget: usize,
    droppable: impl Fn(&T) -> bool,
) -> usize {
    let mut i = 0;
    while size > budget && i < items.len() {
        if droppable(&items[i]) {
            size = size.saturating_sub(json_len(&items[i]) + 1);
            items.remove(i);
        } else {
            i += 1;
        }
    }
    size
}

/// Length of `v` as compact JSON, bytes, counted without building it.
fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Serialising these types cannot fail (string keys, no custom serialisers).
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Another `run` process that saved under this process's prober id.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherInstance {
    /// Its instance id.
    pub instance: String,
    /// When it saved, ms since the epoch (its entry's `saved_at`).
    pub saved_at: Millis,
}

/// Mark `me`'s entry as saved by `instance` (call it in the same change as [`sync_prober`],
/// before it, which saves the entry); returns the other instance that saved it last, if any.
/// Whether that means a second live prober is [`InstanceWatch`]'s to decide.
pub fn claim_instance(doc: &mut ControlDoc, me: &str, instance: &str) -> Option<OtherInstance> {
    let previous = doc.instances.insert(me.to_string(), instance.to_string())?;
    (previous != instance).then(|| OtherInstance {
        instance: previous,
        saved_at: doc.probers.get(me).map_or(0, |p| p.saved_at),
    })
}

/// One `run` process's view of its prober id in the store. Two processes with one prober id
/// overwrite each other's readiness and canary rows (`verify_mismatch`); each saves its own
/// random instance id beside its entry at every sync, so a process that finds another instance
/// id there, after a sync of its own had saved, knows that a second process runs with its id.
/// Finding one at its first sync is not a duplicate: that is the entry of the run before
/// (a restart).
#[derive(Debug, Clone)]
pub struct InstanceWatch {
    /// This process's instance id.
    pub instance: String,
    saved: bool,
}

impl InstanceWatch {
    /// A watch for the process whose instance id is `instance`.
    pub fn new(instance: impl Into<String>) -> Self {
        InstanceWatch {
            instance: instance.into(),
            saved: false,
        }
    }

    /// Take a finished sync: `found` is what [`claim_instance`] returned in it (`None` for a
    /// failed sync, which saved nothing). Returns the duplicate, if the entry this process
    /// saved before was overwritten by another instance since.
    pub fn after_sync(
        &mut self,
        saved: bool,
        found: Option<OtherInstance>,
    ) -> Option<OtherInstance> {
        if !saved {
            return None;
        }
        let duplicate = if self.saved { found } else { None };
        self.saved = true;
        duplicate
    }
}

impl ProberState {
    /// Whether this prober saved within [`PROBER_FRESH_MS`] of `now`.
    pub fn is_fresh(&self, now: Millis) -> bool {
        self.saved_at.saturating_add(PROBER_FRESH_MS) > now && !self.ahead(now)
    }

    /// Whether this entry was saved more than [`MAX_CLOCK_SKEW_MS`] after `now`: written by a
    /// host whose clock runs ahead, so its `saved_at` says nothing about whether it still runs.
    pub fn ahead(&self, now: Millis) -> bool {
        self.saved_at > now.saturating_add(MAX_CLOCK_SKEW_MS)
    }
}

/// One prober's saved view.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProberState {
    /// When it was saved, ms since the epoch.
    pub saved_at: Millis,
    /// Readiness per branch.
    pub branches: BTreeMap<String, Snapshot>,
}

/// An operator's approval of a failback.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Unique id (`<at>-<random>`).
    pub id: String,
    /// Branch it approves.
    pub branch: String,
    /// Who approved.
    pub by: String,
    /// Why.
    pub reason: String,
    /// When it was given, ms since the epoch.
    pub at: Millis,
    /// When it stops being valid, ms since the epoch.
    pub expires_at: Millis,
    /// Each prober's decision (prober id → decision); a prober decides once.
    #[serde(default)]
    pub decisions: BTreeMap<String, Decision>,
}

/// What an operator marks in a drill's timeline.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// The operator injected a fault (e.g. blocked the writer's path).
    Fault,
    /// The operator removed it.
    Restore,
    /// Anything else worth a line in the timeline.
    Note,
}

impl MarkerKind {
    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Fault => "fault",
            MarkerKind::Restore => "restore",
            MarkerKind::Note => "note",
        }
    }
}

/// An operator's drill marker: every prober records it into its own evidence once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Unique id (`<at>-<random>`).
    pub id: String,
    /// What it marks.
    pub kind: MarkerKind,
    /// What the operator did, one line (1 to 200 characters).
    pub label: String,
    /// Who.
    pub by: String,
    /// When it was given, ms since the epoch.
    pub at: Millis,
    /// The probers that took it into their evidence: prober id → when (ms since the epoch).
    #[serde(default)]
    pub taken: BTreeMap<String, Millis>,
}

/// A prober's decision on an approval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// When it was decided.
    pub at: Millis,
    /// Applied or rejected.
    pub applied: bool,
    /// Why, in a sentence.
    pub detail: String,
}

/// The value an override forces.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Forced {
    /// Publish 1.
    Ready,
    /// Publish 0.
    Unready,
}

impl Forced {
    /// The published value.
    pub fn value(self) -> f64 {
        match self {
            Forced::Ready => 1.0,
            Forced::Unready => 0.0,
        }
    }
    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Forced::Ready => "ready",
            Forced::Unready => "unready",
        }
    }
}

/// An operator override of one branch's published value. Route 53 ignores `SetAlarmState` on
/// a health check's alarm, so overrides go through the metric.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// The forced value.
    pub force: Forced,
    /// Who set it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// When it was set.
    pub at: Millis,
    /// When it ends by itself (always set).
    pub expires_at: Millis,
}

impl Override {
    /// Whether it is in force at `now`: not set in the future ([`ahead`](Self::ahead)) and
    /// before its end ([`ends_at`](Self::ends_at)).
    pub fn active(&self, now: Millis) -> bool {
        !self.ahead(now) && now < self.ends_at(now)
    }

    /// When it ends for a reader whose clock says `now`: its `expires_at`, but at most
    /// [`MAX_OVERRIDE_MS`] after it was set, or after `now` when it was set later (within the
    /// tolerated skew). The CLI refuses a longer `--expires`; a document with a longer one (a
    /// hand edit, a host whose clock was wrong) is applied only up to that bound.
    pub fn ends_at(&self, now: Millis) -> Millis {
        self.expires_at
            .min(self.at.min(now).saturating_add(MAX_OVERRIDE_MS))
    }

    /// As a prober applies it at `now`: its `expires_at` brought to [`ends_at`](Self::ends_at),
    /// with a note saying so in its reason (kept within [`MAX_REASON_CHARS`]); unchanged when
    /// it is within the bound or set in the future ([`ahead`](Self::ahead)). What a sync
    /// writes into the document, and what the prober logs and records from its first sight of
    /// it, so both show the same end.
    pub fn bounded(&self, now: Millis) -> Override {
        let end = self.ends_at(now);
        if self.ahead(now) || end == self.expires_at {
            return self.clone();
        }
        let note = format!(
            " [expiry {} bounded to {} by a prober: at most {} after it was set]",
            crate::clock::rfc3339(self.expires_at),
            crate::clock::rfc3339(end),
            crate::clock::fmt_duration_ms(MAX_OVERRIDE_MS)
        );
        let mut reason = self.reason.clone();
        // The reason with its note stays within its bound, so the next read keeps the note.
        clip(&mut reason, MAX_REASON_CHARS - note.chars().count());
        reason.push_str(&note);
        Override {
            reason,
            expires_at: end,
            ..self.clone()
        }
    }

    /// Whether it was set more than [`MAX_CLOCK_SKEW_MS`] after `now`: written by a host whose
    /// clock runs ahead, so, as a prober entry saved in the future, it is not trusted (never in
    /// force, dropped at a prober's sync).
    pub fn ahead(&self, now: Millis) -> bool {
        self.at > now.saturating_add(MAX_CLOCK_SKEW_MS)
    }
}

/// Write into the document each override's bound ([`Override::bounded`] on the prober's clock
/// `now`), so that `status`, the prober's log and its evidence all show the end the prober
/// applies instead of the one written.
fn bound_overrides(doc: &mut ControlDoc, now: Millis) {
    for o in doc.overrides.values_mut() {
        *o = o.bounded(now);
    }
}

/// Decide an approval for one prober's branch (pure).
///
/// Rules: an expired approval is rejected; an approval is applied only while the branch is in
/// `pending_approval`, only while the evidence at `now` still supports readiness (at least
/// `min_attempts` in the ready window at or above its threshold, unready condition not holding),
/// and only if it was given after the branch entered that state, so an approval given before
/// the evidence was there never pre-authorises a later failback.
pub fn decide(approval: &Approval, readiness: &Readiness, now: Millis) -> Decision {
    let state = readiness.state();
    let (applied, detail) = if now >= approval.expires_at {
        (
            false,
            format!(
                "approval expired at {}",
                crate::clock::rfc3339(approval.expires_at)
            ),
        )
    } else if state != ReadinessState::PendingApproval {
        (
            false,
            format!(
                "branch is {}, not pending_approval; an approval is only taken once the ready condition has held its full `for`, and never pre-authorises a later failback",
                state.as_str()
            ),
        )
    } else if let Some(why) = not_ready_now(readiness, now) {
        (
            false,
            format!(
                "the ready condition does not hold now ({why}); a failback is approved only on current evidence"
            ),
        )
    } else if readiness.since().is_some_and(|s| approval.at < s) {
        (
            false,
            format!(
                "approval was given at {}, before the branch entered pending_approval at {}; it does not pre-authorise this failback",
                crate::clock::rfc3339(approval.at),
                crate::clock::rfc3339(readiness.since().unwrap_or_default())
            ),
        )
    } else {
        (true, "applied: pending_approval → ready".to_string())
    };
    Decision {
        at: now,
        applied,
        detail,
    }
}

/// One prober's turn on the control document (pure; the body of its conditional
/// read-modify-write): decide every approval of its branches it has not decided yet, take back the
/// decisions it wrote whose answer was lost, save its readiness, prune.
///
/// `readiness` is the prober's copy of its branches at the start of the sync; an approval applied
/// here is applied to the copy, so the saved snapshot already shows `ready`. The caller applies
/// the returned decisions to its live state. `recorded` holds the approval ids whose decision the
/// caller has already taken. Returns the decisions to take, oldest approval first.
///
/// A lost answer: the store kept this prober's decision but the prober never heard back, so the
/// decision is news to it for [`LOST_DECISION_MS`]. An applied one is applied to the copy only
/// if [`decide`] would still apply it now (the branch may have moved on meanwhile).
pub fn sync_prober(
    doc: &mut ControlDoc,
    me: &str,
    readiness: &mut BTreeMap<String, Readiness>,
    recorded: &BTreeSet<String>,
    now: Millis,
) -> Vec<(Approval, Decision)> {
    let mut decided = Vec::new();
    for a in doc.approvals.iter_mut() {
        let Some(r) = readiness.get_mut(&a.branch) else {
            continue;
        };
        if let Some(d) = a.decisions.get(me) {
            if !recorded.contains(&a.id) && d.at.saturating_add(LOST_DECISION_MS) > now {
                if d.applied && decide(a, r, now).applied {
                    let _ = r.approve(now);
                }
                decided.push((a.clone(), d.clone()));
            }
            continue;
        }
        if a.expires_at.saturating_add(APPROVAL_HISTORY_MS) < now {
            continue;
        }
        let d = decide(a, r, now);
        if d.applied {
            let _ = r.approve(now);
        }
        a.decisions.insert(me.to_string(), d.clone());
        decided.push((a.clone(), d));
    }
    doc.probers.insert(
        me.to_string(),
        ProberState {
            saved_at: now,
            branches: readiness
                .iter()
                .map(|(k, r)| (k.clone(), r.snapshot()))
                .collect(),
        },
    );
    bound_overrides(doc, now);
    doc.prune(now);
    decided
}

/// The overrides a sync at `now` drops from `doc` unapplied because they were set in the future
/// ([`Override::ahead`]; [`ControlDoc::prune`] drops them), by branch (pure; call it in the same
/// change, before [`sync_prober`]), so that the prober says which it dropped.
pub fn dropped_ahead(doc: &ControlDoc, now: Millis) -> Vec<(String, Override)> {
    doc.overrides
        .iter()
        .filter(|(_, o)| o.ahead(now))
        .map(|(b, o)| (b.clone(), o.clone()))
        .collect()
}

/// The drill markers prober `me` records now (pure; call it in the same change as
/// [`sync_prober`]): each marker it has not taken yet, unless given more than [`MARKER_NEWS_MS`]
/// before `now`, marked taken by `me` in the document. `recorded` holds the marker ids the caller
/// has already recorded: a marker the document shows taken by `me` but not recorded is one whose
/// answer was lost, handed back for [`LOST_DECISION_MS`] after it was taken, as approvals are.
/// Returns them oldest first.
pub fn take_markers(
    doc: &mut ControlDoc,
    me: &str,
    recorded: &BTreeSet<String>,
    now: Millis,
) -> Vec<Marker> {
    let mut taken = Vec::new();
    for m in doc.markers.iter_mut() {
        if recorded.contains(&m.id) {
            continue;
        }
        match m.taken.get(me) {
            Some(&t) if t.saturating_add(LOST_DECISION_MS) > now => taken.push(m.clone()),
            Some(_) => {}
            None if m.at.saturating_add(MARKER_NEWS_MS) < now => {}
            None => {
                m.taken.insert(me.to_string(), now);
                taken.push(m.clone());
            }
        }
    }
    taken
}

/// Why the evidence at `now` does not support readiness, if it does not: fewer than
/// `min_attempts` in the ready window, a success rate below the ready threshold, or the unready
/// condition holding.
pub fn not_ready_now(r: &Readiness, now: Millis) -> Option<String> {
    let p = r.policy();
    let w = r.window_stats(now, p.declare_ready.window);
    if w.finished < p.min_attempts {
        return Some(format!(
            "{} attempts in the last {}, fewer than min_attempts {}",
            w.finished,
            crate::clock::fmt_duration(p.declare_ready.window),
            p.min_attempts
        ));
    }
    let rate = w.success_rate_percent.unwrap_or(0.0);
    if rate < p.declare_ready.threshold_percent {
        return Some(format!(
            "success rate {rate:.1}% < {}% over the last {}",
            p.declare_ready.threshold_percent,
            crate::clock::fmt_duration(p.declare_ready.window)
        ));
    }
    if r.holding().0.is_some() {
        return Some("the unready condition is holding".into());
    }
    None
}

/// The published readiness of a branch: an active override's value, else the computed one.
pub fn effective_value(computed: Option<f64>, ov: Option<&Override>, now: Millis) -> Option<f64> {
    match ov {
        Some(o) if o.active(now) => Some(o.force.value()),
        _ => computed,
    }
}

/// What a branch's state waits for, in a sentence (for `status`).
pub fn waiting_for(r: &Readiness, now: Millis) -> String {
    let p = r.policy();
    let (unready_since, ready_since) = r.holding();
    let fmt = crate::clock::fmt_duration_ms;
    let holding = |since: Millis, for_: std::time::Duration, what: &str| {
        format!(
            "{what} condition holding for {} of {}",
            fmt(now.saturating_sub(since)),
            crate::clock::fmt_duration(for_)
        )
    };
    match r.state() {
        ReadinessState::PendingApproval => {
            "operator approval (readyprobe approve --branch <branch> --by <who> --reason <why>)"
                .to_string()
        }
        ReadinessState::Ready => match unready_since {
            Some(s) => holding(s, p.declare_unready.for_, "unready"),
            None => "nothing: ready, unready condition not holding".to_string(),
        },
        ReadinessState::Unready => match ready_since {
            Some(s) => holding(s, p.declare_ready.for_, "ready"),
            None => format!(
                "the ready condition (success rate ≥ {}% over {} with at least {} attempts) to start holding",
                p.declare_ready.threshold_percent,
                crate::clock::fmt_duration(p.declare_ready.window),
                p.min_attempts
            ),
        },
        ReadinessState::Unknown => match (unready_since, ready_since) {
            (Some(s), _) => holding(s, p.declare_unready.for_, "unready"),
            (_, Some(s)) => holding(s, p.declare_ready.for_, "ready"),
            _ => format!(
                "evidence: at least {} finished attempts in the window",
                p.min_attempts
            ),
        },
    }
}

/// Render `status` for the given branches (pure).
pub fn render_status(
    doc: &ControlDoc,
    policy: &Policy,
    branches: &[String],
    now: Millis,
) -> String {
    let mut s = String::new();
    let t = crate::clock::rfc3339;
    let _ = writeln!(s, "service {} at {}", doc.service, t(now));
    if doc.probers.is_empty() {
        let _ = writeln!(s, "  no prober has saved state yet");
    }
    for b in branches {
        let _ = writeln!(s, "branch {b}:");
        for (id, ps) in &doc.probers {
            let Some(snap) = ps.branches.get(b) else {
                continue;
            };
            let r = Readiness::restore(policy.clone(), snap.clone().clamped(now));
            // The window up to the save: a running prober rewrites a document that only
            // refreshes every few syncs, so the reader's clock would count a live prober's
            // recent attempts as missing.
            let saved = ps.saved_at.min(now);
            let w = r.window_stats(saved, policy.declare_unready.window);
            let window = crate::clock::fmt_duration(policy.declare_unready.window);
            let rate = match w.success_rate_percent {
                Some(x) => format!(
                    "success rate {x:.1}% of {} attempts over the {window} before the save",
                    w.finished
                ),
                None => format!("no attempts in the {window} before the save"),
            };
            let _ = writeln!(
                s,
                "  prober {id}: {} since {} (saved {}, {}), {rate}",
                r.state().as_str(),
                r.since().map(t).unwrap_or_else(|| "start".into()),
                t(ps.saved_at),
                saved_ago(ps, now),
            );
            if let Some(why) = staleness(ps, now) {
                let _ = writeln!(s, "    STALE: {why}");
            }
            let _ = writeln!(
                s,
                "    waiting for: {}",
                waiting_for(&r, now).replace("<branch>", b)
            );
        }
        if let Some(o) = doc.overrides.get(b) {
            if o.active(now) {
                let _ = writeln!(
                    s,
                    "  OVERRIDE: forced {} until {} by {} ({})",
                    o.force.as_str(),
                    t(o.ends_at(now)),
                    o.by,
                    o.reason
                );
            } else if o.ahead(now) {
                let _ = writeln!(
                    s,
                    "  override IGNORED: forced {} by {} ({}) set at {}, more than {} ahead of this clock; probers drop it",
                    o.force.as_str(),
                    o.by,
                    o.reason,
                    t(o.at),
                    crate::clock::fmt_duration_ms(MAX_CLOCK_SKEW_MS)
                );
            }
        }
        render_approvals(&mut s, &doc.approvals, b, now);
    }
    render_markers(&mut s, &doc.markers);
    s
}

/// The approvals of branch `b` still valid or decided: when each was given, and each prober's
/// decision with when it made it (an applied one: when that prober applied it).
fn render_approvals(s: &mut String, approvals: &[Approval], b: &str, now: Millis) {
    let t = crate::clock::rfc3339;
    for a in approvals.iter().filter(|a| a.branch == b) {
        let decided: Vec<String> = a
            .decisions
            .iter()
            .map(|(p, d)| {
                let what = if d.applied { "applied" } else { "rejected" };
                format!("{p}: {what} at {}", t(d.at))
            })
            .collect();
        if a.expires_at > now || !decided.is_empty() {
            let _ = writeln!(
                s,
                "  approval {} by {} given at {} (expires {}): {}{}",
                a.id,
                a.by,
                t(a.at),
                t(a.expires_at),
                a.reason,
                if decided.is_empty() {
                    " — pending, not yet read by a prober".to_string()
                } else {
                    format!(" — {}", decided.join(", "))
                }
            );
        }
    }
}

/// How long before `now` the entry was saved, whole seconds (`"3m 20s ago"`).
fn saved_ago(ps: &ProberState, now: Millis) -> String {
    if ps.saved_at > now {
        return format!(
            "{} ahead of this clock",
            crate::clock::fmt_duration_ms((ps.saved_at - now) / 1000 * 1000)
        );
    }
    format!(
        "{} ago",
        crate::clock::fmt_duration_ms(now.saturating_sub(ps.saved_at) / 1000 * 1000)
    )
}

/// Why a prober entry is not that of a running prober ([`ProberState::is_fresh`]), if so.
fn staleness(ps: &ProberState, now: Millis) -> Option<String> {
    if ps.is_fresh(now) {
        None
    } else if ps.ahead(now) {
        Some(format!(
            "saved more than {} ahead of this clock; its time is not trusted",
            crate::clock::fmt_duration_ms(MAX_CLOCK_SKEW_MS)
        ))
    } else {
        Some(format!(
            "not saved for {} (more than {}); it may not be running",
            crate::clock::fmt_duration_ms(now.saturating_sub(ps.saved_at) / 1000 * 1000),
            crate::clock::fmt_duration_ms(PROBER_FRESH_MS)
        ))
    }
}

/// Markers `status` lists: the newest, which a drill is about.
const STATUS_MARKERS: usize = 5;

/// The newest drill markers and which probers took them into their evidence.
fn render_markers(s: &mut String, markers: &[Marker]) {
    if markers.is_empty() {
        return;
    }
    let t = crate::clock::rfc3339;
    let skipped = markers.len().saturating_sub(STATUS_MARKERS);
    let _ = writeln!(
        s,
        "drill markers{}:",
        if skipped > 0 {
            format!(" (newest {STATUS_MARKERS} of {})", markers.len())
        } else {
            String::new()
        }
    );
    for m in &markers[skipped..] {
        let taken = if m.taken.is_empty() {
            "not yet recorded by a prober".to_string()
        } else {
            let ids: Vec<&str> = m.taken.keys().map(String::as_str).collect();
            format!("recorded by {}", ids.join(", "))
        };
        let _ = writeln!(
            s,
            "  {} {} by {}: {} — {taken}",
            t(m.at),
            m.kind.as_str(),
            m.by,
            m.label
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::{AttemptRecord, Condition};
    use std::time::Duration;

    /// One process's sync: claim, then save its entry at `now`.
    fn sync_as(doc: &mut ControlDoc, w: &mut InstanceWatch, now: Millis) -> Option<OtherInstance> {
        let found = claim_instance(doc, "p1", &w.instance);
        sync_prober(doc, "p1", &mut BTreeMap::new(), &BTreeSet::new(), now);
        w.after_sync(true, found)
    }

    /// Times at the ends of `i64` (refused by `parse_doc`, but a document built in memory may
    /// still carry them) neither overflow nor keep an entry fresh for ever.
    #[test]
    fn extreme_times_saturate_and_a_future_save_is_stale() {
        let now = 1_700_000_000_000;
        let mut doc = ControlDoc::new("s");
        doc.overrides.insert(
            "primary".into(),
            Override {
                force: Forced::Ready,
                by: "x".into(),
                reason: "y".into(),
                at: Millis::MIN,
                expires_at: Millis::MAX,
            },
        );
        let ahead = |saved_at| ProberState {
            saved_at,
            branches: BTreeMap::new(),
        };
        doc.probers.insert("far".into(), ahead(Millis::MAX));
        doc.probers
            .insert("skewed".into(), ahead(now + MAX_CLOCK_SKEW_MS));
        doc.probers
            .insert("ahead".into(), ahead(now + MAX_CLOCK_SKEW_MS + 1));
        assert!(!doc.probers["far"].is_fresh(now));
        assert!(!doc.probers["ahead"].is_fresh(now));
        assert!(doc.probers["skewed"].is_fresh(now));
        let ov = doc.overrides["primary"].clone();
        assert!(!ov.active(now) && !ov.ahead(now));
        // Set at the start of time: it ended MAX_OVERRIDE_MS after, whatever its expiry says.
        doc.prune(now);
        assert!(!doc.overrides.contains_key("primary"));
        doc.overrides.insert("primary".into(), ov);
        assert_eq!(doc.probers.keys().collect::<Vec<_>>(), ["skewed"]);
        assert_eq!(
            time_out_of_range(&doc),
            Some(("overrides.primary.at".into(), Millis::MIN))
        );
        doc.overrides.get_mut("primary").unwrap().at = 0;
        assert_eq!(
            time_out_of_range(&doc),
            Some(("overrides.primary.expires_at".into(), Millis::MAX))
        );
        doc.overrides.get_mut("primary").unwrap().expires_at = crate::clock::MAX_RFC3339_MS;
        assert_eq!(time_out_of_range(&doc), None);
        doc.probers.insert("far".into(), ahead(Millis::MAX));
        assert_eq!(
            time_out_of_range(&doc),
            Some(("probers.far.saved_at".into(), Millis::MAX))
        );
    }

    #[test]
    fn a_restart_is_not_a_duplicate_but_two_live_instances_are() {
        let mut doc = ControlDoc::new("s");
        let mut old = InstanceWatch::new("aaaa");
        assert_eq!(sync_as(&mut doc, &mut old, 1_000), None);
        assert_eq!(sync_as(&mut doc, &mut old, 2_000), None);
        // The old run stops; the next one finds its entry at its first sync, and its own after.
        let mut new = InstanceWatch::new("bbbb");
        assert_eq!(sync_as(&mut doc, &mut new, 3_000), None);
        assert_eq!(sync_as(&mut doc, &mut new, 4_000), None);
        // A second process with the same prober id starts: it says nothing at its first sync
        // (it cannot tell a restart), the first one notices at its next, and then both do.
        let mut twin = InstanceWatch::new("cccc");
        assert_eq!(sync_as(&mut doc, &mut twin, 4_500), None);
        let seen = sync_as(&mut doc, &mut new, 5_000);
        assert_eq!(
            seen,
            Some(OtherInstance {
                instance: "cccc".into(),
                saved_at: 4_500
            })
        );
        assert_eq!(
            sync_as(&mut doc, &mut twin, 5_500).unwrap().instance,
            "bbbb"
        );
        // A failed sync saved nothing and decides nothing.
        assert_eq!(twin.after_sync(false, None), None);
        // The document keeps one instance per prober entry, and drops it with the entry.
        assert_eq!(doc.instances["p1"], "cccc");
        doc.prune(5_500 + PROBER_RETENTION_MS);
        assert!(doc.instances.is_empty());
    }

    fn policy() -> Policy {
        Policy {
            min_attempts: 2,
            declare_unready: Condition {
                threshold_percent: 95.0,
                for_: Duration::from_secs(1),
                window: Duration::from_secs(10),
            },
            declare_ready: Condition {
                threshold_percent: 99.0,
                for_: Duration::from_secs(2),
                window: Duration::from_secs(10),
            },
            approval_required: true,
            initial: ReadinessState::Unready,
            definitive: None,
            damping: None,
        }
    }

    fn pending_at(t: Millis) -> Readiness {
        let mut r = Readiness::new(policy());
        let mut now = t - 5000;
        while r.state() != ReadinessState::PendingApproval {
            r.record(AttemptRecord {
                finished_at: now,
                success: true,
                class: None,
            });
            now += 500;
            assert!(now < t + 60_000);
        }
        r
    }

    fn approval(at: Millis, expires_at: Millis) -> Approval {
        Approval {
            id: "a".into(),
            branch: "primary".into(),
            by: "op".into(),
            reason: "checked".into(),
            at,
            expires_at,
            decisions: BTreeMap::new(),
        }
    }

    #[test]
    fn approval_rules() {
        let r = pending_at(100_000);
        let since = r.since().unwrap();
        assert!(decide(&approval(since + 10, since + 60_000), &r, since + 20).applied);
        let d = decide(&approval(since + 10, since + 15), &r, since + 20);
        assert!(!d.applied && d.detail.contains("expired"));
        let d = decide(&approval(since - 10, since + 60_000), &r, since + 20);
        assert!(!d.applied && d.detail.contains("pre-authorise"));
        let unready = Readiness::new(policy());
        let d = decide(&approval(0, 60_000), &unready, 10);
        assert!(!d.applied && d.detail.contains("unready"));
        // Pending, but failing again: no failback on stale evidence.
        let mut failing = pending_at(100_000);
        let t = failing.since().unwrap();
        for i in 1..=4 {
            failing.record(AttemptRecord {
                finished_at: t + i * 100,
                success: false,
                class: None,
            });
        }
        let d = decide(&approval(t + 10, t + 60_000), &failing, t + 450);
        assert!(
            !d.applied && d.detail.contains("does not hold now"),
            "{d:?}"
        );
        // Pending, but the evidence is too old (a prober that was stopped).
        let d = decide(&approval(since + 10, since + 600_000), &r, since + 300_000);
        assert!(
            !d.applied && d.detail.contains("fewer than min_attempts"),
            "{d:?}"
        );
    }

    #[test]
    fn a_lost_decision_is_taken_back_once_and_only_while_recent() {
        let r = pending_at(100_000);
        let since = r.since().unwrap();
        let now = since + 20;
        let mut lost = approval(since + 10, since + 60_000);
        lost.decisions.insert(
            "p1".into(),
            Decision {
                at: now - LOST_DECISION_MS + 1,
                applied: true,
                detail: "applied".into(),
            },
        );
        let mut old = lost.clone();
        old.id = "old".into();
        old.decisions.get_mut("p1").unwrap().at = now - LOST_DECISION_MS;
        let mut doc = ControlDoc::new("orders-db");
        doc.approvals = vec![old, lost];
        let mut rs: BTreeMap<String, Readiness> = [("primary".to_string(), r)].into();
        let decided = sync_prober(&mut doc, "p1", &mut rs, &BTreeSet::new(), now);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].0.id, "a");
        assert_eq!(rs["primary"].state(), ReadinessState::Ready);
        assert_eq!(
            doc.probers["p1"].branches["primary"].state,
            ReadinessState::Ready
        );
        // Once recorded, it is not news any more.
        let recorded: BTreeSet<String> = ["a".to_string()].into();
        let mut rs2: BTreeMap<String, Readiness> =
            [("primary".to_string(), pending_at(100_000))].into();
        assert!(sync_prober(&mut doc, "p1", &mut rs2, &recorded, now).is_empty());
        assert_eq!(rs2["primary"].state(), ReadinessState::PendingApproval);
    }

    #[test]
    fn a_prober_decides_each_approval_once() {
        let r = pending_at(100_000);
        let since = r.since().unwrap();
        let mut doc = ControlDoc::new("orders-db");
        doc.approvals.push(approval(since + 10, since + 60_000));
        let mut rs: BTreeMap<String, Readiness> = [("primary".to_string(), r)].into();
        let decided = sync_prober(&mut doc, "p1", &mut rs, &BTreeSet::new(), since + 20);
        assert!(decided[0].1.applied);
        assert!(doc.approvals[0].decisions["p1"].applied);
        let recorded: BTreeSet<String> = ["a".to_string()].into();
        assert!(sync_prober(&mut doc, "p1", &mut rs, &recorded, since + 30).is_empty());
        // Another prober decides it for itself.
        let mut other: BTreeMap<String, Readiness> = BTreeMap::new();
        other.insert("primary".into(), Readiness::new(policy()));
        let d = sync_prober(&mut doc, "p2", &mut other, &BTreeSet::new(), since + 40);
        assert!(!d[0].1.applied);
        assert_eq!(doc.approvals[0].decisions.len(), 2);
    }

    fn marker(id: &str, at: Millis) -> Marker {
        Marker {
            id: id.into(),
            kind: MarkerKind::Fault,
            label: "blocked writer path".into(),
            by: "op".into(),
            at,
            taken: BTreeMap::new(),
        }
    }

    /// One sync of prober `me`: save, take markers; the caller records what it got.
    fn sync_markers(
        doc: &mut ControlDoc,
        me: &str,
        recorded: &mut BTreeSet<String>,
        now: Millis,
    ) -> Vec<String> {
        sync_prober(doc, me, &mut BTreeMap::new(), recorded, now);
        let got: Vec<String> = take_markers(doc, me, recorded, now)
            .into_iter()
            .map(|m| m.id)
            .collect();
        recorded.extend(got.iter().cloned());
        got
    }

    #[test]
    fn each_prober_takes_each_marker_once() {
        let t = 1_700_000_000_000;
        let mut doc = ControlDoc::new("orders-db");
        doc.markers.push(marker("m1", t));
        let (mut p1, mut p2) = (BTreeSet::new(), BTreeSet::new());
        assert_eq!(sync_markers(&mut doc, "p1", &mut p1, t + 10), ["m1"]);
        assert!(sync_markers(&mut doc, "p1", &mut p1, t + 20).is_empty());
        doc.markers.push(marker("m2", t + 25));
        assert_eq!(sync_markers(&mut doc, "p2", &mut p2, t + 30), ["m1", "m2"]);
        assert_eq!(sync_markers(&mut doc, "p1", &mut p1, t + 40), ["m2"]);
        for _ in 0..3 {
            assert!(sync_markers(&mut doc, "p1", &mut p1, t + 50).is_empty());
            assert!(sync_markers(&mut doc, "p2", &mut p2, t + 50).is_empty());
        }
        assert_eq!(
            doc.markers[0].taken,
            [("p1".into(), t + 10), ("p2".into(), t + 30)].into()
        );
        // A restart of p1 (nothing recorded in this run) does not take them again once the
        // lost-answer window has passed; within it, a taken marker it never recorded is news.
        let later = t + 40 + LOST_DECISION_MS;
        assert!(sync_markers(&mut doc, "p1", &mut BTreeSet::new(), later).is_empty());
        let mut lost = BTreeSet::new();
        assert_eq!(
            sync_markers(&mut doc, "p2", &mut lost, t + 60),
            ["m1", "m2"]
        );
        assert!(sync_markers(&mut doc, "p2", &mut lost, t + 70).is_empty());
        // A marker older than the news window is history to a prober that never took it.
        let old = t + 25 + MARKER_NEWS_MS + 1;
        assert_eq!(
            sync_markers(&mut doc, "p3", &mut BTreeSet::new(), old),
            Vec::<String>::new()
        );
        assert!(!doc.markers[1].taken.contains_key("p3"));
    }

    #[test]
    fn markers_are_pruned_after_seven_days_and_beyond_the_cap() {
        let t = 1_700_000_000_000;
        let mut doc = ControlDoc::new("orders-db");
        doc.markers.push(marker("old", t));
        doc.markers.push(marker("new", t + 1));
        doc.prune(t + MARKER_RETENTION_MS);
        assert_eq!(
            doc.markers
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>(),
            ["new"]
        );
        for i in 0..MAX_MARKERS {
            doc.markers.push(marker(&format!("m{i}"), t + 2));
        }
        doc.prune(t + 3);
        assert_eq!(doc.markers.len(), MAX_MARKERS);
        assert_eq!(doc.markers[0].id, "m0");
        // An old document without markers loads, and an empty list is not written.
        let text = serde_json::to_string(&ControlDoc::new("s")).unwrap();
        assert!(!text.contains("markers"), "{text}");
        let back: ControlDoc = serde_json::from_str(&text).unwrap();
        assert!(back.markers.is_empty());
        doc.markers[0].at = -1;
        assert_eq!(time_out_of_range(&doc), Some(("markers[0].at".into(), -1)));
    }

    #[test]
    fn status_without_attempts_says_so_plainly() {
        let mut doc = ControlDoc::new("orders-db");
        doc.probers.insert(
            "az-a".into(),
            ProberState {
                saved_at: 0,
                branches: [("primary".to_string(), Readiness::new(policy()).snapshot())].into(),
            },
        );
        let s = render_status(&doc, &policy(), &["primary".into()], 1000);
        assert!(
            s.contains("), no attempts in the 10s before the save\n"),
            "{s}"
        );
        let s = render_status(
            &doc_with(pending_at(100_000)),
            &policy(),
            &["primary".into()],
            100_500,
        );
        assert!(s.contains("success rate 100.0% of "), "{s}");
        assert!(
            s.contains(" attempts over the 10s before the save\n"),
            "{s}"
        );
        // Read a minute after a save (a running prober rewrites a mere refresh only every few
        // syncs): the attempts before the save still count.
        let s = render_status(
            &doc_with(pending_at(100_000)),
            &policy(),
            &["primary".into()],
            160_500,
        );
        assert!(s.contains("success rate 100.0% of "), "{s}");
    }

    fn doc_with(r: Readiness) -> ControlDoc {
        let mut doc = ControlDoc::new("orders-db");
        doc.probers.insert(
            "az-a".into(),
            ProberState {
                saved_at: 100_000,
                branches: [("primary".to_string(), r.snapshot())].into(),
            },
        );
        doc
    }

    #[test]
    fn status_lists_the_newest_markers_and_who_recorded_them() {
        let mut doc = doc_with(pending_at(100_000));
        for i in 0..7 {
            doc.markers.push(Marker {
                id: format!("m{i}"),
                kind: if i == 6 {
                    MarkerKind::Fault
                } else {
                    MarkerKind::Note
                },
                label: format!("step {i}"),
                by: "carol".into(),
                at: 100_000 + i,
                taken: if i == 6 {
                    BTreeMap::new()
                } else {
                    [("az-a".to_string(), 100_100)].into()
                },
            });
        }
        let s = render_status(&doc, &policy(), &["primary".into()], 100_500);
        assert!(s.contains("drill markers (newest 5 of 7):\n"), "{s}");
        assert!(!s.contains("step 1"), "{s}");
        assert!(
            s.contains("note by carol: step 2 — recorded by az-a\n"),
            "{s}"
        );
        assert!(
            s.contains("fault by carol: step 6 — not yet recorded by a prober\n"),
            "{s}"
        );
        let none = render_status(&doc_with(pending_at(100_000)), &policy(), &[], 100_500);
        assert!(!none.contains("drill markers"), "{none}");
    }

    fn forced(at: Millis, expires_at: Millis) -> Override {
        Override {
            force: Forced::Ready,
            by: "op".into(),
            reason: "maintenance".into(),
            at,
            expires_at,
        }
    }

    /// The note a sync adds to the reason of an override it bounds keeps the reason within
    /// [`MAX_REASON_CHARS`] (a full-length reason is cut before it), so the next read keeps it.
    #[test]
    fn the_bounding_note_keeps_a_full_reason_within_its_bound() {
        let now = 1_700_000_000_000;
        let mut long = forced(now, now + 365 * 86_400_000);
        long.reason = "r".repeat(MAX_REASON_CHARS);
        let mut doc = ControlDoc::new("s");
        doc.overrides.insert("primary".into(), long);
        sync_prober(&mut doc, "p1", &mut BTreeMap::new(), &BTreeSet::new(), now);
        let reason = &doc.overrides["primary"].reason;
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS, "{reason}");
        assert!(reason.contains("r… [expiry ") && reason.ends_with("after it was set]"));
    }

    /// An override set a year ahead of this prober's clock, for ten years (a host whose clock
    /// ran ahead): not trusted, as a prober entry saved in the future is not, and dropped at the
    /// prober's sync. One set now for ten years is in force for the CLI's maximum only, and the
    /// sync writes that bound into the document and its reason.
    #[test]
    fn an_override_from_the_future_or_beyond_the_maximum_is_not_taken_as_written() {
        let now = 1_700_000_000_000;
        let year = 365 * 86_400_000;
        let future = forced(now + year, now + 10 * year);
        assert!(!future.active(now));
        assert_eq!(effective_value(Some(0.0), Some(&future), now), Some(0.0));
        assert!(forced(now + MAX_CLOCK_SKEW_MS, now + 3_600_000).active(now));
        assert!(!forced(now + MAX_CLOCK_SKEW_MS + 1, now + 3_600_000).active(now));
        let long = forced(now, now + 10 * year);
        assert!(long.active(now + MAX_OVERRIDE_MS - 1));
        assert!(!long.active(now + MAX_OVERRIDE_MS));
        assert_eq!(
            effective_value(Some(0.0), Some(&long), now + MAX_OVERRIDE_MS),
            Some(0.0)
        );
        let mut doc = ControlDoc::new("s");
        doc.overrides.insert("primary".into(), long);
        doc.overrides.insert("secondary".into(), future);
        doc.overrides
            .insert("tertiary".into(), forced(now - 1000, now + 3_600_000));
        sync_prober(&mut doc, "p1", &mut BTreeMap::new(), &BTreeSet::new(), now);
        let bounded = &doc.overrides["primary"];
        assert_eq!(bounded.expires_at, now + MAX_OVERRIDE_MS);
        assert!(
            bounded.reason.starts_with("maintenance [expiry ")
                && bounded.reason.contains("bounded"),
            "{}",
            bounded.reason
        );
        assert!(!doc.overrides.contains_key("secondary"));
        assert_eq!(
            doc.overrides["tertiary"],
            forced(now - 1000, now + 3_600_000)
        );
        // A second sync changes nothing more.
        let before = doc.overrides.clone();
        sync_prober(
            &mut doc,
            "p1",
            &mut BTreeMap::new(),
            &BTreeSet::new(),
            now + 1,
        );
        assert_eq!(doc.overrides, before);
    }

    /// A prober last saved minutes ago is shown with its age and marked stale, not as if it
    /// were running; an applied approval shows when it was given and when each prober applied it.
    #[test]
    fn status_marks_a_stale_prober_and_says_when_an_approval_was_applied() {
        let r = pending_at(100_000);
        let since = r.since().unwrap();
        let mut doc = doc_with(r);
        let mut a = approval(since + 10, since + 600_000);
        a.decisions.insert(
            "az-a".into(),
            Decision {
                at: since + 2_000,
                applied: true,
                detail: "applied".into(),
            },
        );
        doc.approvals.push(a);
        let t = crate::clock::rfc3339;
        let fresh = render_status(&doc, &policy(), &["primary".into()], 100_500);
        assert!(!fresh.contains("STALE"), "{fresh}");
        assert!(
            fresh.contains(&format!("(saved {}, 0s ago)", t(100_000))),
            "{fresh}"
        );
        assert!(
            fresh.contains(&format!("given at {}", t(since + 10)))
                && fresh.contains(&format!("az-a: applied at {}", t(since + 2_000))),
            "{fresh}"
        );
        let later = 100_000 + 20 * 60_000;
        let stale = render_status(&doc, &policy(), &["primary".into()], later);
        assert!(
            stale.contains("STALE: not saved for 20m (more than 15m); it may not be running"),
            "{stale}"
        );
    }

    /// Over budget, decided approvals go first (oldest first), then the attempts of every
    /// snapshot down to the same newest few; an undecided approval stays.
    #[test]
    fn fit_drops_history_before_attempts() {
        let mut doc = doc_with(pending_at(100_000));
        for i in 0..3 {
            let mut a = approval(i, i + 1);
            a.id = format!("decided-{i}");
            a.reason = "x".repeat(10_000);
            a.decisions.insert(
                "az-a".into(),
                Decision {
                    at: i,
                    applied: false,
                    detail: "expired".into(),
                },
            );
            doc.approvals.push(a);
        }
        let mut open = approval(5, 6);
        open.id = "open".into();
        open.reason = "y".repeat(10_000);
        doc.approvals.push(open);
        let attempts = doc.probers["az-a"].branches["primary"].attempts.clone();
        let full = json_len(&doc);
        let after = doc.clone().fit(full - 15_000);
        assert!(after <= full - 15_000, "{after}");
        let mut fitted = doc.clone();
        fitted.fit(full - 15_000);
        let ids: Vec<&str> = fitted.approvals.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["decided-2", "open"]);
        assert_eq!(
            fitted.probers["az-a"].branches["primary"].attempts,
            attempts
        );
        // Tighter: every decided approval goes, then attempts, the newest kept.
        let decided: usize = doc.approvals[..3].iter().map(|a| json_len(a) + 1).sum();
        let budget = full - decided - 60;
        let size = doc.fit(budget);
        assert!(size <= budget, "{size} > {budget}");
        assert_eq!(doc.approvals.len(), 1);
        let kept = &doc.probers["az-a"].branches["primary"].attempts;
        assert!(
            !kept.is_empty() && kept.len() < attempts.len(),
            "{}",
            kept.len()
        );
        assert_eq!(kept.last(), attempts.last());
    }

    #[test]
    fn overrides_win_until_they_expire() {
        let o = Override {
            force: Forced::Unready,
            by: "op".into(),
            reason: "maintenance".into(),
            at: 0,
            expires_at: 1000,
        };
        assert_eq!(effective_value(Some(1.0), Some(&o), 999), Some(0.0));
        assert_eq!(effective_value(Some(1.0), Some(&o), 1000), Some(1.0));
        assert_eq!(effective_value(None, None, 0), None);
    }

    #[test]
    fn status_says_what_it_waits_for() {
        let r = pending_at(100_000);
        let mut doc = ControlDoc::new("orders-db");
        doc.probers.insert(
            "az-a".into(),
            ProberState {
                saved_at: 100_000,
                branches: [("primary".to_string(), r.snapshot())].into(),
            },
        );
        let s = render_status(&doc, &policy(), &["primary".into()], 100_500);
        assert!(s.contains("prober az-a: pending_approval"), "{s}");
        assert!(
            s.contains("waiting for: operator approval (readyprobe approve --branch primary"),
            "{s}"
        );
    }
}
