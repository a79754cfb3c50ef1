//! Problems found in a config file, each located by dotted key path and line.
//!
//! Lines come from the TOML parser: serde errors carry the span of the offending value and
//! `serde_path_to_error` the key path; validation errors name a key path, which is looked up in
//! the parser's spanned document tree.

use super::raw::MOVED_TLS_KEYS;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    /// Dotted key path, e.g. `readiness.declare_ready.for` or `branch[1].endpoint`.
    pub key: String,
    /// 1-based line of the key in the file, when it appears there.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

/// Collects the errors and warnings of one validation run.
pub(crate) struct Issues<'a> {
    text: &'a str,
    doc: Option<Spanned<DeTable<'a>>>,
    pub(super) errors: Vec<Issue>,
    pub(super) warnings: Vec<String>,
}

impl<'a> Issues<'a> {
    /// A collector for `text`; keys are located in `doc`, its parsed tree (`None` when the text
    /// does not parse: then nothing is located).
    pub(super) fn new(text: &'a str, doc: Option<Spanned<DeTable<'a>>>) -> Self {
        Issues {
            text,
            doc,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Record an error on the dotted key path `key` (e.g. `branch[1].endpoint`).
    pub(super) fn error(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let line = self.line_of_key(&key);
        self.errors.push(Issue {
            key,
            line,
            message: message.into(),
        });
    }

    /// Record a non-fatal finding.
    pub(super) fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    /// 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    /// Line of a dotted key path in the document: the line of its last key (or array element);
    /// `None` when the key is not written in the file.
    fn line_of_key(&self, key: &str) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        let mut table: &DeTable<'_> = doc.get_ref();
        let mut value: Option<&Spanned<DeValue<'_>>> = None;
        let mut span = None;
        for part in key.split('.') {
            if let Some(v) = value {
                table = match v.get_ref() {
                    DeValue::Table(t) => t,
                    _ => return None,
                };
            }
            let (name, index) = match part.split_once('[') {
                Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let (k, v) = table.get_key_value(name)?;
            span = Some(k.span());
            value = Some(v);
            if let Some(ix) = index {
                let DeValue::Array(a) = v.get_ref() else {
                    return None;
                };
                let elem = a.get(ix)?;
                // An element of an inline array is on its own line; a `[[table]]` element starts
                // at its header.
                span = Some(elem.span());
                value = Some(elem);
            }
        }
        span.map(|s| self.line_of(s.start))
    }

    /// The issue of a deserialisation error: key path from `serde_path_to_error`, line from the
    /// span toml attached.
    pub(super) fn serde_issue(&self, e: &serde_path_to_error::Error<toml::de::Error>) -> Issue {
        let inner = e.inner();
        let msg = inner.message().to_string();
        let path = e.path().to_string();
        let mut key = if path == "." { String::new() } else { path };
        let mut line = inner.span().map(|s| self.line_of(s.start));
        let mut message = msg.clone();
        if let Some(field) = between(&msg, "missing field `", "`") {
            // A missing field is reported on the table that lacks it (at the top: the whole file).
            if key.is_empty() {
                line = None;
            }
            key = join(&key, field);
        } else if let Some(field) = between(&msg, "unknown field `", "`") {
            if key.starts_with("probe.") && MOVED_TLS_KEYS.contains(&field) {
                message = format!(
                    "`{field}` moved to [probe.tls], one TLS table for every probe kind: write `{field} = ...` under [probe.tls]"
                );
            }
            // The path already ends at the unknown key.
            if !key.ends_with(field) {
                key = join(&key, field);
            }
        } else if msg.ends_with("expected a duration") {
            message = format!(
                "invalid duration: {msg} (write a number and a unit, e.g. \"500ms\", \"5s\", \"3m\")"
            );
        }
        Issue {
            key: if key.is_empty() { "(file)".into() } else { key },
            line,
            message,
        }
    }

    /// The issue of a TOML syntax error.
    pub(super) fn syntax_issue(&self, e: &toml::de::Error) -> Issue {
        Issue {
            key: "(syntax)".into(),
            line: e.span().map(|s| self.line_of(s.start)),
            message: e.message().to_string(),
        }
    }
}

fn join(table: &str, field: &str) -> String {
    if table.is_empty() {
        field.to_string()
    } else {
        format!("{table}.{field}")
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = s.find(start)? + start.len();
    let j = s[i..].find(end)? + i;
    Some(&s[i..j])
}
