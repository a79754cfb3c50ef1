//! The start and end of a run in the fold: the `readyprobe started` line, the run summary and
//! the `stopped` log line.

use super::*;
use crate::readiness::Millis;
use crate::record::{Record, Stop};
use std::collections::BTreeMap;

/// Up to this many branches, the `stopped` log line lists attempts and states per branch;
/// beyond, it gives the attempts in all and the number of branches in each state.
const STOPPED_LOG_BRANCHES: usize = 8;

/// A map as compact JSON text for a log field, e.g. `{"cloudwatch":3}`.
fn json_text<V: serde::Serialize>(map: &BTreeMap<String, V>) -> String {
    serde_json::to_string(map).unwrap_or_default()
}

impl Fold {
    /// The run started: one line saying what runs.
    pub(super) fn started(&mut self, s: Started) {
        let fields = Fields {
            service: Some(s.label),
            services: Some(s.services),
            state: Some(s.state),
            ..more(MoreFields {
                unavailable_count: Some(s.unavailable),
                prober: Some(s.prober),
                instance: Some(s.instance),
                branches: Some(s.branches),
                publish_interval: Some(s.publish_interval),
                sinks: Some(s.sinks),
                evidence: Some(s.evidence),
                ..MoreFields::default()
            })
        };
        self.effects
            .push(log(Level::Info, "readyprobe started", fields));
    }

    /// State files of an earlier format: ignored, each said.
    pub(super) fn earlier_state_files(&mut self, files: Vec<String>) {
        for file in files {
            let fields = more(MoreFields {
                file: Some(file),
                ..MoreFields::default()
            });
            self.effects.push(log(
                Level::Warn,
                "ignoring a state file of an earlier format; readiness continues from the control documents",
                fields,
            ));
        }
    }

    /// End the run (call once, after [`abandon_unsent`](Self::abandon_unsent)): the summary,
    /// the stop record and the final log line, which names every sink that dropped batches and
    /// says so plainly when one dropped them all.
    pub fn finish(
        &mut self,
        now: Millis,
        stop_reason: &str,
        evidence_write_failures: u64,
    ) -> (RunSummary, Vec<Effect>) {
        let mut s = std::mem::take(&mut self.summary);
        s.stop_reason = stop_reason.to_string();
        s.evidence_write_failures = evidence_write_failures;
        s.final_states = self
            .branches
            .values()
            .flatten()
            .map(|b| (self.key(b.svc, &b.name), b.readiness.state()))
            .collect();
        self.record(
            now,
            Record::Stop(Stop {
                reason: s.stop_reason.clone(),
                attempts: s.attempts.clone(),
                abandoned: s.abandoned,
                transitions: s.transitions,
                dropped_batches: s.dropped_batches.clone(),
                final_states: s.final_states.clone(),
                approvals_applied: s.approvals_applied,
                approvals_rejected: s.approvals_rejected,
                state_sync_failures: s.state_sync_failures,
                evidence_write_failures,
            }),
        );
        let line = self.stopped_log(&s);
        self.effects.push(Effect::Log(line));
        (s, std::mem::take(&mut self.effects))
    }

    fn stopped_log(&self, s: &RunSummary) -> Log {
        let silent: Vec<String> = self
            .handed
            .iter()
            .filter(|(sink, n)| **n > 0 && s.dropped_batches.get(&sink.to_string()) == Some(*n))
            .map(|(sink, n)| {
                format!("sink {sink} dropped every batch ({n} of {n}): none of this run's datums reached it")
            })
            .collect();
        let (level, message) = if !silent.is_empty() {
            (Level::Error, format!("stopped; {}", silent.join("; ")))
        } else if !s.dropped_batches.is_empty() {
            (
                Level::Warn,
                "stopped; some batches were dropped".to_string(),
            )
        } else {
            (Level::Info, "stopped".to_string())
        };
        // Per branch up to a few branches; a fleet's line gives totals (the `stop` record
        // keeps every branch).
        let (attempts, states) = if s.final_states.len() <= STOPPED_LOG_BRANCHES {
            (json_text(&s.attempts), json_text(&s.final_states))
        } else {
            let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
            for state in s.final_states.values() {
                *by_state.entry(state.as_str().to_string()).or_default() += 1;
            }
            (
                s.attempts.values().sum::<u64>().to_string(),
                json_text(&by_state),
            )
        };
        Log {
            level,
            message,
            fields: Fields {
                reason: Some(s.stop_reason.clone()),
                attempts: Some(attempts),
                transitions: Some(s.transitions),
                states: Some(states),
                dropped_batches: (!s.dropped_batches.is_empty())
                    .then(|| json_text(&s.dropped_batches)),
                ..Fields::default()
            },
        }
    }
}
