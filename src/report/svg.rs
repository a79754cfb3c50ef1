//! The drill report's timeline picture: one SVG per service, drawn from the report model alone
//! ([`super::model`]). Lanes from top to bottom: each branch (readiness state, attempts coloured
//! by failure class, published value, overrides and events), the stable name (selected branch
//! with its TTL, end-to-end attempts), then each alarm (OK / ALARM / INSUFFICIENT_DATA).
//! Operator markers are vertical rules across every lane.
//!
//! Pure: no I/O, no clock. The size is bounded by the picture, not the evidence: attempts are
//! binned into pixel columns and same-class neighbours merged into runs, and bands narrower than
//! a pixel are folded into their neighbour, so a lane never holds more shapes than it has pixels.
//! The layout constants and [`lanes`] are public so a test can find each lane's pixels in a
//! screenshot.

use super::model::{AttemptMark, Band, MAX_DRAWN_MARKERS, ServiceDrill, Source, Span};
use crate::clock::{fmt_duration_ms, rfc3339};
use crate::readiness::{Millis, ReadinessState};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Width of the whole picture, px.
pub const WIDTH: u32 = 1200;
/// Left edge of the plot (the lane labels sit left of it), px.
pub const PLOT_LEFT: u32 = 230;
/// Right edge of the plot, px.
pub const PLOT_RIGHT: u32 = WIDTH - 24;
/// Top of the first lane (above it: marker labels and the time axis), px.
pub const LANES_TOP: u32 = 58;
/// Height of a branch lane, px.
pub const BRANCH_LANE_HEIGHT: u32 = 64;
/// Height of the stable-name lane, px.
pub const STABLE_LANE_HEIGHT: u32 = 34;
/// Height of an alarm lane, px.
pub const ALARM_LANE_HEIGHT: u32 = 18;
/// Vertical space between two lanes, px.
pub const LANE_GAP: u32 = 12;

/// Height of one sub-row of a lane (state, attempts, published value, ...), px.
const ROW: f64 = 14.0;
/// Two same-class attempt columns this close (px) or closer are drawn as one run.
const MERGE_GAP_PX: usize = 4;
/// Narrowest drawn attempt tick, px.
const TICK_PX: f64 = 2.0;
/// Colour of a successful attempt.
const OK_COLOUR: &str = "#2e7d32";
/// Failure-class colours, none of them green (success is green). A class takes the entry its
/// name hashes to, so it keeps its colour from report to report; see [`class_colours`].
const PALETTE: [&str; 12] = [
    "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#1f77b4", "#bcbd22",
    "#7f3c8d", "#b35806", "#a6196b", "#3969ac",
];
/// Marker-label rows above the axis, px from the top.
const MARKER_ROWS: [f64; 2] = [12.0, 26.0];
/// Baseline of the axis tick labels, px from the top.
const AXIS_Y: f64 = 46.0;
/// Rough width of one character of the 11 px labels, px (to decide whether a label fits).
const CHAR_PX: f64 = 6.2;

/// What a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneKind {
    /// A branch: state, attempts, published value, overrides and events.
    Branch,
    /// The stable name: the branch its answer selects, the TTL, end-to-end attempts.
    StableName,
    /// A branch alarm's states.
    Alarm,
}

/// Where one lane is drawn, px from the picture's top-left corner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneBox {
    /// What the lane shows.
    pub kind: LaneKind,
    /// The lane group's `id` attribute (`lane-<n>`), unique within a service's picture.
    pub id: String,
    /// The lane group's `data-lane` attribute: `branch:<name>`, `stable:<name>` or
    /// `alarm:<name>` (unescaped).
    pub data_lane: String,
    /// Top edge, px.
    pub top: u32,
    /// Height, px.
    pub height: u32,
}

/// The lanes of `d`'s picture, top to bottom: branches, the stable name (when present), alarms.
pub fn lanes(d: &ServiceDrill) -> Vec<LaneBox> {
    let mut out = Vec::new();
    let mut top = LANES_TOP;
    let mut push = |kind, data_lane: String, height| {
        out.push(LaneBox {
            kind,
            id: format!("lane-{}", out.len()),
            data_lane,
            top,
            height,
        });
        top += height + LANE_GAP;
    };
    for b in &d.branches {
        push(
            LaneKind::Branch,
            format!("branch:{}", b.name),
            BRANCH_LANE_HEIGHT,
        );
    }
    if let Some(s) = &d.stable_name {
        push(
            LaneKind::StableName,
            format!("stable:{}", s.name),
            STABLE_LANE_HEIGHT,
        );
    }
    for a in &d.alarms {
        push(
            LaneKind::Alarm,
            format!("alarm:{}", a.label()),
            ALARM_LANE_HEIGHT,
        );
    }
    out
}

/// Bottom edge of the last lane, px (the legend starts below it).
fn lanes_bottom(boxes: &[LaneBox]) -> u32 {
    boxes.last().map_or(LANES_TOP, |b| b.top + b.height)
}

/// Escape `s` for XML text and attribute values; characters XML cannot hold become U+FFFD, and
/// bidirectional overrides are written as escapes (`\u{202e}`), so a name cannot reorder the
/// text after it.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
                out.extend(c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    out
}

/// The colour of each failure class in `classes`: the palette entry its name hashes to
/// (FNV-1a), or, when another class of this report already took it, the next free entry
/// (classes claim in name order, so the result is deterministic). Distinct while there are no
/// more classes than palette entries.
pub fn class_colours<'a>(classes: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let sorted: std::collections::BTreeSet<&str> = classes.into_iter().collect();
    let mut taken = [false; PALETTE.len()];
    let mut out = BTreeMap::new();
    for class in sorted {
        let hash = class.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let first = (hash % PALETTE.len() as u64) as usize;
        let slot = (0..PALETTE.len())
            .map(|i| (first + i) % PALETTE.len())
            .find(|&i| !taken[i])
            .unwrap_or(first);
        taken[slot] = true;
        out.insert(class.to_string(), PALETTE[slot].to_string());
    }
    out
}

/// Fill colour of a readiness state band.
fn state_colour(s: ReadinessState) -> &'static str {
    match s {
        ReadinessState::Ready => "#a5d6a7",
        ReadinessState::Unready => "#ef9a9a",
        ReadinessState::PendingApproval => "#ffd54f",
        ReadinessState::Unknown => "#d6d6d6",
    }
}

/// Fill colour of an alarm state band.
fn alarm_colour(s: &str) -> &'static str {
    match s {
        "OK" => "#a5d6a7",
        "ALARM" => "#e53935",
        _ => "#bdbdbd",
    }
}

/// Stroke colour of a marker rule.
fn marker_colour(kind: &str) -> &'static str {
    match kind {
        "fault" => "#c62828",
        "restore" => "#2e7d32",
        _ => "#546e7a",
    }
}

/// Maps times to x and formats them: UTC clock times for a drill, offsets for a simulation.
struct Axis {
    window: Span,
    offsets: bool,
}

impl Axis {
    /// x of instant `t`, px, clamped to the plot.
    fn x(&self, t: Millis) -> f64 {
        let len = self.window.len().max(1) as f64;
        let frac = ((t - self.window.from) as f64 / len).clamp(0.0, 1.0);
        f64::from(PLOT_LEFT) + frac * f64::from(PLOT_RIGHT - PLOT_LEFT)
    }

    /// The instant as a reader wants it: `18:56:35` (UTC) or `+2m 30s`.
    fn label(&self, t: Millis) -> String {
        if self.offsets {
            format!("+{}", fmt_duration_ms(t - self.window.from))
        } else {
            rfc3339(t).get(11..19).unwrap_or_default().to_string()
        }
    }

    /// A span for a hover title: `18:56:35–18:57:05 (30s)`.
    fn span(&self, from: Millis, until: Millis) -> String {
        format!(
            "{}–{} ({})",
            self.label(from),
            self.label(until),
            fmt_duration_ms(until - from)
        )
    }

    /// Tick instants: the smallest "round" step that gives at most about one tick per 110 px,
    /// aligned to multiples of the step (UTC clock) or to the window's start (offsets).
    fn ticks(&self) -> Vec<Millis> {
        const STEPS_S: [i64; 18] = [
            1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
            86400,
        ];
        let max_ticks = i64::from((PLOT_RIGHT - PLOT_LEFT) / 110).max(2);
        let len = self.window.len().max(1);
        let step = STEPS_S
            .iter()
            .map(|s| s * 1000)
            .find(|s| len / s <= max_ticks)
            .unwrap_or_else(|| (len / max_ticks).max(1));
        let origin = if self.offsets { self.window.from } else { 0 };
        let first = origin + (self.window.from - origin).div_euclid(step) * step;
        let first = if first < self.window.from {
            first + step
        } else {
            first
        };
        (0..=max_ticks + 1)
            .map(|i| first + i * step)
            .take_while(|t| *t <= self.window.until)
            .collect()
    }
}

/// The timeline of one service over `window` as an `<svg>` element to inline in HTML (fixed
/// size, [`WIDTH`] px wide; without an `xmlns`, which an HTML parser supplies, so the page names
/// no URL), every string escaped, every shape with a hover `<title>`. `source` decides the axis:
/// UTC clock times for a drill, offsets from the start for a simulation.
pub fn timeline(d: &ServiceDrill, source: &Source, window: Span) -> String {
    let axis = Axis {
        window,
        offsets: matches!(source, Source::Simulation { .. }),
    };
    let boxes = lanes(d);
    let bottom = lanes_bottom(&boxes);
    let classes = classes_seen(d);
    let colours = class_colours(classes.iter().map(String::as_str));
    let (legend, legend_h) = legend(&colours, bottom + 14);
    let height = bottom + 14 + legend_h + 4;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11" role="img"><title>{}</title>"#,
        escape(&format!("Timeline of {}", d.name))
    );
    let _ = write!(
        s,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    grid(&mut s, &axis, bottom);
    for (lane, b) in boxes.iter().zip(lane_sources(d)) {
        let _ = write!(
            s,
            r#"<g id="{}" data-lane="{}">"#,
            lane.id,
            escape(&lane.data_lane)
        );
        match b {
            LaneSource::Branch(i) => branch_lane(&mut s, d, i, lane, &axis, &colours),
            LaneSource::Stable => stable_lane(&mut s, d, lane, &axis, &colours),
            LaneSource::Alarm(i) => alarm_lane(&mut s, d, i, lane, &axis),
        }
        s.push_str("</g>");
    }
    markers(&mut s, d, &axis, bottom);
    s.push_str(&legend);
    s.push_str("</svg>");
    s
}

/// Which model item a lane box draws.
enum LaneSource {
    Branch(usize),
    Stable,
    Alarm(usize),
}

/// The model items in [`lanes`]' order.
fn lane_sources(d: &ServiceDrill) -> Vec<LaneSource> {
    let mut v: Vec<LaneSource> = (0..d.branches.len()).map(LaneSource::Branch).collect();
    if d.stable_name.is_some() {
        v.push(LaneSource::Stable);
    }
    v.extend((0..d.alarms.len()).map(LaneSource::Alarm));
    v
}

/// Every failure class on any lane of `d`, sorted.
fn classes_seen(d: &ServiceDrill) -> Vec<String> {
    let mut set = std::collections::BTreeSet::new();
    for b in &d.branches {
        set.extend(b.attempts.iter().filter_map(|a| a.class.clone()));
    }
    if let Some(st) = &d.stable_name {
        set.extend(
            st.rounds
                .iter()
                .filter_map(|r| r.end_to_end.clone().flatten()),
        );
    }
    set.into_iter().collect()
}

/// The tick labels above the lanes and light vertical grid lines through them.
fn grid(s: &mut String, axis: &Axis, bottom: u32) {
    let zone = if axis.offsets {
        "time since start".to_string()
    } else {
        format!(
            "UTC, {}",
            rfc3339(axis.window.from).get(..10).unwrap_or_default()
        )
    };
    let _ = write!(
        s,
        r##"<text x="8" y="{AXIS_Y}" fill="#555">{}</text>"##,
        escape(&zone)
    );
    for t in axis.ticks() {
        let x = axis.x(t);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{bottom}" stroke="#e0e0e0"/><text x="{x:.1}" y="{AXIS_Y}" text-anchor="middle" fill="#333">{}</text>"##,
            AXIS_Y + 4.0,
            escape(&axis.label(t))
        );
    }
}

/// The lane's name (bold) and what it is, in the label column.
fn lane_label(s: &mut String, lane: &LaneBox, name: &str, what: &str) {
    let shown = truncate(name, 26);
    let _ = write!(
        s,
        r##"<text x="8" y="{}" font-weight="bold" fill="#222"><title>{}</title>{}</text><text x="8" y="{}" fill="#666">{}</text>"##,
        lane.top + 12,
        escape(name),
        escape(&shown),
        lane.top + 25,
        escape(what)
    );
}

/// A small right-aligned caption for a sub-row, left of the plot.
fn row_caption(s: &mut String, y: f64, text: &str) {
    let _ = write!(
        s,
        r##"<text x="{}" y="{:.1}" text-anchor="end" font-size="9" fill="#888">{}</text>"##,
        PLOT_LEFT - 6,
        y + ROW - 4.0,
        escape(text)
    );
}

/// `s` cut to `max` characters with an ellipsis.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A branch lane: state band, attempts, published value, overrides and events.
fn branch_lane(
    s: &mut String,
    d: &ServiceDrill,
    i: usize,
    lane: &LaneBox,
    axis: &Axis,
    colours: &BTreeMap<String, String>,
) {
    let Some(b) = d.branches.get(i) else { return };
    let what = match &b.role {
        Some(role) => format!("{role} branch"),
        None => "branch".to_string(),
    };
    lane_label(s, lane, &b.name, &what);
    let top = f64::from(lane.top);
    let _ = write!(
        s,
        r##"<rect x="{PLOT_LEFT}" y="{top}" width="{}" height="{}" fill="#fafafa" stroke="#e0e0e0"/>"##,
        PLOT_RIGHT - PLOT_LEFT,
        lane.height
    );
    row_caption(s, top + 1.0, "state");
    let states: Vec<(Span, ReadinessState)> = b.states.iter().map(|x| (x.span, x.state)).collect();
    bands(s, axis, top + 1.0, ROW, &states, |st| {
        (state_colour(*st).to_string(), st.as_str().to_string())
    });
    row_caption(s, top + 17.0, "attempts");
    attempts(s, axis, top + 17.0, ROW, &b.attempts, colours);
    row_caption(s, top + 33.0, "published");
    published(s, axis, top + 33.0, &b.published);
    row_caption(s, top + 49.0, "overrides, events");
    let overrides: Vec<(Span, String)> = b
        .overrides
        .iter()
        .map(|x| (x.span, x.state.clone()))
        .collect();
    bands(s, axis, top + 49.0, ROW, &overrides, |o| {
        ("#7e57c2".to_string(), format!("override {o}"))
    });
    for e in &b.events {
        let x = axis.x(e.at);
        let y = top + 49.0;
        let _ = write!(
            s,
            r##"<path d="M{x:.1} {y:.1} l5 7 l-5 7 l-5 -7 z" fill="#37474f"><title>{}</title></path>"##,
            escape(&format!("{} {}", axis.label(e.at), e.label))
        );
    }
}

/// What one stable-name round answered: the branch selected, whether the answer matched no
/// branch, the TTL (s).
type Answer = (Option<String>, bool, Option<u32>);

/// The stable-name lane: which branch each answer selects (with its TTL), then the end-to-end
/// attempts through the name.
fn stable_lane(
    s: &mut String,
    d: &ServiceDrill,
    lane: &LaneBox,
    axis: &Axis,
    colours: &BTreeMap<String, String>,
) {
    let Some(st) = &d.stable_name else { return };
    lane_label(s, lane, &st.name, "stable name");
    let top = f64::from(lane.top);
    let _ = write!(
        s,
        r##"<rect x="{PLOT_LEFT}" y="{top}" width="{}" height="{}" fill="#fafafa" stroke="#e0e0e0"/>"##,
        PLOT_RIGHT - PLOT_LEFT,
        lane.height
    );
    // One band per run of rounds with the same answer: selected branch, unknown target or no
    // answer, and TTL.
    let mut sel: Vec<(Span, Answer)> = Vec::new();
    for (k, r) in st.rounds.iter().enumerate() {
        let until = st
            .rounds
            .get(k + 1)
            .map_or(axis.window.until, |n| n.at)
            .max(r.at);
        let key = (r.selected.clone(), r.unknown_target, r.ttl);
        match sel.last_mut() {
            Some((span, last)) if *last == key => span.until = until,
            _ => sel.push((Span { from: r.at, until }, key)),
        }
    }
    row_caption(s, top + 1.0, "selects");
    bands(s, axis, top + 1.0, ROW, &sel, |(selected, unknown, ttl)| {
        let colour = if *unknown {
            "#b71c1c".to_string()
        } else {
            match selected
                .as_ref()
                .and_then(|n| d.branches.iter().position(|b| &b.name == n))
            {
                Some(0) => "#42a5f5".to_string(),
                Some(_) => "#ab47bc".to_string(),
                None => "#bdbdbd".to_string(),
            }
        };
        let what = match (selected, unknown) {
            (_, true) => "unknown target".to_string(),
            (Some(n), false) => format!("→ {n}"),
            // Answered (it has a TTL), but the answer matches several branches.
            (None, false) if ttl.is_some() => "matches several branches".to_string(),
            (None, false) => "no answer".to_string(),
        };
        let ttl = ttl.map(|t| format!(", TTL {t}s")).unwrap_or_default();
        (colour, format!("{what}{ttl}"))
    });
    let e2e: Vec<AttemptMark> = st
        .rounds
        .iter()
        .filter_map(|r| {
            r.end_to_end.as_ref().map(|c| AttemptMark {
                at: r.at,
                class: c.clone(),
            })
        })
        .collect();
    row_caption(s, top + 18.0, "end-to-end");
    attempts(s, axis, top + 18.0, ROW, &e2e, colours);
}

/// An alarm lane: OK / ALARM / INSUFFICIENT_DATA bands.
fn alarm_lane(s: &mut String, d: &ServiceDrill, i: usize, lane: &LaneBox, axis: &Axis) {
    let Some(a) = d.alarms.get(i) else { return };
    // One line: the alarm's name; the branch it watches is in the hover title.
    let _ = write!(
        s,
        r##"<text x="8" y="{}" fill="#222"><title>{}</title>{}</text>"##,
        lane.top + 13,
        escape(&format!("alarm {} on branch {}", a.label(), a.branch)),
        escape(&truncate(&format!("alarm {}", a.label()), 34))
    );
    let states: Vec<(Span, String)> = a.states.iter().map(|x| (x.span, x.state.clone())).collect();
    bands(
        s,
        axis,
        f64::from(lane.top),
        f64::from(lane.height),
        &states,
        |st| (alarm_colour(st).to_string(), st.clone()),
    );
}

/// Draw `items` as bands in one sub-row, each filled and titled by `style` (colour, text), the
/// text written inside when it fits. A band narrower than a pixel is folded into the band drawn
/// before it while that one is narrower than a pixel too (its title counts them), so about one
/// shape per pixel column is drawn at most.
fn bands<T>(
    s: &mut String,
    axis: &Axis,
    y: f64,
    h: f64,
    items: &[(Span, T)],
    style: impl Fn(&T) -> (String, String),
) {
    struct Run {
        x0: f64,
        x1: f64,
        colour: String,
        text: String,
        title: String,
        folded: usize,
    }
    let mut runs: Vec<Run> = Vec::new();
    // An empty span held no state: nothing to draw.
    for (span, item) in items.iter().filter(|(span, _)| !span.is_empty()) {
        let (x0, x1) = (axis.x(span.from), axis.x(span.until));
        if x1 - x0 < 1.0
            && let Some(last) = runs.last_mut()
            && x0 - last.x1 < 1.0
            && last.x1 - last.x0 < 1.0
        {
            last.x1 = last.x1.max(x1);
            last.folded += 1;
            continue;
        }
        let (colour, text) = style(item);
        let title = format!("{}: {}", axis.span(span.from, span.until), text);
        runs.push(Run {
            x0,
            x1,
            colour,
            text,
            title,
            folded: 0,
        });
    }
    for r in runs {
        let w = (r.x1 - r.x0).max(1.0);
        let more = if r.folded > 0 {
            format!(" (and {} shorter changes after it)", r.folded)
        } else {
            String::new()
        };
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"><title>{}{}</title></rect>"#,
            r.x0,
            r.colour,
            escape(&r.title),
            escape(&more)
        );
        // The text inside the band, cut to fit; none when not even a few characters fit.
        let fits = ((w - 8.0) / CHAR_PX).max(0.0) as usize;
        if fits >= 6 && h >= 12.0 {
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#212121" pointer-events="none">{}</text>"##,
                r.x0 + 4.0,
                y + h / 2.0 + 4.0,
                escape(&truncate(&r.text, fits))
            );
        }
    }
}

/// Attempts per outcome (`None`: success).
type Counts = BTreeMap<Option<String>, usize>;

/// One run of attempts in neighbouring pixel columns with the same dominant outcome.
struct AttemptRun {
    class: Option<String>,
    col0: usize,
    col1: usize,
    from: Millis,
    until: Millis,
    counts: Counts,
}

/// Attempts binned into pixel columns; a column's outcome is its most frequent failure class,
/// or success when none failed. Neighbouring columns (up to [`MERGE_GAP_PX`] apart) with the
/// same outcome make one run.
fn attempt_runs(axis: &Axis, marks: &[AttemptMark]) -> Vec<AttemptRun> {
    let width = (PLOT_RIGHT - PLOT_LEFT) as usize;
    let mut cols: Vec<Option<(Millis, Millis, Counts)>> = vec![None; width + 1];
    for m in marks {
        let col = ((axis.x(m.at) - f64::from(PLOT_LEFT)) as usize).min(width);
        let Some(slot) = cols.get_mut(col) else {
            continue;
        };
        let entry = slot.get_or_insert_with(|| (m.at, m.at, BTreeMap::new()));
        entry.0 = entry.0.min(m.at);
        entry.1 = entry.1.max(m.at);
        *entry.2.entry(m.class.clone()).or_default() += 1;
    }
    let mut runs: Vec<AttemptRun> = Vec::new();
    for (col, c) in cols.into_iter().enumerate() {
        let Some((from, until, counts)) = c else {
            continue;
        };
        let class = counts
            .iter()
            .filter(|(k, _)| k.is_some())
            .max_by_key(|(_, n)| **n)
            .map(|(k, _)| k.clone())
            .unwrap_or(None);
        match runs.last_mut() {
            Some(r) if r.class == class && col - r.col1 <= MERGE_GAP_PX => {
                r.col1 = col;
                r.until = r.until.max(until);
                for (k, n) in counts {
                    *r.counts.entry(k).or_default() += n;
                }
            }
            _ => runs.push(AttemptRun {
                class,
                col0: col,
                col1: col,
                from,
                until,
                counts,
            }),
        }
    }
    runs
}

/// Attempts in one sub-row: a tick (or a run of merged ticks) per outcome, coloured by class.
fn attempts(
    s: &mut String,
    axis: &Axis,
    y: f64,
    h: f64,
    marks: &[AttemptMark],
    colours: &BTreeMap<String, String>,
) {
    for r in attempt_runs(axis, marks) {
        let colour = match &r.class {
            None => OK_COLOUR,
            Some(c) => colours.get(c).map_or("#000000", String::as_str),
        };
        let total: usize = r.counts.values().sum();
        let detail: Vec<String> = r
            .counts
            .iter()
            .map(|(k, n)| format!("{n} {}", k.as_deref().unwrap_or("ok")))
            .collect();
        let when = if r.from == r.until {
            axis.label(r.from)
        } else {
            axis.span(r.from, r.until)
        };
        let title = format!(
            "{} attempt{} {when}: {}",
            total,
            if total == 1 { "" } else { "s" },
            detail.join(", ")
        );
        let x = f64::from(PLOT_LEFT) + r.col0 as f64;
        let w = ((r.col1 - r.col0) as f64 + TICK_PX).max(TICK_PX);
        let _ = write!(
            s,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{colour}"><title>{}</title></rect>"#,
            escape(&title)
        );
    }
}

/// The published value as a step line: 1 at the top of the sub-row, 0 at the bottom, nothing
/// while no value is published; each band also gets a transparent hover target.
fn published(s: &mut String, axis: &Axis, y: f64, items: &[Band<Option<f64>>]) {
    let path = step_path(axis, items, |v| {
        y + 2.0 + (1.0 - v.clamp(0.0, 1.0)) * (ROW - 4.0)
    });
    if !path.is_empty() {
        let _ = write!(
            s,
            r##"<path d="{}" fill="none" stroke="#0d47a1" stroke-width="2"/>"##,
            path.trim_start()
        );
    }
    let items: Vec<(Span, Option<f64>)> = items.iter().map(|b| (b.span, b.state)).collect();
    bands(s, axis, y, ROW, &items, |v| {
        let text = match v {
            Some(v) => format!("published {v}"),
            None => "nothing published".to_string(),
        };
        ("transparent".to_string(), text)
    });
}

/// The step line through `items` (y of a value by `level`), built per pixel column so its
/// length is bounded by the plot's width: a column where the value changed gets a vertical
/// stroke over every level it held, ending at its last one; a run of columns at one level is
/// one horizontal stroke; no line where nothing is published.
fn step_path(axis: &Axis, items: &[Band<Option<f64>>], level: impl Fn(f64) -> f64) -> String {
    let width = (PLOT_RIGHT - PLOT_LEFT) as usize;
    // Per column: lowest and highest y drawn, and the y it ends at.
    let mut cols: Vec<Option<(f64, f64, f64)>> = vec![None; width + 1];
    for b in items {
        let Some(v) = b.state else { continue };
        let ly = level(v);
        let col = |t| (axis.x(t) - f64::from(PLOT_LEFT)) as usize;
        let (c0, c1) = (col(b.span.from), col(b.span.until.max(b.span.from)));
        for c in cols.iter_mut().take(c1.max(c0 + 1).min(width + 1)).skip(c0) {
            *c = Some(match *c {
                Some((lo, hi, _)) => (lo.min(ly), hi.max(ly), ly),
                None => (ly, ly, ly),
            });
        }
    }
    let mut path = String::new();
    let mut pen: Option<f64> = None;
    for (i, c) in cols.iter().enumerate() {
        let x = f64::from(PLOT_LEFT) + i as f64;
        match (*c, pen) {
            (None, Some(_)) => {
                let _ = write!(path, " H{x:.1}");
                pen = None;
            }
            (None, None) => {}
            (Some((lo, hi, end)), p) => {
                let flat = lo == hi && p == Some(lo);
                if !flat {
                    if p.is_some() {
                        let _ = write!(path, " H{x:.1}");
                    }
                    let start = p.unwrap_or(lo);
                    let _ = write!(path, " M{x:.1} {start:.1}");
                    let mut at = start;
                    for v in [lo, hi, end] {
                        if v != at {
                            let _ = write!(path, " V{v:.1}");
                            at = v;
                        }
                    }
                }
                pen = Some(end);
            }
        }
    }
    if pen.is_some() {
        let _ = write!(path, " H{PLOT_RIGHT}");
    }
    path
}

/// Operator markers: a dashed vertical rule through every lane, its label above the axis
/// (alternating rows when two labels would overlap). Labels are numbered as in the page's marker
/// table; where neither row has room, the number alone stands for the label. The first
/// [`MAX_DRAWN_MARKERS`] are drawn; a caption counts the rest.
fn markers(s: &mut String, d: &ServiceDrill, axis: &Axis, bottom: u32) {
    let mut row_end = [f64::MIN; MARKER_ROWS.len()];
    if let Some(more) = d.markers.len().checked_sub(MAX_DRAWN_MARKERS)
        && more > 0
    {
        let _ = write!(
            s,
            r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#555555">{}</text>"##,
            WIDTH - 4,
            MARKER_ROWS[0],
            escape(&format!(
                "+{more} more markers not drawn (see the marker table)"
            ))
        );
    }
    for (k, m) in d.markers.iter().enumerate().take(MAX_DRAWN_MARKERS) {
        let x = axis.x(m.at);
        let colour = marker_colour(&m.kind);
        let free = MARKER_ROWS
            .iter()
            .enumerate()
            .find(|(i, _)| row_end.get(*i).is_some_and(|e| *e < x));
        let text = match free {
            Some(_) => truncate(&format!("{}. {}: {}", k + 1, m.kind, m.label), 40),
            None => format!("{}.", k + 1),
        };
        let w = text.chars().count() as f64 * CHAR_PX;
        let (row, y) = free.map_or_else(
            || {
                // The row whose last label ends first.
                let i = (0..MARKER_ROWS.len())
                    .min_by(|a, b| row_end[*a].total_cmp(&row_end[*b]))
                    .unwrap_or(0);
                (i, MARKER_ROWS[i])
            },
            |(i, y)| (i, *y),
        );
        if let Some(e) = row_end.get_mut(row) {
            *e = x + w + 6.0;
        }
        // A label that would run past the plot is anchored at its end instead.
        let anchor = if x + w > f64::from(WIDTH) - 4.0 {
            "end"
        } else {
            "start"
        };
        let title = format!(
            "{} {} marker by {}: {}",
            axis.label(m.at),
            m.kind,
            m.by,
            m.label
        );
        let _ = write!(
            s,
            r#"<g class="marker"><title>{}</title><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{bottom}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="5 3"/><text x="{:.1}" y="{y:.1}" text-anchor="{anchor}" fill="{colour}" font-weight="bold">{}</text></g>"#,
            escape(&title),
            y + 3.0,
            if anchor == "start" { x + 3.0 } else { x - 3.0 },
            escape(&text)
        );
    }
}

/// The legend below the lanes: outcomes present (ok and each failure class), readiness states,
/// alarm states and marker kinds, wrapped into rows. Returns the SVG and its height, px.
fn legend(colours: &BTreeMap<String, String>, top: u32) -> (String, u32) {
    let mut items: Vec<(String, String)> = vec![("attempt ok".into(), OK_COLOUR.into())];
    items.extend(colours.iter().map(|(c, col)| (c.clone(), col.clone())));
    for st in [
        ReadinessState::Ready,
        ReadinessState::Unready,
        ReadinessState::PendingApproval,
        ReadinessState::Unknown,
    ] {
        items.push((format!("state {}", st.as_str()), state_colour(st).into()));
    }
    for a in ["ALARM", "INSUFFICIENT_DATA"] {
        items.push((format!("alarm {a}"), alarm_colour(a).into()));
    }
    for k in ["fault", "restore", "note"] {
        items.push((format!("{k} marker"), marker_colour(k).into()));
    }
    let mut s = String::from(r#"<g class="legend">"#);
    let (mut x, mut y) = (8.0, f64::from(top));
    for (label, colour) in items {
        let w = 16.0 + label.chars().count() as f64 * CHAR_PX + 14.0;
        if x + w > f64::from(WIDTH) - 8.0 {
            x = 8.0;
            y += 18.0;
        }
        let _ = write!(
            s,
            r##"<rect x="{x:.1}" y="{y:.1}" width="11" height="11" fill="{colour}"/><text x="{:.1}" y="{:.1}" fill="#333">{}</text>"##,
            x + 15.0,
            y + 10.0,
            escape(&label)
        );
        x += w;
    }
    s.push_str("</g>");
    (s, (y - f64::from(top)) as u32 + 14)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{BranchLane, Marker};

    fn lane(name: &str, attempts: Vec<AttemptMark>) -> BranchLane {
        BranchLane {
            name: name.into(),
            role: Some("PRIMARY".into()),
            attempts,
            states: vec![],
            published: vec![],
            overrides: vec![],
            events: vec![],
        }
    }

    fn service(branches: Vec<BranchLane>, markers: Vec<Marker>) -> ServiceDrill {
        ServiceDrill {
            name: "orders".into(),
            config: vec![],
            branches,
            stable_name: None,
            alarms: vec![],
            markers,
            episodes: vec![],
        }
    }

    const DRILL: Source = Source::Drill { files: Vec::new() };

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            escape("a<b>&\"c'\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&#39;\u{FFFD}"
        );
        let m = Marker {
            at: 5_000,
            kind: "fault".into(),
            label: "</text><script>x</script>".into(),
            by: "o'neil".into(),
        };
        let svg = timeline(
            &service(vec![lane("p<1>", vec![])], vec![m]),
            &DRILL,
            Span {
                from: 0,
                until: 10_000,
            },
        );
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(!svg.contains("p<1>"), "{svg}");
        assert!(svg.contains("data-lane=\"branch:p&lt;1&gt;\""), "{svg}");
    }

    #[test]
    fn crowded_markers_keep_their_numbers_instead_of_overlapping() {
        let m = |at: Millis, label: &str| Marker {
            at,
            kind: "note".into(),
            label: label.into(),
            by: "op".into(),
        };
        let markers = vec![
            m(1_000, "first long label"),
            m(1_100, "second"),
            m(1_200, "third"),
        ];
        let svg = timeline(
            &service(vec![lane("p", vec![])], markers),
            &DRILL,
            Span {
                from: 0,
                until: 600_000,
            },
        );
        assert!(svg.contains(">1. note: first long label</text>"), "{svg}");
        assert!(svg.contains(">2. note: second</text>"), "{svg}");
        // Both rows are taken at the third: its number stands for it.
        assert!(svg.contains(">3.</text>"), "{svg}");
    }

    #[test]
    fn thousands_of_attempts_stay_small() {
        // 20,000 attempts, every 7th failing with one of two classes: per-attempt shapes would
        // be megabytes; runs per pixel column keep it bounded by the plot width.
        let marks: Vec<AttemptMark> = (0..20_000)
            .map(|i| AttemptMark {
                at: i * 1000,
                class: match i % 7 {
                    0 => Some("server_read_only".into()),
                    3 if i % 2 == 0 => Some("tcp_timeout".into()),
                    _ => None,
                },
            })
            .collect();
        let d = service(vec![lane("p", marks)], vec![]);
        let svg = timeline(
            &d,
            &DRILL,
            Span {
                from: 0,
                until: 20_000_000,
            },
        );
        let rects = svg.matches("<rect").count();
        assert!(rects < 1200, "{rects} rects");
        assert!(svg.len() < 300_000, "{} bytes", svg.len());
        assert!(svg.contains("server_read_only"));
        assert!(svg.contains("tcp_timeout"));
    }

    #[test]
    fn a_flapping_state_stays_a_bounded_number_of_bands() {
        // A state change every second for a day: 86,400 bands, under a pixel each.
        let mut b = lane("p", vec![]);
        b.published = (0..86_400)
            .map(|i| Band {
                span: Span {
                    from: i * 1000,
                    until: (i + 1) * 1000,
                },
                state: Some((i % 2) as f64),
            })
            .collect();
        b.states = (0..86_400)
            .map(|i| Band {
                span: Span {
                    from: i * 1000,
                    until: (i + 1) * 1000,
                },
                state: if i % 2 == 0 {
                    ReadinessState::Ready
                } else {
                    ReadinessState::Unready
                },
            })
            .collect();
        let svg = timeline(
            &service(vec![b], vec![]),
            &DRILL,
            Span {
                from: 0,
                until: 86_400_000,
            },
        );
        // At most about one shape per pixel column in each of the two flapping sub-rows.
        let rects = svg.matches("<rect").count();
        let bound = 2 * (PLOT_RIGHT - PLOT_LEFT) as usize + 100;
        assert!(rects < bound, "{rects} rects");
        assert!(svg.contains("shorter changes after it"));
        assert!(svg.len() < 600_000, "{} bytes", svg.len());
    }

    #[test]
    fn sparse_same_class_attempts_merge_into_one_run() {
        let axis = Axis {
            window: Span {
                from: 0,
                until: 100_000,
            },
            offsets: true,
        };
        let ok = |at| AttemptMark { at, class: None };
        let fail = |at| AttemptMark {
            at,
            class: Some("tcp_refused".into()),
        };
        // 1 s apart is ~10 px: too far to merge; 0.2 s apart is ~2 px: one run.
        let runs = attempt_runs(&axis, &[ok(0), ok(200), ok(400), fail(600), ok(10_000)]);
        let got: Vec<(Option<&str>, usize)> = runs
            .iter()
            .map(|r| (r.class.as_deref(), r.counts.values().sum()))
            .collect();
        assert_eq!(got, vec![(None, 3), (Some("tcp_refused"), 1), (None, 1)]);
    }

    #[test]
    fn class_colours_are_stable_distinct_and_never_green() {
        let a = class_colours(["server_read_only", "tcp_timeout"]);
        let b = class_colours(["tcp_timeout", "server_read_only", "dns_nxdomain"]);
        assert_eq!(a["server_read_only"], b["server_read_only"]);
        let all = [
            "dns_nxdomain",
            "dns_servfail",
            "tcp_refused",
            "tcp_timeout",
            "tls_handshake",
            "auth_denied",
            "server_read_only",
            "verify_mismatch",
        ];
        let c = class_colours(all);
        let distinct: std::collections::BTreeSet<&String> = c.values().collect();
        assert_eq!(distinct.len(), all.len());
        assert!(c.values().all(|v| v != OK_COLOUR));
    }

    #[test]
    fn ticks_are_clock_times_for_a_drill_and_offsets_for_a_simulation() {
        // 2026-12-01T18:56:35Z plus ten minutes.
        let from = 1_796_151_395_000;
        let drill = Axis {
            window: Span {
                from,
                until: from + 600_000,
            },
            offsets: false,
        };
        let labels: Vec<String> = drill.ticks().iter().map(|t| drill.label(*t)).collect();
        // At most one label per 110 px: 2-minute steps on the even minutes.
        assert_eq!(
            labels,
            ["18:58:00", "19:00:00", "19:02:00", "19:04:00", "19:06:00"]
        );
        let sim = Axis {
            window: Span {
                from: 0,
                until: 1_800_000,
            },
            offsets: true,
        };
        let labels: Vec<String> = sim.ticks().iter().map(|t| sim.label(*t)).collect();
        assert_eq!(
            labels.get(..2),
            Some(&["+0s".to_string(), "+5m".to_string()][..])
        );
    }

    #[test]
    fn lanes_stack_branches_then_stable_name_then_alarms() {
        let d = service(vec![lane("a", vec![]), lane("b", vec![])], vec![]);
        let boxes = lanes(&d);
        assert_eq!(boxes.len(), 2);
        assert_eq!(boxes[0].top, LANES_TOP);
        assert_eq!(boxes[1].top, LANES_TOP + BRANCH_LANE_HEIGHT + LANE_GAP);
        assert_eq!(boxes[1].data_lane, "branch:b");
    }
}
