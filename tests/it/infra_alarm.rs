//! The CloudFormation template's `Readiness` alarm on the CloudWatch emulator, driven by a real
//! prober: the alarm definition is read from `infra/cloudformation/readyprobe-service.yaml`
//! (parameter defaults, the quorum threshold from its mapping), created through the SDK, and must
//! go to `ALARM` while the branch publishes 0 and back to `OK` once it publishes 1.
//!
//! One departure from the template, on purpose: `Period` 10 instead of 60. The emulator evaluates
//! an alarm once per period, so 60 s would make each state change take minutes; with 10 s the
//! test takes well under a minute on a loaded machine. Everything else is the template's.

use crate::infra_contract::{cfn_doc, cfn_resources, cfn_val};
use crate::support::cloudwatch::{
    MetricQuery, PutAlarms, cloudwatch_or_skip, endpoint, unique_namespace,
};
use crate::support::config::{ConfigBuilder, path};
use crate::support::fixture::{FAST_POLICY, Running};
use crate::support::free_tcp_port;
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::types::{
    ComparisonOperator, Dimension, StandardUnit, StateValue, Statistic,
};
use serde_json::Value;
use std::time::Duration;
use tokio::net::TcpListener;

/// The test's alarm period, seconds; the template's is 60 (see the module comment).
const TEST_PERIOD: i32 = 10;
/// How long each state change may take: several periods, for a loaded 2-core machine.
const STATE_WAIT: Duration = Duration::from_secs(120);

/// The template's alarm, as PutMetricAlarm takes it.
#[derive(Debug)]
struct AlarmDef {
    metric: String,
    /// (name, the parameter's default if any) of each dimension.
    dimensions: Vec<(String, Option<String>)>,
    unit: String,
    statistic: String,
    threshold: f64,
    comparison: String,
    evaluation_periods: i32,
    datapoints_to_alarm: i32,
    treat_missing_data: String,
}

/// `PrimaryReadinessAlarm` of the template, every parameter at its default.
fn template_alarm() -> AlarmDef {
    let doc = cfn_doc();
    let (_, p) = cfn_resources(&doc, "AWS::CloudWatch::Alarm")
        .into_iter()
        .find(|(id, _)| *id == "PrimaryReadinessAlarm")
        .expect("PrimaryReadinessAlarm in the template");
    let text = |v: &Value| -> String {
        cfn_val(&doc, v)
            .default_value()
            .unwrap_or_else(|| panic!("no literal or default for {v}"))
            .to_string()
    };
    let int = |v: &Value| -> i32 { text(v).parse().expect("an integer") };
    let statistic = text(&p["Statistic"]);
    // Threshold: {"Fn::FindInMap": [map, {"Ref": AlarmStatistic}, key]}.
    let find = p["Threshold"]["Fn::FindInMap"]
        .as_array()
        .expect("Threshold from the quorum mapping");
    let threshold = doc["Mappings"][find[0].as_str().unwrap()][&statistic]
        [find[2].as_str().unwrap()]
    .as_f64()
    .expect("a number as threshold for the default statistic");
    AlarmDef {
        metric: text(&p["MetricName"]),
        dimensions: p["Dimensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let name = d["Name"].as_str().unwrap().to_string();
                (
                    name,
                    cfn_val(&doc, &d["Value"])
                        .default_value()
                        .map(str::to_string),
                )
            })
            .collect(),
        unit: text(&p["Unit"]),
        statistic,
        threshold,
        comparison: text(&p["ComparisonOperator"]),
        evaluation_periods: int(&p["EvaluationPeriods"]),
        datapoints_to_alarm: int(&p["DatapointsToAlarm"]),
        treat_missing_data: text(&p["TreatMissingData"]),
    }
}

async fn put_alarm(cw: &Client, name: &str, ns: &str, def: &AlarmDef, values: &[(&str, &str)]) {
    let dims = def.dimensions.iter().map(|(n, _)| {
        let value = values.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        Dimension::builder()
            .name(n)
            .value(value.unwrap_or_else(|| panic!("no value for dimension {n}")))
            .build()
    });
    cw.put_metric_alarm()
        .alarm_name(name)
        .namespace(ns)
        .metric_name(&def.metric)
        .set_dimensions(Some(dims.collect()))
        .unit(StandardUnit::from(def.unit.as_str()))
        .statistic(Statistic::from(def.statistic.as_str()))
        .period(TEST_PERIOD)
        .evaluation_periods(def.evaluation_periods)
        .datapoints_to_alarm(def.datapoints_to_alarm)
        .threshold(def.threshold)
        .comparison_operator(ComparisonOperator::from(def.comparison.as_str()))
        .treat_missing_data(&def.treat_missing_data)
        .send()
        .await
        .expect("PutMetricAlarm");
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
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("alarm {name} not {want:?} within {STATE_WAIT:?}; last state {last:?}");
}

/// Accepts and closes connections on `port` until dropped.
async fn listener(port: u16) -> tokio::task::JoinHandle<()> {
    let l = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the branch's port");
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_alarm_follows_the_published_readiness() {
    let Some(cw) = cloudwatch_or_skip().await else {
        return;
    };
    let def = template_alarm();
    // The branch name is the template's default for the PRIMARY branch.
    let branch = def
        .dimensions
        .iter()
        .find(|(n, _)| n == "Branch")
        .and_then(|(_, d)| d.clone())
        .expect("a Branch dimension with a default");
    let service = "infra-alarm";
    let ns = unique_namespace("infra_alarm");
    let alarm = format!("readyprobe-it-{}", ns.replace('/', "-"));
    let put = PutAlarms::new(&cw);
    put.add(&alarm);

    // Nothing listens on the branch's port yet: every attempt is refused, the branch goes
    // unready and publishes 0.
    let port = free_tcp_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ConfigBuilder::new(dir.path(), service, "stable.localhost")
        .clear("readiness")
        .merge(FAST_POLICY)
        .set("publish", "interval", "1s")
        .set("publish", "namespace", ns.as_str())
        .set(
            "publish",
            "sinks",
            toml::Value::Array(vec!["cloudwatch".into()]),
        )
        .set("publish.cloudwatch", "endpoint_url", endpoint())
        .set("publish.cloudwatch", "region", "us-east-1")
        .set("evidence", "path", path(&dir.path().join("evidence.jsonl")))
        .kind("tcp")
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("probe", "jitter", "0s")
        .branch(&branch, "PRIMARY", "primary.localhost", Some(port))
        .load(&dir.path().join("alarm.toml"));
    let run = Running::start(cfg, None);
    // The alarm is put once a 0 is there to see: the emulator evaluates an alarm when it is put
    // and then once per period from then on, and goes back to OK only when no datum of its last
    // three periods breaches; an alarm put before the prober starts would see its first 0 a
    // period later, and the OK would wait a period more.
    let zero = MetricQuery::new(&ns, &def.metric)
        .dims(&[("Service", service), ("Branch", &branch)])
        .period(TEST_PERIOD)
        .stat("Minimum");
    let seen = zero
        .poll(&cw, STATE_WAIT, |v| v.iter().any(|(_, x)| *x == 0.0))
        .await;
    assert!(
        seen.iter().any(|(_, x)| *x == 0.0),
        "the refused branch never published 0: {seen:?}"
    );
    put_alarm(
        &cw,
        &alarm,
        &ns,
        &def,
        &[("Service", service), ("Branch", &branch)],
    )
    .await;
    wait_state(&cw, &alarm, StateValue::Alarm).await;

    // The branch answers: ready after the ready condition's `for`, publishing 1.
    let server = listener(port).await;
    wait_state(&cw, &alarm, StateValue::Ok).await;

    run.stop().await;
    server.abort();
}
