//! An AWS SDK error as one bounded line: `check --aws`'s findings and credentials verdict, an
//! RDS IAM token that cannot be signed.

/// Longest cause kept from a failed call, characters.
const MAX_CAUSE_CHARS: usize = 300;

/// An error and its sources on one line (`dispatch failure: ...: no credentials found`), each
/// message once, without the SDK's debug dump.
pub fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    let joined = crate::config::escape_controls(&parts.join(": ")).into_owned();
    if joined.chars().count() <= MAX_CAUSE_CHARS {
        return joined;
    }
    // Cut at a word and say so, rather than mid-word.
    let mut cut: String = joined.chars().take(MAX_CAUSE_CHARS).collect();
    if let Some(i) = cut.rfind(' ') {
        cut.truncate(i);
    }
    cut + " […]"
}
