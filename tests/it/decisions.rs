//! Decision quality, reduced: a few simulated days of the `decisions` benchmark's scenarios
//! (examples/decisions.rs, same module) through the real readiness core with readyprobe's default
//! policy, asserting counts so that a regression in the core or its defaults fails here. Simulated
//! time only: nothing depends on the machine's speed.

#[allow(dead_code)]
#[path = "../../examples/decisions/sim.rs"]
mod sim;

use readyprobe::failure::FailureClass;
use sim::{Contender, Scenario, Score};

/// Simulated days per scenario.
const DAYS: i64 = 2;
/// readyprobe's default probe interval, ms.
const INTERVAL_MS: i64 = 2_000;

/// The contenders: readyprobe's defaults, the same without the definitive rule, HAProxy 3/2.
fn contenders() -> (Contender, Contender, Contender) {
    let defaults = sim::default_policy().expect("default policy");
    let mut cs = sim::contenders(&defaults).into_iter();
    let with = cs.next().expect("readyprobe defaults");
    let without = cs.next().expect("readyprobe without the definitive rule");
    let haproxy = cs.find(|c| c.name.starts_with("HAProxy")).expect("HAProxy");
    (with, without, haproxy)
}

fn score(sc: &Scenario, c: &Contender) -> (Score, sim::Run) {
    let run = sim::run(sc, c);
    (sim::score(sc, &run), run)
}

#[test]
fn noise_up_to_two_percent_and_bursts_up_to_90s_never_flap() {
    let (with, without, haproxy) = contenders();
    for sc in [
        Scenario::noise(0.5, DAYS, 11),
        Scenario::noise(2.0, DAYS, 12),
        Scenario::bursts(30, 4, DAYS, 21),
        Scenario::bursts(60, 4, DAYS, 22),
        Scenario::bursts(90, 4, DAYS, 23),
    ] {
        for c in [&with, &without] {
            let (s, _) = score(&sc, c);
            assert_eq!(
                (s.flaps, s.unready_transitions, s.wrong_ms()),
                (0, 0, 0),
                "{} under {}",
                c.name,
                sc.name
            );
        }
    }
    // The scoring sees flaps where there are some: HAProxy's fall 3 at 2 s flips on every burst.
    let sc = Scenario::bursts(60, 4, DAYS, 22);
    let (s, _) = score(&sc, &haproxy);
    assert_eq!(s.flaps, 4 * DAYS as u32, "{s:?}");
}

#[test]
fn read_only_outages_are_detected_by_the_definitive_rule_in_20s_and_an_interval() {
    let (with, without, _) = contenders();
    let sc = Scenario::outages(5, FailureClass::ServerReadOnly, 2, DAYS, 31);
    let n = 2 * DAYS as u32;
    let (s, run) = score(&sc, &with);
    assert_eq!((s.real_faults, s.missed, s.flaps), (n, 0, 0), "{s:?}");
    assert_eq!(run.definitive_fired, n);
    // definitive_for (20 s) after the first read-only answer, which starts at most one interval
    // after the outage: never later than 20 s + one interval + one attempt's latency (5 ms), well
    // within 30 s + one interval; never before 20 s.
    let max = s.detection_ms.iter().copied().max().unwrap_or(i64::MAX);
    assert!(max <= 20_000 + INTERVAL_MS + 5, "{:?}", s.detection_ms);
    assert!(
        s.detection_ms.iter().all(|d| *d >= 20_000),
        "{:?}",
        s.detection_ms
    );
    assert!(max <= 30_000 + INTERVAL_MS);
    // Without the rule the same outages wait for the full `for`.
    let (s, run) = score(&sc, &without);
    assert_eq!((s.missed, run.definitive_fired), (0, 0), "{s:?}");
    assert!(s.detection_ms.iter().all(|d| *d >= 180_000), "{s:?}");
}

#[test]
fn blackholed_outages_wait_for_the_full_for() {
    let (with, _, _) = contenders();
    let sc = Scenario::outages(5, FailureClass::TcpTimeout, 2, DAYS, 31);
    let n = 2 * DAYS as u32;
    let (s, run) = score(&sc, &with);
    assert_eq!((s.real_faults, s.missed, s.flaps), (n, 0, 0), "{s:?}");
    assert_eq!(run.definitive_fired, 0);
    // Timeouts are ambiguous: never before `for` (3 m). The unready condition holds from the
    // second failed attempt (one failure of 30 is 96.7 %, above 95 %), and a timeout is known
    // only when it ends (1.6 s): at most `for` + two intervals + the timeout after the start.
    for d in &s.detection_ms {
        assert!(
            (180_000..=180_000 + 2 * INTERVAL_MS + sim::TIMEOUT_MS).contains(d),
            "{:?}",
            s.detection_ms
        );
    }
    // Failback: the 60 s ready window clean, then `for` 10 m.
    for b in &s.failback_ms {
        assert!((600_000..=660_000 + 2 * INTERVAL_MS).contains(b), "{b}");
    }
}

/// readyprobe's defaults with `probe.suspect_interval = "500ms"`.
fn adaptive() -> Contender {
    let defaults = sim::default_policy().expect("default policy");
    let cs = sim::contenders(&defaults);
    cs.into_iter()
        .find(|c| c.suspect_interval_ms == Some(500))
        .expect("readyprobe with a 500 ms suspect interval")
}

/// Adaptive probing adds attempts only while a branch is suspect: under light noise and timeout
/// bursts a few percent, and it never turns noise or a burst into a flap.
#[test]
fn adaptive_probing_costs_little_without_a_fault_and_never_flaps() {
    let (fixed, _, _) = contenders();
    let fast = adaptive();
    for (sc, at_most) in [
        (Scenario::noise(0.5, DAYS, 11), 1.02),
        (Scenario::noise(2.0, DAYS, 12), 1.2),
        (Scenario::bursts(90, 4, DAYS, 23), 1.02),
    ] {
        let (s, run) = score(&sc, &fast);
        assert_eq!((s.flaps, s.wrong_ms()), (0, 0), "{}: {s:?}", sc.name);
        let (_, base) = score(&sc, &fixed);
        let ratio = run.attempts as f64 / base.attempts as f64;
        assert!((1.0..=at_most).contains(&ratio), "{}: {ratio}", sc.name);
    }
}

/// More samples while the unready condition holds keep a partial outage (10 % of attempts
/// reset) from resetting the `for` clock with a lucky window: the fixed interval misses one of
/// these four outages, adaptive probing none, and never before `for` (3 min).
#[test]
fn adaptive_probing_detects_a_partial_outage_the_fixed_interval_misses() {
    let (fixed, _, _) = contenders();
    let sc = Scenario::partial(15, 10.0, FailureClass::TcpReset, (2, DAYS, 42));
    let (s, _) = score(&sc, &fixed);
    assert_eq!((s.real_faults, s.missed), (4, 1), "{s:?}");
    let (s, _) = score(&sc, &adaptive());
    assert_eq!((s.real_faults, s.missed, s.flaps), (4, 0, 0), "{s:?}");
    assert!(s.detection_ms.iter().all(|d| *d >= 180_000), "{s:?}");
}

/// A blackholed branch is probed once per timeout while suspect, so adaptive probing does not
/// close the gap to `for` + one interval: the unready condition still needs two timed-out
/// attempts before it holds, and then fires at the first attempt's end at or after `for`.
#[test]
fn adaptive_probing_leaves_blackholed_detection_within_the_same_bound() {
    let sc = Scenario::outages(5, FailureClass::TcpTimeout, 2, DAYS, 31);
    let (s, run) = score(&sc, &adaptive());
    assert_eq!(
        (s.missed, s.flaps, run.definitive_fired),
        (0, 0, 0),
        "{s:?}"
    );
    // Up to an interval to the first failing start, two timeouts known an interval apart, then
    // `for`, then at most one attempt (a timeout) to the evaluation that fires.
    let max = 180_000 + 2 * INTERVAL_MS + 2 * sim::TIMEOUT_MS;
    for d in &s.detection_ms {
        assert!((180_000..=max).contains(d), "{:?}", s.detection_ms);
    }
}
