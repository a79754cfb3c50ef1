//! The report as one self-contained HTML page (`report.html`). Placeholder until the timeline
//! picture lands: the Markdown report, escaped, in a `<pre>`.

use super::model::Drill;

/// The page: no external assets, every character of the report escaped.
pub fn render(d: &Drill) -> String {
    let md = super::markdown::render(d)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Drill report</title></head>\n<body><pre>{md}</pre></body></html>\n"
    )
}
