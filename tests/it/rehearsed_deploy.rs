//! The rehearsed deploy: `infra/cloudformation/readyprobe-service.yaml`, as shipped, deployed by
//! LocalStack's CloudFormation (alarms, health checks, failover records), the real binary
//! publishing into it, then `readyprobe check --aws` must find no violation. A second stack of
//! the same template with one alarm setting changed (the PRIMARY alarm's `Period` 60 → 30) must
//! show exactly that violation. So an edit of the template that breaks the contract fails here,
//! end to end, and not only in the static reading of `infra_contract.rs`. Then the cross-region
//! layout: the template deployed in two regions (`AlarmsOnly` in one, `OtherAlarmRegion` in the
//! other), its records following the `CALCULATED` checks.
//!
//! What the emulator cannot represent, each asserted so that this test notices when it can:
//! - LocalStack's Route 53 keeps a health check but drops its `AlarmIdentifier` and
//!   `InsufficientDataHealthStatus`: the test asserts they are absent, then answers
//!   `ListHealthChecks` through the `check_aws` fixture with the deployed health checks' ids,
//!   `Inverted` and `Disabled` as LocalStack holds them, and those two settings as the template
//!   gives them, evaluated over the stack's own parameters and resources.
//! - The hosted zone is private without a VPC association (EC2 is not emulated), so the config
//!   names it by `route53.hosted_zone_id`.
//! - The alarms' state and Route 53's failover answer follow nothing here (`infra_alarm.rs` drives
//!   an alarm's state).

use crate::check_aws::{self, Hc, Mode, Route53Fixture};
use crate::infra_contract::CFN;
use crate::support::{self, cloudwatch};
use aws_sdk_cloudformation::types::{Parameter, StackStatus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a stack may take to create on a loaded machine.
const STACK_WAIT: Duration = Duration::from_secs(90);
/// How long the prober may take to publish a Readiness datum for every branch.
const DATUM_WAIT: Duration = Duration::from_secs(60);
const INSUFFICIENT_DATA: &str = "LastKnownStatus";

/// The prober process, killed when dropped.
struct Prober(Child);

impl Drop for Prober {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The template as a JSON value.
fn template() -> Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CFN))
        .expect("read the service template");
    serde_yaml_ng::from_str(&text).expect("the service template is YAML")
}

/// One deployed stack: its parameters and its resources' physical ids by logical id.
pub(crate) struct Stack {
    params: BTreeMap<String, String>,
    resources: BTreeMap<String, String>,
}

impl Stack {
    /// A template value the emulator drops, evaluated over this stack (`infra_contract::cfn_eval`):
    /// its parameters (the template's defaults for those not given), its resources' physical ids
    /// and `AWS::Region`.
    fn eval(&self, doc: &Value, v: &Value) -> String {
        let mut values: BTreeMap<&str, Value> = BTreeMap::new();
        for (k, p) in doc["Parameters"].as_object().expect("Parameters") {
            if let Some(d) = p.get("Default") {
                values.insert(k, d.clone());
            }
        }
        for (k, v) in self.params.iter().chain(&self.resources) {
            values.insert(k, Value::from(v.as_str()));
        }
        values.insert("AWS::Region", Value::from(cloudwatch::REGION));
        match crate::infra_contract::cfn_eval(doc, v, &values) {
            Value::String(s) => s,
            other => panic!("{v} is not text here: {other}"),
        }
    }
}

/// Creates the stack from `body` and waits for CREATE_COMPLETE; panics with its events otherwise.
pub(crate) async fn deploy(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    body: String,
    params: BTreeMap<String, String>,
) -> Stack {
    let parameters = params.iter().map(|(k, v)| {
        Parameter::builder()
            .parameter_key(k)
            .parameter_value(v)
            .build()
    });
    cfn.create_stack()
        .stack_name(name)
        .template_body(body)
        .set_parameters(Some(parameters.collect()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateStack {name}: {e:?}"));
    let deadline = tokio::time::Instant::now() + STACK_WAIT;
    loop {
        let out = cfn.describe_stacks().stack_name(name).send().await;
        let status = out
            .ok()
            .and_then(|o| o.stacks().first().and_then(|s| s.stack_status().cloned()));
        match status {
            Some(StackStatus::CreateComplete) => break,
            Some(StackStatus::CreateInProgress) | None
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            other => {
                let events = cfn.describe_stack_events().stack_name(name).send().await;
                let events: Vec<String> = events
                    .map(|e| {
                        e.stack_events()
                            .iter()
                            .map(|e| {
                                format!(
                                    "{:?} {:?} {:?}",
                                    e.logical_resource_id(),
                                    e.resource_status(),
                                    e.resource_status_reason()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                panic!(
                    "stack {name}: {other:?}, not CREATE_COMPLETE:\n{}",
                    events.join("\n")
                );
            }
        }
    }
    let res = cfn
        .describe_stack_resources()
        .stack_name(name)
        .send()
        .await
        .expect("DescribeStackResources");
    let resources = res
        .stack_resources()
        .iter()
        .filter_map(|r| {
            Some((
                r.logical_resource_id()?.to_string(),
                r.physical_resource_id()?.to_string(),
            ))
        })
        .collect();
    Stack { params, resources }
}

/// The stack's health checks as `ListHealthChecks` would give them: id, `Inverted` and
/// `Disabled` from LocalStack (after asserting that it dropped the alarm and the
/// insufficient-data status), the alarm, region and status from the template.
async fn health_checks(r53: &aws_sdk_route53::Client, doc: &Value, stack: &Stack) -> Vec<Hc> {
    let mut out = Vec::new();
    for (id, r) in doc["Resources"].as_object().expect("Resources") {
        if r["Type"] != "AWS::Route53::HealthCheck" {
            continue;
        }
        let Some(hc_id) = stack.resources.get(id) else {
            // Branches in two regions only (OtherAlarmRegion), which this stack is not.
            assert_eq!(r["Condition"], "RoutesCrossRegion", "{id} not deployed");
            continue;
        };
        let held = r53
            .get_health_check()
            .health_check_id(hc_id)
            .send()
            .await
            .expect("GetHealthCheck");
        let cfg = held
            .health_check()
            .and_then(|h| h.health_check_config())
            .expect("a health check config");
        assert_eq!(cfg.r#type().as_str(), "CLOUDWATCH_METRIC", "{id}");
        assert!(
            cfg.alarm_identifier().is_none() && cfg.insufficient_data_health_status().is_none(),
            "LocalStack now keeps a health check's AlarmIdentifier or \
             InsufficientDataHealthStatus: read them from it and drop the fixture"
        );
        let want = &r["Properties"]["HealthCheckConfig"];
        let status = match stack
            .eval(doc, &want["InsufficientDataHealthStatus"])
            .as_str()
        {
            "Healthy" => "Healthy",
            "Unhealthy" => "Unhealthy",
            "LastKnownStatus" => "LastKnownStatus",
            other => panic!("{id}: InsufficientDataHealthStatus {other}"),
        };
        out.push(Hc {
            id: hc_id.clone(),
            alarm: stack.eval(doc, &want["AlarmIdentifier"]["Name"]),
            region: stack.eval(doc, &want["AlarmIdentifier"]["Region"]),
            insufficient_data: Some(status),
            inverted: cfg.inverted().unwrap_or(false),
            disabled: cfg.disabled().unwrap_or(false),
            children: vec![],
            threshold: 2,
        });
    }
    out
}

/// Accepts and closes connections until aborted; its port.
async fn branch_listener() -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    (port, task)
}

/// The prober's config: both services, their branches on the two listeners.
fn config(
    dir: &Path,
    ns: &str,
    zone: &str,
    services: &[(&str, &str)],
    ports: (u16, u16),
    r53: &str,
) -> PathBuf {
    let mut s = format!(
        r#"prober_id = "rehearsal"
state_dir = {state:?}

[publish]
interval = "1s"
sinks = ["cloudwatch"]
namespace = "{ns}"

[publish.cloudwatch]
region = "{region}"
endpoint_url = "{cw}"
operation_timeout = "5s"

[route53]
endpoint_url = "{r53}"
hosted_zone_id = "{zone}"
insufficient_data_health_status = "{INSUFFICIENT_DATA}"

[evidence]
path = {evidence:?}

{policy}

[probe]
kind = "tcp"
interval = "300ms"
timeout = "250ms"
jitter = "0s"
"#,
        state = dir.join("state"),
        evidence = dir.join("evidence.jsonl"),
        region = cloudwatch::REGION,
        cw = cloudwatch::endpoint(),
        policy = support::fixture::FAST_POLICY,
    );
    for (name, stable) in services {
        s.push_str(&format!(
            r#"
[[service]]
name = "{name}"
stable_name = "{stable}"

[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "primary.localhost"
port = {p}

[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.localhost"
port = {s}
"#,
            p = ports.0,
            s = ports.1,
        ));
    }
    let path = dir.join("rehearsal.toml");
    std::fs::write(&path, s).expect("write config");
    path
}

/// The two services' stacks in one hosted zone: the template as shipped (`clean-<uniq>`) and
/// with the PRIMARY alarm's `Period` 30 (`changed-<uniq>`); with the zone's name and id.
async fn deploy_both(
    cfn: &aws_sdk_cloudformation::Client,
    r53: &aws_sdk_route53::Client,
    ns: &str,
    uniq: &str,
) -> (Vec<(String, Stack)>, String, String) {
    let zone_name = format!("r{uniq}.rehearsal.internal");
    let zone = check_aws::create_zone(r53, &zone_name).await;
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CFN))
        .expect("read the service template");
    let mut changed = template();
    let period = &mut changed["Resources"]["PrimaryReadinessAlarm"]["Properties"]["Period"];
    assert_eq!(*period, 60, "the shipped Period");
    *period = 30.into();

    let mut stacks = Vec::new();
    for (prefix, body) in [("clean", shipped), ("changed", changed.to_string())] {
        let service = format!("{prefix}-{uniq}");
        let params: BTreeMap<String, String> = [
            ("ServiceName", service.clone()),
            ("Namespace", ns.to_string()),
            ("PrimaryEndpoint", "primary.localhost".into()),
            ("SecondaryEndpoint", "secondary.localhost".into()),
            ("StableName", format!("{service}.{zone_name}")),
            ("HostedZoneId", zone.clone()),
            ("InsufficientDataHealthStatus", INSUFFICIENT_DATA.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let stack = deploy(cfn, &format!("readyprobe-{service}"), body, params).await;
        stacks.push((service, stack));
    }
    (stacks, zone_name, zone)
}

/// Runs the real binary on `cfg` until it has published a `Readiness` datum for every branch
/// of `services`.
async fn publish(cw: &aws_sdk_cloudwatch::Client, cfg: &Path, ns: &str, services: &[&str]) {
    let log = cfg.with_extension("log");
    let _prober = Prober(
        Command::new(env!("CARGO_BIN_EXE_readyprobe"))
            .args(["run", "--duration", "120s", "--config"])
            .arg(cfg)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the prober's log"))
            .spawn()
            .expect("spawn readyprobe run"),
    );
    for service in services {
        for branch in ["primary", "secondary"] {
            let q = cloudwatch::MetricQuery::new(ns, "Readiness")
                .dims(&[("Service", service), ("Branch", branch)]);
            let values = q.poll(cw, DATUM_WAIT, |v| !v.is_empty()).await;
            if values.is_empty() {
                let text = std::fs::read(&log).unwrap_or_default();
                let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(4000)..]);
                panic!(
                    "no Readiness datum for {service}/{branch}; the prober's stderr ends:\n{tail}"
                );
            }
        }
    }
}

/// `check --aws --format json`: its exit code, report, and findings as (service, branch, rule).
fn check_aws(cfg: &Path) -> (Option<i32>, Value, Vec<(String, String, String)>) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["check", "--aws", "--format", "json", "--config"])
        .arg(cfg)
        .env("AWS_REGION", cloudwatch::REGION)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("run readyprobe check --aws");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "check --aws JSON: {e}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let found = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("-").to_string();
            (s("service"), s("branch"), s("rule"))
        })
        .collect();
    (out.status.code(), report, found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_template_deploys_and_passes_check_aws() {
    let Some(cw) = cloudwatch::cloudwatch_or_skip().await else {
        return;
    };
    let cfn = aws_sdk_cloudformation::Client::new(&cloudwatch::sdk_config().await);
    if let Err(e) = cfn.list_stacks().send().await {
        support::skip_or_panic(&format!(
            "LocalStack's CloudFormation does not answer ({e:?}); LOCALSTACK_SERVICES in .ci/localstack.sh"
        ));
        return;
    }
    let r53 = check_aws::route53_client(&cloudwatch::endpoint());
    let ns = cloudwatch::unique_namespace("rehearsed_deploy");
    // "<pid>-<nanos>-<n>": unique across runs, so no stack an earlier run left can collide.
    let uniq = ns.rsplit('/').next().expect("a namespace").to_string();
    let (stacks, zone_name, zone) = deploy_both(&cfn, &r53, &ns, &uniq).await;
    let doc = template();
    let mut hcs = Vec::new();
    for (_, s) in &stacks {
        hcs.extend(health_checks(&r53, &doc, s).await);
    }
    let route53 = Route53Fixture::start(hcs, Mode::Answer, cloudwatch::endpoint()).await;

    // The real binary publishes both services' readiness into the emulator.
    let (p_port, p_task) = branch_listener().await;
    let (s_port, s_task) = branch_listener().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<(String, String)> = stacks
        .iter()
        .map(|(s, _)| (s.clone(), format!("{s}.{zone_name}")))
        .collect();
    let services: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let cfg = config(
        dir.path(),
        &ns,
        &zone,
        &services,
        (p_port, s_port),
        &route53.url,
    );
    let service_names: Vec<&str> = services.iter().map(|(s, _)| *s).collect();
    publish(&cw, &cfg, &ns, &service_names).await;
    p_task.abort();
    s_task.abort();

    let (code, report, found) = check_aws(&cfg);
    let changed = &stacks[1].0;
    assert_eq!(
        found,
        [(changed.clone(), "primary".to_string(), "period".to_string())],
        "the shipped template must pass and the changed Period be the one violation: {report:#}"
    );
    assert_eq!(code, Some(1), "{report:#}");

    for (s, _) in &stacks {
        let _ = cfn
            .delete_stack()
            .stack_name(format!("readyprobe-{s}"))
            .send()
            .await;
    }
}

/// The region B of [`the_cross_region_layout_deploys_in_two_regions`].
const REGION_B: &str = "us-west-2";

/// The cross-region layout deployed by LocalStack's CloudFormation in two regions: the template
/// with `AlarmsOnly` in region B makes the alarms and nothing else; with `OtherAlarmRegion` = B in
/// region A it makes A's alarms, per branch a check on A's alarm, one on B's and a `CALCULATED`
/// one of the two, and the records follow the `CALCULATED` checks. LocalStack keeps a
/// `CALCULATED` check's threshold but drops its children (asserted, so that this test notices
/// when it keeps them); `infra_contract.rs` checks them in the template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cross_region_layout_deploys_in_two_regions() {
    let Some(_cw) = cloudwatch::cloudwatch_or_skip().await else {
        return;
    };
    let conf = cloudwatch::sdk_config().await;
    let cfn_a = aws_sdk_cloudformation::Client::new(&conf);
    if let Err(e) = cfn_a.list_stacks().send().await {
        support::skip_or_panic(&format!(
            "LocalStack's CloudFormation does not answer ({e:?})"
        ));
        return;
    }
    let region_b = aws_config::Region::new(REGION_B);
    let cfn_b = aws_sdk_cloudformation::Client::from_conf(
        aws_sdk_cloudformation::config::Builder::from(&conf)
            .region(region_b.clone())
            .build(),
    );
    let r53 = check_aws::route53_client(&cloudwatch::endpoint());
    let ns = cloudwatch::unique_namespace("cross_region");
    let uniq = ns.rsplit('/').next().expect("a namespace").to_string();
    let zone_name = format!("x{uniq}.rehearsal.internal");
    let zone = check_aws::create_zone(&r53, &zone_name).await;
    let service = format!("regions-{uniq}");
    let params = |extra: (&str, &str)| -> BTreeMap<String, String> {
        [
            ("ServiceName", service.as_str()),
            ("Namespace", ns.as_str()),
            ("PrimaryEndpoint", "primary.localhost"),
            ("SecondaryEndpoint", "secondary.localhost"),
            ("StableName", &format!("{service}.{zone_name}")),
            ("HostedZoneId", &zone),
            ("InsufficientDataHealthStatus", INSUFFICIENT_DATA),
            extra,
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    let body = || std::fs::read_to_string(crate::infra_contract::repo_file(CFN)).expect("template");
    let stack = format!("readyprobe-{service}");
    let b = deploy(&cfn_b, &stack, body(), params(("AlarmsOnly", "true"))).await;
    let a = deploy(
        &cfn_a,
        &stack,
        body(),
        params(("OtherAlarmRegion", REGION_B)),
    )
    .await;

    let doc = template();
    let kinds = |s: &Stack| -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for id in s.resources.keys() {
            let t = doc["Resources"][id]["Type"]
                .as_str()
                .expect("a type")
                .to_string();
            *out.entry(t).or_default() += 1;
        }
        out
    };
    let want_b = BTreeMap::from([("AWS::CloudWatch::Alarm".to_string(), 5)]);
    assert_eq!(kinds(&b), want_b, "region B: the alarms only");
    let want_a = BTreeMap::from([
        ("AWS::CloudWatch::Alarm".to_string(), 5),
        ("AWS::Route53::HealthCheck".to_string(), 6),
        ("AWS::Route53::RecordSet".to_string(), 2),
    ]);
    assert_eq!(kinds(&a), want_a, "region A");
    check_calculated_and_records(&r53, &a, &zone).await;
    for (cfn, s) in [(&cfn_a, &stack), (&cfn_b, &stack)] {
        let _ = cfn.delete_stack().stack_name(s).send().await;
    }
}

/// Each record follows its branch's `CALCULATED` check, which LocalStack holds as one.
async fn check_calculated_and_records(r53: &aws_sdk_route53::Client, a: &Stack, zone: &str) {
    let records = r53
        .list_resource_record_sets()
        .hosted_zone_id(zone)
        .send()
        .await
        .expect("ListResourceRecordSets");
    for (role, branch) in [("PRIMARY", "Primary"), ("SECONDARY", "Secondary")] {
        let calculated = &a.resources[&format!("{branch}CalculatedHealthCheck")];
        let rec = records
            .resource_record_sets()
            .iter()
            .find(|r| r.failover().map(|f| f.as_str()) == Some(role))
            .unwrap_or_else(|| panic!("no {role} record"));
        assert_eq!(rec.health_check_id(), Some(calculated.as_str()), "{role}");
        let held = r53
            .get_health_check()
            .health_check_id(calculated)
            .send()
            .await
            .expect("GetHealthCheck");
        let cfg = held
            .health_check()
            .and_then(|h| h.health_check_config())
            .expect("a config");
        assert_eq!(cfg.r#type().as_str(), "CALCULATED", "{branch}");
        assert_eq!(cfg.health_threshold(), Some(2), "{branch}: threshold");
        // LocalStack drops a CALCULATED check's children (as it drops a metric check's alarm):
        // infra_contract.rs checks them in the template.
        assert!(
            cfg.child_health_checks().is_empty(),
            "LocalStack now keeps a CALCULATED check's children: assert them here \
             ({branch}HealthCheck, {branch}OtherRegionHealthCheck)"
        );
    }
}
