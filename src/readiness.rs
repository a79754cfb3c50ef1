//! Readiness core: owns the rule that turns one branch's finished probe attempts into its readiness
//! state (`unknown` / `ready` / `unready` / `pending_approval`) and the 0/1 value published for it.
//!
//! This module is pure: it does no I/O, never reads a clock and never spawns. Every instant is an
//! argument, in [`Millis`] (milliseconds since the UNIX epoch, wall clock supplied by the caller).
//!
//! # Rules
//!
//! * A condition's window holds the attempts whose `finished_at` lies in `(now - window, now]`.
//!   Its success rate is `successes / finished * 100` (percent).
//! * A condition *holds* at an evaluation only if the window has at least
//!   [`Policy::min_attempts`] finished attempts **and** the rate meets the threshold
//!   (unready: `rate < success_rate_below`; ready: `rate >= success_rate_at_or_above`).
//!   Fewer attempts is "no evidence": neither condition holds.
//! * `for` has Prometheus alerting semantics: a condition's clock (`holding_since`) starts at the
//!   first evaluation where it holds and is cleared by any evaluation where it does not. The
//!   condition *fires* at an evaluation where it holds and `now - holding_since >= for`.
//! * Definitive rule ([`Policy::definitive`]): at an evaluation where the unready condition holds,
//!   it also fires when the latest attempts finished by `now` form an unbroken run of at least two
//!   failures with a definitive class (one suffices when `definitive_for` is zero) whose first
//!   finished at least `definitive_for` before `now`. No attempt since the first contradicted
//!   the run, so it may fire between attempts (see Deadlines). A single definitive failure among
//!   successes never fires it, nor does any run of ambiguous failures (timeouts, resets): those
//!   wait for the full `for`. The run is read from the retained attempts (see
//!   [`Policy::retention`]): one that began before them counts from the oldest retained.
//! * Deadlines ([`Readiness::next_deadline`]): the earliest instant after the latest evaluation
//!   at which a holding condition's `for` (the damped one, as it will be then), or the definitive
//!   rule's `definitive_for`, runs out in a state that rule leaves. The caller evaluates then, so
//!   a rule fires when its time runs out, not at the next attempt. A rule whose time ran out at
//!   an evaluation that did not make its transition (unready won) waits for the next one.
//! * Transitions: `ready → unready` when the unready condition fires; `unready → ready` (or
//!   `→ pending_approval` when approval is required) when the ready condition fires;
//!   `pending_approval → ready` only by [`Readiness::approve`]; `pending_approval → unready` when
//!   the unready condition fires; `unknown` leaves by the same two firing rules. When both fire in
//!   one evaluation, unready wins.
//! * Every transition clears both holding clocks: the evidence for the next transition is gathered
//!   in the new state only.
//! * Flap damping ([`Policy::damping`]): every `ready → unready` transition is a *flap*. The
//!   flaps counted at `now` are those in `(now - period, now]` that came after the latest gap of
//!   at least `quiet` between two flaps (or between the latest flap and `now`). When more than
//!   `flaps` are counted, the ready condition's `for` in force is its `for × 2^(counted - flaps)`,
//!   capped at `max_for`; otherwise its own `for`. It is taken at every evaluation, so it only
//!   shortens while no new flap comes. The flap history is part of the [`Snapshot`].
//! * Published value: `ready` = 1, `unready` and `pending_approval` = 0, `unknown` = no datum.
//! * Suspect ([`Readiness::suspect`], as of the latest evaluation): the state is `unready`; or
//!   the unready condition holds and has not fired (`ready`, `unknown`, `pending_approval`); or,
//!   in `pending_approval`, the ready condition holds and has not yet held its `for`. A suspect
//!   branch may be probed faster: more samples shorten the lag to notice that a condition
//!   started or stopped holding, never a `for` (a clock of time, not of attempts).

mod prose;
mod reason;

use crate::failure::FailureClass;
pub use prose::policy_lines;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

pub use crate::clock::Millis;
use crate::clock::{fmt_duration_ms, rfc3339};

/// Readiness of one failover branch. Prints and serialises to the snake_case names used in
/// evidence, logs and the `initial` config key (serde and strum follow the same rule).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ReadinessState {
    /// No verdict yet: nothing is published.
    Unknown,
    /// The branch may take traffic: publishes 1.
    Ready,
    /// The branch must not take traffic: publishes 0.
    Unready,
    /// The ready condition fired but an operator must approve before it publishes 1; publishes 0.
    PendingApproval,
}

impl ReadinessState {
    /// Stable snake_case name (evidence, logs, `status`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The metric value for this state: `Some(1.0)` for ready, `Some(0.0)` for unready and
    /// pending_approval, `None` (publish no datum) for unknown.
    pub fn published_value(self) -> Option<f64> {
        match self {
            ReadinessState::Ready => Some(1.0),
            ReadinessState::Unready | ReadinessState::PendingApproval => Some(0.0),
            ReadinessState::Unknown => None,
        }
    }
}

/// One transition condition (`declare_unready` or `declare_ready`).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Threshold in percent (0–100). For `declare_unready` the condition holds when the success
    /// rate is strictly below it; for `declare_ready` when the rate is at or above it.
    pub threshold_percent: f64,
    /// How long the condition must hold at every evaluation, without interruption, before it
    /// fires. Zero fires at the first evaluation where it holds.
    pub for_: Duration,
    /// Trailing window over which the success rate is computed: attempts finished in
    /// `(now - window, now]`.
    pub window: Duration,
}

/// The definitive rule: the unready condition fires after `for_` instead of its own `for` while
/// every recent attempt failed with one of `classes` (see the module rules).
#[derive(Debug, Clone, PartialEq)]
pub struct Definitive {
    /// `declare_unready.definitive_for`: how far back every attempt must have failed definitively.
    pub for_: Duration,
    /// The classes that count as definitive (`readiness.definitive_classes`). Empty: the rule
    /// never fires.
    pub classes: BTreeSet<FailureClass>,
}

impl Default for Definitive {
    /// 20 s over [`FailureClass::default_definitive`].
    fn default() -> Self {
        Definitive {
            for_: Duration::from_secs(20),
            classes: FailureClass::default_definitive().into_iter().collect(),
        }
    }
}

/// Flap damping (`[readiness.flap_damping]`): a branch that went `ready → unready` more than
/// `flaps` times in `period` waits a longer ready `for` (see the module rules).
#[derive(Debug, Clone, PartialEq)]
pub struct FlapDamping {
    /// How many `ready → unready` flaps in `period` are tolerated before the ready `for` grows.
    pub flaps: u32,
    /// The trailing period flaps are counted over.
    pub period: Duration,
    /// The longest ready `for` damping may demand.
    pub max_for: Duration,
    /// A gap of this long without a flap forgets every earlier flap (at most `period`).
    pub quiet: Duration,
}

impl Default for FlapDamping {
    /// More than 3 flaps in 1h double the ready `for` per extra flap, up to 1h; 1h quiet resets.
    fn default() -> Self {
        FlapDamping {
            flaps: 3,
            period: Duration::from_secs(3600),
            max_for: Duration::from_secs(3600),
            quiet: Duration::from_secs(3600),
        }
    }
}

impl FlapDamping {
    /// The ready `for` in force when `counted` flaps are counted and the ready condition's own
    /// `for` is `base`: `base × 2^(counted - flaps)` capped at `max_for` (never below `base`)
    /// above `flaps`, `base` otherwise.
    pub fn ready_for(&self, base: Duration, counted: u32) -> Duration {
        let Some(extra) = counted.checked_sub(self.flaps).filter(|e| *e > 0) else {
            return base;
        };
        let factor = 1u32.checked_shl(extra).unwrap_or(0);
        let grown = if factor == 0 {
            None
        } else {
            base.checked_mul(factor)
        };
        grown
            .map_or(self.max_for, |d| d.min(self.max_for))
            .max(base)
    }
}

/// What flap damping made of a transition (in [`Transition::damping`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DampingEvidence {
    /// `ready → unready` flaps counted at the transition (including this one, if it is a flap).
    pub recent_flaps: u32,
    /// The ready `for` in force after the transition, in milliseconds: what the next (or this)
    /// recovery waits.
    pub ready_for_ms: u64,
}

/// The readiness policy of a branch (parsed and validated by the config module).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Minimum number of finished attempts in a condition's window for that condition to hold at
    /// all. Fewer is "no evidence".
    pub min_attempts: u32,
    /// Condition that declares the branch unready (rate `<` threshold).
    pub declare_unready: Condition,
    /// Condition that declares the branch ready (rate `>=` threshold).
    pub declare_ready: Condition,
    /// When true, the ready condition firing leads to `pending_approval`, and only
    /// [`Readiness::approve`] leads on to `ready`.
    pub approval_required: bool,
    /// State before any evidence (and after a fresh start without a saved snapshot).
    pub initial: ReadinessState,
    /// The definitive rule; `None`: the unready condition fires after its `for` only.
    pub definitive: Option<Definitive>,
    /// Flap damping; `None`: the ready condition always waits its own `for`.
    pub damping: Option<FlapDamping>,
}

impl Policy {
    /// The largest of the two condition windows and twice `definitive_for`: how long attempts
    /// must be retained. Twice, so that when a run of definitive failures first spans
    /// `definitive_for` (less than one interval more), its first attempt is still kept at any
    /// probe interval up to `definitive_for`.
    pub fn retention(&self) -> Duration {
        let d = self.definitive.as_ref().map_or(Duration::ZERO, |d| d.for_);
        self.declare_unready
            .window
            .max(self.declare_ready.window)
            .max(d.saturating_mul(2))
    }
}

/// Counts over one trailing window, as used by a condition and reported as transition evidence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WindowStats {
    /// Window length in milliseconds.
    pub window_ms: u64,
    /// Attempts finished in the window.
    pub finished: u32,
    /// Of those, how many failed.
    pub failed: u32,
    /// `(finished - failed) / finished * 100`, in percent; `None` when `finished == 0`.
    pub success_rate_percent: Option<f64>,
    /// Failed attempts per failure class, sorted by count descending, then by class. Failures that
    /// carry no class are counted in `failed` only.
    pub failure_classes: Vec<(FailureClass, u32)>,
}

/// A change of readiness state, with the evidence that caused it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Transition {
    /// State left.
    pub from: ReadinessState,
    /// State entered.
    pub to: ReadinessState,
    /// Instant of the evaluation (or approval) that made the transition, ms since the epoch.
    pub at: Millis,
    /// Human-readable sentence explaining the transition.
    pub reason: String,
    /// Since when the firing condition had held (ms since the epoch); `None` for an approval.
    pub held_since: Option<Millis>,
    /// Statistics of the unready condition's window at `at`.
    pub unready_window: WindowStats,
    /// Statistics of the ready condition's window at `at`.
    pub ready_window: WindowStats,
    /// Set when flap damping lengthened the ready `for`: on the flap that lengthened it and on the
    /// recovery that waited it. Absent otherwise (and in records written before damping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damping: Option<DampingEvidence>,
}

/// Everything needed to continue a [`Readiness`] in a later process (scheduled-task runs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Current state.
    pub state: ReadinessState,
    /// When the current state was entered (ms since the epoch); `None` if it is the initial state.
    pub since: Option<Millis>,
    /// Since when the unready condition has held without interruption (ms since the epoch).
    pub unready_holding_since: Option<Millis>,
    /// Since when the ready condition has held without interruption (ms since the epoch).
    pub ready_holding_since: Option<Millis>,
    /// Retained attempts, sorted by `finished_at`.
    pub attempts: Vec<AttemptRecord>,
    /// Instants (ms since the epoch) of the `ready → unready` flaps flap damping still counts,
    /// oldest first. Absent in documents written before damping.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaps: Vec<Millis>,
}

impl Snapshot {
    /// The snapshot as it can be trusted at `now`: attempts that finished after `now` are
    /// dropped, a holding clock that starts after `now` is cleared (the condition starts holding
    /// afresh), and a `since` after `now` becomes `now`. A document written by a host whose clock
    /// ran ahead (or read after an NTP step back) would otherwise put the evaluation clock in the
    /// future, where every window is empty and the state can never change.
    #[must_use]
    pub fn clamped(mut self, now: Millis) -> Snapshot {
        self.attempts.retain(|a| a.finished_at <= now);
        self.since = self.since.map(|t| t.min(now));
        self.unready_holding_since = self.unready_holding_since.filter(|t| *t <= now);
        self.ready_holding_since = self.ready_holding_since.filter(|t| *t <= now);
        self.flaps.retain(|t| *t <= now);
        self
    }
}

/// The outcome of one finished probe attempt.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct AttemptRecord {
    /// When the attempt finished, ms since the epoch.
    pub finished_at: Millis,
    /// Whether the attempt succeeded.
    pub success: bool,
    /// Why it failed (ignored for successful attempts).
    pub class: Option<FailureClass>,
}

/// Why a branch is suspect ([`Readiness::suspect`]): where more samples matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspect {
    /// The unready condition holds since the instant (ms since the epoch) and has not fired.
    UnreadyHolding(Millis),
    /// The branch is unready (or pending approval) and its ready condition holds since the
    /// instant and has not fired.
    ReadyHolding(Millis),
    /// The branch is unready and its ready condition does not hold.
    Unready,
}

impl std::fmt::Display for Suspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suspect::UnreadyHolding(t) => {
                write!(f, "unready condition holding since {}", rfc3339(*t))
            }
            Suspect::ReadyHolding(t) => write!(f, "ready condition holding since {}", rfc3339(*t)),
            Suspect::Unready => f.write_str("unready"),
        }
    }
}

/// [`Readiness::approve`] was called outside `pending_approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("approval applies only in state pending_approval, but readiness is {state}")]
pub struct ApprovalError {
    /// The state readiness was in when approval was requested.
    pub state: ReadinessState,
}

/// The readiness state machine of one branch.
///
/// Feed it every finished attempt with [`record`](Self::record) and call
/// [`evaluate`](Self::evaluate) on every publish tick and at every
/// [`next_deadline`](Self::next_deadline). Attempts are retained only for
/// [`Policy::retention`] (pruned at every evaluation), so memory is bounded by the attempt rate
/// times the largest window.
///
/// Evaluation time never goes backwards: an evaluation (or approval) whose `now` is earlier than
/// the latest instant already evaluated is performed at that latest instant instead. Attempts that
/// arrive out of `finished_at` order are inserted in order.
#[derive(Debug, Clone)]
pub struct Readiness {
    policy: Policy,
    state: ReadinessState,
    since: Option<Millis>,
    unready_holding_since: Option<Millis>,
    ready_holding_since: Option<Millis>,
    /// Sorted by `finished_at` (stable for equal instants).
    attempts: VecDeque<AttemptRecord>,
    /// The `finished_at` of the failed ones, sorted: windows are counted by bisection, so an
    /// evaluation's cost does not grow with the window (thousands of attempts in 3 hours).
    failures: VecDeque<Millis>,
    /// Flap instants damping still counts, sorted (see [`Snapshot::flaps`]).
    flaps: VecDeque<Millis>,
    /// Latest instant evaluated or approved at; not persisted (rebuilt on restore).
    clock: Option<Millis>,
}

/// Duration in whole milliseconds, saturating at `i64::MAX`.
fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Readiness {
    /// A fresh state machine in `policy.initial`, with no attempts, no holding clocks and
    /// `since = None`.
    pub fn new(policy: Policy) -> Self {
        let state = policy.initial;
        Readiness {
            policy,
            state,
            since: None,
            unready_holding_since: None,
            ready_holding_since: None,
            attempts: VecDeque::new(),
            failures: VecDeque::new(),
            flaps: VecDeque::new(),
            clock: None,
        }
    }

    /// Continues a saved state (e.g. across scheduled-task runs): state, `since`, both holding
    /// clocks and the attempts are taken from `snapshot` as they are (attempts are re-sorted by
    /// `finished_at`). Attempts outside the policy's windows are pruned at the next evaluation.
    /// A `pending_approval` snapshot restored under a policy without `approval_required`
    /// continues as `unready` (with its ready clock reset), since nothing would ever approve it.
    pub fn restore(policy: Policy, snapshot: Snapshot) -> Self {
        let mut attempts = snapshot.attempts;
        attempts.sort_by_key(|a| a.finished_at);
        // The evaluation clock is not persisted; every instant the snapshot carries was reached by
        // an evaluation, so their maximum is a lower bound of it.
        let clock = [
            snapshot.since,
            snapshot.unready_holding_since,
            snapshot.ready_holding_since,
            attempts.last().map(|a| a.finished_at),
            snapshot.flaps.iter().max().copied(),
        ]
        .into_iter()
        .flatten()
        .max();
        // A state saved while approval was required, restored under a policy that no longer
        // requires it, would wait for ever: it continues as unready, gathering fresh evidence.
        let (state, ready_holding_since) =
            if snapshot.state == ReadinessState::PendingApproval && !policy.approval_required {
                (ReadinessState::Unready, None)
            } else {
                (snapshot.state, snapshot.ready_holding_since)
            };
        Readiness {
            policy,
            state,
            since: snapshot.since,
            unready_holding_since: snapshot.unready_holding_since,
            ready_holding_since,
            failures: attempts
                .iter()
                .filter(|a| !a.success)
                .map(|a| a.finished_at)
                .collect(),
            attempts: attempts.into(),
            flaps: {
                let mut f = snapshot.flaps;
                f.sort_unstable();
                f.into()
            },
            clock,
        }
    }

    /// The persistent part of the state machine, for [`restore`](Self::restore).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: self.state,
            since: self.since,
            unready_holding_since: self.unready_holding_since,
            ready_holding_since: self.ready_holding_since,
            attempts: self.attempts.iter().copied().collect(),
            flaps: self.flaps.iter().copied().collect(),
        }
    }

    /// Records a finished attempt, then evaluates at `attempt.finished_at` (or at the latest
    /// instant already evaluated, if that is later). Returns the transition this caused, if any.
    pub fn record(&mut self, attempt: AttemptRecord) -> Option<Transition> {
        let idx = self
            .attempts
            .partition_point(|a| a.finished_at <= attempt.finished_at);
        self.attempts.insert(idx, attempt);
        if !attempt.success {
            let at = attempt.finished_at;
            let idx = self.failures.partition_point(|f| *f <= at);
            self.failures.insert(idx, at);
        }
        self.evaluate(attempt.finished_at)
    }

    /// Evaluates both conditions at `now` (ms since the epoch), updates their holding clocks, and
    /// makes at most one transition according to the module rules. Both holding clocks are cleared
    /// on a transition, so evidence for the next one is gathered in the new state.
    pub fn evaluate(&mut self, now: Millis) -> Option<Transition> {
        let now = self.advance_clock(now);
        self.prune(now);
        self.prune_flaps(now);
        let uw = self.window(now, self.policy.declare_unready.window, false);
        let rw = self.window(now, self.policy.declare_ready.window, false);
        let min = self.policy.min_attempts;
        let u_holds = uw.finished >= min
            && uw
                .success_rate_percent
                .is_some_and(|r| r < self.policy.declare_unready.threshold_percent);
        let r_holds = rw.finished >= min
            && rw
                .success_rate_percent
                .is_some_and(|r| r >= self.policy.declare_ready.threshold_percent);
        self.unready_holding_since = u_holds.then(|| self.unready_holding_since.unwrap_or(now));
        self.ready_holding_since = r_holds.then(|| self.ready_holding_since.unwrap_or(now));
        let fires = |since: Option<Millis>, for_: Duration| {
            since.is_some_and(|s| now.saturating_sub(s) >= duration_ms(for_))
        };
        let for_fires = fires(self.unready_holding_since, self.policy.declare_unready.for_);
        // The definitive rule is only looked at while the unready condition holds.
        let definitive = if u_holds && !for_fires {
            self.definitive_fires(now)
        } else {
            None
        };
        let u_fires = for_fires || definitive.is_some();
        let ready_for = self.ready_for();
        let r_fires = fires(self.ready_holding_since, ready_for);
        let ready_target = if self.policy.approval_required {
            ReadinessState::PendingApproval
        } else {
            ReadinessState::Ready
        };
        let to = match self.state {
            ReadinessState::Ready | ReadinessState::PendingApproval => {
                u_fires.then_some(ReadinessState::Unready)
            }
            ReadinessState::Unready => (r_fires && !u_fires).then_some(ready_target),
            ReadinessState::Unknown => {
                if u_fires {
                    Some(ReadinessState::Unready)
                } else if r_fires {
                    Some(ready_target)
                } else {
                    None
                }
            }
        }?;
        // A transition records both windows whole, classes included.
        let uw = self.window_stats(now, self.policy.declare_unready.window);
        let rw = self.window_stats(now, self.policy.declare_ready.window);
        let (held_since, mut reason) = if to == ReadinessState::Unready {
            self.unready_reason(now, &uw, definitive.as_ref())
        } else {
            self.ready_reason(now, &rw, to, ready_for)
        };
        let damping = self.damp(to, now, &mut reason);
        let mut tr = self.transition(to, now, reason, Some(held_since), uw, rw);
        tr.damping = damping;
        Some(tr)
    }

    /// Operator approval: `pending_approval → ready` at `now` (ms since the epoch), clearing both
    /// holding clocks. In any other state nothing changes and the error names the state.
    pub fn approve(&mut self, now: Millis) -> Result<Transition, ApprovalError> {
        if self.state != ReadinessState::PendingApproval {
            return Err(ApprovalError { state: self.state });
        }
        let now = self.advance_clock(now);
        let uw = self.window_stats(now, self.policy.declare_unready.window);
        let rw = self.window_stats(now, self.policy.declare_ready.window);
        let reason = match self.since {
            Some(s) => format!(
                "operator approved readiness (pending approval since {})",
                rfc3339(s)
            ),
            None => "operator approved readiness".to_string(),
        };
        Ok(self.transition(ReadinessState::Ready, now, reason, None, uw, rw))
    }

    /// Current state.
    pub fn state(&self) -> ReadinessState {
        self.state
    }

    /// When the current state was entered (ms since the epoch); `None` while still in the initial
    /// state of a fresh start.
    pub fn since(&self) -> Option<Millis> {
        self.since
    }

    /// The value to publish: `Some(1.0)` ready, `Some(0.0)` unready or pending_approval, `None`
    /// (no datum) unknown.
    pub fn published_value(&self) -> Option<f64> {
        self.state.published_value()
    }

    /// Statistics of the retained attempts finished in `(now - window, now]` (`now` in ms since the
    /// epoch). Only attempts within [`Policy::retention`] of the latest evaluation are retained, so
    /// a longer `window` sees no more than that.
    pub fn window_stats(&self, now: Millis, window: Duration) -> WindowStats {
        self.window(now, window, true)
    }

    /// [`window_stats`](Self::window_stats), counted by bisection; the failure classes (left
    /// empty without `classes`) by a pass over the window, which only a transition needs.
    fn window(&self, now: Millis, window: Duration, classes: bool) -> WindowStats {
        let window_ms = duration_ms(window);
        let lo = now.saturating_sub(window_ms);
        let start = self.attempts.partition_point(|a| a.finished_at <= lo);
        let end = self.attempts.partition_point(|a| a.finished_at <= now);
        let failed_from = self.failures.partition_point(|f| *f <= lo);
        let n = |a: usize, b: usize| u32::try_from(b.saturating_sub(a)).unwrap_or(u32::MAX);
        let finished = n(start, end);
        let failed = n(failed_from, self.failures.partition_point(|f| *f <= now));
        let mut counts: BTreeMap<FailureClass, u32> = BTreeMap::new();
        for a in self
            .attempts
            .range(start..end.max(start))
            .filter(|_| classes)
        {
            if let (false, Some(c)) = (a.success, a.class) {
                *counts.entry(c).or_insert(0) += 1;
            }
        }
        let success_rate_percent =
            (finished > 0).then(|| f64::from(finished - failed) * 100.0 / f64::from(finished));
        let mut failure_classes: Vec<(FailureClass, u32)> = counts.into_iter().collect();
        failure_classes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        WindowStats {
            window_ms: u64::try_from(window_ms).unwrap_or(0),
            finished,
            failed,
            success_rate_percent,
            failure_classes,
        }
    }

    /// `(unready_holding_since, ready_holding_since)`, ms since the epoch: since when each
    /// condition has held at every evaluation, or `None` if it did not hold at the latest one.
    pub fn holding(&self) -> (Option<Millis>, Option<Millis>) {
        (self.unready_holding_since, self.ready_holding_since)
    }

    /// Whether the branch is suspect as of the latest evaluation (module rules), and why.
    pub fn suspect(&self) -> Option<Suspect> {
        let (unready, ready) = (self.unready_holding_since, self.ready_holding_since);
        match self.state {
            ReadinessState::Unready => Some(ready.map_or(Suspect::Unready, Suspect::ReadyHolding)),
            ReadinessState::Ready | ReadinessState::Unknown => unready.map(Suspect::UnreadyHolding),
            ReadinessState::PendingApproval => {
                let now = self.clock.unwrap_or(Millis::MIN);
                let ready_for = duration_ms(self.ready_for());
                let ready = ready.filter(|s| now.saturating_sub(*s) < ready_for);
                unready
                    .map(Suspect::UnreadyHolding)
                    .or(ready.map(Suspect::ReadyHolding))
            }
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The earliest instant after the latest evaluation at which an evaluation could make a
    /// transition if no attempt arrives first (module rules, "Deadlines"): when a holding
    /// condition's `for` (or the definitive rule's `definitive_for`) runs out. `None` when no
    /// rule is on its way to firing. Evaluating at it fires, unless the window sliding to it
    /// stopped the condition holding; either way the next deadline is later.
    pub fn next_deadline(&self) -> Option<Millis> {
        let clock = self.clock.unwrap_or(Millis::MIN);
        let mut next: Option<Millis> = None;
        let mut consider = |t: Option<Millis>| {
            if let Some(t) = t.filter(|t| *t > clock) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if self.state != ReadinessState::Unready {
            let for_ = duration_ms(self.policy.declare_unready.for_);
            consider(self.unready_holding_since.map(|s| s.saturating_add(for_)));
            if self.unready_holding_since.is_some() {
                consider(self.definitive_deadline());
            }
        }
        if matches!(
            self.state,
            ReadinessState::Unready | ReadinessState::Unknown
        ) {
            consider(
                self.ready_holding_since
                    .map(|s| self.ready_deadline(s, clock)),
            );
        }
        next
    }

    /// When the definitive rule fires if no attempt comes: the first of the latest run of
    /// definitive failures plus `definitive_for`, once the run is long enough to fire at all.
    fn definitive_deadline(&self) -> Option<Millis> {
        let d = self.policy.definitive.as_ref()?;
        let (first, run) = self.definitive_run(self.attempts.len())?;
        (run >= 2 || d.for_.is_zero()).then(|| first.saturating_add(duration_ms(d.for_)))
    }

    /// The earliest instant from `clock` on at which the ready condition, holding since `since`,
    /// has held the `for` in force then: flap damping's `for` shortens as flaps are forgotten,
    /// at `flap + period` and at `latest flap + quiet`.
    fn ready_deadline(&self, since: Millis, clock: Millis) -> Millis {
        let base = self.policy.declare_ready.for_;
        let Some(d) = &self.policy.damping else {
            return since.saturating_add(duration_ms(base));
        };
        let (period, quiet) = (duration_ms(d.period), duration_ms(d.quiet));
        let last_quiet = self.flaps.back().map(|t| t.saturating_add(quiet));
        let counted_at = |t: Millis| -> u32 {
            if last_quiet.is_some_and(|q| t >= q) {
                return 0;
            }
            let n = self.flaps.iter().filter(|f| f.saturating_add(period) > t);
            u32::try_from(n.count()).unwrap_or(u32::MAX)
        };
        let changes = self.flaps.iter().map(|f| f.saturating_add(period));
        std::iter::once(clock)
            .chain(changes)
            .chain(last_quiet)
            .map(|p| {
                let due = since.saturating_add(duration_ms(d.ready_for(base, counted_at(p))));
                p.max(due)
            })
            .min()
            .unwrap_or(Millis::MAX)
    }

    /// The latest run of definitive failures among the first `end` retained attempts: when its
    /// first finished and how many it has; `None` when the latest attempt is not one.
    fn definitive_run(&self, end: usize) -> Option<(Millis, usize)> {
        let d = self.policy.definitive.as_ref()?;
        let is_definitive =
            |a: &AttemptRecord| !a.success && a.class.is_some_and(|c| d.classes.contains(&c));
        let run = self
            .attempts
            .range(..end)
            .rev()
            .take_while(|a| is_definitive(a))
            .count();
        let first = self.attempts.get(end.checked_sub(run)?)?;
        (run > 0).then_some((first.finished_at, run))
    }

    /// The definitive rule at `now`: when the retained attempts finished by `now` end in a run of
    /// definitive failures (at least two, unless `definitive_for` is zero) whose first finished
    /// at least `definitive_for` before `now`, that run's statistics (`window_ms` = from its
    /// first to `now`, `finished` = `failed` = its length).
    fn definitive_fires(&self, now: Millis) -> Option<WindowStats> {
        let d = self.policy.definitive.as_ref()?;
        let end = self.attempts.partition_point(|a| a.finished_at <= now);
        let (first, run) = self.definitive_run(end)?;
        let span = now.saturating_sub(first);
        if (run < 2 && !d.for_.is_zero()) || span < duration_ms(d.for_) {
            return None;
        }
        let mut classes: BTreeMap<FailureClass, u32> = BTreeMap::new();
        for a in self.attempts.range(end - run..end) {
            if let Some(c) = a.class {
                *classes.entry(c).or_insert(0) += 1;
            }
        }
        let mut failure_classes: Vec<(FailureClass, u32)> = classes.into_iter().collect();
        failure_classes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let n = u32::try_from(run).unwrap_or(u32::MAX);
        Some(WindowStats {
            window_ms: u64::try_from(span).unwrap_or(0),
            finished: n,
            failed: n,
            success_rate_percent: Some(0.0),
            failure_classes,
        })
    }

    /// The ready condition's `for` in force now: its own, or the damped one (module rules).
    fn ready_for(&self) -> Duration {
        let base = self.policy.declare_ready.for_;
        self.policy.damping.as_ref().map_or(base, |d| {
            d.ready_for(base, u32::try_from(self.flaps.len()).unwrap_or(u32::MAX))
        })
    }

    /// Flap damping's part of a transition to `to` at `now`: counts a `ready → unready` flap, and
    /// when more flaps are counted than the policy tolerates, says so in `reason` and returns
    /// the evidence.
    fn damp(
        &mut self,
        to: ReadinessState,
        now: Millis,
        reason: &mut String,
    ) -> Option<DampingEvidence> {
        let d = self.policy.damping.clone()?;
        let flap = self.state == ReadinessState::Ready && to == ReadinessState::Unready;
        if flap {
            self.flaps.push_back(now);
            // Beyond `flaps + 64` the doubling has long reached any cap: keep memory bounded.
            let keep = usize::try_from(d.flaps)
                .unwrap_or(usize::MAX)
                .saturating_add(64);
            while self.flaps.len() > keep {
                self.flaps.pop_front();
            }
        }
        let counted = u32::try_from(self.flaps.len()).unwrap_or(u32::MAX);
        if counted <= d.flaps || (to == ReadinessState::Unready && !flap) {
            return None;
        }
        let base = self.policy.declare_ready.for_;
        let ready_for = d.ready_for(base, counted);
        let period = fmt_duration_ms(duration_ms(d.period));
        let (grown, max) = (
            fmt_duration_ms(duration_ms(ready_for)),
            fmt_duration_ms(duration_ms(d.max_for)),
        );
        let base = fmt_duration_ms(duration_ms(base));
        let extra = counted - d.flaps;
        let needs = if flap { "now needs" } else { "needed" };
        reason.push_str(&format!(
            "; flap damping: {counted} ready → unready flaps within {period} (more than {}): the ready condition {needs} {grown} (for {base} × 2^{extra}, at most {max})",
            d.flaps
        ));
        Some(DampingEvidence {
            recent_flaps: counted,
            ready_for_ms: u64::try_from(ready_for.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Forgets the flaps damping no longer counts at `now`: those at or before `now - period`,
    /// and every flap before the latest gap of at least `quiet` (all of them when the latest
    /// flap is at least `quiet` ago).
    fn prune_flaps(&mut self, now: Millis) {
        let Some(d) = &self.policy.damping else {
            self.flaps.clear();
            return;
        };
        let (period, quiet) = (duration_ms(d.period), duration_ms(d.quiet));
        let horizon = now.saturating_sub(period);
        while self.flaps.front().is_some_and(|t| *t <= horizon) {
            self.flaps.pop_front();
        }
        if self
            .flaps
            .back()
            .is_some_and(|t| now.saturating_sub(*t) >= quiet)
        {
            self.flaps.clear();
        }
        let gap = (1..self.flaps.len())
            .rev()
            .find(|i| self.flaps[*i].saturating_sub(self.flaps[*i - 1]) >= quiet);
        if let Some(i) = gap {
            self.flaps.drain(..i);
        }
    }

    /// Moves the evaluation clock to `max(clock, now)` and returns it.
    fn advance_clock(&mut self, now: Millis) -> Millis {
        let now = self.clock.map_or(now, |c| c.max(now));
        self.clock = Some(now);
        now
    }

    /// Drops attempts no window can see any more at `now`.
    fn prune(&mut self, now: Millis) {
        let horizon = now.saturating_sub(duration_ms(self.policy.retention()));
        while self
            .attempts
            .front()
            .is_some_and(|a| a.finished_at <= horizon)
        {
            self.attempts.pop_front();
        }
        while self.failures.front().is_some_and(|f| *f <= horizon) {
            self.failures.pop_front();
        }
    }

    fn transition(
        &mut self,
        to: ReadinessState,
        at: Millis,
        reason: String,
        held_since: Option<Millis>,
        unready_window: WindowStats,
        ready_window: WindowStats,
    ) -> Transition {
        let from = self.state;
        self.state = to;
        self.since = Some(at);
        self.unready_holding_since = None;
        self.ready_holding_since = None;
        Transition {
            from,
            to,
            at,
            reason,
            held_since,
            unready_window,
            ready_window,
            damping: None,
        }
    }
}

/// Whether Route 53 failover fails open (answers with the PRIMARY whatever its health): every
/// branch publishes and none publishes 1 (README.md, `BothBranchesUnready`). `branches`: each
/// branch's published readiness, `Some(true)` ready, `Some(false)` unready, `None` unknown (no
/// datum). `Some(true)`: fails open; `Some(false)`: a branch is ready; `None`: none is ready
/// and one is still unknown, so it cannot be told yet. The fold's tick and `simulate` both ask
/// here.
pub fn fails_open(branches: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut all_known = true;
    for b in branches {
        match b {
            Some(true) => return Some(false),
            Some(false) => {}
            None => all_known = false,
        }
    }
    all_known.then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: i64 = 1000;

    /// Offset of the scenario clock: scenario times are relative to this instant.
    const BASE: Millis = 1_700_000_000_000;

    /// The example policy of the contract, but starting `ready` without approval.
    fn default_policy() -> Policy {
        Policy {
            min_attempts: 10,
            declare_unready: Condition {
                threshold_percent: 95.0,
                for_: Duration::from_secs(180),
                window: Duration::from_secs(60),
            },
            declare_ready: Condition {
                threshold_percent: 99.0,
                for_: Duration::from_secs(600),
                window: Duration::from_secs(300),
            },
            approval_required: false,
            initial: ReadinessState::Ready,
            definitive: None,
            damping: None,
        }
    }

    fn parse_state(s: &str) -> ReadinessState {
        serde_json::from_str(&format!("\"{s}\"")).unwrap_or_else(|e| panic!("state {s:?}: {e}"))
    }

    fn parse_class(s: &str) -> FailureClass {
        serde_json::from_str(&format!("\"{s}\"")).unwrap_or_else(|e| panic!("class {s:?}: {e}"))
    }

    /// `3m24s` → ms.
    fn parse_span(s: &str) -> i64 {
        let d = humantime::parse_duration(s).unwrap_or_else(|e| panic!("duration {s:?}: {e}"));
        duration_ms(d)
    }

    /// `95%/3m/60s` → condition (threshold, for, window).
    fn parse_condition(s: &str) -> Condition {
        let parts: Vec<&str> = s.split('/').collect();
        assert_eq!(
            parts.len(),
            3,
            "condition {s:?}: want THRESHOLD%/FOR/WINDOW"
        );
        Condition {
            threshold_percent: parts[0].trim_end_matches('%').parse().expect("threshold"),
            for_: humantime::parse_duration(parts[1]).expect("for"),
            window: humantime::parse_duration(parts[2]).expect("window"),
        }
    }

    /// `ok` | `fail` | `fail CLASS`, optionally followed by `*N` (repetition inside a cycle).
    fn parse_outcome(s: &str) -> (bool, Option<FailureClass>, usize) {
        let (body, n) = match s.rsplit_once('*') {
            Some((b, n)) => (b.trim(), n.trim().parse().expect("repetition")),
            None => (s.trim(), 1),
        };
        let mut words = body.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("ok"), None, None) => (true, None, n),
            (Some("fail"), c, None) => (false, c.map(parse_class), n),
            _ => panic!("outcome {s:?}: want `ok` or `fail [CLASS]`"),
        }
    }

    /// Runs a scenario script. One command per line; `#` starts a comment. Times (`t=`) are
    /// relative to [`BASE`].
    ///
    /// ```text
    /// policy initial=unknown approval=required min_attempts=10 unready=95%/3m/60s ready=99%/10m/5m
    /// policy damping=3/1h/5m/1h        flap damping: FLAPS/PERIOD/MAX_FOR/QUIET (or `off`)
    /// t=12s ok                         record one attempt
    /// t=14s fail server_read_only      record one failed attempt (class optional)
    /// t=0s..3m/2s ok                   attempts every 2s in [0s, 3m)
    /// t=0s..3m/2s [ok*4, fail tcp_reset]   ... cycling through outcomes
    /// t=60s tick                       evaluate
    /// t=60s approve                    approval must succeed
    /// t=60s approve -> error unready   approval must fail, naming the state
    /// restart                          snapshot → JSON → restore
    /// expect unready                   current state
    /// expect value 1|0|none            published value
    /// expect holding unready|ready since 2m|none
    /// expect suspect none|unready|unready_holding since 2m|ready_holding since 2m
    /// expect transition ready -> unready at 3m18s   next unchecked transition
    /// expect no transition             no unchecked transition
    /// expect evidence unready|ready finished=30 failed=24 classes=a:18,b:6   of the last transition
    /// expect reason contains TEXT      of the last transition
    /// expect damping 4 2m | none       the last transition's damping evidence (flaps, ready for)
    /// expect deadline 3m4s | none       next_deadline
    /// wake                              evaluate at next_deadline, as the runner does
    /// ```
    ///
    /// Every transition must be checked by an `expect transition` line before the script ends.
    fn check(script: &str) {
        let mut s = Script::default();
        for (n, raw) in script.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let ctx = format!("line {}: `{line}`", n + 1);
            if let Some(rest) = line.strip_prefix("policy ") {
                s.set_policy(&ctx, rest);
            } else if let Some(rest) = line.strip_prefix("t=") {
                s.at(&ctx, rest);
            } else if line == "restart" {
                s.restart();
            } else if line == "wake" {
                // What the runner does: evaluate at the deadline.
                let r = s.readiness();
                let at = r
                    .next_deadline()
                    .unwrap_or_else(|| panic!("{ctx}: no deadline"));
                let t = r.evaluate(at);
                s.push(t);
            } else {
                let rest = line
                    .strip_prefix("expect ")
                    .unwrap_or_else(|| panic!("{ctx}: unknown command"));
                s.expect(&ctx, rest);
            }
        }
        assert!(
            s.unchecked.is_empty(),
            "script ended with unchecked transitions: {:#?}",
            s.unchecked
        );
    }

    /// The state of a running [`check`] script.
    struct Script {
        policy: Policy,
        rd: Option<Readiness>,
        /// Transitions no `expect transition` line has checked yet, oldest first.
        unchecked: VecDeque<Transition>,
        last: Option<Transition>,
    }

    impl Default for Script {
        fn default() -> Self {
            Script {
                policy: default_policy(),
                rd: None,
                unchecked: VecDeque::new(),
                last: None,
            }
        }
    }

    /// `ok`, `fail CLASS` or `[ok*4, fail tcp_reset]`: the outcomes a `t=A..B/STEP` line cycles
    /// through.
    fn parse_cycle(what: &str) -> Vec<(bool, Option<FailureClass>)> {
        match what.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
            Some(items) => items
                .split(',')
                .flat_map(|i| {
                    let (ok, c, n) = parse_outcome(i);
                    std::iter::repeat_n((ok, c), n)
                })
                .collect(),
            None => {
                let (ok, c, _) = parse_outcome(what);
                vec![(ok, c)]
            }
        }
    }

    impl Script {
        fn readiness(&mut self) -> &mut Readiness {
            let policy = &self.policy;
            self.rd
                .get_or_insert_with(|| Readiness::new(policy.clone()))
        }

        fn push(&mut self, t: Option<Transition>) {
            if let Some(t) = t {
                self.unchecked.push_back(t.clone());
                self.last = Some(t);
            }
        }

        fn set_policy(&mut self, ctx: &str, rest: &str) {
            assert!(self.rd.is_none(), "{ctx}: policy must come first");
            let policy = &mut self.policy;
            for kv in rest.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("policy key=value");
                match k {
                    "initial" => policy.initial = parse_state(v),
                    "approval" => policy.approval_required = v == "required",
                    "min_attempts" => policy.min_attempts = v.parse().expect("min_attempts"),
                    "unready" => policy.declare_unready = parse_condition(v),
                    "ready" => policy.declare_ready = parse_condition(v),
                    // `definitive=20s` (default classes), `definitive=20s/a,b` or `…/` (none).
                    "definitive" => {
                        let (d, classes) = match v.split_once('/') {
                            Some((d, c)) => (d, Some(c)),
                            None => (v, None),
                        };
                        let mut rule = Definitive {
                            for_: humantime::parse_duration(d).expect("definitive_for"),
                            ..Definitive::default()
                        };
                        if let Some(c) = classes {
                            let names = c.split(',').filter(|n| !n.is_empty());
                            rule.classes = names.map(parse_class).collect();
                        }
                        policy.definitive = Some(rule);
                    }
                    // `damping=FLAPS/PERIOD/MAX_FOR/QUIET` or `damping=off`.
                    "damping" if v == "off" => policy.damping = None,
                    "damping" => {
                        let p: Vec<&str> = v.split('/').collect();
                        assert_eq!(p.len(), 4, "{ctx}: damping=FLAPS/PERIOD/MAX_FOR/QUIET");
                        let d = |s: &str| humantime::parse_duration(s).expect("duration");
                        policy.damping = Some(FlapDamping {
                            flaps: p[0].parse().expect("flaps"),
                            period: d(p[1]),
                            max_for: d(p[2]),
                            quiet: d(p[3]),
                        });
                    }
                    _ => panic!("{ctx}: unknown policy key {k}"),
                }
            }
        }

        fn record(&mut self, finished_at: Millis, (success, class): (bool, Option<FailureClass>)) {
            let t = self.readiness().record(AttemptRecord {
                finished_at,
                success,
                class,
            });
            self.push(t);
        }

        /// `t=TIME COMMAND` or `t=A..B/STEP OUTCOMES`.
        fn at(&mut self, ctx: &str, rest: &str) {
            let (when, what) = rest.split_once(' ').expect("t=TIME COMMAND");
            let what = what.trim();
            if let Some((a, b)) = when.split_once("..") {
                let (b, step) = b.split_once('/').expect("t=A..B/STEP");
                let (a, b, step) = (parse_span(a), parse_span(b), parse_span(step));
                let cycle = parse_cycle(what);
                let mut t = a;
                let mut i = 0;
                while t < b {
                    self.record(BASE + t, cycle[i % cycle.len()]);
                    t += step;
                    i += 1;
                }
                return;
            }
            let at = BASE + parse_span(when);
            if what == "tick" {
                let t = self.readiness().evaluate(at);
                self.push(t);
            } else if what == "approve" {
                let res = self.readiness().approve(at);
                self.push(Some(res.unwrap_or_else(|e| panic!("{ctx}: {e}"))));
            } else if let Some(state) = what.strip_prefix("approve -> error ") {
                let err = self.readiness().approve(at).expect_err(ctx);
                assert_eq!(err.state, parse_state(state), "{ctx}");
                assert!(err.to_string().contains(state), "{ctx}: {err}");
            } else {
                let (success, class, _) = parse_outcome(what);
                self.record(at, (success, class));
            }
        }

        /// Snapshot → JSON → restore.
        fn restart(&mut self) {
            let policy = self.policy.clone();
            let r = self.readiness();
            let json = serde_json::to_string(&r.snapshot()).expect("serialise");
            let snap: Snapshot = serde_json::from_str(&json).expect("deserialise");
            *r = Readiness::restore(policy, snap);
        }

        fn expect(&mut self, ctx: &str, rest: &str) {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let r = self.readiness();
            match words.as_slice() {
                ["value", v] => {
                    let want = match *v {
                        "none" => None,
                        v => Some(v.parse::<f64>().expect("value")),
                    };
                    assert_eq!(r.published_value(), want, "{ctx}");
                }
                ["holding", which, rest @ ..] => {
                    let (u, rd_) = r.holding();
                    let got = if *which == "unready" { u } else { rd_ };
                    let want = match rest {
                        ["none"] => None,
                        ["since", t] => Some(BASE + parse_span(t)),
                        _ => panic!("{ctx}: want `since T` or `none`"),
                    };
                    assert_eq!(got, want, "{ctx}");
                }
                ["suspect", rest @ ..] => {
                    let since = |t: &str| BASE + parse_span(t);
                    let want = match rest {
                        ["none"] => None,
                        ["unready"] => Some(Suspect::Unready),
                        ["unready_holding", "since", t] => Some(Suspect::UnreadyHolding(since(t))),
                        ["ready_holding", "since", t] => Some(Suspect::ReadyHolding(since(t))),
                        _ => panic!("{ctx}: want `none`, `unready` or `WHICH_holding since T`"),
                    };
                    assert_eq!(r.suspect(), want, "{ctx}");
                }
                ["transition", from, "->", to, "at", t] => {
                    let tr = self
                        .unchecked
                        .pop_front()
                        .unwrap_or_else(|| panic!("{ctx}: no transition happened"));
                    let got = (tr.from, tr.to, tr.at - BASE);
                    let want = (parse_state(from), parse_state(to), parse_span(t));
                    assert_eq!(got, want, "{ctx}: {tr:#?}");
                }
                ["deadline", rest @ ..] => {
                    let want = match rest {
                        ["none"] => None,
                        [t] => Some(BASE + parse_span(t)),
                        _ => panic!("{ctx}: want `deadline T` or `deadline none`"),
                    };
                    assert_eq!(r.next_deadline(), want, "{ctx}");
                }
                ["no", "transition"] => {
                    let unchecked = &self.unchecked;
                    assert!(unchecked.is_empty(), "{ctx}: unexpected {unchecked:#?}");
                }
                ["evidence", which, fields @ ..] => self.expect_evidence(ctx, which, fields),
                ["damping", rest @ ..] => {
                    let tr = self
                        .last
                        .as_ref()
                        .unwrap_or_else(|| panic!("{ctx}: no transition"));
                    let want = match rest {
                        ["none"] => None,
                        [flaps, ready_for] => Some(DampingEvidence {
                            recent_flaps: flaps.parse().expect("flaps"),
                            ready_for_ms: parse_span(ready_for) as u64,
                        }),
                        _ => panic!("{ctx}: want `expect damping FLAPS READY_FOR` or `none`"),
                    };
                    assert_eq!(tr.damping, want, "{ctx}");
                }
                ["reason", "contains", ..] => {
                    let text = rest.trim_start_matches("reason contains").trim();
                    let tr = self
                        .last
                        .as_ref()
                        .unwrap_or_else(|| panic!("{ctx}: no transition"));
                    assert!(tr.reason.contains(text), "{ctx}: reason = {:?}", tr.reason);
                }
                [state] => assert_eq!(r.state(), parse_state(state), "{ctx}"),
                _ => panic!("{ctx}: unknown expectation"),
            }
        }

        /// `expect evidence unready|ready KEY=VALUE…` of the last transition.
        fn expect_evidence(&self, ctx: &str, which: &str, fields: &[&str]) {
            let tr = self
                .last
                .as_ref()
                .unwrap_or_else(|| panic!("{ctx}: no transition"));
            let w = if which == "unready" {
                &tr.unready_window
            } else {
                &tr.ready_window
            };
            for f in fields {
                let (k, v) = f.split_once('=').expect("evidence key=value");
                match k {
                    "finished" => assert_eq!(w.finished.to_string(), v, "{ctx}"),
                    "failed" => assert_eq!(w.failed.to_string(), v, "{ctx}"),
                    "rate" => assert_eq!(
                        w.success_rate_percent,
                        Some(v.parse::<f64>().expect("rate")),
                        "{ctx}"
                    ),
                    "classes" => {
                        let want: Vec<(FailureClass, u32)> = v
                            .split(',')
                            .map(|c| {
                                let (c, n) = c.split_once(':').expect("class:count");
                                (parse_class(c), n.parse().expect("count"))
                            })
                            .collect();
                        assert_eq!(w.failure_classes, want, "{ctx}");
                    }
                    _ => panic!("{ctx}: unknown evidence key {k}"),
                }
            }
        }
    }

    // ---------------------------------------------------------------- scenarios

    #[test]
    fn healthy_stays_ready() {
        check(
            "
            t=0s..30m/2s ok
            t=30m tick
            expect ready
            expect value 1
            expect holding unready none
            # sparse noise: one failure every 2 minutes never brings a 60s window below 95%
            t=30m..60m/2s [ok*59, fail tcp_reset]
            t=60m tick
            expect ready
            expect value 1
            expect holding unready none
            expect no transition
            ",
        );
    }

    /// Suspect from the first evaluation where the unready condition holds until it fires or
    /// stops holding; then for the whole unready spell; never while ready and healthy.
    #[test]
    fn a_branch_is_suspect_while_a_condition_holds_and_while_unready() {
        check(
            "
            t=0s..10m/2s ok
            expect suspect none
            # one failure of 30 (96.7%) does not make the unready condition hold
            t=10m fail tcp_timeout
            expect suspect none
            t=10m2s fail tcp_timeout
            expect suspect unready_holding since 10m2s
            # the failures leave the window: no longer suspect
            t=10m4s..11m4s/2s ok
            expect suspect none
            t=11m4s..14m8s/2s fail tcp_timeout
            expect transition ready -> unready at 14m6s
            expect suspect unready
            t=14m8s..15m8s/2s ok
            expect suspect unready
            # one failure of 150 in the 5m ready window is 99.3%: it holds from then on
            t=15m8s..19m30s/2s ok
            expect suspect ready_holding since 19m4s
            t=19m30s..29m/2s ok
            expect suspect ready_holding since 19m4s
            t=29m..29m6s/2s ok
            expect transition unready -> ready at 29m4s
            expect suspect none
            ",
        );
    }

    /// In pending_approval a branch is suspect while either condition holds without having
    /// fired; once the ready condition held its `for` again it waits for the operator only.
    #[test]
    fn pending_approval_is_suspect_until_the_ready_for_has_passed_again() {
        check(
            "
            policy initial=unready approval=required min_attempts=10 unready=95%/3m/60s ready=99%/10m/5m
            t=0s..10m/2s ok
            expect suspect ready_holding since 18s
            t=10m..10m22s/2s ok
            expect transition unready -> pending_approval at 10m18s
            expect suspect ready_holding since 10m20s
            t=10m20s..20m22s/2s ok
            expect suspect none
            t=20m22s..20m26s/2s fail tcp_reset
            expect suspect unready_holding since 20m24s
            ",
        );
    }

    #[test]
    fn read_only_primary_goes_unready_only_after_full_for() {
        check(
            "
            t=0s..10m/2s ok
            # from 10m2s the 60s window holds 2 failures of 30: 93.3% < 95%
            t=10m..13m2s/2s fail server_read_only
            expect ready
            expect value 1
            expect holding unready since 10m2s
            t=13m2s fail server_read_only
            expect transition ready -> unready at 13m2s
            expect unready
            expect value 0
            expect holding unready none
            expect reason contains success rate 0.0% < 95.0% over the last 1m (30 attempts, 30 failed: server_read_only=30) held for 3m (required 3m, since 2023-11-14T22:23:22.000Z)
            ",
        );
    }

    #[test]
    fn one_good_evaluation_resets_the_for_clock() {
        check(
            "
            policy min_attempts=3 unready=95%/3m/10s
            t=0s..2m/2s fail server_read_only
            expect holding unready since 4s
            t=2m..2m8s/2s ok      # the 10s windows still hold failures
            expect holding unready since 4s
            t=2m8s ok             # window (1m58s, 2m8s] holds successes only
            expect holding unready none
            t=2m10s..5m10s/2s fail server_read_only
            expect ready          # would have fired at 3m4s without the reset
            expect holding unready since 2m10s
            t=5m10s fail server_read_only
            expect transition ready -> unready at 5m10s
            ",
        );
    }

    #[test]
    fn no_evidence_evaluation_resets_the_for_clock() {
        check(
            "
            t=0s..2m/2s fail server_read_only
            expect holding unready since 18s
            # the probe stalls; a publish tick sees 4 attempts < min_attempts
            t=2m50s tick
            expect holding unready none
            t=2m50s..6m8s/2s fail server_read_only
            expect ready
            expect holding unready since 3m8s
            t=6m8s fail server_read_only
            expect transition ready -> unready at 6m8s
            ",
        );
    }

    #[test]
    fn min_attempts_not_met_means_no_transition() {
        check(
            "
            # 6 attempts per 60s window < min_attempts 10
            t=0s..30m/10s fail server_gone_away
            t=30m tick
            expect ready
            expect holding unready none
            expect no transition
            ",
        );
        check(
            "
            policy initial=unknown
            # at most 8 attempts per 5m window
            t=0s..30m/40s ok
            t=30m tick
            expect unknown
            expect value none
            expect holding ready none
            ",
        );
    }

    #[test]
    fn read_only_writer_is_unready_after_definitive_for() {
        check(
            "
            policy definitive=20s
            t=0s..10m2s/2s ok
            # read-only after the success at 10m: the first failure finishes at 10m2s
            t=10m2s..10m22s/2s fail server_read_only
            expect ready
            expect holding unready since 10m4s
            # 11 read-only failures from 10m2s to 10m22s: the first 20s before the last
            t=10m22s fail server_read_only
            expect transition ready -> unready at 10m22s
            expect reason contains held for 18s (required 3m, since
            expect reason contains definitive rule fired: the last 11 attempts failed with a definitive class (server_read_only=11), the first 20s ago (required 20s)
            ",
        );
    }

    /// The deciding attempt ends 1 ms before the `for` runs out and no other comes: the rule
    /// fires at the deadline, not an interval later.
    #[test]
    fn the_unready_for_fires_when_it_runs_out_not_at_the_next_attempt() {
        check(
            "
            t=0s..60s/2s ok
            t=60s..4m/2s fail tcp_timeout
            expect holding unready since 62s
            expect deadline 4m2s
            t=4m1999ms fail tcp_timeout
            expect no transition
            expect deadline 4m2s
            wake
            expect transition ready -> unready at 4m2s
            expect reason contains held for 3m (required 3m, since
            expect deadline none
            ",
        );
    }

    #[test]
    fn the_definitive_rule_fires_when_definitive_for_runs_out() {
        check(
            "
            policy definitive=20s
            t=0s..10m2s/2s ok
            t=10m2s..10m22s/2s fail server_read_only
            # the `for` runs out at 13m4s, definitive_for (from the first failure) at 10m22s
            expect holding unready since 10m4s
            expect deadline 10m22s
            t=10m21999ms fail server_read_only
            expect no transition
            wake
            expect transition ready -> unready at 10m22s
            expect reason contains the last 11 attempts failed with a definitive class (server_read_only=11), the first 20s ago (required 20s)
            expect deadline none
            ",
        );
    }

    /// One definitive failure has no definitive deadline: only the `for` runs.
    #[test]
    fn a_lone_definitive_failure_sets_only_the_for_deadline() {
        check(
            "
            policy definitive=20s min_attempts=1 unready=99%/3m/60s
            t=0s..60s/2s ok
            t=60s fail server_read_only
            expect holding unready since 60s
            expect deadline 4m
            t=80s tick
            expect no transition
            ",
        );
    }

    /// The ready rule's time runs out while the unready condition fires too (unready wins, no
    /// transition): the deadline is spent, never handed out again.
    #[test]
    fn a_deadline_that_made_no_transition_is_not_handed_out_again() {
        check(
            "
            policy initial=unready min_attempts=1 unready=95%/1m/60s ready=40%/2m/60s
            t=0s..1m59s/2s [ok, fail]
            expect holding ready since 0s
            expect deadline 2m
            wake
            expect no transition
            expect unready
            expect holding ready since 0s
            expect deadline none
            ",
        );
    }

    /// A damped ready `for` shortens when flaps are forgotten on the way: the deadline is the
    /// first instant the ready condition has held the `for` in force then.
    #[test]
    fn the_damped_ready_deadline_counts_flaps_forgotten_on_the_way() {
        let mut policy = flapping_policy(damping("8m", "10m"));
        if let Some(d) = policy.damping.as_mut() {
            // The first flap (at 34s) is forgotten at 12m35s, between the two `for`s' ends (the
            // recovery's ready condition holds from 10m12s) and off the 2s grid of attempts.
            d.period = Duration::from_secs(721);
        }
        let mut r = Readiness::new(policy.clone());
        let mut t = BASE;
        let mut flaps = Vec::new();
        for _ in 0..4 {
            flaps.push(flap(&mut r, &mut t).0.at);
        }
        let down = run_until(&mut r, &mut t, false, ReadinessState::Unready);
        flaps.push(down.at);
        assert_eq!(down.damping, evidence(5, "4m"), "{down:#?}");
        // Successes every 2s, and a wake-up at every deadline that comes before the next one.
        let up = loop {
            if let Some(tr) = r
                .next_deadline()
                .filter(|d| *d < t)
                .and_then(|d| r.evaluate(d))
            {
                break tr;
            }
            assert!(t - down.at < 3_600 * S, "no recovery");
            if let Some(tr) = r.record(attempt(t, None)) {
                break tr;
            }
            t += 2 * S;
        };
        let since = up.held_since.expect("held_since");
        // Brute force: the first whole second at which the `for` in force then has been held.
        let mut want = since;
        while want - since < brute_ready_for(&flaps, want, &policy) {
            want += S;
        }
        assert_eq!(up.at, want, "{up:#?}");
        assert_eq!(up.at - BASE, 755 * S, "{up:#?}");
    }

    #[test]
    fn ambiguous_failures_wait_for_the_full_for() {
        check(
            "
            policy definitive=20s
            t=0s..10m/2s ok
            # a 90s burst of timeouts: well past definitive_for, short of for
            t=10m..11m30s/2s fail tcp_timeout
            t=11m30s..20m/2s ok
            expect ready
            expect no transition
            # definitive failures mixed with timeouts: no span of definitive failures only
            t=20m..23m/2s [fail server_read_only*5, fail tcp_timeout]
            expect ready
            t=23m..23m4s/2s fail tcp_timeout
            expect transition ready -> unready at 23m2s
            expect reason contains required 3m
            ",
        );
    }

    #[test]
    fn one_definitive_failure_among_successes_never_fires() {
        check(
            "
            # one failure in a 60s window at 5s already holds the unready condition
            policy min_attempts=3 definitive=10s
            t=0s..30m/5s [ok*13, fail server_read_only, ok*13, fail auth_denied]
            t=30m tick
            expect ready
            expect no transition
            # two definitive failures 5s apart, then the probe stalls: nothing contradicts the
            # run, so it fires 10s after its first while the unready condition holds (since the
            # cycle's failure at 29m5s)
            t=30m fail server_read_only
            t=30m5s fail server_read_only
            expect holding unready since 29m5s
            expect deadline 30m10s
            wake
            expect transition ready -> unready at 30m10s
            expect reason contains the last 2 attempts failed with a definitive class (server_read_only=2), the first 10s ago (required 10s)
            ",
        );
    }

    #[test]
    fn classes_outside_the_list_are_not_definitive() {
        check(
            "
            policy definitive=20s/server_read_only
            t=0s..10m/2s ok
            t=10m..13m/2s fail auth_denied
            expect ready
            t=13m..13m4s/2s fail auth_denied
            expect transition ready -> unready at 13m2s
            expect reason contains required 3m
            ",
        );
        check(
            "
            policy definitive=20s/
            t=0s..10m/2s ok
            t=10m..13m/2s fail server_read_only
            expect ready
            ",
        );
    }

    /// Shared prefix: ready, then unready at 3m18s, then successes.
    const OUTAGE: &str = "
        t=0s..3m18s/2s fail tcp_timeout
        t=3m18s fail tcp_timeout
        expect transition ready -> unready at 3m18s
        expect holding ready none
    ";

    #[test]
    fn recovery_to_ready_only_after_ready_for() {
        check(&format!(
            "{OUTAGE}
            # from 8m16s the 5m window holds 1 failure of 150: 99.3% >= 99%
            t=3m20s..18m16s/2s ok
            expect unready
            expect value 0
            expect holding ready since 8m16s
            t=18m16s ok
            expect transition unready -> ready at 18m16s
            expect value 1
            expect evidence ready finished=150 failed=0 rate=100
            expect reason contains success rate 100.0% >= 99.0% over the last 5m (150 attempts, 0 failed) held for 10m
            "
        ));
    }

    #[test]
    fn approval_required_goes_pending_then_approve_makes_ready() {
        check(&format!(
            "policy approval=required
            {OUTAGE}
            t=3m20s..18m16s/2s ok
            t=18m16s ok
            expect transition unready -> pending_approval at 18m16s
            expect pending_approval
            expect value 0
            expect reason contains operator approval required
            t=18m18s..30m/2s ok
            expect pending_approval
            expect no transition
            t=30m approve
            expect transition pending_approval -> ready at 30m
            expect ready
            expect value 1
            expect holding ready none
            expect reason contains operator approved readiness (pending approval since 2023-11-14T22:31:36.000Z)
            t=30m..40m/2s ok
            expect ready
            "
        ));
    }

    #[test]
    fn approve_outside_pending_approval_is_an_error() {
        check(
            "
            t=0s..1m/2s ok
            t=1m approve -> error ready
            t=1m..4m2s/2s fail server_read_only
            t=4m2s fail server_read_only
            expect transition ready -> unready at 4m2s
            t=4m3s approve -> error unready
            expect unready
            ",
        );
        check(
            "
            policy initial=unknown approval=required
            t=0s approve -> error unknown
            expect unknown
            ",
        );
    }

    #[test]
    fn pending_approval_falls_back_to_unready() {
        check(&format!(
            "policy approval=required
            {OUTAGE}
            t=3m20s..18m16s/2s ok
            t=18m16s ok
            expect transition unready -> pending_approval at 18m16s
            t=18m18s..20m/2s ok
            expect holding unready none
            t=20m..23m2s/2s fail server_read_only
            expect pending_approval
            expect holding unready since 20m2s
            t=23m2s fail server_read_only
            expect transition pending_approval -> unready at 23m2s
            t=23m4s approve -> error unready
            "
        ));
    }

    #[test]
    fn unknown_to_ready() {
        check(
            "
            policy initial=unknown
            t=0s..10m18s/2s ok
            expect unknown
            expect value none
            expect holding ready since 18s
            t=10m18s ok
            expect transition unknown -> ready at 10m18s
            expect value 1
            ",
        );
    }

    #[test]
    fn unknown_to_unready() {
        check(
            "
            policy initial=unknown approval=required
            t=0s..3m18s/2s fail dns_servfail
            expect unknown
            expect value none
            t=3m18s fail dns_servfail
            expect transition unknown -> unready at 3m18s
            expect value 0
            ",
        );
    }

    #[test]
    fn both_conditions_fire_unready_wins() {
        check(
            "
            policy initial=unknown min_attempts=4 unready=99%/0s/60s ready=50%/0s/60s
            t=0s..6s/2s ok
            expect unknown
            t=6s fail server_error           # 75%: both conditions hold and fire
            expect transition unknown -> unready at 6s
            t=8s..1m6s/2s ok                 # both hold; in unready, unready still wins
            expect unready
            t=1m6s ok                        # the failure left the window
            expect transition unready -> ready at 1m6s
            ",
        );
    }

    #[test]
    fn transition_evidence_lists_dominant_failure_classes() {
        check(
            "
            t=0s..3m20s/2s [fail server_read_only*3, fail tcp_reset, ok]
            expect transition ready -> unready at 3m18s
            expect evidence unready finished=30 failed=24 rate=20 classes=server_read_only:18,tcp_reset:6
            expect evidence ready finished=100 failed=80 classes=server_read_only:60,tcp_reset:20
            expect reason contains success rate 20.0% < 95.0% over the last 1m (30 attempts, 24 failed: server_read_only=18, tcp_reset=6)
            ",
        );
    }

    #[test]
    fn restore_from_snapshot_continues_the_for_clock() {
        check(
            "
            t=0s..2m/2s fail server_read_only
            expect holding unready since 18s
            restart
            expect ready
            expect holding unready since 18s
            t=2m..3m18s/2s fail server_read_only
            restart
            expect holding unready since 18s
            t=3m18s fail server_read_only
            expect transition ready -> unready at 3m18s
            restart
            expect unready
            expect value 0
            t=3m20s approve -> error unready
            ",
        );
    }

    // ---------------------------------------------------------------- unit tests

    fn attempt(t: Millis, class: Option<FailureClass>) -> AttemptRecord {
        AttemptRecord {
            finished_at: t,
            success: class.is_none(),
            class,
        }
    }

    #[test]
    fn window_stats_bounds_and_class_order() {
        let mut r = Readiness::new(default_policy());
        let c = FailureClass::TcpReset;
        let d = FailureClass::DnsTimeout;
        for (t, class) in [
            (0, None),
            (1, Some(c)),
            (2, Some(d)),
            (3, None),
            (4, Some(c)),
            (5, Some(d)),
            (6, None),
        ] {
            r.record(attempt(BASE + t * S, class));
        }
        // (0s, 6s]: excludes the attempt at 0s, includes the one at 6s.
        let w = r.window_stats(BASE + 6 * S, Duration::from_secs(6));
        assert_eq!(w.window_ms, 6000);
        assert_eq!((w.finished, w.failed), (6, 4));
        // Equal counts: ordered by class (DnsTimeout is declared before TcpReset).
        assert_eq!(w.failure_classes, vec![(d, 2), (c, 2)]);
        let rate = w.success_rate_percent.expect("rate");
        assert!((rate - 100.0 / 3.0).abs() < 1e-9, "{rate}");
        let empty = r.window_stats(BASE + 100 * S, Duration::from_secs(10));
        assert_eq!((empty.finished, empty.success_rate_percent), (0, None));
        // A failure without a class counts as failed but lists no class.
        r.record(AttemptRecord {
            finished_at: BASE + 7 * S,
            success: false,
            class: None,
        });
        let w = r.window_stats(BASE + 7 * S, Duration::from_millis(500));
        assert_eq!((w.finished, w.failed, w.failure_classes.len()), (1, 1, 0));
    }

    #[test]
    fn out_of_order_attempts_are_sorted_and_time_never_goes_back() {
        let mut r = Readiness::new(default_policy());
        r.record(attempt(BASE + 10 * S, None));
        r.record(attempt(BASE + 5 * S, Some(FailureClass::TcpReset)));
        r.evaluate(BASE); // earlier than the latest evaluation: evaluated at 10s
        let snap = r.snapshot();
        let times: Vec<Millis> = snap.attempts.iter().map(|a| a.finished_at - BASE).collect();
        assert_eq!(times, vec![5 * S, 10 * S]);
        // An attempt older than every window is dropped at once.
        r.record(attempt(BASE - 3600 * S, None));
        assert_eq!(r.snapshot().attempts.len(), 2);
    }

    #[test]
    fn attempts_are_pruned_to_the_largest_window() {
        let mut r = Readiness::new(default_policy());
        for i in 0..10_000 {
            r.record(attempt(BASE + i * S, None));
        }
        // Ready window 5m at 1 attempt/s.
        assert_eq!(r.snapshot().attempts.len(), 300);
        r.evaluate(BASE + 20_000 * S);
        assert!(r.snapshot().attempts.is_empty());
    }

    /// A snapshot dated an hour ahead must not freeze the state: restored clamped, a branch
    /// failing every attempt still becomes unready after the `for`.
    #[test]
    fn a_snapshot_from_the_future_does_not_freeze_readiness() {
        let now: Millis = 1_000_000_000;
        let ahead = now + 3_600_000;
        let snap = Snapshot {
            state: ReadinessState::Ready,
            since: Some(ahead),
            unready_holding_since: None,
            ready_holding_since: Some(ahead),
            attempts: (0..30)
                .map(|i| AttemptRecord {
                    finished_at: ahead - i * 2_000,
                    success: true,
                    class: None,
                })
                .collect(),
            flaps: vec![],
        };
        let fail_for_5m = |r: &mut Readiness| {
            (1..=150)
                .filter_map(|i| {
                    r.record(AttemptRecord {
                        finished_at: now + i * 2_000,
                        success: false,
                        class: Some(FailureClass::ServerReadOnly),
                    })
                })
                .count()
        };
        let mut unclamped = Readiness::restore(default_policy(), snap.clone());
        assert_eq!(
            fail_for_5m(&mut unclamped),
            0,
            "the defect this guards against"
        );
        let mut r = Readiness::restore(default_policy(), snap.clamped(now));
        assert_eq!(r.since(), Some(now));
        assert_eq!(fail_for_5m(&mut r), 1);
        assert_eq!(r.state(), ReadinessState::Unready);
    }

    #[test]
    fn pending_restored_without_approval_continues_as_unready() {
        let mut p = default_policy();
        p.approval_required = true;
        let snap = Snapshot {
            state: ReadinessState::PendingApproval,
            since: Some(1),
            unready_holding_since: None,
            ready_holding_since: Some(1),
            attempts: vec![],
            flaps: vec![],
        };
        assert_eq!(
            Readiness::restore(p.clone(), snap.clone()).state(),
            ReadinessState::PendingApproval
        );
        p.approval_required = false;
        let r = Readiness::restore(p, snap);
        assert_eq!(r.state(), ReadinessState::Unready);
        assert_eq!(r.holding().1, None);
    }

    // ------------------------------------------------------------ flap damping

    /// Short conditions (unready 30s over 10s, ready 1m over 30s, attempts every 2s) so one flap
    /// and its recovery take about two minutes.
    fn flapping_policy(damping: Option<FlapDamping>) -> Policy {
        Policy {
            min_attempts: 3,
            declare_unready: parse_condition("95%/30s/10s"),
            declare_ready: parse_condition("99%/1m/30s"),
            damping,
            ..default_policy()
        }
    }

    /// More than 3 flaps in 1h double the ready `for`, up to `max_for`; `quiet` resets.
    fn damping(max_for: &str, quiet: &str) -> Option<FlapDamping> {
        Some(FlapDamping {
            flaps: 3,
            period: Duration::from_secs(3600),
            max_for: humantime::parse_duration(max_for).expect("max_for"),
            quiet: humantime::parse_duration(quiet).expect("quiet"),
        })
    }

    /// Records attempts every 2s from `*t` until one makes a transition, which must lead to `to`.
    fn run_until(
        r: &mut Readiness,
        t: &mut Millis,
        success: bool,
        to: ReadinessState,
    ) -> Transition {
        for _ in 0..1000 {
            let a = AttemptRecord {
                finished_at: *t,
                success,
                class: (!success).then_some(FailureClass::TcpTimeout),
            };
            *t += 2 * S;
            if let Some(tr) = r.record(a) {
                assert_eq!(tr.to, to, "{tr:#?}");
                return tr;
            }
        }
        panic!("no transition to {to} within 1000 attempts");
    }

    /// One flap and its recovery: `(the unready transition, the ready one)`.
    fn flap(r: &mut Readiness, t: &mut Millis) -> (Transition, Transition) {
        let down = run_until(r, t, false, ReadinessState::Unready);
        let up = run_until(r, t, true, ReadinessState::Ready);
        (down, up)
    }

    fn evidence(flaps: u32, ready_for: &str) -> Option<DampingEvidence> {
        Some(DampingEvidence {
            recent_flaps: flaps,
            ready_for_ms: parse_span(ready_for) as u64,
        })
    }

    #[test]
    fn a_flapping_branch_waits_a_doubling_ready_for_up_to_the_cap() {
        let mut r = Readiness::new(flapping_policy(damping("5m", "1h")));
        let mut t = BASE;
        // Flaps 1–3 are tolerated; the 4th doubles the 1m, the 5th doubles again, the 6th and 7th
        // hit the 5m cap.
        let want = [
            ("1m", None),
            ("1m", None),
            ("1m", None),
            ("2m", evidence(4, "2m")),
            ("4m", evidence(5, "4m")),
            ("5m", evidence(6, "5m")),
            ("5m", evidence(7, "5m")),
        ];
        for (i, (wait, ev)) in want.into_iter().enumerate() {
            let (down, up) = flap(&mut r, &mut t);
            let ctx = format!("flap {}", i + 1);
            assert_eq!(down.damping, ev, "{ctx}: {down:#?}");
            assert_eq!(up.damping, ev, "{ctx}: {up:#?}");
            let held = up.at - up.held_since.expect("held_since");
            assert_eq!(held, parse_span(wait), "{ctx}: {up:#?}");
            assert!(
                up.reason.contains(&format!("(required {wait},")),
                "{ctx}: {}",
                up.reason
            );
            assert_eq!(
                up.reason.contains("flap damping"),
                ev.is_some(),
                "{ctx}: {}",
                up.reason
            );
        }
        assert!(
            t - BASE < parse_span("1h"),
            "the flaps all fit in the period"
        );
    }

    #[test]
    fn damping_reasons_say_what_was_applied() {
        let mut r = Readiness::new(flapping_policy(damping("5m", "1h")));
        let mut t = BASE;
        for _ in 0..3 {
            flap(&mut r, &mut t);
        }
        let (down, up) = flap(&mut r, &mut t);
        assert!(
            down.reason.ends_with("; flap damping: 4 ready → unready flaps within 1h (more than 3): the ready condition now needs 2m (for 1m × 2^1, at most 5m)"),
            "{}",
            down.reason
        );
        assert!(
            up.reason.ends_with("; flap damping: 4 ready → unready flaps within 1h (more than 3): the ready condition needed 2m (for 1m × 2^1, at most 5m)"),
            "{}",
            up.reason
        );
    }

    #[test]
    fn without_damping_every_recovery_waits_the_ready_for() {
        let mut r = Readiness::new(flapping_policy(None));
        let mut t = BASE;
        for _ in 0..7 {
            let (down, up) = flap(&mut r, &mut t);
            assert_eq!((down.damping, up.damping.clone()), (None, None));
            assert_eq!(up.at - up.held_since.expect("held_since"), parse_span("1m"));
        }
        assert_eq!(r.snapshot().flaps, Vec::<Millis>::new());
    }

    #[test]
    fn a_quiet_period_forgets_the_flaps() {
        check(
            "
            policy min_attempts=3 unready=95%/30s/10s ready=99%/1m/30s damping=3/1h/5m/10m
            t=0s..30s/2s ok
            t=30s..1m2s/2s fail tcp_timeout
            expect transition ready -> unready at 1m
            t=1m2s..2m32s/2s ok
            expect transition unready -> ready at 2m30s
            t=2m32s..3m4s/2s fail tcp_timeout
            expect transition ready -> unready at 3m2s
            t=3m4s..4m34s/2s ok
            expect transition unready -> ready at 4m32s
            t=4m34s..5m6s/2s fail tcp_timeout
            expect transition ready -> unready at 5m4s
            t=5m6s..6m36s/2s ok
            expect transition unready -> ready at 6m34s
            expect damping none
            t=6m36s..7m8s/2s fail tcp_timeout
            expect transition ready -> unready at 7m6s
            expect damping 4 2m
            t=7m8s..9m38s/2s ok           # holds from 7m36s, for 2m
            expect transition unready -> ready at 9m36s
            expect damping 4 2m
            # 12m54s after the 4th flap: quiet (10m) forgets all four
            t=9m38s..20m/2s ok
            t=20m..20m32s/2s fail tcp_timeout
            expect transition ready -> unready at 20m30s
            expect damping none
            t=20m32s..22m2s/2s ok
            expect transition unready -> ready at 22m
            expect damping none
            ",
        );
    }

    #[test]
    fn flap_history_survives_a_restart() {
        check(
            "
            policy min_attempts=3 unready=95%/30s/10s ready=99%/1m/30s damping=3/1h/5m/1h
            t=0s..30s/2s ok
            t=30s..1m2s/2s fail tcp_timeout
            expect transition ready -> unready at 1m
            t=1m2s..2m32s/2s ok
            expect transition unready -> ready at 2m30s
            t=2m32s..3m4s/2s fail tcp_timeout
            expect transition ready -> unready at 3m2s
            t=3m4s..4m34s/2s ok
            expect transition unready -> ready at 4m32s
            restart
            t=4m34s..5m6s/2s fail tcp_timeout
            expect transition ready -> unready at 5m4s
            t=5m6s..6m36s/2s ok
            expect transition unready -> ready at 6m34s
            t=6m36s..7m8s/2s fail tcp_timeout
            expect transition ready -> unready at 7m6s
            expect damping 4 2m
            restart
            t=7m8s..9m38s/2s ok           # holds from 7m36s, for 2m: not the 1m of a fresh start
            expect transition unready -> ready at 9m36s
            expect damping 4 2m
            ",
        );
    }

    #[test]
    fn a_snapshot_without_flaps_loads_and_writes_none() {
        let json = r#"{"state":"ready","since":5,"unready_holding_since":null,"ready_holding_since":null,"attempts":[]}"#;
        let snap: Snapshot = serde_json::from_str(json).expect("an older snapshot loads");
        assert_eq!(snap.flaps, Vec::<Millis>::new());
        assert_eq!(serde_json::to_string(&snap).expect("serialise"), json);
    }

    #[test]
    fn damped_ready_for_arithmetic() {
        let d = FlapDamping {
            flaps: 3,
            period: Duration::from_secs(3600),
            max_for: Duration::from_secs(3600),
            quiet: Duration::from_secs(3600),
        };
        let m = |n: u64| Duration::from_secs(60 * n);
        for (counted, want) in [
            (0, m(10)),
            (3, m(10)),
            (4, m(20)),
            (5, m(40)),
            (6, m(60)),
            (40, m(60)),
            (u32::MAX, m(60)),
        ] {
            assert_eq!(d.ready_for(m(10), counted), want, "{counted} flaps");
        }
        assert_eq!(d.ready_for(Duration::ZERO, 9), Duration::ZERO);
        // A cap below the condition's own `for` never shortens it.
        assert_eq!(d.ready_for(m(90), 5), m(90));
    }

    #[test]
    fn readiness_state_prints_its_serialised_name() {
        use strum::IntoEnumIterator;
        for s in ReadinessState::iter() {
            let json = serde_json::to_value(s).expect("json");
            assert_eq!(json, serde_json::Value::String(s.to_string()), "{s:?}");
            assert_eq!(s.as_str(), s.to_string());
            assert_eq!(
                serde_json::from_value::<ReadinessState>(json).expect("back"),
                s
            );
        }
        assert_eq!(ReadinessState::PendingApproval.as_str(), "pending_approval");
    }

    #[test]
    fn published_values() {
        use strum::IntoEnumIterator;
        for s in ReadinessState::iter() {
            let mut p = default_policy();
            p.initial = s;
            let r = Readiness::new(p);
            assert_eq!((r.state(), r.since()), (s, None));
        }
        assert_eq!(ReadinessState::Ready.published_value(), Some(1.0));
        assert_eq!(ReadinessState::Unready.published_value(), Some(0.0));
        assert_eq!(ReadinessState::PendingApproval.published_value(), Some(0.0));
        assert_eq!(ReadinessState::Unknown.published_value(), None);
        assert_eq!(reason::fmt_percent(80.0), "80.0");
        assert_eq!(reason::fmt_percent(100.0 * 29.0 / 30.0), "96.67");
        assert_eq!(reason::fmt_percent(95.5), "95.5");
    }

    #[test]
    fn threshold_boundaries_are_exact() {
        // 99 of 100 is exactly 99% (ready holds); 19 of 20 is exactly 95% (unready does not).
        let mut p = default_policy();
        p.initial = ReadinessState::Unknown;
        p.declare_ready.for_ = Duration::ZERO;
        p.declare_unready.for_ = Duration::ZERO;
        p.declare_unready.window = Duration::from_secs(20);
        p.declare_ready.window = Duration::from_secs(100);
        let mut r = Readiness::new(p);
        let mut last = None;
        for i in 0..100 {
            let class = (i == 50).then_some(FailureClass::ServerError);
            last = r.record(attempt(BASE + i * S + S, class)).or(last);
            assert_ne!(r.state(), ReadinessState::Unready, "at {i}");
        }
        let t = last.expect("unknown -> ready");
        assert_eq!((t.to, t.at), (ReadinessState::Ready, BASE + 10 * S));
        // At 99s the ready window holds 98 of 99 (98.99%); at 100s 99 of 100, exactly 99%.
        assert_eq!(r.holding(), (None, Some(BASE + 100 * S)));
        let w = r.window_stats(BASE + 100 * S, Duration::from_secs(100));
        assert_eq!(w.success_rate_percent, Some(99.0));
    }

    // ---------------------------------------------------------------- properties

    const CLASSES: [FailureClass; 4] = [
        FailureClass::ServerReadOnly,
        FailureClass::TcpTimeout,
        FailureClass::DnsServfail,
        FailureClass::AuthDenied,
    ];

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Ev {
        Attempt(AttemptRecord),
        Tick(Millis),
        Approve(Millis),
    }

    /// A stretch of attempts at a fixed interval with a fixed failure pattern.
    #[derive(Debug, Clone)]
    struct Phase {
        count: u16,
        gap_ms: i64,
        /// 0: never fails; k: every k-th attempt fails.
        fail_every: u16,
        class: usize,
        /// 0: no ticks; k: a publish tick after every k-th attempt.
        tick_every: u16,
        approve_at_end: bool,
    }

    fn arb_phase() -> impl Strategy<Value = Phase> {
        (
            1u16..40,
            500i64..5000,
            prop::sample::select(vec![0u16, 0, 1, 1, 2, 3, 5, 10, 20, 50]),
            0..CLASSES.len(),
            0u16..4,
            prop::bool::weighted(0.3),
        )
            .prop_map(
                |(count, gap_ms, fail_every, class, tick_every, approve_at_end)| Phase {
                    count,
                    gap_ms,
                    fail_every,
                    class,
                    tick_every,
                    approve_at_end,
                },
            )
    }

    fn ev_time(ev: &Ev) -> Millis {
        match ev {
            Ev::Attempt(a) => a.finished_at,
            Ev::Tick(t) | Ev::Approve(t) => *t,
        }
    }

    /// Events at nondecreasing times starting after `start`.
    fn expand(phases: &[Phase], start: Millis) -> Vec<Ev> {
        let mut evs = Vec::new();
        let mut t = start;
        // Latest event time so far: a tick lies after its attempt, so the next phase's first
        // attempt may not come before it.
        let mut floor = start;
        for p in phases {
            for i in 0..p.count {
                t = (t + p.gap_ms).max(floor);
                floor = t;
                let fail = p.fail_every > 0 && i % p.fail_every == 0;
                evs.push(Ev::Attempt(AttemptRecord {
                    finished_at: t,
                    success: !fail,
                    class: fail.then_some(CLASSES[p.class]),
                }));
                if p.tick_every > 0 && i % p.tick_every == 0 {
                    floor = t + p.gap_ms / 2;
                    evs.push(Ev::Tick(floor));
                }
            }
            if p.approve_at_end {
                evs.push(Ev::Approve(floor));
            }
        }
        evs
    }

    fn arb_condition() -> impl Strategy<Value = Condition> {
        (
            prop::sample::select(vec![50.0, 66.0, 75.0, 90.0, 95.0, 99.0, 100.0]),
            0u64..90,
            1u64..60,
        )
            .prop_map(|(threshold_percent, f, w)| Condition {
                threshold_percent,
                for_: Duration::from_secs(f),
                window: Duration::from_secs(w),
            })
    }

    fn arb_policy() -> impl Strategy<Value = Policy> {
        (
            1u32..12,
            arb_condition(),
            arb_condition(),
            any::<bool>(),
            // The initial states a config can name.
            prop::sample::select(vec![
                ReadinessState::Unknown,
                ReadinessState::Ready,
                ReadinessState::Unready,
            ]),
            prop::option::of((0u64..40, prop::bool::ANY)),
            // flaps, period (s), max_for beyond the ready `for` (s), quiet (percent of period).
            prop::option::of((0u32..3, 10u64..600, 0u64..300, 1u64..=100)),
        )
            .prop_map(
                |(
                    min_attempts,
                    declare_unready,
                    declare_ready,
                    approval_required,
                    initial,
                    def,
                    damp,
                )| {
                    let damping = damp.map(|(flaps, period, extra, quiet)| FlapDamping {
                        flaps,
                        period: Duration::from_secs(period),
                        max_for: declare_ready.for_ + Duration::from_secs(extra),
                        quiet: Duration::from_secs((period * quiet / 100).max(1)),
                    });
                    Policy {
                        min_attempts,
                        declare_unready,
                        declare_ready,
                        approval_required,
                        initial,
                        // Default classes, or only server_read_only.
                        definitive: def.map(|(secs, all)| Definitive {
                            for_: Duration::from_secs(secs),
                            classes: if all {
                                Definitive::default().classes
                            } else {
                                [FailureClass::ServerReadOnly].into_iter().collect()
                            },
                        }),
                        damping,
                    }
                },
            )
    }

    /// Brute force over every attempt ever recorded: does `c` hold at `now`?
    fn brute_holds(
        all: &[AttemptRecord],
        now: Millis,
        c: &Condition,
        min: u32,
        unready: bool,
    ) -> bool {
        let lo = now - duration_ms(c.window);
        let in_w: Vec<&AttemptRecord> = all
            .iter()
            .filter(|a| a.finished_at > lo && a.finished_at <= now)
            .collect();
        if in_w.is_empty() || in_w.len() < min as usize {
            return false;
        }
        let ok = in_w.iter().filter(|a| a.success).count();
        let rate = ok as f64 * 100.0 / in_w.len() as f64;
        if unready {
            rate < c.threshold_percent
        } else {
            rate >= c.threshold_percent
        }
    }

    /// Brute force over the attempts recorded within the retention of `now`: do the latest ones
    /// form a run of definitive failures (two or more, unless `definitive_for` is zero) whose
    /// first finished at least `definitive_for` before `now`?
    fn brute_definitive(all: &[AttemptRecord], now: Millis, policy: &Policy) -> bool {
        let Some(d) = &policy.definitive else {
            return false;
        };
        let horizon = now - duration_ms(policy.retention());
        let seen: Vec<&AttemptRecord> = all
            .iter()
            .filter(|a| a.finished_at > horizon && a.finished_at <= now)
            .collect();
        let mut run: Vec<&AttemptRecord> = Vec::new();
        for a in seen.iter().rev() {
            if a.success || !a.class.is_some_and(|c| d.classes.contains(&c)) {
                break;
            }
            run.push(a);
        }
        match run.last() {
            Some(first) => {
                (run.len() >= 2 || d.for_.is_zero())
                    && now - first.finished_at >= duration_ms(d.for_)
            }
            None => false,
        }
    }

    /// Brute force over every flap seen: the ready `for` in force at `now` (module rules).
    fn brute_ready_for(flaps: &[Millis], now: Millis, policy: &Policy) -> i64 {
        let base = policy.declare_ready.for_;
        let Some(d) = &policy.damping else {
            return duration_ms(base);
        };
        let quiet = duration_ms(d.quiet);
        let mut after_gap: Vec<Millis> = Vec::new();
        for (i, t) in flaps.iter().enumerate() {
            let next = flaps.get(i + 1).copied().unwrap_or(now);
            after_gap.push(*t);
            if next - t >= quiet {
                after_gap.clear();
            }
        }
        let counted = after_gap
            .iter()
            .filter(|t| **t > now - duration_ms(d.period))
            .count();
        let grown = base.saturating_mul(1 << (counted as u32).saturating_sub(d.flaps).min(20));
        duration_ms(grown.min(d.max_for).max(base))
    }

    /// Start of the uninterrupted run of holding evaluations ending at the latest one.
    fn run_start(history: &[(Millis, bool)]) -> Option<Millis> {
        let (_, holds_now) = history.last()?;
        if !holds_now {
            return None;
        }
        let first = history.iter().rposition(|(_, h)| !h).map_or(0, |i| i + 1);
        Some(history[first].0)
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// (a) A transition happens exactly when, by brute force over all evaluations since the
        /// previous transition, its condition has held at every evaluation for its full `for`
        /// (or, for unready, holds now and the definitive rule holds over every attempt): never
        /// earlier (and `held_since` is where that run began), and not missed. After every
        /// evaluation the branch is suspect exactly as the module rule says.
        #[test]
        fn transitions_only_after_full_for(
            policy in arb_policy(),
            phases in prop::collection::vec(arb_phase(), 1..12),
        ) {
            let mut r = Readiness::new(policy.clone());
            let mut all: Vec<AttemptRecord> = Vec::new();
            let mut hist_u: Vec<(Millis, bool)> = Vec::new();
            let mut hist_r: Vec<(Millis, bool)> = Vec::new();
            let for_u = duration_ms(policy.declare_unready.for_);
            let mut flaps: Vec<Millis> = Vec::new();
            let ready_target = if policy.approval_required {
                ReadinessState::PendingApproval
            } else {
                ReadinessState::Ready
            };
            let mut evs: VecDeque<Ev> = expand(&phases, BASE).into();
            // The latest instant evaluated, and whether the ready rule's time had run out there
            // without its transition (unready won): it may then fire at any later evaluation.
            let (mut last_now, mut blocked) = (None::<Millis>, false);
            while let Some(mut ev) = evs.pop_front() {
                let deadline = r.next_deadline();
                if let (Some(d), Some(l)) = (deadline, last_now) {
                    // Never a deadline already evaluated: the runner would wake for ever.
                    prop_assert!(d > l, "deadline {} not after the latest evaluation {}", d, l);
                }
                let due = deadline.filter(|d| *d < ev_time(&ev));
                // The deadline is the earliest: an evaluation before it fires no rule whose
                // clock was running (one whose condition only starts holding then, with a `for`
                // of zero, may).
                if let Some(l) = last_now {
                    let until = due.unwrap_or(ev_time(&ev));
                    if until - l > 1 {
                        let mid = l + (until - l) / 2;
                        if let Some(tr) = r.clone().evaluate(mid) {
                            prop_assert!(blocked || tr.held_since == Some(mid), "fired at {} before the deadline {:?}: {:?}", mid, deadline, tr);
                        }
                    }
                }
                if let Some(d) = due {
                    // What the runner does: wake up and evaluate at the deadline.
                    evs.push_front(ev);
                    ev = Ev::Tick(d);
                }
                let before = r.state();
                // An approval refused evaluates nothing.
                let refused = matches!(ev, Ev::Approve(_)) && before != ReadinessState::PendingApproval;
                if !refused {
                    last_now = Some(ev_time(&ev));
                    blocked = false;
                }
                let (now, got) = match ev {
                    Ev::Approve(t) => {
                        let res = r.approve(t);
                        if before == ReadinessState::PendingApproval {
                            let tr = res.expect("approve in pending_approval");
                            prop_assert_eq!(
                                (tr.from, tr.to, tr.at, tr.held_since),
                                (before, ReadinessState::Ready, t, None)
                            );
                            hist_u.clear();
                            hist_r.clear();
                        } else {
                            prop_assert_eq!(res, Err(ApprovalError { state: before }));
                        }
                        continue;
                    }
                    Ev::Tick(t) => (t, r.evaluate(t)),
                    Ev::Attempt(a) => {
                        all.push(a);
                        (a.finished_at, r.record(a))
                    }
                };
                let min = policy.min_attempts;
                hist_u.push((now, brute_holds(&all, now, &policy.declare_unready, min, true)));
                hist_r.push((now, brute_holds(&all, now, &policy.declare_ready, min, false)));
                let start_u = run_start(&hist_u);
                let start_r = run_start(&hist_r);
                if got.is_none() {
                    prop_assert_eq!(r.holding(), (start_u, start_r));
                }
                let for_fires_u = start_u.is_some_and(|s| now - s >= for_u);
                let definitive_u =
                    !for_fires_u && start_u.is_some() && brute_definitive(&all, now, &policy);
                let fires_u = for_fires_u || definitive_u;
                let for_r = brute_ready_for(&flaps, now, &policy);
                let fires_r = start_r.is_some_and(|s| now - s >= for_r);
                let want = match before {
                    ReadinessState::Ready | ReadinessState::PendingApproval => {
                        fires_u.then_some(ReadinessState::Unready)
                    }
                    ReadinessState::Unready => (fires_r && !fires_u).then_some(ready_target),
                    ReadinessState::Unknown => {
                        if fires_u {
                            Some(ReadinessState::Unready)
                        } else if fires_r {
                            Some(ready_target)
                        } else {
                            None
                        }
                    }
                };
                prop_assert_eq!(got.as_ref().map(|t| t.to), want);
                blocked = before == ReadinessState::Unready && fires_r && fires_u;
                let transitioned = got.is_some();
                if let Some(tr) = got {
                    let (start, for_ms) = if tr.to == ReadinessState::Unready {
                        (start_u, for_u)
                    } else {
                        (start_r, for_r)
                    };
                    let hs = tr.held_since.expect("held_since");
                    prop_assert_eq!(Some(hs), start);
                    let early = tr.to == ReadinessState::Unready && definitive_u;
                    prop_assert!(early || now - hs >= for_ms);
                    prop_assert_eq!(early, tr.reason.contains("definitive rule fired"));
                    prop_assert_eq!((tr.from, tr.at, r.since()), (before, now, Some(now)));
                    prop_assert_eq!(r.holding(), (None, None));
                    if before == ReadinessState::Ready && tr.to == ReadinessState::Unready {
                        flaps.push(now);
                    }
                    // Damping evidence names the ready `for` in force after the transition, and is
                    // there whenever that `for` grew (on a flap or a recovery).
                    let n = brute_ready_for(&flaps, now, &policy);
                    let grew = n > duration_ms(policy.declare_ready.for_);
                    let counts = tr.to != ReadinessState::Unready || before == ReadinessState::Ready;
                    if let Some(ev) = &tr.damping {
                        prop_assert_eq!(i64::try_from(ev.ready_for_ms).ok(), Some(n));
                    }
                    prop_assert!(!(grew && counts) || tr.damping.is_some());
                    hist_u.clear();
                    hist_r.clear();
                }
                // Suspect, by the module rule over the brute-force holding runs.
                let (hu, hr) = if transitioned { (None, None) } else { (start_u, start_r) };
                let for_now = brute_ready_for(&flaps, now, &policy);
                let suspect = match r.state() {
                    ReadinessState::Unready => true,
                    ReadinessState::Ready | ReadinessState::Unknown => hu.is_some(),
                    ReadinessState::PendingApproval => {
                        hu.is_some() || hr.is_some_and(|s| now - s < for_now)
                    }
                };
                prop_assert_eq!(r.suspect().is_some(), suspect, "{:?}", r.suspect());
            }
        }

        /// (b) Starting ready, attempts every 2s whose failures are at least 60s apart and start
        /// after 20 attempts never drop the 60s window below 95%, whatever `for` is: no flip.
        #[test]
        fn sparse_noise_never_flips_to_unready(
            first in 20usize..100,
            gaps in prop::collection::vec(30usize..200, 0..12),
            for_s in 0u64..300,
            ticks in prop::collection::vec(any::<bool>(), 700),
            class in 0..CLASSES.len(),
        ) {
            let mut policy = default_policy();
            policy.declare_unready.for_ = Duration::from_secs(for_s);
            let mut fails = vec![first];
            for g in gaps {
                fails.push(fails.last().copied().unwrap_or(0) + g);
            }
            let n = fails.last().copied().unwrap_or(0) + 100;
            let mut r = Readiness::new(policy.clone());
            let mut all = Vec::new();
            for i in 0..n {
                let t = BASE + i as i64 * 2 * S;
                let fail = fails.contains(&i);
                let a = AttemptRecord {
                    finished_at: t,
                    success: !fail,
                    class: fail.then_some(CLASSES[class]),
                };
                all.push(a);
                prop_assert!(!brute_holds(&all, t, &policy.declare_unready, 10, true));
                prop_assert_eq!(r.record(a), None);
                if ticks[i % ticks.len()] {
                    prop_assert_eq!(r.evaluate(t + S), None);
                }
                prop_assert_eq!(r.state(), ReadinessState::Ready);
                prop_assert_eq!(r.holding().0, None);
                prop_assert_eq!(r.published_value(), Some(1.0));
            }
        }

        /// (c) Whatever arrives, in whatever order: the published value is 1, 0 or no datum and
        /// agrees with the state; retained attempts stay sorted and within the largest window.
        #[test]
        fn published_value_is_always_zero_one_or_none(
            policy in arb_policy(),
            raw in prop::collection::vec((0i64..600_000, 0u8..4, any::<bool>(), 0..CLASSES.len()), 0..300),
        ) {
            let mut r = Readiness::new(policy.clone());
            let retention = duration_ms(policy.retention());
            let mut max_seen = i64::MIN;
            for (t, kind, success, class) in raw {
                let t = BASE + t;
                if kind != 3 {
                    max_seen = max_seen.max(t);
                }
                match kind {
                    0 | 1 => {
                        r.record(AttemptRecord {
                            finished_at: t,
                            success,
                            class: (!success).then_some(CLASSES[class]),
                        });
                    }
                    2 => {
                        r.evaluate(t);
                    }
                    _ => {
                        if r.approve(t).is_ok() {
                            max_seen = max_seen.max(t);
                        }
                    }
                }
                let v = r.published_value();
                prop_assert!(matches!(v, None | Some(0.0) | Some(1.0)), "{:?}", v);
                prop_assert_eq!(v.is_none(), r.state() == ReadinessState::Unknown);
                prop_assert_eq!(v == Some(1.0), r.state() == ReadinessState::Ready);
                let snap = r.snapshot();
                prop_assert!(snap.attempts.windows(2).all(|w| w[0].finished_at <= w[1].finished_at));
                if kind != 3 {
                    prop_assert!(snap.attempts.iter().all(|a| a.finished_at > max_seen - retention));
                }
            }
        }

        /// (d) Snapshot → JSON → restore, then the same events: identical results and snapshots.
        #[test]
        /// The windows an evaluation counts by bisection hold what a pass over the attempts
        /// counts, after any events (attempts out of order, prunes, restores).
        fn bisected_counts_equal_a_pass_over_the_window(
            policy in arb_policy(),
            phases in prop::collection::vec(arb_phase(), 1..8),
        ) {
            let mut r = Readiness::new(policy.clone());
            for ev in expand(&phases, BASE) {
                let _ = apply(&mut r, ev);
                let now = r.clock.unwrap_or(BASE);
                for w in [policy.declare_unready.window, policy.declare_ready.window] {
                    let full = r.window_stats(now, w);
                    let quick = r.window(now, w, false);
                    prop_assert_eq!((quick.finished, quick.failed), (full.finished, full.failed));
                    prop_assert_eq!(quick.success_rate_percent, full.success_rate_percent);
                }
                r = Readiness::restore(policy.clone(), r.snapshot());
            }
        }

        fn snapshot_restore_behaves_like_the_original(
            policy in arb_policy(),
            before in prop::collection::vec(arb_phase(), 0..6),
            after in prop::collection::vec(arb_phase(), 1..6),
        ) {
            let mut a = Readiness::new(policy.clone());
            let prefix = expand(&before, BASE);
            let end = prefix.iter().map(ev_time).max().unwrap_or(BASE);
            for ev in &prefix {
                let _ = apply(&mut a, *ev);
            }
            let json = serde_json::to_string(&a.snapshot()).expect("serialise");
            let mut b = Readiness::restore(policy.clone(), serde_json::from_str(&json).expect("json"));
            prop_assert_eq!(a.snapshot(), b.snapshot());
            for ev in expand(&after, end) {
                prop_assert_eq!(apply(&mut a, ev), apply(&mut b, ev));
                prop_assert_eq!(a.snapshot(), b.snapshot());
                prop_assert_eq!(a.published_value(), b.published_value());
            }
        }
    }

    fn apply(r: &mut Readiness, ev: Ev) -> Result<Option<Transition>, ApprovalError> {
        match ev {
            Ev::Attempt(a) => Ok(r.record(a)),
            Ev::Tick(t) => Ok(r.evaluate(t)),
            Ev::Approve(t) => r.approve(t).map(Some),
        }
    }

    #[test]
    fn fails_open_when_every_branch_publishes_and_none_publishes_one() {
        assert_eq!(fails_open([Some(false), Some(false)]), Some(true));
        assert_eq!(fails_open([Some(false)]), Some(true));
        assert_eq!(fails_open([Some(false), Some(true)]), Some(false));
        assert_eq!(fails_open([None, Some(true)]), Some(false));
        assert_eq!(fails_open([None, Some(false)]), None);
    }
}
