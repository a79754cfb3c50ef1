//! Decision quality, simulated: scripted days of attempts scored for readyprobe's readiness core
//! and for the consecutive-count policies people run instead. Shared by `examples/decisions.rs`
//! (30 days, Markdown tables) and `tests/it/decisions.rs` (a few days, counts asserted).
//!
//! Model, stated once:
//! * Every prober starts attempt `k` at `k × interval` and decides when the attempt finishes: 5 ms
//!   after its start, or [`TIMEOUT_MS`] after it for a timeout (`tcp_timeout`), for every prober.
//!   With adaptive probing ([`Contender::suspect_interval_ms`]), readyprobe's next attempt starts
//!   `suspect_interval` after the previous start while the core says the branch is suspect
//!   ([`Readiness::suspect`] after the attempt), `interval` after it otherwise, and never before
//!   the previous attempt finished (one in flight), as `scheduler::attempt_loop` does. Between
//!   attempts the core is evaluated at each [`Readiness::next_deadline`], as the runner's timer
//!   does.
//! * The outcome of an attempt depends on its start: inside a fault it fails with the fault's class
//!   (with the fault's share, drawn like the noise);
//!   elsewhere it fails with the scenario's noise probability (class `tcp_reset`, ambiguous), drawn
//!   from `StdRng` seeded by the scenario's seed, one draw per attempt in order.
//! * Truth: a branch is down only inside a *real* fault (an outage, the flapping primary's down
//!   minute); noise and bursts are transient, the branch is up. Every prober starts healthy.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use readyprobe::failure::FailureClass;
use readyprobe::readiness::{AttemptRecord, Policy, Readiness, ReadinessState};

/// One simulated day, ms.
pub const DAY_MS: i64 = 86_400_000;
/// One minute, ms.
pub const MIN_MS: i64 = 60_000;
/// How long a timed-out attempt takes: readyprobe's default attempt timeout (1.6 s at a 2 s
/// interval). The peers' own timeouts are as long or longer, so this favours them.
pub const TIMEOUT_MS: i64 = 1_600;
/// How long any other attempt takes.
const LATENCY_MS: i64 = 5;
/// Epoch offset of the simulated clock (2026-01-01T00:00:00Z): the readiness core's instants are
/// wall-clock milliseconds.
const EPOCH: i64 = 1_767_225_600_000;

/// A span during which every attempt fails with one class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    /// Start, ms from the scenario's start (inclusive).
    pub start: i64,
    /// End, ms from the scenario's start (exclusive).
    pub end: i64,
    /// The class every attempt started inside it fails with.
    pub class: FailureClass,
    /// A real outage (the branch is down) rather than a transient burst.
    pub real: bool,
    /// The share of attempts started inside it that fail (1.0: every one; less: a partial
    /// outage, drawn like the noise).
    pub share: f64,
}

/// One scripted stretch of days.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name, as printed.
    pub name: String,
    /// Length in days.
    pub days: i64,
    /// Probability that an attempt outside any fault fails (`tcp_reset`).
    pub noise: f64,
    /// Faults, sorted by start, not overlapping.
    pub faults: Vec<Fault>,
    /// Seed of the noise draws.
    pub seed: u64,
}

impl Scenario {
    /// Independent transient failures at `percent` % of attempts, nothing else.
    pub fn noise(percent: f64, days: i64, seed: u64) -> Scenario {
        Scenario {
            name: format!("{percent}% transient failures"),
            days,
            noise: percent / 100.0,
            faults: Vec::new(),
            seed,
        }
    }

    /// `per_day` bursts of `secs` seconds of total failure (timeouts) a day, one at a random
    /// offset in each equal slot of the day.
    pub fn bursts(secs: i64, per_day: i64, days: i64, seed: u64) -> Scenario {
        let faults = spread(
            secs * 1000,
            per_day,
            days,
            seed,
            FailureClass::TcpTimeout,
            false,
        );
        Scenario {
            name: format!("{secs} s timeout bursts, {per_day} a day"),
            days,
            noise: 0.0,
            faults,
            seed,
        }
    }

    /// `per_day` real outages of `minutes` a day in which every attempt fails with `class`.
    pub fn outages(
        minutes: i64,
        class: FailureClass,
        per_day: i64,
        days: i64,
        seed: u64,
    ) -> Scenario {
        let faults = spread(minutes * MIN_MS, per_day, days, seed, class, true);
        Scenario {
            name: format!("{minutes} min outages ({class}), {per_day} a day"),
            days,
            noise: 0.0,
            faults,
            seed,
        }
    }

    /// [`outages`](Self::outages) in which only `percent` % of attempts fail (a partial outage:
    /// the branch is down for its clients all the same).
    pub fn partial(
        minutes: i64,
        percent: f64,
        class: FailureClass,
        (per_day, days, seed): (i64, i64, u64),
    ) -> Scenario {
        let mut sc = Scenario::outages(minutes, class, per_day, days, seed);
        for f in &mut sc.faults {
            f.share = percent / 100.0;
        }
        sc.name = format!("{minutes} min partial outages ({percent}% {class}), {per_day} a day");
        sc
    }

    /// A primary that is up `up_min` minutes, then down `down_min` (every attempt failing with
    /// `class`), over and over.
    pub fn flapping(up_min: i64, down_min: i64, class: FailureClass, days: i64) -> Scenario {
        let period = (up_min + down_min) * MIN_MS;
        let faults = (0..days * DAY_MS / period)
            .map(|k| Fault {
                start: k * period + up_min * MIN_MS,
                end: (k + 1) * period,
                class,
                real: true,
                share: 1.0,
            })
            .collect();
        Scenario {
            name: format!("Flapping primary: up {up_min} min, down {down_min} min ({class})"),
            days,
            noise: 0.0,
            faults,
            seed: 0,
        }
    }

    /// The fault covering `t`, if any.
    fn fault_at(&self, t: i64) -> Option<&Fault> {
        let i = self.faults.partition_point(|f| f.end <= t);
        self.faults.get(i).filter(|f| f.start <= t)
    }

    /// The real fault covering `t`, by index.
    fn real_fault_at(&self, t: i64) -> Option<usize> {
        let i = self.faults.partition_point(|f| f.end <= t);
        self.faults
            .get(i)
            .filter(|f| f.start <= t && f.real)
            .map(|_| i)
    }
}

/// `per_day` faults of `len` ms a day, one at a seeded random offset in each equal slot, at least
/// a quarter of the slot clear after it (so a prober can recover before the next one).
fn spread(
    len: i64,
    per_day: i64,
    days: i64,
    seed: u64,
    class: FailureClass,
    real: bool,
) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let slot = DAY_MS / per_day;
    let room = (slot * 3 / 4 - len).max(1);
    (0..days * per_day)
        .map(|k| {
            let start = k * slot + rng.random_range(0..room);
            Fault {
                start,
                end: start + len,
                class,
                real,
                share: 1.0,
            }
        })
        .collect()
}

/// How a prober turns attempts into a healthy / unhealthy verdict.
#[derive(Debug, Clone)]
pub enum Rule {
    /// readyprobe's readiness core with this policy (healthy = `ready`).
    Readyprobe(Box<Policy>),
    /// Unhealthy after `fall` consecutive failures, healthy after `rise` consecutive successes.
    Consecutive {
        /// Consecutive failures that make it unhealthy.
        fall: u32,
        /// Consecutive successes that make it healthy again.
        rise: u32,
    },
    /// Attempts aggregated per minute: a minute whose success rate is below the threshold makes
    /// it unhealthy, a minute at or above it healthy (decided at the minute's end).
    PerMinute {
        /// Threshold in percent.
        threshold_percent: f64,
    },
}

/// A named prober: its rule and its probe interval.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Name, as printed.
    pub name: String,
    /// Probe interval, ms.
    pub interval_ms: i64,
    /// Interval while suspect (readyprobe's `probe.suspect_interval`), ms; `None`: fixed
    /// interval.
    pub suspect_interval_ms: Option<i64>,
    /// Decision rule.
    pub rule: Rule,
}

/// What a prober published over a scenario.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Verdict changes: (ms from the scenario's start, healthy after it).
    pub changes: Vec<(i64, bool)>,
    /// Attempts made.
    pub attempts: u64,
    /// Unready transitions the definitive rule fired (readyprobe only).
    pub definitive_fired: u32,
}

/// Runs `c` over `sc`.
pub fn run(sc: &Scenario, c: &Contender) -> Run {
    let mut rng = StdRng::seed_from_u64(sc.seed);
    let end = sc.days * DAY_MS;
    let mut out = Run::default();
    let mut verdict = Verdict::new(&c.rule);
    let mut start = 0;
    while start < end {
        let draw: f64 = rng.random();
        let class = match sc.fault_at(start) {
            Some(f) => (draw < f.share).then_some(f.class),
            None => (draw < sc.noise).then_some(FailureClass::TcpReset),
        };
        let took = if class == Some(FailureClass::TcpTimeout) {
            TIMEOUT_MS
        } else {
            LATENCY_MS
        };
        out.attempts += 1;
        verdict.wake_until(start + took, &mut out);
        verdict.attempt(start + took, class, &mut out);
        let period = match c.suspect_interval_ms {
            Some(fast) if verdict.suspect() => fast,
            _ => c.interval_ms,
        };
        start += period.max(took);
    }
    out
}

/// The running state of one [`Rule`].
enum Verdict {
    Readyprobe(Box<Readiness>),
    Consecutive {
        fall: u32,
        rise: u32,
        healthy: bool,
        fails: u32,
        oks: u32,
    },
    PerMinute {
        threshold_percent: f64,
        healthy: bool,
        minute: i64,
        finished: u32,
        failed: u32,
    },
}

impl Verdict {
    /// Whether the branch is suspect after the latest attempt: the core's own rule.
    fn suspect(&self) -> bool {
        match self {
            Verdict::Readyprobe(r) => r.suspect().is_some(),
            _ => false,
        }
    }

    fn new(rule: &Rule) -> Verdict {
        match rule {
            Rule::Readyprobe(p) => {
                let mut p = (**p).clone();
                p.initial = ReadinessState::Ready;
                Verdict::Readyprobe(Box::new(Readiness::new(p)))
            }
            Rule::Consecutive { fall, rise } => Verdict::Consecutive {
                fall: *fall,
                rise: *rise,
                healthy: true,
                fails: 0,
                oks: 0,
            },
            Rule::PerMinute { threshold_percent } => Verdict::PerMinute {
                threshold_percent: *threshold_percent,
                healthy: true,
                minute: 0,
                finished: 0,
                failed: 0,
            },
        }
    }

    /// Evaluates at every deadline before `at` (ms from the start), as the runner's timer does
    /// between attempts (readyprobe only).
    fn wake_until(&mut self, at: i64, out: &mut Run) {
        let Verdict::Readyprobe(r) = self else {
            return;
        };
        while let Some(d) = r.next_deadline().filter(|d| *d < EPOCH + at) {
            if let Some(t) = r.evaluate(d) {
                out.changes
                    .push((t.at - EPOCH, t.to == ReadinessState::Ready));
                if t.reason.contains("definitive rule fired") {
                    out.definitive_fired += 1;
                }
            }
        }
    }

    /// Feeds one attempt that finished at `at` (ms from the start) with `class` (`None`: success).
    fn attempt(&mut self, at: i64, class: Option<FailureClass>, out: &mut Run) {
        match self {
            Verdict::Readyprobe(r) => {
                let t = r.record(AttemptRecord {
                    finished_at: EPOCH + at,
                    success: class.is_none(),
                    class,
                });
                if let Some(t) = t {
                    if t.reason.contains("definitive rule fired") {
                        out.definitive_fired += 1;
                    }
                    out.changes
                        .push((t.at - EPOCH, t.to == ReadinessState::Ready));
                }
            }
            Verdict::Consecutive {
                fall,
                rise,
                healthy,
                fails,
                oks,
            } => {
                if class.is_some() {
                    *fails += 1;
                    *oks = 0;
                } else {
                    *oks += 1;
                    *fails = 0;
                }
                let flip = if *healthy {
                    *fails >= *fall
                } else {
                    *oks >= *rise
                };
                if flip {
                    *healthy = !*healthy;
                    out.changes.push((at, *healthy));
                }
            }
            Verdict::PerMinute {
                threshold_percent,
                healthy,
                minute,
                finished,
                failed,
            } => {
                let m = at / MIN_MS;
                if m > *minute {
                    // The minute just closed decides, at its end.
                    if *finished > 0 {
                        let rate = f64::from(*finished - *failed) * 100.0 / f64::from(*finished);
                        let now_healthy = rate >= *threshold_percent;
                        if now_healthy != *healthy {
                            *healthy = now_healthy;
                            out.changes.push(((*minute + 1) * MIN_MS, now_healthy));
                        }
                    }
                    (*minute, *finished, *failed) = (m, 0, 0);
                }
                *finished += 1;
                *failed += u32::from(class.is_some());
            }
        }
    }
}

/// The scores of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Score {
    /// Transitions to unhealthy outside every real fault (false alarms, flaps).
    pub flaps: u32,
    /// Transitions to unhealthy, all of them.
    pub unready_transitions: u32,
    /// Real faults, and how many of them were never detected while they lasted.
    pub real_faults: u32,
    /// Real faults not detected while they lasted.
    pub missed: u32,
    /// Per detected real fault: ms from its start to the first transition to unhealthy in it.
    pub detection_ms: Vec<i64>,
    /// Per detected real fault: ms from its end to the next transition to healthy.
    pub failback_ms: Vec<i64>,
    /// Time published healthy while the branch was down, ms.
    pub wrong_healthy_ms: i64,
    /// Time published unhealthy while the branch was up, ms.
    pub wrong_unhealthy_ms: i64,
}

impl Score {
    /// Time published wrong, either way, ms.
    pub fn wrong_ms(&self) -> i64 {
        self.wrong_healthy_ms + self.wrong_unhealthy_ms
    }
}

/// Scores `run` against the truth of `sc`.
pub fn score(sc: &Scenario, run: &Run) -> Score {
    let mut s = Score {
        real_faults: sc.faults.iter().filter(|f| f.real).count() as u32,
        ..Score::default()
    };
    let mut detected = vec![false; sc.faults.len()];
    for (i, &(t, healthy)) in run.changes.iter().enumerate() {
        if healthy {
            continue;
        }
        s.unready_transitions += 1;
        match sc.real_fault_at(t) {
            None => s.flaps += 1,
            Some(k) if !detected[k] => {
                detected[k] = true;
                let f = sc.faults[k];
                s.detection_ms.push(t - f.start);
                let back = run.changes[i + 1..]
                    .iter()
                    .find(|(u, h)| *h && *u >= f.end)
                    .map(|(u, _)| u - f.end);
                s.failback_ms.extend(back);
            }
            Some(_) => {}
        }
    }
    s.missed = s.real_faults - detected.iter().filter(|d| **d).count() as u32;
    wrong_time(sc, run, &mut s);
    s
}

/// Sweeps the published verdict against the truth over the whole scenario.
fn wrong_time(sc: &Scenario, run: &Run, s: &mut Score) {
    let end = sc.days * DAY_MS;
    // Instants where the truth changes, with the truth after them.
    let mut truth: Vec<(i64, bool)> = Vec::new();
    for f in sc.faults.iter().filter(|f| f.real) {
        truth.push((f.start, false));
        truth.push((f.end.min(end), true));
    }
    let mut cuts: Vec<i64> = truth.iter().map(|x| x.0).collect();
    cuts.extend(run.changes.iter().map(|x| x.0));
    cuts.push(end);
    cuts.sort_unstable();
    cuts.dedup();
    let (mut ti, mut pi) = (0, 0);
    let (mut up, mut published) = (true, true);
    let mut from = 0;
    for cut in cuts {
        if cut > from && up != published {
            if published {
                s.wrong_healthy_ms += cut - from;
            } else {
                s.wrong_unhealthy_ms += cut - from;
            }
        }
        while ti < truth.len() && truth[ti].0 <= cut {
            up = truth[ti].1;
            ti += 1;
        }
        while pi < run.changes.len() && run.changes[pi].0 <= cut {
            published = run.changes[pi].1;
            pi += 1;
        }
        from = cut;
    }
}

/// The policies compared: readyprobe's defaults (`defaults`, parsed from a config without a
/// `[readiness]` table) with and without the definitive rule, and the peers, each at its own
/// interval.
pub fn contenders(defaults: &Policy) -> Vec<Contender> {
    let mut no_definitive = defaults.clone();
    no_definitive.definitive = None;
    let consecutive = |name: &str, interval_s: i64, fall: u32, rise: u32| Contender {
        name: name.to_string(),
        interval_ms: interval_s * 1000,
        suspect_interval_ms: None,
        rule: Rule::Consecutive { fall, rise },
    };
    let adaptive = |ms: i64| Contender {
        name: format!("readyprobe defaults, suspect_interval {ms} ms"),
        interval_ms: 2000,
        suspect_interval_ms: Some(ms),
        rule: Rule::Readyprobe(Box::new(defaults.clone())),
    };
    vec![
        Contender {
            name: "readyprobe defaults".into(),
            interval_ms: 2000,
            suspect_interval_ms: None,
            rule: Rule::Readyprobe(Box::new(defaults.clone())),
        },
        Contender {
            name: "readyprobe defaults, no definitive rule".into(),
            interval_ms: 2000,
            suspect_interval_ms: None,
            rule: Rule::Readyprobe(Box::new(no_definitive)),
        },
        adaptive(1000),
        adaptive(500),
        consecutive("Route 53, 30 s, 3 / 3", 30, 3, 3),
        consecutive("Route 53, 10 s, 3 / 3", 10, 3, 3),
        Contender {
            name: "bad minute / good minute (2 s, < 95 %)".into(),
            interval_ms: 2000,
            suspect_interval_ms: None,
            rule: Rule::PerMinute {
                threshold_percent: 95.0,
            },
        },
        consecutive("Gatus, 60 s, fail 3 / ok 2", 60, 3, 2),
        consecutive("HAProxy, 2 s, fall 3 / rise 2", 2, 3, 2),
        consecutive("Kubernetes, 10 s, fail 3 / ok 1", 10, 3, 1),
    ]
}

/// readyprobe's default policy: the one a config without `[readiness]` gets, read through the
/// real config parser.
pub fn default_policy() -> Result<Policy, String> {
    let text = r#"
[service]
name = "orders-db"
stable_name = "db.orders.internal.example"

[probe]
kind = "tcp"
tcp = { port = 3306 }

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "db-a.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "db-b.orders.internal.example"
"#;
    let cfg = readyprobe::config::parse(std::path::Path::new("defaults.toml"), text)
        .map_err(|e| e.to_string())?;
    let svc = cfg.services.first().ok_or("no service")?;
    Ok(svc.policy.clone())
}

/// The median of `v` (the lower middle for an even count); `None` when empty.
pub fn median(v: &[i64]) -> Option<i64> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied()
}
