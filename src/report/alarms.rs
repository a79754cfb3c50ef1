//! The alarm lanes of the drill report (`drill report --alarms`): each branch alarm's states over
//! the drill window, read from CloudWatch. [`fetch`] finds the alarms on each branch's `Readiness`
//! series (`DescribeAlarmsForMetric`) and reads their state history (`DescribeAlarmHistory`);
//! [`lanes`] turns what was read into [`AlarmLane`]s without I/O or clock, so it is tested with
//! plain data.
//!
//! A history item's time is the evaluation's `queryDate` in its `HistoryData` when it has one,
//! else the item's `Timestamp`: CloudWatch sets both to the moment of the change, while LocalStack
//! stamps an item with the time the *previous* state began.

use super::model::{AlarmLane, Band, Span};
use crate::aws::{AwsTarget, Retries, Timeouts};
use crate::aws_vocab::{AlarmState, Spelled};
use crate::readiness::Millis;
use aws_sdk_cloudwatch::config::http::HttpResponse;
use aws_sdk_cloudwatch::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::primitives::{DateTime, DateTimeFormat};
use aws_sdk_cloudwatch::types::{
    AlarmHistoryItem, Dimension, HistoryItemType, MetricAlarm, ScanBy,
};
use serde::Deserialize;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

/// How far before the window the history is read back to, ms: a change before the window gives
/// the state the window starts in, and the clocks of prober and CloudWatch may differ.
pub const HISTORY_MARGIN_MS: Millis = 300_000;

/// Most `DescribeAlarmHistory` pages read for one alarm (100 items a page, newest first): a
/// listing that does not reach back to the window within this, or names a page twice, is not
/// trusted.
pub const MAX_PAGES: usize = 50;

/// `DescribeAlarmHistory` limit: items per page.
const PAGE_SIZE: i32 = 100;

/// Largest response body read, bytes (a page of 100 items is a few hundred KB at most).
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Longest cause kept from a failed call, characters.
const MAX_CAUSE_CHARS: usize = 300;

const DESCRIBE_ALARMS_FOR_METRIC: &str = "DescribeAlarmsForMetric";
const DESCRIBE_ALARM_HISTORY: &str = "DescribeAlarmHistory";

/// A call that failed, timed out or returned a listing that cannot be trusted, on one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} for {subject}: {cause}")]
pub struct AlarmsError {
    /// The API call (`DescribeAlarmHistory`).
    pub call: &'static str,
    /// What it was about: `alarm NAME`, or the series (`Service=… Branch=… in namespace …`).
    pub subject: String,
    /// What happened: the service's error code and message, the transport's error, a timeout.
    pub cause: String,
}

/// One `DescribeAlarmHistory` item as read: its `Timestamp` and its `HistoryData` (JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryItem {
    /// `Timestamp`, ms since the UNIX epoch.
    pub at: Option<Millis>,
    /// `HistoryData`, a JSON document with `oldState`/`newState`.
    pub data: Option<String>,
}

/// What was read of one alarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmFacts {
    /// The alarm's name.
    pub name: String,
    /// The branch it watches (its `Branch` dimension).
    pub branch: String,
    /// Its state now (`StateValue`), for an alarm without history.
    pub current: Option<Spelled<AlarmState>>,
    /// Since when it is in that state (`StateUpdatedTimestamp`), ms.
    pub current_since: Option<Millis>,
    /// Its `StateUpdate` history items around the window, in any order, duplicates allowed.
    pub items: Vec<HistoryItem>,
}

/// The lanes, and what could not be used, one sentence each (for the report's problems).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlarmLanes {
    /// One lane per alarm, in the order of the branches given, alarms of a branch by name.
    pub lanes: Vec<AlarmLane>,
    /// A branch without an alarm, an unreadable history item, a change the history lacks.
    pub problems: Vec<String>,
}

/// Each call attempt's timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A CloudWatch client for [`fetch`] through `target` (its session: region, endpoint, role).
async fn client(target: &AwsTarget) -> aws_sdk_cloudwatch::Client {
    aws_sdk_cloudwatch::Client::from_conf(target.session().await.cloudwatch().build())
}

/// Where one service's alarms are read: one of its publish targets, or the default chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The target's name, when the service has several targets (its lanes carry it).
    pub name: Option<String>,
    target: AwsTarget,
}

impl Source {
    /// Whether both read through the same target (one client serves both).
    pub fn same_target(&self, other: &Source) -> bool {
        self.target == other.target
    }
}

/// Where `service`'s alarms are read: each of its publish targets in `cfg` (region, role,
/// endpoint: where its prober publishes, mapped by [`crate::aws::target_for`]), else the
/// default AWS chain. Each call attempt is cut at 10 s, 3 tries, bodies of at most 4 MiB.
pub fn sources(cfg: Option<&crate::config::Config>, service: &str) -> Vec<Source> {
    let found = cfg.and_then(|c| {
        c.services
            .iter()
            .find(|s| s.service.name == service)
            .map(|s| (c, s))
    });
    let Some((cfg, svc)) = found else {
        return vec![Source {
            name: None,
            target: AwsTarget {
                region: None,
                endpoint_url: None,
                timeouts: Timeouts::per_call(CALL_TIMEOUT),
                retries: Retries::Standard(3),
                max_response_bytes: MAX_RESPONSE_BYTES,
                role: None,
            },
        }];
    };
    let named = svc.publish_targets.len() > 1;
    svc.publish_targets
        .iter()
        .map(|t| Source {
            name: named.then(|| t.name.clone()),
            target: crate::aws::target_for(
                t,
                &cfg.prober_id,
                Timeouts::per_call(CALL_TIMEOUT),
                Retries::Standard(3),
                MAX_RESPONSE_BYTES,
            ),
        })
        .collect()
}

/// One client per distinct target, made when first asked; a target given up on gives none.
#[derive(Debug, Default)]
pub struct Clients {
    made: Vec<(AwsTarget, aws_sdk_cloudwatch::Client)>,
    given_up: Vec<AwsTarget>,
}

impl Clients {
    /// The client of `source`'s target; `None` once [`Clients::give_up`] was called for it.
    pub async fn get(&mut self, source: &Source) -> Option<aws_sdk_cloudwatch::Client> {
        if self.given_up.contains(&source.target) {
            return None;
        }
        if let Some((_, c)) = self.made.iter().find(|(t, _)| *t == source.target) {
            return Some(c.clone());
        }
        let c = client(&source.target).await;
        self.made.push((source.target.clone(), c.clone()));
        Some(c)
    }

    /// Ask `source`'s target no more.
    pub fn give_up(&mut self, source: &Source) {
        self.given_up.push(source.target.clone());
    }
}

/// The alarm lanes of `service`'s branches over `window`: the metric alarms on each branch's
/// `Readiness` series in `namespace` (dimensions `Service`, `Branch`; alarms on metric math are
/// not found this way), each with its state history read back to [`HISTORY_MARGIN_MS`] before
/// the window, and its current state for an alarm without history. `timeout` bounds the whole
/// fetch; a branch without an alarm is a problem, not an error.
///
/// # Errors
/// [`AlarmsError`] naming the call and alarm (or series) when a call fails, when `timeout`
/// passes, or when a history listing repeats a page or exceeds [`MAX_PAGES`].
pub async fn fetch(
    client: &aws_sdk_cloudwatch::Client,
    namespace: &str,
    service: &str,
    branches: &[String],
    window: Span,
    timeout: Duration,
) -> Result<AlarmLanes, AlarmsError> {
    let budget = Budget {
        until: Instant::now() + timeout,
        timeout,
    };
    let mut facts = Vec::new();
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for branch in branches {
        let series = format!(
            "Service={} Branch={} in namespace {}",
            esc(service),
            esc(branch),
            esc(namespace)
        );
        let call = client
            .describe_alarms_for_metric()
            .namespace(namespace)
            .metric_name(crate::contract::READINESS.name)
            .dimensions(dimension(crate::contract::SERVICE, service))
            .dimensions(dimension(crate::contract::BRANCH, branch))
            .send();
        let found = budget
            .run(DESCRIBE_ALARMS_FOR_METRIC, &series, call)
            .await?;
        let mut alarms: Vec<&MetricAlarm> = found
            .metric_alarms()
            .iter()
            .filter(|a| a.alarm_name().is_some_and(|n| !n.is_empty()))
            .collect();
        alarms.sort_by_key(|a| a.alarm_name());
        if alarms.is_empty() {
            problems.push(format!(
                "no alarm on {} for {series}: no alarm lane for branch {}",
                crate::contract::READINESS.name,
                esc(branch)
            ));
        }
        for a in alarms {
            let name = a.alarm_name().unwrap_or_default();
            if !seen.insert(name.to_string()) {
                continue;
            }
            facts.push(AlarmFacts {
                name: name.to_string(),
                branch: branch.clone(),
                current: a.state_value().map(|s| Spelled::parse(s.as_str())),
                current_since: a.state_updated_timestamp().and_then(millis),
                items: history(client, name, window, &budget).await?,
            });
        }
    }
    let mut out = lanes(&facts, window);
    problems.append(&mut out.problems);
    out.problems = problems;
    Ok(out)
}

fn dimension(name: &str, value: &str) -> Dimension {
    Dimension::builder().name(name).value(value).build()
}

/// The time every call of one [`fetch`] must finish by.
struct Budget {
    until: Instant,
    timeout: Duration,
}

impl Budget {
    /// Run one call within the budget; its error, or the budget running out, is an
    /// [`AlarmsError`].
    async fn run<T, E, F>(&self, call: &'static str, subject: &str, f: F) -> Result<T, AlarmsError>
    where
        F: std::future::Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let fail = |cause: String| AlarmsError {
            call,
            subject: subject.to_string(),
            cause,
        };
        match tokio::time::timeout_at(self.until, f).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(fail(cause(&e))),
            Err(_) => Err(fail(format!(
                "no answer within the fetch's {} s budget",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

/// One alarm's `StateUpdate` items, newest first, page by page until a page reaches back to
/// [`HISTORY_MARGIN_MS`] before the window (its oldest item gives the state the window starts
/// in) or the history ends.
///
/// No `StartDate`/`EndDate` is sent: LocalStack fails the call with "can't compare
/// offset-naive and offset-aware datetimes" once an alarm has changed state twice. Items after
/// the window are read too (few, as a report follows its drill) and left out by [`lanes`].
async fn history(
    client: &aws_sdk_cloudwatch::Client,
    name: &str,
    window: Span,
    budget: &Budget,
) -> Result<Vec<HistoryItem>, AlarmsError> {
    let subject = format!("alarm {}", esc(name));
    let back_to = window.from.saturating_sub(HISTORY_MARGIN_MS);
    let mut out = Vec::new();
    let mut named = HashSet::new();
    let mut token: Option<String> = None;
    for page in 1..=MAX_PAGES {
        let call = client
            .describe_alarm_history()
            .alarm_name(name)
            .history_item_type(HistoryItemType::StateUpdate)
            .scan_by(ScanBy::TimestampDescending)
            .max_records(PAGE_SIZE)
            .set_next_token(token.take())
            .send();
        let got = budget.run(DESCRIBE_ALARM_HISTORY, &subject, call).await?;
        let read: Vec<HistoryItem> = items(got.alarm_history_items(), name).collect();
        // Newest first as asked: a page reaching back far enough is the last one needed. A page
        // in any other order proves nothing about the next.
        let newest_first = read.windows(2).all(|w| w[0].at >= w[1].at);
        let reached = newest_first && read.last().and_then(|i| i.at).is_some_and(|t| t <= back_to);
        out.extend(read);
        // An empty NextToken ends a listing, as the SDK's own paginators take it.
        match got.next_token().filter(|t| !t.is_empty()) {
            None => return Ok(out),
            Some(_) if reached => return Ok(out),
            Some(t) if !named.insert(t.to_string()) => {
                return Err(AlarmsError {
                    call: DESCRIBE_ALARM_HISTORY,
                    subject,
                    cause: format!("page {page} names a next page it already named"),
                });
            }
            Some(t) => token = Some(t.to_string()),
        }
    }
    Err(AlarmsError {
        call: DESCRIBE_ALARM_HISTORY,
        subject,
        cause: format!(
            "more than {MAX_PAGES} pages without reaching the window: the listing does not end"
        ),
    })
}

/// The items of `name` of type `StateUpdate` (an endpoint that ignores the filters sends others).
fn items<'a>(
    page: &'a [AlarmHistoryItem],
    name: &'a str,
) -> impl Iterator<Item = HistoryItem> + 'a {
    page.iter()
        .filter(move |i| i.alarm_name().is_none_or(|n| n == name))
        .filter(|i| {
            i.history_item_type()
                .is_none_or(|t| *t == HistoryItemType::StateUpdate)
        })
        .map(|i| HistoryItem {
            at: i.timestamp().and_then(millis),
            data: i.history_data().map(str::to_string),
        })
}

fn millis(t: &DateTime) -> Option<Millis> {
    t.to_millis().ok()
}

/// What a failed call got: the service's error code and message, else the error and its
/// sources (`dispatch failure: io error: Connection refused`), each message once, without the
/// SDK's debug dump; on one line.
fn cause<E>(e: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    if let SdkError::ServiceError(s) = e {
        let err = s.err();
        return one_line(&format!(
            "HTTP {}: {}: {}",
            s.raw().status().as_u16(),
            err.code().unwrap_or("no error code"),
            err.message().unwrap_or("no message")
        ));
    }
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    one_line(&parts.join(": "))
}

/// `s` on one line, control characters escaped, cut at [`MAX_CAUSE_CHARS`].
fn one_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = esc(&flat);
    if flat.chars().count() <= MAX_CAUSE_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_CAUSE_CHARS).collect();
    cut + " […]"
}

fn esc(s: &str) -> String {
    crate::config::escape_controls(s).into_owned()
}

// ---------------------------------------------------------------- pure part

/// `HistoryData` of a `StateUpdate` item (only what the lanes need).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HistoryData {
    old_state: Option<StateData>,
    new_state: StateData,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateData {
    state_value: String,
    state_reason_data: Option<ReasonData>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasonData {
    query_date: Option<String>,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Change {
    at: Millis,
    old: Option<AlarmState>,
    new: AlarmState,
}

/// The lanes of `alarms` over `window` (pure): each lane's bands cover the window without gaps
/// or overlap from the first moment its state is known, consecutive bands differ in state.
/// The state the window starts in is the last change at or before `window.from`, else the
/// `oldState` of the first change after it, else (no history at all) the alarm's current
/// state. Items that cannot be read are left out, each with a problem.
pub fn lanes(alarms: &[AlarmFacts], window: Span) -> AlarmLanes {
    let mut out = AlarmLanes::default();
    for a in alarms {
        let lane = lane(a, window, &mut out.problems);
        out.lanes.push(lane);
    }
    out
}

fn lane(a: &AlarmFacts, window: Span, problems: &mut Vec<String>) -> AlarmLane {
    let name = esc(&a.name);
    let mut changes: Vec<Change> = a
        .items
        .iter()
        .filter_map(|i| match change(i) {
            Ok(c) => Some(c),
            Err(why) => {
                problems.push(format!("alarm {name}: a history item left out: {why}"));
                None
            }
        })
        .collect();
    changes.sort();
    changes.dedup();
    let mut states = Vec::new();
    let split = changes.partition_point(|c| c.at <= window.from);
    let (before, after) = changes.split_at(split);
    let start = match (before.last(), after.first()) {
        (Some(c), _) => Some((window.from, c.new)),
        (None, Some(c)) => match c.old {
            Some(old) => Some((window.from, old)),
            None => {
                problems.push(format!(
                    "alarm {name}: its state before {} is unknown (no history before it)",
                    time(c.at)
                ));
                None
            }
        },
        (None, None) => return no_history(a, window, states, problems),
    };
    let mut cur = start;
    for c in after.iter().take_while(|c| c.at < window.until) {
        if let (Some((_, state)), Some(old)) = (cur, c.old)
            && old != state
        {
            problems.push(format!(
                "alarm {name}: at {} the history has it go from {old} to {}, but it was {state}: a change is missing from the history",
                time(c.at),
                c.new,
            ));
        }
        cur = match cur.take() {
            Some((since, state)) if state == c.new => Some((since, state)),
            Some((since, state)) => {
                push(&mut states, since, c.at, state);
                Some((c.at, c.new))
            }
            None => Some((c.at, c.new)),
        };
    }
    if let Some((since, state)) = cur {
        push(&mut states, since, window.until, state);
    }
    AlarmLane {
        name: a.name.clone(),
        branch: a.branch.clone(),
        target: None,
        states,
    }
}

/// The lane of an alarm without history around the window: its current state, from when it
/// began if that is within the window.
fn no_history(
    a: &AlarmFacts,
    window: Span,
    mut states: Vec<Band<String>>,
    problems: &mut Vec<String>,
) -> AlarmLane {
    let name = esc(&a.name);
    let current = match &a.current {
        Some(Spelled::Known(state)) => Some(*state),
        Some(Spelled::Other(other)) => {
            problems.push(format!(
                "alarm {name}: no state history, and its current state {:?} is none CloudWatch documents: its state in the window is unknown",
                esc(other)
            ));
            return AlarmLane {
                name: a.name.clone(),
                branch: a.branch.clone(),
                target: None,
                states,
            };
        }
        None => None,
    };
    match (current, a.current_since.filter(|s| *s > window.from)) {
        (Some(state), None) => push(&mut states, window.from, window.until, state),
        (Some(state), Some(since)) if since < window.until => {
            problems.push(format!(
                "alarm {name}: no state history; it has been {state} since {}, its state before is unknown",
                time(since)
            ));
            push(&mut states, since, window.until, state);
        }
        (Some(_), Some(since)) => problems.push(format!(
            "alarm {name}: no state history, and its state changed after the window (at {}): its state in the window is unknown",
            time(since)
        )),
        (None, _) => problems.push(format!(
            "alarm {name}: no state history and no current state: its state in the window is unknown"
        )),
    }
    AlarmLane {
        name: a.name.clone(),
        branch: a.branch.clone(),
        target: None,
        states,
    }
}

/// Add a band `[from, until)` of `state` (as the lanes spell it), extending the last band when
/// it has the same state and ends where this one starts; an empty band is left out.
fn push(states: &mut Vec<Band<String>>, from: Millis, until: Millis, state: AlarmState) {
    let state = state.to_string();
    if until <= from {
        return;
    }
    if let Some(last) = states.last_mut()
        && last.state == state
        && last.span.until == from
    {
        last.span.until = until;
        return;
    }
    states.push(Band {
        span: Span { from, until },
        state,
    });
}

/// A history item as a change; `Err` says why it cannot be used.
fn change(i: &HistoryItem) -> Result<Change, String> {
    let at = i.at.map_or_else(
        || "an item without Timestamp".to_string(),
        |t| format!("the item of {}", time(t)),
    );
    let data = i
        .data
        .as_deref()
        .ok_or_else(|| format!("{at} has no HistoryData"))?;
    let d: HistoryData = serde_json::from_str(data).map_err(|e| {
        format!(
            "{at}: HistoryData is not a state update ({})",
            one_line(&e.to_string())
        )
    })?;
    let old = d
        .old_state
        .as_ref()
        .map(|o| Spelled::<AlarmState>::parse(&o.state_value));
    let (old, new) = match (old, Spelled::parse(&d.new_state.state_value)) {
        (None, Spelled::Known(new)) => (None, new),
        (Some(Spelled::Known(old)), Spelled::Known(new)) => (Some(old), new),
        (old, new) => {
            return Err(format!(
                "{at}: unknown state in HistoryData (oldState {}, newState {})",
                old.map_or_else(|| "none".to_string(), |o| one_line(&o.to_string())),
                one_line(&new.to_string())
            ));
        }
    };
    let query_date = d
        .new_state
        .state_reason_data
        .and_then(|r| r.query_date)
        .and_then(|q| parse_time(&q));
    let when = query_date
        .or(i.at)
        .ok_or_else(|| format!("{at}: no time (no Timestamp, no queryDate)"))?;
    Ok(Change { at: when, old, new })
}

/// An RFC 3339 time, also with an offset without colon as `HistoryData` writes it
/// (`2026-12-01T18:57:03.123+0000`), in ms.
fn parse_time(s: &str) -> Option<Millis> {
    let fixed;
    let s = match s.len().checked_sub(5).map(|i| s.split_at(i)) {
        Some((head, tail))
            if (tail.starts_with('+') || tail.starts_with('-'))
                && tail[1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            fixed = format!("{head}{}:{}", &tail[..3], &tail[3..]);
            fixed.as_str()
        }
        _ => s,
    };
    DateTime::from_str(s, DateTimeFormat::DateTimeWithOffset)
        .ok()
        .as_ref()
        .and_then(millis)
}

/// A time for a problem's sentence (RFC 3339, UTC).
fn time(ms: Millis) -> String {
    DateTime::from_millis(ms)
        .fmt(DateTimeFormat::DateTime)
        .unwrap_or_else(|_| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service of the config is read through each of its publish targets (named when it has
    /// several, with the role's session), two services on one target share it, and a service
    /// the config lacks (or no config) through the default chain, unnamed.
    #[test]
    fn alarms_are_read_where_each_service_publishes() {
        let text = r#"prober_id = "p1"
[publish]
sinks = ["cloudwatch"]
[publish.cloudwatch]
region = "eu-west-1"
[probe]
kind = "tcp"
[probe.tcp]
port = 5432
[[service]]
name = "two"
stable_name = "two.example.internal"
publish = [{ region = "eu-west-1" }, { region = "us-east-1", role_arn = "arn:aws:iam::123456789012:role/pub" }]
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "p.two.example.internal"
[[service]]
name = "one"
stable_name = "one.example.internal"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "p.one.example.internal"
"#;
        let cfg = crate::config::parse(std::path::Path::new("t.toml"), text).unwrap();
        let two = sources(Some(&cfg), "two");
        let names: Vec<Option<&str>> = two.iter().map(|s| s.name.as_deref()).collect();
        assert_eq!(
            names,
            [Some("eu-west-1"), Some("us-east-1@123456789012/pub")]
        );
        assert_eq!(two[1].target.region.as_deref(), Some("us-east-1"));
        let role = two[1].target.role.as_ref().map(|r| r.role_arn.as_str());
        assert_eq!(role, Some("arn:aws:iam::123456789012:role/pub"));
        assert_eq!(two[1].target.timeouts, Timeouts::per_call(CALL_TIMEOUT));
        let one = sources(Some(&cfg), "one");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].name, None);
        assert!(one[0].same_target(&two[0]), "{one:?} {two:?}");
        for chain in [sources(Some(&cfg), "elsewhere"), sources(None, "two")] {
            assert_eq!(chain.len(), 1);
            assert_eq!(
                (chain[0].name.as_deref(), &chain[0].target.region),
                (None, &None)
            );
            assert!(chain[0].target.role.is_none());
        }
    }

    const FROM: Millis = 1_800_000_000_000;
    const UNTIL: Millis = FROM + 600_000;

    fn window() -> Span {
        Span {
            from: FROM,
            until: UNTIL,
        }
    }

    fn data(old: &str, new: &str) -> String {
        format!(
            r#"{{"version":"1.0","oldState":{{"stateValue":"{old}","stateReason":"x"}},"newState":{{"stateValue":"{new}","stateReason":"Threshold Crossed","stateReasonData":{{"version":"1.0","period":60}}}}}}"#
        )
    }

    fn item(at: Millis, old: &str, new: &str) -> HistoryItem {
        HistoryItem {
            at: Some(at),
            data: Some(data(old, new)),
        }
    }

    fn facts(items: Vec<HistoryItem>) -> AlarmFacts {
        AlarmFacts {
            name: "primary-readiness".into(),
            branch: "primary".into(),
            current: Some(Spelled::Known(AlarmState::Alarm)),
            current_since: Some(FROM - 86_400_000),
            items,
        }
    }

    fn band(from: Millis, until: Millis, state: &str) -> Band<String> {
        Band {
            span: Span { from, until },
            state: state.into(),
        }
    }

    fn one(f: AlarmFacts) -> (Vec<Band<String>>, Vec<String>) {
        let out = lanes(&[f], window());
        assert_eq!(out.lanes.len(), 1);
        assert_eq!(out.lanes[0].name, "primary-readiness");
        assert_eq!(out.lanes[0].branch, "primary");
        (out.lanes[0].states.clone(), out.problems)
    }

    #[test]
    fn changes_in_any_order_make_contiguous_bands() {
        let t1 = FROM + 60_000;
        let t2 = FROM + 200_000;
        let (bands, problems) = one(facts(vec![
            item(t2, "ALARM", "OK"),
            item(t1, "OK", "ALARM"),
            item(t1, "OK", "ALARM"), // the same item from the second call
        ]));
        assert_eq!(
            bands,
            vec![
                band(FROM, t1, "OK"),
                band(t1, t2, "ALARM"),
                band(t2, UNTIL, "OK"),
            ]
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn items_outside_the_window_only_set_the_starting_state() {
        let (bands, problems) = one(facts(vec![
            item(FROM - 3_600_000, "OK", "INSUFFICIENT_DATA"),
            item(FROM - 120_000, "INSUFFICIENT_DATA", "ALARM"),
            item(FROM + 100_000, "ALARM", "OK"),
            item(UNTIL, "OK", "ALARM"),
            item(UNTIL + 100_000, "ALARM", "OK"),
        ]));
        assert_eq!(
            bands,
            vec![
                band(FROM, FROM + 100_000, "ALARM"),
                band(FROM + 100_000, UNTIL, "OK")
            ]
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn without_a_change_before_the_window_the_first_old_state_starts_it() {
        let t = FROM + 30_000;
        let (bands, _) = one(facts(vec![item(t, "INSUFFICIENT_DATA", "OK")]));
        assert_eq!(
            bands,
            vec![band(FROM, t, "INSUFFICIENT_DATA"), band(t, UNTIL, "OK")]
        );
    }

    #[test]
    fn a_change_at_the_window_start_starts_it() {
        let (bands, _) = one(facts(vec![item(FROM, "OK", "ALARM")]));
        assert_eq!(bands, vec![band(FROM, UNTIL, "ALARM")]);
    }

    #[test]
    fn query_date_is_the_time_of_the_change() {
        // LocalStack stamps the item with the time the old state began; queryDate is the
        // evaluation that changed it.
        let d = r#"{"oldState":{"stateValue":"OK"},"newState":{"stateValue":"ALARM","stateReasonData":{"queryDate":"2027-01-15T08:00:30+0000"}}}"#;
        let at = parse_time("2027-01-15T08:00:30Z").expect("a time");
        let f = facts(vec![HistoryItem {
            at: Some(at - 50_000),
            data: Some(d.into()),
        }]);
        let w = Span {
            from: at - 60_000,
            until: at + 60_000,
        };
        let out = lanes(&[f], w);
        assert_eq!(
            out.lanes[0].states,
            vec![band(w.from, at, "OK"), band(at, w.until, "ALARM")]
        );
        assert_eq!(
            parse_time("2027-01-15T08:00:30.250+0000"),
            Some(at + 250),
            "AWS's queryDate has ms"
        );
        assert_eq!(parse_time("2027-01-15T09:00:30+01:00"), Some(at));
        assert_eq!(parse_time("15 Jan 2027"), None);
        assert_eq!(parse_time("+0000"), None);
    }

    #[test]
    fn unreadable_items_are_left_out_with_a_problem() {
        let t = FROM + 60_000;
        let (bands, problems) = one(facts(vec![
            HistoryItem {
                at: Some(FROM + 10_000),
                data: Some("{not json".into()),
            },
            HistoryItem {
                at: Some(FROM + 20_000),
                data: None,
            },
            HistoryItem {
                at: Some(FROM + 30_000),
                data: Some(r#"{"newState":{"stateValue":"\u001b[31mRED"}}"#.into()),
            },
            HistoryItem {
                at: None,
                data: Some(r#"{"newState":{"stateValue":"OK"}}"#.into()),
            },
            HistoryItem {
                at: Some(FROM + 40_000),
                data: Some(r#"{"oldState":{"stateValue":"OK"}}"#.into()),
            },
            item(t, "OK", "ALARM"),
        ]));
        assert_eq!(bands, vec![band(FROM, t, "OK"), band(t, UNTIL, "ALARM")]);
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(problems[0].contains("not a state update"), "{problems:?}");
        assert!(problems[1].contains("no HistoryData"), "{problems:?}");
        assert!(problems[2].contains("unknown state"), "{problems:?}");
        assert!(
            !problems[2].contains('\u{1b}'),
            "control characters escaped"
        );
        assert!(problems[3].contains("no time"), "{problems:?}");
        assert!(
            problems
                .iter()
                .all(|p| p.starts_with("alarm primary-readiness: "))
        );
        assert!(problems.iter().all(|p| !p.contains('\n')));
    }

    #[test]
    fn no_history_is_one_band_of_the_current_state() {
        let (bands, problems) = one(facts(Vec::new()));
        assert_eq!(bands, vec![band(FROM, UNTIL, "ALARM")]);
        assert!(problems.is_empty(), "{problems:?}");

        let mut f = facts(Vec::new());
        f.current_since = None;
        assert_eq!(one(f).0, vec![band(FROM, UNTIL, "ALARM")]);

        // Created (or changed without history) within the window: from then on.
        let mut f = facts(Vec::new());
        f.current_since = Some(FROM + 5_000);
        let (bands, problems) = one(f);
        assert_eq!(bands, vec![band(FROM + 5_000, UNTIL, "ALARM")]);
        assert_eq!(problems.len(), 1, "{problems:?}");

        // Changed after the window, and no history says what it was before.
        let mut f = facts(Vec::new());
        f.current_since = Some(UNTIL + 5_000);
        let (bands, problems) = one(f);
        assert!(bands.is_empty());
        assert!(problems[0].contains("unknown"), "{problems:?}");
    }

    #[test]
    fn an_unknown_current_state_is_named_not_taken_for_none() {
        let mut f = facts(Vec::new());
        f.current = Some(Spelled::Other("PENDING".into()));
        let (bands, problems) = one(f);
        assert!(bands.is_empty());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("\"PENDING\" is none CloudWatch documents"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_change_missing_from_the_history_is_a_problem() {
        let t1 = FROM + 60_000;
        let t2 = FROM + 120_000;
        let (bands, problems) = one(facts(vec![
            item(t1, "OK", "ALARM"),
            item(t2, "INSUFFICIENT_DATA", "OK"),
        ]));
        assert_eq!(
            bands,
            vec![
                band(FROM, t1, "OK"),
                band(t1, t2, "ALARM"),
                band(t2, UNTIL, "OK")
            ]
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("a change is missing"), "{problems:?}");
    }

    #[test]
    fn unknown_start_begins_at_the_first_change() {
        let t = FROM + 60_000;
        let f = facts(vec![HistoryItem {
            at: Some(t),
            data: Some(r#"{"newState":{"stateValue":"ALARM"}}"#.into()),
        }]);
        let (bands, problems) = one(f);
        assert_eq!(bands, vec![band(t, UNTIL, "ALARM")]);
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn lanes_keep_the_order_given() {
        let mut a = facts(Vec::new());
        a.name = "b-alarm".into();
        let mut b = facts(Vec::new());
        b.name = "a-alarm".into();
        b.branch = "secondary".into();
        let out = lanes(&[a, b], window());
        let names: Vec<_> = out.lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["b-alarm", "a-alarm"]);
    }

    #[test]
    fn a_failed_call_is_one_line_without_the_debug_dump() {
        use aws_sdk_cloudwatch::error::{ConnectorError, ErrorMetadata};
        use aws_sdk_cloudwatch::operation::describe_alarm_history::DescribeAlarmHistoryError;
        type E = SdkError<DescribeAlarmHistoryError, HttpResponse>;
        let response = HttpResponse::new(
            http::StatusCode::BAD_REQUEST.into(),
            aws_smithy_types::body::SdkBody::empty(),
        );
        let meta = ErrorMetadata::builder()
            .code("InvalidNextToken")
            .message("The next token\nis\x1b[31m bad")
            .build();
        let e: E = SdkError::service_error(DescribeAlarmHistoryError::generic(meta), response);
        assert_eq!(
            cause(&e),
            "HTTP 400: InvalidNextToken: The next token is\\u{1b}[31m bad"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e: E = SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        let got = cause(&e);
        assert!(
            got.starts_with("dispatch failure") && got.ends_with("refused"),
            "{got}"
        );
        let long: E =
            SdkError::dispatch_failure(ConnectorError::other("x ".repeat(1000).into(), None));
        assert!(cause(&long).chars().count() <= MAX_CAUSE_CHARS + 4);
    }
}
