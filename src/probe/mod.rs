//! Probes: one attempt against one branch, step by step, ending in an [`Attempt`] record.
//!
//! A probe never publishes and never decides readiness: it measures and returns data. Each step
//! lives in its own file (`resolve`, `connect`, `tls`) and each probe kind in its own file
//! (`mysql`); [`run_attempt`] dispatches on the kind. Every step runs under the smaller of its own
//! timeout and what is left of the attempt deadline.

pub mod connect;
pub mod http;
pub mod mysql;
pub mod otlp;
mod prepare;
pub mod resolve;
pub mod tcp;
pub mod tls;

pub use prepare::{PrepareError, PrepareProblem, prepare};

use crate::clock::{Clock, rfc3339};
use crate::config::{Branch, StepTimeouts};
use crate::failure::{FailureClass, Step};
use crate::readiness::{AttemptRecord, Millis};
use hickory_resolver::TokioResolver;
use serde::Serialize;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// A step failed: its class and a human message (never containing secrets).
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    /// The failure class.
    pub class: FailureClass,
    /// What happened.
    pub message: String,
}

/// One step's outcome inside an attempt.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    /// The step.
    pub step: Step,
    /// Wall time the step took, in ms.
    pub duration_ms: f64,
    /// Whether it succeeded.
    pub ok: bool,
    /// Its failure class when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<FailureClass>,
}

/// The deadline of one attempt and the per-step timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    /// When the whole attempt must be over.
    pub end: Instant,
    /// Per-step limits.
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
        let left = self.end.saturating_duration_since(Instant::now());
        StepBudget {
            limit: own.min(left),
            attempt_bound: left <= own,
        }
    }
}

/// Time allowed for one step.
#[derive(Debug, Clone, Copy)]
pub struct StepBudget {
    /// The limit.
    pub limit: Duration,
    /// True when the attempt deadline, not the step's own timeout, sets the limit.
    pub attempt_bound: bool,
}

/// Runs steps and records their outcomes in order.
#[derive(Debug, Default)]
pub struct Steps {
    /// Records so far.
    pub records: Vec<StepRecord>,
}

impl Steps {
    /// Run one step under its budget and record it.
    ///
    /// # Errors
    /// The step's own error, or on timeout (its own or the attempt's): `dns_timeout` for
    /// `resolve`, `tcp_timeout` for `connect`, `deadline_exceeded` for every later step.
    pub async fn run<T, F>(&mut self, step: Step, budget: StepBudget, f: F) -> Result<T, StepError>
    where
        F: Future<Output = Result<T, StepError>>,
    {
        let start = Instant::now();
        let r = match tokio::time::timeout(budget.limit, f).await {
            Ok(r) => r,
            Err(_) => Err(StepError {
                // No answer from the nameservers, or no TCP handshake, in the time there was: the
                // peer's failure, whichever deadline cut it. Later steps report the deadline.
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
            }),
        };
        // Messages go into every evidence record: keep them to a readable size.
        let r = r.map_err(|mut e| {
            if e.message.len() > 1024 {
                e.message.truncate(e.message.floor_char_boundary(1024));
                e.message.push('…');
            }
            e
        });
        self.records.push(StepRecord {
            step,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            ok: r.is_ok(),
            class: r.as_ref().err().map(|e| e.class),
        });
        r
    }

    /// Mark the last recorded step failed (a check after the step's I/O failed).
    pub fn fail_last(&mut self, class: FailureClass) {
        if let Some(last) = self.records.last_mut() {
            last.ok = false;
            last.class = Some(class);
        }
    }
}

/// Response code and authoritative flag of the DNS answer an attempt used.
#[derive(Debug, Clone, Serialize)]
pub struct DnsMeta {
    /// Response code, e.g. `NoError`.
    pub rcode: String,
    /// Authoritative answer flag.
    pub authoritative: bool,
}

/// The outcome of an attempt.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    /// Every step succeeded.
    Success,
    /// A step failed.
    Failure {
        /// The failing step.
        step: Step,
        /// Its class.
        class: FailureClass,
        /// What happened.
        message: String,
    },
}

/// One finished attempt: the unit of evidence and of the success rate.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// Branch name.
    pub branch: String,
    /// Per-branch sequence number, from 1.
    pub seq: u64,
    /// Fresh random marker written by this attempt (32 hex chars).
    pub marker: String,
    /// Start, ms since the epoch.
    pub started_at: Millis,
    /// End, ms since the epoch.
    pub finished_at: Millis,
    /// Steps in order, with durations.
    pub steps: Vec<StepRecord>,
    /// DNS answer chain.
    pub answers: Vec<resolve::Answer>,
    /// Response code and authoritative flag of the DNS answer used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsMeta>,
    /// The address connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// TLS session facts (after a completed handshake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<tls::TlsInfo>,
    /// `notAfter` (ms since the epoch) of the server's leaf certificate as presented in this
    /// attempt, whether or not it verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_not_after: Option<Millis>,
    /// Server identity from `verify`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<mysql::ServerIdentity>,
    /// HTTP statuses (`http` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<http::HttpObservation>,
    /// The gateway's answer (`otlp` kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<otlp::OtlpObservation>,
    /// Success, or the failing step and class.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Attempt {
    /// An attempt that ended because readyprobe itself failed (e.g. a panic in a probe task).
    pub fn internal_failure(
        branch: &str,
        seq: u64,
        started_at: Millis,
        finished_at: Millis,
        message: String,
    ) -> Self {
        Attempt {
            branch: branch.to_string(),
            seq,
            marker: String::new(),
            started_at,
            finished_at,
            steps: Vec::new(),
            answers: Vec::new(),
            dns: None,
            address: None,
            tls: None,
            certificate_not_after: None,
            server: None,
            http: None,
            otlp: None,
            outcome: Outcome::Failure {
                step: Step::Resolve,
                class: FailureClass::InternalError,
                message,
            },
        }
    }

    /// The readiness core's view of this attempt.
    pub fn record(&self) -> AttemptRecord {
        AttemptRecord {
            finished_at: self.finished_at,
            success: self.outcome == Outcome::Success,
            class: match &self.outcome {
                Outcome::Success => None,
                Outcome::Failure { class, .. } => Some(*class),
            },
        }
    }
}

/// Everything needed to probe one branch, prepared once at start-up.
#[derive(Debug, Clone)]
pub struct BranchProbe {
    /// The branch.
    pub branch: Branch,
    /// This prober's id.
    pub prober_id: String,
    /// The service's stable name, which no branch attempt may resolve through.
    pub stable_name: String,
    /// Address records the `resolve` step asks for.
    pub address_family: crate::config::AddressFamily,
    /// Attempt deadline.
    pub timeout: Duration,
    /// Per-step timeouts.
    pub step_timeouts: StepTimeouts,
    /// Kind-specific target.
    pub target: Target,
}

/// Kind-specific prepared target; one variant per probe kind.
#[derive(Debug, Clone)]
pub enum Target {
    /// `mysql` kind.
    Mysql(Box<mysql::MysqlTarget>),
    /// `tcp` kind.
    Tcp(tcp::TcpTarget),
    /// `http` kind.
    Http(Box<http::HttpTarget>),
    /// `otlp` kind.
    Otlp(Box<otlp::OtlpTarget>),
}

/// A fresh 128-bit random marker as 32 lowercase hex characters.
pub fn new_marker() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}

/// Run one attempt. Never panics on a peer's behaviour; every outcome is data.
pub async fn run_attempt(
    probe: &BranchProbe,
    resolver: &TokioResolver,
    clock: &Clock,
    seq: u64,
) -> Attempt {
    let start = Instant::now();
    let started_at = clock.at(start);
    let deadline = Deadline {
        end: start + probe.timeout,
        step_timeouts: probe.step_timeouts,
    };
    let marker = new_marker();
    let mut steps = Steps::default();
    let mut answers = Vec::new();
    let mut address = None;
    let mut tls_info = None;
    let mut server = None;
    let mut http_obs = None;
    let mut dns_meta = None;
    let mut otlp_obs = None;
    let endpoint = probe.branch.endpoint.as_str();

    let body = async {
        let res = steps
            .run(
                Step::Resolve,
                deadline.step(Step::Resolve),
                resolve::resolve_with(resolver, endpoint, probe.address_family),
            )
            .await
            .map_err(|e| (Step::Resolve, e))?;
        answers = res.answers.clone();
        dns_meta = Some(DnsMeta {
            rcode: res.rcode.clone(),
            authoritative: res.authoritative,
        });
        if let Some(a) = res.answers.iter().find(|a| {
            let n = |s: &str| {
                s.trim_end_matches('.')
                    .eq_ignore_ascii_case(&probe.stable_name)
            };
            n(&a.name) || (a.rtype == "CNAME" && n(&a.data))
        }) {
            steps.fail_last(FailureClass::DnsStableName);
            return Err((
                Step::Resolve,
                StepError {
                    class: FailureClass::DnsStableName,
                    message: format!(
                        "{endpoint} resolves through the stable name {} ({} {} {}): a branch probe must not follow the failover record",
                        probe.stable_name, a.name, a.rtype, a.data
                    ),
                },
            ));
        }
        let (stream, addr) = steps
            .run(
                Step::Connect,
                deadline.step(Step::Connect),
                connect::connect(
                    &res.addresses,
                    probe.branch.port,
                    deadline.step(Step::Connect).limit,
                ),
            )
            .await
            .map_err(|e| (Step::Connect, e))?;
        address = Some(addr.to_string());
        // Template variables of the http and otlp kinds.
        let vars = http::Vars {
            marker: &marker,
            seq,
            prober_id: &probe.prober_id,
            branch: &probe.branch.name,
            endpoint,
        };
        match &probe.target {
            Target::Mysql(t) => {
                let observed_at = rfc3339(clock.now_ms())
                    .replace('T', " ")
                    .trim_end_matches('Z')
                    .to_string();
                let id = mysql::run(
                    t,
                    &mut steps,
                    &deadline,
                    stream,
                    addr,
                    endpoint,
                    &probe.prober_id,
                    &probe.branch.name,
                    seq,
                    &marker,
                    &observed_at,
                    &mut tls_info,
                )
                .await?;
                server = Some(id);
            }
            Target::Tcp(t) => {
                tcp::run(t, &mut steps, &deadline, stream, endpoint, &mut tls_info).await?;
            }
            Target::Http(t) => {
                let mut obs = http::HttpObservation::default();
                let r = http::run(
                    t,
                    &mut steps,
                    &deadline,
                    stream,
                    probe.branch.port,
                    vars,
                    &mut tls_info,
                    &mut obs,
                )
                .await;
                http_obs = Some(obs);
                r?;
            }
            Target::Otlp(t) => {
                let mut obs = otlp::OtlpObservation::default();
                let r = otlp::run(
                    t,
                    &mut steps,
                    &deadline,
                    stream,
                    probe.branch.port,
                    vars,
                    (clock.now_ms().max(0) as u64) * 1_000_000,
                    &mut tls_info,
                    &mut obs,
                )
                .await;
                otlp_obs = Some(obs);
                r?;
            }
        }
        Ok::<(), (Step, StepError)>(())
    };
    let (result, certificate_not_after) = tls::with_seen_certificate(body).await;
    let outcome = match result {
        Ok(()) => Outcome::Success,
        Err((step, e)) => Outcome::Failure {
            step,
            class: e.class,
            message: e.message,
        },
    };
    Attempt {
        branch: probe.branch.name.clone(),
        seq,
        marker,
        started_at,
        finished_at: clock.now_ms(),
        steps: steps.records,
        answers,
        dns: dns_meta,
        address,
        tls: tls_info,
        certificate_not_after,
        server,
        http: http_obs,
        otlp: otlp_obs,
        outcome,
    }
}
