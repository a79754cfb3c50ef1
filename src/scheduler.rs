//! Per-branch attempt loops: a fixed interval with a little jitter on the first attempt, no
//! drift (ticks are scheduled from the start, missed ticks skipped, never bunched), at most one
//! attempt in flight per branch, branches independent of one another.

use crate::clock::Clock;
use crate::probe::{Attempt, BranchProbe, run_attempt};
use hickory_resolver::TokioResolver;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_util::sync::CancellationToken;

/// What a branch loop reports.
#[derive(Debug)]
pub enum BranchEvent {
    /// A finished attempt.
    Attempt(Box<Attempt>),
    /// An attempt cut off by shutdown after the grace period; it does not count.
    Abandoned {
        /// Branch name.
        branch: String,
        /// Its sequence number.
        seq: u64,
    },
}

/// Timing of a branch loop.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Between attempt starts.
    pub interval: Duration,
    /// Upper bound of the random delay before the first attempt.
    pub jitter: Duration,
    /// How long an in-flight attempt may still run after shutdown is requested.
    pub grace: Duration,
}

/// Run attempts against one branch until `stop` is cancelled. Returns the last sequence number.
pub async fn branch_loop(
    probe: BranchProbe,
    resolver: TokioResolver,
    clock: Clock,
    schedule: Schedule,
    tx: mpsc::Sender<BranchEvent>,
    stop: CancellationToken,
) -> u64 {
    let jitter = if schedule.jitter.is_zero() {
        Duration::ZERO
    } else {
        Duration::from_millis(rand::random_range(0..=schedule.jitter.as_millis() as u64))
    };
    let mut ticker = interval_at(Instant::now() + jitter, schedule.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        seq += 1;
        // Each attempt runs in a task of its own, so a bug that panics in one attempt is
        // recorded as a failed attempt instead of silently ending this branch's loop.
        let started_at = clock.now_ms();
        let mut attempt = {
            let (probe, resolver) = (probe.clone(), resolver.clone());
            tokio::spawn(async move { run_attempt(&probe, &resolver, &clock, seq).await })
        };
        let finished = tokio::select! {
            a = &mut attempt => Some(a),
            _ = stop.cancelled() => {
                match tokio::time::timeout(schedule.grace, &mut attempt).await {
                    Ok(a) => Some(a),
                    Err(_) => {
                        attempt.abort();
                        None
                    }
                }
            }
        };
        let event = match finished {
            Some(Ok(a)) => BranchEvent::Attempt(Box::new(a)),
            Some(Err(e)) => {
                tracing::error!(branch = %probe.branch.name, seq, error = %e, "an attempt failed inside readyprobe; counted as failed");
                BranchEvent::Attempt(Box::new(Attempt::internal_failure(
                    &probe.branch.name,
                    seq,
                    started_at,
                    clock.now_ms(),
                    format!("internal error: {e}"),
                )))
            }
            None => BranchEvent::Abandoned {
                branch: probe.branch.name.clone(),
                seq,
            },
        };
        if tx.send(event).await.is_err() {
            break;
        }
    }
    seq
}
