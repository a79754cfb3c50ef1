//! The step context every step and kind runs with: the branch, the resolver, the attempt's marker
//! and deadline, the TLS client configuration, the recorder of steps, and what the attempt has
//! learned so far. A step or kind takes `&mut StepCtx` and returns its value or a [`StepFailure`].

use super::attempt::{Learned, StepRecord};
use super::target::{BranchProbe, Redactor};
use crate::clock::Clock;
use crate::config::StepTimeouts;
use crate::failure::{FailureClass, Step};
use hickory_resolver::TokioResolver;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A step failed: its class and a human message. The message may quote what the target sent;
/// [`Steps`] removes every configured secret from it before it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    pub class: FailureClass,
    pub message: String,
}

/// The step that failed and why: what every step and kind returns on failure.
pub type StepFailure = (Step, StepError);

/// The deadline of one attempt and the per-step timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    /// When the whole attempt must be over.
    pub end: Instant,
    pub step_timeouts: StepTimeouts,
}

impl Deadline {
    /// The time allowed for `step`: its own timeout, capped by what is left of the attempt.
    pub fn step(&self, step: Step) -> StepBudget {
        let own = match step {
            Step::Resolve => self.step_timeouts.resolve,
            Step::Connect => self.step_timeouts.connect,
            Step::Tls => self.step_timeouts.tls,
            Step::Auth => self.step_timeouts.auth,
            Step::Write => self.step_timeouts.write,
            Step::Verify => self.step_timeouts.verify,
        };
        let left = self.left();
        StepBudget {
            limit: own.min(left),
            attempt_bound: left <= own,
        }
    }

    /// What is left of the attempt now (zero once it is over).
    pub fn left(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }
}

/// Time allowed for one step.
#[derive(Debug, Clone, Copy)]
pub struct StepBudget {
    pub limit: Duration,
    /// True when the attempt deadline, not the step's own timeout, sets the limit.
    pub attempt_bound: bool,
}

/// Runs steps under the attempt's deadline and records their outcomes in order.
#[derive(Debug)]
pub struct Steps {
    pub deadline: Deadline,
    /// Records so far, in execution order.
    pub records: Vec<StepRecord>,
    /// Removes the configured secrets from every failure message.
    pub redactor: Redactor,
}

/// Longest failure message kept, bytes: messages go into every evidence record.
const MAX_MESSAGE: usize = 1024;

impl Steps {
    pub fn new(deadline: Deadline) -> Self {
        Steps {
            deadline,
            records: Vec::new(),
            redactor: Redactor::default(),
        }
    }

    /// These steps, removing `redactor`'s secrets from every failure message.
    pub fn redacting(self, redactor: Redactor) -> Self {
        Steps { redactor, ..self }
    }

    /// A failure message with the secrets removed (before any truncation, so no part of a
    /// secret survives at the cut) and at most [`MAX_MESSAGE`] bytes.
    fn clean(&self, message: &mut String) {
        self.redactor.redact_in_place(message);
        if message.len() > MAX_MESSAGE {
            message.truncate(message.floor_char_boundary(MAX_MESSAGE));
            message.push('…');
        }
    }

    /// Run one step under its budget and record it.
    ///
    /// # Errors
    /// The step's own error, or on timeout (its own or the attempt's): `dns_timeout` for
    /// `resolve`, `tcp_timeout` for `connect`, `deadline_exceeded` for every later step.
    pub async fn run<T, F>(&mut self, step: Step, f: F) -> Result<T, StepFailure>
    where
        F: Future<Output = Result<T, StepError>>,
    {
        let budget = self.deadline.step(step);
        let start = Instant::now();
        let r = match tokio::time::timeout(budget.limit, f).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(step, budget)),
        };
        let r = r.map_err(|mut e| {
            self.clean(&mut e.message);
            e
        });
        self.records.push(StepRecord {
            step,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            ok: r.is_ok(),
            class: r.as_ref().err().map(|e| e.class),
        });
        r.map_err(|e| (step, e))
    }

    /// Fail the last recorded step: a check after the step's I/O found a problem. Returns the
    /// failure to hand back.
    pub fn fail_last(
        &mut self,
        step: Step,
        class: FailureClass,
        mut message: String,
    ) -> StepFailure {
        self.clean(&mut message);
        if let Some(last) = self.records.last_mut() {
            last.ok = false;
            last.class = Some(class);
        }
        (step, StepError { class, message })
    }
}

fn timed_out(step: Step, budget: StepBudget) -> StepError {
    StepError {
        // No answer from the nameservers, or no TCP handshake, in the time there was: the peer's
        // failure, whichever deadline cut it. Later steps report the deadline.
        class: match step {
            Step::Resolve => FailureClass::DnsTimeout,
            Step::Connect => FailureClass::TcpTimeout,
            _ => FailureClass::DeadlineExceeded,
        },
        message: format!(
            "{step} did not finish within {} ms ({})",
            budget.limit.as_millis(),
            if budget.attempt_bound {
                "attempt deadline"
            } else {
                "step timeout"
            }
        ),
    }
}

/// Everything a step or kind needs for one attempt.
pub struct StepCtx<'a> {
    pub probe: &'a BranchProbe,
    pub resolver: &'a TokioResolver,
    pub clock: &'a Clock,
    /// Per-branch sequence number of this attempt, from 1.
    pub seq: u64,
    /// This attempt's fresh marker (32 hex chars).
    pub marker: String,
    /// The kind's TLS client configuration; `None` when TLS is off.
    pub tls: Option<&'a Arc<rustls::ClientConfig>>,
    pub steps: Steps,
    pub learned: Learned,
}

impl<'a> StepCtx<'a> {
    /// A context for attempt `seq` whose deadline starts now.
    pub fn new(
        probe: &'a BranchProbe,
        resolver: &'a TokioResolver,
        clock: &'a Clock,
        seq: u64,
    ) -> Self {
        let deadline = Deadline {
            end: Instant::now() + probe.timeout,
            step_timeouts: probe.step_timeouts,
        };
        StepCtx {
            probe,
            resolver,
            clock,
            seq,
            marker: new_marker(),
            tls: probe.target.tls(),
            steps: Steps::new(deadline).redacting(probe.redactor.clone()),
            learned: Learned::default(),
        }
    }

    /// The branch's endpoint name (what TLS certificates are checked against).
    pub fn endpoint(&self) -> &'a str {
        &self.probe.branch.endpoint
    }
}

/// A fresh 128-bit random marker as 32 lowercase hex characters.
pub fn new_marker() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret that straddles the 1 KiB cut is redacted whole before the message is cut.
    #[tokio::test]
    async fn a_message_is_redacted_before_it_is_cut() {
        let secret = "S3cr3t-at-the-cut";
        let second = Duration::from_secs(1);
        let deadline = Deadline {
            end: Instant::now() + second,
            step_timeouts: StepTimeouts {
                resolve: second,
                connect: second,
                tls: second,
                auth: second,
                write: second,
                verify: second,
            },
        };
        let mut steps = Steps::new(deadline).redacting(Redactor::new([secret]));
        let message = format!("{}{secret} and again {secret}", "x".repeat(MAX_MESSAGE - 6));
        let failing = async {
            Err::<(), _>(StepError {
                class: FailureClass::HttpWrongBranch,
                message: message.clone(),
            })
        };
        let (_, e) = steps.run(Step::Write, failing).await.unwrap_err();
        assert!(!e.message.contains("S3cr"), "{}", e.message);
        assert!(
            e.message.ends_with("x<redac…"),
            "cut inside the marker: {}",
            e.message
        );
        let (_, e) = steps.fail_last(Step::Verify, FailureClass::VerifyMismatch, message);
        assert!(!e.message.contains("S3cr"), "{}", e.message);
    }
}
