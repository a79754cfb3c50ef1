//! `readyprobe check --aws` and `drill report --alarms` through publish targets, the built
//! binary against LocalStack:
//! `alarm_in_branch_region` over health checks that follow alarms in two regions (a `CALCULATED`
//! one over both, from the Route 53 fixture of `check_aws`), and the reads of a target with a
//! role going to the role's account. LocalStack's STS hands out credentials of the role's
//! account for any role ARN (verified on 2026.3.0: `GetCallerIdentity` through them names the
//! role's account, and an alarm put through them is listed there, by an access key id equal to
//! that account id, and not in the caller's `000000000000`).

use crate::check_aws::{
    CLEAN, Hc, Mode, NAMESPACE, Route53Fixture, check_aws_with, create_zone, put_alarm,
    put_readiness, record, rules_by_service,
};
use crate::support::{self, cloudwatch};
use aws_sdk_cloudwatch::config::{Credentials, Region};
use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, Statistic};
use serde_json::Value;
use std::path::Path;

/// The second region, besides `cloudwatch::REGION`.
const OTHER: &str = "eu-west-1";

/// The account of the role the second test reads through.
const ROLE_ACCOUNT: &str = "222233334444";

fn uniq() -> String {
    format!(
        "{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() % 1_000_000)
            .unwrap_or_default()
    )
}

/// A CloudWatch client of LocalStack in `region`, as access key `key` (a 12-digit key is that
/// account's).
async fn cw_as(region: &str, key: &str) -> aws_sdk_cloudwatch::Client {
    let conf = aws_sdk_cloudwatch::config::Builder::from(&cloudwatch::sdk_config().await)
        .region(Region::new(region.to_string()))
        .credentials_provider(Credentials::new(key, "test", None, None, "it"))
        .build();
    aws_sdk_cloudwatch::Client::from_conf(conf)
}

/// A Route 53 client of LocalStack as access key `key`.
async fn r53_as(key: &str) -> aws_sdk_route53::Client {
    let conf = aws_sdk_route53::config::Builder::from(&cloudwatch::sdk_config().await)
        .credentials_provider(Credentials::new(key, "test", None, None, "it"))
        .build();
    aws_sdk_route53::Client::from_conf(conf)
}

/// A health check following `alarm` in `region`.
fn follower(id: &str, alarm: &str, region: &str) -> Hc {
    Hc {
        id: id.into(),
        alarm: alarm.into(),
        region: region.into(),
        insufficient_data: Some("LastKnownStatus"),
        inverted: false,
        disabled: false,
        children: vec![],
        threshold: 2,
    }
}

/// Both branches' alarms and datums of `service` in `cw`'s region and account; the alarms are
/// deleted when the returned value drops.
#[must_use = "the alarms are deleted when this drops"]
async fn alarms_of(cw: &aws_sdk_cloudwatch::Client, service: &str) -> cloudwatch::PutAlarms {
    let put = cloudwatch::PutAlarms::new(cw);
    for branch in ["primary", "secondary"] {
        let alarm = format!("{service}-{branch}");
        put.add(&alarm);
        put_alarm(cw, &alarm, service, branch, &CLEAN).await;
        put_readiness(cw, service, branch).await;
    }
    put
}

/// The PRIMARY and SECONDARY records of `stable`, following `hc-{service}-{branch}`, in `zone`.
async fn records(r53: &aws_sdk_route53::Client, zone: &str, services: &[(String, String)]) {
    let mut changes = Vec::new();
    for (service, stable) in services {
        for (role, branch) in [("PRIMARY", "primary"), ("SECONDARY", "secondary")] {
            let hc = Some(format!("hc-{service}-{branch}"));
            let target = format!("{branch}.{stable}");
            changes.push(record(stable, role, 30, hc, &target));
        }
    }
    r53.change_resource_record_sets()
        .hosted_zone_id(zone)
        .change_batch(
            aws_sdk_route53::types::ChangeBatch::builder()
                .set_changes(Some(changes))
                .build()
                .expect("batch"),
        )
        .send()
        .await
        .expect("ChangeResourceRecordSets");
}

/// The shared part of the configs: CloudWatch and Route 53 at the test's endpoints.
fn head(cw: &str, r53: &str, role: Option<&str>) -> String {
    let role = role.map_or(String::new(), |r| format!("role_arn = \"{r}\"\n"));
    format!(
        r#"prober_id = "check-aws-targets"

[publish]
namespace = "{NAMESPACE}"
sinks = ["cloudwatch"]

[publish.cloudwatch]
region = "{region}"
endpoint_url = "{cw}"
operation_timeout = "5s"
{role}
[route53]
endpoint_url = "{r53}"
insufficient_data_health_status = "LastKnownStatus"

[probe]
kind = "tcp"

[probe.tcp]
port = 3306
"#,
        region = cloudwatch::REGION
    )
}

/// One `[[service]]`: its primary branch in `region` when given, its `publish` line if any.
fn service(name: &str, stable: &str, region: Option<&str>, publish: &str) -> String {
    let region = region.map_or(String::new(), |r| format!("region = \"{r}\"\n"));
    format!(
        r#"
[[service]]
name = "{name}"
stable_name = "{stable}"
{publish}
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "primary.{stable}"
{region}
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.{stable}"
"#
    )
}

async fn check(config: &Path, env: Vec<(&'static str, Option<String>)>) -> (Option<i32>, Value) {
    let config = config.to_path_buf();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, Option<&str>)> = env.iter().map(|(k, v)| (*k, v.as_deref())).collect();
        check_aws_with(&config, &["--format", "json"], &env)
    })
    .await
    .expect("join");
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (code, report)
}

/// Three services, each branch's alarm in `cloudwatch::REGION`: `solo-` names its primary's
/// region and follows only that alarm (warned of); `dual-` names it too but also publishes to
/// a second region, where a copy of the alarm is, and its failover record follows a
/// CALCULATED health check over both (silent, in both targets' reads); `noregion-` names none
/// (silent). A warning alone exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_in_branch_region_warns_only_where_every_alarm_is_in_the_branchs_region() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = uniq();
    let (here, ep) = (cloudwatch::REGION, cloudwatch::endpoint());
    let (cw, cw_other) = (cw_as(here, "test").await, cw_as(OTHER, "test").await);
    let zone_name = format!("reg{uniq}.internal");
    let services: Vec<(String, String)> = ["solo", "dual", "noregion"]
        .iter()
        .map(|c| (format!("{c}-{uniq}"), format!("{c}.{zone_name}")))
        .collect();
    let mut hcs = Vec::new();
    let mut put = Vec::new();
    for (name, _) in &services {
        put.push(alarms_of(&cw, name).await);
        for b in ["primary", "secondary"] {
            hcs.push(follower(
                &format!("hc-{name}-{b}"),
                &format!("{name}-{b}"),
                here,
            ));
        }
    }
    let dual = &services[1].0;
    let _other = alarms_of(&cw_other, dual).await;
    let (a, b) = (
        format!("hc-{dual}-primary-a"),
        format!("hc-{dual}-primary-b"),
    );
    let calc = hcs
        .iter_mut()
        .find(|h| h.id == format!("hc-{dual}-primary"))
        .expect("dual's primary");
    calc.children = vec![a.clone(), b.clone()];
    hcs.push(follower(&a, &format!("{dual}-primary"), here));
    hcs.push(follower(&b, &format!("{dual}-primary"), OTHER));
    let r53 = r53_as("test").await;
    let zone = create_zone(&r53, &zone_name).await;
    records(&r53, &zone, &services).await;

    let fixture = Route53Fixture::start(hcs, Mode::Answer, ep.clone()).await;
    let mut text = head(&ep, &fixture.url, None);
    let two = format!("publish = [{{ region = \"{here}\" }}, {{ region = \"{OTHER}\" }}]\n");
    text.push_str(&service(&services[0].0, &services[0].1, Some(here), ""));
    text.push_str(&service(&services[1].0, &services[1].1, Some(here), &two));
    text.push_str(&service(&services[2].0, &services[2].1, None, ""));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("regions.toml");
    std::fs::write(&config, text).expect("write config");

    let (code, report) = check(&config, vec![]).await;
    let found = rules_by_service(&report);
    let solo = &services[0].0;
    assert_eq!(
        found,
        [(solo.clone(), vec!["alarm_in_branch_region".to_string()])].into(),
        "{report:#}"
    );
    let f = &report["findings"][0];
    assert_eq!(f["branch"], "primary", "{report:#}");
    assert_eq!(
        f["object"],
        format!("health check hc-{solo}-primary"),
        "{report:#}"
    );
    assert_eq!(f["target"], here, "{report:#}");
    assert_eq!(
        (
            &report["violations"],
            &report["warnings"],
            &report["not_checked"]
        ),
        (&Value::from(0), &Value::from(1), &Value::from(0)),
        "{report:#}"
    );
    let targets: Vec<(&str, &str)> = report["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or(""),
                t["region"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(targets, [(here, here), (OTHER, OTHER)], "{report:#}");
    assert_eq!(code, Some(0), "a warning alone exits 0: {report:#}");
}

/// A target with a role reads the alarms, their data and the records in the role's account:
/// clean there. The same config without the role reads the caller's account, which has none
/// of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_aws_reads_through_the_targets_role() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = uniq();
    let (here, ep) = (cloudwatch::REGION, cloudwatch::endpoint());
    let name = format!("viarole-{uniq}");
    let zone_name = format!("role{uniq}.internal");
    let services = [(name.clone(), format!("db.{zone_name}"))];
    let _put = alarms_of(&cw_as(here, ROLE_ACCOUNT).await, &name).await;
    let r53 = r53_as(ROLE_ACCOUNT).await;
    let zone = create_zone(&r53, &zone_name).await;
    records(&r53, &zone, &services).await;
    let hcs = ["primary", "secondary"]
        .map(|b| follower(&format!("hc-{name}-{b}"), &format!("{name}-{b}"), here))
        .to_vec();
    let fixture = Route53Fixture::start(hcs, Mode::Answer, ep.clone()).await;
    let role = format!("arn:aws:iam::{ROLE_ACCOUNT}:role/readyprobe-check");
    let dir = tempfile::tempdir().expect("tempdir");
    // STS is LocalStack's too (the chain's STS endpoint).
    let env = || vec![("AWS_ENDPOINT_URL_STS", Some(ep.clone()))];

    let config = dir.path().join("role.toml");
    let text = head(&ep, &fixture.url, Some(&role)) + &service(&name, &services[0].1, None, "");
    std::fs::write(&config, text).expect("write config");
    let (code, report) = check(&config, env()).await;
    assert_eq!(report["findings"], Value::Array(vec![]), "{report:#}");
    assert_eq!(
        report["targets"][0]["name"],
        format!("{here}@{ROLE_ACCOUNT}/readyprobe-check"),
        "{report:#}"
    );
    assert_eq!(code, Some(0), "{report:#}");

    let config = dir.path().join("caller.toml");
    let text = head(&ep, &fixture.url, None) + &service(&name, &services[0].1, None, "");
    std::fs::write(&config, text).expect("write config");
    let (code, report) = check(&config, env()).await;
    let rules = rules_by_service(&report).remove(&name).unwrap_or_default();
    assert_eq!(
        rules.iter().filter(|r| *r == "no_alarm").count(),
        2,
        "the caller's account has neither alarm: {report:#}"
    );
    assert_eq!(code, Some(1), "{report:#}");
}

/// `drill report --alarms --config` reads each service's alarms through its publish target's
/// role: the lane of the alarm in the role's account is drawn. Without `--config` the default
/// chain reads the caller's account, which has no such alarm: no lane, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_report_reads_alarms_through_the_targets_role() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    const ACCOUNT: &str = "333344445555";
    let (here, ep) = (cloudwatch::REGION, cloudwatch::endpoint());
    let name = format!("drillrole-{}", uniq());
    let alarm = format!("{name}-primary");
    let cw = cw_as(here, ACCOUNT).await;
    let put = cloudwatch::PutAlarms::new(&cw);
    put.add(&alarm);
    cw.put_metric_alarm()
        .alarm_name(&alarm)
        .namespace(readyprobe::contract::DEFAULT_NAMESPACE)
        .metric_name("Readiness")
        .dimensions(Dimension::builder().name("Service").value(&name).build())
        .dimensions(Dimension::builder().name("Branch").value("primary").build())
        .statistic(Statistic::Minimum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(ComparisonOperator::LessThanThreshold)
        .send()
        .await
        .expect("PutMetricAlarm");
    let dir = tempfile::tempdir().expect("tempdir");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or_default())
        .unwrap_or_default();
    let attempt = |seq: i64, at: i64| {
        format!(
            r#"{{"record_seq":{seq},"at":"2026-12-01T19:42:44.869Z","at_ms":{at},"service":"{name}","prober":"az-a","kind":"attempt","branch":"primary","seq":{seq},"marker":"55848ea23848a8e12f6566f038a4f4e5","started_at":{at},"finished_at":{at},"steps":[{{"step":"connect","duration_ms":0.1,"ok":true}}],"answers":[],"address":"127.0.0.1:17002","tls_verified":false,"result":"success"}}"#
        )
    };
    let ev = dir.path().join("ev.jsonl");
    let lines = [attempt(1, now - 60_000), attempt(2, now)];
    std::fs::write(&ev, lines.join("\n") + "\n").expect("write evidence");
    let role = format!("arn:aws:iam::{ACCOUNT}:role/readyprobe-report");
    let config = dir.path().join("c.toml");
    let text = head(&ep, &ep, Some(&role)) + &service(&name, "db.drillrole.internal", None, "");
    std::fs::write(&config, text).expect("write config");
    let report = |with_config: bool| {
        let out = dir
            .path()
            .join(if with_config { "with" } else { "without" });
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"));
        cmd.args(["drill", "report", "--alarms", "--evidence"])
            .arg(&ev)
            .arg("--out")
            .arg(&out)
            .env("AWS_REGION", here)
            .env("AWS_ENDPOINT_URL", &ep);
        if with_config {
            cmd.arg("--config").arg(&config);
        }
        let done = cmd.output().expect("run readyprobe");
        let json = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
        let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
        let drill: Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("report.json ({e}): {json}\nstderr: {stderr}"));
        (done.status.code(), drill, stderr)
    };
    let lanes = |drill: &Value| -> Vec<String> {
        drill["services"][0]["alarms"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (code, drill, stderr) = tokio::task::block_in_place(|| report(true));
    assert_eq!(lanes(&drill), [alarm], "{drill:#}\nstderr: {stderr}");
    assert_eq!(code, Some(0), "{stderr}");
    let (_, drill, stderr) = tokio::task::block_in_place(|| report(false));
    assert_eq!(
        lanes(&drill),
        Vec::<String>::new(),
        "{drill:#}\nstderr: {stderr}"
    );
    assert!(
        drill
            .to_string()
            .contains("no alarm lane for branch primary"),
        "{drill:#}"
    );
}

/// The cross-region layout of the templates: both branches' alarms in both regions, per branch
/// a child per region (`Healthy` without data) under a CALCULATED check of threshold 2 that
/// the record follows; each region's prober publishes to its own region only.
fn cross_region_hcs(name: &str, here: &str, threshold: u32) -> Vec<Hc> {
    let mut hcs = Vec::new();
    for b in ["primary", "secondary"] {
        let kids = [("a", here), ("b", OTHER)].map(|(s, region)| {
            let mut h = follower(
                &format!("hc-{name}-{b}-{s}"),
                &format!("{name}-{b}"),
                region,
            );
            h.insufficient_data = Some("Healthy");
            h
        });
        let mut calc = follower(&format!("hc-{name}-{b}"), "", here);
        calc.children = kids.iter().map(|k| k.id.clone()).collect();
        calc.threshold = threshold;
        hcs.push(calc);
        hcs.extend(kids);
    }
    hcs
}

/// `check --aws` of each region's prober on a correctly deployed cross-region layout is clean
/// (the child on the other region's alarm is that prober's view); with threshold 1 it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cross_region_layout_is_clean_from_each_region() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = uniq();
    let (here, ep) = (cloudwatch::REGION, cloudwatch::endpoint());
    let name = format!("xregion-{uniq}");
    let zone_name = format!("xr{uniq}.internal");
    let services = [(name.clone(), format!("db.{zone_name}"))];
    let _here = alarms_of(&cw_as(here, "test").await, &name).await;
    let _other = alarms_of(&cw_as(OTHER, "test").await, &name).await;
    let r53 = r53_as("test").await;
    let zone = create_zone(&r53, &zone_name).await;
    records(&r53, &zone, &services).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&name, &services[0].1, Some(here), "").replace(
        "endpoint = \"secondary.",
        &format!("region = \"{OTHER}\"\nendpoint = \"secondary."),
    );
    for (threshold, want) in [(2, vec![]), (1, vec!["calculated_threshold"; 2])] {
        let hcs = cross_region_hcs(&name, here, threshold);
        let fixture = Route53Fixture::start(hcs, Mode::Answer, ep.clone()).await;
        for region in [here, OTHER] {
            let head = head(&ep, &fixture.url, None)
                .replace("\"LastKnownStatus\"", "\"Healthy\"")
                .replace(
                    &format!("region = \"{here}\""),
                    &format!("region = \"{region}\""),
                );
            let config = dir.path().join(format!("{region}-{threshold}.toml"));
            std::fs::write(&config, head + &svc).expect("write config");
            let (code, report) = check(&config, vec![]).await;
            let found = rules_by_service(&report).remove(&name).unwrap_or_default();
            assert_eq!(
                found, want,
                "threshold {threshold}, read in {region}: {report:#}"
            );
            let exit = if want.is_empty() { 0 } else { 1 };
            assert_eq!(code, Some(exit), "{report:#}");
        }
    }
}

/// One of three targets cannot be reached: a `not_checked` row for it, and the other two are
/// checked. Both read one account's Route 53: its finding (a TTL) appears once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_cannot_be_read_is_not_checked_and_route53_findings_appear_once() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = uniq();
    let (here, ep) = (cloudwatch::REGION, cloudwatch::endpoint());
    let name = format!("threet-{uniq}");
    let zone_name = format!("three{uniq}.internal");
    let stable = format!("db.{zone_name}");
    let _here = alarms_of(&cw_as(here, "test").await, &name).await;
    let _other = alarms_of(&cw_as(OTHER, "test").await, &name).await;
    let r53 = r53_as("test").await;
    let zone = create_zone(&r53, &zone_name).await;
    let changes = [("PRIMARY", "primary", 300), ("SECONDARY", "secondary", 30)]
        .map(|(role, b, ttl)| {
            let target = format!("{b}.{stable}");
            crate::check_aws::record(&stable, role, ttl, Some(format!("hc-{name}-{b}")), &target)
        })
        .to_vec();
    r53.change_resource_record_sets()
        .hosted_zone_id(&zone)
        .change_batch(
            aws_sdk_route53::types::ChangeBatch::builder()
                .set_changes(Some(changes))
                .build()
                .expect("batch"),
        )
        .send()
        .await
        .expect("ChangeResourceRecordSets");
    let hcs = ["primary", "secondary"]
        .map(|b| follower(&format!("hc-{name}-{b}"), &format!("{name}-{b}"), here))
        .to_vec();
    let fixture = Route53Fixture::start(hcs, Mode::Answer, ep.clone()).await;
    // Nothing listens on port 1 of the loopback.
    let publish = format!(
        "publish = [{{ region = \"{here}\" }}, {{ region = \"{OTHER}\" }}, {{ name = \"dark\", region = \"eu-central-1\", endpoint_url = \"http://127.0.0.1:1\" }}]\n"
    );
    let text = head(&ep, &fixture.url, None) + &service(&name, &stable, None, &publish);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("three.toml");
    std::fs::write(&config, text).expect("write config");
    let (code, report) = check(&config, vec![]).await;
    let rows: Vec<(&str, &str)> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["target"].as_str().unwrap_or(""),
                f["rule"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [(here, "record_ttl"), ("dark", "not_checked")],
        "{report:#}"
    );
    assert_eq!(
        code,
        Some(1),
        "a violation outranks not_checked: {report:#}"
    );
}
