//! Metric sinks: the metric contract as data ([`Datum`]), the pure builder of one publish tick,
//! and the one interface every sink implements ([`Sink`]).
//!
//! Sinks never decide readiness; they encode and send what the runner hands them. Encoders are
//! pure and tested against exact expected output; sending is separate: each sink runs in a task
//! of its own behind a bounded queue ([`SinkQueue`]).

pub mod cloudwatch;
pub mod emf;
pub mod evidence;

use crate::readiness::Millis;
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// CloudWatch unit of a datum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// `None`.
    None,
    /// `Percent`.
    Percent,
    /// `Count`.
    Count,
    /// `Milliseconds`.
    Milliseconds,
}

impl Unit {
    /// CloudWatch spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::None => "None",
            Unit::Percent => "Percent",
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// A datum's value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Value {
    /// One value.
    Single(f64),
    /// Raw samples, sent to CloudWatch as a statistic set (count, sum, min, max) and to EMF as
    /// an array.
    Samples(Vec<f64>),
}

/// One metric datum of the contract (README.md, "Metric contract").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Datum {
    /// Metric name, e.g. `Readiness`.
    pub metric: &'static str,
    /// Dimensions in contract order, e.g. `[("Service", "orders-db"), ("Branch", "primary")]`.
    pub dimensions: Vec<(&'static str, String)>,
    /// The value.
    pub value: Value,
    /// Unit.
    pub unit: Unit,
    /// Observation time, ms since the epoch.
    pub timestamp: Millis,
}

impl Datum {
    /// True when every number in it is finite (CloudWatch rejects NaN and ±Inf; emulators accept
    /// them, so we check on our side).
    pub fn is_finite(&self) -> bool {
        match &self.value {
            Value::Single(v) => v.is_finite(),
            Value::Samples(s) => !s.is_empty() && s.iter().all(|v| v.is_finite()),
        }
    }
}

/// Per-branch input of one publish tick.
#[derive(Debug, Clone, Default)]
pub struct BranchTick {
    /// Branch name.
    pub branch: String,
    /// Published readiness value: `Some(1.0)`, `Some(0.0)`, or `None` (unknown: no datum).
    pub readiness: Option<f64>,
    /// True when the state is `ready` (computed or forced).
    pub is_ready: bool,
    /// True when the state is known (not `unknown`).
    pub is_known: bool,
    /// Success rate of the unready window, percent; `None` when no attempt finished in it.
    pub success_rate: Option<f64>,
    /// Attempts finished since the previous tick.
    pub attempts: u64,
    /// Of which failed.
    pub failed: u64,
    /// Step durations since the previous tick, ms, per step name.
    pub step_durations: Vec<(&'static str, Vec<f64>)>,
    /// `notAfter` of the server's leaf certificate as last seen by the `tls` step, ms since the
    /// epoch; `None` where TLS is not used (no `CertificateExpiryDays` datum then).
    pub cert_not_after: Option<Millis>,
}

/// Build the datums of one publish tick (pure).
pub fn tick_datums(service: &str, branches: &[BranchTick], now: Millis) -> Vec<Datum> {
    let mut out = Vec::new();
    let sb = |b: &str| vec![("Service", service.to_string()), ("Branch", b.to_string())];
    for b in branches {
        if let Some(v) = b.readiness {
            out.push(Datum {
                metric: "Readiness",
                dimensions: sb(&b.branch),
                value: Value::Single(v),
                unit: Unit::None,
                timestamp: now,
            });
        }
        if let Some(r) = b.success_rate {
            out.push(Datum {
                metric: "SuccessRate",
                dimensions: sb(&b.branch),
                value: Value::Single(r),
                unit: Unit::Percent,
                timestamp: now,
            });
        }
        out.push(Datum {
            metric: "Attempts",
            dimensions: sb(&b.branch),
            value: Value::Single(b.attempts as f64),
            unit: Unit::Count,
            timestamp: now,
        });
        out.push(Datum {
            metric: "FailedAttempts",
            dimensions: sb(&b.branch),
            value: Value::Single(b.failed as f64),
            unit: Unit::Count,
            timestamp: now,
        });
        if let Some(na) = b.cert_not_after {
            out.push(Datum {
                metric: "CertificateExpiryDays",
                dimensions: sb(&b.branch),
                // Fractional days; negative once expired.
                value: Value::Single((na - now) as f64 / 86_400_000.0),
                unit: Unit::None,
                timestamp: now,
            });
        }
        for (step, samples) in &b.step_durations {
            if samples.is_empty() {
                continue;
            }
            let mut dims = sb(&b.branch);
            dims.push(("Step", step.to_string()));
            out.push(Datum {
                metric: "StepDuration",
                dimensions: dims,
                value: Value::Samples(samples.clone()),
                unit: Unit::Milliseconds,
                timestamp: now,
            });
        }
    }
    out.push(Datum {
        metric: "Heartbeat",
        dimensions: vec![("Service", service.to_string())],
        value: Value::Single(1.0),
        unit: Unit::Count,
        timestamp: now,
    });
    // Fail-open signal: 1 when every branch is known and none is ready; 0 when one is ready;
    // no datum while a branch is still unknown and none is ready.
    let any_ready = branches.iter().any(|b| b.is_ready);
    let all_known = branches.iter().all(|b| b.is_known);
    if any_ready || all_known {
        out.push(Datum {
            metric: "BothBranchesUnready",
            dimensions: vec![("Service", service.to_string())],
            value: Value::Single(if any_ready { 0.0 } else { 1.0 }),
            unit: Unit::None,
            timestamp: now,
        });
    }
    out
}

/// The `Readiness` datum sent at once on a transition.
pub fn transition_datum(service: &str, branch: &str, value: f64, now: Millis) -> Datum {
    Datum {
        metric: "Readiness",
        dimensions: vec![
            ("Service", service.to_string()),
            ("Branch", branch.to_string()),
        ],
        value: Value::Single(value),
        unit: Unit::None,
        timestamp: now,
    }
}

/// A send failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SinkError {
    /// What happened (no credentials).
    pub message: String,
    /// Whether a later try may succeed (throttling, timeouts, 5xx).
    pub retryable: bool,
}

/// Future returned by [`Sink::send`].
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<usize, SinkError>> + Send + 'a>>;

/// The one interface of metric sinks.
pub trait Sink: Send {
    /// Stable sink name for logs and evidence (`cloudwatch`, `emf`).
    fn name(&self) -> &'static str;
    /// Send a batch; returns how many datums were sent (non-finite ones are skipped).
    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a>;
    /// Tries per batch (first try included) the runner may make for a retryable error, within
    /// the batch's window. Default 1.
    fn max_tries(&self) -> u32 {
        1
    }
}

/// Batches a sink's queue holds: a sink this far behind the publish rate drops the next one.
const QUEUE_BATCHES: usize = 4;

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

/// A sink's account of one batch it took from its queue.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkReport {
    /// [`Queued::id`].
    pub batch: u64,
    /// Sink name.
    pub sink: &'static str,
    /// Datums in the batch.
    pub datums: usize,
    /// Datums sent (non-finite ones are skipped).
    pub sent: usize,
    /// Tries made, the first included.
    pub tries: u32,
    /// Why the batch was dropped; `None` when it was sent.
    pub error: Option<String>,
}

/// Why a sink's queue refused a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The queue was full: the sink is slower than the publish rate.
    Full,
    /// The sink's task has ended.
    Closed,
}

impl Refusal {
    /// The cause, in a phrase.
    pub fn why(self) -> &'static str {
        match self {
            Refusal::Full => "sink queue full (the sink is slower than the publish rate)",
            Refusal::Closed => "sink stopped",
        }
    }
}

/// The sending end of one sink's task. Sending never blocks the caller: each sink works
/// through its own bounded queue, retrying a failed send with backoff within the batch's window,
/// and reports every batch it took.
#[derive(Debug)]
pub struct SinkQueue {
    name: &'static str,
    tx: mpsc::Sender<Queued>,
}

impl SinkQueue {
    /// Start `sink`'s task on `tracker`. It reports on `reports` until its queue closes (this
    /// value dropped) or `cancel` fires; a batch in hand then goes unreported.
    pub fn spawn(
        sink: Box<dyn Sink>,
        reports: mpsc::UnboundedSender<SinkReport>,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> SinkQueue {
        let name = sink.name();
        let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
        tracker.spawn(sink_task(sink, rx, reports, cancel));
        SinkQueue { name, tx }
    }

    /// The sink's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Queue a batch, or say why not.
    ///
    /// # Errors
    /// The queue is full, or the task has ended.
    pub fn offer(&self, batch: Queued) -> Result<(), Refusal> {
        self.tx.try_send(batch).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refusal::Full,
            mpsc::error::TrySendError::Closed(_) => Refusal::Closed,
        })
    }
}

/// Send one batch, retrying a retryable error with backoff within the batch's window.
async fn send_batch(sink: &mut dyn Sink, batch: &Queued) -> SinkReport {
    let window = batch.deadline.saturating_duration_since(Instant::now());
    let mut backoff = (window / 10).clamp(Duration::from_millis(50), Duration::from_millis(500));
    let mut tries = 0;
    loop {
        tries += 1;
        let remaining = batch.deadline.saturating_duration_since(Instant::now());
        let sent = tokio::time::timeout(
            remaining.max(Duration::from_millis(1)),
            sink.send(&batch.datums),
        )
        .await
        .unwrap_or_else(|_| {
            Err(SinkError {
                message: "the publish window closed before the send finished".into(),
                retryable: false,
            })
        });
        let (sent, error) = match sent {
            Ok(sent) => (sent, None),
            Err(e)
                if e.retryable
                    && tries < sink.max_tries()
                    && Instant::now() + backoff < batch.deadline =>
            {
                tracing::debug!(sink = sink.name(), error = %e, "publish failed, retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(8));
                continue;
            }
            Err(e) => (0, Some(e.message)),
        };
        return SinkReport {
            batch: batch.id,
            sink: sink.name(),
            datums: batch.datums.len(),
            sent,
            tries,
            error,
        };
    }
}

/// A sink's task: send each queued batch and report it, until the queue closes or `cancel`
/// fires (a batch in hand then goes unreported).
async fn sink_task(
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Queued>,
    reports: mpsc::UnboundedSender<SinkReport>,
    cancel: CancellationToken,
) {
    while let Some(Some(batch)) = cancel.run_until_cancelled(rx.recv()).await {
        let Some(report) = cancel
            .run_until_cancelled(send_batch(sink.as_mut(), &batch))
            .await
        else {
            return;
        };
        if reports.send(report).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_contract() {
        let b = BranchTick {
            branch: "primary".into(),
            readiness: Some(1.0),
            is_ready: true,
            is_known: true,
            success_rate: Some(100.0),
            attempts: 30,
            failed: 0,
            step_durations: vec![("resolve", vec![1.0, 2.0]), ("write", vec![])],
            cert_not_after: Some(1000 + 86_400_000 * 3 / 2),
        };
        let d = tick_datums("orders-db", &[b], 1000);
        let names: Vec<_> = d.iter().map(|d| d.metric).collect();
        assert_eq!(
            names,
            [
                "Readiness",
                "SuccessRate",
                "Attempts",
                "FailedAttempts",
                "CertificateExpiryDays",
                "StepDuration",
                "Heartbeat",
                "BothBranchesUnready"
            ]
        );
        assert_eq!(d[4].value, Value::Single(1.5));
        assert_eq!(d[5].dimensions[2], ("Step", "resolve".to_string()));
        assert_eq!(d[7].value, Value::Single(0.0));
    }

    #[test]
    fn unknown_publishes_no_readiness_and_no_fail_open() {
        let b = BranchTick {
            branch: "primary".into(),
            ..Default::default()
        };
        let d = tick_datums("s", &[b], 0);
        assert!(!d.iter().any(|d| d.metric == "Readiness"));
        assert!(!d.iter().any(|d| d.metric == "BothBranchesUnready"));
    }

    #[test]
    fn all_unready_is_fail_open() {
        let mk = |n: &str| BranchTick {
            branch: n.into(),
            readiness: Some(0.0),
            is_known: true,
            ..Default::default()
        };
        let d = tick_datums("s", &[mk("a"), mk("b")], 0);
        let f = d
            .iter()
            .find(|d| d.metric == "BothBranchesUnready")
            .unwrap();
        assert_eq!(f.value, Value::Single(1.0));
    }
}
