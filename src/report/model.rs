//! What a drill report shows, independent of where it came from: a recorded drill (evidence
//! files merged by [`super::merge`]) or a prediction (`simulate`). The renderers
//! ([`super::svg`], [`super::markdown`], [`super::html`]) read only this model, so a prediction
//! and a measurement are drawn the same way and can be put side by side.
//!
//! Times are ms since the UNIX epoch for a drill; a simulation uses ms from its start (the
//! renderers only subtract `window.from`).

use crate::readiness::{Millis, ReadinessState};
use serde::Serialize;

/// Most markers the timeline draws; the rest are counted in one caption. A rule and a label each
/// take room, and thousands of them are a grey wall, not a picture.
pub const MAX_DRAWN_MARKERS: usize = 200;

/// Most markers the pages list in their marker table; the rest are counted in one line
/// (`report.json` has them all).
pub const MAX_LISTED_MARKERS: usize = 500;

/// Most failovers and failbacks the pages table; the rest are counted in one line
/// (`report.json` has them all).
pub const MAX_TABLED_EPISODES: usize = 100;

/// A half-open stretch of time `[from, until)`, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    pub from: Millis,
    pub until: Millis,
}

impl Span {
    /// Length, ms (0 when `until` precedes `from`).
    pub fn len(&self) -> Millis {
        (self.until - self.from).max(0)
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the report's facts come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Source {
    /// Evidence files of one or more probers.
    Drill {
        /// The files read, as given.
        files: Vec<String>,
    },
    /// `simulate`'s model, with each hop's assumption in a sentence.
    Simulation {
        scenario: String,
        assumptions: Vec<String>,
    },
}

/// `files` as a reader sees them: a run of more than three consecutive names in one directory
/// (a prober's segments in S3, a day of rotated files) as `first … last (N in all)`, so the
/// evidence line stays short over a long drill; every other name as given.
pub fn evidence_names(files: &[String]) -> Vec<String> {
    let dir = |f: &String| f.rsplit_once('/').map(|(d, _)| d.to_string());
    let mut out = Vec::new();
    for run in files.chunk_by(|a, b| dir(a) == dir(b)) {
        match run {
            [first, .., last] if run.len() > 3 => {
                out.push(format!("{first} … {last} ({} in all)", run.len()));
            }
            _ => out.extend(run.iter().cloned()),
        }
    }
    out
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drill {
    #[serde(flatten)]
    pub source: Source,
    /// From the first record to the last, ms.
    pub window: Span,
    /// Prober ids that contributed records, sorted.
    pub probers: Vec<String>,
    /// One section per service, in order of first appearance.
    pub services: Vec<ServiceDrill>,
    /// What could not be read or used (a bad line, a gap in `record_seq`), one sentence each.
    pub problems: Vec<String>,
}

/// One service's timeline and phase tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceDrill {
    /// The `Service` dimension.
    pub name: String,
    /// The configuration in force, as `(key, value)` lines (config path, policy, intervals,
    /// TTLs seen, ...), in display order.
    pub config: Vec<(String, String)>,
    /// One lane per branch, PRIMARY first.
    pub branches: Vec<BranchLane>,
    /// The stable-name lane, when the evidence has stable-name rounds.
    pub stable_name: Option<StableLane>,
    /// One lane per branch alarm (`--alarms`, or the simulated alarm).
    pub alarms: Vec<AlarmLane>,
    /// Operator markers, in time order (vertical rules across every lane).
    pub markers: Vec<Marker>,
    /// Each failover and failback, measured per phase.
    pub episodes: Vec<Episode>,
}

/// One attempt on a lane: a tick coloured by its class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptMark {
    /// When it finished, ms.
    pub at: Millis,
    /// `None` on success, else the failure class's snake_case name.
    pub class: Option<String>,
}

/// A state held over a span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Band<S> {
    pub span: Span,
    pub state: S,
}

/// An instant with a short label (an approval, an override change).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub at: Millis,
    pub label: String,
}

/// One branch over the drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BranchLane {
    pub name: String,
    /// `PRIMARY` or `SECONDARY`, when known.
    pub role: Option<String>,
    pub attempts: Vec<AttemptMark>,
    /// Readiness state bands, covering the window without gaps once the first state is known.
    pub states: Vec<Band<ReadinessState>>,
    /// The value published (0 or 1) from each change on; `None` while nothing is published.
    pub published: Vec<Band<Option<f64>>>,
    /// Overrides in force, labelled with their value and who set them.
    pub overrides: Vec<Band<String>>,
    /// Approvals applied or rejected, transitions' reasons worth a label.
    pub events: Vec<Event>,
}

/// One round of the stable-name probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Round {
    pub at: Millis,
    /// The branch the answer selects, by name.
    pub selected: Option<String>,
    /// The answer matched no branch.
    pub unknown_target: bool,
    /// Smallest TTL in the answer chain, seconds; `None` when it did not resolve.
    pub ttl: Option<u32>,
    /// The end-to-end attempt through the stable name: `None` when none was made, `Some(None)`
    /// on success, `Some(Some(class))` on failure.
    pub end_to_end: Option<Option<String>>,
}

/// The stable name over the drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StableLane {
    pub name: String,
    pub rounds: Vec<Round>,
}

/// One branch alarm's states over the drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlarmLane {
    /// The alarm's name.
    pub name: String,
    /// The branch it watches.
    pub branch: String,
    /// The publish target it was read through, when the service has several (the same alarm
    /// name may then be in more than one region or account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `OK`, `ALARM`, `INSUFFICIENT_DATA`.
    pub states: Vec<Band<String>>,
}

impl AlarmLane {
    /// The alarm as a reader names it: its name, and its target when it has one.
    pub fn label(&self) -> String {
        match &self.target {
            Some(t) => format!("{} @ {t}", self.name),
            None => self.name.clone(),
        }
    }
}

/// An operator's marker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marker {
    /// When the operator gave it, ms.
    pub at: Millis,
    /// `fault`, `restore` or `note`.
    pub kind: String,
    pub label: String,
    pub by: String,
}

/// Failover or failback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeKind {
    Failover,
    Failback,
}

/// One phase of an episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// What happened (e.g. "readiness 0 published").
    pub name: String,
    /// When, ms; `None` when it cannot be derived.
    pub at: Option<Millis>,
    /// Since the episode's start, ms.
    pub since_start_ms: Option<Millis>,
    /// Since the phase before, ms.
    pub took_ms: Option<Millis>,
    /// Why it has no time (the record that is missing), or what it means.
    pub note: Option<String>,
}

/// A failover or failback of one branch, measured per phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    pub kind: EpisodeKind,
    /// The branch that failed (failover) or came back (failback).
    pub branch: String,
    /// What started it: the marker's label, or the first failed/successful attempt.
    pub trigger: String,
    pub phases: Vec<Phase>,
    /// Failback: time in `pending_approval`, ms.
    pub pending_approval_ms: Option<Millis>,
    /// Failback: who approved.
    pub approved_by: Option<String>,
}
