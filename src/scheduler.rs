//! Per-branch attempt loops: a fixed interval with a little jitter on the first attempt, no
//! drift (ticks are scheduled from the start, missed ticks skipped, never bunched), at most one
//! attempt in flight per branch, branches independent of one another.
//!
//! Adaptive probing: while the runner says a branch is suspect (a `watch` per branch), its
//! attempts start every `suspect_interval` instead. A switch re-anchors the ticks one new period
//! after the latest start (at once if that has passed). While suspect, a tick missed because an
//! attempt outlasted the period fires when the attempt ends and delays the ticks after it (an
//! attempt may outlast `suspect_interval`, never `interval`): two starts are never closer than
//! the period in force at the second, and a branch whose attempts hang starts one attempt per
//! attempt timeout.

use crate::clock::Clock;
use crate::probe::{Attempt, BranchProbe, run_attempt};
use hickory_resolver::TokioResolver;
use std::future::Future;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
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
    /// A round of the service's stable-name probe (evidence only) and its `SelectedBranch`
    /// value.
    StableName(Box<crate::record::StableNameRecord>, f64),
}

/// Timing of a branch loop.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Between attempt starts.
    pub interval: Duration,
    /// Between attempt starts while the branch is suspect (`None`: adaptive probing off).
    pub suspect_interval: Option<Duration>,
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
    (tx, pace): (mpsc::Sender<BranchEvent>, watch::Receiver<bool>),
    stop: CancellationToken,
) -> u64 {
    let branch = probe.branch.name.clone();
    attempt_loop(&branch, clock, schedule, (tx, pace), stop, move |seq| {
        let (probe, resolver) = (probe.clone(), resolver.clone());
        async move { run_attempt(&probe, &resolver, &clock, seq).await }
    })
    .await
}

/// What a service's stable-name loop asks each round.
#[derive(Debug, Clone)]
pub struct StableNameTarget {
    /// Service name (log lines).
    pub service: String,
    /// The failover record name.
    pub stable_name: String,
    /// Its branches' endpoints, resolved in the same round.
    pub branches: Vec<crate::probe::stable_name::BranchEndpoint>,
    /// Address records asked for (`dns.address_family`).
    pub family: crate::config::AddressFamily,
    /// The branches' probes made [`BranchProbe::through_stable_name`], for the end-to-end
    /// attempt of each round; empty when `[stable_name_probe] end_to_end` is off.
    pub end_to_end: Vec<BranchProbe>,
}

/// The ticks of a loop: the first after a random delay up to `schedule.jitter`, then every
/// `schedule.interval`, missed ticks skipped (never bunched).
fn ticker(schedule: &Schedule) -> tokio::time::Interval {
    every(
        first_tick(schedule),
        schedule.interval,
        MissedTickBehavior::Skip,
    )
}

/// When the first tick is due: after a random delay up to `schedule.jitter`.
fn first_tick(schedule: &Schedule) -> Instant {
    let jitter = if schedule.jitter.is_zero() {
        Duration::ZERO
    } else {
        Duration::from_millis(rand::random_range(0..=schedule.jitter.as_millis() as u64))
    };
    Instant::now() + jitter
}

/// Ticks from `start` every `period`; a missed tick fires late and then, with `Skip`, the
/// ticks keep their phase, with `Delay`, they come a period after it (never bunched either way).
fn every(start: Instant, period: Duration, missed: MissedTickBehavior) -> tokio::time::Interval {
    let mut ticker = interval_at(start, period);
    ticker.set_missed_tick_behavior(missed);
    ticker
}

/// Run stable-name rounds for one service until `stop` is cancelled or `tx` closes: the first
/// after a random delay up to `schedule.jitter`, then every `schedule.interval` (missed ticks
/// skipped). Each round resolves afresh with the branches' uncached resolver, then, with
/// end-to-end probes, runs one attempt through the stable name. Returns the number of rounds.
pub async fn stable_name_loop(
    target: StableNameTarget,
    resolver: TokioResolver,
    clock: Clock,
    schedule: Schedule,
    tx: mpsc::Sender<BranchEvent>,
    stop: CancellationToken,
) -> u64 {
    let mut ticker = ticker(&schedule);
    let mut rounds = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let t = &target;
        let round = crate::probe::stable_name::observe(
            &resolver,
            t.family,
            &t.service,
            &t.stable_name,
            &t.branches,
        );
        let obs = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            o = round => o,
        };
        rounds += 1;
        let mut record = Box::new(obs.record(&t.stable_name));
        let probe =
            crate::probe::stable_name::end_to_end_probe(&t.end_to_end, obs.selection.as_ref());
        if let Some(probe) = probe {
            let attempt = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                a = end_to_end(probe.clone(), resolver.clone(), clock, rounds) => a,
            };
            record.end_to_end = Some(attempt.into());
        }
        if tx
            .send(BranchEvent::StableName(record, obs.datum()))
            .await
            .is_err()
        {
            break;
        }
    }
    rounds
}

/// One end-to-end attempt (number `seq`) in a task of its own, as a branch's attempt runs: a
/// panic inside is an `internal_error` failure, and dropping this future (the loop stopped or
/// aborted) aborts the attempt.
async fn end_to_end(
    probe: BranchProbe,
    resolver: TokioResolver,
    clock: Clock,
    seq: u64,
) -> Attempt {
    let started_at = clock.now_ms();
    let branch = probe.branch.name.clone();
    let task = tokio::spawn(async move { run_attempt(&probe, &resolver, &clock, seq).await });
    let guard = AbortOnDrop(task.abort_handle());
    let result = task.await;
    drop(guard);
    result.unwrap_or_else(|e| {
        tracing::error!(branch = %branch, seq, error = %e, "an end-to-end attempt failed inside readyprobe; recorded as failed");
        Attempt::internal_failure(&branch, seq, started_at, clock.now_ms(), format!("internal error: {e}"))
    })
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The loop of [`branch_loop`] with the attempt as a parameter (`attempt(seq)` yields one
/// finished attempt), so its timing can be tested under paused time without a network.
async fn attempt_loop<F, Fut>(
    branch: &str,
    clock: Clock,
    schedule: Schedule,
    (tx, mut pace): (mpsc::Sender<BranchEvent>, watch::Receiver<bool>),
    stop: CancellationToken,
    attempt: F,
) -> u64
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Attempt> + Send + 'static,
{
    // The period in force and what a missed tick does (module docs).
    let period = |suspect: bool| match schedule.suspect_interval {
        Some(fast) if suspect => (fast, MissedTickBehavior::Delay),
        _ => (schedule.interval, MissedTickBehavior::Skip),
    };
    let mut suspect = *pace.borrow_and_update();
    // Before the first attempt, the jittered first tick; after, the latest start.
    let mut anchor = first_tick(&schedule);
    let (p, missed) = period(suspect);
    let mut ticker = every(anchor, p, missed);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            // A closed watch (the runner forgot this loop) keeps the period in force.
            Ok(()) = pace.changed() => {
                let (was, _) = period(suspect);
                suspect = *pace.borrow_and_update();
                let (p, missed) = period(suspect);
                if p != was {
                    let first = if seq == 0 { anchor } else { anchor + p };
                    ticker = every(first.max(Instant::now()), p, missed);
                }
                continue;
            }
            _ = ticker.tick() => {}
        }
        anchor = Instant::now();
        seq += 1;
        // Each attempt runs in a task of its own, so a bug that panics in one attempt is
        // recorded as a failed attempt instead of silently ending this branch's loop.
        let started_at = clock.now_ms();
        let mut running = tokio::spawn(attempt(seq));
        let mut guard = InFlight {
            tx: &tx,
            branch,
            seq,
            attempt: Some(running.abort_handle()),
        };
        let finished = tokio::select! {
            a = &mut running => Some(a),
            _ = stop.cancelled() => {
                match tokio::time::timeout(schedule.grace, &mut running).await {
                    Ok(a) => Some(a),
                    Err(_) => {
                        running.abort();
                        None
                    }
                }
            }
        };
        let event = match finished {
            Some(Ok(a)) => BranchEvent::Attempt(Box::new(a)),
            Some(Err(e)) => {
                tracing::error!(branch = %branch, seq, error = %e, "an attempt failed inside readyprobe; counted as failed");
                BranchEvent::Attempt(Box::new(Attempt::internal_failure(
                    branch,
                    seq,
                    started_at,
                    clock.now_ms(),
                    format!("internal error: {e}"),
                )))
            }
            None => BranchEvent::Abandoned {
                branch: branch.to_string(),
                seq,
            },
        };
        let sent = tx.send(event).await;
        guard.attempt = None;
        if sent.is_err() {
            break;
        }
    }
    seq
}

/// An attempt whose event is not handed over yet. When the loop is aborted meanwhile (a
/// reload stopped it), dropping this aborts the attempt (it would otherwise run on, detached)
/// and reports it abandoned, so no attempt goes unaccounted.
struct InFlight<'a> {
    tx: &'a mpsc::Sender<BranchEvent>,
    branch: &'a str,
    seq: u64,
    /// `None` once the event is handed over.
    attempt: Option<tokio::task::AbortHandle>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.attempt.take() {
            a.abort();
            let _ = self.tx.try_send(BranchEvent::Abandoned {
                branch: self.branch.to_string(),
                seq: self.seq,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    //! Paused-time tests: tokio's clock only moves when every task waits, so each instant below
    //! is exact and the outcome does not depend on the machine's load.

    use super::*;
    use crate::config::StepTimeouts;
    use crate::failure::{FailureClass, Step};
    use crate::probe::{Deadline, Outcome, StepError, Steps};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::task::JoinHandle;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn schedule(interval: Duration, jitter: Duration, grace: Duration) -> Schedule {
        Schedule {
            interval,
            suspect_interval: None,
            jitter,
            grace,
        }
    }

    /// The pace of a loop never found suspect (its sender gone: the period never changes).
    fn steady() -> watch::Receiver<bool> {
        watch::channel(false).1
    }

    /// One test attempt, in tokio time.
    struct Span {
        branch: String,
        seq: u64,
        start: Instant,
        /// Once it finished.
        end: Option<Instant>,
    }

    /// What the test attempts saw.
    #[derive(Default)]
    struct Log {
        spans: Mutex<Vec<Span>>,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    impl Log {
        fn begin(&self, branch: &str, seq: u64) {
            let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(n, Ordering::SeqCst);
            self.spans.lock().unwrap().push(Span {
                branch: branch.into(),
                seq,
                start: Instant::now(),
                end: None,
            });
        }

        fn end(&self, branch: &str, seq: u64) {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut spans = self.spans.lock().unwrap();
            let span = spans
                .iter_mut()
                .find(|s| s.branch == branch && s.seq == seq)
                .unwrap();
            span.end = Some(Instant::now());
        }

        /// Start offsets from `t0` of `branch`'s attempts, in order.
        fn starts(&self, branch: &str, t0: Instant) -> Vec<Duration> {
            let spans = self.spans.lock().unwrap();
            spans
                .iter()
                .filter(|s| s.branch == branch)
                .map(|s| s.start - t0)
                .collect()
        }

        /// (start, end) offsets from `t0` of `branch`'s attempts, in order.
        fn spans(&self, branch: &str, t0: Instant) -> Vec<(Duration, Option<Duration>)> {
            let spans = self.spans.lock().unwrap();
            spans
                .iter()
                .filter(|s| s.branch == branch)
                .map(|s| (s.start - t0, s.end.map(|e| e - t0)))
                .collect()
        }
    }

    /// Spawn a loop whose attempt `seq` takes `takes(seq)` and succeeds.
    fn spawn_loop(
        branch: &str,
        schedule: Schedule,
        log: &Arc<Log>,
        takes: fn(u64) -> Duration,
        stop: &CancellationToken,
        tx: mpsc::Sender<BranchEvent>,
    ) -> JoinHandle<u64> {
        spawn_paced(branch, schedule, log, takes, stop, (tx, steady()))
    }

    /// [`spawn_loop`] whose pace (suspect or not) comes from `pace`.
    fn spawn_paced(
        branch: &str,
        schedule: Schedule,
        log: &Arc<Log>,
        takes: fn(u64) -> Duration,
        stop: &CancellationToken,
        (tx, pace): (mpsc::Sender<BranchEvent>, watch::Receiver<bool>),
    ) -> JoinHandle<u64> {
        let (branch, log, stop) = (branch.to_string(), log.clone(), stop.clone());
        let clock = Clock::start();
        tokio::spawn(async move {
            let name = branch.clone();
            attempt_loop(&name, clock, schedule, (tx, pace), stop, move |seq| {
                let (branch, log) = (branch.clone(), log.clone());
                async move {
                    let start = Instant::now();
                    log.begin(&branch, seq);
                    tokio::time::sleep(takes(seq)).await;
                    log.end(&branch, seq);
                    Attempt::bare(
                        &branch,
                        seq,
                        clock.at(start),
                        clock.now_ms(),
                        Outcome::Success,
                    )
                }
            })
            .await
        })
    }

    async fn next_attempt(rx: &mut mpsc::Receiver<BranchEvent>) -> Box<Attempt> {
        match rx.recv().await {
            Some(BranchEvent::Attempt(a)) => a,
            other => panic!("expected an attempt, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_start_at_the_interval_without_drift() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        // Each attempt takes 3 s: the next one still starts 10 s after the previous start.
        let h = spawn_loop(
            "a",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            |_| secs(3),
            &stop,
            tx,
        );
        for seq in 1..=4 {
            assert_eq!(next_attempt(&mut rx).await.seq, seq);
        }
        // Cancelled between attempts (the 5th is due at 40 s): the loop ends at once.
        let cancelled_at = Instant::now();
        stop.cancel();
        assert_eq!(h.await.unwrap(), 4);
        assert_eq!(Instant::now(), cancelled_at);
        assert_eq!(log.starts("a", t0), [secs(0), secs(10), secs(20), secs(30)]);
        assert!(rx.recv().await.is_none(), "no attempt after the cancel");
    }

    /// Suspect: attempts every `suspect_interval`, re-anchored on the latest start (never
    /// sooner); back to `interval` when no longer suspect.
    #[tokio::test(start_paused = true)]
    async fn a_suspect_branch_is_probed_at_the_suspect_interval_then_at_the_interval_again() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let (pace, paced) = watch::channel(false);
        let sched = Schedule {
            suspect_interval: Some(secs(2)),
            ..schedule(secs(10), Duration::ZERO, secs(5))
        };
        let takes = |_| Duration::from_millis(100);
        let h = spawn_paced("a", sched, &log, takes, &stop, (tx, paced));
        for _ in 0..2 {
            next_attempt(&mut rx).await;
        }
        // Suspect from 11 s: the next start is 2 s after the latest (10 s), not at once.
        tokio::time::sleep_until(t0 + secs(11)).await;
        pace.send_replace(true);
        for _ in 0..3 {
            next_attempt(&mut rx).await;
        }
        // No longer suspect at 17 s: the next start is 10 s after the latest (16 s).
        tokio::time::sleep_until(t0 + secs(17)).await;
        pace.send_replace(false);
        for _ in 0..2 {
            next_attempt(&mut rx).await;
        }
        stop.cancel();
        assert_eq!(h.await.unwrap(), 7);
        let want = [0, 10, 12, 14, 16, 26, 36].map(secs);
        assert_eq!(log.starts("a", t0), want);
        assert_eq!(log.max_in_flight.load(Ordering::SeqCst), 1);
    }

    /// A suspect branch whose every other attempt hangs until its deadline (5 s, longer than
    /// the 2 s suspect interval) starts the next attempt when the hung one ends, and the one
    /// after that 2 s later, not on the tick the hung attempt missed: never two starts closer
    /// than the suspect interval, never two attempts at once.
    #[tokio::test(start_paused = true)]
    async fn a_suspect_branch_whose_attempts_hang_is_never_probed_faster() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let (pace, paced) = watch::channel(true);
        let sched = Schedule {
            suspect_interval: Some(secs(2)),
            ..schedule(secs(10), Duration::ZERO, secs(5))
        };
        let takes = |seq| {
            if seq % 2 == 1 {
                secs(5)
            } else {
                Duration::from_millis(100)
            }
        };
        let h = spawn_paced("a", sched, &log, takes, &stop, (tx, paced));
        for _ in 0..4 {
            next_attempt(&mut rx).await;
        }
        // No longer suspect during the 5th attempt (14 s to 19 s): the 6th starts at 24 s.
        tokio::time::sleep_until(t0 + secs(16)).await;
        pace.send_replace(false);
        for _ in 0..2 {
            next_attempt(&mut rx).await;
        }
        stop.cancel();
        h.await.unwrap();
        let starts = log.starts("a", t0);
        assert_eq!(starts, [0, 5, 7, 12, 14, 24].map(secs));
        assert_eq!(log.max_in_flight.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_attempt_delays_the_next_one_and_never_overlaps_it() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        // The first attempt takes 25 s of a 10 s interval, later ones 1 s.
        let takes = |seq| if seq == 1 { secs(25) } else { secs(1) };
        let h = spawn_loop(
            "a",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            takes,
            &stop,
            tx,
        );
        for _ in 1..=4 {
            next_attempt(&mut rx).await;
        }
        stop.cancel();
        h.await.unwrap();
        assert_eq!(log.max_in_flight.load(Ordering::SeqCst), 1);
        // The overdue tick fires when the slow attempt ends (25 s); the ticks it missed (10 s,
        // 20 s) are skipped, not bunched, and the schedule keeps its phase (30 s, 40 s).
        assert_eq!(
            log.spans("a", t0),
            [
                (secs(0), Some(secs(25))),
                (secs(25), Some(secs(26))),
                (secs(30), Some(secs(31))),
                (secs(40), Some(secs(41))),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_spreads_the_first_attempts_of_several_branches() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let branches: Vec<String> = (0..16).map(|i| format!("b{i}")).collect();
        let jitter = secs(2);
        let mut loops = Vec::new();
        for b in &branches {
            let sched = schedule(secs(10), jitter, secs(5));
            loops.push(spawn_loop(
                b,
                sched,
                &log,
                |_| Duration::ZERO,
                &stop,
                tx.clone(),
            ));
        }
        drop(tx);
        // Two attempts per branch: every first attempt lies within the jitter, every second one
        // an interval after its branch's first.
        for _ in 0..2 * branches.len() {
            next_attempt(&mut rx).await;
        }
        stop.cancel();
        for l in loops {
            assert_eq!(l.await.unwrap(), 2);
        }
        let mut firsts = Vec::new();
        for b in &branches {
            let starts = log.starts(b, t0);
            assert_eq!(starts.len(), 2, "{b}: {starts:?}");
            assert!(starts[0] <= jitter, "{b} started at {:?}", starts[0]);
            assert_eq!(starts[1] - starts[0], secs(10), "{b}");
            firsts.push(starts[0]);
        }
        firsts.sort();
        firsts.dedup();
        // 16 draws from 2,001 whole milliseconds all alike: probability 2001^-15.
        assert!(firsts.len() > 1, "all branches started at once: {firsts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_past_its_deadline_is_a_timed_out_failure_and_the_loop_goes_on() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let clock = Clock::start();
        let timeout = secs(4);
        let starts = Arc::new(Mutex::new(Vec::new()));
        let seen = starts.clone();
        // A peer that never answers the write step, under the attempt deadline as
        // `probe::run_attempt` sets it (step timeouts longer than the attempt's).
        let h = tokio::spawn(async move {
            let sched = schedule(secs(10), Duration::ZERO, secs(5));
            attempt_loop(
                "a",
                clock,
                sched,
                (tx, steady()),
                stop.clone(),
                move |seq| {
                    let seen = seen.clone();
                    async move {
                        let start = Instant::now();
                        seen.lock().unwrap().push(start - t0);
                        let step_timeouts = StepTimeouts {
                            resolve: secs(60),
                            connect: secs(60),
                            tls: secs(60),
                            auth: secs(60),
                            write: secs(60),
                            verify: secs(60),
                        };
                        let deadline = Deadline {
                            end: start + timeout,
                            step_timeouts,
                        };
                        let mut steps = Steps::new(deadline);
                        let never = std::future::pending::<Result<(), StepError>>();
                        let outcome = match steps.run(Step::Write, never).await {
                            Ok(()) => Outcome::Success,
                            Err((_, e)) => Outcome::Failure {
                                step: Step::Write,
                                class: e.class,
                                message: e.message,
                            },
                        };
                        let mut a =
                            Attempt::bare("a", seq, clock.at(start), clock.now_ms(), outcome);
                        a.steps = steps.records;
                        a
                    }
                },
            )
            .await
        });
        let first = next_attempt(&mut rx).await;
        assert_eq!(Instant::now() - t0, timeout);
        assert_eq!(first.finished_at - first.started_at, 4000);
        match &first.outcome {
            Outcome::Failure {
                step,
                class,
                message,
            } => {
                assert_eq!(
                    (*step, *class),
                    (Step::Write, FailureClass::DeadlineExceeded)
                );
                assert!(message.contains("attempt deadline"), "{message}");
            }
            Outcome::Success => panic!("a hung attempt succeeded"),
        }
        assert!(!first.steps[0].ok);
        let second = next_attempt(&mut rx).await;
        assert_eq!(second.seq, 2);
        assert_eq!(*starts.lock().unwrap(), [secs(0), secs(10)]);
        h.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_attempt_is_an_internal_failure_and_the_loop_goes_on() {
        let (tx, mut rx) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let clock = Clock::start();
        let token = stop.clone();
        let h = tokio::spawn(async move {
            let sched = schedule(secs(10), Duration::ZERO, secs(5));
            attempt_loop(
                "a",
                clock,
                sched,
                (tx, steady()),
                token,
                move |seq| async move {
                    assert!(seq != 1, "a bug in attempt 1");
                    Attempt::bare("a", seq, clock.now_ms(), clock.now_ms(), Outcome::Success)
                },
            )
            .await
        });
        let first = next_attempt(&mut rx).await;
        assert!(matches!(
            first.outcome,
            Outcome::Failure {
                class: FailureClass::InternalError,
                ..
            }
        ));
        assert_eq!(next_attempt(&mut rx).await.outcome, Outcome::Success);
        stop.cancel();
        assert_eq!(h.await.unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_lets_an_in_flight_attempt_finish_within_the_grace() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let h = spawn_loop(
            "a",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            |_| secs(3),
            &stop,
            tx,
        );
        tokio::time::sleep_until(t0 + secs(1)).await;
        stop.cancel();
        // The attempt ends at 3 s, inside the 5 s grace: it is reported, and the loop ends then,
        // not at the end of the grace.
        assert_eq!(next_attempt(&mut rx).await.seq, 1);
        assert_eq!(h.await.unwrap(), 1);
        assert_eq!(Instant::now() - t0, secs(3));
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_abandons_an_attempt_that_outlives_the_grace() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let h = spawn_loop(
            "a",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            |_| secs(30),
            &stop,
            tx,
        );
        tokio::time::sleep_until(t0 + secs(1)).await;
        stop.cancel();
        // Cancelled at 1 s with a 5 s grace: abandoned at 6 s, not counted as an attempt.
        match rx.recv().await {
            Some(BranchEvent::Abandoned { branch, seq }) => {
                assert_eq!((branch.as_str(), seq), ("a", 1))
            }
            other => panic!("expected the attempt abandoned, got {other:?}"),
        }
        assert_eq!(Instant::now() - t0, secs(6));
        assert_eq!(h.await.unwrap(), 1);
        assert!(rx.recv().await.is_none());
        // The abandoned attempt was stopped, not left running.
        tokio::time::sleep(secs(60)).await;
        assert_eq!(log.spans("a", t0), [(secs(0), None)]);
    }

    /// A loop aborted mid-attempt (a reload stopped it) reports the attempt abandoned at once
    /// and stops it; one aborted between attempts reports nothing.
    #[tokio::test(start_paused = true)]
    async fn an_aborted_loop_reports_its_attempt_in_flight_abandoned() {
        let t0 = Instant::now();
        let (tx, mut rx) = mpsc::channel(64);
        let (stop, log) = (CancellationToken::new(), Arc::new(Log::default()));
        let takes = |seq| if seq == 1 { secs(1) } else { secs(30) };
        let h = spawn_loop(
            "a",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            takes,
            &stop,
            tx,
        );
        assert_eq!(next_attempt(&mut rx).await.seq, 1);
        tokio::time::sleep_until(t0 + secs(12)).await;
        h.abort();
        match rx.recv().await {
            Some(BranchEvent::Abandoned { branch, seq }) => {
                assert_eq!((branch.as_str(), seq), ("a", 2))
            }
            other => panic!("expected the attempt abandoned, got {other:?}"),
        }
        assert_eq!(Instant::now() - t0, secs(12));
        assert!(rx.recv().await.is_none());
        tokio::time::sleep(secs(60)).await;
        assert_eq!(
            log.spans("a", t0),
            [(secs(0), Some(secs(1))), (secs(10), None)],
            "the attempt was stopped, not left running"
        );
        assert_eq!(log.in_flight.load(Ordering::SeqCst), 1);

        let (tx, mut rx) = mpsc::channel(64);
        let h = spawn_loop(
            "b",
            schedule(secs(10), Duration::ZERO, secs(5)),
            &log,
            |_| secs(1),
            &stop,
            tx,
        );
        assert_eq!(next_attempt(&mut rx).await.seq, 1);
        tokio::time::sleep(secs(3)).await;
        h.abort();
        assert!(rx.recv().await.is_none(), "nothing was in flight");
    }
}
