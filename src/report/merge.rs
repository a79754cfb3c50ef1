//! Evidence of one or more probers merged into one [`Drill`]: records ordered by time, then
//! prober, then `record_seq`; one marker per `marker_id`; a lane per branch; the stable-name
//! rounds; the configuration in force; and every line that could not be used, as a problem.
//!
//! Pure: the caller reads the files ([`crate::record::read_lines`]) and hands each line to a
//! [`Merger`], which keeps only what the lanes and the phase table need (an attempt becomes a
//! time and a class), so memory grows with the drill's events, not with the files' bytes.

use super::model::{
    AlarmLane, AttemptMark, Band, BranchLane, Drill, Event, Marker, Round, ServiceDrill, Source,
    Span, StableLane,
};
use super::phases::{self, ApprovalFact, Facts, PublishFact, TransitionFact};
use crate::clock::rfc3339;
use crate::control::Override;
use crate::probe::Outcome;
use crate::readiness::{Millis, ReadinessState};
use crate::record::{Envelope, LineError, OverrideAction, PublishReason, Record, Start};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

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

/// Most reused ranges of one prober named; the rest are counted.
const MAX_REUSED_RANGES: usize = 10;

/// A digest of `env`'s content (its `record_seq` aside): two lines with one number and the same
/// digest are the same record read twice (a file and its copy, a local file and its S3
/// segment); different digests are two records. Taken over the parsed line, so a copy that
/// differs only in key order or spacing is still the same record.
fn digest(env: &Envelope) -> u64 {
    /// Feeds the serialised line to the hasher without holding it.
    struct Feed(std::hash::DefaultHasher);
    impl std::io::Write for Feed {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            std::hash::Hasher::write(&mut self.0, b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut f = Feed(std::hash::DefaultHasher::new());
    // Serialising a parsed record into a sink that cannot fail does not fail; were it to, the
    // part fed so far still tells records apart.
    let _ = serde_json::to_writer(&mut f, env);
    std::hash::Hasher::finish(&f.0)
}

/// One sentence per prober whose `record_seq` numbers two different records (its numbering
/// restarted), naming the numbers reused as ranges, in prober order.
fn seq_reuse(per: &mut BTreeMap<String, Vec<(u64, u64)>>) -> Vec<String> {
    let mut out = Vec::new();
    for (prober, v) in per.iter_mut() {
        v.sort_unstable();
        v.dedup();
        let mut reused: Vec<u64> = v
            .windows(2)
            .filter_map(|w| (w[0].0 == w[1].0).then_some(w[0].0))
            .collect();
        reused.dedup();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for n in reused {
            match ranges.last_mut() {
                Some(r) if r.1 + 1 == n => r.1 = n,
                _ => ranges.push((n, n)),
            }
        }
        if ranges.is_empty() {
            continue;
        }
        let mut named: Vec<String> = ranges
            .iter()
            .take(MAX_REUSED_RANGES)
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}–{b}")
                }
            })
            .collect();
        if ranges.len() > MAX_REUSED_RANGES {
            named.push(format!("{} more ranges", ranges.len() - MAX_REUSED_RANGES));
        }
        out.push(format!(
            "prober {prober}: record_seq {} reused by different records (its numbering restarted: a fresh disk whose [evidence.s3] did not answer at start, or a lost evidence file); all are kept, in time order",
            named.join(", ")
        ));
    }
    out
}

/// One sentence per jump in a prober's `record_seq` (records lost between two lines), in
/// prober order. A first number above 1 is not a gap: older records may be in a rotated file.
fn seq_gaps(per: BTreeMap<String, Vec<(u64, u64)>>) -> Vec<String> {
    let mut out = Vec::new();
    for (prober, v) in per {
        let mut v: Vec<u64> = v.into_iter().map(|(seq, _)| seq).collect();
        v.sort_unstable();
        v.dedup();
        for w in v.windows(2) {
            if let [a, b] = *w
                && b > a + 1
            {
                let lost = b - a - 1;
                out.push(format!(
                    "prober {prober}: record_seq jumps from {a} to {b}: {lost} record{} missing (lost when written, or in a file not given)",
                    if lost == 1 { "" } else { "s" }
                ));
            }
        }
    }
    out
}

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
struct Gather {
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

    fn take(&mut self, i: &Item, names: &Names) {
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
fn build_service(
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

#[cfg(test)]
mod tests;
