//! `readyprobe check --aws`, the built binary, against LocalStack: one service per case, each
//! with a PRIMARY branch whose alarm, health check or record breaks one rule (the SECONDARY stays
//! clean), and a clean service. Alarms, their data, the hosted zone and the records are real
//! LocalStack objects. LocalStack's Route 53 keeps health checks but drops `AlarmIdentifier` and
//! `InsufficientDataHealthStatus` (verified on 2026.3.0), so the Route 53 endpoint of the test is
//! a strict local server that answers `ListHealthChecks` with XML written per the API reference
//! (tests/fixtures/route53/) and forwards every other Route 53 call to LocalStack.

use crate::support::{self, cloudwatch};
use aws_sdk_cloudwatch::types::{
    ComparisonOperator, Dimension, Metric, MetricDataQuery, MetricDatum, MetricStat, StandardUnit,
    Statistic,
};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/route53");
pub(crate) const NAMESPACE: &str = "ReadyprobeCheckAws";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name)).expect("read fixture")
}

pub(crate) fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    assert!(!s.contains("{{"), "unfilled template: {s}");
    s
}

/// A health check the fixture lists.
#[derive(Clone)]
pub(crate) struct Hc {
    pub(crate) id: String,
    pub(crate) alarm: String,
    pub(crate) region: String,
    pub(crate) insufficient_data: Option<&'static str>,
    pub(crate) inverted: bool,
    pub(crate) disabled: bool,
    /// Non-empty: a `CALCULATED` health check over these ids (`alarm` and `region` unused).
    pub(crate) children: Vec<String>,
    /// A `CALCULATED` one's `HealthThreshold`.
    pub(crate) threshold: u32,
}

/// What the Route 53 endpoint does with `ListHealthChecks`.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Mode {
    Answer,
    Deny,
    /// The first page, cut in the middle (a whole HTTP answer of half a document).
    Cut,
    /// A root element and nothing in it.
    Bare,
    /// Every page says more follow, at the same marker.
    Loop,
    /// Answers the first page, never the second.
    Stall,
}

pub(crate) struct Route53Fixture {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Route53Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Shared = Arc<(Vec<Hc>, Mode, Mutex<Vec<String>>)>;

impl Route53Fixture {
    /// Answer `ListHealthChecks` with `hcs` in pages of 2 (so the client must follow
    /// `NextMarker`); forward every other Route 53 call to `upstream`.
    pub(crate) async fn start(hcs: Vec<Hc>, mode: Mode, upstream: String) -> Route53Fixture {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let shared: Shared = Arc::new((hcs, mode, Mutex::new(Vec::new())));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (sh, rq) = (shared.clone(), requests.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (sh, rq, up) = (sh.clone(), rq.clone(), upstream.clone());
                let service = service_fn(move |req| {
                    let (sh, rq, up) = (sh.clone(), rq.clone(), up.clone());
                    async move { Ok::<_, Infallible>(handle(req, &sh, &rq, &up).await) }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        Route53Fixture {
            url,
            requests,
            task,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn xml(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "text/xml")
        .body(Full::new(Bytes::from(body)))
        .expect("response")
}

async fn handle(
    req: Request<Incoming>,
    shared: &Shared,
    requests: &Mutex<Vec<String>>,
    upstream: &str,
) -> Response<Full<Bytes>> {
    let line = format!("{} {}", req.method(), req.uri());
    requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(line.clone());
    if req.uri().path() != "/2013-04-01/healthcheck" {
        return forward(req, upstream).await;
    }
    let signed_for_route53 = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 ") && a.contains("/route53/aws4_request"));
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|s| !s.is_empty())
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
        .collect();
    if req.method() != hyper::Method::GET
        || !signed_for_route53
        || query.keys().any(|k| k != "marker" && k != "maxitems")
    {
        return xml(400, format!("unexpected request {line}"));
    }
    let (hcs, mode, _) = &**shared;
    let marker = query.get("marker").map(String::as_str);
    match mode {
        Mode::Answer => list_page(hcs, marker),
        Mode::Deny => xml(403, fixture("access-denied.xml")),
        Mode::Cut => {
            let whole = body_of(list_page(hcs, None)).await;
            xml(200, whole[..whole.len() / 2].to_string())
        }
        Mode::Bare => xml(200, "<ListHealthChecksResponse/>".into()),
        Mode::Loop => {
            let page = body_of(list_page(hcs, None)).await;
            let looped = page
                .replace(
                    "<IsTruncated>false</IsTruncated>",
                    "<IsTruncated>true</IsTruncated>",
                )
                .replace("</MaxItems>", "</MaxItems><NextMarker>0</NextMarker>");
            xml(200, looped)
        }
        Mode::Stall if marker.is_none() => list_page(hcs, None),
        Mode::Stall => std::future::pending().await,
    }
}

async fn body_of(r: Response<Full<Bytes>>) -> String {
    let bytes = r.into_body().collect().await.map(|b| b.to_bytes());
    String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned()
}

/// One page of `ListHealthChecks`: two health checks, the marker being the index of the first.
fn list_page(hcs: &[Hc], marker: Option<&str>) -> Response<Full<Bytes>> {
    const PAGE: usize = 2;
    let start: usize = match marker.map(str::parse) {
        None => 0,
        Some(Ok(i)) if i <= hcs.len() => i,
        Some(_) => return xml(400, "bad marker".into()),
    };
    let end = (start + PAGE).min(hcs.len());
    let template = fixture("health-check.xml");
    let calculated = fixture("calculated-health-check.xml");
    let items: String = hcs[start..end]
        .iter()
        .map(|h| {
            if !h.children.is_empty() {
                let children: String = h
                    .children
                    .iter()
                    .map(|c| format!("               <ChildHealthCheck>{c}</ChildHealthCheck>\n"))
                    .collect();
                let threshold = h.threshold.to_string();
                return fill(
                    &calculated,
                    &[("id", &h.id), ("children", &children), ("threshold", &threshold)],
                );
            }
            let insufficient = h
                .insufficient_data
                .map(|s| format!("            <InsufficientDataHealthStatus>{s}</InsufficientDataHealthStatus>"))
                .unwrap_or_default();
            fill(
                &template,
                &[
                    ("id", &h.id),
                    ("region", &h.region),
                    ("alarm", &h.alarm),
                    ("insufficient_data", &insufficient),
                    ("inverted", if h.inverted { "true" } else { "false" }),
                    ("disabled", if h.disabled { "true" } else { "false" }),
                ],
            )
        })
        .collect();
    let truncated = end < hcs.len();
    let next = if truncated {
        format!("   <NextMarker>{end}</NextMarker>")
    } else {
        String::new()
    };
    xml(
        200,
        fill(
            &fixture("list-health-checks.xml"),
            &[
                ("health_checks", &items),
                ("is_truncated", if truncated { "true" } else { "false" }),
                ("marker", &start.to_string()),
                ("next_marker", &next),
                ("max_items", &PAGE.to_string()),
            ],
        ),
    )
}

/// Forward a request unchanged to LocalStack and its answer back.
async fn forward(req: Request<Incoming>, upstream: &str) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return xml(502, format!("reading the request: {e}")),
    };
    let addr = upstream.trim_start_matches("http://");
    let answer = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let resp = send
            .send_request(Request::from_parts(parts, Full::new(body)))
            .await
            .map_err(std::io::Error::other)?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(Response::from_parts(parts, Full::new(body.to_bytes())))
    };
    answer
        .await
        .unwrap_or_else(|e| xml(502, format!("forwarding to {upstream}: {e}")))
}

/// The primary branch's deployment in one case (the secondary's is always the clean one).
#[derive(Clone)]
pub(crate) struct Primary {
    alarm: bool,
    namespace: &'static str,
    metric: &'static str,
    extra_dimension: bool,
    unit: Option<StandardUnit>,
    statistic: Option<Statistic>,
    extended_statistic: Option<&'static str>,
    period: i32,
    evaluation_periods: i32,
    datapoints_to_alarm: Option<i32>,
    treat_missing_data: Option<&'static str>,
    math: bool,
    health_check: bool,
    hc_region: &'static str,
    insufficient_data: Option<&'static str>,
    datum: bool,
    ttl: i64,
    secondary_health_check: bool,
    records: bool,
    hc_inverted: bool,
    hc_disabled: bool,
    /// The SECONDARY failover record exists.
    secondary_record: bool,
    /// What the PRIMARY record answers with instead of the primary branch's endpoint.
    primary_target: Option<&'static str>,
}

pub(crate) const CLEAN: Primary = Primary {
    alarm: true,
    namespace: NAMESPACE,
    metric: "Readiness",
    extra_dimension: false,
    unit: None,
    statistic: Some(Statistic::Minimum),
    extended_statistic: None,
    period: 60,
    evaluation_periods: 1,
    datapoints_to_alarm: None,
    treat_missing_data: Some("breaching"),
    math: false,
    health_check: true,
    hc_region: cloudwatch::REGION,
    insufficient_data: Some("LastKnownStatus"),
    datum: true,
    ttl: 30,
    secondary_health_check: true,
    records: true,
    hc_inverted: false,
    hc_disabled: false,
    secondary_record: true,
    primary_target: None,
};

/// Each case: its name, the deployment, and the rules `check --aws` must report (exactly).
type Case = (&'static str, Primary, &'static [&'static str]);

const CASES: &[Case] = &[
    ("clean", CLEAN, &[]),
    (
        "highres",
        Primary {
            period: 10,
            ..CLEAN
        },
        &["period"],
    ),
    (
        "fivemin",
        Primary {
            period: 300,
            ..CLEAN
        },
        &["period"],
    ),
    (
        "p99",
        Primary {
            statistic: None,
            extended_statistic: Some("p99"),
            ..CLEAN
        },
        &["statistic"],
    ),
    (
        "math",
        Primary {
            math: true,
            ..CLEAN
        },
        &["metric_math"],
    ),
    (
        "mofn",
        Primary {
            evaluation_periods: 3,
            datapoints_to_alarm: Some(2),
            ..CLEAN
        },
        &["m_out_of_n"],
    ),
    (
        "daylate",
        Primary {
            evaluation_periods: 1440,
            datapoints_to_alarm: Some(1440),
            ..CLEAN
        },
        &["detection_time"],
    ),
    (
        "ns",
        Primary {
            namespace: "Other",
            ..CLEAN
        },
        &["namespace", "no_datum"],
    ),
    (
        "metric",
        Primary {
            metric: "SuccessRate",
            ..CLEAN
        },
        &["metric", "no_datum"],
    ),
    (
        "dims",
        Primary {
            extra_dimension: true,
            ..CLEAN
        },
        &["dimensions", "no_datum"],
    ),
    (
        "unit",
        Primary {
            unit: Some(StandardUnit::Count),
            ..CLEAN
        },
        &["unit", "no_datum"],
    ),
    (
        "missing",
        Primary {
            treat_missing_data: None,
            ..CLEAN
        },
        &["treat_missing_data"],
    ),
    (
        "region",
        Primary {
            hc_region: "eu-west-1",
            ..CLEAN
        },
        &["region"],
    ),
    (
        "idunset",
        Primary {
            insufficient_data: None,
            ..CLEAN
        },
        &["insufficient_data_health_status"],
    ),
    (
        "idother",
        Primary {
            insufficient_data: Some("Healthy"),
            ..CLEAN
        },
        &["insufficient_data_health_status"],
    ),
    (
        "noalarm",
        Primary {
            alarm: false,
            ..CLEAN
        },
        &["no_alarm", "no_health_check", "record_health_check"],
    ),
    (
        "nohc",
        Primary {
            health_check: false,
            ..CLEAN
        },
        &["no_health_check", "record_health_check"],
    ),
    (
        "nodatum",
        Primary {
            datum: false,
            ..CLEAN
        },
        &["no_datum"],
    ),
    ("ttl", Primary { ttl: 300, ..CLEAN }, &["record_ttl"]),
    (
        "secondary",
        Primary {
            secondary_health_check: false,
            ..CLEAN
        },
        &["secondary_unevaluated"],
    ),
    (
        "norecord",
        Primary {
            records: false,
            ..CLEAN
        },
        &["no_record"],
    ),
    (
        "inverted",
        Primary {
            hc_inverted: true,
            ..CLEAN
        },
        &["health_check_inverted"],
    ),
    (
        "disabled",
        Primary {
            hc_disabled: true,
            ..CLEAN
        },
        &["health_check_disabled"],
    ),
    (
        "halfpair",
        Primary {
            secondary_record: false,
            ..CLEAN
        },
        &["failover_pair"],
    ),
    (
        "swapped",
        Primary {
            primary_target: Some("secondary"),
            ..CLEAN
        },
        &["record_target"],
    ),
];

pub(crate) fn dims(service: &str, branch: &str, extra: bool) -> Vec<Dimension> {
    let mut d = vec![
        Dimension::builder().name("Service").value(service).build(),
        Dimension::builder().name("Branch").value(branch).build(),
    ];
    if extra {
        d.push(Dimension::builder().name("Prober").value("a").build());
    }
    d
}

pub(crate) async fn put_alarm(
    cw: &aws_sdk_cloudwatch::Client,
    name: &str,
    service: &str,
    branch: &str,
    p: &Primary,
) {
    let mut a = cw
        .put_metric_alarm()
        .alarm_name(name)
        .comparison_operator(ComparisonOperator::LessThanThreshold)
        .threshold(1.0)
        .evaluation_periods(p.evaluation_periods)
        .set_datapoints_to_alarm(p.datapoints_to_alarm)
        .set_treat_missing_data(p.treat_missing_data.map(str::to_string));
    let d = dims(service, branch, p.extra_dimension);
    if p.math {
        let metric = Metric::builder()
            .namespace(p.namespace)
            .metric_name(p.metric)
            .set_dimensions(Some(d))
            .build();
        let stat = MetricStat::builder()
            .metric(metric)
            .period(60)
            .stat("Minimum")
            .build();
        a = a.metrics(
            MetricDataQuery::builder()
                .id("m1")
                .metric_stat(stat)
                .return_data(true)
                .build(),
        );
    } else {
        a = a
            .namespace(p.namespace)
            .metric_name(p.metric)
            .set_dimensions(Some(d))
            .period(p.period)
            .set_unit(p.unit.clone())
            .set_statistic(p.statistic.clone())
            .set_extended_statistic(p.extended_statistic.map(str::to_string));
    }
    a.send().await.expect("PutMetricAlarm");
}

pub(crate) async fn put_readiness(cw: &aws_sdk_cloudwatch::Client, service: &str, branch: &str) {
    cw.put_metric_data()
        .namespace(NAMESPACE)
        .metric_data(
            MetricDatum::builder()
                .metric_name("Readiness")
                .set_dimensions(Some(dims(service, branch, false)))
                .unit(StandardUnit::None)
                .value(1.0)
                .timestamp(std::time::SystemTime::now().into())
                .build(),
        )
        .send()
        .await
        .expect("PutMetricData");
}

pub(crate) fn route53_client(endpoint: &str) -> aws_sdk_route53::Client {
    let conf = aws_sdk_route53::Config::builder()
        .behavior_version(aws_sdk_route53::config::BehaviorVersion::latest())
        .region(aws_sdk_route53::config::Region::new(cloudwatch::REGION))
        .credentials_provider(aws_sdk_route53::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_route53::Client::from_conf(conf)
}

/// A failover CNAME record answering with `target`.
pub(crate) fn record(
    name: &str,
    role: &str,
    ttl: i64,
    hc: Option<String>,
    target: &str,
) -> aws_sdk_route53::types::Change {
    use aws_sdk_route53::types::{
        Change, ChangeAction, ResourceRecord, ResourceRecordSet, ResourceRecordSetFailover, RrType,
    };
    let set = ResourceRecordSet::builder()
        .name(name)
        .r#type(RrType::Cname)
        .set_identifier(role.to_ascii_lowercase())
        .failover(ResourceRecordSetFailover::from(role))
        .ttl(ttl)
        .set_health_check_id(hc)
        .resource_records(
            ResourceRecord::builder()
                .value(target)
                .build()
                .expect("record"),
        )
        .build()
        .expect("record set");
    Change::builder()
        .action(ChangeAction::Create)
        .resource_record_set(set)
        .build()
        .expect("change")
}

/// A private hosted zone named `zone` in LocalStack; its id.
pub(crate) async fn create_zone(r53: &aws_sdk_route53::Client, zone: &str) -> String {
    let z = r53
        .create_hosted_zone()
        .name(zone)
        .caller_reference(zone)
        .hosted_zone_config(
            aws_sdk_route53::types::HostedZoneConfig::builder()
                .private_zone(true)
                .comment("readyprobe check --aws test")
                .build(),
        )
        .send()
        .await
        .expect("CreateHostedZone");
    let id = z
        .hosted_zone()
        .map(|h| h.id().to_string())
        .expect("zone id");
    id.trim_start_matches("/hostedzone/").to_string()
}

/// Fleet config: one `[[service]]` per case.
fn config_text(services: &[(String, String)], cw: &str, r53: &str) -> String {
    let mut s = format!(
        r#"prober_id = "check-aws-test"

[publish]
namespace = "{NAMESPACE}"

[publish.cloudwatch]
region = "{region}"
endpoint_url = "{cw}"
operation_timeout = "5s"

[route53]
endpoint_url = "{r53}"
insufficient_data_health_status = "LastKnownStatus"

[probe]
kind = "tcp"

[probe.tcp]
port = 3306
"#,
        region = cloudwatch::REGION
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
endpoint = "primary.{stable}"

[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.{stable}"
"#
        ));
    }
    s
}

fn check_aws(config: &Path) -> (Option<i32>, String, String) {
    check_aws_with(config, &["--format", "json"], &[])
}

/// `check --aws` with more arguments, and environment variables set (`Some`) or removed.
pub(crate) fn check_aws_with(
    config: &Path,
    args: &[&str],
    env: &[(&str, Option<&str>)],
) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_readyprobe"));
    cmd.args(["check", "--aws"])
        .args(args)
        .arg("--config")
        .arg(config)
        .env("AWS_REGION", cloudwatch::REGION);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("run readyprobe");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The rules found per service, sorted.
pub(crate) fn rules_by_service(report: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in report["findings"].as_array().into_iter().flatten() {
        out.entry(f["service"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push(f["rule"].as_str().unwrap_or_default().to_string());
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

/// The deployment of every case in LocalStack, and the health checks the fixture lists.
struct Deployed {
    services: Vec<(String, String)>,
    expected: BTreeMap<String, Vec<String>>,
    hcs: Vec<Hc>,
    /// Deleted when the test ends.
    alarms: cloudwatch::PutAlarms,
}

async fn deploy(uniq: &str) -> Deployed {
    let cw = support::fixture::cloudwatch()
        .await
        .expect("cloudwatch client");
    let r53 = route53_client(&cloudwatch::endpoint());
    let zone_name = format!("chk{uniq}.internal");
    let zone = create_zone(&r53, &zone_name).await;
    let mut d = Deployed {
        services: Vec::new(),
        expected: BTreeMap::new(),
        hcs: Vec::new(),
        alarms: cloudwatch::PutAlarms::new(&cw),
    };
    let mut changes = Vec::new();
    for (case, p, rules) in CASES {
        let service = format!("{case}-{uniq}");
        let stable = format!("{case}.{zone_name}");
        for (branch, spec) in [("primary", p.clone()), ("secondary", CLEAN)] {
            let alarm = format!("{service}-{branch}");
            if spec.alarm {
                d.alarms.add(&alarm);
                put_alarm(&cw, &alarm, &service, branch, &spec).await;
            }
            if spec.datum {
                put_readiness(&cw, &service, branch).await;
            }
            if spec.health_check {
                d.hcs.push(Hc {
                    id: format!("hc-{alarm}"),
                    alarm: alarm.clone(),
                    region: spec.hc_region.into(),
                    insufficient_data: spec.insufficient_data,
                    inverted: spec.hc_inverted,
                    disabled: spec.hc_disabled,
                    children: vec![],
                    threshold: 2,
                });
            }
        }
        if p.records {
            let hc = |b: &str| Some(format!("hc-{service}-{b}"));
            // The config's endpoints are `primary.{stable}` and `secondary.{stable}`.
            let target = format!("{}.{stable}", p.primary_target.unwrap_or("primary"));
            changes.push(record(&stable, "PRIMARY", p.ttl, hc("primary"), &target));
            let secondary = p.secondary_health_check.then(|| hc("secondary")).flatten();
            if p.secondary_record {
                let target = format!("secondary.{stable}");
                changes.push(record(&stable, "SECONDARY", 30, secondary, &target));
            }
        }
        let mut rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        rules.sort();
        if !rules.is_empty() {
            d.expected.insert(service.clone(), rules);
        }
        d.services.push((service, stable));
    }
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
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_aws_flags_each_violation_and_passes_the_clean_service() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = format!(
        "{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() % 1_000_000)
            .unwrap_or_default()
    );
    let d = deploy(&uniq).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Route53Fixture::start(d.hcs.clone(), Mode::Answer, cloudwatch::endpoint()).await;
    let config = dir.path().join("check-aws.toml");
    std::fs::write(
        &config,
        config_text(&d.services, &cloudwatch::endpoint(), &fixture.url),
    )
    .expect("write config");

    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || check_aws(&config))
        .await
        .expect("join");
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    assert_eq!(code, Some(1), "violations exit 1; stderr: {stderr}");
    assert_eq!(report["region"], cloudwatch::REGION);
    let found = rules_by_service(&report);
    let clean = format!("clean-{uniq}");
    assert!(
        !found.contains_key(&clean),
        "clean service flagged: {:?}",
        found.get(&clean)
    );
    for (case, _, _) in CASES {
        let service = format!("{case}-{uniq}");
        assert_eq!(
            found.get(&service),
            d.expected.get(&service),
            "case {case}; report: {stdout}"
        );
    }
    // Every health check was read, page after page.
    let listed = fixture
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /2013-04-01/healthcheck"))
        .count();
    assert_eq!(listed, d.hcs.len().div_ceil(2), "{:?}", fixture.requests());

    // A denied ListHealthChecks is a `not_checked` row; the rest is still checked.
    let denied = Route53Fixture::start(vec![], Mode::Deny, cloudwatch::endpoint()).await;
    let config = dir.path().join("denied.toml");
    std::fs::write(
        &config,
        config_text(&d.services[..2], &cloudwatch::endpoint(), &denied.url),
    )
    .expect("write config");
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || check_aws(&config))
        .await
        .expect("join");
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    let found = rules_by_service(&report);
    assert_eq!(
        found.get(&clean),
        Some(&vec!["not_checked".to_string()]),
        "{stdout}"
    );
    assert!(stdout.contains("AccessDenied"), "{stdout}");
    // The fix names the IAM action to allow.
    assert!(
        stdout.contains("allow route53:ListHealthChecks"),
        "{stdout}"
    );
    assert_eq!(
        found.get(&format!("highres-{uniq}")),
        Some(&vec!["not_checked".to_string(), "period".to_string()]),
        "{stdout}"
    );
    assert_eq!(code, Some(1), "the period violation still exits 1");

    // Without a violation, a refused read is still not a pass: exit 77.
    let config = dir.path().join("denied-clean.toml");
    std::fs::write(
        &config,
        config_text(&d.services[..1], &cloudwatch::endpoint(), &denied.url),
    )
    .expect("write config");
    let (code, stdout, _) = tokio::task::spawn_blocking(move || check_aws(&config))
        .await
        .expect("join");
    assert!(
        stdout.contains("\"violations\": 0") || stdout.contains("\"violations\":0"),
        "{stdout}"
    );
    assert_eq!(code, Some(77), "not_checked rows alone exit 77; {stdout}");

    broken_listings_are_not_checked(&d, &clean, dir.path()).await;
}

/// A ListHealthChecks answer cut short, one without its list, one whose pages loop, and a
/// second page that never comes are not read as "no health checks": the clean service's health
/// checks are `not_checked` with the reason, and the check exits 77. The endpoint answered the
/// first page, so the stall is 77 whichever timer ends it: `--aws-timeout 2s` before the SDK's
/// 15 s, or the SDK's 3 s (operation_timeout 1 s) before the default 60 s.
async fn broken_listings_are_not_checked(d: &Deployed, clean: &str, dir: &Path) {
    let cases = [
        (Mode::Cut, "5s", "2s", "cut short"),
        (Mode::Bare, "5s", "2s", "no <HealthChecks> element"),
        (Mode::Loop, "5s", "2s", "the listing loops"),
        (
            Mode::Stall,
            "5s",
            "2s",
            "ListHealthChecks: the --aws-timeout of 2s ran out",
        ),
        (
            Mode::Stall,
            "1s",
            "60s",
            "ListHealthChecks: no answer within the operation timeout",
        ),
    ];
    for (mode, try_timeout, aws_timeout, reason) in cases {
        let fixture = Route53Fixture::start(d.hcs.clone(), mode, cloudwatch::endpoint()).await;
        let config = dir.join(format!("{mode:?}-{try_timeout}.toml"));
        let text = config_text(&d.services[..1], &cloudwatch::endpoint(), &fixture.url).replace(
            "operation_timeout = \"5s\"",
            &format!("operation_timeout = \"{try_timeout}\""),
        );
        std::fs::write(&config, text).expect("write config");
        let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
            check_aws_with(
                &config,
                &["--format", "json", "--aws-timeout", aws_timeout],
                &[],
            )
        })
        .await
        .expect("join");
        let report: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{mode:?}: not JSON ({e}): {stdout}\nstderr: {stderr}"));
        let rules = rules_by_service(&report);
        let rows = rules.get(clean).cloned().unwrap_or_default();
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r == "not_checked"),
            "{mode:?}: {stdout}"
        );
        let health = report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["object"] == "health checks")
            .unwrap_or_else(|| panic!("{mode:?}: no health checks row: {stdout}"));
        let problem = health["problem"].as_str().unwrap_or_default();
        assert!(problem.contains(reason), "{mode:?}: {problem}");
        let fix = health["fix"].as_str().unwrap_or_default();
        assert!(fix.contains("route53.endpoint_url"), "{mode:?}: {fix}");
        assert_eq!(code, Some(77), "{mode:?}: {stdout}\nstderr: {stderr}");
    }
}

/// Plain `check` makes no AWS call, whatever endpoints the config names; `check --aws` with no
/// AWS answering exits 74.
#[test]
fn plain_check_makes_no_aws_call_and_unreachable_aws_exits_74() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("c.toml");
    let services = [("orders-db".to_string(), "db.orders.internal".to_string())];
    std::fs::write(&config, config_text(&services, &url, &url)).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("plain check connected to the AWS endpoint: {other:?}"),
    }
    drop(listener);
    let (code, stdout, stderr) = check_aws(&config);
    assert_eq!(code, Some(74), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("cannot reach AWS: DescribeAlarms"),
        "{stderr}"
    );
    // --format json still prints one document, with the error.
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}\nstderr: {stderr}"));
    assert_eq!(doc["exit"], 74, "{stdout}");
    assert_eq!(doc["error"]["kind"], "unreachable", "{stdout}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot reach AWS: DescribeAlarms")),
        "{stdout}"
    );
}

/// An endpoint that accepts connections and never answers is "AWS cannot be reached" (exit 74)
/// whichever timer fires first: `--aws-timeout 2s` before the SDK's 3 s (operation_timeout 1 s,
/// three tries' worth), or the SDK's 3 s before the default `--aws-timeout` of 60 s.
#[test]
fn a_dead_endpoint_exits_74_whichever_timer_fires_first() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Accept every connection and keep it open, reading nothing and answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("dead.toml");
    let services = [("orders-db".to_string(), "db.orders.internal".to_string())];
    let text = config_text(&services, &url, &url)
        .replace("operation_timeout = \"5s\"", "operation_timeout = \"1s\"");
    std::fs::write(&config, text).expect("write");
    let orders: [(&[&str], &str); 2] = [
        (
            &["--format", "json", "--aws-timeout", "2s"],
            "the --aws-timeout of 2s ran out",
        ),
        (&["--format", "json"], "timeout"),
    ];
    for (args, which) in orders {
        let (code, stdout, stderr) = check_aws_with(&config, args, &[]);
        assert_eq!(code, Some(74), "{args:?}: {stdout}\nstderr: {stderr}");
        let doc: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}\nstderr: {stderr}"));
        assert_eq!(doc["error"]["kind"], "unreachable", "{stdout}");
        let message = doc["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("cannot reach AWS: DescribeAlarms") && message.contains(which),
            "{args:?}: {message}"
        );
        if args.len() == 2 {
            assert!(
                !message.contains("--aws-timeout"),
                "the SDK's timer: {message}"
            );
        }
    }
}

/// With no credentials anywhere in the chain, `check --aws` says so plainly and how to provide
/// them, before any call, and exits 77 (nothing could be checked).
#[test]
fn no_credentials_are_named_with_how_to_provide_them() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("c.toml");
    let services = [("orders-db".to_string(), "db.orders.internal".to_string())];
    std::fs::write(&config, config_text(&services, &url, &url)).expect("write");
    let nowhere = dir.path().join("none");
    let nowhere = nowhere.to_str().expect("utf-8 path");
    let env = [
        ("AWS_ACCESS_KEY_ID", None),
        ("AWS_SECRET_ACCESS_KEY", None),
        ("AWS_SESSION_TOKEN", None),
        ("AWS_PROFILE", None),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", None),
        ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", None),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", None),
        ("AWS_CONFIG_FILE", Some(nowhere)),
        ("AWS_SHARED_CREDENTIALS_FILE", Some(nowhere)),
        ("AWS_EC2_METADATA_DISABLED", Some("true")),
    ];
    let (code, stdout, stderr) = check_aws_with(&config, &["--format", "json"], &env);
    assert_eq!(code, Some(77), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("no AWS credentials found"), "{stderr}");
    assert!(stderr.contains("AWS_PROFILE"), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}\nstderr: {stderr}"));
    assert_eq!(doc["error"]["kind"], "credentials", "{stdout}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a call was made without credentials: {other:?}"),
    }
}

/// An alarm whose name carries U+202E (right-to-left override) and U+009B (a one-byte CSI)
/// reaches neither the table nor the JSON raw; the JSON still decodes to the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_in_alarm_names_are_escaped_in_table_and_json() {
    if let Err(why) = cloudwatch::health().await {
        support::skip_or_panic(&format!("LocalStack: {why}"));
        return;
    }
    let uniq = format!(
        "{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() % 1_000_000)
            .unwrap_or_default()
    );
    let cw = support::fixture::cloudwatch()
        .await
        .expect("cloudwatch client");
    let service = format!("bidi-{uniq}");
    let alarm = format!("{service}-\u{202e}yramirp\u{9b}2J");
    let put = cloudwatch::PutAlarms::new(&cw);
    put.add(&alarm);
    put_alarm(&cw, &alarm, &service, "tertiary", &CLEAN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bidi.toml");
    let services = [(service.clone(), format!("bidi{uniq}.internal"))];
    let ep = cloudwatch::endpoint();
    std::fs::write(&config, config_text(&services, &ep, &ep)).expect("write");
    let (table, json) = tokio::task::spawn_blocking(move || {
        (
            check_aws_with(&config, &["--format", "table"], &[]),
            check_aws_with(&config, &["--format", "json"], &[]),
        )
    })
    .await
    .expect("join");
    for (code, stdout, stderr) in [&table, &json] {
        assert_eq!(*code, Some(1), "{stdout}\nstderr: {stderr}");
        for out in [stdout, stderr] {
            assert!(
                !out.contains(['\u{202e}', '\u{9b}']),
                "a raw control reached the output: {out:?}"
            );
        }
    }
    assert!(table.1.contains("\\u{202e}yramirp\\u{9b}2J"), "{}", table.1);
    let doc: Value = serde_json::from_str(&json.1).expect("JSON");
    let objects: Vec<&str> = doc["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["object"].as_str())
        .collect();
    assert!(
        objects.contains(&format!("alarm {alarm}").as_str()),
        "{objects:?}"
    );
}
