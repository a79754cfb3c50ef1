//! What `/metrics` shows, checked by Prometheus's own linter: the real fold runs two services of
//! two branches (attempts through every step, failures, certificates, transitions, a failed
//! publish, a failed store sync), every effect goes to an `Exposition`, and `promtool check
//! metrics` reads the text.
//!
//! promtool (2.42) reads the Prometheus text format 0.0.4, not OpenMetrics: fed the OpenMetrics
//! text it parses every line but flags each counter (`# TYPE x counter` above `x_total` samples)
//! as having no help text. So the 0.0.4 text is what it checks clean, and the test holds that
//! both texts carry the same samples.

use crate::support::skip_or_panic;
use readyprobe::control::ControlDoc;
use readyprobe::datum::{SinkId, SinkReport};
use readyprobe::failure::{FailureClass, Step};
use readyprobe::fold::{Effect, Fold, Input, ServiceSetup, Setup};
use readyprobe::probe::{Attempt, Outcome, StepRecord};
use readyprobe::readiness::{Condition, Policy, ReadinessState};
use readyprobe::record::{PublishFailureClass, PublishOutcome, StoreSyncFailureClass};
use readyprobe::serve::exposition::Exposition;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const T0: i64 = 1_764_936_000_000;
const SERVICES: [&str; 2] = ["orders-db", "billing-db"];
const STEPS: [Step; 6] = [
    Step::Resolve,
    Step::Connect,
    Step::Tls,
    Step::Auth,
    Step::Write,
    Step::Verify,
];

fn policy() -> Policy {
    let cond = |threshold_percent| Condition {
        threshold_percent,
        for_: Duration::from_secs(1),
        window: Duration::from_secs(10),
    };
    Policy {
        min_attempts: 2,
        declare_unready: cond(95.0),
        declare_ready: cond(99.0),
        approval_required: false,
        initial: ReadinessState::Unknown,
        definitive: None,
        damping: None,
    }
}

/// An attempt through every step, or failing at `verify` as read-only; with its certificate.
fn attempt(branch: &str, seq: u64, at: i64, ok: bool) -> Box<Attempt> {
    let outcome = if ok {
        Outcome::Success
    } else {
        Outcome::Failure {
            step: Step::Verify,
            class: FailureClass::ServerReadOnly,
            message: "read-only".into(),
        }
    };
    let mut a = Attempt::bare(branch, seq, at - 40, at, outcome);
    a.steps = STEPS
        .iter()
        .enumerate()
        .map(|(i, &step)| StepRecord {
            step,
            duration_ms: 0.7 * (i as f64 + 1.0).powi(3),
            ok: ok || step != Step::Verify,
            class: (!ok && step == Step::Verify).then_some(FailureClass::ServerReadOnly),
        })
        .collect();
    a.certificate_not_after = Some(T0 + 30 * 86_400_000);
    Box::new(a)
}

/// Every effect of a short run of the real fold, fed to an exposition.
fn realistic_exposition() -> Exposition {
    let x = Exposition::new();
    let branches = ["primary".to_string(), "secondary".to_string()];
    let (policy, docs) = (policy(), SERVICES.map(ControlDoc::new));
    let sinks = [SinkId::of("cloudwatch"), SinkId::of("emf")];
    let services: Vec<ServiceSetup> = SERVICES
        .iter()
        .zip(&docs)
        .map(|(service, doc)| ServiceSetup {
            service,
            namespace: "Readyprobe",
            sinks: &sinks,
            policy: &policy,
            branches: &branches,
            store_location: "memory",
            doc,
        })
        .collect();
    let setup = Setup {
        prober: "p1",
        services: &services,
        unavailable: &[],
        sinks: &["cloudwatch", "emf"],
        metrics: readyprobe::contract::MetricsProfile::Control,
    };
    let (mut fold, effects) = Fold::start(setup, T0);
    let observe = |effects: Vec<Effect>, fold: &mut Fold, now: i64| {
        for e in &effects {
            x.observe(e, now);
        }
        // The first batch of each round fails at its first sink (cloudwatch).
        for e in effects {
            if let Effect::Publish(b) = e {
                let report = SinkReport {
                    batch: b.id,
                    sink: b.sinks[0].clone(),
                    datums: b.datums.len(),
                    sent: 0,
                    tries: 3,
                    outcome: PublishOutcome::Failed,
                    class: Some(PublishFailureClass::PublishThrottled),
                    error: Some("throttled".into()),
                };
                let more = fold.handle(Input::SinkReport(report), now);
                more.iter().for_each(|e| x.observe(e, now));
                break;
            }
        }
    };
    observe(effects, &mut fold, T0);
    // Every branch succeeds for 3 s, then orders-db's primary turns read-only.
    for step in 1..=12 {
        let now = T0 + step * 500;
        for (svc, _) in SERVICES.iter().enumerate() {
            for b in &branches {
                let ok = step <= 6 || svc != 0 || b != "primary";
                let input = Input::Attempt(svc, attempt(b, step as u64, now, ok));
                let e = fold.handle(input, now);
                observe(e, &mut fold, now);
            }
        }
        if step % 4 == 0 {
            let e = fold.handle(Input::Tick { last: false }, now);
            observe(e, &mut fold, now);
        }
    }
    let failed_sync = Input::SyncFailed {
        service: 1,
        error: "timed out".into(),
        class: StoreSyncFailureClass::Timeout,
        started: Some(T0),
    };
    let e = fold.handle(failed_sync, T0 + 7000);
    observe(e, &mut fold, T0 + 7000);
    x
}

/// The samples of an exposition text: each line's name, its labels in a set order, its value;
/// numbers (values, `le` bounds) as numbers, since the two formats spell `1` and `1.0` apart.
fn samples(text: &str) -> BTreeSet<String> {
    let number = |v: &str| v.parse::<f64>().map_or(v.to_string(), |n| n.to_string());
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or((l, ""));
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let mut labels: Vec<String> = labels
                .trim_end_matches('}')
                .split(',')
                .map(|kv| match kv.strip_prefix("le=") {
                    Some(le) => format!("le={}", number(le.trim_matches('"'))),
                    None => kv.to_string(),
                })
                .collect();
            labels.sort_unstable();
            format!("{name}{{{}}} {}", labels.join(","), number(value))
        })
        .collect()
}

/// `promtool check metrics` on `text`: its exit code and everything it said.
fn promtool_check(promtool: &str, text: &str) -> (Option<i32>, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(text.as_bytes()).expect("promtool reads");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

/// promtool from the Debian package `prometheus`, or `None` after a skip (a failure under CI).
fn promtool() -> Option<String> {
    let found = ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file());
    if found.is_none() {
        skip_or_panic("promtool (Debian package prometheus) is not installed");
    }
    found.map(str::to_string)
}

#[test]
fn promtool_checks_a_realistic_exposition_clean() {
    let Some(promtool) = promtool() else { return };
    let x = realistic_exposition();
    let (open_metrics, text) = (x.encode(), x.encode_prometheus_text());
    // Realistic: both services' branches, every step, a failure class, the certificate, a
    // transition to unready, a failed publish, a failed store sync.
    for needle in [
        r#"readyprobe_readiness{service="orders-db",branch="primary"} 0"#,
        r#"readyprobe_readiness{service="billing-db",branch="secondary"} 1"#,
        r#"result="failure",class="server_read_only"} 6"#,
        r#"step="verify",le="+Inf"} 12"#,
        r#"readyprobe_certificate_expiry_seconds{service="billing-db",branch="primary"} 1767528000"#,
        r#"readyprobe_publish_failures_total{sink="cloudwatch",target="",class="publish_throttled"}"#,
        r#"readyprobe_store_sync_failures_total{service="billing-db",class="timeout"} 1"#,
        r#"readyprobe_both_branches_unready{service="orders-db"} 0"#,
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let (code, said) = promtool_check(&promtool, &text);
    assert_eq!((code, said.as_str()), (Some(0), ""), "{text}");
    // The OpenMetrics text parses as well; promtool's only complaint is its counters' help.
    assert!(open_metrics.ends_with("# EOF\n"));
    let (code, said) = promtool_check(&promtool, &open_metrics);
    assert_eq!(code, Some(3), "{said}");
    let complaints: BTreeSet<&str> = said.lines().collect();
    let counters = BTreeSet::from([
        "readyprobe_attempts_total no help text",
        "readyprobe_publish_failures_total no help text",
        "readyprobe_store_sync_failures_total no help text",
    ]);
    assert_eq!(complaints, counters, "{said}");
    let (a, b) = (samples(&open_metrics), samples(&text));
    let differ: Vec<_> = a.symmetric_difference(&b).collect();
    assert!(differ.is_empty(), "samples in one text only: {differ:#?}");
    assert!(a.len() > 300, "{}", a.len());
}

#[test]
fn promtool_flags_a_broken_exposition() {
    // The check can fail: a sample without its family's help, a name twice with two types.
    let Some(promtool) = promtool() else { return };
    let x = realistic_exposition();
    let broken = format!(
        "{}# TYPE readyprobe_readiness counter\nreadyprobe_readiness 1\n",
        x.encode_prometheus_text()
    );
    let (code, said) = promtool_check(&promtool, &broken);
    assert_ne!(code, Some(0), "{said}");
}

/// The text between the first "```<lang>" fence after `heading` in `doc` and its closing fence.
fn fenced<'a>(doc: &'a str, heading: &str, lang: &str) -> &'a str {
    let after = &doc[doc.find(heading).expect("heading")..];
    let open = format!("```{lang}\n");
    let body = &after[after.find(&open).expect("fence") + open.len()..];
    &body[..body.find("```").expect("closing fence")]
}

#[test]
fn the_guides_scrape_config_alert_rules_and_queries_pass_promtool() {
    let Some(promtool) = promtool() else { return };
    let doc = include_str!("../../docs/prometheus.md");
    let dir = tempfile::tempdir().unwrap();
    // The name the guide's scrape config loads its rules from, beside it.
    let rules = dir.path().join("readyprobe-alerts.yml");
    std::fs::write(&rules, fenced(doc, "## Alert rules", "yaml")).unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, fenced(doc, "# Prometheus:", "yaml")).unwrap();
    // Each query of the guide (comment lines apart) as a recording rule, so promtool parses it.
    let mut queries = String::from("groups:\n  - name: queries\n    rules:\n");
    let text = fenced(doc, "Queries worth a dashboard", "promql");
    let mut exprs: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        match exprs.last_mut() {
            // A line that starts with a space continues the query above it.
            Some(last) if line.starts_with(' ') => last.push_str(line),
            _ => exprs.push(line.to_string()),
        }
    }
    assert_eq!(exprs.len(), 2, "{exprs:?}");
    for (i, e) in exprs.iter().enumerate() {
        let e = serde_json::to_string(e).unwrap();
        queries.push_str(&format!("      - record: query:{i}\n        expr: {e}\n"));
    }
    let recorded = dir.path().join("queries.yml");
    std::fs::write(&recorded, queries).unwrap();
    for (what, file) in [("rules", &rules), ("rules", &recorded), ("config", &config)] {
        let out = Command::new(&promtool)
            .args(["check", what])
            .arg(file)
            .output()
            .expect("promtool runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {said}", file.display());
    }
}
