//! Assertions on the `publish` evidence records of a run, shared by the sink tests.

use serde_json::Value as Json;

/// Among `recs`, those whose `key` is `value`: at least `min` of them, each with `other` equal
/// to `want` after one try, and its error containing `part` (any error when `part` is empty).
pub fn assert_each_one_try(
    recs: &[&Json],
    (key, value): (&str, &str),
    min: usize,
    (other, want): (&str, &str),
    part: &str,
) {
    let picked: Vec<_> = recs.iter().filter(|p| p[key] == value).collect();
    assert!(picked.len() >= min, "{key} = {value}: {picked:?}");
    for p in picked {
        assert_eq!((&p[other], &p["tries"]), (&want.into(), &1.into()), "{p}");
        if !part.is_empty() {
            let e = p["error"].as_str().unwrap();
            assert!(e.contains(part), "{e}");
        }
    }
}
