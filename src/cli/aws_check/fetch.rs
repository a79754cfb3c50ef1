//! The reads of `check --aws`: CloudWatch alarms and their recent data, Route 53 health checks,
//! hosted zones and records, turned into the plain data of [`super::model`]. A call AWS answers
//! with an error (denied, throttled, unknown zone) becomes [`Fetched::NotChecked`]; a call that
//! gets no answer at all (no network, no credentials, a timeout) ends the check.

use super::model::{Alarm, AlarmRef, Expect, Fetched, HealthCheck, Inventory, Record, Series};
use super::rules::{self, RECENT_SECS};
use crate::config::{Config, ServiceConfig};
use aws_sdk_cloudwatch::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::types::{Dimension, MetricAlarm, StandardUnit, Statistic};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Largest response body read from either service, bytes (a page of 1,000 health checks is
/// about 700 KB).
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// How many `GetMetricStatistics` calls run at once (a fleet has thousands of alarms).
const SAMPLE_CONCURRENCY: usize = 8;

/// Tries per call, the first included: Route 53 allows 5 requests a second per account, so a
/// large fleet meets throttling, which the SDK retries with backoff.
const MAX_TRIES: u32 = 5;

/// Largest number of pages read of one listing: far past any real account, a bound on an
/// endpoint that keeps answering with a next token.
const MAX_PAGES: usize = 1000;

/// AWS could not be reached: no answer, no credentials, or a timeout.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {cause}")]
pub struct Unreachable {
    /// The API call.
    pub call: &'static str,
    /// What happened.
    pub cause: String,
}

/// Longest cause kept from a failed call, characters.
const MAX_CAUSE_CHARS: usize = 300;

/// An error and its sources on one line (`dispatch failure: ...: no credentials found`), each
/// message once, without the SDK's debug dump.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    let joined = parts.join(": ");
    crate::config::escape_controls(&joined)
        .chars()
        .take(MAX_CAUSE_CHARS)
        .collect()
}

/// An error AWS answered becomes the reason a check was not done; any other ends the check.
fn answered<E>(call: &'static str, e: SdkError<E>) -> Result<String, Unreachable>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &e {
        SdkError::ServiceError(s) => {
            let err = s.err();
            Ok(format!(
                "{call} failed: {}: {}",
                err.code().unwrap_or("error"),
                crate::config::escape_controls(err.message().unwrap_or("no message"))
            ))
        }
        SdkError::ResponseError(_) => Ok(format!(
            "{call}: an answer that could not be read ({})",
            cause(&e)
        )),
        _ => Err(Unreachable {
            call,
            cause: cause(&e),
        }),
    }
}

/// The clients, built as the CloudWatch sink builds its own: the default AWS chain, the
/// config's region and endpoints, bounded calls and bodies.
pub struct Clients {
    cloudwatch: aws_sdk_cloudwatch::Client,
    route53: aws_sdk_route53::Client,
    /// The region the alarms are read in (empty when the chain has none).
    pub region: String,
}

impl Clients {
    /// Build both clients.
    pub async fn new(cfg: &Config) -> Clients {
        let cw = &cfg.publish.cloudwatch;
        let timeout = cw.operation_timeout;
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_timeout(timeout * 3)
                    .operation_attempt_timeout(timeout)
                    .connect_timeout(Duration::from_secs(3).min(timeout))
                    .build(),
            );
        loader = loader
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(MAX_TRIES));
        if let Some(r) = &cw.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        let shared = loader.load().await;
        let region = shared.region().map(ToString::to_string).unwrap_or_default();
        let mut c = aws_sdk_cloudwatch::config::Builder::from(&shared)
            .interceptor(crate::sink::BodyLimit(MAX_RESPONSE_BYTES));
        if let Some(e) = &cw.endpoint_url {
            c = c.endpoint_url(e);
        }
        let mut r = aws_sdk_route53::config::Builder::from(&shared)
            .interceptor(crate::sink::BodyLimit(MAX_RESPONSE_BYTES));
        if let Some(e) = &cfg.route53.endpoint_url {
            r = r.endpoint_url(e);
        }
        Clients {
            cloudwatch: aws_sdk_cloudwatch::Client::from_conf(c.build()),
            route53: aws_sdk_route53::Client::from_conf(r.build()),
            region,
        }
    }
}

/// The expectations of the config, as plain data.
pub fn expect(cfg: &Config, region: &str) -> Expect {
    Expect {
        region: region.to_string(),
        insufficient_data: cfg
            .route53
            .insufficient_data_health_status
            .map(|s| s.to_string()),
        services: cfg.services.iter().map(service_expect).collect(),
    }
}

fn service_expect(s: &ServiceConfig) -> super::model::ServiceExpect {
    super::model::ServiceExpect {
        name: s.service.name.clone(),
        namespace: s.namespace.clone(),
        stable_name: s.service.stable_name.clone(),
        branches: s
            .branches
            .iter()
            .map(|b| (b.name.clone(), b.role.to_string()))
            .collect(),
    }
}

/// Read everything the rules need.
///
/// # Errors
/// [`Unreachable`] when a call gets no answer.
pub async fn inventory(
    clients: &Clients,
    cfg: &Config,
    expect: &Expect,
) -> Result<Inventory, Unreachable> {
    let alarms = alarms(&clients.cloudwatch).await?;
    let health_checks = health_checks(&clients.route53).await?;
    let mut recent = BTreeMap::new();
    if let Fetched::Got(a) = &alarms {
        let hcs = health_checks.got().map_or(&[][..], Vec::as_slice);
        let todo = rules::alarms_to_sample(expect, a, hcs)
            .into_iter()
            .map(|(a, s)| (a.name.clone(), s.clone(), a.unit.clone()))
            .collect();
        recent = recent_data(&clients.cloudwatch, todo).await?;
    }
    let mut records = BTreeMap::new();
    let mut zones = BTreeMap::new();
    for svc in &cfg.services {
        let got = service_records(
            &clients.route53,
            cfg.route53.hosted_zone_id.as_deref(),
            &svc.service.stable_name,
            &mut zones,
        )
        .await?;
        records.insert(svc.service.name.clone(), got);
    }
    Ok(Inventory {
        alarms,
        health_checks,
        records,
        recent,
    })
}

fn dims(d: &[Dimension]) -> Vec<(String, String)> {
    d.iter()
        .map(|d| {
            (
                d.name().unwrap_or_default().to_string(),
                d.value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A `DescribeAlarms` metric alarm as plain data.
fn alarm(m: &MetricAlarm) -> Alarm {
    let math: Vec<Series> = m
        .metrics()
        .iter()
        .filter_map(|q| q.metric_stat().and_then(|s| s.metric()))
        .map(|x| Series {
            namespace: x.namespace().unwrap_or_default().to_string(),
            metric: x.metric_name().unwrap_or_default().to_string(),
            dimensions: dims(x.dimensions()),
        })
        .collect();
    let series = m.metrics().is_empty().then(|| Series {
        namespace: m.namespace().unwrap_or_default().to_string(),
        metric: m.metric_name().unwrap_or_default().to_string(),
        dimensions: dims(m.dimensions()),
    });
    Alarm {
        name: m.alarm_name().unwrap_or_default().to_string(),
        series,
        math,
        unit: m.unit().map(|u| u.as_str().to_string()),
        statistic: m.statistic().map(|s| s.as_str().to_string()),
        extended_statistic: m.extended_statistic().map(str::to_string),
        period: m.period(),
        evaluation_periods: m.evaluation_periods(),
        datapoints_to_alarm: m.datapoints_to_alarm(),
        treat_missing_data: m.treat_missing_data().map(str::to_string),
        comparison: m.comparison_operator().map(|c| c.as_str().to_string()),
        threshold: m.threshold(),
    }
}

/// Every metric alarm of the region (`DescribeAlarms`, every page).
async fn alarms(cw: &aws_sdk_cloudwatch::Client) -> Result<Fetched<Vec<Alarm>>, Unreachable> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = cw
            .describe_alarms()
            .alarm_types(aws_sdk_cloudwatch::types::AlarmType::MetricAlarm)
            .set_next_token(token.take())
            .send()
            .await;
        let page = match page {
            Ok(p) => p,
            Err(e) => return answered("DescribeAlarms", e).map(Fetched::NotChecked),
        };
        out.extend(page.metric_alarms().iter().map(alarm));
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    tracing::debug!(alarms = out.len(), "read the metric alarms");
    Ok(Fetched::Got(out))
}

/// Whether each alarm's series has a recent datum, [`SAMPLE_CONCURRENCY`] calls at a time.
async fn recent_data(
    cw: &aws_sdk_cloudwatch::Client,
    todo: Vec<(String, Series, Option<String>)>,
) -> Result<BTreeMap<String, Fetched<bool>>, Unreachable> {
    let mut out = BTreeMap::new();
    let mut todo = todo.into_iter();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < SAMPLE_CONCURRENCY {
            let Some((name, series, unit)) = todo.next() else {
                break;
            };
            let cw = cw.clone();
            running.spawn(async move {
                let got = has_recent_datum(&cw, &series, unit.as_deref()).await;
                (name, got)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let (name, got) = done.map_err(|e| Unreachable {
            call: "GetMetricStatistics",
            cause: format!("the call's task ended: {e}"),
        })?;
        out.insert(name, got?);
    }
    Ok(out)
}

/// Whether the alarm's series has a datum in the last [`RECENT_SECS`]
/// (`GetMetricStatistics`, `SampleCount`, filtered by the alarm's unit as the alarm is).
async fn has_recent_datum(
    cw: &aws_sdk_cloudwatch::Client,
    s: &Series,
    unit: Option<&str>,
) -> Result<Fetched<bool>, Unreachable> {
    let now = SystemTime::now();
    let start = now - Duration::from_secs(RECENT_SECS.unsigned_abs());
    let dimensions = s
        .dimensions
        .iter()
        .map(|(n, v)| Dimension::builder().name(n).value(v).build())
        .collect();
    let got = cw
        .get_metric_statistics()
        .namespace(&s.namespace)
        .metric_name(&s.metric)
        .set_dimensions(Some(dimensions))
        .start_time(start.into())
        .end_time((now + Duration::from_secs(60)).into())
        .period(60)
        .statistics(Statistic::SampleCount)
        .set_unit(unit.map(StandardUnit::from))
        .send()
        .await;
    match got {
        Ok(r) => Ok(Fetched::Got(!r.datapoints().is_empty())),
        Err(e) => answered("GetMetricStatistics", e).map(Fetched::NotChecked),
    }
}

/// Every health check of the account (`ListHealthChecks`, every page).
async fn health_checks(
    r53: &aws_sdk_route53::Client,
) -> Result<Fetched<Vec<HealthCheck>>, Unreachable> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = match r53
            .list_health_checks()
            .set_marker(marker.take())
            .send()
            .await
        {
            Ok(p) => p,
            Err(e) => return answered("ListHealthChecks", e).map(Fetched::NotChecked),
        };
        out.extend(page.health_checks().iter().map(|h| {
            let c = h.health_check_config();
            HealthCheck {
                id: h.id().to_string(),
                kind: c
                    .map(|c| c.r#type().as_str().to_string())
                    .unwrap_or_default(),
                alarm: c.and_then(|c| c.alarm_identifier()).map(|a| AlarmRef {
                    name: a.name().to_string(),
                    region: a.region().as_str().to_string(),
                }),
                insufficient_data: c
                    .and_then(|c| c.insufficient_data_health_status())
                    .map(|s| s.as_str().to_string()),
            }
        }));
        marker = page
            .is_truncated()
            .then(|| page.next_marker().map(str::to_string))
            .flatten();
        if marker.is_none() {
            break;
        }
    }
    tracing::debug!(health_checks = out.len(), "read the health checks");
    Ok(Fetched::Got(out))
}

/// The zone (configured, or found by name) and the records named by the stable name.
async fn service_records(
    r53: &aws_sdk_route53::Client,
    zone_id: Option<&str>,
    stable_name: &str,
    zones: &mut ZoneCache,
) -> Result<Fetched<(String, Vec<Record>)>, Unreachable> {
    let zone = match zone_id {
        Some(z) => z.to_string(),
        None => match private_zone(r53, stable_name, zones).await? {
            Fetched::Got(z) => z,
            Fetched::NotChecked(why) => return Ok(Fetched::NotChecked(why)),
        },
    };
    Ok(match records(r53, &zone, stable_name).await? {
        Fetched::Got(r) => Fetched::Got((zone, r)),
        Fetched::NotChecked(why) => Fetched::NotChecked(why),
    })
}

/// The private hosted zone named `name` or its longest suffix
/// (`ListHostedZonesByName`, one call per suffix).
async fn private_zone(
    r53: &aws_sdk_route53::Client,
    name: &str,
    zones: &mut ZoneCache,
) -> Result<Fetched<String>, Unreachable> {
    let labels: Vec<&str> = name.split('.').collect();
    for i in 0..labels.len() {
        let suffix = labels[i..].join(".");
        let ids = match zones.get(&suffix) {
            Some(ids) => ids,
            None => {
                let found = match zones_named(r53, &suffix).await? {
                    Fetched::Got(ids) => ids,
                    Fetched::NotChecked(why) => return Ok(Fetched::NotChecked(why)),
                };
                zones.entry(suffix.clone()).or_insert(found)
            }
        };
        match ids.as_slice() {
            [] => continue,
            [id] => return Ok(Fetched::Got((*id).to_string())),
            _ => {
                return Ok(Fetched::NotChecked(format!(
                    "{} private hosted zones are named {suffix} ({}); set route53.hosted_zone_id",
                    ids.len(),
                    ids.join(", ")
                )));
            }
        }
    }
    Ok(Fetched::NotChecked(format!(
        "no private hosted zone holds {name}; set route53.hosted_zone_id"
    )))
}

/// The private zones of each name asked so far: services of one zone ask once.
type ZoneCache = BTreeMap<String, Vec<String>>;

/// The ids of the private hosted zones named `name` (`ListHostedZonesByName`).
async fn zones_named(
    r53: &aws_sdk_route53::Client,
    name: &str,
) -> Result<Fetched<Vec<String>>, Unreachable> {
    let page = r53
        .list_hosted_zones_by_name()
        .dns_name(name)
        .max_items(100)
        .send()
        .await;
    let page = match page {
        Ok(p) => p,
        Err(e) => return answered("ListHostedZonesByName", e).map(Fetched::NotChecked),
    };
    Ok(Fetched::Got(
        page.hosted_zones()
            .iter()
            .filter(|z| z.name().trim_end_matches('.').eq_ignore_ascii_case(name))
            .filter(|z| z.config().is_some_and(|c| c.private_zone()))
            .map(|z| z.id().trim_start_matches("/hostedzone/").to_string())
            .collect(),
    ))
}

/// The records named `name` (`ListResourceRecordSets` from `name` on, while the name matches).
async fn records(
    r53: &aws_sdk_route53::Client,
    zone: &str,
    name: &str,
) -> Result<Fetched<Vec<Record>>, Unreachable> {
    let mut out = Vec::new();
    let mut next: Option<(String, Option<String>, Option<String>)> =
        Some((name.to_string(), None, None));
    for _ in 0..MAX_PAGES {
        let Some((start, rtype, id)) = next.take() else {
            break;
        };
        let page = r53
            .list_resource_record_sets()
            .hosted_zone_id(zone)
            .start_record_name(start)
            .set_start_record_type(rtype.as_deref().map(aws_sdk_route53::types::RrType::from))
            .set_start_record_identifier(id)
            .send()
            .await;
        let page = match page {
            Ok(p) => p,
            Err(e) => return answered("ListResourceRecordSets", e).map(Fetched::NotChecked),
        };
        let mut past = false;
        for r in page.resource_record_sets() {
            let rname = r.name().trim_end_matches('.').to_ascii_lowercase();
            if rname != name {
                past = true;
                continue;
            }
            out.push(Record {
                name: rname,
                rtype: r.r#type().as_str().to_string(),
                set_identifier: r.set_identifier().map(str::to_string),
                failover: r.failover().map(|f| f.as_str().to_string()),
                ttl: r.ttl(),
                health_check_id: r.health_check_id().map(str::to_string),
                evaluate_target_health: r
                    .alias_target()
                    .is_some_and(|a| a.evaluate_target_health()),
            });
        }
        if page.is_truncated() && !past {
            next = page.next_record_name().map(|n| {
                (
                    n.to_string(),
                    page.next_record_type().map(|t| t.as_str().to_string()),
                    page.next_record_identifier().map(str::to_string),
                )
            });
        }
    }
    Ok(Fetched::Got(out))
}
