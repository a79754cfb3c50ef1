//! The report as Markdown (`report.md`): source, window, probers, per service the configuration
//! in force, the markers and a phase table per failover and failback, then the problems. Pure.
//!
//! Every label from the evidence (marker labels, names, notes) is escaped: `|` cannot break a
//! table and a control character cannot reach a terminal or a renderer raw.

use super::model::{
    Drill, Episode, EpisodeKind, MAX_LISTED_MARKERS, MAX_TABLED_EPISODES, ServiceDrill, Source,
    evidence_names,
};
use crate::clock::{fmt_duration_ms, rfc3339};
use crate::readiness::Millis;
use std::fmt::Write;

/// `s` safe in a table cell or a line, as text: the characters that would make a cell, raw
/// HTML, a link, a code span or an entity backslash-escaped (`\|`, `\<`, `\[`, `` \` ``, `\&`),
/// control characters and bidirectional overrides written as escapes (`\n`, `\u{1b}`,
/// `\u{202e}`): a label from evidence cannot run as HTML in a Markdown viewer, nor reorder
/// the text after it.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '|' | '<' | '>' | '[' | ']' | '`' | '&' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push_str(&crate::config::escape_controls(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out
}

/// An instant: UTC for a drill, an offset from the start for a simulation.
fn when(d: &Drill, at: Millis) -> String {
    match d.source {
        Source::Drill { .. } => rfc3339(at),
        Source::Simulation { .. } => format!("+{}", fmt_duration_ms(at - d.window.from)),
    }
}

/// A duration, signed: a phase may come before the one listed above it (a client that
/// resolves afresh reconnects before the cache-expiry bound).
fn opt(ms: Option<Millis>) -> String {
    match ms {
        None => "—".to_string(),
        Some(ms) if ms < 0 => format!("-{}", fmt_duration_ms(-ms)),
        Some(ms) => fmt_duration_ms(ms),
    }
}

/// A Markdown table; every cell escaped.
fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(head.len()));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| escape(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// The whole report.
pub fn render(d: &Drill) -> String {
    let mut out = String::from("# Drill report\n\n");
    match &d.source {
        Source::Drill { files } => {
            let files: Vec<String> = evidence_names(files).iter().map(|f| escape(f)).collect();
            let _ = writeln!(out, "- evidence: {}", files.join(", "));
        }
        Source::Simulation {
            scenario,
            assumptions,
        } => {
            let _ = writeln!(out, "- simulation of scenario {}", escape(scenario));
            for a in assumptions {
                let _ = writeln!(out, "  - {}", escape(a));
            }
        }
    }
    let _ = writeln!(
        out,
        "- window: {} – {} ({})",
        when(d, d.window.from),
        when(d, d.window.until),
        fmt_duration_ms(d.window.len())
    );
    let probers: Vec<String> = d.probers.iter().map(|p| escape(p)).collect();
    let _ = writeln!(out, "- probers: {}\n", probers.join(", "));
    for s in &d.services {
        service(&mut out, d, s);
    }
    out.push_str("## Problems\n\n");
    if d.problems.is_empty() {
        out.push_str("None: every line was read, no gap in any prober's `record_seq`.\n");
    }
    for p in &d.problems {
        let _ = writeln!(out, "- {}", escape(p));
    }
    out
}

fn service(out: &mut String, d: &Drill, s: &ServiceDrill) {
    let _ = writeln!(out, "## Service {}\n", escape(&s.name));
    out.push_str("### Configuration in force\n\n");
    let rows: Vec<Vec<String>> = s
        .config
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    table(out, &["key", "value"], &rows);
    if !s.markers.is_empty() {
        out.push_str("### Markers\n\n");
        let rows: Vec<Vec<String>> = s
            .markers
            .iter()
            .take(MAX_LISTED_MARKERS)
            .map(|m| {
                vec![
                    when(d, m.at),
                    fmt_duration_ms(m.at - d.window.from),
                    m.kind.clone(),
                    m.label.clone(),
                    m.by.clone(),
                ]
            })
            .collect();
        table(
            out,
            &["at", "since window start", "kind", "label", "by"],
            &rows,
        );
        if let Some(more) = s.markers.len().checked_sub(MAX_LISTED_MARKERS)
            && more > 0
        {
            let _ = writeln!(
                out,
                "… and {more} more markers, not listed here: report.json has them all.\n"
            );
        }
    }
    out.push_str(&episodes(d, s));
}

/// The phase tables of service `s` (also what `drill report` prints).
pub fn episodes(d: &Drill, s: &ServiceDrill) -> String {
    let mut out = String::new();
    if s.episodes.is_empty() {
        out.push_str(
            "No failover or failback: no fault or restore marker, and no readiness transition out of or into ready.\n\n",
        );
    }
    for e in s.episodes.iter().take(MAX_TABLED_EPISODES) {
        episode(&mut out, d, e);
    }
    if let Some(more) = s.episodes.len().checked_sub(MAX_TABLED_EPISODES)
        && more > 0
    {
        let _ = writeln!(
            out,
            "… and {more} more failovers and failbacks, not tabled here: report.json has them all.\n"
        );
    }
    out
}

fn episode(out: &mut String, d: &Drill, e: &Episode) {
    let kind = match e.kind {
        EpisodeKind::Failover => "Failover",
        EpisodeKind::Failback => "Failback",
    };
    let branch = if e.branch.is_empty() {
        "(branch unknown)".to_string()
    } else {
        escape(&e.branch)
    };
    let _ = writeln!(out, "### {kind} of {branch}\n");
    let _ = writeln!(out, "Started by {}.\n", escape(&e.trigger));
    let at_head = match d.source {
        Source::Drill { .. } => "at (UTC)",
        Source::Simulation { .. } => "at",
    };
    let rows: Vec<Vec<String>> = e
        .phases
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.at.map_or_else(|| "—".to_string(), |a| when(d, a)),
                opt(p.since_start_ms),
                opt(p.took_ms),
                p.note.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        &["phase", at_head, "since trigger", "took", "note"],
        &rows,
    );
    if let Some(p) = e.pending_approval_ms {
        let by = e
            .approved_by
            .as_deref()
            .map_or_else(String::new, |b| format!(", approved by {}", escape(b)));
        let _ = writeln!(out, "In pending_approval for {}{by}.\n", fmt_duration_ms(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{Marker, Phase, Span};

    fn drill() -> Drill {
        let phase = |name: &str, at: Option<Millis>, note: &str| Phase {
            name: name.into(),
            at,
            since_start_ms: at.map(|a| a - 1_000),
            took_ms: at.map(|a| if a > 1_000 { -1_500 } else { 500 }),
            note: Some(note.into()),
        };
        Drill {
            source: Source::Drill {
                files: vec!["a|b.jsonl".into()],
            },
            window: Span {
                from: 0,
                until: 60_000,
            },
            probers: vec!["az-a".into()],
            services: vec![ServiceDrill {
                name: "orders-db".into(),
                config: vec![("probe".into(), "every 2s".into())],
                branches: vec![],
                stable_name: None,
                alarms: vec![],
                markers: vec![Marker {
                    at: 1_000,
                    kind: "fault".into(),
                    label: "blocked | writer\npath".into(),
                    by: "alice".into(),
                }],
                episodes: vec![Episode {
                    kind: EpisodeKind::Failover,
                    branch: "primary".into(),
                    trigger: "fault marker: blocked | writer\npath (by alice)".into(),
                    phases: vec![
                        phase("fault marker", Some(1_000), "x"),
                        phase("reconnect", Some(2_000), "before the cache bound"),
                        phase(
                            "alarm in ALARM",
                            None,
                            "missing: no alarm lane (without --alarms; with it, the problems say why none was found)",
                        ),
                    ],
                    pending_approval_ms: None,
                    approved_by: None,
                }],
            }],
            problems: vec!["a.jsonl: line 3: not an evidence record".into()],
        }
    }

    #[test]
    fn the_evidence_line_stays_short_over_thousands_of_segments() {
        let mut d = drill();
        let dir = "s3://drills/ev/orders/az-a";
        let mut files: Vec<String> = (1..=10_000)
            .map(|i| format!("{dir}/20261201T10{:04}Z-{i}.jsonl.gz", i % 6000))
            .collect();
        files.push("copy/az-b.jsonl".into());
        d.source = Source::Drill { files };
        let md = render(&d);
        let line = md.lines().find(|l| l.starts_with("- evidence: ")).unwrap();
        assert!(line.len() < 300, "{} bytes: {}", line.len(), &line[..300]);
        assert!(
            line.contains(&format!("{dir}/20261201T100001Z-1.jsonl.gz … ")),
            "{line}"
        );
        assert!(line.contains("-10000.jsonl.gz (10000 in all)"), "{line}");
        assert!(line.ends_with(", copy/az-b.jsonl"), "{line}");
    }

    #[test]
    fn labels_are_escaped_and_tables_have_the_phase_columns() {
        let md = render(&drill());
        assert!(
            md.contains("| phase | at (UTC) | since trigger | took | note |"),
            "{md}"
        );
        assert!(md.contains("blocked \\| writer\\npath"), "{md}");
        assert!(!md.contains("writer\npath"), "{md}");
        assert!(md.contains("- evidence: a\\|b.jsonl\n"), "{md}");
        assert!(
            md.contains(
                "| alarm in ALARM | — | — | — | missing: no alarm lane (without --alarms; with it, the problems say why none was found) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| fault marker | 1970-01-01T00:00:01.000Z | 0s | 500ms | x |"),
            "{md}"
        );
        assert!(
            md.contains("- a.jsonl: line 3: not an evidence record"),
            "{md}"
        );
        assert!(
            md.contains("| reconnect | 1970-01-01T00:00:02.000Z | 1s | -1s 500ms |"),
            "{md}"
        );
        // Every table row has the head's number of cells.
        for l in md
            .lines()
            .filter(|l| l.starts_with("| phase") || l.starts_with("| fault"))
        {
            assert_eq!(l.matches(" | ").count(), 4, "{l}");
        }
    }
}
