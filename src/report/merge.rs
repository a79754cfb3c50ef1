//! Evidence of one or more probers merged into one [`Drill`]: records ordered by time, then
//! prober, then `record_seq`; one marker per `marker_id`; a lane per branch; the stable-name
//! rounds; the configuration in force; and every line that could not be used, as a problem.
//!
//! Pure: the caller reads the files ([`crate::record::read_lines`]) and hands each line to a
//! [`Merger`], which keeps only what the lanes and the phase table need (an attempt becomes a
//! time and a class), so memory grows with the drill's events, not with the files' bytes.

use super::model::{AlarmLane, Drill, Marker, Round, Source, Span};
use crate::clock::rfc3339;
use crate::control::Override;
use crate::probe::Outcome;
use crate::readiness::{Millis, ReadinessState};
use crate::record::{Envelope, LineError, OverrideAction, PublishReason, Record, Start};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

mod gather;
mod seq;
use gather::{Gather, build_service};
use seq::{digest, seq_gaps, seq_reuse};

/// Most problems listed by name; the rest are counted in one last line.
pub const MAX_PROBLEMS: usize = 50;

/// A prober records a marker at its next sync after it was given: a record time more than this
/// before the marker's `given_at` means a clock behind (the prober's, or the marker giver's), ms.
pub const SKEW_BEHIND_MS: Millis = 60_000;

/// A record time more than this after `given_at` means a clock ahead, or a prober that did not
/// sync for that long (syncs are at most `publish.interval` apart), ms.
pub const SKEW_AHEAD_MS: Millis = 10 * 60_000;

/// `s` cut to [`crate::control::MAX_LABEL_CHARS`] characters, its last one `…` when cut: the bound a
/// marker's label has in the control document holds for a label from the evidence too.
fn cut_label(mut s: String) -> String {
    crate::control::clip(&mut s, crate::control::MAX_LABEL_CHARS);
    s
}

/// The markers one prober recorded whose record time is skewed against their `given_at`.
#[derive(Debug, Default, Clone)]
struct Skew {
    /// Markers recorded, and how many of them skewed.
    markers: u64,
    skewed: u64,
    /// The largest skew (record time − given_at, ms, signed), with the marker's id.
    worst: Option<(Millis, String)>,
}

/// What one evidence line leaves behind: its origin, its time and the part of its record a
/// lane or a phase uses.
#[derive(Debug)]
struct Item {
    at: Millis,
    prober: usize,
    seq: Option<u64>,
    /// The line's [`digest`]: two different records may share a `record_seq`.
    digest: u64,
    service: usize,
    ev: Ev,
}

#[derive(Debug)]
enum Ev {
    Start(Box<Start>),
    Attempt {
        branch: usize,
        class: Option<String>,
    },
    Transition {
        branch: usize,
        from: ReadinessState,
        to: ReadinessState,
        published: Option<f64>,
        batch: Option<u64>,
    },
    /// A `publish` with reason `transition`: its outcome, sink and batch id.
    Publish(crate::record::PublishOutcome, String, Option<u64>),
    // The rarer, larger payloads are boxed: an `Item` stays small for the many attempts.
    Approval(usize, Box<crate::record::ApprovalRecord>),
    Override {
        branch: usize,
        action: OverrideAction,
        label: Option<Box<(String, f64)>>,
    },
    /// The marker and its id.
    Marker(Box<(Marker, String)>),
    /// The stable name and the round.
    Stable(Box<(String, Round)>),
    Reopened(String),
    /// A `duplicate_prober` record: the state store it was found in.
    Duplicate(String),
    /// An `evidence_segment` record of a dropped segment: its key under the prefix.
    SegmentDropped(String),
    /// A `stop` record: why the run stopped. Until the prober's next `start` it publishes nothing.
    Stop(String),
    /// Nothing a lane or a phase uses (kept only in the window, the probers and the seq check).
    Other,
}

/// Interned names (services, probers, branches), so a million attempts do not hold a million
/// copies of the same few strings.
#[derive(Debug, Default)]
struct Names {
    list: Vec<String>,
    index: HashMap<String, usize>,
}

impl Names {
    fn id(&mut self, s: &str) -> usize {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }

    fn get(&self, i: usize) -> &str {
        self.list.get(i).map_or("", String::as_str)
    }
}

/// Collects evidence lines of several files and builds the [`Drill`] from them.
#[derive(Debug, Default)]
pub struct Merger {
    service: Option<String>,
    files: Vec<String>,
    items: Vec<Item>,
    names: Names,
    problems: Vec<String>,
    more_problems: usize,
    /// Every `record_seq` per prober with its line's [`digest`], of every service (a
    /// filtered-out record is no gap, and may reuse a number too).
    seqs: BTreeMap<String, Vec<(u64, u64)>>,
    /// Alarm lanes per service (`--alarms`).
    alarms: HashMap<String, Vec<AlarmLane>>,
    /// The first and last time seen (records and markers' `given_at`).
    bounds: Option<(Millis, Millis)>,
    /// Services in order of first appearance.
    service_order: Vec<usize>,
    /// The same, for a quick look-up (thousands of services).
    services_seen: HashSet<usize>,
    /// Probers that contributed a record of a kept service.
    prober_ids: BTreeSet<usize>,
    /// Per service: its CloudWatch namespace (from `start`) and the branches seen.
    metric_series: HashMap<String, (Option<String>, BTreeSet<String>)>,
    /// Per prober: its markers' record times against their `given_at`.
    skew: BTreeMap<String, Skew>,
    /// Per file, per prober: the last `record_seq` seen, which must rise line by line.
    last_seq: HashMap<usize, HashMap<String, u64>>,
}

/// A short one-line label for an override: its value, who set it and why.
fn override_label(o: &Override) -> (String, f64) {
    let v = o.force.value();
    (
        format!("force {} by {}: {}", o.force.as_str(), o.by, o.reason),
        v,
    )
}

impl Merger {
    /// A merger keeping only the records of service `service` (all services when `None`).
    pub fn new(service: Option<&str>) -> Self {
        Merger {
            service: service.map(str::to_string),
            ..Merger::default()
        }
    }

    /// Start reading the file named `name` (as given on the command line); its lines follow
    /// with [`push`](Self::push). Returns the file's index.
    pub fn file(&mut self, name: &str) -> usize {
        self.files.push(name.to_string());
        self.files.len() - 1
    }

    /// A problem the caller found with file `file` (e.g. it could not be read to its end).
    pub fn problem(&mut self, file: usize, what: &str) {
        let name = self.files.get(file).cloned().unwrap_or_default();
        self.note(format!("{name}: {what}"));
    }

    fn note(&mut self, p: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        } else {
            self.more_problems += 1;
        }
    }

    /// One item of [`read_lines`](crate::record::read_lines) over file `file`.
    pub fn push(&mut self, file: usize, line: Result<Envelope, LineError>) {
        let env = match line {
            Ok(e) => e,
            Err(e) => return self.problem(file, &format!("{e} (line left out)")),
        };
        let digest = digest(&env);
        if let Some(seq) = env.record_seq {
            self.seq_order(file, &env.prober, seq, env.at_ms);
            match self.seqs.get_mut(&env.prober) {
                Some(v) => v.push((seq, digest)),
                None => {
                    self.seqs.insert(env.prober.clone(), vec![(seq, digest)]);
                }
            }
        }
        if self.service.as_deref().is_some_and(|s| s != env.service) {
            return;
        }
        self.series(&env.service, &env.record);
        let service = self.names.id(&env.service);
        let prober = self.names.id(&env.prober);
        let ev = self.compact(env.record, env.at_ms);
        let given = match &ev {
            Ev::Marker(m) => {
                self.skew_of(&env.prober, env.at_ms, m.0.at, &m.1);
                m.0.at
            }
            _ => env.at_ms,
        };
        for t in [env.at_ms, given] {
            let (lo, hi) = self.bounds.get_or_insert((t, t));
            (*lo, *hi) = ((*lo).min(t), (*hi).max(t));
        }
        if self.services_seen.insert(service) {
            self.service_order.push(service);
        }
        self.prober_ids.insert(prober);
        if matches!(ev, Ev::Other) {
            // Publish ticks, stops, syncs: counted in the window and the seq check only.
            return;
        }
        self.items.push(Item {
            at: env.at_ms,
            prober,
            seq: env.record_seq,
            digest,
            service,
            ev,
        });
    }

    /// Note `service`'s namespace and branches, which `--alarms` looks alarms up by.
    fn series(&mut self, service: &str, r: &Record) {
        let branch = match r {
            Record::Attempt(a) => &a.branch,
            Record::Start(s) => {
                let e = self.metric_series.entry(service.to_string()).or_default();
                if s.namespace.is_some() {
                    e.0.clone_from(&s.namespace);
                }
                e.1.extend(s.branches.iter().map(|b| b.name.clone()));
                return;
            }
            _ => return,
        };
        match self.metric_series.get_mut(service) {
            Some(e) if e.1.contains(branch) => {}
            Some(e) => {
                e.1.insert(branch.clone());
            }
            None => {
                let e = self.metric_series.entry(service.to_string()).or_default();
                e.1.insert(branch.clone());
            }
        }
    }

    /// `service`'s CloudWatch namespace as its `start` records give it (`None`: not recorded)
    /// and its branches (from `start` records and attempts).
    pub fn metric_series(&self, service: &str) -> (Option<&str>, Vec<String>) {
        self.metric_series
            .get(service)
            .map(|(ns, b)| (ns.as_deref(), b.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// Check that `prober`'s `record_seq` rises line by line in file `file`: a writer numbers
    /// its lines in file order, across restarts, so a number that goes back means lines were
    /// edited, or files of two runs joined into one.
    fn seq_order(&mut self, file: usize, prober: &str, seq: u64, at: Millis) {
        let per = self.last_seq.entry(file).or_default();
        let last = match per.get_mut(prober) {
            Some(last) => std::mem::replace(last, seq),
            None => {
                per.insert(prober.to_string(), seq);
                return;
            }
        };
        if seq <= last {
            let what = if seq == last {
                format!("record_seq repeats {seq}")
            } else {
                format!("record_seq goes back from {last} to {seq}")
            };
            self.problem(
                file,
                &format!(
                    "prober {prober}: {what} at {}: the file was edited, or holds the records of two runs",
                    rfc3339(at)
                ),
            );
        }
    }

    /// Note the marker `id` given at `given` that `prober` recorded at `at`.
    fn skew_of(&mut self, prober: &str, at: Millis, given: Millis, id: &str) {
        let e = match self.skew.get_mut(prober) {
            Some(e) => e,
            None => self.skew.entry(prober.to_string()).or_default(),
        };
        e.markers += 1;
        let off = at.saturating_sub(given);
        if !(-SKEW_BEHIND_MS..=SKEW_AHEAD_MS).contains(&off) {
            e.skewed += 1;
            if e.worst
                .as_ref()
                .is_none_or(|(w, _)| off.unsigned_abs() > w.unsigned_abs())
            {
                e.worst = Some((off, id.to_string()));
            }
        }
    }

    /// One sentence per prober whose clock looks skewed against the markers it recorded (a
    /// record time more than [`SKEW_BEHIND_MS`] before a marker's `given_at`, or more than
    /// [`SKEW_AHEAD_MS`] after it), in prober order: its times in the report are off by about
    /// that much against the other probers' and the markers'.
    pub fn clock_skew(&self) -> Vec<String> {
        let d = crate::clock::fmt_duration_ms;
        self.skew
            .iter()
            .filter_map(|(prober, s)| {
                let (off, id) = s.worst.as_ref()?;
                let how = if *off < 0 {
                    format!("{} before it was given: its clock (or the marker giver's) is behind", d(off.saturating_neg()))
                } else {
                    format!("{} after it was given: its clock (or the marker giver's) is ahead, or it did not sync for that long", d(*off))
                };
                Some(format!(
                    "prober {prober}: clock skew: it recorded marker {id} {how}; {} of its {} marker records are skewed, and its record times may be off by as much against the markers and the other probers",
                    s.skewed, s.markers
                ))
            })
            .collect()
    }

    /// A problem found outside the evidence (e.g. reading the alarm history), one sentence.
    pub fn note_problem(&mut self, what: String) {
        self.note(what);
    }

    /// The part of `r` a lane or a phase uses.
    fn compact(&mut self, r: Record, at: Millis) -> Ev {
        match r {
            Record::Start(s) => {
                for b in &s.branches {
                    self.names.id(&b.name);
                }
                for r in &s.restored {
                    self.names.id(&r.branch);
                }
                Ev::Start(Box::new(s))
            }
            Record::Attempt(a) => Ev::Attempt {
                branch: self.names.id(&a.branch),
                class: match a.outcome {
                    Outcome::Success => None,
                    Outcome::Failure { class, .. } => Some(class.as_str().to_string()),
                },
            },
            Record::Transition(t) => Ev::Transition {
                branch: self.names.id(&t.branch),
                from: t.transition.from,
                to: t.transition.to,
                published: t.published,
                batch: t.batch,
            },
            Record::Publish(p) if p.reason == PublishReason::Transition => {
                Ev::Publish(p.outcome, p.sink, p.batch)
            }
            Record::Approval(a) => Ev::Approval(self.names.id(&a.branch), Box::new(a)),
            Record::Override(o) => Ev::Override {
                branch: self.names.id(&o.branch),
                action: o.action,
                label: o.override_.as_ref().map(|o| Box::new(override_label(o))),
            },
            Record::Marker(m) => Ev::Marker(Box::new((
                Marker {
                    at: m.given_at,
                    kind: m.marker_kind.as_str().to_string(),
                    label: cut_label(m.label),
                    by: cut_label(m.by),
                },
                cut_label(m.marker_id),
            ))),
            Record::StableName(s) => {
                let round = Round {
                    at,
                    selected: s.selected,
                    unknown_target: s.unknown_target,
                    ttl: s.answers.iter().map(|a| a.ttl).min(),
                    end_to_end: s.end_to_end.map(|e| match e.outcome {
                        Outcome::Success => None,
                        Outcome::Failure { class, .. } => Some(class.as_str().to_string()),
                    }),
                };
                Ev::Stable(Box::new((s.stable_name, round)))
            }
            Record::EvidenceReopened(e) => Ev::Reopened(e.path),
            Record::EvidenceSegment(e) if e.event == crate::record::SegmentEvent::Dropped => {
                Ev::SegmentDropped(e.segment)
            }
            Record::DuplicateProber(d) => Ev::Duplicate(d.state_store),
            Record::Stop(s) => Ev::Stop(s.reason),
            _ => Ev::Other,
        }
    }

    /// The window of what was pushed so far: from the first record (or marker) to the last
    /// (e.g. the span to fetch alarm history over).
    pub fn window(&self) -> Span {
        let (from, until) = self.bounds.unwrap_or((0, 0));
        Span { from, until }
    }

    /// The services pushed so far, in order of first appearance.
    pub fn services(&self) -> Vec<String> {
        self.service_order
            .iter()
            .map(|i| self.names.get(*i).to_string())
            .collect()
    }

    /// The alarm lanes of `service` (`drill report --alarms`): drawn, and read by the phase
    /// table's alarm phases.
    pub fn set_alarms(&mut self, service: &str, lanes: Vec<AlarmLane>) {
        self.alarms.insert(service.to_string(), lanes);
    }

    /// The drill: records in order, one per `(prober, record_seq)` and content (a file given
    /// twice, or overlapping copies, count once; different records under one number are all
    /// kept, the number listed as reused), gaps in `record_seq` listed as problems.
    pub fn finish(mut self) -> Drill {
        let names = &self.names;
        self.items.sort_by(|a, b| {
            (a.at, names.get(a.prober), a.seq, a.digest).cmp(&(
                b.at,
                names.get(b.prober),
                b.seq,
                b.digest,
            ))
        });
        let mut seen = HashSet::new();
        self.items
            .retain(|i| i.seq.is_none_or(|s| seen.insert((i.prober, s, i.digest))));
        let mut seqs = std::mem::take(&mut self.seqs);
        for p in seq_reuse(&mut seqs).into_iter().chain(seq_gaps(seqs)) {
            self.note(p);
        }
        for p in self.clock_skew() {
            self.note(p);
        }
        let mut found = Vec::new();
        // Per prober: where its run stands (`start` records of one run come one per service)
        // and the time of its last record.
        let mut runs: HashMap<usize, (RunAt, Millis)> = HashMap::new();
        for i in &self.items {
            let (prober, at) = (self.names.get(i.prober), rfc3339(i.at));
            let (now, last) = runs
                .get(&i.prober)
                .copied()
                .unwrap_or((RunAt::Stopped, i.at));
            let next = match &i.ev {
                Ev::Start(_) if now == RunAt::Running => {
                    found.push(format!(
                        "prober {prober} started again at {at} without a stop record after its record at {} (killed, or its task lost): the records it wrote last may be missing (with [evidence.s3], at most one segment)",
                        rfc3339(last)
                    ));
                    RunAt::Starting
                }
                Ev::Start(_) => RunAt::Starting,
                Ev::Stop(_) => RunAt::Stopped,
                // What a writer adds after the stop record (its last segment's notes).
                _ if now == RunAt::Stopped && runs.contains_key(&i.prober) => RunAt::Stopped,
                _ => RunAt::Running,
            };
            runs.insert(i.prober, (next, i.at));
            match &i.ev {
                Ev::Reopened(path) => found.push(format!(
                    "prober {prober} reopened its evidence file {path} at {at} (evidence_reopened): records just before may be in the old file, or lost"
                )),
                Ev::SegmentDropped(key) => found.push(format!(
                    "prober {prober} dropped evidence segment {key} unsent at {at} (its spool was over spool_max_mb): its records are missing"
                )),
                Ev::Duplicate(store) => found.push(format!(
                    "prober {prober}: another run process saved under the same prober id in {store} at {at} (duplicate_prober): their readiness overwrites each other's"
                )),
                _ => {}
            }
        }
        for p in found {
            self.note(p);
        }
        let window = self.window();
        let probers: BTreeSet<&str> = self.prober_ids.iter().map(|p| self.names.get(*p)).collect();
        // One pass over the items, however many services.
        let mut gathered: HashMap<usize, Gather> = HashMap::new();
        for i in &self.items {
            gathered.entry(i.service).or_default().take(i, &self.names);
        }
        let services = std::mem::take(&mut self.service_order)
            .into_iter()
            .map(|s| {
                let alarms = self.alarms.remove(self.names.get(s)).unwrap_or_default();
                let g = gathered.remove(&s).unwrap_or_default();
                build_service(g, &self.names, s, window, alarms)
            })
            .collect();
        let mut problems = self.problems;
        if self.more_problems > 0 {
            problems.push(format!("… and {} more problems", self.more_problems));
        }
        Drill {
            source: Source::Drill { files: self.files },
            window,
            probers: probers.into_iter().map(str::to_string).collect(),
            services,
            problems,
        }
    }
}

/// [`Merger`] over lines already read: `(file name, its lines)` per file (tests, small inputs).
pub fn merge(
    files: Vec<(String, Vec<Result<Envelope, LineError>>)>,
    service: Option<&str>,
) -> Drill {
    let mut m = Merger::new(service);
    for (name, lines) in files {
        let f = m.file(&name);
        for l in lines {
            m.push(f, l);
        }
    }
    m.finish()
}

/// Where a prober's run stands, record by record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAt {
    Stopped,
    /// Its `start` records (one per service).
    Starting,
    Running,
}

#[cfg(test)]
mod tests;
