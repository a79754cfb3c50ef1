//! The report as text: aligned tables for a terminal, the same tables in Markdown for
//! `simulation.md`. Times are offsets from the scenario's start.

use super::phases::{FaultReport, Phase, describe};
use super::{BranchReport, Report};
use crate::clock::fmt_duration_ms;
use crate::readiness::Millis;
use crate::report::model::{MAX_LISTED_MARKERS, MAX_TABLED_EPISODES};
use std::fmt::Write;

/// Flap times listed in a branch's row; the rest are counted ("and 3677 more"), so a noisy
/// scenario keeps its table readable (a cell of 3,697 times was 66,000 characters).
const MAX_FLAP_TIMES: usize = 20;

/// How much of a long report is drawn: the same bounds as the drill report's pages
/// ([`MAX_TABLED_EPISODES`] faults, [`MAX_LISTED_MARKERS`] timeline rows), the rest counted in
/// one line that points at the JSON report, which keeps everything. A 55 h scenario of 9,900
/// faults printed 16.6 MB of tables before.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// Faults drawn with their two phase tables, in branch order.
    pub faults: usize,
    /// Timeline rows, the earliest first.
    pub timeline: usize,
    /// Fail-open periods and flap times listed in one line or cell.
    pub times: usize,
}

/// The caps [`report`] draws with.
pub(crate) const CAPS: Caps = Caps {
    faults: MAX_TABLED_EPISODES,
    timeline: MAX_LISTED_MARKERS,
    times: MAX_FLAP_TIMES,
};

/// Where the rows a capped table leaves out are.
const SEE_JSON: &str =
    "every one is in the JSON report (`--format json`; simulation.json with `--out`)";

/// `items` joined with ", ", at most `cap` of them, the rest counted (" and 3677 more").
fn capped_list(items: impl ExactSizeIterator<Item = String>, cap: usize) -> String {
    let n = items.len();
    let shown: Vec<String> = items.take(cap).collect();
    match n.saturating_sub(cap) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// How a table is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Space-aligned columns.
    Text,
    /// Markdown pipes.
    Markdown,
}

fn t(ms: Millis) -> String {
    fmt_duration_ms(ms)
}

fn opt(ms: Option<Millis>) -> String {
    ms.map_or_else(|| "—".to_string(), t)
}

/// A table in `style`.
fn table(style: Style, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    match style {
        Style::Markdown => {
            let _ = writeln!(out, "| {} |", head.join(" | "));
            let _ = writeln!(out, "|{}", " --- |".repeat(head.len()));
            for r in rows {
                let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
        }
        Style::Text => {
            let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
            for r in rows {
                for (i, c) in r.iter().enumerate() {
                    if let Some(x) = w.get_mut(i) {
                        *x = (*x).max(c.chars().count());
                    }
                }
            }
            let line = |cells: Vec<&str>| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(&w)
                    // Padded by hand: a width over u16::MAX panics in `format!`.
                    .map(|(c, w)| {
                        let pad = w.saturating_sub(c.chars().count());
                        format!("{c}{}", " ".repeat(pad))
                    })
                    .collect();
                padded.join("  ").trim_end().to_string()
            };
            let _ = writeln!(out, "  {}", line(head.to_vec()));
            for r in rows {
                let _ = writeln!(out, "  {}", line(r.iter().map(String::as_str).collect()));
            }
        }
    }
    out
}

fn phase_rows(phases: &[Phase]) -> Vec<Vec<String>> {
    phases
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                opt(p.at),
                opt(p.since_fault_ms),
                opt(p.took_ms),
                p.note.clone().unwrap_or_default(),
            ]
        })
        .collect()
}

fn heading(style: Style, level: usize, text: &str) -> String {
    match style {
        Style::Markdown => format!("{} {text}\n\n", "#".repeat(level)),
        Style::Text => format!("{text}\n"),
    }
}

fn fault(style: Style, out: &mut String, b: &BranchReport, f: &FaultReport) {
    let head = ["phase", "at", "since", "took", "note"];
    let title = format!(
        "{} ({}): fault {}–{}, {}% {}",
        b.name,
        b.record,
        t(f.from),
        t(f.until),
        f.fail_percent,
        f.class
    );
    out.push_str(&heading(style, 3, &title));
    out.push_str(&heading(style, 4, "failover (since the fault started)"));
    out.push_str(&table(style, &head, &phase_rows(&f.failover)));
    out.push('\n');
    out.push_str(&heading(style, 4, "failback (since the fault ended)"));
    out.push_str(&table(style, &head, &phase_rows(&f.failback)));
    if let Some(p) = f.pending_approval_ms {
        let _ = writeln!(
            out,
            "\nin pending_approval for {} before the approval applied",
            t(p)
        );
    }
    out.push('\n');
}

fn timeline(report: &Report) -> Vec<Vec<String>> {
    let mut rows: Vec<(Millis, Vec<String>)> = Vec::new();
    for b in &report.branches {
        for s in &b.transitions {
            rows.push((
                s.at,
                vec![
                    t(s.at),
                    b.name.clone(),
                    "readiness".into(),
                    format!("{} → {}", s.from, s.to),
                ],
            ));
        }
        for a in &b.approvals {
            // The rule's sentence starts with "applied" when it applied.
            let text = if a.applied {
                format!("given at {}: {}", t(a.given_at), a.detail)
            } else {
                format!("given at {}, rejected: {}", t(a.given_at), a.detail)
            };
            rows.push((
                a.decided_at,
                vec![t(a.decided_at), b.name.clone(), "approval".into(), text],
            ));
        }
        for c in &b.alarm.changes {
            rows.push((
                c.at,
                vec![t(c.at), b.name.clone(), "alarm".into(), c.to.to_string()],
            ));
        }
        for c in &b.health.changes {
            rows.push((
                c.at,
                vec![
                    t(c.at),
                    b.name.clone(),
                    "health check".into(),
                    c.to.to_string(),
                ],
            ));
        }
    }
    for c in &report.answer.changes {
        rows.push((
            c.at,
            vec![t(c.at), "—".into(), "answer".into(), describe(c.to)],
        ));
    }
    rows.sort_by_key(|(at, _)| *at);
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The whole report in `style`, long lists capped by [`CAPS`].
pub fn report(r: &Report, style: Style) -> String {
    report_with(r, style, CAPS)
}

/// [`report`] with the given caps.
pub(crate) fn report_with(r: &Report, style: Style, caps: Caps) -> String {
    let mut out = String::new();
    let title = format!(
        "simulation of {}: {} from the start, seed {}; times are offsets from the start",
        r.service,
        t(r.duration_ms),
        r.seed
    );
    out.push_str(&heading(style, 1, &title));
    if style == Style::Text {
        out.push('\n');
    }
    let faults = r
        .branches
        .iter()
        .flat_map(|b| b.faults.iter().map(move |f| (b, f)));
    for (b, f) in faults.clone().take(caps.faults) {
        fault(style, &mut out, b, f);
    }
    if let Some(more) = faults.count().checked_sub(caps.faults).filter(|n| *n > 0) {
        let _ = writeln!(out, "… {more} more faults not drawn; {SEE_JSON}\n");
    }
    out.push_str(&heading(style, 2, "summary"));
    out.push_str(&summary(r, style, caps));
    let open = capped_list(
        r.fail_open
            .iter()
            .map(|p| format!("{}–{}", t(p.from), p.until.map_or("end".into(), t))),
        caps.times,
    );
    let _ = writeln!(
        out,
        "\nfail-open (no record healthy, Route 53 answers PRIMARY): {}\n",
        if open.is_empty() { "never" } else { &open }
    );
    if !r.layouts.is_empty() {
        out.push_str(&heading(style, 2, "layouts"));
        out.push_str(&layouts(r, style, caps));
        out.push('\n');
    }
    out.push_str(&heading(style, 2, "timeline"));
    let rows = timeline(r);
    let shown = &rows[..rows.len().min(caps.timeline)];
    out.push_str(&table(style, &["at", "branch", "hop", "change"], shown));
    if rows.len() > shown.len() {
        let more = rows.len() - shown.len();
        let _ = writeln!(out, "\n… {more} more changes not listed; {SEE_JSON}");
    }
    out.push('\n');
    out.push_str(&heading(style, 2, "assumptions"));
    for a in &r.assumptions {
        let _ = writeln!(out, "- {a}");
    }
    out
}

/// The layout comparison: one row per layout and insufficient-data status.
fn layouts(r: &Report, style: Style, caps: Caps) -> String {
    let rows: Vec<Vec<String>> = r
        .layouts
        .iter()
        .map(|row| {
            let converge = if row.converge.is_empty() {
                "no change".to_string()
            } else {
                capped_list(
                    row.converge.iter().map(|c| {
                        let want = c.right.map_or("either".to_string(), |x| x.to_string());
                        let took = c.after_ms.map_or("never".to_string(), t);
                        format!("{want} at {}: {took}", t(c.at))
                    }),
                    caps.times,
                )
            };
            vec![
                row.layout.to_string(),
                row.insufficient_data.to_string(),
                converge,
                row.wrong_answers.to_string(),
                t(row.wrong_ms),
            ]
        })
        .collect();
    let head = [
        "layout",
        "insufficient data",
        "right answer: time to give it",
        "wrong answers",
        "answering wrong",
    ];
    table(style, &head, &rows)
}

/// The summary table: one row per branch.
fn summary(r: &Report, style: Style, caps: Caps) -> String {
    let rows: Vec<Vec<String>> = r
        .branches
        .iter()
        .map(|b| {
            let flaps = if b.flaps.is_empty() {
                "0".to_string()
            } else {
                let at = capped_list(b.flaps.iter().map(|x| t(*x)), caps.times);
                format!("{} (at {at})", b.flaps.len())
            };
            vec![
                b.name.clone(),
                b.record.to_string(),
                b.initial.to_string(),
                format!("{} ({} failed)", b.attempts, b.failed_attempts),
                b.faults.len().to_string(),
                flaps,
            ]
        })
        .collect();
    let head = [
        "branch",
        "record",
        "starts",
        "attempts",
        "faults",
        "flaps (ready → unready outside a fault)",
    ];
    table(style, &head, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell wider than `u16::MAX` characters is padded, not a panic ("Formatting argument
    /// out of range"), and the columns after it still line up.
    #[test]
    fn a_text_table_takes_a_cell_wider_than_u16() {
        let wide = "x".repeat(70_000);
        let rows = vec![vec![wide.clone(), "a".into()], vec!["b".into(), "c".into()]];
        let text = table(Style::Text, &["one", "two"], &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{}", &text[..200]);
        assert_eq!(lines[1], format!("  {wide}  a"));
        assert_eq!(lines[2].find('c'), lines[1].rfind('a'));
    }
}
