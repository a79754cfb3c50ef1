//! One service's lanes out of the ordered records: [`Gather`] takes them in one pass, and
//! [`build_service`] turns what it gathered into a [`ServiceDrill`] (bands, events, markers,
//! the configuration in force).

use super::super::model::{
    AlarmLane, AttemptMark, Band, BranchLane, Event, Marker, ServiceDrill, Span, StableLane,
};
use super::super::phases::{self, ApprovalFact, Facts, PublishFact, TransitionFact};
use super::{Ev, Item, Names};
use crate::clock::rfc3339;
use crate::readiness::{Millis, ReadinessState};
use crate::record::{OverrideAction, Start};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Readiness, published value and override of one branch as one prober recorded them.
#[derive(Debug, Default)]
struct Track {
    state: Option<ReadinessState>,
    states: Vec<(Millis, ReadinessState)>,
    published: Vec<(Millis, Option<f64>)>,
    forced: Option<f64>,
    overrides: Vec<(Millis, Option<String>)>,
    events: Vec<Event>,
}

impl Track {
    fn set_state(&mut self, at: Millis, s: ReadinessState, published: Option<f64>) {
        self.state = Some(s);
        self.states.push((at, s));
        self.published.push((at, published));
    }
}

/// Everything of one service, gathered in one pass over the ordered items.
#[derive(Debug, Default)]
pub(super) struct Gather {
    starts: Vec<(Millis, usize, Start)>,
    branches: Vec<usize>,
    roles: HashMap<usize, String>,
    attempts: HashMap<usize, Vec<AttemptMark>>,
    tracks: BTreeMap<(usize, usize), Track>,
    stable: Option<StableLane>,
    markers: Vec<Marker>,
    marker_ids: HashSet<String>,
    facts: Facts,
}

impl Gather {
    fn branch(&mut self, b: usize) {
        if !self.branches.contains(&b) {
            self.branches.push(b);
        }
    }

    pub(super) fn take(&mut self, i: &Item, names: &Names) {
        let prober = names.get(i.prober).to_string();
        match &i.ev {
            Ev::Start(s) => self.start(i, s, names),
            Ev::Stop(reason) => {
                // No prober, no datum: the lanes show nothing published until its next start.
                for ((_, p), t) in self.tracks.iter_mut() {
                    if *p == i.prober {
                        t.set_state(i.at, ReadinessState::Unknown, None);
                        t.events.push(Event {
                            at: i.at,
                            label: format!("prober {prober} stopped ({reason})"),
                        });
                    }
                }
            }
            Ev::Attempt { branch, class } => {
                self.branch(*branch);
                let mark = AttemptMark {
                    at: i.at,
                    class: class.clone(),
                };
                self.attempts.entry(*branch).or_default().push(mark);
            }
            Ev::Transition {
                branch,
                from,
                to,
                published,
                batch,
            } => {
                self.branch(*branch);
                let t = self.tracks.entry((*branch, i.prober)).or_default();
                t.set_state(i.at, *to, *published);
                self.facts.transitions.push(TransitionFact {
                    at: i.at,
                    prober,
                    branch: names.get(*branch).to_string(),
                    from: *from,
                    to: *to,
                    batch: *batch,
                });
            }
            Ev::Publish(outcome, sink, batch) => self.facts.publishes.push(PublishFact {
                at: i.at,
                prober,
                outcome: *outcome,
                sink: sink.clone(),
                batch: *batch,
            }),
            Ev::Approval(branch, a) => {
                let (by, reason, applied) = (&a.by, &a.reason, &a.applied);
                let t = self.tracks.entry((*branch, i.prober)).or_default();
                let label = if *applied {
                    format!("approved by {by}: {reason}")
                } else {
                    format!("approval by {by} rejected: {reason}")
                };
                t.events.push(Event { at: i.at, label });
                self.facts.approvals.push(ApprovalFact {
                    at: i.at,
                    prober,
                    branch: names.get(*branch).to_string(),
                    by: by.clone(),
                    reason: reason.clone(),
                    given_at: a.given_at,
                    applied: *applied,
                });
            }
            Ev::Override {
                branch,
                action,
                label,
            } => override_change(
                self.tracks.entry((*branch, i.prober)).or_default(),
                i.at,
                *action,
                label.as_deref(),
            ),
            Ev::Marker(m) => {
                let (m, id) = &**m;
                if self.marker_ids.insert(id.clone()) {
                    self.markers.push(m.clone());
                }
            }
            Ev::Stable(r) => self
                .stable
                .get_or_insert_with(|| StableLane {
                    name: r.0.clone(),
                    rounds: Vec::new(),
                })
                .rounds
                .push(r.1.clone()),
            Ev::Reopened(_) | Ev::Duplicate(_) | Ev::SegmentDropped(_) | Ev::Other => {}
        }
    }

    fn start(&mut self, i: &Item, s: &Start, names: &Names) {
        let ids: Vec<usize> = s
            .branches
            .iter()
            .map(|b| names.index.get(&b.name).copied().unwrap_or(usize::MAX))
            .collect();
        for (b, id) in s.branches.iter().zip(&ids) {
            if *id != usize::MAX {
                self.branch(*id);
                self.roles.insert(*id, b.role.clone());
            }
        }
        // A branch starts in its restored state, else in `readiness.initial`.
        let initial = s.initial.into_iter().flat_map(|st| {
            s.branches
                .iter()
                .filter(|b| !s.restored.iter().any(|r| r.branch == b.name))
                .map(move |b| (&b.name, st))
        });
        let restored = s.restored.iter().map(|r| (&r.branch, r.state));
        for (name, state) in restored.chain(initial) {
            if let Some(&b) = names.index.get(name) {
                let t = self.tracks.entry((b, i.prober)).or_default();
                let v = t.forced.or(state.published_value());
                t.set_state(i.at, state, v);
            }
        }
        if self.facts.approval_required.is_none() {
            self.facts.approval_required = s.approval_required;
        }
        self.starts.push((i.at, i.prober, s.clone()));
    }
}

/// An override set, cleared or expired on `t` at `at`.
fn override_change(
    t: &mut Track,
    at: Millis,
    action: OverrideAction,
    label: Option<&(String, f64)>,
) {
    let base = t.state.and_then(ReadinessState::published_value);
    match (action, label) {
        // Never in force: nothing published changes.
        (OverrideAction::DroppedAhead, _) => t.events.push(Event {
            at,
            label: "override dropped unapplied: set ahead of the prober's clock".into(),
        }),
        (OverrideAction::Set, Some((text, v))) => {
            t.forced = Some(*v);
            t.overrides.push((at, Some(text.clone())));
            t.published.push((at, Some(*v)));
            t.events.push(Event {
                at,
                label: format!("override set: {text}"),
            });
        }
        (a, _) => {
            t.forced = None;
            t.overrides.push((at, None));
            t.published.push((at, base));
            let what = if a == OverrideAction::Expired {
                "expired"
            } else {
                "cleared"
            };
            t.events.push(Event {
                at,
                label: format!("override {what}"),
            });
        }
    }
}

/// Bands from a list of changes: each state from its change to the next, the last to `until`;
/// consecutive equal states joined.
fn bands<S: Clone + PartialEq>(changes: &[(Millis, S)], until: Millis) -> Vec<Band<S>> {
    let mut out: Vec<Band<S>> = Vec::new();
    for (k, (at, s)) in changes.iter().enumerate() {
        let end = changes.get(k + 1).map_or(until, |(n, _)| *n).max(*at);
        match out.last_mut() {
            Some(last) if last.state == *s => last.span.until = end,
            _ => out.push(Band {
                span: Span {
                    from: *at,
                    until: end,
                },
                state: s.clone(),
            }),
        }
    }
    out.retain(|b| !b.span.is_empty() || b.span.from == until);
    out
}

/// Override bands: each set override from its record to the next change.
fn override_bands(changes: &[(Millis, Option<String>)], until: Millis) -> Vec<Band<String>> {
    bands(changes, until)
        .into_iter()
        .filter_map(|b| {
            b.state.map(|state| Band {
                span: b.span,
                state,
            })
        })
        .collect()
}

/// Service `service`'s lanes, configuration and episodes from what was gathered for it.
pub(super) fn build_service(
    mut g: Gather,
    names: &Names,
    service: usize,
    window: Span,
    alarms: Vec<AlarmLane>,
) -> ServiceDrill {
    // With several probers each has its own readiness per branch: a lane shows one prober's
    // (the first by id that recorded one), the phase table looks at all.
    let lane_prober = g
        .tracks
        .keys()
        .map(|(_, p)| *p)
        .min_by_key(|p| names.get(*p))
        .or_else(|| g.starts.first().map(|s| s.1));
    let mut branches: Vec<BranchLane> = g
        .branches
        .iter()
        .map(|&b| {
            let empty = Track::default();
            let t = lane_prober
                .and_then(|p| g.tracks.get(&(b, p)))
                .unwrap_or(&empty);
            BranchLane {
                name: names.get(b).to_string(),
                role: g.roles.get(&b).cloned(),
                attempts: g.attempts.remove(&b).unwrap_or_default(),
                states: bands(&t.states, window.until),
                published: bands(&t.published, window.until),
                overrides: override_bands(&t.overrides, window.until),
                events: t.events.clone(),
            }
        })
        .collect();
    branches.sort_by_key(|b| match b.role.as_deref() {
        Some("PRIMARY") => 0,
        Some("SECONDARY") => 1,
        _ => 2,
    });
    let mut markers = g.markers;
    markers.sort_by_key(|m| m.at);
    let mut s = ServiceDrill {
        name: names.get(service).to_string(),
        config: config_lines(
            &g.starts,
            names,
            g.stable.as_ref(),
            g.tracks.keys().map(|k| k.1).collect(),
        ),
        branches,
        stable_name: g.stable,
        alarms,
        markers,
        episodes: Vec::new(),
    };
    s.episodes = phases::episodes(&s, &g.facts);
    s
}

/// The configuration in force, from the service's `start` records, and the TTLs seen.
fn config_lines(
    starts: &[(Millis, usize, Start)],
    names: &Names,
    stable: Option<&StableLane>,
    probers_with_state: BTreeSet<usize>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let kv = |k: &str, v: String| (k.to_string(), v);
    let Some((at, prober, s)) = starts.first() else {
        out.push(kv(
            "configuration",
            "unknown: no start record of this service in the evidence".into(),
        ));
        return out;
    };
    let d = |ms: u64| crate::clock::fmt_duration_ms(i64::try_from(ms).unwrap_or(i64::MAX));
    out.push(kv("config", s.config.clone()));
    out.push(kv(
        "started",
        format!("{} (prober {})", rfc3339(*at), names.get(*prober)),
    ));
    let branches: Vec<String> = s
        .branches
        .iter()
        .map(|b| format!("{} {} {}:{}", b.role, b.name, b.endpoint, b.port))
        .collect();
    out.push(kv("branches", branches.join(", ")));
    if let (Some(i), Some(t)) = (s.probe_interval_ms, s.probe_timeout_ms) {
        let fast = s
            .suspect_interval()
            .map(|f| format!(", every {} while suspect", d(f)))
            .unwrap_or_default();
        out.push(kv(
            "probe",
            format!("every {}, attempt timeout {}{fast}", d(i), d(t)),
        ));
    }
    if let Some(p) = s.publish_interval_ms {
        out.push(kv("publish", format!("every {}", d(p))));
    }
    for p in &s.policy {
        out.push(kv("readiness", p.clone()));
    }
    if s.policy.is_empty() {
        out.push(kv(
            "readiness",
            "not recorded (evidence written before start records carried the policy)".into(),
        ));
    }
    match s.stable_name_interval_ms {
        Some(i) => {
            let e2e = match s.stable_name_end_to_end {
                Some(true) => ", with the end-to-end attempt",
                Some(false) => ", without the end-to-end attempt (end_to_end = false)",
                None => "",
            };
            out.push(kv("stable_name_probe", format!("every {}{e2e}", d(i))));
        }
        None if !s.policy.is_empty() => out.push(kv("stable_name_probe", "off".into())),
        None => {}
    }
    let ttls: BTreeSet<u32> = stable
        .into_iter()
        .flat_map(|l| l.rounds.iter().filter_map(|r| r.ttl))
        .collect();
    if let (Some(lo), Some(hi)) = (ttls.first(), ttls.last()) {
        let v = if lo == hi {
            format!("{lo} s")
        } else {
            format!("{lo}–{hi} s")
        };
        out.push(kv("stable name TTL seen", v));
    }
    for (at, prober, later) in &starts[1..] {
        if later.policy != s.policy
            || later.probe_interval_ms != s.probe_interval_ms
            || later.suspect_interval() != s.suspect_interval()
            || later.branches != s.branches
        {
            out.push(kv(
                "changed",
                format!(
                    "prober {} restarted at {} with another configuration",
                    names.get(*prober),
                    rfc3339(*at)
                ),
            ));
        }
    }
    if probers_with_state.len() > 1 {
        let ps: BTreeSet<&str> = probers_with_state.iter().map(|p| names.get(*p)).collect();
        let ps: Vec<&str> = ps.into_iter().collect();
        out.push(kv(
            "lanes",
            format!(
                "readiness bands of prober {} (of {}); the phase table uses every prober's records",
                ps[0],
                ps.join(", ")
            ),
        ));
    }
    out
}
