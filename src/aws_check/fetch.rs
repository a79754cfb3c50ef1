//! The reads of `check --aws`: CloudWatch alarms and their recent data, Route 53 health checks,
//! hosted zones and records, turned into the plain data of [`super::model`]. A call AWS answers
//! with an error (denied, throttled, unknown zone), an answer that cannot be used whole, a
//! listing that loops or does not end, and a call the overall deadline cuts short become
//! [`Fetched::NotChecked`] with their reason and fix ([`super::limits`]); no connection, or a
//! call left unanswered at an endpoint that answered no call, ends the check, whichever timer
//! (the SDK's or the deadline) gave up on it ([`super::limits::Cut`]).

use super::limits::{
    self, Call, Cut, DESCRIBE_ALARMS, Deadline, GET_METRIC_STATISTICS, HEALTH_CHECKS_SHAPE,
    LIST_HEALTH_CHECKS, LIST_HOSTED_ZONES_BY_NAME, LIST_RESOURCE_RECORD_SETS, Pages, RECORDS_SHAPE,
    Whole, ZONES_SHAPE,
};
use super::model::{
    Alarm, AlarmRef, BranchExpect, Expect, Failure, Fetched, HealthCheck, Inventory, Record,
    Series, Unchecked,
};
use super::rules::{self, RECENT_SECS};
use crate::aws::cause::cause;
use crate::aws::{AwsTarget, Retries, Timeouts};
use crate::aws_vocab::Spelled;
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

/// AWS could not be reached: no answer, or a timeout of the SDK.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {cause}")]
pub struct Unreachable {
    /// The API call.
    pub call: &'static str,
    /// What happened.
    pub cause: String,
}

/// Whether the SDK gave up on a call for lack of an answer in time (its operation or attempt
/// timeout, or the connect timeout).
fn is_timeout<E>(e: &SdkError<E>) -> bool {
    match e {
        SdkError::TimeoutError(_) => true,
        SdkError::DispatchFailure(d) => d.is_timeout(),
        _ => false,
    }
}

/// An error AWS answered becomes the reason a check was not done, with the fix for its cause;
/// a timeout is judged by what the endpoint answered before ([`Deadline::timed_out`]); any
/// other error ends the check.
fn answered<E>(deadline: &Deadline, call: Call, e: SdkError<E>) -> Result<Unchecked, Unreachable>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &e {
        SdkError::ServiceError(s) => {
            let err = s.err();
            Ok(limits::answered(
                call,
                &crate::config::escape_controls(err.code().unwrap_or("error")),
                &crate::config::escape_controls(err.message().unwrap_or("no message")),
            ))
        }
        SdkError::ResponseError(_) => Ok(limits::malformed(
            call,
            &format!("it could not be read: {}", cause(&e)),
        )),
        _ if is_timeout(&e) => cut(call, deadline.timed_out(call, cause(&e))),
        _ => Err(Unreachable {
            call: call.name,
            cause: cause(&e),
        }),
    }
}

/// A call a timer cut short: not checked, or the end of the check.
fn cut(call: Call, c: Cut) -> Result<Unchecked, Unreachable> {
    match c {
        Cut::NotChecked(u) => Ok(u),
        Cut::Unreachable(cause) => Err(Unreachable {
            call: call.name,
            cause,
        }),
    }
}

/// A call's result within the deadline: `Ok(Err(why))` when the deadline cut it short.
type Bounded<T> = Result<Result<T, Unchecked>, Unreachable>;

/// Run a call to the end or the deadline; an error it gets is [`answered`].
async fn send<T, E, F>(deadline: &Deadline, call: Call, f: F) -> Bounded<T>
where
    F: std::future::Future<Output = Result<T, SdkError<E>>>,
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match deadline.run(call, f).await {
        Ok(Ok(t)) => Ok(Ok(t)),
        Ok(Err(e)) => answered(deadline, call, e).map(Err),
        Err(c) => cut(call, c).map(Err),
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
    /// Build both clients of one place, once its chain has a region and usable credentials
    /// (through its role, when it names one).
    ///
    /// # Errors
    /// The [`Failure`] when it has no region or no usable credentials, with the region the
    /// chain found (empty when none), for the report.
    pub async fn new(
        place: &Place,
        route53_endpoint: Option<&str>,
        deadline: &Deadline,
    ) -> Result<Clients, (String, Failure)> {
        let session = place.target.session().await;
        let region = session.region().unwrap_or_default().to_string();
        if region.is_empty() {
            return Err((
                region,
                Failure {
                    exit: super::EXIT_IO,
                    kind: "no_region",
                    message: "no AWS region".into(),
                    fix: "set publish.cloudwatch.region, AWS_REGION or a profile's region".into(),
                },
            ));
        }
        if let Err(f) = super::creds::usable(session.sdk_config(), deadline).await {
            return Err((region, f));
        }
        let cloudwatch = session
            .cloudwatch()
            .interceptor(deadline.cloudwatch_answers())
            .build();
        let route53 = session
            .at(route53_endpoint)
            .route53()
            .interceptor(deadline.route53_answers())
            .build();
        Ok(Clients {
            cloudwatch: aws_sdk_cloudwatch::Client::from_conf(cloudwatch),
            route53: aws_sdk_route53::Client::from_conf(route53),
            region,
        })
    }
}

/// One place the check reads: a distinct publish target (region, endpoint, role) and the
/// services that publish there.
#[derive(Debug, Clone)]
pub struct Place {
    /// The target's name (the first service's name for it).
    pub name: String,
    /// Where and how its clients talk to AWS.
    pub target: AwsTarget,
    /// Indexes into the config's services.
    pub services: Vec<usize>,
}

/// Every distinct target of the config's services, in config order, each read once: each try
/// cut at `operation_timeout` and a call at three tries' worth, [`MAX_TRIES`] tries, bodies of
/// at most [`MAX_RESPONSE_BYTES`] (Route 53's endpoint is set per client).
pub fn places(cfg: &Config) -> Vec<Place> {
    let mut out: Vec<Place> = Vec::new();
    for (i, svc) in cfg.services.iter().enumerate() {
        for (name, target) in targets_of(cfg, svc) {
            match out.iter_mut().find(|p| p.target == target) {
                Some(p) if !p.services.contains(&i) => p.services.push(i),
                Some(_) => {}
                None => out.push(Place {
                    name,
                    target,
                    services: vec![i],
                }),
            }
        }
    }
    out
}

/// A service's publish targets, named, mapped by [`crate::aws::target_for`] with the check's
/// timeouts, tries and body cap.
fn targets_of(cfg: &Config, svc: &ServiceConfig) -> Vec<(String, AwsTarget)> {
    let timeout = cfg.publish.cloudwatch.operation_timeout;
    let timeouts = Timeouts {
        operation: timeout * 3,
        ..Timeouts::per_call(timeout)
    };
    svc.publish_targets
        .iter()
        .map(|t| {
            let target = crate::aws::target_for(
                t,
                &cfg.prober_id,
                timeouts,
                Retries::Standard(MAX_TRIES),
                MAX_RESPONSE_BYTES,
            );
            (t.name.clone(), target)
        })
        .collect()
}

/// The expectations of the config at one place, as plain data: its services, each knowing the
/// regions of its other places (`regions[i]` is the region of place `i`).
pub fn expect(cfg: &Config, places: &[Place], at: usize, regions: &[String]) -> Expect {
    let region = regions[at].clone();
    let services = places[at]
        .services
        .iter()
        .map(|&i| {
            let mut e = service_expect(&cfg.services[i]);
            e.other_regions = places
                .iter()
                .enumerate()
                .filter(|(k, p)| *k != at && p.services.contains(&i))
                .map(|(k, _)| regions[k].clone())
                .filter(|r| *r != region)
                .collect();
            e.other_regions.sort();
            e.other_regions.dedup();
            e
        })
        .collect();
    Expect {
        region,
        insufficient_data: cfg.route53.insufficient_data_health_status,
        services,
    }
}

fn service_expect(s: &ServiceConfig) -> super::model::ServiceExpect {
    super::model::ServiceExpect {
        name: s.service.name.clone(),
        namespace: s.namespace.clone(),
        stable_name: s.service.stable_name.clone(),
        other_regions: Vec::new(),
        branches: s
            .branches
            .iter()
            .map(|b| BranchExpect {
                name: b.name.clone(),
                role: b.role.to_string(),
                endpoint: b.endpoint.trim_end_matches('.').to_ascii_lowercase(),
                region: b.region.clone(),
            })
            .collect(),
    }
}

/// Read everything the rules need, within the deadline.
///
/// # Errors
/// [`Unreachable`] when a call gets no answer.
pub async fn inventory(
    clients: &Clients,
    cfg: &Config,
    place: &Place,
    expect: &Expect,
    deadline: &Deadline,
) -> Result<Inventory, Unreachable> {
    let alarms = alarms(&clients.cloudwatch, deadline).await?;
    let health_checks = health_checks(&clients.route53, deadline).await?;
    let mut recent = BTreeMap::new();
    if let Fetched::Got(a) = &alarms {
        let hcs = health_checks.got().map_or(&[][..], Vec::as_slice);
        let todo = rules::alarms_to_sample(expect, a, hcs)
            .into_iter()
            .map(|(a, s)| (a.name.clone(), s.clone(), a.unit.clone()))
            .collect();
        recent = recent_data(&clients.cloudwatch, todo, deadline).await?;
    }
    let mut records = BTreeMap::new();
    let mut zones = BTreeMap::new();
    for svc in place.services.iter().map(|&i| &cfg.services[i]) {
        let got = service_records(
            &clients.route53,
            cfg.route53.hosted_zone_id.as_deref(),
            &svc.service.stable_name,
            &mut zones,
            deadline,
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
        statistic: m.statistic().map(|s| Spelled::parse(s.as_str())),
        extended_statistic: m.extended_statistic().map(str::to_string),
        period: m.period(),
        evaluation_periods: m.evaluation_periods(),
        datapoints_to_alarm: m.datapoints_to_alarm(),
        treat_missing_data: m.treat_missing_data().map(Spelled::parse),
        comparison: m.comparison_operator().map(|c| Spelled::parse(c.as_str())),
        threshold: m.threshold(),
    }
}

/// Every metric alarm of the region (`DescribeAlarms`, every page).
async fn alarms(
    cw: &aws_sdk_cloudwatch::Client,
    deadline: &Deadline,
) -> Result<Fetched<Vec<Alarm>>, Unreachable> {
    let mut out = Vec::new();
    let mut pages = Pages::new(DESCRIBE_ALARMS);
    let mut token: Option<String> = None;
    loop {
        let call = cw
            .describe_alarms()
            .alarm_types(aws_sdk_cloudwatch::types::AlarmType::MetricAlarm)
            .set_next_token(token.take())
            .send();
        let page = match send(deadline, DESCRIBE_ALARMS, call).await? {
            Ok(p) => p,
            Err(why) => return Ok(Fetched::NotChecked(why)),
        };
        out.extend(page.metric_alarms().iter().map(alarm));
        // An empty NextToken ends a listing, as the SDK's own paginators take it.
        let next = page.next_token().filter(|t| !t.is_empty());
        match pages.next(next.map(str::to_string)) {
            Ok(Some(t)) => token = Some(t),
            Ok(None) => break,
            Err(why) => return Ok(Fetched::NotChecked(why)),
        }
    }
    tracing::debug!(alarms = out.len(), "read the metric alarms");
    Ok(Fetched::Got(out))
}

/// Whether each alarm's series has a recent datum, [`SAMPLE_CONCURRENCY`] calls at a time.
async fn recent_data(
    cw: &aws_sdk_cloudwatch::Client,
    todo: Vec<(String, Series, Option<String>)>,
    deadline: &Deadline,
) -> Result<BTreeMap<String, Fetched<bool>>, Unreachable> {
    let mut out = BTreeMap::new();
    let mut todo = todo.into_iter();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < SAMPLE_CONCURRENCY {
            let Some((name, series, unit)) = todo.next() else {
                break;
            };
            let (cw, deadline) = (cw.clone(), deadline.clone());
            running.spawn(async move {
                let got = has_recent_datum(&cw, &series, unit.as_deref(), &deadline).await;
                (name, got)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let (name, got) = done.map_err(|e| Unreachable {
            call: GET_METRIC_STATISTICS.name,
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
    deadline: &Deadline,
) -> Result<Fetched<bool>, Unreachable> {
    let now = SystemTime::now();
    let start = now - Duration::from_secs(RECENT_SECS.unsigned_abs());
    let dimensions = s
        .dimensions
        .iter()
        .map(|(n, v)| Dimension::builder().name(n).value(v).build())
        .collect();
    let call = cw
        .get_metric_statistics()
        .namespace(&s.namespace)
        .metric_name(&s.metric)
        .set_dimensions(Some(dimensions))
        .start_time(start.into())
        .end_time((now + Duration::from_secs(60)).into())
        .period(60)
        .statistics(Statistic::SampleCount)
        .set_unit(unit.map(StandardUnit::from))
        .send();
    Ok(match send(deadline, GET_METRIC_STATISTICS, call).await? {
        Ok(r) => Fetched::Got(!r.datapoints().is_empty()),
        Err(why) => Fetched::NotChecked(why),
    })
}

/// A `ListHealthChecks` health check as plain data; `Err` says what it lacks.
fn health_check(h: &aws_sdk_route53::types::HealthCheck) -> Result<HealthCheck, String> {
    let c = h
        .health_check_config()
        .ok_or_else(|| format!("health check {:?} has no HealthCheckConfig", h.id()))?;
    let kind = c.r#type().as_str();
    if h.id().is_empty() || kind.is_empty() || kind == "no value was set" {
        return Err(format!(
            "a health check without Id or Type (Id {:?})",
            crate::config::escape_controls(h.id())
        ));
    }
    Ok(HealthCheck {
        id: h.id().to_string(),
        kind: Spelled::parse(kind),
        alarm: c.alarm_identifier().map(|a| AlarmRef {
            name: a.name().to_string(),
            region: a.region().as_str().to_string(),
        }),
        insufficient_data: c
            .insufficient_data_health_status()
            .map(|s| Spelled::parse(s.as_str())),
        inverted: c.inverted().unwrap_or(false),
        disabled: c.disabled().unwrap_or(false),
        children: c.child_health_checks().to_vec(),
        health_threshold: c.health_threshold(),
    })
}

/// The marker of the next page of a Route 53 listing: `None` when the page is the last, an
/// empty string when it says more follow but names none (which [`Pages`] rejects).
fn next_marker(truncated: bool, marker: Option<&str>) -> Option<String> {
    truncated.then(|| marker.unwrap_or_default().to_string())
}

/// Every health check of the account (`ListHealthChecks`, every page). An answer that is not
/// whole is not read as a shorter list: the health checks are then not checked.
async fn health_checks(
    r53: &aws_sdk_route53::Client,
    deadline: &Deadline,
) -> Result<Fetched<Vec<HealthCheck>>, Unreachable> {
    let mut out = Vec::new();
    let mut pages = Pages::new(LIST_HEALTH_CHECKS);
    let mut marker: Option<String> = None;
    loop {
        let whole = Whole::new(HEALTH_CHECKS_SHAPE);
        let call = r53
            .list_health_checks()
            .set_marker(marker.take())
            .customize()
            .interceptor(whole.clone())
            .send();
        let page = match send(deadline, LIST_HEALTH_CHECKS, call).await? {
            Ok(p) => p,
            Err(why) => return Ok(Fetched::NotChecked(why)),
        };
        let read = whole
            .verdict()
            .and_then(|()| page.health_checks().iter().map(health_check).collect());
        match read {
            Ok(hcs) => out.extend::<Vec<HealthCheck>>(hcs),
            Err(what) => {
                return Ok(Fetched::NotChecked(limits::malformed(
                    LIST_HEALTH_CHECKS,
                    &what,
                )));
            }
        }
        match pages.next(next_marker(page.is_truncated(), page.next_marker())) {
            Ok(Some(m)) => marker = Some(m),
            Ok(None) => break,
            Err(why) => return Ok(Fetched::NotChecked(why)),
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
    deadline: &Deadline,
) -> Result<Fetched<(String, Vec<Record>)>, Unreachable> {
    let zone = match zone_id {
        Some(z) => z.to_string(),
        None => match private_zone(r53, stable_name, zones, deadline).await? {
            Fetched::Got(z) => z,
            Fetched::NotChecked(why) => return Ok(Fetched::NotChecked(why)),
        },
    };
    Ok(match records(r53, &zone, stable_name, deadline).await? {
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
    deadline: &Deadline,
) -> Result<Fetched<String>, Unreachable> {
    let labels: Vec<&str> = name.split('.').collect();
    let set_id = "set route53.hosted_zone_id to the zone that holds the failover records";
    for i in 0..labels.len() {
        let suffix = labels[i..].join(".");
        let ids = match zones.get(&suffix) {
            Some(ids) => ids,
            None => {
                let found = match zones_named(r53, &suffix, deadline).await? {
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
                return Ok(Fetched::NotChecked(Unchecked::new(
                    format!(
                        "{} private hosted zones are named {suffix} ({})",
                        ids.len(),
                        ids.join(", ")
                    ),
                    set_id,
                )));
            }
        }
    }
    Ok(Fetched::NotChecked(Unchecked::new(
        format!("no private hosted zone holds {name}"),
        set_id,
    )))
}

/// The private zones of each name asked so far: services of one zone ask once.
type ZoneCache = BTreeMap<String, Vec<String>>;

/// The ids of the private hosted zones named `name` (`ListHostedZonesByName`).
async fn zones_named(
    r53: &aws_sdk_route53::Client,
    name: &str,
    deadline: &Deadline,
) -> Result<Fetched<Vec<String>>, Unreachable> {
    let whole = Whole::new(ZONES_SHAPE);
    let call = r53
        .list_hosted_zones_by_name()
        .dns_name(name)
        .max_items(100)
        .customize()
        .interceptor(whole.clone())
        .send();
    let page = match send(deadline, LIST_HOSTED_ZONES_BY_NAME, call).await? {
        Ok(p) => p,
        Err(why) => return Ok(Fetched::NotChecked(why)),
    };
    if let Err(what) = whole.verdict() {
        return Ok(Fetched::NotChecked(limits::malformed(
            LIST_HOSTED_ZONES_BY_NAME,
            &what,
        )));
    }
    Ok(Fetched::Got(
        page.hosted_zones()
            .iter()
            .filter(|z| z.name().trim_end_matches('.').eq_ignore_ascii_case(name))
            .filter(|z| z.config().is_some_and(|c| c.private_zone()))
            .map(|z| z.id().trim_start_matches("/hostedzone/").to_string())
            .collect(),
    ))
}

/// A `ListResourceRecordSets` record as plain data.
fn record(name: String, r: &aws_sdk_route53::types::ResourceRecordSet) -> Record {
    Record {
        name,
        rtype: r.r#type().as_str().to_string(),
        set_identifier: r.set_identifier().map(str::to_string),
        failover: r.failover().map(|f| f.as_str().to_string()),
        ttl: r.ttl(),
        health_check_id: r.health_check_id().map(str::to_string),
        evaluate_target_health: r.alias_target().is_some_and(|a| a.evaluate_target_health()),
        values: r
            .resource_records()
            .iter()
            .map(|v| v.value().to_string())
            .collect(),
        alias_target: r.alias_target().map(|a| a.dns_name().to_string()),
    }
}

/// Where the next page of records starts: name, type, set identifier.
type RecordsFrom = (String, Option<String>, Option<String>);

/// The records named `name` (`ListResourceRecordSets` from `name` on, while the name matches).
async fn records(
    r53: &aws_sdk_route53::Client,
    zone: &str,
    name: &str,
    deadline: &Deadline,
) -> Result<Fetched<Vec<Record>>, Unreachable> {
    let mut out = Vec::new();
    let mut pages = Pages::new(LIST_RESOURCE_RECORD_SETS);
    let mut next: RecordsFrom = (name.to_string(), None, None);
    loop {
        let (start, rtype, id) = next;
        let whole = Whole::new(RECORDS_SHAPE);
        let call = r53
            .list_resource_record_sets()
            .hosted_zone_id(zone)
            .start_record_name(start)
            .set_start_record_type(rtype.as_deref().map(aws_sdk_route53::types::RrType::from))
            .set_start_record_identifier(id)
            .customize()
            .interceptor(whole.clone())
            .send();
        let page = match send(deadline, LIST_RESOURCE_RECORD_SETS, call).await? {
            Ok(p) => p,
            Err(why) => return Ok(Fetched::NotChecked(why)),
        };
        if let Err(what) = whole.verdict() {
            return Ok(Fetched::NotChecked(limits::malformed(
                LIST_RESOURCE_RECORD_SETS,
                &what,
            )));
        }
        let mut past = false;
        for r in page.resource_record_sets() {
            let rname = r.name().trim_end_matches('.').to_ascii_lowercase();
            if rname == name {
                out.push(record(rname, r));
            } else {
                past = true;
            }
        }
        let from: Option<RecordsFrom> = (page.is_truncated() && !past).then(|| {
            (
                page.next_record_name().unwrap_or_default().to_string(),
                page.next_record_type().map(|t| t.as_str().to_string()),
                page.next_record_identifier().map(str::to_string),
            )
        });
        // One token of the three, for Pages: a repeated start is a loop.
        let token = from.as_ref().map(|(n, t, i)| {
            if n.is_empty() {
                String::new()
            } else {
                format!(
                    "{n} {} {}",
                    t.as_deref().unwrap_or("-"),
                    i.as_deref().unwrap_or("-")
                )
            }
        });
        match (pages.next(token), from) {
            (Ok(Some(_)), Some(f)) => next = f,
            (Ok(_), _) => break,
            (Err(why), _) => return Ok(Fetched::NotChecked(why)),
        }
    }
    Ok(Fetched::Got(out))
}
