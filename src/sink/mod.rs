//! Metric sinks: the one interface every sink implements ([`Sink`]) and the bounded queue and
//! task each sink sends from ([`SinkQueue`]); the datums they send are built in [`crate::datum`].
//!
//! Sinks never decide readiness; they encode and send what the runner hands them. Encoders are
//! pure and tested against exact expected output; sending is separate: each sink runs in a task
//! of its own behind a bounded queue ([`SinkQueue`]).

pub mod cloudwatch;
pub mod emf;
pub mod evidence;
pub mod evidence_s3;
pub mod otlp;
pub mod segments;

pub use crate::datum::{
    BranchTick, Datum, Refusal, SinkId, SinkReport, SinkRoute, Unit, Value, for_profile,
    publish_failure_datums, selected_branch_datum, service_unavailable_datum, sinks_of,
    stable_name_success_datum, tick_datums, transition_datum,
};

use crate::record::{PublishFailureClass, PublishOutcome};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A send failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SinkError {
    /// What happened, in one bounded line (no credentials).
    pub message: String,
    /// Why, in the closed set of publish failure classes.
    pub class: PublishFailureClass,
}

impl SinkError {
    /// Whether a later try may succeed (throttling, timeouts, 408, 5xx, transport).
    pub fn retryable(&self) -> bool {
        self.class.retryable()
    }
}

/// Future returned by [`Sink::send`].
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<usize, SinkError>> + Send + 'a>>;

/// The one interface of metric sinks.
pub trait Sink: Send {
    /// Stable sink name for logs and evidence (`cloudwatch`, `emf`, `otlp`).
    fn name(&self) -> &'static str;
    /// The CloudWatch target it sends to, when a service named it (`None`: the default one,
    /// and every sink without targets).
    fn target(&self) -> Option<Arc<str>> {
        None
    }
    /// Send a batch; returns how many datums were sent (non-finite ones, and ones the
    /// destination would refuse as too old or too far ahead, are skipped).
    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a>;
    /// Tries per batch (first try included) the runner may make for a retryable error, within
    /// the batch's window. Default 1.
    fn max_tries(&self) -> u32 {
        1
    }
    /// Whether `e`, what the latest try met, is worth another try. Default: its class says
    /// ([`SinkError::retryable`]); a sink whose protocol says more (OTLP/HTTP's retryable
    /// statuses) decides apart from the class.
    fn retryable(&self, e: &SinkError) -> bool {
        e.retryable()
    }
    /// How long the destination asked to be left alone after the last failed send (an HTTP
    /// `Retry-After`), if it said so: no retry comes sooner, nor after the batch's window.
    /// Default: never said.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
    /// The batch in hand ended (sent, or given up): forget it; for a sent one, a line for its
    /// record (what a partial success said). Default: nothing.
    fn settle(&mut self) -> Option<String> {
        None
    }
    /// Why a send that the publish window cut short failed. Default: a timeout.
    fn cut_short(&self) -> SinkError {
        SinkError {
            message: "the publish window closed before the send finished".into(),
            class: PublishFailureClass::PublishTimeout,
        }
    }
}

/// Batches a sink's queue holds: a sink this far behind the publish rate drops the oldest...
pub const QUEUE_BATCHES: usize = 4;

/// ...unless all it holds are at most this many datums: a burst of transitions (a shared
/// dependency failing under hundreds of services, or their first evaluations at start) queues
/// hundreds of one-datum batches at once, and each must go out at once, not at the next tick.
pub const QUEUE_DATUMS: usize = 1_000;

/// A batch in a sink's queue.
#[derive(Debug)]
pub struct Queued {
    /// The batch id, unique within a run.
    pub id: u64,
    /// The datums.
    pub datums: Vec<Datum>,
    /// The end of the batch's window: no try starts after it, and a try still running is cut.
    pub deadline: Instant,
}

/// Which sink `sink` is: its name and target.
fn id_of(sink: &dyn Sink) -> SinkId {
    SinkId {
        kind: sink.name(),
        target: sink.target(),
    }
}

/// A batch dropped without a try.
fn untried(sink: SinkId, b: &Queued, outcome: PublishOutcome, why: &str) -> SinkReport {
    SinkReport {
        batch: b.id,
        sink,
        datums: b.datums.len(),
        sent: 0,
        tries: 0,
        outcome,
        class: None,
        error: Some(why.into()),
    }
}

/// Why the oldest batch left a full queue.
const QUEUE_FULL: &str = "sink queue full (the sink is slower than the publish rate): the oldest batch made way for a newer one";
/// Why a batch left the queue untried.
const EXPIRED: &str =
    "its publish window closed while it waited behind an outage: too old to send, never tried";

/// What a sink's queue and its task share.
#[derive(Debug, Default)]
struct QueueState {
    /// Oldest first.
    batches: VecDeque<Queued>,
    /// The datums of `batches`, in all.
    datums: usize,
    /// The sending end is gone: send what is left, then stop.
    senders_gone: bool,
    /// The task has ended: refuse every batch.
    task_gone: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<QueueState>,
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending end of one sink's task. Sending never blocks the caller: each sink works
/// through its own bounded queue, newest batch first (after an outage the current readiness
/// goes out before the backlog), retrying a failed send with jittered backoff within the
/// batch's window, and reports every batch it took or dropped. A full queue drops its oldest
/// batch; a batch whose window closed while it waited is dropped untried.
#[derive(Debug)]
pub struct SinkQueue {
    id: SinkId,
    shared: Arc<Shared>,
    reports: mpsc::UnboundedSender<SinkReport>,
    /// [`QUEUE_DATUMS`], unless set otherwise ([`Self::datum_room`]).
    datum_room: usize,
}

impl SinkQueue {
    /// Start `sink`'s task on `tracker`. It reports on `reports` until its queue closes (this
    /// value dropped, and what it held sent) or `cancel` fires; a batch in hand then goes
    /// unreported.
    pub fn spawn(
        sink: Box<dyn Sink>,
        reports: mpsc::UnboundedSender<SinkReport>,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> SinkQueue {
        let id = id_of(sink.as_ref());
        let shared = Arc::new(Shared::default());
        tracker.spawn(sink_task(sink, shared.clone(), reports.clone(), cancel));
        SinkQueue {
            id,
            shared,
            reports,
            datum_room: QUEUE_DATUMS,
        }
    }

    /// The same queue holding more than [`QUEUE_BATCHES`] batches only while they hold at most
    /// `datums` datums in all (0: never more than [`QUEUE_BATCHES`]).
    #[must_use]
    pub fn datum_room(mut self, datums: usize) -> Self {
        self.datum_room = datums;
        self
    }

    /// The sink's name.
    pub fn name(&self) -> &'static str {
        self.id.kind
    }

    /// The sink: its name and target.
    pub fn id(&self) -> &SinkId {
        &self.id
    }

    /// Queue a batch, or say why not. A full queue (more than [`QUEUE_BATCHES`] batches, and
    /// more datums than its room) makes room by dropping its oldest batches, each reported
    /// (`dropped_queue_full`) on the reports channel.
    ///
    /// # Errors
    /// The task has ended.
    pub fn offer(&self, batch: Queued) -> Result<(), Refusal> {
        let evicted = {
            let mut st = self.shared.lock();
            if st.task_gone {
                return Err(Refusal::Closed);
            }
            st.datums += batch.datums.len();
            st.batches.push_back(batch);
            let mut evicted = Vec::new();
            while st.batches.len() > QUEUE_BATCHES && st.datums > self.datum_room {
                let Some(old) = st.batches.pop_front() else {
                    break;
                };
                st.datums -= old.datums.len();
                evicted.push(old);
            }
            evicted
        };
        self.shared.wake.notify_one();
        for old in evicted {
            let report = untried(
                self.id.clone(),
                &old,
                PublishOutcome::DroppedQueueFull,
                QUEUE_FULL,
            );
            if self.reports.send(report).is_err() {
                return Err(Refusal::Closed);
            }
        }
        Ok(())
    }
}

impl Drop for SinkQueue {
    fn drop(&mut self) {
        self.shared.lock().senders_gone = true;
        self.shared.wake.notify_one();
    }
}

/// Longest error message a report carries, bytes: whatever a sink says, the evidence and the log
/// get one short line, never a dump.
pub const MAX_ERROR_BYTES: usize = 1024;

/// `s` on one line (whitespace runs collapsed to one space, every other control character
/// escaped: a peer's words cannot drive the terminal that shows the log), cut at
/// [`MAX_ERROR_BYTES`] on a character boundary with `…` (pure).
pub fn bounded_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = crate::config::escape_controls(&flat).into_owned();
    if flat.len() <= MAX_ERROR_BYTES {
        return flat;
    }
    let mut cut = MAX_ERROR_BYTES - '…'.len_utf8();
    while !flat.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &flat[..cut])
}

/// The longest pause between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// The pause before try `tries + 1`: exponential from a base of a tenth of the window
/// (50–500 ms), capped at [`MAX_BACKOFF`], with equal jitter (half fixed, half random) so
/// probers that failed together do not retry together.
fn backoff(window: Duration, tries: u32) -> Duration {
    let base = (window / 10).clamp(Duration::from_millis(50), Duration::from_millis(500));
    let full = base
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let half = full / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// Send one batch, retrying a retryable error with backoff within the batch's window.
async fn send_batch(sink: &mut dyn Sink, batch: &Queued) -> SinkReport {
    let window = batch.deadline.saturating_duration_since(Instant::now());
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = tokio::time::timeout_at(batch.deadline, sink.send(&batch.datums))
            .await
            .unwrap_or_else(|_| Err(sink.cut_short()));
        let e = match sent {
            Ok(sent) => {
                let note = sink.settle();
                return SinkReport {
                    batch: batch.id,
                    sink: id_of(sink),
                    datums: batch.datums.len(),
                    sent,
                    tries,
                    outcome: PublishOutcome::Sent,
                    class: None,
                    error: note.as_deref().map(bounded_line),
                };
            }
            Err(e) => e,
        };
        let pause = backoff(window, tries).max(sink.retry_after().unwrap_or_default());
        if sink.retryable(&e) && tries < sink.max_tries() && Instant::now() + pause < batch.deadline
        {
            tracing::debug!(sink = sink.name(), error = %bounded_line(&e.message), "publish failed, retrying");
            tokio::time::sleep(pause).await;
            continue;
        }
        sink.settle();
        return SinkReport {
            batch: batch.id,
            sink: id_of(sink),
            datums: batch.datums.len(),
            sent: 0,
            tries,
            outcome: PublishOutcome::Failed,
            class: Some(e.class),
            error: Some(bounded_line(&e.message)),
        };
    }
}

/// The next batch to work on: the newest, or `None` once the queue is closed and empty.
async fn next_batch(shared: &Shared) -> Option<Queued> {
    loop {
        let wake = shared.wake.notified();
        {
            let mut st = shared.lock();
            if let Some(b) = st.batches.pop_back() {
                st.datums -= b.datums.len();
                return Some(b);
            }
            if st.senders_gone {
                return None;
            }
        }
        wake.await;
    }
}

/// A sink's task: send each queued batch (newest first) and report it, until the queue closes
/// and is empty or `cancel` fires (a batch in hand then goes unreported).
async fn sink_task(
    mut sink: Box<dyn Sink>,
    shared: Arc<Shared>,
    reports: mpsc::UnboundedSender<SinkReport>,
    cancel: CancellationToken,
) {
    while let Some(Some(batch)) = cancel.run_until_cancelled(next_batch(&shared)).await {
        let report = if Instant::now() >= batch.deadline {
            untried(
                id_of(sink.as_ref()),
                &batch,
                PublishOutcome::Expired,
                EXPIRED,
            )
        } else {
            match cancel
                .run_until_cancelled(send_batch(sink.as_mut(), &batch))
                .await
            {
                Some(r) => r,
                None => break,
            }
        };
        if reports.send(report).is_err() {
            break;
        }
        drop(batch);
        release_freed_memory();
    }
    shared.lock().task_gone = true;
}

/// Give the heap's free pages back to the system after a batch. A tick of 10,000 branches builds
/// 70,000 datums (tens of MB) on one thread and frees them on another; glibc's arenas kept what
/// each tick freed, and RSS rose by about 45 MB at each of the first ticks (benchmark).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod queue_tests {
    //! The queue and its task under tokio's paused clock: exact call counts, call times and
    //! delivery order, whatever the machine's load.

    use super::*;
    use crate::readiness::Millis;
    use std::sync::Mutex as StdMutex;

    /// Each call: when (ms since the test's start) and its datums' timestamps.
    type Calls = Arc<StdMutex<Vec<(u64, Vec<Millis>)>>>;

    /// What the scripted sink does with a call.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        Ok,
        Fail(PublishFailureClass),
        /// Never answers.
        Hang,
        /// Fails with a 25 KB multi-line message.
        Dump,
    }

    /// A sink whose answer is decided by a script from the call's number and start time; it
    /// logs each call (ms since the test's start, datum timestamps).
    struct Scripted {
        t0: Instant,
        tries: u32,
        script: Box<dyn Fn(usize, u64) -> Answer + Send>,
        calls: Calls,
    }

    impl Sink for Scripted {
        fn name(&self) -> &'static str {
            "cloudwatch"
        }
        fn max_tries(&self) -> u32 {
            self.tries
        }
        fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a> {
            let at = self.t0.elapsed().as_millis() as u64;
            let mut calls = self.calls.lock().unwrap();
            let answer = (self.script)(calls.len(), at);
            calls.push((at, datums.iter().map(|d| d.timestamp).collect()));
            Box::pin(async move {
                match answer {
                    Answer::Ok => Ok(datums.len()),
                    Answer::Fail(class) => Err(SinkError {
                        message: class.as_str().into(),
                        class,
                    }),
                    Answer::Hang => std::future::pending().await,
                    Answer::Dump => Err(SinkError {
                        message: "Error {\n  kind: Other,\n}\n".repeat(1000),
                        class: PublishFailureClass::PublishRejected,
                    }),
                }
            })
        }
    }

    struct Rig {
        t0: Instant,
        queue: Option<SinkQueue>,
        reports: mpsc::UnboundedReceiver<SinkReport>,
        calls: Calls,
        tracker: TaskTracker,
    }

    fn rig(tries: u32, script: impl Fn(usize, u64) -> Answer + Send + 'static) -> Rig {
        let t0 = Instant::now();
        let calls = Arc::default();
        let (tx, reports) = mpsc::unbounded_channel();
        let tracker = TaskTracker::new();
        let sink = Scripted {
            t0,
            tries,
            script: Box::new(script),
            calls: Arc::clone(&calls),
        };
        // One-datum batches: the batch count alone decides when the queue is full.
        let queue =
            SinkQueue::spawn(Box::new(sink), tx, &tracker, CancellationToken::new()).datum_room(0);
        tracker.close();
        Rig {
            t0,
            queue: Some(queue),
            reports,
            calls,
            tracker,
        }
    }

    impl Rig {
        /// Offer batch `id` (one datum stamped `id`) at `at_ms`, its window `window_ms` long.
        async fn offer(&self, id: u64, at_ms: u64, window_ms: u64) {
            tokio::time::sleep_until(self.t0 + Duration::from_millis(at_ms)).await;
            let q = Queued {
                id,
                datums: vec![transition_datum("s", "primary", 1.0, id as Millis)],
                deadline: Instant::now() + Duration::from_millis(window_ms),
            };
            self.queue.as_ref().unwrap().offer(q).unwrap();
        }

        /// Close the queue, wait for the task, and return every report (batch, outcome, class,
        /// tries) and every call (ms, datum timestamps).
        async fn finish(mut self) -> (Vec<Report>, Vec<(u64, Vec<Millis>)>) {
            drop(self.queue.take());
            self.tracker.wait().await;
            let mut out = Vec::new();
            while let Ok(r) = self.reports.try_recv() {
                out.push((r.batch, r.outcome, r.class, r.tries));
            }
            let calls = self.calls.lock().unwrap().clone();
            (out, calls)
        }
    }

    /// A burst of one-datum batches (a transition each) behind a hung send is kept whole; once
    /// the queue holds more than its datum room and more than QUEUE_BATCHES batches, the oldest
    /// make way.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_transitions_is_kept_within_the_datum_room() {
        let mut r = rig(1, |n, _| if n == 0 { Answer::Hang } else { Answer::Ok });
        let q = r.queue.take().unwrap().datum_room(QUEUE_DATUMS);
        let deadline = Instant::now() + Duration::from_secs(60);
        let one = |id: u64| Queued {
            id,
            datums: vec![transition_datum("s", "primary", 1.0, id as Millis)],
            deadline,
        };
        let mut first = one(1);
        first.deadline = Instant::now() + Duration::from_millis(500);
        q.offer(first).unwrap(); // taken at once; hangs until its window ends
        tokio::time::sleep(Duration::from_millis(10)).await;
        for id in 2..=801 {
            q.offer(one(id)).unwrap();
        }
        // Two batches of 400 datums: 1,600 in all, over the room: the oldest go until it fits.
        for id in [900, 901] {
            let mut b = one(id);
            b.datums = vec![transition_datum("s", "primary", 0.0, 0); 400];
            q.offer(b).unwrap();
        }
        r.queue = Some(q);
        let (reports, _) = r.finish().await;
        let dropped: Vec<u64> = reports
            .iter()
            .filter(|r| r.1 == O::DroppedQueueFull)
            .map(|r| r.0)
            .collect();
        assert_eq!(dropped, (2..=601).collect::<Vec<u64>>());
        let sent = reports.iter().filter(|r| r.1 == O::Sent).count();
        assert_eq!(sent, 202, "{:?}", &reports[..5]);
    }

    type Report = (u64, PublishOutcome, Option<PublishFailureClass>, u32);
    use PublishFailureClass as C;
    use PublishOutcome as O;

    /// A hang behind which five batches pile up: the oldest waiting one makes way (counted),
    /// the hung try is cut at its window's end, then the newest goes first, and one whose
    /// window closed while it waited is dropped untried, never sent.
    #[tokio::test(start_paused = true)]
    async fn after_a_hang_the_newest_goes_first_and_the_expired_are_dropped() {
        // Calls started before 8 s hang; later ones succeed.
        let r = rig(
            3,
            |_, at| if at < 8_000 { Answer::Hang } else { Answer::Ok },
        );
        r.offer(1, 0, 10_000).await; // taken at once; hangs until 10 s
        r.offer(2, 1_000, 10_000).await;
        r.offer(3, 2_000, 7_000).await; // window ends at 9 s
        r.offer(4, 3_000, 10_000).await;
        r.offer(5, 4_000, 10_000).await;
        r.offer(6, 5_000, 10_000).await; // queue full: 2 makes way
        tokio::time::sleep_until(r.t0 + Duration::from_secs(20)).await;
        let (reports, calls) = r.finish().await;
        assert_eq!(
            reports,
            [
                (2, O::DroppedQueueFull, None, 0),
                (1, O::Failed, Some(C::PublishTimeout), 1),
                (6, O::Sent, None, 1),
                (5, O::Sent, None, 1),
                (4, O::Sent, None, 1),
                (3, O::Expired, None, 0),
            ]
        );
        assert_eq!(
            calls,
            [
                (0, vec![1]),
                (10_000, vec![6]),
                (10_000, vec![5]),
                (10_000, vec![4])
            ]
        );
    }

    /// Retryable failures are retried up to `max_tries` with jittered, growing pauses (window
    /// 10 s: base 500 ms, pauses in [250, 500] then [500, 1000] ms); a non-retryable one is
    /// tried once; no retry whose pause would end after the window (20 ms: the pause is at
    /// least 25 ms).
    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_jittered_and_inside_the_window() {
        let r = rig(3, |n, _| match n {
            0..=1 => Answer::Fail(C::PublishThrottled), // batch 1: two throttles, then sent
            2 => Answer::Ok,
            3..=5 => Answer::Fail(C::Publish5xx), // batch 2: three 5xx: failed
            6 => Answer::Fail(C::PublishCredentials), // batch 3: not retryable
            _ => Answer::Fail(C::PublishHttp408), // batch 4: window too short to retry
        });
        r.offer(1, 0, 10_000).await;
        r.offer(2, 20_000, 10_000).await;
        r.offer(3, 40_000, 10_000).await;
        r.offer(4, 60_000, 20).await;
        tokio::time::sleep_until(r.t0 + Duration::from_secs(80)).await;
        let (reports, calls) = r.finish().await;
        assert_eq!(
            reports,
            [
                (1, O::Sent, None, 3),
                (2, O::Failed, Some(C::Publish5xx), 3),
                (3, O::Failed, Some(C::PublishCredentials), 1),
                (4, O::Failed, Some(C::PublishHttp408), 1),
            ]
        );
        let at: Vec<u64> = calls.iter().map(|c| c.0).collect();
        assert_eq!(at.len(), 8, "{at:?}");
        for start in [0, 3] {
            let (p1, p2) = (at[start + 1] - at[start], at[start + 2] - at[start + 1]);
            assert!((250..=500).contains(&p1), "first pause {p1} ms: {at:?}");
            assert!((500..=1000).contains(&p2), "second pause {p2} ms: {at:?}");
        }
        assert_eq!(&at[6..], [40_000, 60_000]);
    }

    /// A 15 KB multi-line message becomes one line of at most 1 KiB.
    #[test]
    fn error_messages_are_one_bounded_line() {
        let dump = "Error {\n    kind: Io,\n    source: \"é\",\n}\n".repeat(400);
        assert!(dump.len() > 15_000);
        let got = bounded_line(&dump);
        assert!(
            got.len() <= MAX_ERROR_BYTES && !got.contains('\n'),
            "{}",
            got.len()
        );
        assert!(got.starts_with("Error { kind: Io, source: \"é\", }") && got.ends_with('…'));
        assert_eq!(bounded_line(" a\n\tb "), "a b");
    }

    /// A collector's or service's words reach the text log: control characters in them are
    /// escaped, so they cannot recolour, retitle or erase what an operator's terminal shows (a
    /// collector answered `\x1b[31m`, `\x1b]0;title\x07`, backspaces over the class).
    #[test]
    fn error_messages_carry_no_control_character() {
        let said = "answered 400: \x1b[31mRED\x1b]0;t\x07 \x08\x08ok\x00\u{202e}x";
        let got = bounded_line(said);
        assert_eq!(
            got,
            "answered 400: \\u{1b}[31mRED\\u{1b}]0;t\\u{7} \\u{8}\\u{8}ok\\0\\u{202e}x"
        );
        assert!(!got.chars().any(char::is_control), "{got:?}");
        // Escaping happens before the cut: the line stays within the bound.
        let long = "\x1b".repeat(2 * MAX_ERROR_BYTES);
        assert!(bounded_line(&long).len() <= MAX_ERROR_BYTES);
    }

    /// Whatever a sink says, its report carries one line of at most 1 KiB.
    #[tokio::test(start_paused = true)]
    async fn a_sinks_dump_is_reported_as_one_bounded_line() {
        let mut r = rig(1, |_, _| Answer::Dump);
        r.offer(1, 0, 10_000).await;
        let rep = r.reports.recv().await.unwrap();
        let e = rep.error.unwrap();
        assert!(
            e.len() <= MAX_ERROR_BYTES && !e.contains('\n'),
            "{}",
            e.len()
        );
    }

    /// The pauses are jittered: over many draws they spread across their range.
    #[test]
    fn backoff_is_jittered_within_its_bounds() {
        let draws: Vec<Duration> = (0..200)
            .map(|_| backoff(Duration::from_secs(10), 1))
            .collect();
        let (lo, hi) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*lo >= Duration::from_millis(250) && *hi <= Duration::from_millis(500));
        assert!(*hi - *lo > Duration::from_millis(100), "{lo:?}..{hi:?}");
        assert_eq!(
            backoff(Duration::from_secs(600), 10).max(MAX_BACKOFF),
            MAX_BACKOFF
        );
    }

    /// A queue whose task ended refuses batches as closed.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_task_refuses() {
        let (tx, _reports) = mpsc::unbounded_channel();
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let sink = Scripted {
            t0: Instant::now(),
            tries: 1,
            script: Box::new(|_, _| Answer::Ok),
            calls: Arc::default(),
        };
        let q = SinkQueue::spawn(Box::new(sink), tx, &tracker, cancel.clone());
        tracker.close();
        cancel.cancel();
        tracker.wait().await;
        let b = Queued {
            id: 1,
            datums: vec![],
            deadline: Instant::now() + Duration::from_secs(1),
        };
        assert_eq!(q.offer(b), Err(Refusal::Closed));
    }
}
