//! `report::alarms::fetch` against the CloudWatch emulator: an alarm on a branch's `Readiness`
//! series goes OK then ALARM as the test publishes 1 then 0, and the fetched lane shows that
//! change inside the drill window; a branch without an alarm is a problem, not a lane.
//!
//! `Period` 10 (the contract's is 60) so the emulator evaluates every 10 s: see infra_alarm.rs.

use crate::support::cloudwatch::{PutAlarms, cloudwatch_or_skip, unique_namespace};
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{
    ComparisonOperator, Dimension, MetricDatum, StandardUnit, StateValue, Statistic,
};
use readyprobe::report::alarms;
use readyprobe::report::model::Span;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long each state change may take: LocalStack evaluates a Period-10 alarm every 10 s.
const STATE_WAIT: Duration = Duration::from_secs(60);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

fn dims(service: &str, branch: &str) -> Vec<Dimension> {
    vec![
        Dimension::builder().name("Service").value(service).build(),
        Dimension::builder().name("Branch").value(branch).build(),
    ]
}

/// Publishes `value` (read afresh each time) on the series every second until aborted, as a
/// prober would: the alarm then never lacks a datum whatever the evaluation's timing.
fn publisher(
    cw: Client,
    ns: String,
    service: &str,
    branch: &str,
    value: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let dims = dims(service, branch);
    tokio::spawn(async move {
        loop {
            let datum = MetricDatum::builder()
                .metric_name("Readiness")
                .set_dimensions(Some(dims.clone()))
                .value(f64::from_bits(value.load(Ordering::Relaxed)))
                .unit(StandardUnit::None)
                .timestamp(DateTime::from(SystemTime::now()))
                .build();
            cw.put_metric_data()
                .namespace(&ns)
                .metric_data(datum)
                .send()
                .await
                .expect("PutMetricData");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Polls the alarm until it is in `want`; panics after [`STATE_WAIT`] with the last state.
async fn wait_state(cw: &Client, name: &str, want: StateValue) {
    let end = tokio::time::Instant::now() + STATE_WAIT;
    let mut last = None;
    while tokio::time::Instant::now() < end {
        let out = cw.describe_alarms().alarm_names(name).send().await;
        last = out
            .ok()
            .and_then(|o| o.metric_alarms().first().cloned())
            .and_then(|a| a.state_value().cloned());
        if last.as_ref() == Some(&want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("alarm {name} not {want:?} within {STATE_WAIT:?}; last state {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lane_shows_the_alarm_going_to_alarm_within_the_window() {
    let Some(cw) = cloudwatch_or_skip().await else {
        return;
    };
    let ns = unique_namespace("report_alarms");
    let (service, branch) = ("report-alarms", "primary");
    let alarm = format!("readyprobe-it-{}", ns.replace('/', "-"));
    let put = PutAlarms::new(&cw);
    put.add(&alarm);
    let from = now_ms();
    cw.put_metric_alarm()
        .alarm_name(&alarm)
        .namespace(&ns)
        .metric_name("Readiness")
        .set_dimensions(Some(dims(service, branch)))
        .statistic(Statistic::Minimum)
        .period(10)
        .evaluation_periods(1)
        .datapoints_to_alarm(1)
        .threshold(0.5)
        .comparison_operator(ComparisonOperator::LessThanThreshold)
        .treat_missing_data("missing")
        .send()
        .await
        .expect("PutMetricAlarm");

    let value = Arc::new(AtomicU64::new(1f64.to_bits()));
    let publishing = publisher(cw.clone(), ns.clone(), service, branch, value.clone());
    wait_state(&cw, &alarm, StateValue::Ok).await;
    // Held in OK a while, so that the change to ALARM is told apart from the time OK began
    // (which LocalStack puts in the ALARM item's Timestamp).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let zero_at = now_ms();
    value.store(0f64.to_bits(), Ordering::Relaxed);
    wait_state(&cw, &alarm, StateValue::Alarm).await;
    let alarm_seen = now_ms();
    publishing.abort();
    let until = now_ms() + 1_000;
    let window = Span { from, until };

    let branches = vec![branch.to_string(), "secondary".to_string()];
    let got = alarms::fetch(
        &cw,
        &ns,
        service,
        &branches,
        window,
        Duration::from_secs(30),
    )
    .await;
    let got = got.expect("fetch");

    assert_eq!(got.lanes.len(), 1, "{got:#?}");
    let lane = &got.lanes[0];
    assert_eq!(
        (lane.name.as_str(), lane.branch.as_str()),
        (alarm.as_str(), branch)
    );
    // The bands cover the window from its start, without gaps.
    assert_eq!(
        lane.states.first().map(|b| b.span.from),
        Some(from),
        "{lane:#?}"
    );
    assert_eq!(
        lane.states.last().map(|b| b.span.until),
        Some(until),
        "{lane:#?}"
    );
    for w in lane.states.windows(2) {
        assert_eq!(w[0].span.until, w[1].span.from, "{lane:#?}");
        assert_ne!(w[0].state, w[1].state, "{lane:#?}");
    }
    // ... OK (or INSUFFICIENT_DATA before the first evaluation) then ALARM, which began after
    // the test published 0 and before it saw the alarm. The margin: LocalStack's queryDate has
    // whole seconds and is taken just before the evaluation reads the data; OK began at least
    // 5 s before the 0, so a lane timed by the item's Timestamp still fails.
    let states: Vec<&str> = lane.states.iter().map(|b| b.state.as_str()).collect();
    assert!(
        states == ["INSUFFICIENT_DATA", "OK", "ALARM"] || states == ["OK", "ALARM"],
        "{lane:#?}"
    );
    let alarm_from = lane.states.last().map(|b| b.span.from).unwrap_or_default();
    assert!(
        (zero_at - 2_500..=alarm_seen).contains(&alarm_from),
        "ALARM from {alarm_from}, published 0 at {zero_at}, saw ALARM at {alarm_seen}: {lane:#?}"
    );
    // The branch without an alarm is said, not drawn.
    assert!(
        got.problems
            .iter()
            .any(|p| p.contains("no alarm on Readiness") && p.contains("Branch=secondary")),
        "{:?}",
        got.problems
    );
}

/// An endpoint that accepts connections and never answers: the fetch ends at its budget with
/// an error naming the call and the series, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_ends_the_fetch_at_its_budget() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            open.push(s);
        }
    });
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_cloudwatch::config::Credentials::new(
            "test", "test", None, None, "it",
        ))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .load()
        .await;
    let cw = Client::new(&config);
    let window = Span {
        from: now_ms() - 60_000,
        until: now_ms(),
    };
    let started = std::time::Instant::now();
    let err = alarms::fetch(
        &cw,
        "Readyprobe",
        "svc",
        &["primary".to_string()],
        window,
        Duration::from_secs(1),
    )
    .await
    .expect_err("no answer");
    let took = started.elapsed();
    held.abort();
    assert_eq!(err.call, "DescribeAlarmsForMetric", "{err}");
    let line = err.to_string();
    assert!(
        line.contains("Service=svc Branch=primary in namespace Readyprobe")
            && line.contains("1 s budget")
            && !line.contains('\n'),
        "{line}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
