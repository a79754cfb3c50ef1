//! The bounds of `check --aws`'s reads and why a read gave nothing: the overall deadline
//! (`--aws-timeout`), the page cap and loop detection of every listing, the check that a Route 53
//! answer is whole, and the reason and fix of each unchecked read (the IAM action to allow, the
//! endpoint or network to look at, what was wrong with the answer).

use super::model::Unchecked;
use crate::aws::CodeKind;
use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest number of pages read of one listing: far past any real account, a bound on an
/// endpoint that keeps answering with a new next token.
pub const MAX_PAGES: usize = 1000;

/// One API call of `check --aws`: its name, the IAM action it needs and the config key of its
/// endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// API name (`DescribeAlarms`).
    pub name: &'static str,
    /// IAM action (`cloudwatch:DescribeAlarms`).
    pub action: &'static str,
    /// The config key that overrides its endpoint.
    pub endpoint_key: &'static str,
}

const CW_ENDPOINT: &str = "publish.cloudwatch.endpoint_url";
const R53_ENDPOINT: &str = "route53.endpoint_url";

/// `DescribeAlarms`.
pub const DESCRIBE_ALARMS: Call = Call {
    name: "DescribeAlarms",
    action: "cloudwatch:DescribeAlarms",
    endpoint_key: CW_ENDPOINT,
};
/// `GetMetricStatistics`.
pub const GET_METRIC_STATISTICS: Call = Call {
    name: "GetMetricStatistics",
    action: "cloudwatch:GetMetricStatistics",
    endpoint_key: CW_ENDPOINT,
};
/// `ListHealthChecks`.
pub const LIST_HEALTH_CHECKS: Call = Call {
    name: "ListHealthChecks",
    action: "route53:ListHealthChecks",
    endpoint_key: R53_ENDPOINT,
};
/// `ListHostedZonesByName`.
pub const LIST_HOSTED_ZONES_BY_NAME: Call = Call {
    name: "ListHostedZonesByName",
    action: "route53:ListHostedZonesByName",
    endpoint_key: R53_ENDPOINT,
};
/// `ListResourceRecordSets`.
pub const LIST_RESOURCE_RECORD_SETS: Call = Call {
    name: "ListResourceRecordSets",
    action: "route53:ListResourceRecordSets",
    endpoint_key: R53_ENDPOINT,
};

/// The reason and fix of an error AWS answered with `code` and `message` (already escaped).
pub fn answered(call: Call, code: &str, message: &str) -> Unchecked {
    let why = format!("{} failed: {code}: {message}", call.name);
    let fix = match crate::aws::kind_of(code) {
        Some(CodeKind::AccessDenied) => format!(
            "allow {} to the role that runs check --aws (docs/check-aws.md lists every action it needs)",
            call.action
        ),
        Some(CodeKind::ExpiredCredentials) => "the credentials have expired: renew them (a new session or SSO login for AWS_PROFILE, or fresh AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN) and run again".to_string(),
        Some(CodeKind::InvalidCredentials) => "AWS does not accept the credentials: check the access key and secret, the profile (AWS_PROFILE) or the role the chain picked".to_string(),
        Some(CodeKind::Throttled) => format!(
            "AWS throttled {} after every retry: run again later, when fewer callers share the account's rate",
            call.name
        ),
        _ if code == "NoSuchHostedZone" => {
            "set route53.hosted_zone_id to a hosted zone of this account".to_string()
        }
        Some(CodeKind::ServerFault | CodeKind::NotFound) | None => format!(
            "AWS refused {} with {code}: see its message; check the config's values and {}",
            call.name, call.endpoint_key
        ),
    };
    Unchecked { why, fix }
}

/// The reason and fix of an answer that could not be used: `what` says what was wrong with it.
pub fn malformed(call: Call, what: &str) -> Unchecked {
    Unchecked {
        why: format!("{}: an answer that could not be used ({what})", call.name),
        fix: format!(
            "check that {} (or the default endpoint) is AWS or a proxy that passes answers whole: {what}",
            call.endpoint_key
        ),
    }
}

/// Whether each endpoint has answered a call of this check (any HTTP answer, an error too).
#[derive(Debug, Default)]
pub struct Heard {
    cloudwatch: Arc<AtomicBool>,
    route53: Arc<AtomicBool>,
}

impl Heard {
    fn flag(&self, call: Call) -> Option<&Arc<AtomicBool>> {
        match call.endpoint_key {
            CW_ENDPOINT => Some(&self.cloudwatch),
            R53_ENDPOINT => Some(&self.route53),
            _ => None,
        }
    }

    /// Whether the endpoint of `call` has answered a call.
    pub fn answered(&self, call: Call) -> bool {
        self.flag(call).is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// An interceptor that marks its client's endpoint as heard from when any answer arrives. The
/// trait is the smithy runtime's, which both SDK crates re-export: one type serves both clients.
#[derive(Debug, Clone)]
pub struct Answered(Arc<AtomicBool>);

impl aws_sdk_route53::config::Intercept for Answered {
    fn name(&self) -> &'static str {
        "readyprobe-answered"
    }

    fn read_before_deserialization(
        &self,
        _context: &aws_sdk_route53::config::interceptors::BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_route53::config::RuntimeComponents,
        _cfg: &mut aws_sdk_route53::config::ConfigBag,
    ) -> Result<(), aws_sdk_route53::error::BoxError> {
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// A call that a timer cut short: an endpoint that had answered no call and got a fair wait is
/// unreachable (exit 74); otherwise the part is not checked (exit 77). Which timer fired first,
/// `--aws-timeout` or the SDK's, does not change which.
#[derive(Debug, Clone, PartialEq)]
pub enum Cut {
    /// The endpoint answered no call of the check, and this one waited a whole try.
    Unreachable(String),
    /// The endpoint answered other calls, or this one started too late to be judged.
    NotChecked(Unchecked),
}

/// The overall deadline of `check --aws`: every call runs within it, and a part whose calls it
/// cuts short is not checked. It also keeps what each endpoint has answered, to tell a dead
/// endpoint from a slow listing.
#[derive(Debug, Clone)]
pub struct Deadline {
    at: tokio::time::Instant,
    total: Duration,
    /// The SDK's timeout of one try (`publish.cloudwatch.operation_timeout`).
    try_timeout: Duration,
    heard: Arc<Heard>,
}

impl Deadline {
    /// A deadline `total` from now, for calls whose tries time out after `try_timeout`.
    pub fn after(total: Duration, try_timeout: Duration) -> Deadline {
        Deadline {
            at: tokio::time::Instant::now() + total,
            total,
            try_timeout,
            heard: Arc::default(),
        }
    }

    /// The same deadline for another target's clients, which judge their endpoints by their
    /// own answers.
    #[must_use]
    pub fn for_another_target(&self) -> Deadline {
        Deadline {
            heard: Arc::default(),
            ..self.clone()
        }
    }

    /// The interceptor that records the answers of the CloudWatch endpoint.
    pub fn cloudwatch_answers(&self) -> Answered {
        Answered(self.heard.cloudwatch.clone())
    }

    /// The interceptor that records the answers of the Route 53 endpoint.
    pub fn route53_answers(&self) -> Answered {
        Answered(self.heard.route53.clone())
    }

    /// Whether the endpoint of `call` has answered a call of this check.
    pub fn heard(&self, call: Call) -> bool {
        self.heard.answered(call)
    }

    /// How long a call must have waited without an answer, at an endpoint that answered
    /// nothing, to call the endpoint unreachable: one whole try, or half the `--aws-timeout`
    /// when that is shorter (a dead endpoint, when first asked, gets the whole of it).
    fn fair_wait(&self) -> Duration {
        self.try_timeout.min(self.total / 2)
    }

    /// Run `f` until the deadline.
    ///
    /// # Errors
    /// [`Cut`] when the deadline passes first.
    pub async fn run<F: Future>(&self, call: Call, f: F) -> Result<F::Output, Cut> {
        let start = tokio::time::Instant::now();
        match tokio::time::timeout_at(self.at, f).await {
            Ok(out) => Ok(out),
            Err(_) => {
                let waited = start.elapsed();
                if !self.heard(call) && waited >= self.fair_wait() {
                    Err(Cut::Unreachable(format!(
                        "no answer in {} from {} (or the default endpoint), which answered no call (the --aws-timeout of {} ran out)",
                        humantime::format_duration(round(waited)),
                        call.endpoint_key,
                        humantime::format_duration(self.total)
                    )))
                } else {
                    Err(Cut::NotChecked(self.ran_out(call)))
                }
            }
        }
    }

    /// A call the SDK's own timeout ended: unreachable when its endpoint answered no call,
    /// else not checked.
    pub fn timed_out(&self, call: Call, cause: String) -> Cut {
        if !self.heard(call) {
            return Cut::Unreachable(cause);
        }
        Cut::NotChecked(Unchecked {
            why: format!(
                "{}: no answer within the operation timeout, though the endpoint answered other calls ({cause})",
                call.name
            ),
            fix: format!(
                "run again; if it recurs, raise publish.cloudwatch.operation_timeout or look at the network path to the endpoint ({} or the default)",
                call.endpoint_key
            ),
        })
    }

    fn ran_out(&self, call: Call) -> Unchecked {
        Unchecked {
            why: format!(
                "{}: the --aws-timeout of {} ran out",
                call.name,
                humantime::format_duration(self.total)
            ),
            fix: format!(
                "raise --aws-timeout for a large account, or look at the network path to the endpoint ({} or the default): its answers are slow",
                call.endpoint_key
            ),
        }
    }
}

/// A wait to the tenth of a second, for messages.
fn round(d: Duration) -> Duration {
    let tenths: u64 = d.as_millis().div_ceil(100).try_into().unwrap_or(u64::MAX);
    Duration::from_millis(tenths.saturating_mul(100))
}

/// The pages of one listing so far: a next token seen before means the listing loops, and more
/// than [`MAX_PAGES`] pages means it does not end.
#[derive(Debug)]
pub struct Pages {
    call: Call,
    seen: HashSet<String>,
    read: usize,
}

impl Pages {
    /// A listing by `call`.
    pub fn new(call: Call) -> Pages {
        Pages {
            call,
            seen: HashSet::new(),
            read: 0,
        }
    }

    /// The page just read named `next` (`None`: it was the last). Returns the token of the
    /// next page to read, `None` when the listing is complete.
    ///
    /// # Errors
    /// Why the listing cannot be trusted whole: an empty or repeated token, too many pages.
    pub fn next(&mut self, next: Option<String>) -> Result<Option<String>, Unchecked> {
        self.read += 1;
        let Some(token) = next else {
            return Ok(None);
        };
        if token.is_empty() {
            return Err(malformed(
                self.call,
                &format!("page {} says more follow but names no next page", self.read),
            ));
        }
        if !self.seen.insert(token.clone()) {
            return Err(malformed(
                self.call,
                &format!(
                    "page {} names a next page it already named ({}): the listing loops",
                    self.read,
                    crate::config::escape_controls(&token.chars().take(64).collect::<String>())
                ),
            ));
        }
        if self.read >= MAX_PAGES {
            return Err(malformed(
                self.call,
                &format!("more than {MAX_PAGES} pages: the listing does not end"),
            ));
        }
        Ok(Some(token))
    }
}

/// What a Route 53 answer must hold to be read as whole: its root element and the elements the
/// API reference marks required. The SDK's XML reader takes a body cut short, or one without
/// the list, for a short or empty list; this check does not.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Root element (`ListHealthChecksResponse`).
    pub root: &'static str,
    /// Required child elements.
    pub required: &'static [&'static str],
}

/// `ListHealthChecks`.
pub const HEALTH_CHECKS_SHAPE: Shape = Shape {
    root: "ListHealthChecksResponse",
    required: &["HealthChecks", "IsTruncated"],
};
/// `ListHostedZonesByName`.
pub const ZONES_SHAPE: Shape = Shape {
    root: "ListHostedZonesByNameResponse",
    required: &["HostedZones", "IsTruncated"],
};
/// `ListResourceRecordSets`.
pub const RECORDS_SHAPE: Shape = Shape {
    root: "ListResourceRecordSetsResponse",
    required: &["ResourceRecordSets", "IsTruncated"],
};

/// What is wrong with a successful answer's body, if anything: not UTF-8, cut short (it does
/// not end with the root's end tag), or without a required element.
pub fn whole(body: &[u8], shape: Shape) -> Result<(), String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())?;
    let end = format!("</{}>", shape.root);
    let text = text.trim_end();
    // An empty root (`<Root/>`, `<Root xmlns="..."/>`) is whole, and lacks what is required.
    let empty_root = text.ends_with("/>")
        && text
            .rfind(&format!("<{}", shape.root))
            .is_some_and(|i| !text[i + 1..].contains('<'));
    if !text.ends_with(&end) && !empty_root {
        return Err(format!(
            "the body ({} bytes) does not end with {end}: it was cut short",
            body.len()
        ));
    }
    for el in shape.required {
        if !has_element(text, el) {
            return Err(format!("the body has no <{el}> element"));
        }
    }
    Ok(())
}

/// Whether `text` has a start tag of `el` (`<el>`, `<el/>`, `<el />`, `<el attr="...">`).
fn has_element(text: &str, el: &str) -> bool {
    let open = format!("<{el}");
    text.match_indices(&open).any(|(i, _)| {
        text[i + open.len()..]
            .chars()
            .next()
            .is_some_and(|c| c == '>' || c == '/' || c.is_ascii_whitespace())
    })
}

/// An interceptor for one call that checks its successful answer with [`whole`] and keeps the
/// verdict of the last try: the caller reads it after the call returns.
#[derive(Debug, Clone)]
pub struct Whole {
    shape: Shape,
    verdict: Arc<Mutex<Result<(), String>>>,
}

impl Whole {
    /// A check of answers of `shape`.
    pub fn new(shape: Shape) -> Whole {
        Whole {
            shape,
            verdict: Arc::new(Mutex::new(Ok(()))),
        }
    }

    /// What was wrong with the last successful answer, if anything.
    pub fn verdict(&self) -> Result<(), String> {
        self.verdict
            .lock()
            .map_or_else(|p| p.into_inner().clone(), |v| v.clone())
    }
}

impl aws_sdk_route53::config::Intercept for Whole {
    fn name(&self) -> &'static str {
        "readyprobe-whole-answer"
    }

    fn read_after_deserialization(
        &self,
        context: &aws_sdk_route53::config::interceptors::AfterDeserializationInterceptorContextRef<
            '_,
        >,
        _runtime_components: &aws_sdk_route53::config::RuntimeComponents,
        _cfg: &mut aws_sdk_route53::config::ConfigBag,
    ) -> Result<(), aws_sdk_route53::error::BoxError> {
        let response = context.response();
        if response.status().is_success() {
            let verdict = match response.body().bytes() {
                Some(b) => whole(b, self.shape),
                None => Err("the body was not read whole".to_string()),
            };
            match self.verdict.lock() {
                Ok(mut v) => *v = verdict,
                Err(p) => *p.into_inner() = verdict,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_that_repeats_a_token_or_never_ends_is_not_trusted() {
        let mut p = Pages::new(LIST_HEALTH_CHECKS);
        assert_eq!(p.next(Some("a".into())), Ok(Some("a".into())));
        assert_eq!(p.next(Some("b".into())), Ok(Some("b".into())));
        let e = p.next(Some("a".into())).expect_err("repeated");
        assert!(
            e.why
                .contains("page 3 names a next page it already named (a)"),
            "{e:?}"
        );
        assert!(e.fix.contains("route53.endpoint_url"), "{e:?}");

        let mut p = Pages::new(DESCRIBE_ALARMS);
        for i in 1..MAX_PAGES {
            assert_eq!(p.next(Some(i.to_string())), Ok(Some(i.to_string())));
        }
        let e = p.next(Some("last".into())).expect_err("too many");
        assert!(e.why.contains("more than 1000 pages"), "{e:?}");

        let mut p = Pages::new(DESCRIBE_ALARMS);
        assert_eq!(p.next(None), Ok(None));
        let mut p = Pages::new(DESCRIBE_ALARMS);
        assert!(p.next(Some(String::new())).is_err(), "an empty token");
    }

    #[test]
    fn a_cut_or_incomplete_answer_is_not_whole() {
        let ok = "<?xml version=\"1.0\"?>\n<ListHealthChecksResponse><HealthChecks/><IsTruncated>false</IsTruncated><Marker/><MaxItems>100</MaxItems></ListHealthChecksResponse>\n";
        assert_eq!(whole(ok.as_bytes(), HEALTH_CHECKS_SHAPE), Ok(()));
        let cut = &ok[..ok.len() / 2];
        let e = whole(cut.as_bytes(), HEALTH_CHECKS_SHAPE).expect_err("cut");
        assert!(e.contains("cut short"), "{e}");
        let spaced = "<ListHealthChecksResponse><HealthChecks /><IsTruncated>false</IsTruncated></ListHealthChecksResponse>";
        assert_eq!(whole(spaced.as_bytes(), HEALTH_CHECKS_SHAPE), Ok(()));
        let prefix = "<ListHealthChecksResponse><HealthChecksX/><IsTruncated>false</IsTruncated></ListHealthChecksResponse>";
        assert!(whole(prefix.as_bytes(), HEALTH_CHECKS_SHAPE).is_err());
        let bare = "<ListHealthChecksResponse xmlns=\"x\" />";
        let e = whole(bare.as_bytes(), HEALTH_CHECKS_SHAPE).expect_err("bare");
        assert!(e.contains("no <HealthChecks>"), "{e}");
        let no_list = "<ListHealthChecksResponse><IsTruncated>false</IsTruncated><MaxItems>1</MaxItems></ListHealthChecksResponse>";
        let e = whole(no_list.as_bytes(), HEALTH_CHECKS_SHAPE).expect_err("no list");
        assert!(e.contains("<HealthChecks>"), "{e}");
        assert!(whole(b"\xff\xfe", HEALTH_CHECKS_SHAPE).is_err());
    }

    #[test]
    fn the_fix_follows_the_cause() {
        let denied = answered(LIST_HEALTH_CHECKS, "AccessDenied", "no");
        assert!(
            denied.fix.contains("allow route53:ListHealthChecks"),
            "{denied:?}"
        );
        let denied = answered(DESCRIBE_ALARMS, "AccessDeniedException", "no");
        assert!(
            denied.fix.contains("allow cloudwatch:DescribeAlarms"),
            "{denied:?}"
        );
        let expired = answered(DESCRIBE_ALARMS, "ExpiredToken", "old");
        assert!(expired.fix.contains("expired"), "{expired:?}");
        let throttled = answered(LIST_RESOURCE_RECORD_SETS, "Throttling", "slow down");
        assert!(throttled.fix.contains("throttled"), "{throttled:?}");
        let zone = answered(LIST_RESOURCE_RECORD_SETS, "NoSuchHostedZone", "no zone");
        assert!(zone.fix.contains("route53.hosted_zone_id"), "{zone:?}");
        let bad = malformed(LIST_HEALTH_CHECKS, "the body was cut short");
        assert!(bad.fix.contains("cut short") && bad.fix.contains("route53.endpoint_url"));
        let fixes = [denied, expired, throttled, zone, bad].map(|u| u.fix);
        let distinct: HashSet<&String> = fixes.iter().collect();
        assert_eq!(distinct.len(), fixes.len(), "{fixes:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_cuts_a_call_short_with_its_reason() {
        let never = std::future::pending::<()>;
        // The endpoint answered before: the part is not checked, whatever the wait.
        let d = Deadline::after(Duration::from_secs(60), Duration::from_secs(2));
        d.heard.cloudwatch.store(true, Ordering::Relaxed);
        let Err(Cut::NotChecked(e)) = d.run(GET_METRIC_STATISTICS, never()).await else {
            panic!("not checked");
        };
        assert!(e.why.contains("--aws-timeout of 1m ran out"), "{e:?}");
        assert!(e.fix.contains("publish.cloudwatch.endpoint_url"), "{e:?}");
        assert!(matches!(
            d.timed_out(DESCRIBE_ALARMS, "timeout".into()),
            Cut::NotChecked(u) if u.why.contains("answered other calls")
        ));
        // The other endpoint answered nothing: the SDK's timeout ends the check.
        assert_eq!(
            d.timed_out(LIST_HEALTH_CHECKS, "timeout".into()),
            Cut::Unreachable("timeout".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_endpoint_is_unreachable_whichever_timer_fires_first() {
        let never = std::future::pending::<()>;
        // --aws-timeout shorter than a try: the first call waits all of it.
        let d = Deadline::after(Duration::from_secs(5), Duration::from_secs(6));
        let cut = d.run(DESCRIBE_ALARMS, never()).await;
        assert!(
            matches!(&cut, Err(Cut::Unreachable(c)) if c.contains("no answer in 5s from publish.cloudwatch.endpoint_url")),
            "{cut:?}"
        );
        // A call that starts with less than a fair wait left is not judged: not checked.
        let d = Deadline::after(Duration::from_secs(60), Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(59_500)).await;
        let cut = d.run(LIST_HEALTH_CHECKS, never()).await;
        assert!(matches!(cut, Err(Cut::NotChecked(_))), "{cut:?}");
        // A call that waited a whole try at an endpoint that answered nothing is unreachable.
        let d = Deadline::after(Duration::from_secs(60), Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(57)).await;
        let cut = d.run(LIST_HEALTH_CHECKS, never()).await;
        assert!(matches!(cut, Err(Cut::Unreachable(_))), "{cut:?}");
    }
}
