//! The rehearsed deploy: `infra/cloudformation/readyprobe-service.yaml`, as shipped, deployed by
//! LocalStack's CloudFormation (alarms, health checks, failover records), the real binary
//! publishing into it, then `readyprobe check --aws` must find no violation. A second stack of
//! the same template with one alarm setting changed (the PRIMARY alarm's `Period` 60 → 30) must
//! show exactly that violation. So an edit of the template that breaks the contract fails here,
//! end to end, and not only in the static reading of `infra_contract.rs`.
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
struct Stack {
    params: BTreeMap<String, String>,
    resources: BTreeMap<String, String>,
}

impl Stack {
    /// A template value the emulator drops, evaluated over this stack: a literal, or a `Ref`
    /// to a parameter, a resource or `AWS::Region`. Anything else is beyond this rehearsal.
    fn eval(&self, v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(o) => {
                let r = o.get("Ref").and_then(Value::as_str);
                let r = r.unwrap_or_else(|| panic!("cannot evaluate {v}"));
                if r == "AWS::Region" {
                    return cloudwatch::REGION.to_string();
                }
                self.params
                    .get(r)
                    .or_else(|| self.resources.get(r))
                    .unwrap_or_else(|| panic!("Ref {r}: no such parameter or resource"))
                    .clone()
            }
            other => panic!("cannot evaluate {other}"),
        }
    }
}

/// Creates the stack from `body` and waits for CREATE_COMPLETE; panics with its events otherwise.
async fn deploy(
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
        let hc_id = stack.resources.get(id).expect("deployed health check");
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
        let status = match stack.eval(&want["InsufficientDataHealthStatus"]).as_str() {
            "Healthy" => "Healthy",
            "Unhealthy" => "Unhealthy",
            "LastKnownStatus" => "LastKnownStatus",
            other => panic!("{id}: InsufficientDataHealthStatus {other}"),
        };
        out.push(Hc {
            id: hc_id.clone(),
            alarm: stack.eval(&want["AlarmIdentifier"]["Name"]),
            region: stack.eval(&want["AlarmIdentifier"]["Region"]),
            insufficient_data: Some(status),
            inverted: cfg.inverted().unwrap_or(false),
            disabled: cfg.disabled().unwrap_or(false),
            children: vec![],
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
