//! The rules of `check --aws`, pure: which deployed alarms, health checks and records belong to
//! which branch, and what each breaks of the metric contract ([`crate::contract`]).

use super::model::{
    Alarm, BranchExpect, Expect, Fetched, Finding, HealthCheck, Inventory, Record, Rule, Series,
    ServiceExpect, Unchecked,
};
use crate::aws_vocab::{Comparison, HealthCheckType, Spelled, Statistic};
use crate::contract::{
    ALARM_PERIOD, BRANCH, MAX_RECORD_TTL, READINESS, ROUTE53_STATISTICS, SERVICE,
};

/// How far back an alarm's metric must have a datum, seconds.
pub const RECENT_SECS: i64 = 300;

/// Longest detection time of a routing alarm (`Period` × `EvaluationPeriods`), seconds: 5
/// periods of 60 s, the most both deployment templates allow. The prober's own hysteresis has
/// already decided; each further minute only delays the failover it decided.
pub const MAX_DETECTION_SECS: i64 = 300;

/// Whether a health check follows an alarm of this name.
fn follows(hc: &HealthCheck, alarm: &str) -> bool {
    hc.kind.is(HealthCheckType::CloudwatchMetric)
        && hc.alarm.as_ref().is_some_and(|a| a.name == alarm)
}

/// The most health checks a walk through `CALCULATED` children visits: a loop or a deep
/// chain in an answer ends there.
const MAX_WALK: usize = 256;

/// The `CLOUDWATCH_METRIC` health checks `root` stands on: itself, or the leaves under a
/// `CALCULATED` one's children (each visited once; ids the listing lacks are skipped).
fn leaves<'a>(root: &'a HealthCheck, hcs: &'a [HealthCheck]) -> Vec<&'a HealthCheck> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![root];
    while let Some(h) = todo.pop() {
        if seen.len() >= MAX_WALK || !seen.insert(h.id.as_str()) {
            continue;
        }
        if h.kind.is(HealthCheckType::CloudwatchMetric) {
            out.push(h);
        } else if h.kind.is(HealthCheckType::Calculated) {
            todo.extend(
                h.children
                    .iter()
                    .filter_map(|c| hcs.iter().find(|x| x.id == *c)),
            );
        }
    }
    out
}

/// Whether a health check follows one of `alarms`, directly or through its children.
fn reaches(h: &HealthCheck, alarms: &[&Alarm], hcs: &[HealthCheck]) -> bool {
    leaves(h, hcs)
        .iter()
        .any(|l| alarms.iter().any(|a| follows(l, &a.name)))
}

/// Whether an alarm is one a health check may follow for the service: it watches a series of
/// the service (its `Service` dimension) and either `Readiness` or is followed by a health
/// check. Alarms on the other contract metrics (paging on `SuccessRate`, ...) are not.
fn is_routing_alarm(svc: &ServiceExpect, alarm: &Alarm, hcs: &[HealthCheck]) -> bool {
    alarm
        .all_series()
        .any(|s| s.dim(SERVICE) == Some(&svc.name))
        && (alarm.all_series().any(|s| s.metric == READINESS.name)
            || hcs.iter().any(|h| follows(h, &alarm.name)))
}

/// The branch an alarm's series names (its `Branch` dimension), if any.
fn branch_of(alarm: &Alarm) -> Option<&str> {
    alarm.all_series().find_map(|s| s.dim(BRANCH))
}

/// The routing alarms of one branch.
pub fn branch_alarms<'a>(
    svc: &ServiceExpect,
    branch: &str,
    alarms: &'a [Alarm],
    hcs: &[HealthCheck],
) -> Vec<&'a Alarm> {
    alarms
        .iter()
        .filter(|a| is_routing_alarm(svc, a, hcs) && branch_of(a) == Some(branch))
        .collect()
}

/// The single-metric routing alarms of every service: the ones whose recent data `check`
/// reads, with the series to read.
pub fn alarms_to_sample<'a>(
    expect: &Expect,
    alarms: &'a [Alarm],
    hcs: &[HealthCheck],
) -> Vec<(&'a Alarm, &'a Series)> {
    alarms
        .iter()
        .filter(|a| expect.services.iter().any(|s| is_routing_alarm(s, a, hcs)))
        .filter_map(|a| a.series.as_ref().map(|s| (a, s)))
        .collect()
}

/// Every finding, service by service, branch by branch.
pub fn check(expect: &Expect, inv: &Inventory) -> Vec<Finding> {
    let mut out = Vec::new();
    let hcs = inv.health_checks.got().map_or(&[][..], Vec::as_slice);
    for svc in &expect.services {
        let at = At {
            service: &svc.name,
            branch: None,
        };
        match &inv.alarms {
            Fetched::Got(alarms) => {
                out.extend(stray_alarms(svc, alarms, hcs));
                for b in &svc.branches {
                    out.extend(branch_rules(expect, svc, &b.name, alarms, inv));
                }
            }
            Fetched::NotChecked(why) => out.push(at.not_checked("alarms", why)),
        }
        if let Fetched::NotChecked(why) = &inv.health_checks {
            out.push(at.not_checked("health checks", why));
        }
        match inv.records.get(&svc.name) {
            Some(Fetched::Got((zone, records))) => {
                let known = inv.alarms.got().zip(inv.health_checks.got());
                out.extend(record_rules(svc, zone, records, known));
            }
            Some(Fetched::NotChecked(why)) => out.push(at.not_checked("records", why)),
            None => {}
        }
    }
    out
}

/// The findings of every target, each with the Route 53 it read (see `check_aws`): a Route 53
/// finding (health checks, records, and their reads not checked) that an earlier target with
/// the same Route 53 already has, apart from its target, is left out, so it appears once.
pub fn once_per_route53(found: Vec<(String, Finding)>) -> Vec<Finding> {
    let route53 = |f: &Finding| {
        f.rule.is_route53()
            || (f.rule == Rule::NotChecked
                && matches!(f.object.as_str(), "health checks" | "records"))
    };
    let mut kept: Vec<(String, Finding)> = Vec::new();
    for (view, f) in found {
        let same = |(v, k): &(String, Finding)| {
            *v == view
                && (&k.service, &k.branch, &k.object, k.rule, &k.problem, &k.fix)
                    == (&f.service, &f.branch, &f.object, f.rule, &f.problem, &f.fix)
        };
        if !(route53(&f) && kept.iter().any(same)) {
            kept.push((view, f));
        }
    }
    kept.into_iter().map(|(_, f)| f).collect()
}

/// Where a finding is.
#[derive(Clone, Copy)]
struct At<'a> {
    service: &'a str,
    branch: Option<&'a str>,
}

impl At<'_> {
    fn finding(&self, object: &str, rule: Rule, problem: String, fix: &str) -> Finding {
        Finding {
            target: None,
            service: self.service.to_string(),
            branch: self.branch.map(str::to_string),
            object: object.to_string(),
            rule,
            problem,
            fix: fix.to_string(),
        }
    }

    fn not_checked(&self, what: &str, u: &Unchecked) -> Finding {
        self.finding(
            what,
            Rule::NotChecked,
            format!("not checked: {}", u.why),
            &u.fix,
        )
    }
}

/// Routing alarms of the service that name no branch of the config: `Readiness` without a
/// `Branch` dimension, or with a branch the config does not have.
fn stray_alarms(svc: &ServiceExpect, alarms: &[Alarm], hcs: &[HealthCheck]) -> Vec<Finding> {
    let at = At {
        service: &svc.name,
        branch: None,
    };
    alarms
        .iter()
        .filter(|a| is_routing_alarm(svc, a, hcs))
        .filter_map(|a| {
            let problem = match branch_of(a) {
                None => "watches the service's series without a Branch dimension: readyprobe publishes Readiness per branch only".to_string(),
                Some(b) if svc.branches.iter().any(|x| x.name == b) => return None,
                Some(b) => format!("watches Branch {b:?}, which is no branch of the service in the config"),
            };
            Some(at.finding(
                &format!("alarm {}", a.name),
                Rule::Dimensions,
                problem,
                "set the dimensions to exactly Service and Branch, with a branch name of the config",
            ))
        })
        .collect()
}

/// The rules of one branch: it has alarms and health checks, and each of them is right.
fn branch_rules(
    expect: &Expect,
    svc: &ServiceExpect,
    branch: &str,
    alarms: &[Alarm],
    inv: &Inventory,
) -> Vec<Finding> {
    let at = At {
        service: &svc.name,
        branch: Some(branch),
    };
    let hcs = inv.health_checks.got().map_or(&[][..], Vec::as_slice);
    let mine = branch_alarms(svc, branch, alarms, hcs);
    let mut out = Vec::new();
    if mine.is_empty() {
        out.push(at.finding(
            "alarm",
            Rule::NoAlarm,
            format!(
                "no alarm watches {}/{} with Service={} Branch={branch}",
                svc.namespace, READINESS.name, svc.name
            ),
            "create one per branch (docs/check-aws.md has its settings)",
        ));
    }
    for a in &mine {
        out.extend(alarm_rules(at, svc, a));
        match inv.recent.get(&a.name) {
            Some(Fetched::Got(false)) => out.push(at.finding(
                &format!("alarm {}", a.name),
                Rule::NoDatum,
                format!("its metric has no datum in the last {} minutes", RECENT_SECS / 60),
                "run the prober with the cloudwatch sink (publish.sinks), and check the alarm's metric, dimensions and unit against the contract",
            )),
            Some(Fetched::NotChecked(why)) => {
                out.push(at.not_checked(&format!("datums of alarm {}", a.name), why));
            }
            _ => {}
        }
    }
    if matches!(inv.health_checks, Fetched::Got(_)) {
        let elsewhere = |h: &HealthCheck| {
            h.alarm
                .as_ref()
                .is_some_and(|a| read_elsewhere(expect, svc, &a.region))
        };
        let (followers, theirs): (Vec<&HealthCheck>, Vec<&HealthCheck>) = hcs
            .iter()
            .filter(|h| mine.iter().any(|a| follows(h, &a.name)))
            .partition(|h| !elsewhere(h));
        // One that follows the branch's alarm in another target's region is that check's; in
        // a region a branch names, the other region's prober's (the cross-region layout).
        if followers.is_empty() && theirs.is_empty() {
            out.push(at.finding(
                "health check",
                Rule::NoHealthCheck,
                "no CLOUDWATCH_METRIC health check follows an alarm of this branch".into(),
                "create a CLOUDWATCH_METRIC health check with AlarmIdentifier set to the branch's alarm and its region",
            ));
        }
        for h in followers {
            out.extend(health_check_rules(at, expect, h));
        }
        out.extend(calculated_rules(at, svc, alarms, &mine, hcs));
        // Judged once per branch: by the read in the branch's region when the service has one.
        let region = svc.branches.iter().find(|b| b.name == branch);
        let region = region
            .and_then(|b| b.region.as_deref())
            .filter(|r| *r == expect.region || !svc.other_regions.iter().any(|o| o == r));
        out.extend(alarm_in_branch_region(at, region, &mine, hcs));
    }
    out
}

/// Whether an alarm region is read by another check than this one: another publish target's
/// region, or, when the branches name two regions (the cross-region layout, where each
/// region's prober publishes only there and its own `check --aws` reads it), one of those.
fn read_elsewhere(expect: &Expect, svc: &ServiceExpect, region: &str) -> bool {
    let named: std::collections::BTreeSet<&str> = svc
        .branches
        .iter()
        .filter_map(|b| b.region.as_deref())
        .collect();
    region != expect.region
        && (svc.other_regions.iter().any(|o| o == region)
            || (named.len() > 1 && named.contains(region)))
}

/// The rules of the `CALCULATED` health checks over the branch's alarms: every leaf follows
/// an alarm of this branch (one of another branch, read here by name, is flagged; alarm names
/// are the same in both regions), and `HealthThreshold` counts every child, so that each
/// region's child (healthy without data) can fail the branch.
fn calculated_rules(
    at: At<'_>,
    svc: &ServiceExpect,
    alarms: &[Alarm],
    mine: &[&Alarm],
    hcs: &[HealthCheck],
) -> Vec<Finding> {
    let mut out = Vec::new();
    // Judged for the branch its first child follows (a check over two branches is one mistake).
    let first_mine = |h: &HealthCheck| {
        let first = h
            .children
            .first()
            .and_then(|c| hcs.iter().find(|x| x.id == *c));
        first.is_none_or(|f| reaches(f, mine, hcs))
    };
    let calculated = hcs.iter().filter(|h| {
        h.kind.is(HealthCheckType::Calculated) && reaches(h, mine, hcs) && first_mine(h)
    });
    for h in calculated {
        let object = format!("health check {}", h.id);
        for leaf in leaves(h, hcs) {
            let Some(alarm) = &leaf.alarm else { continue };
            let other = svc.branches.iter().map(|b| b.name.as_str()).find(|b| {
                Some(*b) != at.branch
                    && branch_alarms(svc, b, alarms, hcs)
                        .iter()
                        .any(|a| a.name == alarm.name)
            });
            if let Some(other) = other {
                out.push(at.finding(
                    &object,
                    Rule::CalculatedChild,
                    format!(
                        "its child {} follows alarm {} in {}, an alarm of branch {other}: the branch's health then follows another branch's readiness",
                        leaf.id, alarm.name, alarm.region
                    ),
                    "make every child follow this branch's readiness alarm (one child per region)",
                ));
            }
        }
        let n = h.children.len();
        if let Some(t) = h
            .health_threshold
            .filter(|t| usize::try_from(*t).is_ok_and(|t| t < n))
        {
            out.push(at.finding(
                &object,
                Rule::CalculatedThreshold,
                format!(
                    "HealthThreshold {t} of {n} children: one child's healthy answer keeps the branch healthy, so a region whose alarm goes stale or whose prober does not see the fault outvotes the one that does"
                ),
                &format!(
                    "set HealthThreshold to {n}, with each child's InsufficientDataHealthStatus Healthy (a child without data abstains; docs/deploy.md)"
                ),
            ));
        }
    }
    out
}

/// `alarm_in_branch_region`: the branch's health checks are the ones that follow one of its
/// alarms, directly or through children, and are no other health check's child. A warning when
/// the branch names its region and every alarm they follow is in it; silent when any follows
/// an alarm in another region, when the branch names no region, or when there is none.
fn alarm_in_branch_region(
    at: At<'_>,
    region: Option<&str>,
    mine: &[&Alarm],
    hcs: &[HealthCheck],
) -> Option<Finding> {
    let region = region?;
    let is_child = |h: &HealthCheck| hcs.iter().any(|p| p.children.contains(&h.id));
    let roots: Vec<&HealthCheck> = hcs
        .iter()
        .filter(|h| !is_child(h) && reaches(h, mine, hcs))
        .collect();
    let regions: Vec<&str> = roots
        .iter()
        .flat_map(|r| leaves(r, hcs))
        .filter_map(|l| l.alarm.as_ref().map(|a| a.region.as_str()))
        .collect();
    if regions.is_empty() || regions.iter().any(|r| *r != region) {
        return None;
    }
    let ids: Vec<&str> = roots.iter().map(|r| r.id.as_str()).collect();
    Some(at.finding(
        &format!("health check {}", ids.join(", ")),
        Rule::AlarmInBranchRegion,
        format!(
            "every alarm it follows is in {region}, the branch's own region: when CloudWatch or the region is impaired, the alarm goes stale exactly when the branch fails"
        ),
        "deploy the cross-region layout (docs/deploy.md): a prober in a second region publishing there, the alarm there too, and a CALCULATED health check over both regions' alarms",
    ))
}

/// The rules of one routing alarm.
fn alarm_rules(at: At<'_>, svc: &ServiceExpect, a: &Alarm) -> Vec<Finding> {
    let object = format!("alarm {}", a.name);
    let mut out = Vec::new();
    let mut add =
        |rule, problem: String, fix: &str| out.push(at.finding(&object, rule, problem, fix));
    if a.series.is_none() {
        add(
            Rule::MetricMath,
            format!(
                "uses metric math ({} metrics): Route 53 cannot follow it",
                a.math.len()
            ),
            "alarm on the single metric Readiness (MetricName, Namespace, Dimensions, Statistic)",
        );
    }
    if let Some(s) = &a.series {
        series_rules(s, svc, &mut add);
    }
    if let Some(u) = a.unit.as_deref().filter(|u| *u != READINESS.unit.as_str()) {
        add(
            Rule::Unit,
            format!(
                "Unit {u}: readyprobe publishes {} with Unit {}, so CloudWatch filters out every datum",
                READINESS.name,
                READINESS.unit.as_str()
            ),
            "remove Unit from the alarm, or set it to None",
        );
    }
    statistic_rules(a, &mut add);
    if !means_unready(a.comparison.as_ref(), a.threshold) {
        add(
            Rule::Direction,
            format!(
                "{} {}: ALARM must mean the branch is unready, i.e. the statistic of Readiness (0 or 1) below 1 (Minimum, Maximum) or below 0.5 (Average)",
                a.comparison
                    .as_ref()
                    .map_or("no ComparisonOperator".to_string(), ToString::to_string),
                a.threshold
                    .map_or("no Threshold".to_string(), |t| format!("threshold {t}"))
            ),
            "set ComparisonOperator LessThanThreshold with Threshold 1 (Minimum, Maximum) or 0.5 (Average)",
        );
    }
    timing_rules(a, &mut add);
    if a.treat_missing_data.is_none() {
        add(
            Rule::TreatMissingData,
            "TreatMissingData unset: a silent prober leaves the alarm as CloudWatch's default decides".into(),
            "set TreatMissingData explicitly (breaching fails over when the prober stops publishing; docs/check-aws.md)",
        );
    }
    out
}

/// The rules of an alarm's statistic: one Route 53 can follow, and one with a meaning on a
/// 0/1 metric published by several probers.
fn statistic_rules(a: &Alarm, add: &mut impl FnMut(Rule, String, &str)) {
    if let Some(x) = &a.extended_statistic {
        add(
            Rule::Statistic,
            format!("extended statistic {x}: Route 53 cannot follow an alarm on a percentile"),
            "use Statistic Minimum (any prober says unready), Maximum (all must) or Average with a threshold (majority)",
        );
    } else if let Some(Spelled::Other(s)) = &a.statistic {
        add(
            Rule::Statistic,
            format!(
                "statistic {s} is none Route 53 can follow ({})",
                ROUTE53_STATISTICS.join(", ")
            ),
            "use Statistic Minimum, Maximum or Average",
        );
    }
    if let Some(s) = a
        .statistic
        .as_ref()
        .filter(|s| s.is(Statistic::Sum) || s.is(Statistic::SampleCount))
    {
        add(
            Rule::Statistic,
            format!(
                "statistic {s} of a 0/1 metric counts datums: it changes with the number of probers and of transitions in the minute, not with readiness"
            ),
            "use Statistic Minimum (any prober says unready), Maximum (all must) or Average with a threshold (majority)",
        );
    }
}

/// The rules of an alarm's timing: standard-resolution period, detection time, no M-out-of-N.
fn timing_rules(a: &Alarm, add: &mut impl FnMut(Rule, String, &str)) {
    match a.period {
        Some(p) if p < ALARM_PERIOD => add(
            Rule::Period,
            format!(
                "high-resolution period {p} s: readyprobe publishes at standard resolution, and Route 53 follows only standard-resolution alarms"
            ),
            "set Period = 60",
        ),
        Some(p) if p != ALARM_PERIOD => add(
            Rule::Period,
            format!(
                "period {p} s: the contract's is {ALARM_PERIOD} s (a longer one delays failover)"
            ),
            "set Period = 60",
        ),
        _ => {}
    }
    let n = a.evaluation_periods.unwrap_or(1);
    let detection = i64::from(a.period.unwrap_or(ALARM_PERIOD)) * i64::from(n);
    if detection > MAX_DETECTION_SECS {
        add(
            Rule::DetectionTime,
            format!(
                "detection time {detection} s (Period {} s × EvaluationPeriods {n}): ALARM, and so the failover, comes that long after the prober declared the branch unready; at most {MAX_DETECTION_SECS} s",
                a.period.unwrap_or(ALARM_PERIOD)
            ),
            "set EvaluationPeriods (and DatapointsToAlarm) to 5 or less with Period 60: readyprobe's hysteresis already waited",
        );
    }
    if let Some(m) = a.datapoints_to_alarm.filter(|m| *m != n) {
        add(
            Rule::MOutOfN,
            format!(
                "{m} out of {n} datapoints: the prober's hysteresis already decided; M-out-of-N adds a second, different one"
            ),
            "set DatapointsToAlarm = EvaluationPeriods (or leave it unset)",
        );
    }
}

/// The rules of a single-metric alarm's series: the namespace, metric and dimensions the prober
/// publishes.
/// True when ALARM fires for some statistic of a 0/1 series below 1 and never at 1: "less than"
/// a threshold in (0, 1], or "less than or equal to" one in [0, 1).
fn means_unready(comparison: Option<&Spelled<Comparison>>, threshold: Option<f64>) -> bool {
    match (comparison.and_then(Spelled::known), threshold) {
        (Some(Comparison::LessThanThreshold), Some(t)) => t > 0.0 && t <= 1.0,
        (Some(Comparison::LessThanOrEqualToThreshold), Some(t)) => (0.0..1.0).contains(&t),
        _ => false,
    }
}

fn series_rules(s: &Series, svc: &ServiceExpect, add: &mut impl FnMut(Rule, String, &str)) {
    if s.namespace != svc.namespace {
        add(
            Rule::Namespace,
            format!(
                "namespace {:?}: the service publishes to {:?}",
                s.namespace, svc.namespace
            ),
            "set Namespace to the service's namespace (publish.namespace, or the service's namespace)",
        );
    }
    if s.metric != READINESS.name {
        add(
            Rule::Metric,
            format!(
                "metric {:?}: the health check's alarm must watch {}",
                s.metric, READINESS.name
            ),
            "set MetricName = Readiness",
        );
    }
    let mut names: Vec<&str> = s.dimensions.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut want = READINESS.dimensions.to_vec();
    want.sort_unstable();
    if names != want {
        add(
            Rule::Dimensions,
            format!(
                "dimensions {}: readyprobe publishes {} with exactly {}",
                names.join(", "),
                READINESS.name,
                READINESS.dimensions.join(", ")
            ),
            "set the dimensions to exactly Service and Branch",
        );
    }
}

/// The rules of a health check that follows one of the branch's alarms.
fn health_check_rules(at: At<'_>, expect: &Expect, h: &HealthCheck) -> Vec<Finding> {
    let object = format!("health check {}", h.id);
    let mut out = Vec::new();
    if h.inverted {
        out.push(at.finding(
            &object,
            Rule::HealthCheckInverted,
            "Inverted is set: Route 53 reads the alarm's ALARM (branch unready) as healthy and OK (ready) as unhealthy".into(),
            "set Inverted = false",
        ));
    }
    if h.disabled {
        out.push(at.finding(
            &object,
            Rule::HealthCheckDisabled,
            "Disabled is set: Route 53 considers the branch healthy whatever readyprobe publishes".into(),
            "set Disabled = false (to take a branch out of service, use readyprobe override, which goes through the metric)",
        ));
    }
    if let Some(a) = h.alarm.as_ref().filter(|a| a.region != expect.region) {
        out.push(at.finding(
            &object,
            Rule::Region,
            format!("AlarmIdentifier.Region is {}, the alarm {} is in {}", a.region, a.name, expect.region),
            "set AlarmIdentifier.Region to the alarm's region (or create the alarm where the health check looks)",
        ));
    }
    match (&h.insufficient_data, &expect.insufficient_data) {
        (None, _) => out.push(at.finding(
            &object,
            Rule::InsufficientDataHealthStatus,
            "InsufficientDataHealthStatus unset: what Route 53 does while the alarm has no data was not chosen".into(),
            "set it (LastKnownStatus keeps the last answer while the prober is silent), and name the choice in route53.insufficient_data_health_status",
        )),
        (Some(got), Some(want)) if !got.is(*want) => out.push(at.finding(
            &object,
            Rule::InsufficientDataHealthStatus,
            format!("InsufficientDataHealthStatus {got}; route53.insufficient_data_health_status says {want}"),
            "set the health check's InsufficientDataHealthStatus to the configured value, or change the config",
        )),
        _ => {}
    }
    out
}

/// The rules of a service's failover records. `known` is the alarms and health checks when
/// both were read: only then can a record's health check be matched to its branch.
fn record_rules(
    svc: &ServiceExpect,
    zone: &str,
    records: &[Record],
    known: Option<(&Vec<Alarm>, &Vec<HealthCheck>)>,
) -> Vec<Finding> {
    let at = At {
        service: &svc.name,
        branch: None,
    };
    let failover: Vec<&Record> = records
        .iter()
        .filter(|r| r.name == svc.stable_name && r.failover.is_some())
        .collect();
    if failover.is_empty() {
        return vec![at.finding(
            &format!("record {}", svc.stable_name),
            Rule::NoRecord,
            format!("no failover record named {} in hosted zone {zone}", svc.stable_name),
            "create a PRIMARY and a SECONDARY failover record under the stable name (or set route53.hosted_zone_id)",
        )];
    }
    let mut out = missing_half(svc, &failover);
    for r in failover {
        let role = r.failover.as_deref().unwrap_or_default();
        let branch = svc.branches.iter().find(|b| b.role == role);
        let at = At {
            branch: branch.map(|b| b.name.as_str()),
            ..at
        };
        let object = format!("record {} {} {role}", r.name, r.rtype);
        if let Some(b) = branch {
            out.extend(record_target_rule(at, b, r, &object));
        }
        if let Some(ttl) = r.ttl.filter(|t| *t > MAX_RECORD_TTL) {
            out.push(at.finding(
                &object,
                Rule::RecordTtl,
                format!(
                    "TTL {ttl} s: clients keep the failed branch's answer that long after failover"
                ),
                "set TTL to 60 or less",
            ));
        }
        out.extend(record_health_rule(at, svc, r, &object, known));
    }
    out
}

/// The failover roles of the config that have no record, when the other has one: Route 53 then
/// has nowhere to fail over to (no SECONDARY) or always answers with the SECONDARY (no PRIMARY).
fn missing_half(svc: &ServiceExpect, failover: &[&Record]) -> Vec<Finding> {
    let present = |role: &str| failover.iter().any(|r| r.failover.as_deref() == Some(role));
    svc.branches
        .iter()
        .filter(|b| !present(&b.role))
        .map(|b| {
            let at = At {
                service: &svc.name,
                branch: Some(&b.name),
            };
            let what = if b.role == "SECONDARY" {
                "Route 53 has nowhere to fail over to when the PRIMARY is unhealthy"
            } else {
                "Route 53 answers with the SECONDARY only, whatever readyprobe says of the PRIMARY"
            };
            at.finding(
                &format!("record {} {}", svc.stable_name, b.role),
                Rule::FailoverPair,
                format!(
                    "no {} failover record under {}: {what}",
                    b.role, svc.stable_name
                ),
                &format!(
                    "create the {} failover record under the stable name, answering with {} and following the branch's health check",
                    b.role, b.endpoint
                ),
            )
        })
        .collect()
}

/// A DNS name as compared: without the root dot, lower case, and without the `dualstack.`
/// prefix Route 53 adds to some alias targets.
fn dns_name(s: &str) -> String {
    let s = s.trim().trim_end_matches('.').to_ascii_lowercase();
    match s.strip_prefix("dualstack.") {
        Some(rest) => rest.to_string(),
        None => s,
    }
}

/// Whether a failover record answers with its branch's endpoint: an alias or CNAME to the
/// endpoint's name, or (when the endpoint is an address) exactly that address.
fn record_target_rule(at: At<'_>, b: &BranchExpect, r: &Record, object: &str) -> Option<Finding> {
    let want = dns_name(&b.endpoint);
    let (ok, got) = match (&r.alias_target, r.values.as_slice()) {
        (Some(alias), _) => (dns_name(alias) == want, format!("alias to {alias}")),
        (None, values) => {
            let names: Vec<String> = values.iter().map(|v| dns_name(v)).collect();
            (
                names.len() == 1 && names[0] == want,
                format!("{} {}", r.rtype, values.join(", ")),
            )
        }
    };
    let fix = format!(
        "point the record at {} (an alias or CNAME to it), or set the branch's endpoint to what the record answers with",
        b.endpoint
    );
    (!ok).then(|| {
        at.finding(
            object,
            Rule::RecordTarget,
            format!(
                "answers with {got}, but readyprobe probes branch {} at {}: the health check follows one target and Route 53 routes to another",
                b.name, b.endpoint
            ),
            &fix,
        )
    })
}

/// Whether a failover record is health-evaluated, and by its branch's health check.
fn record_health_rule(
    at: At<'_>,
    svc: &ServiceExpect,
    r: &Record,
    object: &str,
    known: Option<(&Vec<Alarm>, &Vec<HealthCheck>)>,
) -> Option<Finding> {
    let role = r.failover.as_deref().unwrap_or_default();
    let Some(id) = &r.health_check_id else {
        if role == "SECONDARY" {
            return (!r.evaluate_target_health).then(|| at.finding(
                object,
                Rule::SecondaryUnevaluated,
                "no health check and EvaluateTargetHealth false: Route 53 treats the SECONDARY as healthy whatever readyprobe says".into(),
                "set HealthCheckId to the SECONDARY branch's health check",
            ));
        }
        return Some(at.finding(
            object,
            Rule::RecordHealthCheck,
            format!(
                "no health check: Route 53 treats the {role} as healthy whatever readyprobe says"
            ),
            "set HealthCheckId to the branch's health check",
        ));
    };
    let (alarms, hcs) = known?;
    let branch = at.branch?;
    let mine = branch_alarms(svc, branch, alarms, hcs);
    let ok = hcs.iter().any(|h| h.id == *id && reaches(h, &mine, hcs));
    if !ok {
        return Some(at.finding(
            object,
            Rule::RecordHealthCheck,
            format!("follows health check {id}, which follows no alarm of branch {branch}"),
            "set HealthCheckId to the health check that follows the branch's alarm",
        ));
    }
    // A CALCULATED root over the record's check: the one the record should follow.
    let is_child = |h: &HealthCheck| hcs.iter().any(|p| p.children.contains(&h.id));
    let parent = hcs.iter().find(|p| {
        p.kind.is(HealthCheckType::Calculated)
            && p.children.contains(id)
            && !is_child(p)
            && reaches(p, &mine, hcs)
    })?;
    Some(at.finding(
        object,
        Rule::RecordHealthCheck,
        format!(
            "follows health check {id}, a child of CALCULATED health check {}: the record ignores the branch's other children (the other region's view)",
            parent.id
        ),
        &format!("set HealthCheckId to {}", parent.id),
    ))
}

#[cfg(test)]
mod tests;
