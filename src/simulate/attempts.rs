//! The first hop: a branch's scripted attempt outcomes at the probe interval.
//!
//! Attempt `k` starts at `k × interval` (the scheduler's jitter before the first attempt is left
//! out). A success, and a failure that is not a timeout, finishes `latency` after its start; a
//! timeout finishes when its deadline cuts it off: `dns_timeout` at the resolve step's timeout,
//! `tcp_timeout` at the connect step's, `deadline_exceeded` at the attempt's (each at most the
//! attempt timeout). Between 0 and 100 % a segment's failing attempts are drawn from `rand`'s
//! `StdRng` seeded by the scenario's seed and the branch's index, so one branch's noise does not
//! change when another branch is scripted; the same seed gives the same attempts with the same
//! build (`StdRng` may change its algorithm in a new `rand` release).

use super::scenario::{BranchScript, Segment};
use crate::config::StepTimeouts;
use crate::failure::FailureClass;
use crate::readiness::{AttemptRecord, Millis};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::time::Duration;

/// The probe timing of the simulated service.
#[derive(Debug, Clone)]
pub struct Timing {
    /// `probe.interval`.
    pub interval: Duration,
    /// `probe.suspect_interval`: not modelled (attempts stay at `interval`), only named in
    /// the report's assumptions.
    pub suspect_interval: Option<Duration>,
    /// `probe.timeout`.
    pub timeout: Duration,
    /// `probe.step_timeout`.
    pub steps: StepTimeouts,
    /// How long a success or a non-timeout failure takes, ms.
    pub latency_ms: Millis,
}

fn ms(d: Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Timing {
    /// How long an attempt that ends with `class` takes, ms.
    pub fn failure_ms(&self, class: FailureClass) -> Millis {
        let step = match class {
            FailureClass::DnsTimeout => self.steps.resolve,
            FailureClass::TcpTimeout => self.steps.connect,
            FailureClass::DeadlineExceeded => self.timeout,
            _ => return self.latency_ms,
        };
        ms(step.min(self.timeout))
    }
}

/// One scripted attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScriptedAttempt {
    /// When it started, ms from the scenario's start.
    pub started_at: Millis,
    /// What the readiness core is fed.
    pub record: AttemptRecord,
}

/// The rule in force at `t`: the fault covering it, else the noise covering it, else none.
fn rule_at(script: &BranchScript, t: Millis) -> Option<&Segment> {
    let covers = |s: &&Segment| s.from <= t && t < s.until;
    script
        .faults
        .iter()
        .find(covers)
        .or_else(|| script.noise.iter().find(covers))
}

/// Every attempt of one branch that starts before `end_ms`, in start order.
pub fn attempts(
    script: &BranchScript,
    timing: &Timing,
    end_ms: Millis,
    seed: u64,
    branch_index: u64,
) -> Vec<ScriptedAttempt> {
    let mut rng = StdRng::seed_from_u64(seed ^ branch_index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let step = ms(timing.interval).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < end_ms {
        let fail = match rule_at(script, start) {
            None => None,
            Some(s) if s.fail_percent >= 100.0 => Some(s.class),
            Some(s) if s.fail_percent <= 0.0 => None,
            // Drawn only inside partial segments, so a fault's length does not shift the noise
            // drawn after it.
            Some(s) => rng.random_bool(s.fail_percent / 100.0).then_some(s.class),
        };
        let took = fail.map_or(timing.latency_ms, |c| timing.failure_ms(c));
        out.push(ScriptedAttempt {
            started_at: start,
            record: AttemptRecord {
                finished_at: start + took,
                success: fail.is_none(),
                class: fail,
            },
        });
        start += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        let s = Duration::from_secs(1);
        Timing {
            interval: Duration::from_secs(2),
            suspect_interval: None,
            timeout: Duration::from_millis(1500),
            steps: StepTimeouts {
                resolve: s,
                connect: s,
                tls: s,
                auth: s,
                write: s,
                verify: s,
            },
            latency_ms: 20,
        }
    }

    fn seg(from: Millis, until: Millis, fail_percent: f64, class: FailureClass) -> Segment {
        Segment {
            from,
            until,
            fail_percent,
            class,
            seen_by: None,
        }
    }

    fn script() -> BranchScript {
        BranchScript {
            name: "primary".into(),
            noise: vec![seg(0, 600_000, 10.0, FailureClass::TcpTimeout)],
            faults: vec![seg(100_000, 200_000, 100.0, FailureClass::ServerReadOnly)],
            approve_at: vec![],
            approve_after: None,
        }
    }

    #[test]
    fn faults_replace_noise_and_timeouts_end_at_their_deadline() {
        let a = attempts(&script(), &timing(), 600_000, 7, 0);
        assert_eq!(a.len(), 300);
        for x in &a {
            let in_fault = (100_000..200_000).contains(&x.started_at);
            if in_fault {
                assert_eq!(x.record.class, Some(FailureClass::ServerReadOnly));
                assert_eq!(x.record.finished_at, x.started_at + 20);
            } else if let Some(c) = x.record.class {
                assert_eq!(c, FailureClass::TcpTimeout);
                assert_eq!(x.record.finished_at, x.started_at + 1000);
            }
        }
        let noise: Vec<_> = a
            .iter()
            .filter(|x| !(100_000..200_000).contains(&x.started_at))
            .collect();
        let failed = noise.iter().filter(|x| !x.record.success).count();
        // 250 draws at 10 %: far outside 5–50 only if the draws were not drawn at all.
        assert!((5..50).contains(&failed), "{failed}");
    }

    #[test]
    fn the_same_seed_gives_the_same_attempts_and_another_seed_others() {
        let t = timing();
        assert_eq!(
            attempts(&script(), &t, 600_000, 7, 0),
            attempts(&script(), &t, 600_000, 7, 0)
        );
        assert_ne!(
            attempts(&script(), &t, 600_000, 7, 0),
            attempts(&script(), &t, 600_000, 8, 0)
        );
        assert_ne!(
            attempts(&script(), &t, 600_000, 7, 0),
            attempts(&script(), &t, 600_000, 7, 1)
        );
    }
}
