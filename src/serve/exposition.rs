//! What `/metrics` shows: the fold's effects (its datums and evidence records) mapped to
//! Prometheus series, in the OpenMetrics text format.

use crate::fold::Effect;
use crate::readiness::Millis;

/// The series `/metrics` serves. Updated by the shell from each effect it executes; read by the
/// endpoint at each scrape. Both take `&self`: the families lock per series, never the fold.
#[derive(Debug, Default)]
pub struct Exposition {}

impl Exposition {
    /// An exposition with no series yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in one effect the shell is about to execute, observed at `now`.
    pub fn observe(&self, _effect: &Effect, _now: Millis) {}

    /// The text a scrape gets (OpenMetrics, ending in `# EOF`).
    pub fn encode(&self) -> String {
        "# EOF\n".to_string()
    }
}
