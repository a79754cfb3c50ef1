//! Decision-quality benchmark: 30 simulated days per scenario, fixed seeds, readyprobe's real
//! readiness core beside the consecutive-count policies people run instead. Prints Markdown
//! tables (BENCHMARKS.md, "Decision quality").
//!
//! `cargo run --release --example decisions [DAYS]`

#[path = "decisions/sim.rs"]
mod sim;

use readyprobe::failure::FailureClass;
use sim::{Contender, Scenario, Score};
use std::fmt::Write;

/// Outages of each kind per simulated day.
const OUTAGES_PER_DAY: i64 = 2;
/// Bursts per simulated day.
const BURSTS_PER_DAY: i64 = 4;

fn main() -> Result<(), String> {
    let days: i64 = match std::env::args().nth(1) {
        Some(d) => d.parse().map_err(|e| format!("DAYS {d:?}: {e}"))?,
        None => 30,
    };
    let defaults = sim::default_policy()?;
    let cs = sim::contenders(&defaults);
    let mut out = String::new();
    let noise: Vec<Scenario> = [(0.5, 11), (2.0, 12), (5.0, 13)]
        .into_iter()
        .map(|(p, seed)| Scenario::noise(p, days, seed))
        .chain(
            [(30, 21), (60, 22), (90, 23)]
                .into_iter()
                .map(|(s, seed)| Scenario::bursts(s, BURSTS_PER_DAY, days, seed)),
        )
        .collect();
    let scores = score_all(&noise, &cs);
    noise_tables(&mut out, days, &noise, &cs, &scores).map_err(|e| e.to_string())?;
    for (kind, class) in [
        (
            "read-only writer (definitive)",
            FailureClass::ServerReadOnly,
        ),
        ("blackholed writer (ambiguous)", FailureClass::TcpTimeout),
    ] {
        let sc: Vec<Scenario> = [(5, 31), (15, 32), (60, 33)]
            .into_iter()
            .map(|(m, seed)| Scenario::outages(m, class, OUTAGES_PER_DAY, days, seed))
            .collect();
        let scores = score_all(&sc, &cs);
        outage_table(&mut out, days, kind, &cs, &scores).map_err(|e| e.to_string())?;
    }
    for pct in [10.0, 20.0] {
        let kind = format!("partially failing writer ({pct}% of attempts reset, ambiguous)");
        let sc: Vec<Scenario> = [(5, 41), (15, 42), (60, 43)]
            .into_iter()
            .map(|(m, seed)| {
                let at = (OUTAGES_PER_DAY, days, seed);
                Scenario::partial(m, pct, FailureClass::TcpReset, at)
            })
            .collect();
        let scores = score_all(&sc, &cs);
        outage_table(&mut out, days, &kind, &cs, &scores).map_err(|e| e.to_string())?;
    }
    for class in [FailureClass::TcpRefused, FailureClass::ServerReadOnly] {
        let flap = [Scenario::flapping(4, 1, class, days)];
        let scores = score_all(&flap, &cs);
        flapping_table(&mut out, days, &flap[0], &cs, &scores).map_err(|e| e.to_string())?;
    }
    print!("{out}");
    Ok(())
}

/// `scores[contender][scenario]`, each with the run's attempt count.
fn score_all(scenarios: &[Scenario], cs: &[Contender]) -> Vec<Vec<(Score, u64)>> {
    cs.iter()
        .map(|c| {
            scenarios
                .iter()
                .map(|sc| {
                    let run = sim::run(sc, c);
                    (sim::score(sc, &run), run.attempts)
                })
                .collect()
        })
        .collect()
}

/// `12.3 s` below two minutes, else `3 min 4.6 s`; `–` for none.
fn dur(ms: Option<i64>) -> String {
    match ms {
        None => "–".into(),
        Some(ms) if ms < 120_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => {
            let tenths = (ms + 50) / 100;
            format!(
                "{} min {}.{} s",
                tenths / 600,
                tenths % 600 / 10,
                tenths % 10
            )
        }
    }
}

/// `peer ÷ base` with two decimals; `–` when the base is zero.
fn ratio(peer: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}×", peer / base)
    } else if peer > 0.0 {
        "∞ (readyprobe 0)".into()
    } else {
        "–".into()
    }
}

/// `2 s`, or `2 s (0.5 s suspect)` with adaptive probing.
fn interval(c: &Contender) -> String {
    let s = |ms: i64| format!("{} s", ms as f64 / 1000.0);
    match c.suspect_interval_ms {
        Some(f) => format!("{} ({} suspect)", s(c.interval_ms), s(f)),
        None => s(c.interval_ms),
    }
}

/// Attempts per day over `row`'s scenarios: one number when they all agree, else `min–max`.
fn per_day(row: &[(Score, u64)], days: i64) -> String {
    let d = days.max(1) as u64;
    let min = row.iter().map(|(_, n)| n / d).min().unwrap_or(0);
    let max = row.iter().map(|(_, n)| n / d).max().unwrap_or(0);
    if min == max {
        min.to_string()
    } else {
        format!("{min}–{max}")
    }
}

fn minutes(ms: i64) -> String {
    format!("{:.1}", ms as f64 / 60_000.0)
}

fn noise_tables(
    out: &mut String,
    days: i64,
    sc: &[Scenario],
    cs: &[Contender],
    scores: &[Vec<(Score, u64)>],
) -> std::fmt::Result {
    writeln!(
        out,
        "#### Noise and bursts: false unready transitions (flaps) per {days} days\n"
    )?;
    let head: Vec<&str> = sc.iter().map(|s| s.name.as_str()).collect();
    writeln!(
        out,
        "| policy | interval | attempts / day | {} |",
        head.join(" | ")
    )?;
    writeln!(out, "| --- | ---: | ---: |{}", " ---: |".repeat(sc.len()))?;
    for (c, row) in cs.iter().zip(scores) {
        let cells: Vec<String> = row.iter().map(|(s, _)| s.flaps.to_string()).collect();
        writeln!(
            out,
            "| {} | {} | {} | {} |",
            c.name,
            interval(c),
            per_day(row, days),
            cells.join(" | ")
        )?;
    }
    writeln!(
        out,
        "\n#### Noise and bursts: minutes published unhealthy per {days} days (the branch was up throughout)\n"
    )?;
    writeln!(out, "| policy | {} |", head.join(" | "))?;
    writeln!(out, "| --- |{}", " ---: |".repeat(sc.len()))?;
    for (c, row) in cs.iter().zip(scores) {
        let cells: Vec<String> = row.iter().map(|(s, _)| minutes(s.wrong_ms())).collect();
        writeln!(out, "| {} | {} |", c.name, cells.join(" | "))?;
    }
    writeln!(out)
}

fn outage_table(
    out: &mut String,
    days: i64,
    kind: &str,
    cs: &[Contender],
    scores: &[Vec<(Score, u64)>],
) -> std::fmt::Result {
    writeln!(
        out,
        "#### Outages of a {kind}: {OUTAGES_PER_DAY} a day of 5, 15 and 60 min, {days} days each\n"
    )?;
    writeln!(
        out,
        "| policy | detect 5 min: median / max | detect 15 min | detect 60 min | missed | detection median ÷ readyprobe | failback median / max | false unready | published wrong (min): healthy while down + unhealthy while up | wrong ÷ readyprobe | attempts / day |"
    )?;
    writeln!(
        out,
        "| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
    )?;
    let all = |row: &[(Score, u64)], f: &dyn Fn(&Score) -> Vec<i64>| -> Vec<i64> {
        row.iter().flat_map(|(s, _)| f(s)).collect()
    };
    let base_det = sim::median(&all(&scores[0], &|s| s.detection_ms.clone())).unwrap_or(0);
    let base_wrong: i64 = scores[0].iter().map(|(s, _)| s.wrong_ms()).sum();
    for (c, row) in cs.iter().zip(scores) {
        let det: Vec<String> = row
            .iter()
            .map(|(s, _)| {
                format!(
                    "{} / {}",
                    dur(sim::median(&s.detection_ms)),
                    dur(s.detection_ms.iter().max().copied())
                )
            })
            .collect();
        let missed: u32 = row.iter().map(|(s, _)| s.missed).sum();
        let faults: u32 = row.iter().map(|(s, _)| s.real_faults).sum();
        let det_all = all(row, &|s| s.detection_ms.clone());
        let back = all(row, &|s| s.failback_ms.clone());
        let flaps: u32 = row.iter().map(|(s, _)| s.flaps).sum();
        let wrong: i64 = row.iter().map(|(s, _)| s.wrong_ms()).sum();
        let wrong_h: i64 = row.iter().map(|(s, _)| s.wrong_healthy_ms).sum();
        let wrong_u: i64 = row.iter().map(|(s, _)| s.wrong_unhealthy_ms).sum();
        writeln!(
            out,
            "| {} | {} | {missed} of {faults} | {} | {} / {} | {flaps} | {} + {} = {} | {} | {} |",
            c.name,
            det.join(" | "),
            ratio(sim::median(&det_all).unwrap_or(0) as f64, base_det as f64),
            dur(sim::median(&back)),
            dur(back.iter().max().copied()),
            minutes(wrong_h),
            minutes(wrong_u),
            minutes(wrong),
            ratio(wrong as f64, base_wrong as f64),
            per_day(row, days),
        )?;
    }
    writeln!(out)
}

fn flapping_table(
    out: &mut String,
    days: i64,
    sc: &Scenario,
    cs: &[Contender],
    scores: &[Vec<(Score, u64)>],
) -> std::fmt::Result {
    writeln!(out, "#### {} ({days} days)\n", sc.name)?;
    let down: i64 = sc.faults.iter().map(|f| f.end - f.start).sum();
    writeln!(
        out,
        "Down {} of {} minutes.\n",
        minutes(down),
        minutes(days * sim::DAY_MS)
    )?;
    writeln!(
        out,
        "| policy | unready transitions | healthy while down (min) | unhealthy while up (min) | published wrong (min) | wrong ÷ readyprobe | attempts / day |"
    )?;
    writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")?;
    let base = scores[0][0].0.wrong_ms();
    for (c, row) in cs.iter().zip(scores) {
        let s = &row[0].0;
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.name,
            s.unready_transitions,
            minutes(s.wrong_healthy_ms),
            minutes(s.wrong_unhealthy_ms),
            minutes(s.wrong_ms()),
            ratio(s.wrong_ms() as f64, base as f64),
            per_day(row, days),
        )?;
    }
    writeln!(out)
}
