use super::*;
use crate::datum::{
    BranchTick, SinkId, publish_failure_datums, service_unavailable_datum, tick_datums,
};
use crate::fold::Batch;
use crate::probe::attempt::StepRecord;
use crate::probe::{Attempt, Outcome};
use crate::readiness::{ReadinessState, Transition, WindowStats};
use crate::record::{
    Publish, PublishFailureClass, PublishReason, Start, StateSyncFailed, TransitionRecord,
};
use expect_test::expect;

const T: Millis = 1_764_936_000_000;

/// An `attempt` record of `branch`: `steps` as (step, ms, ok), failing at the last not-ok one
/// with `class`.
fn attempt(branch: &str, steps: &[(Step, f64, bool)], class: Option<FailureClass>) -> Record {
    let outcome = match class {
        None => Outcome::Success,
        Some(class) => Outcome::Failure {
            step: steps
                .iter()
                .rev()
                .find(|s| !s.2)
                .map_or(Step::Resolve, |s| s.0),
            class,
            message: "refused".into(),
        },
    };
    let mut a = Attempt::bare(branch, 1, T - 100, T, outcome);
    a.steps = steps
        .iter()
        .map(|&(step, duration_ms, ok)| StepRecord {
            step,
            duration_ms,
            ok,
            class: if ok { None } else { class },
        })
        .collect();
    Record::Attempt(a)
}

fn rec(service: &str, r: Record) -> Effect {
    Effect::Record(T, service.into(), r)
}

fn batch(datums: Vec<Datum>) -> Effect {
    Effect::Publish(Batch {
        id: 1,
        datums,
        reason: PublishReason::Tick,
        sinks: vec![SinkId::of("cloudwatch")],
        namespace: "Readyprobe".into(),
    })
}

fn tick(branch: &str, readiness: Option<f64>) -> BranchTick {
    BranchTick {
        branch: branch.into(),
        readiness,
        is_ready: readiness == Some(1.0),
        is_known: readiness.is_some(),
        success_rate: Some(100.0),
        attempts: 7,
        failed: 2,
        step_durations: vec![("connect", vec![3.0])],
        cert_not_after: Some(T + 86_400_000),
    }
}

fn window() -> WindowStats {
    WindowStats {
        window_ms: 60_000,
        finished: 3,
        failed: 3,
        success_rate_percent: Some(0.0),
        failure_classes: vec![(FailureClass::ServerReadOnly, 3)],
    }
}

fn transition(branch: &str, to: ReadinessState) -> Record {
    Record::Transition(TransitionRecord {
        branch: branch.into(),
        transition: Transition {
            from: ReadinessState::Ready,
            to,
            at: T,
            reason: "test".into(),
            held_since: Some(T - 30_000),
            unready_window: window(),
            ready_window: window(),
            damping: None,
        },
        published: to.published_value(),
        override_: None,
        batch: Some(2),
    })
}

fn failed_publish(sink: &str, target: Option<&str>, class: PublishFailureClass) -> Record {
    let p = Publish::new(
        sink,
        PublishReason::Tick,
        5,
        0,
        3,
        PublishOutcome::Failed,
        None,
    );
    Record::Publish(
        p.with_class(Some(class))
            .with_target(target.map(str::to_string)),
    )
}

fn sync_failed(class: StoreSyncFailureClass) -> Record {
    Record::StateSyncFailed(StateSyncFailed {
        error: "disk full".into(),
        class: Some(class),
        started_at: Some(T - 5),
    })
}

fn feed(x: &Exposition, effects: &[Effect]) {
    for e in effects {
        x.observe(e, T);
    }
}

/// The series lines (no comments) of `x` naming `name`.
fn lines(x: &Exposition, name: &str) -> Vec<String> {
    let mut v: Vec<String> = x
        .encode()
        .lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(name))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// One series per family: the text, exact.
#[test]
fn golden_small_exposition() {
    let x = Exposition::new();
    let tls = [(Step::Tls, 42.0, false)];
    let mut expired = attempt("primary", &tls, Some(FailureClass::TlsExpired));
    if let Record::Attempt(a) = &mut expired {
        a.certificate_not_after = Some(1_764_000_000_500);
    }
    let timeout = PublishFailureClass::PublishTimeout;
    feed(
        &x,
        &[
            rec("orders", expired),
            batch(tick_datums("orders", &[tick("primary", Some(1.0))], T)),
            rec("orders", transition("primary", ReadinessState::Unready)),
            rec("*", failed_publish("cloudwatch", Some("eu"), timeout)),
            rec("orders", sync_failed(StoreSyncFailureClass::Io)),
        ],
    );
    expect![[r##"
        # HELP readyprobe_readiness Published readiness of a branch: 1 ready, 0 unready or pending approval (absent while unknown); what the CloudWatch Readiness metric carries.
        # TYPE readyprobe_readiness gauge
        readyprobe_readiness{service="orders",branch="primary"} 0
        # HELP readyprobe_attempts Finished probe attempts of a branch, by result and failure class (class empty on success).
        # TYPE readyprobe_attempts counter
        readyprobe_attempts_total{service="orders",branch="primary",result="failure",class="tls_expired"} 1
        # HELP readyprobe_step_duration_seconds Duration of each step of a branch's attempts (resolve, connect, tls, auth, write, verify), failed steps included.
        # TYPE readyprobe_step_duration_seconds histogram
        # UNIT readyprobe_step_duration_seconds seconds
        readyprobe_step_duration_seconds_sum{service="orders",branch="primary",step="tls"} 0.042
        readyprobe_step_duration_seconds_count{service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="0.001",service="orders",branch="primary",step="tls"} 0
        readyprobe_step_duration_seconds_bucket{le="0.0025",service="orders",branch="primary",step="tls"} 0
        readyprobe_step_duration_seconds_bucket{le="0.005",service="orders",branch="primary",step="tls"} 0
        readyprobe_step_duration_seconds_bucket{le="0.01",service="orders",branch="primary",step="tls"} 0
        readyprobe_step_duration_seconds_bucket{le="0.025",service="orders",branch="primary",step="tls"} 0
        readyprobe_step_duration_seconds_bucket{le="0.05",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="0.1",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="0.25",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="0.5",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="1.0",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="2.5",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="5.0",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="10.0",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="30.0",service="orders",branch="primary",step="tls"} 1
        readyprobe_step_duration_seconds_bucket{le="+Inf",service="orders",branch="primary",step="tls"} 1
        # HELP readyprobe_certificate_expiry_seconds Unix time of the notAfter of the leaf certificate the branch last presented.
        # TYPE readyprobe_certificate_expiry_seconds gauge
        # UNIT readyprobe_certificate_expiry_seconds seconds
        readyprobe_certificate_expiry_seconds{service="orders",branch="primary"} 1764000000
        # HELP readyprobe_heartbeat_timestamp_seconds Unix time of the service's latest publish tick.
        # TYPE readyprobe_heartbeat_timestamp_seconds gauge
        # UNIT readyprobe_heartbeat_timestamp_seconds seconds
        readyprobe_heartbeat_timestamp_seconds{service="orders"} 1764936000.0
        # HELP readyprobe_both_branches_unready 1 when every branch of the service is known and none is ready, so Route 53 fails open; 0 otherwise.
        # TYPE readyprobe_both_branches_unready gauge
        readyprobe_both_branches_unready{service="orders"} 0
        # HELP readyprobe_publish_failures Batches a sink failed to send after every try, by target (empty: the sink's own) and failure class.
        # TYPE readyprobe_publish_failures counter
        readyprobe_publish_failures_total{sink="cloudwatch",target="eu",class="publish_timeout"} 1
        # HELP readyprobe_store_sync_failures Failed syncs of the service's control document with the state store, by failure class.
        # TYPE readyprobe_store_sync_failures counter
        readyprobe_store_sync_failures_total{service="orders",class="io"} 1
        # EOF
    "##]].assert_eq(&x.encode());
}

#[test]
fn counters_come_only_from_records() {
    let x = Exposition::new();
    let mut datums = tick_datums("orders", &[tick("primary", Some(1.0))], T);
    datums.extend(publish_failure_datums(
        "orders",
        &[(PublishFailureClass::Publish5xx, 4)],
        T,
    ));
    // The same tick as two batches (the control profile's and otlp's full one).
    feed(&x, &[batch(datums.clone()), batch(datums)]);
    let text = x.encode();
    assert!(!text.contains("readyprobe_attempts_total{"), "{text}");
    assert!(
        !text.contains("readyprobe_publish_failures_total{"),
        "{text}"
    );
    assert!(
        !text.contains("readyprobe_step_duration_seconds_count{"),
        "{text}"
    );
    assert_eq!(
        lines(&x, "readyprobe_readiness"),
        [r#"readyprobe_readiness{service="orders",branch="primary"} 1"#]
    );
    // A sent batch is no failure; a failed one counts once per record.
    let sent = Publish::new(
        "emf",
        PublishReason::Tick,
        5,
        5,
        1,
        PublishOutcome::Sent,
        None,
    );
    feed(
        &x,
        &[
            rec("*", Record::Publish(sent)),
            rec(
                "*",
                failed_publish("emf", None, PublishFailureClass::Publish5xx),
            ),
            rec(
                "*",
                failed_publish("emf", None, PublishFailureClass::Publish5xx),
            ),
        ],
    );
    assert_eq!(
        lines(&x, "readyprobe_publish_failures"),
        [r#"readyprobe_publish_failures_total{sink="emf",target="",class="publish_5xx"} 2"#]
    );
}

#[test]
fn a_transition_moves_the_readiness_gauge_at_once() {
    let x = Exposition::new();
    feed(
        &x,
        &[batch(tick_datums(
            "orders",
            &[tick("primary", Some(1.0))],
            T,
        ))],
    );
    feed(
        &x,
        &[rec(
            "orders",
            transition("primary", ReadinessState::Unready),
        )],
    );
    assert_eq!(
        lines(&x, "readyprobe_readiness"),
        [r#"readyprobe_readiness{service="orders",branch="primary"} 0"#]
    );
    feed(
        &x,
        &[rec(
            "orders",
            transition("primary", ReadinessState::Unknown),
        )],
    );
    assert!(lines(&x, "readyprobe_readiness").is_empty());
}

#[test]
fn fail_open_heartbeat_and_unavailable_gauges() {
    let x = Exposition::new();
    let ticks = [tick("primary", Some(0.0)), tick("secondary", Some(0.0))];
    let mut datums = tick_datums("orders", &ticks, T + 250);
    datums.push(service_unavailable_datum("billing", T));
    feed(&x, &[batch(datums)]);
    assert_eq!(
        lines(&x, "readyprobe_both_branches_unready"),
        [r#"readyprobe_both_branches_unready{service="orders"} 1"#]
    );
    assert_eq!(
        lines(&x, "readyprobe_heartbeat_timestamp_seconds"),
        [r#"readyprobe_heartbeat_timestamp_seconds{service="orders"} 1764936000.25"#]
    );
    assert_eq!(
        lines(&x, "readyprobe_service_unavailable"),
        [r#"readyprobe_service_unavailable{service="billing"} 1"#]
    );
    // A reload that lets it start: it is no longer unavailable.
    feed(&x, &[rec("billing", Record::Start(Start::default()))]);
    assert!(lines(&x, "readyprobe_service_unavailable").is_empty());
}

fn reload(removed: &[&str], unavailable: &[&str]) -> Record {
    Record::Reload(Reload {
        applied: true,
        added: vec![],
        removed: removed.iter().map(|s| s.to_string()).collect(),
        changed: vec![],
        unavailable: unavailable.iter().map(|s| s.to_string()).collect(),
        problems: vec![],
        removed_branches: Vec::new(),
    })
}

/// The lines of `text`, sorted (a family's series come in no set order).
fn sorted(text: &str) -> String {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort();
    v.join("\n")
}

/// Every series of service `a`, and of `b`.
fn two_services(x: &Exposition) {
    for s in ["a", "b"] {
        let steps = [(Step::Resolve, 1.0, true), (Step::Tls, 9.0, false)];
        let mut failed = attempt("primary", &steps, Some(FailureClass::TlsExpired));
        if let Record::Attempt(a) = &mut failed {
            a.certificate_not_after = Some(T - 1000);
        }
        feed(
            x,
            &[
                rec(s, failed),
                rec(s, attempt("secondary", &steps[..1], None)),
                rec(s, sync_failed(StoreSyncFailureClass::Timeout)),
                batch(tick_datums(
                    s,
                    &[tick("primary", Some(0.0)), tick("secondary", None)],
                    T,
                )),
            ],
        );
    }
}

#[test]
fn a_removed_service_loses_every_series() {
    let x = Exposition::new();
    two_services(&x);
    let before = sorted(&x.encode());
    assert!(before.contains(r#"service="a""#), "{before}");
    feed(&x, &[rec("*", reload(&["a"], &[]))]);
    // A late attempt of its stopped loop brings nothing back.
    feed(
        &x,
        &[rec(
            "a",
            attempt("primary", &[(Step::Resolve, 1.0, true)], None),
        )],
    );
    let after = sorted(&x.encode());
    assert!(!after.contains(r#"service="a""#), "{after}");
    // b's series are all kept: the same lines with `a`'s removed.
    let kept: Vec<&str> = before
        .lines()
        .filter(|l| !l.contains(r#"service="a""#))
        .collect();
    assert_eq!(after.lines().collect::<Vec<_>>(), kept);
    // Started again by a later reload: its series come back.
    feed(&x, &[rec("a", Record::Start(Start::default()))]);
    feed(
        &x,
        &[rec(
            "a",
            attempt("primary", &[(Step::Resolve, 1.0, true)], None),
        )],
    );
    assert!(x.encode().contains(
        r#"readyprobe_attempts_total{service="a",branch="primary",result="success",class=""} 1"#
    ));
}

#[test]
fn a_removed_service_left_unavailable_by_a_later_reload_shows_so() {
    let x = Exposition::new();
    feed(
        &x,
        &[rec("*", reload(&["a"], &[])), rec("*", reload(&[], &["a"]))],
    );
    feed(&x, &[batch(vec![service_unavailable_datum("a", T)])]);
    assert_eq!(
        lines(&x, "readyprobe_service_unavailable"),
        [r#"readyprobe_service_unavailable{service="a"} 1"#]
    );
}

#[test]
fn a_step_duration_that_is_not_finite_is_skipped() {
    let x = Exposition::new();
    let steps = [(Step::Resolve, f64::NAN, true), (Step::Connect, -1.0, true)];
    feed(&x, &[rec("orders", attempt("primary", &steps, None))]);
    assert!(lines(&x, "readyprobe_step_duration").is_empty());
    assert_eq!(lines(&x, "readyprobe_attempts").len(), 1);
}

#[test]
fn buckets_rise_from_a_millisecond_to_thirty_seconds() {
    assert_eq!(STEP_DURATION_BUCKETS.first(), Some(&0.001));
    assert_eq!(STEP_DURATION_BUCKETS.last(), Some(&30.0));
    assert!(STEP_DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn every_family_has_help_and_the_text_ends_in_eof() {
    let x = Exposition::new();
    two_services(&x);
    let text = x.encode();
    assert!(text.ends_with("# EOF\n"));
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap_or_default();
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
    let plain = x.encode_prometheus_text();
    assert!(!plain.contains("# EOF") && plain.contains("readyprobe_attempts_total{"));
}

#[test]
fn no_message_or_error_text_reaches_the_exposition() {
    let x = Exposition::new();
    let secret = "hunter2-s3cr3t";
    let mut a = attempt(
        "primary",
        &[(Step::Auth, 5.0, false)],
        Some(FailureClass::AuthDenied),
    );
    if let Record::Attempt(a) = &mut a {
        a.outcome = Outcome::Failure {
            step: Step::Auth,
            class: FailureClass::AuthDenied,
            message: format!("denied for password {secret}"),
        };
    }
    let p = Publish::new(
        "emf",
        PublishReason::Tick,
        1,
        0,
        1,
        PublishOutcome::Failed,
        Some(secret.into()),
    );
    let sync = Record::StateSyncFailed(StateSyncFailed {
        error: secret.into(),
        class: Some(StoreSyncFailureClass::Io),
        started_at: None,
    });
    feed(
        &x,
        &[
            rec("orders", a),
            rec("*", Record::Publish(p)),
            rec("orders", sync),
        ],
    );
    let text = x.encode();
    assert!(text.contains(r#"class="auth_denied""#), "{text}");
    assert!(!text.contains(secret), "{text}");
}

#[test]
fn a_refused_reload_removes_nothing() {
    let x = Exposition::new();
    two_services(&x);
    let before = sorted(&x.encode());
    let mut refused = reload(&["a"], &[]);
    if let Record::Reload(r) = &mut refused {
        r.applied = false;
    }
    feed(&x, &[rec("*", refused)]);
    assert_eq!(sorted(&x.encode()), before);
}

#[test]
fn an_exposition_is_shared_between_threads() {
    fn shared<T: Send + Sync + std::fmt::Debug + Default>() {}
    shared::<Exposition>();
}

/// Every metric whose datums set a series here is one the `control` profile keeps, so no
/// metrics profile can starve `/metrics`; a datum of any other contract metric moves nothing.
#[test]
fn every_metric_read_from_datums_is_in_the_control_profile() {
    for m in FROM_DATUMS {
        assert!(contract::CONTROL.contains(&m), "{}", m.name);
    }
    let empty = Exposition::new().encode();
    for m in contract::METRICS {
        let names = [
            contract::SERVICE,
            contract::BRANCH,
            contract::STEP,
            contract::CLASS,
        ];
        let d = Datum {
            metric: m.name,
            dimensions: names.iter().map(|n| (*n, "x".to_string())).collect(),
            value: Value::Single(1.0),
            unit: m.unit,
            timestamp: T,
            since: None,
        };
        let x = Exposition::new();
        feed(&x, &[batch(vec![d])]);
        let moved = x.encode() != empty;
        let read = FROM_DATUMS.contains(m);
        assert_eq!(moved, read, "{}", m.name);
    }
}

/// Two scrapes list a family's series alike, in the order of their labels (service, branch,
/// then step or result and class), whatever order the effects came in; a histogram's lines
/// stay together.
#[test]
fn series_come_in_the_order_of_their_labels() {
    let x = Exposition::new();
    let branches: Vec<String> = (0..24).rev().map(|i| format!("b{i:02}")).collect();
    let ticks: Vec<BranchTick> = branches.iter().map(|b| tick(b, Some(1.0))).collect();
    feed(&x, &[batch(tick_datums("orders-db", &ticks, T))]);
    let steps = [Step::Verify, Step::Connect, Step::Resolve, Step::Auth];
    for b in &branches {
        let steps: Vec<_> = steps.iter().map(|s| (*s, 2.0, true)).collect();
        feed(&x, &[rec("orders-db", attempt(b, &steps, None))]);
    }
    let text = x.encode();
    assert_eq!(text, x.encode());
    let only = |prefix: &str| -> Vec<String> {
        let found = text.lines().filter(|l| l.starts_with(prefix));
        found.map(str::to_string).collect()
    };
    let readiness = only("readyprobe_readiness{");
    let mut sorted = readiness.clone();
    sorted.sort();
    assert_eq!(readiness.len(), 24);
    assert_eq!(readiness, sorted);
    let counts = only("readyprobe_step_duration_seconds_count{");
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(counts.len(), 24 * 4);
    assert_eq!(counts, sorted);
    // Each series' buckets, sum and count in one run of lines.
    let series: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("readyprobe_step_duration_seconds"))
        .map(|l| l.split_once('{').unwrap().1.split('}').next().unwrap())
        .map(|l| l.split(',').filter(|p| !p.starts_with("le=")).collect())
        .collect();
    let mut runs = series.clone();
    runs.dedup();
    assert_eq!(runs.len(), 24 * 4, "{runs:?}");
}
