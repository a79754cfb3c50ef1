//! Problems found in a config file, each located by dotted key path and line.
//!
//! Lines come from the TOML parser: serde errors carry the span of the offending value and
//! `serde_path_to_error` the key path; validation errors name a key path, which is looked up in
//! the parser's spanned document tree.

use super::raw::MOVED_TLS_KEYS;
use crate::clock::fmt_duration;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
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
    /// Byte offset of every `\n` in the text, ascending: a line lookup is a binary search, so
    /// reporting many issues stays linear in the file size.
    newlines: Vec<usize>,
    doc: Option<Spanned<DeTable<'a>>>,
    pub(super) errors: Vec<Issue>,
    /// Non-fatal findings: the service they are about (`service[2] "name"`), if any, and the
    /// message. [`warnings`](Self::warnings) joins the services of one message.
    warned: Vec<(Option<String>, String)>,
    /// The `[[service]]` whose merged `probe` and `readiness` tables are being validated.
    pub(super) scope: Option<Scope>,
}

/// One `[[service]]` entry: its key prefix (`service[2]`) and its name, for messages.
pub(super) struct Scope {
    pub(super) prefix: String,
    pub(super) name: String,
}

impl<'a> Issues<'a> {
    /// A collector for `text`; keys are located in `doc`, its parsed tree (`None` when the text
    /// does not parse: then nothing is located).
    pub(super) fn new(text: &'a str, doc: Option<Spanned<DeTable<'a>>>) -> Self {
        Issues {
            newlines: newline_offsets(text),
            doc,
            errors: Vec::new(),
            warned: Vec::new(),
            scope: None,
        }
    }

    /// Record an error on the dotted key path `key` (e.g. `branch[1].endpoint`).
    /// The same error twice in a row (two rules reaching one shared key) is recorded once.
    /// Inside a [`Scope`], a `probe.*` or `readiness.*` key is the service's own
    /// (`service[2].probe.timeout`) unless only the top-level default is written in the file.
    pub(super) fn error(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let (mut key, mut message) = (key.into(), message.into());
        let head = key.split(['.', '[']).next().unwrap_or("");
        if let Some(sc) = &self.scope
            && (head == "probe" || head == "readiness")
        {
            let scoped = format!("{}.{key}", sc.prefix);
            if self.line_of_key(&scoped).is_none() && self.line_of_key(&key).is_some() {
                message = format!(
                    "{message} (in {} {:?}, which takes it from the top-level [{}])",
                    sc.prefix, sc.name, head
                );
            } else {
                key = scoped;
            }
        }
        if self
            .errors
            .last()
            .is_some_and(|e| e.key == key && e.message == message)
        {
            return;
        }
        let mut line = self.line_of_key(&key);
        if line.is_none() && self.scope.is_some() {
            // A key the merged table lacks: the line of the nearest table that is written.
            let mut k = key.as_str();
            while let Some(i) = k.rfind('.') {
                k = &k[..i];
                line = self.line_of_key(k);
                if line.is_some() {
                    break;
                }
            }
        }
        self.errors.push(Issue { key, line, message });
    }

    /// Record a non-fatal finding (inside a [`Scope`], naming its service).
    pub(super) fn warn(&mut self, message: impl Into<String>) {
        let service = self
            .scope
            .as_ref()
            .map(|sc| format!("{} {:?}", sc.prefix, sc.name));
        self.warned.push((service, message.into()));
    }

    /// The warnings, in the order first found; one message found for several services is one
    /// warning naming the first few of them and how many more (a fleet of a thousand services
    /// with one shared probe setting gets one line, not a thousand).
    pub(super) fn warnings(&self) -> Vec<String> {
        const NAMED: usize = 3;
        let mut order: Vec<&str> = Vec::new();
        let mut services: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut unscoped: HashSet<&str> = HashSet::new();
        for (service, message) in &self.warned {
            if !services.contains_key(message.as_str()) && !unscoped.contains(message.as_str()) {
                order.push(message);
            }
            match service {
                Some(s) => services.entry(message).or_default().push(s),
                None => {
                    unscoped.insert(message);
                }
            }
        }
        let mut out = Vec::new();
        for message in order {
            if unscoped.contains(message) {
                out.push(message.to_string());
            }
            let Some(list) = services.get(message) else {
                continue;
            };
            let named = list[..list.len().min(NAMED)].join(", ");
            out.push(match list.len() {
                n if n <= NAMED => format!("{named}: {message}"),
                n => format!("{named} and {} more services: {message}", n - NAMED),
            });
        }
        out
    }

    /// 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&n| n < offset) + 1
    }

    /// Line of a dotted key path in the document: the line of its last key (or array element);
    /// `None` when the key is not written in the file.
    pub(super) fn line_of_key(&self, key: &str) -> Option<usize> {
        self.find_key(key).map(|(line, _)| line)
    }

    /// A duration for a message, as the user wrote it (`25h`, not `1d 1h`) when `key` is written
    /// in the file (inside a [`Scope`], the service's own key first) and reads as `d`; otherwise
    /// (a default, a merged or derived value) [`fmt_duration`] of `d`.
    pub(super) fn written(&self, key: &str, d: Duration) -> String {
        let scoped = self.scope.as_ref().map(|sc| format!("{}.{key}", sc.prefix));
        scoped
            .iter()
            .map(String::as_str)
            .chain([key])
            .find_map(|k| match self.find_key(k)?.1.get_ref() {
                DeValue::String(s) => Some(s.trim().to_string()),
                _ => None,
            })
            .filter(|s| humantime::parse_duration(s).is_ok_and(|v| v == d))
            .unwrap_or_else(|| fmt_duration(d))
    }

    /// The line and value of a dotted key path written in the document.
    fn find_key(&self, key: &str) -> Option<(usize, &Spanned<DeValue<'a>>)> {
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
        Some((self.line_of(span?.start), value?))
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

    /// The issue of a TOML syntax error in `text`. toml's "duplicate key" names no key: the
    /// key is read from the error's span and its table from the header above it.
    pub(super) fn syntax_issue(&self, e: &toml::de::Error, text: &str) -> Issue {
        let line = e.span().map(|s| self.line_of(s.start));
        let message = e.message().trim_end().to_string();
        let written = e
            .span()
            .and_then(|s| Some((s.start, text.get(s)?.trim())))
            .filter(|(_, k)| !k.is_empty() && k.len() <= 200 && !k.contains('\n'));
        match (message.starts_with("duplicate"), written) {
            (true, Some((start, k))) => {
                let line_start = text
                    .get(..start)
                    .unwrap_or("")
                    .rfind('\n')
                    .map_or(0, |i| i + 1);
                let header = header_name(text[line_start..].lines().next().unwrap_or(""));
                let table = table_above(text, line_start);
                let key = if let Some(h) = header {
                    h.to_string()
                } else if table.is_empty() {
                    k.to_string()
                } else {
                    format!("{table}.{k}")
                };
                Issue {
                    message: format!("{message}: `{key}` is written more than once; keep one"),
                    key,
                    line,
                }
            }
            _ => Issue {
                key: "(syntax)".into(),
                line,
                message,
            },
        }
    }
}

/// The name of the `[table]` or `[[table]]` header last opened before `offset`, the start of a
/// line ("" at the top level). A header-like line inside a multi-line string, or a key inside an
/// inline table, can make the path approximate; the line number in the same issue is exact.
fn table_above(text: &str, offset: usize) -> &str {
    text.get(..offset)
        .unwrap_or("")
        .lines()
        .rev()
        .find_map(header_name)
        .unwrap_or("")
}

/// The table name of a `[table]` or `[[table]]` header line.
fn header_name(line: &str) -> Option<&str> {
    let l = line.trim_start();
    l.starts_with('[').then(|| {
        let l = l.split('#').next().unwrap_or(l).trim();
        l.trim_start_matches('[').trim_end_matches(']').trim()
    })
}

/// Offsets of the newlines of `text`.
fn newline_offsets(text: &str) -> Vec<usize> {
    text.bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect()
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

/// `s` with every control character (C0, DEL, C1) escaped the way Rust writes it (`\n`,
/// `\u{1b}`) and every bidirectional formatting character as `\u{202e}`, so that text taken
/// from a config file, a state document or the command line cannot move the cursor, recolour,
/// retitle or reorder a terminal. Borrowed when nothing needs escaping.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else if needs_escape(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape_controls`] on each line of a multi-line text: its newlines are kept, every other
/// control character is escaped.
pub fn escape_controls_by_line(s: &str) -> String {
    s.split('\n')
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}
