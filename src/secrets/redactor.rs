//! The one function that removes configured secrets from text read back from a peer: a
//! probe target's answers and a sink's (the `otlp` sink's collector). [`Redactor`] follows the
//! [`SecretCell`]s it was built from, so a refreshed secret is matched too.

use super::SecretCell;
use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

/// What replaces a secret in text read back from a target.
pub const REDACTED: &str = "<redacted>";

/// A secret shorter than this (in characters) is matched only exactly as written (and as
/// quoted): looser matching of a short secret would redact ordinary words and reveal it.
pub const MIN_TRANSFORMED_SECRET_CHARS: usize = 8;
/// Any run of this many consecutive characters of a secret (or of one of its encodings) is
/// redacted: an echo of a prefix, a suffix or a middle part of it is removed too.
pub const SECRET_WINDOW_CHARS: usize = 12;
/// Runs of [`SECRET_WINDOW_CHARS`] are taken only from forms this long at most: one pattern per
/// character, and a 64 KiB secret file would make hundreds of thousands.
const MAX_WINDOWED_CHARS: usize = 4096;

/// The configured secrets' values (the MySQL password, secret header values) and the one
/// function that removes them from text a target sent back: server messages, header values,
/// bodies, mismatch messages. It follows secrets that change: after a refresh it matches the new
/// value and the few before it (an attempt in flight may echo the one it sent).
///
/// A secret of at least [`MIN_TRANSFORMED_SECRET_CHARS`] characters is matched ignoring ASCII
/// case, and so is each of its whitespace-separated parts and each part between template
/// variables (`{{seq}}`) that long: as written, as quoted by `{:?}`, as a JSON string (once or
/// twice), base64- and percent-encoded, and any run of [`SECRET_WINDOW_CHARS`] characters of
/// each of those. A shorter secret is matched exactly as written and quoted. Matches that
/// overlap are replaced as one, so no piece of a secret is left between two.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The secrets followed.
    cells: Arc<Vec<SecretCell>>,
    /// The matchers, built for the cells' generations in `stamp`; shared by the clones.
    built: Arc<RwLock<Matchers>>,
}

/// The automata of one set of secret values.
#[derive(Clone, Default)]
struct Matchers {
    /// The sum of the cells' generations these were built for.
    stamp: u64,
    /// Short secrets, case-sensitive.
    exact: Option<Arc<aho_corasick::AhoCorasick>>,
    /// Everything else, ASCII case-insensitive.
    loose: Option<Arc<aho_corasick::AhoCorasick>>,
}

impl Matchers {
    fn of<'a>(stamp: u64, secrets: impl IntoIterator<Item = &'a str>) -> Matchers {
        let (mut exact, mut loose) = (BTreeSet::new(), BTreeSet::new());
        for s in secrets.into_iter().filter(|s| !s.is_empty()) {
            if s.chars().count() < MIN_TRANSFORMED_SECRET_CHARS {
                exact.extend(quoted_forms(s));
                continue;
            }
            for part in secret_parts(s) {
                for form in encoded_forms(part) {
                    if form.len() <= MAX_WINDOWED_CHARS {
                        loose.extend(windows(&form, SECRET_WINDOW_CHARS).map(str::to_string));
                    }
                    loose.insert(form);
                }
            }
        }
        Matchers {
            stamp,
            exact: matcher(&exact, false),
            loose: matcher(&loose, true),
        }
    }

    fn all(&self) -> impl Iterator<Item = &Arc<aho_corasick::AhoCorasick>> {
        [&self.exact, &self.loose].into_iter().flatten()
    }
}

impl Redactor {
    /// A redactor of fixed `secrets` (empty ones are ignored).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        Redactor::of(
            secrets
                .into_iter()
                .map(|s| SecretCell::fixed(s.into()))
                .collect(),
        )
    }

    /// A redactor of the values `cells` hold, now and after they change.
    pub fn of(cells: Vec<SecretCell>) -> Self {
        let r = Redactor {
            cells: Arc::new(cells),
            built: Arc::default(),
        };
        let built = r.build();
        *r.built.write().unwrap_or_else(PoisonError::into_inner) = built;
        r
    }

    fn stamp(&self) -> u64 {
        self.cells.iter().map(SecretCell::generation).sum()
    }

    fn build(&self) -> Matchers {
        let values: Vec<Arc<str>> = self.cells.iter().flat_map(SecretCell::values).collect();
        Matchers::of(self.stamp(), values.iter().map(|v| &**v))
    }

    /// The matchers of the cells' values now, rebuilt once after a cell changed.
    fn matchers(&self) -> Matchers {
        let stamp = self.stamp();
        {
            let built = self.built.read().unwrap_or_else(PoisonError::into_inner);
            if built.stamp == stamp {
                return built.clone();
            }
        }
        let fresh = self.build();
        *self.built.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        fresh
    }

    /// `text` with every occurrence of every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let m = self.matchers();
        let mut spans: Vec<(usize, usize)> = m
            .all()
            .flat_map(|m| m.find_overlapping_iter(text).map(|f| (f.start(), f.end())))
            .collect();
        if spans.is_empty() {
            return text.to_string();
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut spans = spans.into_iter().peekable();
        while let Some((start, mut end)) = spans.next() {
            while let Some(&(s, e)) = spans.peek()
                && s < end
            {
                end = end.max(e);
                spans.next();
            }
            out.push_str(&text[at..start]);
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// [`Redactor::redact`] in place.
    pub fn redact_in_place(&self, text: &mut String) {
        let hit = self.matchers().all().any(|m| m.is_match(text.as_str()));
        if hit {
            *text = self.redact(text);
        }
    }

    fn patterns_len(&self) -> usize {
        self.matchers().all().map(|m| m.patterns_len()).sum()
    }
}

/// An automaton reporting overlapping matches of `patterns`; `None` when there are none.
fn matcher(
    patterns: &BTreeSet<String>,
    ignore_case: bool,
) -> Option<Arc<aho_corasick::AhoCorasick>> {
    if patterns.is_empty() {
        return None;
    }
    // A contiguous NFA builds in time linear in the patterns' bytes; a DFA (what the builder
    // picks for a few patterns) has a row per state and byte class, which for a 64 KiB secret's
    // forms takes minutes.
    aho_corasick::AhoCorasick::builder()
        .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
        .match_kind(aho_corasick::MatchKind::Standard)
        .ascii_case_insensitive(ignore_case)
        .build(patterns)
        .ok()
        .map(Arc::new)
}

/// The secret itself, and each part of it at least [`MIN_TRANSFORMED_SECRET_CHARS`] long
/// between whitespace or template variables (`Bearer tok-{{seq}}-SECRETVALUE` is sent rendered,
/// so only its static parts can be known).
fn secret_parts(s: &str) -> Vec<&str> {
    let mut parts = vec![s];
    let mut rest = s;
    let mut statics = Vec::new();
    while let Some(open) = rest.find("{{") {
        statics.push(&rest[..open]);
        rest = match rest[open..].find("}}") {
            Some(close) => &rest[open + close + 2..],
            None => "",
        };
    }
    statics.push(rest);
    for piece in statics.into_iter().chain(s.split_whitespace()) {
        for p in std::iter::once(piece).chain(piece.split_whitespace()) {
            if p.chars().count() >= MIN_TRANSFORMED_SECRET_CHARS && !parts.contains(&p) {
                parts.push(p);
            }
        }
    }
    parts
}

/// `s` as written, as quoted by `{:?}` and as a JSON string (without the quotes).
fn quoted_forms(s: &str) -> [String; 3] {
    [
        s.to_string(),
        unquote(&format!("{s:?}")).to_string(),
        json_inner(s),
    ]
}

/// [`quoted_forms`], the JSON form escaped again, and the base64 and percent encodings.
fn encoded_forms(s: &str) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    // What URL encoders leave as is: letters, digits and `-._~`.
    const UNRESERVED: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let mut forms = quoted_forms(s).to_vec();
    forms.push(json_inner(&forms[2]));
    forms.extend([
        STANDARD.encode(s),
        STANDARD_NO_PAD.encode(s),
        URL_SAFE_NO_PAD.encode(s),
        utf8_percent_encode(s, NON_ALPHANUMERIC).to_string(),
        utf8_percent_encode(s, UNRESERVED).to_string(),
        utf8_percent_encode(s, UNRESERVED)
            .to_string()
            .replace("%20", "+"),
    ]);
    forms.retain(|f| !f.is_empty());
    forms
}

/// Every run of `n` (at least 1) consecutive characters of `s` (none when `s` is shorter).
fn windows(s: &str, n: usize) -> impl Iterator<Item = &str> {
    let starts: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([s.len()]).collect();
    let count = (starts.len() + 1).saturating_sub(n.max(1));
    (0..count).map(move |i| &s[starts[i]..ends[i + n - 1]])
}

/// `s` as a JSON string, without the quotes.
fn json_inner(s: &str) -> String {
    unquote(&serde_json::to_string(s).unwrap_or_default()).to_string()
}

/// `s` without its first and last character (the quotes of a quoted string).
fn unquote(s: &str) -> &str {
    s.get(1..s.len().saturating_sub(1)).unwrap_or_default()
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} patterns)", self.patterns_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_every_secret_is_redacted_longest_first() {
        let r = Redactor::new(["pw", "pw-longer", "tok\"en\\x", ""]);
        assert_eq!(
            r.redact("a pw-longer b pw c pwpw"),
            "a <redacted> b <redacted> c <redacted><redacted>"
        );
        // As quoted by `{:?}` and by JSON: the escaped form is matched too.
        let quoted = format!("{:?} {}", "tok\"en\\x", serde_json::json!("tok\"en\\x"));
        assert_eq!(r.redact(&quoted), "\"<redacted>\" \"<redacted>\"");
        assert_eq!(r.redact("nothing here"), "nothing here");
        assert_eq!(Redactor::default().redact("pw"), "pw");
    }

    /// The hostile echoes: the token without its scheme, base64, percent-encoded, case
    /// changed, JSON-escaped twice, a prefix, a suffix and a middle part, split by a newline.
    #[test]
    fn transformed_echoes_of_a_secret_are_redacted() {
        use base64::Engine;
        let token = "s3cr\"et\\Tok+/=xyzLONGSECRETVALUE";
        let secret = format!("Bearer {token}");
        let r = Redactor::new([secret.as_str()]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(token);
        let pct = percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC)
            .to_string()
            .to_lowercase();
        let twice = serde_json::to_string(&serde_json::to_string(token).unwrap()).unwrap();
        let echoes = [
            token.to_string(),
            b64,
            pct,
            token.to_uppercase(),
            twice,
            token[..14].to_string(),
            token[token.len() - 13..].to_string(),
            token[5..20].to_string(),
        ];
        for e in echoes {
            let out = r.redact(&format!("got <{e}> here"));
            assert!(
                out.starts_with("got <") && out.ends_with("> here"),
                "{e}: {out}"
            );
            assert!(out.contains(REDACTED), "{e}: {out}");
            // No run of 12 characters of the echo survives, nor of the token.
            let rest = out.replace(REDACTED, "\u{0}");
            for w in windows(&e, SECRET_WINDOW_CHARS) {
                assert!(!rest.contains(w), "{e}: {out}");
            }
        }
        // Split by a newline: each side at least 12 characters long is redacted.
        let (a, b) = token.split_at(16);
        let out = r.redact(&format!("{a}\n{b}"));
        assert_eq!(out, format!("{REDACTED}\n{REDACTED}"));
        // Ordinary text is left alone.
        assert_eq!(r.redact("Bearer of news"), "Bearer of news");
    }

    /// Secrets as large as Secrets Manager holds (64 KiB), and the largest whose every run of
    /// [`SECRET_WINDOW_CHARS`] is matched, build their matchers in linear time: a contiguous
    /// NFA over their pattern bytes, not a DFA with a row of every byte class per state (which
    /// took minutes, on the probing path, at start and at every refresh). Checked by the
    /// automaton's kind and size, which do not depend on the machine's load.
    /// Seen: 42 (one 64 KiB secret) to 310 (every window of a 4 KiB one).
    const MAX_MATCHER_BYTES_PER_SECRET_BYTE: usize = 1_000;

    #[test]
    fn large_secrets_are_redacted_without_stalling() {
        let mut x: u32 = 0x9e37_79b9;
        let mut random = |n: usize| -> String {
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x >> 24) as usize % 36])
                })
                .collect()
        };
        let (huge, windowed) = (random(64 * 1024), random(MAX_WINDOWED_CHARS));
        // Each alone: a few patterns is where an automaton would be built as a DFA.
        let r = Redactor::new([huge.as_str()]);
        linear(&huge);
        assert_eq!(r.redact(&format!("echo: {huge}.")), "echo: <redacted>.");
        let r = Redactor::new([windowed.as_str()]);
        linear(&windowed);
        let out = r.redact(&format!("echo: {windowed} and {}.", &windowed[100..140]));
        assert_eq!(out, "echo: <redacted> and <redacted>.");
        let same = "A".repeat(64 * 1024);
        let r = Redactor::new([same.as_str()]);
        linear(&same);
        assert_eq!(r.redact(&format!("<{same}>")), "<<redacted>>");
    }

    /// Every matcher built for `secret` is a contiguous NFA whose memory grows with its bytes.
    fn linear(secret: &str) {
        let bytes = secret.len();
        for m in Matchers::of(0, [secret]).all() {
            assert_eq!(m.kind(), aho_corasick::AhoCorasickKind::ContiguousNFA);
            let per_byte = m.memory_usage() / bytes.max(1);
            assert!(
                per_byte <= MAX_MATCHER_BYTES_PER_SECRET_BYTE,
                "{per_byte} bytes per secret byte"
            );
        }
    }

    /// A templated secret is sent rendered: its static parts are redacted from the echo.
    #[test]
    fn the_static_parts_of_a_templated_secret_are_redacted() {
        let r = Redactor::new(["Bearer tok-{{seq}}-SECRETVALUE"]);
        assert_eq!(
            r.redact("echo: Bearer tok-17-SECRETVALUE."),
            "echo: <redacted>17<redacted>."
        );
    }

    /// After a refresh the new value is redacted, and the old one still is (an attempt in
    /// flight may echo it); clones share what was learned.
    #[test]
    fn redaction_follows_a_refreshed_secret() {
        let cell = SecretCell::fixed("first-Secret-1".into());
        let r = Redactor::of(vec![cell.clone()]);
        let clone = r.clone();
        assert_eq!(r.redact("x second-Secret-2"), "x second-Secret-2");
        assert!(cell.set("second-Secret-2".into()));
        assert_eq!(clone.redact("x second-Secret-2"), "x <redacted>");
        assert_eq!(
            r.redact("first-Secret-1 second-Secret-2"),
            "<redacted> <redacted>"
        );
    }

    /// A short secret is matched exactly: `e` in other words is not, `E` is not.
    #[test]
    fn a_short_secret_is_redacted_exactly() {
        let r = Redactor::new(["e", "pw-1234"]);
        assert_eq!(
            r.redact("e Else pw-1234 PW-1234"),
            "<redacted> Els<redacted> <redacted> PW-1234"
        );
    }
}
