//! One test per rule: a clean deployment has no finding, and each change breaks exactly its rule.

use super::*;
use crate::aws_check::model::{AlarmRef, BranchExpect, Unchecked};
use std::collections::BTreeMap;

const REGION: &str = "eu-west-1";

fn expect() -> Expect {
    Expect {
        region: REGION.into(),
        insufficient_data: None,
        services: vec![ServiceExpect {
            name: "orders-db".into(),
            namespace: "Readyprobe".into(),
            stable_name: "db.orders.internal".into(),
            other_regions: vec![],
            branches: vec![
                BranchExpect {
                    name: "primary".into(),
                    role: "PRIMARY".into(),
                    endpoint: "db-primary.orders.internal".into(),
                    region: None,
                },
                BranchExpect {
                    name: "secondary".into(),
                    role: "SECONDARY".into(),
                    endpoint: "db-secondary.orders.internal".into(),
                    region: None,
                },
            ],
        }],
    }
}

fn alarm(branch: &str) -> Alarm {
    Alarm {
        name: format!("orders-db-{branch}"),
        series: Some(Series {
            namespace: "Readyprobe".into(),
            metric: "Readiness".into(),
            dimensions: vec![
                ("Service".into(), "orders-db".into()),
                ("Branch".into(), branch.into()),
            ],
        }),
        math: vec![],
        unit: None,
        statistic: Some("Minimum".into()),
        extended_statistic: None,
        period: Some(60),
        evaluation_periods: Some(1),
        datapoints_to_alarm: None,
        treat_missing_data: Some("breaching".into()),
        comparison: Some("LessThanThreshold".into()),
        threshold: Some(1.0),
    }
}

fn hc(branch: &str) -> HealthCheck {
    HealthCheck {
        id: format!("hc-{branch}"),
        kind: "CLOUDWATCH_METRIC".into(),
        alarm: Some(AlarmRef {
            name: format!("orders-db-{branch}"),
            region: REGION.into(),
        }),
        insufficient_data: Some("LastKnownStatus".into()),
        inverted: false,
        disabled: false,
        children: vec![],
        health_threshold: None,
    }
}

fn record(role: &str, branch: &str) -> Record {
    Record {
        name: "db.orders.internal".into(),
        rtype: "CNAME".into(),
        set_identifier: Some(branch.into()),
        failover: Some(role.into()),
        ttl: Some(30),
        health_check_id: Some(format!("hc-{branch}")),
        evaluate_target_health: false,
        values: vec![format!("db-{branch}.orders.internal")],
        alias_target: None,
    }
}

fn clean() -> Inventory {
    Inventory {
        alarms: Fetched::Got(vec![alarm("primary"), alarm("secondary")]),
        health_checks: Fetched::Got(vec![hc("primary"), hc("secondary")]),
        records: BTreeMap::from([(
            "orders-db".to_string(),
            Fetched::Got((
                "Z1".to_string(),
                vec![
                    record("PRIMARY", "primary"),
                    record("SECONDARY", "secondary"),
                ],
            )),
        )]),
        recent: BTreeMap::from([
            ("orders-db-primary".to_string(), Fetched::Got(true)),
            ("orders-db-secondary".to_string(), Fetched::Got(true)),
        ]),
    }
}

fn alarms(inv: &mut Inventory) -> &mut Vec<Alarm> {
    match &mut inv.alarms {
        Fetched::Got(a) => a,
        Fetched::NotChecked(_) => unreachable!("the clean inventory has alarms"),
    }
}

fn hcs(inv: &mut Inventory) -> &mut Vec<HealthCheck> {
    match &mut inv.health_checks {
        Fetched::Got(h) => h,
        Fetched::NotChecked(_) => unreachable!("the clean inventory has health checks"),
    }
}

fn records(inv: &mut Inventory) -> &mut Vec<Record> {
    match inv.records.get_mut("orders-db") {
        Some(Fetched::Got((_, r))) => r,
        _ => unreachable!("the clean inventory has records"),
    }
}

/// The rules found, as (rule, branch).
fn rules_of(expect: &Expect, inv: &Inventory) -> Vec<(Rule, Option<String>)> {
    check(expect, inv)
        .into_iter()
        .map(|f| (f.rule, f.branch))
        .collect()
}

fn primary(rule: Rule) -> Vec<(Rule, Option<String>)> {
    vec![(rule, Some("primary".into()))]
}

#[test]
fn a_clean_deployment_has_no_finding() {
    assert_eq!(check(&expect(), &clean()), vec![]);
}

#[test]
fn each_alarm_setting_breaks_its_rule() {
    type Change = fn(&mut Alarm);
    let cases: &[(&str, Change, Rule)] = &[
        ("high resolution", |a| a.period = Some(10), Rule::Period),
        ("five minutes", |a| a.period = Some(300), Rule::Period),
        (
            "p99",
            |a| {
                a.statistic = None;
                a.extended_statistic = Some("p99".into());
            },
            Rule::Statistic,
        ),
        (
            "2 of 3",
            |a| {
                a.evaluation_periods = Some(3);
                a.datapoints_to_alarm = Some(2);
            },
            Rule::MOutOfN,
        ),
        (
            "a day late",
            |a| {
                a.evaluation_periods = Some(1440);
                a.datapoints_to_alarm = Some(1440);
            },
            Rule::DetectionTime,
        ),
        (
            "six minutes",
            |a| a.evaluation_periods = Some(6),
            Rule::DetectionTime,
        ),
        (
            "namespace",
            |a| {
                if let Some(s) = &mut a.series {
                    s.namespace = "Other".into();
                }
            },
            Rule::Namespace,
        ),
        ("unit", |a| a.unit = Some("Count".into()), Rule::Unit),
        (
            "extra dimension",
            |a| {
                if let Some(s) = &mut a.series {
                    s.dimensions.push(("Prober".into(), "a".into()));
                }
            },
            Rule::Dimensions,
        ),
        (
            "missing data",
            |a| a.treat_missing_data = None,
            Rule::TreatMissingData,
        ),
        ("sum", |a| a.statistic = Some("Sum".into()), Rule::Statistic),
        (
            "sample count",
            |a| a.statistic = Some("SampleCount".into()),
            Rule::Statistic,
        ),
        (
            "alarm while ready",
            |a| a.comparison = Some("GreaterThanOrEqualToThreshold".into()),
            Rule::Direction,
        ),
        ("threshold 0", |a| a.threshold = Some(0.0), Rule::Direction),
        ("threshold 2", |a| a.threshold = Some(2.0), Rule::Direction),
        (
            "anomaly band",
            |a| {
                a.comparison = Some("LessThanLowerThreshold".into());
                a.threshold = None;
            },
            Rule::Direction,
        ),
        (
            "metric math",
            |a| {
                a.math = a.series.take().into_iter().collect();
            },
            Rule::MetricMath,
        ),
    ];
    for (name, change, rule) in cases {
        let mut inv = clean();
        change(&mut alarms(&mut inv)[0]);
        assert_eq!(rules_of(&expect(), &inv), primary(*rule), "{name}");
    }
}

#[test]
fn the_majority_and_or_equal_forms_are_accepted() {
    let mut inv = clean();
    alarms(&mut inv)[0].statistic = Some("Average".into());
    alarms(&mut inv)[0].threshold = Some(0.5);
    alarms(&mut inv)[1].comparison = Some("LessThanOrEqualToThreshold".into());
    alarms(&mut inv)[1].threshold = Some(0.0);
    assert_eq!(rules_of(&expect(), &inv), vec![]);
}

#[test]
fn unit_none_and_m_equal_to_n_are_accepted() {
    let mut inv = clean();
    alarms(&mut inv)[0].unit = Some("None".into());
    alarms(&mut inv)[0].evaluation_periods = Some(3);
    alarms(&mut inv)[0].datapoints_to_alarm = Some(3);
    // Five periods of 60 s, the templates' most, is the longest detection time accepted.
    alarms(&mut inv)[1].evaluation_periods = Some(5);
    assert_eq!(rules_of(&expect(), &inv), vec![]);
}

#[test]
fn an_alarm_on_another_metric_followed_by_a_health_check_is_flagged() {
    let mut inv = clean();
    if let Some(s) = &mut alarms(&mut inv)[0].series {
        s.metric = "SuccessRate".into();
    }
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::Metric));
    // Without a health check following it, it is a paging alarm, not the branch's.
    hcs(&mut inv).retain(|h| h.id != "hc-primary");
    records(&mut inv)[0].health_check_id = None;
    let found = rules_of(&expect(), &inv);
    assert!(
        found.contains(&(Rule::NoAlarm, Some("primary".into()))),
        "{found:?}"
    );
    assert!(!found.iter().any(|(r, _)| *r == Rule::Metric), "{found:?}");
}

#[test]
fn an_alarm_without_branch_or_with_an_unknown_branch_is_flagged() {
    let mut inv = clean();
    let mut stray = alarm("tertiary");
    stray.name = "orders-db-any".into();
    alarms(&mut inv).push(stray.clone());
    if let Some(s) = &mut stray.series {
        s.dimensions.retain(|(n, _)| n == "Service");
    }
    alarms(&mut inv).push(stray);
    assert_eq!(
        rules_of(&expect(), &inv),
        vec![(Rule::Dimensions, None), (Rule::Dimensions, None)]
    );
}

#[test]
fn a_health_check_in_another_region_is_flagged() {
    let mut inv = clean();
    if let Some(a) = &mut hcs(&mut inv)[0].alarm {
        a.region = "us-east-1".into();
    }
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::Region));
}

#[test]
fn insufficient_data_status_must_be_set_and_as_configured() {
    let mut inv = clean();
    hcs(&mut inv)[0].insufficient_data = None;
    assert_eq!(
        rules_of(&expect(), &inv),
        primary(Rule::InsufficientDataHealthStatus)
    );
    let mut inv = clean();
    hcs(&mut inv)[0].insufficient_data = Some("Unhealthy".into());
    let mut e = expect();
    assert_eq!(
        rules_of(&e, &inv),
        vec![],
        "any explicit value when none is configured"
    );
    e.insufficient_data = Some(crate::aws_vocab::InsufficientDataHealthStatus::LastKnownStatus);
    assert_eq!(
        rules_of(&e, &inv),
        primary(Rule::InsufficientDataHealthStatus)
    );
}

#[test]
fn a_branch_without_alarm_or_health_check_is_flagged() {
    let mut inv = clean();
    hcs(&mut inv).retain(|h| h.id != "hc-primary");
    records(&mut inv)[0].health_check_id = None;
    assert_eq!(
        rules_of(&expect(), &inv),
        vec![
            (Rule::NoHealthCheck, Some("primary".into())),
            (Rule::RecordHealthCheck, Some("primary".into())),
        ]
    );
    let mut inv = clean();
    alarms(&mut inv).retain(|a| a.name != "orders-db-primary");
    let found = rules_of(&expect(), &inv);
    assert_eq!(
        found,
        vec![
            (Rule::NoAlarm, Some("primary".into())),
            (Rule::NoHealthCheck, Some("primary".into())),
            (Rule::RecordHealthCheck, Some("primary".into())),
        ]
    );
}

#[test]
fn an_alarm_without_recent_data_is_flagged() {
    let mut inv = clean();
    inv.recent
        .insert("orders-db-primary".into(), Fetched::Got(false));
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::NoDatum));
}

#[test]
fn record_rules() {
    let mut inv = clean();
    records(&mut inv)[0].ttl = Some(300);
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::RecordTtl));

    let mut inv = clean();
    records(&mut inv)[1].health_check_id = None;
    assert_eq!(
        rules_of(&expect(), &inv),
        vec![(Rule::SecondaryUnevaluated, Some("secondary".into()))]
    );
    records(&mut inv)[1].evaluate_target_health = true;
    assert_eq!(
        rules_of(&expect(), &inv),
        vec![],
        "an alias evaluating its target"
    );

    let mut inv = clean();
    records(&mut inv)[0].health_check_id = Some("hc-secondary".into());
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::RecordHealthCheck));

    let mut inv = clean();
    records(&mut inv)
        .iter_mut()
        .for_each(|r| r.name = "other".into());
    assert_eq!(rules_of(&expect(), &inv), vec![(Rule::NoRecord, None)]);
}

#[test]
fn an_inverted_or_disabled_health_check_is_flagged() {
    let mut inv = clean();
    hcs(&mut inv)[0].inverted = true;
    assert_eq!(
        rules_of(&expect(), &inv),
        primary(Rule::HealthCheckInverted)
    );
    let mut inv = clean();
    hcs(&mut inv)[1].disabled = true;
    assert_eq!(
        rules_of(&expect(), &inv),
        vec![(Rule::HealthCheckDisabled, Some("secondary".into()))]
    );
}

#[test]
fn a_failover_pair_missing_a_half_is_flagged() {
    let mut inv = clean();
    records(&mut inv).retain(|r| r.failover.as_deref() == Some("PRIMARY"));
    let found = check(&expect(), &inv);
    assert_eq!(
        found
            .iter()
            .map(|f| (f.rule, f.branch.clone()))
            .collect::<Vec<_>>(),
        vec![(Rule::FailoverPair, Some("secondary".into()))]
    );
    assert!(
        found[0].problem.contains("no SECONDARY failover record"),
        "{found:?}"
    );
    let mut inv = clean();
    records(&mut inv).retain(|r| r.failover.as_deref() == Some("SECONDARY"));
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::FailoverPair));
}

#[test]
fn a_record_must_answer_with_its_branch_endpoint() {
    // The PRIMARY answers with the secondary's endpoint: routed one way, watched another.
    let mut inv = clean();
    records(&mut inv)[0].values = vec!["db-secondary.orders.internal".into()];
    let found = check(&expect(), &inv);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rule, Rule::RecordTarget);
    assert_eq!(found[0].branch.as_deref(), Some("primary"));
    assert!(
        found[0].fix.contains("db-primary.orders.internal"),
        "{found:?}"
    );

    // An alias to the endpoint (with the root dot, the dualstack prefix, another case) is right.
    let mut inv = clean();
    records(&mut inv)[0].values.clear();
    records(&mut inv)[0].alias_target = Some("dualstack.DB-Primary.orders.internal.".into());
    assert_eq!(rules_of(&expect(), &inv), vec![]);
    records(&mut inv)[0].alias_target = Some("db-secondary.orders.internal.".into());
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::RecordTarget));

    // Fixed addresses are not the endpoint's name; an address endpoint must be the only one.
    let mut inv = clean();
    records(&mut inv)[0].rtype = "A".into();
    records(&mut inv)[0].values = vec!["10.0.0.5".into()];
    assert_eq!(rules_of(&expect(), &inv), primary(Rule::RecordTarget));
    let mut e = expect();
    e.services[0].branches[0].endpoint = "10.0.0.5".into();
    assert_eq!(rules_of(&e, &inv), vec![]);
    records(&mut inv)[0].values.push("10.0.0.6".into());
    assert_eq!(rules_of(&e, &inv), primary(Rule::RecordTarget));
}

#[test]
fn denied_reads_are_not_checked_rows_not_violations() {
    let mut inv = clean();
    let denied = |why: &str| Unchecked::new(why, format!("fix for {why}"));
    inv.alarms = Fetched::NotChecked(denied("DescribeAlarms failed: AccessDenied: no"));
    inv.health_checks = Fetched::NotChecked(denied("ListHealthChecks failed: AccessDenied: no"));
    inv.records
        .insert("orders-db".into(), Fetched::NotChecked(denied("denied")));
    let found = check(&expect(), &inv);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.iter().all(|f| !f.is_violation()));
    assert!(
        found[0]
            .problem
            .starts_with("not checked: DescribeAlarms failed")
    );
    // Each row carries the fix of its own cause, not one text for every cause.
    assert_eq!(
        found.iter().map(|f| f.fix.as_str()).collect::<Vec<_>>(),
        [
            "fix for DescribeAlarms failed: AccessDenied: no",
            "fix for ListHealthChecks failed: AccessDenied: no",
            "fix for denied"
        ]
    );
}

#[test]
fn only_routing_alarms_of_the_config_are_sampled() {
    let mut inv = clean();
    let mut paging = alarm("primary");
    paging.name = "paging".into();
    if let Some(s) = &mut paging.series {
        s.metric = "SuccessRate".into();
    }
    alarms(&mut inv).push(paging);
    let mut other = alarm("primary");
    other.name = "other-service".into();
    if let Some(s) = &mut other.series {
        s.dimensions[0].1 = "billing".into();
    }
    alarms(&mut inv).push(other);
    let Fetched::Got(a) = &inv.alarms else {
        unreachable!()
    };
    let Fetched::Got(h) = &inv.health_checks else {
        unreachable!()
    };
    let names: Vec<&str> = alarms_to_sample(&expect(), a, h)
        .iter()
        .map(|(a, _)| a.name.as_str())
        .collect();
    assert_eq!(names, ["orders-db-primary", "orders-db-secondary"]);
}

/// The config with the primary branch in `region`.
fn primary_in(region: &str) -> Expect {
    let mut e = expect();
    e.services[0].branches[0].region = Some(region.into());
    e
}

/// A health check following alarm `alarm` in `region`, with id `id`.
fn follower(id: &str, alarm: &str, region: &str) -> HealthCheck {
    let mut h = hc("primary");
    h.id = id.into();
    h.alarm = Some(AlarmRef {
        name: alarm.into(),
        region: region.into(),
    });
    h
}

/// A CALCULATED health check over `children`.
fn calculated(id: &str, children: &[&str]) -> HealthCheck {
    HealthCheck {
        id: id.into(),
        kind: "CALCULATED".into(),
        alarm: None,
        insufficient_data: None,
        inverted: false,
        disabled: false,
        children: children.iter().map(|c| c.to_string()).collect(),
        health_threshold: None,
    }
}

/// Only the primary branch's `alarm_in_branch_region` findings, by object.
fn in_region(expect: &Expect, inv: &Inventory) -> Vec<String> {
    check(expect, inv)
        .into_iter()
        .filter(|f| f.rule == Rule::AlarmInBranchRegion)
        .map(|f| format!("{} {}", f.branch.unwrap_or_default(), f.object))
        .collect()
}

/// A branch whose one health check follows an alarm in its own region is warned of (a warning,
/// not a violation); in another region, or with no region named, it is not.
#[test]
fn an_alarm_only_in_the_branchs_region_is_a_warning() {
    let found = check(&primary_in(REGION), &clean());
    assert_eq!(
        found.iter().map(|f| f.rule).collect::<Vec<_>>(),
        [Rule::AlarmInBranchRegion]
    );
    assert_eq!(found[0].branch.as_deref(), Some("primary"));
    assert_eq!(found[0].object, "health check hc-primary");
    assert!(found[0].problem.contains(REGION), "{found:?}");
    assert!(found[0].is_warning() && !found[0].is_violation());
    assert_eq!(
        in_region(&primary_in("us-east-1"), &clean()),
        Vec::<String>::new()
    );
    assert_eq!(in_region(&expect(), &clean()), Vec::<String>::new());
    // A service that also publishes to the branch's region: that read warns, not this one.
    let mut other = primary_in("us-east-1");
    other.services[0].other_regions = vec!["us-east-1".into()];
    let mut inv = clean();
    for h in hcs(&mut inv) {
        if let Some(a) = &mut h.alarm {
            a.region = "us-east-1".into();
        }
        h.id.push_str("-us");
    }
    assert_eq!(in_region(&other, &inv), Vec::<String>::new());
    other.services[0].other_regions.clear();
    assert_eq!(
        in_region(&other, &inv),
        ["primary health check hc-primary-us"]
    );
}

/// A CALCULATED health check over followers of the branch's alarm in its region and of a copy
/// in another region is silent; over followers in its region only it is warned of (once, as
/// the CALCULATED one, which is also what the failover record follows).
#[test]
fn a_calculated_health_check_is_judged_by_its_childrens_alarms() {
    let two_regions = |other: &str| {
        let mut inv = clean();
        let h = hcs(&mut inv);
        h.retain(|h| h.id != "hc-primary");
        h.push(follower("hc-primary-a", "orders-db-primary", REGION));
        h.push(follower("hc-primary-b", "orders-db-primary", other));
        h.push(calculated("hc-primary", &["hc-primary-a", "hc-primary-b"]));
        inv
    };
    let mut e = primary_in(REGION);
    e.services[0].other_regions = vec!["us-east-1".into()];
    assert_eq!(
        in_region(&e, &two_regions("us-east-1")),
        Vec::<String>::new()
    );
    assert_eq!(check(&e, &two_regions("us-east-1")), vec![]);
    assert_eq!(
        in_region(&e, &two_regions(REGION)),
        ["primary health check hc-primary"]
    );
    // Seen from the other region's read, with its own copy of the alarms: still silent; the
    // followers of the alarms in the first region are not this read's `region` violations,
    // and the secondary's health check there is its health check.
    let mut other = e.clone();
    other.region = "us-east-1".into();
    other.services[0].other_regions = vec![REGION.into()];
    other.services[0].branches[0].region = Some("us-east-1".into());
    assert_eq!(check(&other, &two_regions("us-east-1")), vec![]);
    // Without that other target, the first region's followers are `region` violations here.
    other.services[0].other_regions = vec![];
    assert!(
        check(&other, &two_regions("us-east-1"))
            .iter()
            .any(|f| f.rule == Rule::Region),
    );
}

const REGION_B: &str = "us-east-1";

/// The cross-region layout as its templates deploy it, read by the prober of `here`: primary
/// in `REGION`, secondary in `REGION_B`, per branch a child per region's copy of its alarm
/// (`Healthy` without data) under a CALCULATED check of threshold 2 that its record follows.
fn cross_region(here: &str) -> (Expect, Inventory) {
    let mut e = primary_in(REGION);
    e.region = here.into();
    e.insufficient_data = Some(crate::config::HealthStatus::Healthy);
    e.services[0].branches[1].region = Some(REGION_B.into());
    let mut inv = clean();
    let h = hcs(&mut inv);
    h.clear();
    for b in ["primary", "secondary"] {
        let mut kids = Vec::new();
        for (suffix, region) in [("a", REGION), ("b", REGION_B)] {
            let mut child = follower(
                &format!("hc-{b}-{suffix}"),
                &format!("orders-db-{b}"),
                region,
            );
            child.insufficient_data = Some("Healthy".into());
            kids.push(child.id.clone());
            h.push(child);
        }
        let kids: Vec<&str> = kids.iter().map(String::as_str).collect();
        let mut calc = calculated(&format!("hc-{b}"), &kids);
        calc.health_threshold = Some(2);
        h.push(calc);
    }
    (e, inv)
}

fn objects_of(e: &Expect, inv: &Inventory) -> Vec<(Rule, String)> {
    check(e, inv)
        .into_iter()
        .map(|f| (f.rule, f.object))
        .collect()
}

/// A correctly deployed cross-region layout is clean from either region's read (the child on
/// the other region's alarm is that region's prober's view), and a wrong one is still flagged:
/// threshold 1, a child on the other branch's alarm, a record on a plain child, a child in a
/// region no branch names.
#[test]
fn the_cross_region_layout_is_clean_and_its_mistakes_are_flagged() {
    for here in [REGION, REGION_B] {
        let (e, inv) = cross_region(here);
        assert_eq!(check(&e, &inv), vec![], "read in {here}");
    }
    let (e, mut inv) = cross_region(REGION);
    hcs(&mut inv)[2].health_threshold = Some(1);
    assert_eq!(
        objects_of(&e, &inv),
        [(Rule::CalculatedThreshold, "health check hc-primary".into())]
    );
    let (e, mut inv) = cross_region(REGION);
    hcs(&mut inv)[1].alarm = Some(AlarmRef {
        name: "orders-db-secondary".into(),
        region: REGION_B.into(),
    });
    assert_eq!(
        objects_of(&e, &inv),
        [(Rule::CalculatedChild, "health check hc-primary".into())]
    );
    let (e, mut inv) = cross_region(REGION_B);
    if let Some(Fetched::Got((_, records))) = inv.records.get_mut("orders-db") {
        records[0].health_check_id = Some("hc-primary-b".into());
    }
    let found = check(&e, &inv);
    assert_eq!(
        found.iter().map(|f| f.rule).collect::<Vec<_>>(),
        [Rule::RecordHealthCheck],
        "{found:?}"
    );
    assert!(found[0].fix.contains("hc-primary"), "{found:?}");
    let (e, mut inv) = cross_region(REGION);
    hcs(&mut inv)[1].alarm = Some(AlarmRef {
        name: "orders-db-primary".into(),
        region: "ap-south-1".into(),
    });
    assert_eq!(
        objects_of(&e, &inv),
        [(Rule::Region, "health check hc-primary-b".into())]
    );
    // Both branches in one region: a child on the alarm elsewhere is this read's `region` mistake.
    let (mut e, inv) = cross_region(REGION);
    e.services[0].branches[1].region = Some(REGION.into());
    let found = objects_of(&e, &inv);
    assert!(
        found.contains(&(Rule::Region, "health check hc-secondary-b".into())),
        "{found:?}"
    );
}

/// A child the listing lacks, a loop of CALCULATED checks, and a child that is no alarm's
/// follower (an endpoint check) neither hang nor count as an alarm in another region.
#[test]
fn a_calculated_walk_ends_on_loops_and_missing_children() {
    let mut inv = clean();
    let h = hcs(&mut inv);
    h.retain(|h| h.id != "hc-primary");
    h.push(follower("hc-primary-a", "orders-db-primary", REGION));
    let mut https = calculated("hc-https", &[]);
    https.kind = "HTTPS".into();
    h.push(https);
    h.push(calculated(
        "hc-primary",
        &["hc-primary-a", "hc-loop", "hc-gone", "hc-https"],
    ));
    h.push(calculated("hc-loop", &["hc-primary", "hc-loop"]));
    // hc-primary and hc-loop are each other's children: no root, no finding; the record's
    // health check still reaches the alarm.
    assert_eq!(in_region(&primary_in(REGION), &inv), Vec::<String>::new());
    assert_eq!(check(&expect(), &inv), vec![]);
    hcs(&mut inv).retain(|h| h.id != "hc-loop");
    assert_eq!(
        in_region(&primary_in(REGION), &inv),
        ["primary health check hc-primary"]
    );
}

/// Without health checks read there is nothing to judge: no warning.
#[test]
fn no_warning_without_health_checks() {
    let mut inv = clean();
    inv.health_checks = Fetched::NotChecked(Unchecked::new("denied", "allow"));
    assert_eq!(in_region(&primary_in(REGION), &inv), Vec::<String>::new());
}

/// Two targets reading one Route 53 (one account): its findings appear once, the first
/// target's; the alarms' findings, and any finding of a target in another account, stay.
#[test]
fn route53_findings_appear_once_per_account() {
    let mut inv = clean();
    hcs(&mut inv)[0].inverted = true;
    alarms(&mut inv)[1].period = Some(10);
    let per_target = |name: &str| -> Vec<Finding> {
        let mut found = check(&expect(), &inv);
        for f in &mut found {
            f.target = Some(name.to_string());
        }
        found
    };
    let rows = |views: [&str; 3]| {
        let found: Vec<(String, Finding)> = ["a", "b", "c"]
            .iter()
            .zip(views)
            .flat_map(|(t, v)| per_target(t).into_iter().map(move |f| (v.to_string(), f)))
            .collect();
        once_per_route53(found)
            .into_iter()
            .map(|f| (f.target.unwrap_or_default(), f.rule))
            .collect::<Vec<_>>()
    };
    let a_b_c = |t: &str, rules: &[Rule]| {
        rules
            .iter()
            .map(|r| (t.to_string(), *r))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(["", "", ""]),
        [
            a_b_c("a", &[Rule::HealthCheckInverted, Rule::Period]),
            a_b_c("b", &[Rule::Period]),
            a_b_c("c", &[Rule::Period]),
        ]
        .concat()
    );
    assert_eq!(
        rows(["", "", "arn:aws:iam::111122223333:role/r|"]),
        [
            a_b_c("a", &[Rule::HealthCheckInverted, Rule::Period]),
            a_b_c("b", &[Rule::Period]),
            a_b_c("c", &[Rule::HealthCheckInverted, Rule::Period]),
        ]
        .concat()
    );
}
