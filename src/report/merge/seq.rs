//! `record_seq` of the merged records: a digest telling a record read twice from two records
//! under one number, and the problems of a prober's numbering (reused numbers, gaps).

use crate::record::Envelope;
use std::collections::BTreeMap;

/// Most reused ranges of one prober named; the rest are counted.
const MAX_REUSED_RANGES: usize = 10;

/// A digest of `env`'s content (its `record_seq` aside): two lines with one number and the same
/// digest are the same record read twice (a file and its copy, a local file and its S3
/// segment); different digests are two records. Taken over the parsed line, so a copy that
/// differs only in key order or spacing is still the same record.
pub(super) fn digest(env: &Envelope) -> u64 {
    /// Feeds the serialised line to the hasher without holding it.
    struct Feed(std::hash::DefaultHasher);
    impl std::io::Write for Feed {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            std::hash::Hasher::write(&mut self.0, b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut f = Feed(std::hash::DefaultHasher::new());
    // Serialising a parsed record into a sink that cannot fail does not fail; were it to, the
    // part fed so far still tells records apart.
    let _ = serde_json::to_writer(&mut f, env);
    std::hash::Hasher::finish(&f.0)
}

/// One sentence per prober whose `record_seq` numbers two different records (its numbering
/// restarted), naming the numbers reused as ranges, in prober order.
pub(super) fn seq_reuse(per: &mut BTreeMap<String, Vec<(u64, u64)>>) -> Vec<String> {
    let mut out = Vec::new();
    for (prober, v) in per.iter_mut() {
        v.sort_unstable();
        v.dedup();
        let mut reused: Vec<u64> = v
            .windows(2)
            .filter_map(|w| (w[0].0 == w[1].0).then_some(w[0].0))
            .collect();
        reused.dedup();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for n in reused {
            match ranges.last_mut() {
                Some(r) if r.1 + 1 == n => r.1 = n,
                _ => ranges.push((n, n)),
            }
        }
        if ranges.is_empty() {
            continue;
        }
        let mut named: Vec<String> = ranges
            .iter()
            .take(MAX_REUSED_RANGES)
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}–{b}")
                }
            })
            .collect();
        if ranges.len() > MAX_REUSED_RANGES {
            named.push(format!("{} more ranges", ranges.len() - MAX_REUSED_RANGES));
        }
        out.push(format!(
            "prober {prober}: record_seq {} reused by different records (its numbering restarted: a fresh disk whose [evidence.s3] did not answer at start, or a lost evidence file); all are kept, in time order",
            named.join(", ")
        ));
    }
    out
}

/// One sentence per jump in a prober's `record_seq` (records lost between two lines), in
/// prober order. A first number above 1 is not a gap: older records may be in a rotated file.
pub(super) fn seq_gaps(per: BTreeMap<String, Vec<(u64, u64)>>) -> Vec<String> {
    let mut out = Vec::new();
    for (prober, v) in per {
        let mut v: Vec<u64> = v.into_iter().map(|(seq, _)| seq).collect();
        v.sort_unstable();
        v.dedup();
        for w in v.windows(2) {
            if let [a, b] = *w
                && b > a + 1
            {
                let lost = b - a - 1;
                out.push(format!(
                    "prober {prober}: record_seq jumps from {a} to {b}: {lost} record{} missing (lost when written, or in a file not given)",
                    if lost == 1 { "" } else { "s" }
                ));
            }
        }
    }
    out
}
