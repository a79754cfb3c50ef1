//! Failovers and failbacks measured per phase, from a service's lanes and the records behind
//! them. Pure. A phase that cannot be derived gets no time and a note naming the record that
//! is missing: the table never guesses.
//!
//! Failover, per `fault` marker (or, without markers, per ready → unready transition): fault
//! marker → first failed attempt → readiness 0 published → alarm in ALARM → stable name
//! answers with the other branch → cache expiry → reconnect → steady state. Failback, per
//! `restore` marker (or per transition out of unready): restore → first successful attempt →
//! pending_approval → approval given (by the operator) → approved (applied by a prober) →
//! readiness 1 published → alarm OK → stable name selects the branch again → cache expiry →
//! reconnect → steady state. Episodes start from every prober's transitions.

use super::model::{
    AttemptMark, BranchLane, Episode, EpisodeKind, Marker, Phase, Round, ServiceDrill,
};
use crate::clock::rfc3339;
use crate::readiness::{Millis, ReadinessState};
use crate::record::PublishOutcome;

/// A `transition` record.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionFact {
    /// When, ms.
    pub at: Millis,
    /// Which prober's readiness changed.
    pub prober: String,
    /// Branch name.
    pub branch: String,
    /// State left.
    pub from: ReadinessState,
    /// State entered.
    pub to: ReadinessState,
    /// The batch that published it (evidence before batch ids: `None`).
    pub batch: Option<u64>,
}

/// A `publish` record with reason `transition`.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishFact {
    /// When, ms.
    pub at: Millis,
    /// The prober that published.
    pub prober: String,
    /// What became of the batch.
    pub outcome: PublishOutcome,
    /// The sink's name.
    pub sink: String,
    /// The batch's id (evidence before batch ids: `None`).
    pub batch: Option<u64>,
}

/// An `approval` record.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalFact {
    /// When the prober decided it, ms.
    pub at: Millis,
    /// The prober that decided it.
    pub prober: String,
    /// Branch approved.
    pub branch: String,
    /// Who approved.
    pub by: String,
    /// The operator's reason.
    pub reason: String,
    /// When the operator gave it (the `approval` record's `given_at`), ms.
    pub given_at: Millis,
    /// Applied (true) or rejected.
    pub applied: bool,
}

/// The records a phase needs beyond the lanes, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Every prober's transitions.
    pub transitions: Vec<TransitionFact>,
    /// Publishes with reason `transition`.
    pub publishes: Vec<PublishFact>,
    /// Approvals decided.
    pub approvals: Vec<ApprovalFact>,
    /// Whether the policy needs an operator's approval to fail back (`None`: not recorded).
    pub approval_required: Option<bool>,
}

/// The note of a stable-name phase when the evidence has no stable-name round at all.
const NO_STABLE: &str = "missing: no stable_name records (enable [stable_name_probe])";

/// What starts an episode.
#[derive(Debug, Clone)]
struct Trigger {
    kind: EpisodeKind,
    at: Millis,
    marker: Option<Marker>,
    /// The branch, when the trigger names it (a transition).
    branch: Option<String>,
    label: String,
}

/// Every failover and failback of service `s`, in time order. Lanes, rounds and `f`'s lists
/// are in time order (as [`super::merge`] builds them).
pub fn episodes(s: &ServiceDrill, f: &Facts) -> Vec<Episode> {
    let triggers = triggers(s, f);
    let mut out: Vec<Episode> = Vec::new();
    let e2e = s
        .stable_name
        .as_ref()
        .is_some_and(|l| l.rounds.iter().any(|r| r.end_to_end.is_some()));
    // The branch of the last failover with one, for a restore that names none.
    let mut last: Option<String> = None;
    for (k, t) in triggers.iter().enumerate() {
        let end = triggers.get(k + 1).map_or(Millis::MAX, |n| n.at);
        let ctx = Ctx {
            s,
            f,
            before: k
                .checked_sub(1)
                .and_then(|i| triggers.get(i))
                .map_or(Millis::MIN, |p| p.at),
            from: t.at,
            end,
            e2e,
        };
        let ep = match t.kind {
            EpisodeKind::Failover => {
                let branch = t.branch.clone().or_else(|| faulted_branch(s, t.at, end));
                failover(&ctx, t, branch)
            }
            EpisodeKind::Failback => {
                let branch = t
                    .branch
                    .clone()
                    .or_else(|| last.clone())
                    .or_else(|| unready_branch(s, t.at));
                failback(&ctx, t, branch)
            }
        };
        if ep.kind == EpisodeKind::Failover && !ep.branch.is_empty() {
            last = Some(ep.branch.clone());
        }
        out.push(ep);
    }
    out
}

/// Fault and restore markers, and every prober's transitions out of and into ready that no
/// marker explains. The same change of one branch seen by several probers is one episode: a
/// transition of the kind the branch's last episode already has (from another prober) joins it.
fn triggers(s: &ServiceDrill, f: &Facts) -> Vec<Trigger> {
    let marked: Vec<Trigger> = s
        .markers
        .iter()
        .filter_map(|m| {
            let kind = match m.kind.as_str() {
                "fault" => EpisodeKind::Failover,
                "restore" => EpisodeKind::Failback,
                _ => return None,
            };
            Some(Trigger {
                kind,
                at: m.at,
                marker: Some(m.clone()),
                branch: None,
                label: format!("{} marker: {} (by {})", m.kind, m.label, m.by),
            })
        })
        .collect();
    // A transition is explained by the newest fault or restore marker at or before it when that
    // marker is of its kind; the others start episodes of their own, so none goes unreported.
    // Markers are in time order: found by bisection.
    let explained = |kind: EpisodeKind, at: Millis| {
        let n = marked.partition_point(|m| m.at <= at);
        n.checked_sub(1)
            .and_then(|i| marked.get(i))
            .is_some_and(|m| m.kind == kind)
    };
    // Per branch: the kind of its last transition, and the prober that made it.
    let mut last: std::collections::HashMap<&str, (EpisodeKind, &str)> =
        std::collections::HashMap::new();
    let mut all: Vec<Trigger> = Vec::new();
    for t in &f.transitions {
        let Some(kind) = episode_kind(t) else {
            continue;
        };
        let before = last.insert(&t.branch, (kind, &t.prober));
        let joins = before.is_some_and(|(k, p)| k == kind && p != t.prober);
        if joins || explained(kind, t.at) {
            continue;
        }
        let at = streak_start(s, &t.branch, t.at, kind == EpisodeKind::Failover);
        all.push(Trigger {
            kind,
            at,
            marker: None,
            branch: Some(t.branch.clone()),
            label: format!(
                "no marker: {} {} → {} at {} (prober {})",
                t.branch,
                t.from.as_str(),
                t.to.as_str(),
                rfc3339(t.at),
                t.prober
            ),
        });
    }
    all.extend(marked);
    all.sort_by_key(|t| t.at);
    all
}

/// The kind of episode a transition starts: out of ready a failover, out of unready a failback.
fn episode_kind(t: &TransitionFact) -> Option<EpisodeKind> {
    use ReadinessState::{PendingApproval, Ready, Unready};
    match (t.from, t.to) {
        (Ready, Unready) => Some(EpisodeKind::Failover),
        (Unready, Ready | PendingApproval) => Some(EpisodeKind::Failback),
        _ => None,
    }
}

/// The first attempt of the streak that ends in a transition at `at`: the first failure after
/// the last success before it (or the first success after the last failure).
fn streak_start(s: &ServiceDrill, branch: &str, at: Millis, failing: bool) -> Millis {
    let Some(lane) = s.branches.iter().find(|b| b.name == branch) else {
        return at;
    };
    let n = lane.attempts.partition_point(|a| a.at <= at);
    let before = lane.attempts.get(..n).unwrap_or(&[]);
    let breaks = before
        .iter()
        .rposition(|a| a.class.is_some() != failing)
        .map_or(0, |i| i + 1);
    before.get(breaks).map_or(at, |a| a.at)
}

/// The attempts of `lane` in `[from, end)`, found by bisection (a lane is in time order).
fn attempts_in(lane: &BranchLane, from: Millis, end: Millis) -> &[AttemptMark] {
    let a = &lane.attempts;
    let lo = a.partition_point(|x| x.at < from);
    let hi = a.partition_point(|x| x.at < end).max(lo);
    a.get(lo..hi).unwrap_or(&[])
}

/// The state of `branch` at `at` in its lane.
fn state_at(s: &ServiceDrill, branch: &str, at: Millis) -> Option<ReadinessState> {
    let lane = s.branches.iter().find(|b| b.name == branch)?;
    let n = lane.states.partition_point(|b| b.span.from <= at);
    lane.states.get(n.checked_sub(1)?).map(|b| b.state)
}

/// The first failure after `from` (before `end`) of a branch for which `keep` holds.
fn first_failure(
    s: &ServiceDrill,
    from: Millis,
    end: Millis,
    keep: impl Fn(&str) -> bool,
) -> Option<&str> {
    s.branches
        .iter()
        .filter(|b| keep(&b.name))
        .filter_map(|b| {
            let at = attempts_in(b, from, end)
                .iter()
                .find(|a| a.class.is_some())?
                .at;
            Some((at, b.name.as_str()))
        })
        .min()
        .map(|(_, n)| n)
}

/// The branch a fault at `at` hit: the first branch that was ready then and fails after it;
/// failing that, the first branch that fails after it.
fn faulted_branch(s: &ServiceDrill, at: Millis, end: Millis) -> Option<String> {
    let ready = |b: &str| state_at(s, b, at) == Some(ReadinessState::Ready);
    first_failure(s, at, end, ready)
        .or_else(|| first_failure(s, at, end, |_| true))
        .map(str::to_string)
}

/// A branch not ready at `at` (for a restore with no failover before it).
fn unready_branch(s: &ServiceDrill, at: Millis) -> Option<String> {
    s.branches
        .iter()
        .find(|b| {
            matches!(
                state_at(s, &b.name, at),
                Some(ReadinessState::Unready | ReadinessState::PendingApproval)
            )
        })
        .map(|b| b.name.clone())
}

/// One episode's inputs: the service, the records, and its time range `[from, end)`; `before`
/// is the previous episode's start, which looking back for a record stops at.
struct Ctx<'a> {
    s: &'a ServiceDrill,
    f: &'a Facts,
    before: Millis,
    from: Millis,
    end: Millis,
    /// Whether any stable-name round made the end-to-end attempt.
    e2e: bool,
}

/// The part of `items` (in time order by `at`) from the first at or after `from`: found by
/// bisection, so each episode looks only at its own records and the report stays n log n.
fn since<T>(items: &[T], from: Millis, at: impl Fn(&T) -> Millis) -> &[T] {
    let lo = items.partition_point(|x| at(x) < from);
    items.get(lo..).unwrap_or(&[])
}

/// What a phase finds: its time and a note, or the note saying what is missing.
type Found = Result<(Millis, Option<String>), String>;

/// Phases added one after the other, each timed since the start and since the last timed one.
struct Table {
    start: Millis,
    last: Option<Millis>,
    phases: Vec<Phase>,
}

impl Table {
    fn new(start: Millis) -> Self {
        Table {
            start,
            last: None,
            phases: Vec::new(),
        }
    }

    fn add(&mut self, name: &str, found: Found) -> Option<Millis> {
        let phase = match found {
            Ok((at, note)) => {
                let took = self.last.map(|l| at - l);
                self.last = Some(at);
                Phase {
                    name: name.into(),
                    at: Some(at),
                    since_start_ms: Some(at - self.start),
                    took_ms: took,
                    note,
                }
            }
            Err(note) => Phase {
                name: name.into(),
                at: None,
                since_start_ms: None,
                took_ms: None,
                note: Some(note),
            },
        };
        let at = phase.at;
        self.phases.push(phase);
        at
    }
}

impl Ctx<'_> {
    fn rounds(&self) -> &[Round] {
        self.s.stable_name.as_ref().map_or(&[], |l| &l.rounds)
    }

    /// The rounds in range.
    fn rounds_in(&self) -> &[Round] {
        let r = since(self.rounds(), self.from, |r| r.at);
        &r[..r.partition_point(|r| r.at < self.end)]
    }

    /// The first attempt of `branch` in range that failed (`failed`) or succeeded.
    fn first_attempt(&self, branch: &str, failed: bool) -> Found {
        let lane = self.s.branches.iter().find(|b| b.name == branch);
        let a = lane.and_then(|l| {
            attempts_in(l, self.from, self.end)
                .iter()
                .find(|a| a.class.is_some() == failed)
        });
        let what = if failed { "failed" } else { "successful" };
        match a {
            Some(a) => Ok((a.at, a.class.clone())),
            None => Err(format!(
                "missing: no {what} attempt record of {branch} in this episode"
            )),
        }
    }

    /// The first transition of `branch` to `to` in range (any prober).
    fn transition(&self, branch: &str, to: ReadinessState) -> Option<&TransitionFact> {
        since(&self.f.transitions, self.from, |t| t.at)
            .iter()
            .take_while(|t| t.at < self.end)
            .find(|t| t.branch == branch && t.to == to)
    }

    /// When the value of `to` was published: the first `publish` record with reason
    /// `transition` and outcome `sent` of the prober that made the transition, at or after it,
    /// of the batch the transition names when both records carry a batch id.
    fn published(&self, branch: &str, to: ReadinessState) -> Found {
        let Some(t) = self.transition(branch, to) else {
            return Err(format!(
                "missing: no transition record of {branch} to {} in this episode",
                to.as_str()
            ));
        };
        let sent = since(&self.f.publishes, t.at, |p| p.at).iter().find(|p| {
            let same = match (t.batch, p.batch) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            same && p.prober == t.prober && p.at >= t.at && p.outcome == PublishOutcome::Sent
        });
        match sent {
            Some(p) => Ok((
                p.at,
                Some(format!(
                    "{} at {} (prober {}); sent by sink {}",
                    to.as_str(),
                    rfc3339(t.at),
                    t.prober,
                    p.sink
                )),
            )),
            None => Err(format!(
                "missing: {branch} became {} at {} (prober {}) but no publish record with reason transition and outcome sent follows",
                to.as_str(),
                rfc3339(t.at),
                t.prober
            )),
        }
    }

    /// When the alarm of `branch` entered `state`.
    fn alarm(&self, branch: &str, state: &str) -> Found {
        if self.s.alarms.is_empty() {
            return Err(
                "missing: no alarm lane (without --alarms; with it, the problems say why none was found)"
                    .into(),
            );
        }
        let Some(lane) = self.s.alarms.iter().find(|a| a.branch == branch) else {
            return Err(format!("missing: no alarm lane for {branch}"));
        };
        since(&lane.states, self.from, |b| b.span.from)
            .iter()
            .take_while(|b| b.span.from < self.end)
            .find(|b| b.state == state)
            .map(|b| (b.span.from, Some(lane.name.clone())))
            .ok_or_else(|| {
                format!(
                    "missing: alarm {} did not enter {state} in this episode",
                    lane.name
                )
            })
    }

    /// The first stable-name round in range whose selection `want` accepts.
    fn selection(&self, want: impl Fn(&str) -> bool, what: &str) -> Result<&Round, String> {
        if self.s.stable_name.is_none() {
            return Err(NO_STABLE.into());
        }
        self.rounds_in()
            .iter()
            .find(|r| r.selected.as_deref().is_some_and(&want))
            .ok_or_else(|| {
                format!("missing: no stable_name round selecting {what} in this episode")
            })
    }

    /// The last round before `switch` that still selected a branch `old` accepts, plus its TTL:
    /// the latest a resolver cache can still hand out that answer.
    fn cache_expiry(
        &self,
        switch: Option<&Round>,
        old: impl Fn(&str) -> bool,
        name: &str,
    ) -> Found {
        let Some(switch) = switch else {
            return Err("missing: needs the DNS selection above".into());
        };
        let back = since(self.rounds(), self.before, |r| r.at);
        let back = &back[..back.partition_point(|r| r.at < switch.at)];
        let last = back
            .iter()
            .rfind(|r| r.selected.as_deref().is_some_and(&old));
        let Some(r) = last else {
            return Err(format!(
                "missing: no stable_name round naming {name} before the switch"
            ));
        };
        let Some(ttl) = r.ttl else {
            return Err(format!("missing: the last round naming {name} has no TTL"));
        };
        Ok((
            r.at + i64::from(ttl) * 1000,
            Some(format!(
                "last answer naming {name} at {} + its TTL {ttl} s: a cache may serve it until then (bounded by the TTL seen)",
                rfc3339(r.at)
            )),
        ))
    }

    /// The first successful end-to-end attempt through the stable name at or after `switch`,
    /// while it selects a branch `new` accepts.
    fn reconnect(&self, switch: Option<&Round>, new: impl Fn(&str) -> bool) -> Found {
        if self.s.stable_name.is_none() {
            return Err(NO_STABLE.into());
        }
        if !self.e2e {
            return Err("missing: no end_to_end in the stable_name records".into());
        }
        let Some(switch) = switch else {
            return Err("missing: needs the DNS selection above".into());
        };
        since(self.rounds_in(), switch.at, |r| r.at)
            .iter()
            .find(|r| r.end_to_end == Some(None) && r.selected.as_deref().is_some_and(&new))
            .map(|r| (r.at, None))
            .ok_or_else(|| {
                "missing: no successful end_to_end attempt after the switch in this episode".into()
            })
    }

    /// The first round from which, to the episode's end, the stable name keeps selecting the
    /// same branch (one `want` accepts) and no end-to-end attempt fails.
    fn steady(&self, want: impl Fn(&str) -> bool) -> Found {
        if self.s.stable_name.is_none() {
            return Err(NO_STABLE.into());
        }
        let rounds: Vec<&Round> = self.rounds_in().iter().collect();
        let Some(last) = rounds.last() else {
            return Err("missing: no stable_name rounds in this episode".into());
        };
        let sel = last.selected.clone();
        let Some(name) = sel.as_deref().filter(|n| want(n)) else {
            return Err(format!(
                "not reached: the last round selects {}",
                sel.as_deref().unwrap_or("no branch")
            ));
        };
        let ok = |r: &&Round| r.selected == sel && !matches!(r.end_to_end, Some(Some(_)));
        let from = rounds.iter().rposition(|r| !ok(r)).map_or(0, |i| i + 1);
        let e2e = rounds[from..].iter().any(|r| r.end_to_end.is_some());
        let note = if e2e {
            format!("selects {name} from here on; every end-to-end attempt succeeds")
        } else {
            format!("selects {name} from here on (selection only: no end_to_end records)")
        };
        rounds
            .get(from)
            .map(|r| (r.at, Some(note)))
            .ok_or_else(|| "missing: no steady round".into())
    }
}

/// The first phase: the marker, or what stands in for it.
fn start_phase(t: &Trigger, name: &str) -> Found {
    match &t.marker {
        Some(m) => Ok((m.at, Some(format!("{} (by {})", m.label, m.by)))),
        None => Err(format!(
            "missing: no {name} marker: measured from {}",
            t.label
        )),
    }
}

fn episode(kind: EpisodeKind, t: &Trigger, branch: Option<String>, phases: Vec<Phase>) -> Episode {
    Episode {
        kind,
        branch: branch.unwrap_or_default(),
        trigger: t.label.clone(),
        phases,
        pending_approval_ms: None,
        approved_by: None,
    }
}

fn failover(c: &Ctx<'_>, t: &Trigger, branch: Option<String>) -> Episode {
    let mut tab = Table::new(t.at);
    if t.marker.is_none() {
        tab.last = Some(t.at);
    }
    tab.add("fault marker", start_phase(t, "fault"));
    let Some(b) = branch.as_deref() else {
        let why = "missing: no branch fails after the marker (no failed attempt record)";
        tab.add("first failed attempt", Err(why.into()));
        return episode(EpisodeKind::Failover, t, branch, tab.phases);
    };
    let other = |n: &str| n != b;
    tab.add("first failed attempt", c.first_attempt(b, true));
    tab.add(
        "readiness 0 published",
        c.published(b, ReadinessState::Unready),
    );
    tab.add("alarm in ALARM", c.alarm(b, "ALARM"));
    let switch = c.selection(other, "another branch");
    let found = switch
        .as_ref()
        .map(|r| (r.at, r.selected.clone()))
        .map_err(Clone::clone);
    tab.add("stable name answers with the other branch", found);
    let switch = switch.ok();
    tab.add("cache expiry", c.cache_expiry(switch, |n| n == b, b));
    tab.add(
        "reconnect (end-to-end through the stable name)",
        c.reconnect(switch, other),
    );
    tab.add("steady state", c.steady(other));
    episode(EpisodeKind::Failover, t, branch, tab.phases)
}

fn failback(c: &Ctx<'_>, t: &Trigger, branch: Option<String>) -> Episode {
    let mut tab = Table::new(t.at);
    if t.marker.is_none() {
        tab.last = Some(t.at);
    }
    tab.add("restore marker", start_phase(t, "restore"));
    let Some(b) = branch.as_deref() else {
        let why = "missing: no failover before the restore and no branch unready at it";
        tab.add("first successful attempt", Err(why.into()));
        return episode(EpisodeKind::Failback, t, branch, tab.phases);
    };
    tab.add("first successful attempt", c.first_attempt(b, false));
    let (pending_ms, by) = approval_phases(c, &mut tab, b);
    tab.add(
        "readiness 1 published",
        c.published(b, ReadinessState::Ready),
    );
    tab.add("alarm OK", c.alarm(b, "OK"));
    let switch = c.selection(|n| n == b, b);
    let found = switch
        .as_ref()
        .map(|r| (r.at, r.selected.clone()))
        .map_err(Clone::clone);
    tab.add("stable name selects the branch again", found);
    let switch = switch.ok();
    tab.add(
        "cache expiry",
        c.cache_expiry(switch, |n| n != b, "another branch"),
    );
    tab.add(
        "reconnect (end-to-end through the stable name)",
        c.reconnect(switch, |n| n == b),
    );
    tab.add("steady state", c.steady(|n| n == b));
    let mut e = episode(EpisodeKind::Failback, t, branch.clone(), tab.phases);
    e.pending_approval_ms = pending_ms;
    e.approved_by = by;
    e
}

/// `pending_approval entered` and `approved`, with the time spent pending and the approver.
fn approval_phases(c: &Ctx<'_>, tab: &mut Table, b: &str) -> (Option<Millis>, Option<String>) {
    if c.f.approval_required == Some(false) {
        let note = "not reached: the policy needs no approval".to_string();
        tab.add("pending_approval entered", Err(note));
        return (None, None);
    }
    let Some(p) = c.transition(b, ReadinessState::PendingApproval) else {
        let note = match c.f.approval_required {
            Some(_) => format!("missing: no transition record of {b} to pending_approval"),
            None => format!(
                "missing: no transition record of {b} to pending_approval (the start record does not say whether the policy needs approval)"
            ),
        };
        tab.add("pending_approval entered", Err(note));
        return (None, None);
    };
    tab.add(
        "pending_approval entered",
        Ok((p.at, Some(format!("prober {}", p.prober)))),
    );
    let left = since(&c.f.transitions, p.at, |t| t.at).iter().find(|t| {
        t.branch == b && t.prober == p.prober && t.from == ReadinessState::PendingApproval
    });
    let approval = since(&c.f.approvals, p.at, |a| a.at)
        .iter()
        .find(|a| a.branch == b && a.applied && a.prober == p.prober);
    // Both instants: the operator's (`approve`) and the prober's (its next sync applied it).
    let (given, found) = match approval {
        Some(a) => (
            Ok((a.given_at, Some(format!("by {}: {}", a.by, a.reason)))),
            Ok((
                a.at,
                Some(format!(
                    "by {}: {}; applied by prober {}",
                    a.by, a.reason, a.prober
                )),
            )),
        ),
        None => {
            let why = format!("missing: no applied approval record of {b} after pending_approval");
            (Err(why.clone()), Err(why))
        }
    };
    tab.add("approval given", given);
    tab.add("approved", found);
    let pending = left.map(|l| l.at - p.at);
    (pending, approval.map(|a| a.by.clone()))
}

#[cfg(test)]
mod tests;
