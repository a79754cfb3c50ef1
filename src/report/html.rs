//! The drill report as one self-contained HTML page (`report.html`): inline CSS, each service's
//! timeline ([`super::svg`]) inline, its phase tables, the configuration in force, the probers
//! that contributed and the problems met. Nothing is fetched: no script, font, image or style
//! sheet from anywhere, so the page opens offline and can be attached to a change record.
//!
//! Pure: no I/O, no clock.

use super::model::{
    Drill, Episode, EpisodeKind, MAX_LISTED_MARKERS, MAX_TABLED_EPISODES, Phase, ServiceDrill,
    Source,
};
use super::svg::{escape, timeline};
use crate::clock::{fmt_duration_ms, rfc3339};
use crate::readiness::Millis;
use std::fmt::Write as _;

/// The page's style sheet (inline; system fonts only).
const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px;color:#212121;background:#fff}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:20px 0 6px;border-bottom:1px solid #ddd}\
h3{font-size:14px;margin:14px 0 4px}p.meta{margin:2px 0;color:#555;font-size:13px}\
.timeline-box{overflow-x:auto}svg.timeline{display:block}\
table{border-collapse:collapse;font-size:13px;margin:4px 0 10px}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.missing{color:#b71c1c}ul{font-size:13px}ul.problems li,p.meta.warn{color:#b71c1c}code{font-size:12px}";

/// `d` as a complete HTML document, every string from the evidence escaped.
pub fn render(d: &Drill) -> String {
    let offsets = matches!(d.source, Source::Simulation { .. });
    let fmt_at = |t: Millis| {
        if offsets {
            format!("+{}", fmt_duration_ms(t - d.window.from))
        } else {
            rfc3339(t)
        }
    };
    let title = match &d.source {
        Source::Drill { .. } => "Drill report".to_string(),
        Source::Simulation { scenario, .. } => format!("Simulated drill: {scenario}"),
    };
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>",
        escape(&title)
    );
    let _ = write!(s, "<h1>{}</h1>", escape(&title));
    let _ = write!(
        s,
        "<p class=\"meta\">Window {} to {} ({}); probers: {}</p>",
        escape(&fmt_at(d.window.from)),
        escape(&fmt_at(d.window.until)),
        fmt_duration_ms(d.window.len()),
        escape(&d.probers.join(", "))
    );
    if !d.problems.is_empty() {
        // Said first: a problem reading the evidence can change what the timeline means.
        let _ = write!(
            s,
            "<p class=\"meta warn\">{} problem(s) reading the evidence: see <a href=\"#problems\">Problems</a>.</p>",
            d.problems.len()
        );
    }
    for svc in &d.services {
        service(&mut s, d, svc, &fmt_at);
    }
    source(&mut s, &d.source);
    s.push_str("<h2 id=\"problems\">Problems</h2>");
    if d.problems.is_empty() {
        s.push_str(match d.source {
            Source::Drill { .. } => "<p class=\"meta\">None: every record was read and used.</p>",
            Source::Simulation { .. } => "<p class=\"meta\">None.</p>",
        });
    } else {
        s.push_str("<ul class=\"problems\">");
        for p in &d.problems {
            let _ = write!(s, "<li>{}</li>", escape(p));
        }
        s.push_str("</ul>");
    }
    s.push_str("</body></html>\n");
    s
}

/// One service: its timeline, its episodes' phase tables and its configuration.
fn service(s: &mut String, d: &Drill, svc: &ServiceDrill, fmt_at: &dyn Fn(Millis) -> String) {
    let _ = write!(s, "<h2>Service {}</h2>", escape(&svc.name));
    let _ = write!(
        s,
        "<div class=\"timeline-box\">{}</div>",
        timeline(svc, &d.source, d.window)
    );
    if svc.episodes.is_empty() {
        s.push_str("<p class=\"meta\">No failover or failback in this window.</p>");
    }
    for e in svc.episodes.iter().take(MAX_TABLED_EPISODES) {
        episode(s, e, fmt_at);
    }
    if let Some(more) = svc.episodes.len().checked_sub(MAX_TABLED_EPISODES)
        && more > 0
    {
        let _ = write!(
            s,
            "<p class=\"meta warn\">… and {more} more failovers and failbacks, not tabled here: report.json has them all.</p>"
        );
    }
    if !svc.markers.is_empty() {
        // The timeline's marker labels are cut to fit; here they are whole.
        s.push_str(
            "<h3>Markers</h3><table><tr><th>#</th><th>at</th><th>kind</th><th>label</th><th>by</th></tr>",
        );
        for (k, m) in svc.markers.iter().enumerate().take(MAX_LISTED_MARKERS) {
            let _ = write!(
                s,
                "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                k + 1,
                escape(&fmt_at(m.at)),
                escape(&m.kind),
                escape(&m.label),
                escape(&m.by)
            );
        }
        s.push_str("</table>");
        if let Some(more) = svc.markers.len().checked_sub(MAX_LISTED_MARKERS)
            && more > 0
        {
            let _ = write!(
                s,
                "<p class=\"meta warn\">… and {more} more markers, not listed here: report.json has them all.</p>"
            );
        }
    }
    s.push_str("<h3>Configuration in force</h3><table>");
    for (k, v) in &svc.config {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    s.push_str("</table>");
}

/// One failover or failback as a table: phase, when, since the start, how long it took, note.
fn episode(s: &mut String, e: &Episode, fmt_at: &dyn Fn(Millis) -> String) {
    let kind = match e.kind {
        EpisodeKind::Failover => "Failover",
        EpisodeKind::Failback => "Failback",
    };
    let _ = write!(
        s,
        "<h3>{kind} of {} <span class=\"meta\">(trigger: {})</span></h3>",
        escape(&e.branch),
        escape(&e.trigger)
    );
    let mut extra = Vec::new();
    if let Some(ms) = e.pending_approval_ms {
        extra.push(format!("pending approval for {}", fmt_duration_ms(ms)));
    }
    if let Some(by) = &e.approved_by {
        extra.push(format!("approved by {by}"));
    }
    if !extra.is_empty() {
        let _ = write!(s, "<p class=\"meta\">{}</p>", escape(&extra.join("; ")));
    }
    s.push_str(
        "<table><tr><th>phase</th><th>at</th><th>since trigger</th><th>took</th><th>note</th></tr>",
    );
    for p in &e.phases {
        phase_row(s, p, fmt_at);
    }
    s.push_str("</table>");
}

/// One phase row; a phase without a time says so in red with its note.
fn phase_row(s: &mut String, p: &Phase, fmt_at: &dyn Fn(Millis) -> String) {
    let dur = |v: Option<Millis>| v.map(fmt_duration_ms).unwrap_or_default();
    // A phase that does not apply (no approval needed, no DNS change) is no gap in the evidence.
    let (at, class) = match (p.at, p.note.as_deref()) {
        (Some(t), _) => (fmt_at(t), ""),
        (None, Some(n))
            if !n.starts_with("missing")
                && n != "not reached"
                && n != "an earlier phase was not reached" =>
        {
            ("—".to_string(), "")
        }
        (None, _) => ("not derived".to_string(), " class=\"missing\""),
    };
    let _ = write!(
        s,
        "<tr><td>{}</td><td{class}>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
        escape(&p.name),
        escape(&at),
        escape(&dur(p.since_start_ms)),
        escape(&dur(p.took_ms)),
        escape(p.note.as_deref().unwrap_or_default())
    );
}

/// Where the facts come from: the evidence files, or the simulation's scenario and assumptions.
fn source(s: &mut String, src: &Source) {
    match src {
        Source::Drill { files } => {
            s.push_str("<h2>Evidence</h2><ul>");
            for f in super::model::evidence_names(files) {
                let _ = write!(s, "<li><code>{}</code></li>", escape(&f));
            }
            s.push_str("</ul>");
        }
        Source::Simulation {
            scenario,
            assumptions,
        } => {
            let _ = write!(
                s,
                "<h2>Model</h2><p class=\"meta\">Scenario <code>{}</code>; each hop's assumption:</p><ul>",
                escape(scenario)
            );
            for a in assumptions {
                let _ = write!(s, "<li>{}</li>", escape(a));
            }
            s.push_str("</ul>");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{ServiceDrill, Span};

    fn drill(problem: &str) -> Drill {
        Drill {
            source: Source::Drill {
                files: vec!["<evil>.jsonl".into()],
            },
            window: Span {
                from: 0,
                until: 60_000,
            },
            probers: vec!["p&1".into()],
            services: vec![ServiceDrill {
                name: "orders".into(),
                config: vec![("policy".into(), "<b>".into())],
                branches: vec![],
                stable_name: None,
                alarms: vec![],
                markers: vec![],
                episodes: vec![Episode {
                    kind: EpisodeKind::Failover,
                    branch: "primary".into(),
                    trigger: "fault marker".into(),
                    phases: vec![Phase {
                        name: "alarm in ALARM".into(),
                        at: None,
                        since_start_ms: None,
                        took_ms: None,
                        note: Some("missing: no alarm history record".into()),
                    }],
                    pending_approval_ms: None,
                    approved_by: None,
                }],
            }],
            problems: vec![problem.into()],
        }
    }

    #[test]
    fn escapes_everything_and_fetches_nothing() {
        let html = render(&drill("line 3: <script>alert(1)</script>"));
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<evil>"));
        assert!(html.contains("&lt;b&gt;"));
        assert!(html.contains("p&amp;1"));
        for external in ["http://", "https://", "src=", "<link", "url(", "@import"] {
            assert!(!html.contains(external), "{external} in {html}");
        }
    }

    #[test]
    fn a_missing_phase_says_which_record_is_missing() {
        let html = render(&drill("none"));
        assert!(html.contains("not derived"));
        assert!(html.contains("no alarm history record"));
    }

    #[test]
    fn a_phase_that_does_not_apply_is_no_gap() {
        let mut d = drill("none");
        let p = &mut d.services[0].episodes[0].phases[0];
        p.note = Some("not reached".into());
        assert!(render(&d).contains("not derived"));
        for n in [
            "no approval needed",
            "not reached: the policy needs no approval",
        ] {
            let p = &mut d.services[0].episodes[0].phases[0];
            p.note = Some(n.into());
            assert!(!render(&d).contains("not derived"), "{n}");
        }
    }
}
