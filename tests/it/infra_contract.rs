//! The deployment templates against the metric contract (`src/contract.rs`): every alarm in
//! `infra/cloudformation/readyprobe.yaml` and `infra/terraform/*.tf` watches a series the code
//! publishes (namespace, metric name, dimension names, unit), with the rules a Route 53
//! `CLOUDWATCH_METRIC` health check needs (period, statistic, no "M out of N", explicit missing-data
//! handling); every health check follows a `Readiness` alarm with an operator-chosen
//! `InsufficientDataHealthStatus`; every failover record has a health check and a short TTL.
//! Both templates are read into one shape ([`Template`]) and checked by the same rules.

use readyprobe::contract::{self, Metric};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A property as a template gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// A literal (numbers as their text).
    Lit(String),
    /// A CloudFormation parameter or Terraform variable.
    Param(Param),
    /// An expression this test does not evaluate, as text.
    Expr(String),
}

/// What a parameter or variable allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub default: Option<String>,
    /// `AllowedValues`, or the list of a Terraform `contains([...], var.x)` validation.
    pub allowed: Vec<String>,
    /// `MaxValue`, or the bound of a Terraform `var.x <= N` validation.
    pub max: Option<f64>,
}

impl Val {
    /// Every value this property can take, when the template bounds it to a list.
    fn values(&self) -> Option<Vec<String>> {
        match self {
            Val::Lit(s) => Some(vec![s.clone()]),
            Val::Param(p) if !p.allowed.is_empty() => Some(p.allowed.clone()),
            Val::Param(p) => p.default.clone().map(|d| vec![d]),
            Val::Expr(_) => None,
        }
    }

    /// The value used when the operator sets nothing.
    pub fn default_value(&self) -> Option<&str> {
        match self {
            Val::Lit(s) => Some(s),
            Val::Param(p) => p.default.as_deref(),
            Val::Expr(_) => None,
        }
    }
}

/// One `AWS::CloudWatch::Alarm` / `aws_cloudwatch_metric_alarm`.
#[derive(Debug)]
pub struct Alarm {
    pub id: String,
    pub namespace: Val,
    pub metric: Val,
    pub dimensions: Vec<String>,
    pub unit: Option<Val>,
    pub statistic: Option<Val>,
    pub period: Option<Val>,
    pub evaluation_periods: Option<Val>,
    pub datapoints_to_alarm: Option<Val>,
    pub treat_missing_data: Option<Val>,
}

/// One Route 53 health check.
#[derive(Debug)]
pub struct HealthCheck {
    pub id: String,
    pub kind: Option<Val>,
    /// The id of the alarm it follows.
    pub alarm: Option<String>,
    /// The alarm's region: must be the stack's own.
    pub region: Option<Val>,
    pub insufficient_data: Option<Val>,
}

/// One failover record.
#[derive(Debug)]
pub struct Record {
    pub id: String,
    pub ttl: Option<Val>,
    pub failover: Option<Val>,
    /// The id of its health check.
    pub health_check: Option<String>,
}

/// What the checks read from a template.
#[derive(Debug)]
pub struct Template {
    pub file: &'static str,
    pub alarms: Vec<Alarm>,
    pub health_checks: Vec<HealthCheck>,
    pub records: Vec<Record>,
}

/// A file of the repository.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

// ---------------------------------------------------------------- CloudFormation

/// The CloudFormation template's path in the repository.
pub const CFN: &str = "infra/cloudformation/readyprobe.yaml";

/// The template as JSON (it uses long-form intrinsics, so plain YAML reads it).
pub fn cfn_doc() -> Value {
    let text = std::fs::read_to_string(repo_file(CFN)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{CFN}: {e}"))
}

/// A property value: a literal, `{"Ref": parameter}`, or another expression.
pub fn cfn_val(doc: &Value, v: &Value) -> Val {
    match v {
        Value::String(s) => Val::Lit(s.clone()),
        Value::Number(n) => Val::Lit(n.to_string()),
        Value::Bool(b) => Val::Lit(b.to_string()),
        Value::Object(o) => match o.get("Ref").and_then(Value::as_str) {
            Some(name) if doc["Parameters"].get(name).is_some() => {
                let p = &doc["Parameters"][name];
                let text = |v: &Value| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Val::Param(Param {
                    name: name.to_string(),
                    default: p.get("Default").map(text),
                    allowed: p["AllowedValues"]
                        .as_array()
                        .map(|a| a.iter().map(text).collect())
                        .unwrap_or_default(),
                    max: p.get("MaxValue").and_then(|m| text(m).parse().ok()),
                })
            }
            _ => Val::Expr(v.to_string()),
        },
        other => Val::Expr(other.to_string()),
    }
}

/// The resources of `type_` as (logical id, properties).
pub fn cfn_resources<'a>(doc: &'a Value, type_: &str) -> Vec<(&'a str, &'a Value)> {
    doc["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"] == type_)
        .map(|(id, r)| (id.as_str(), &r["Properties"]))
        .collect()
}

fn cfn_ref(v: &Value) -> Option<String> {
    v.get("Ref").and_then(Value::as_str).map(str::to_string)
}

fn cloudformation() -> Template {
    let doc = cfn_doc();
    let val = |v: &Value| (!v.is_null()).then(|| cfn_val(&doc, v));
    let alarms = cfn_resources(&doc, "AWS::CloudWatch::Alarm")
        .into_iter()
        .map(|(id, p)| Alarm {
            id: id.to_string(),
            namespace: cfn_val(&doc, &p["Namespace"]),
            metric: cfn_val(&doc, &p["MetricName"]),
            dimensions: p["Dimensions"]
                .as_array()
                .map(|ds| {
                    ds.iter()
                        .map(|d| d["Name"].as_str().unwrap_or("?").to_string())
                        .collect()
                })
                .unwrap_or_default(),
            unit: val(&p["Unit"]),
            statistic: val(&p["Statistic"]),
            period: val(&p["Period"]),
            evaluation_periods: val(&p["EvaluationPeriods"]),
            datapoints_to_alarm: val(&p["DatapointsToAlarm"]),
            treat_missing_data: val(&p["TreatMissingData"]),
        })
        .collect();
    let health_checks = cfn_resources(&doc, "AWS::Route53::HealthCheck")
        .into_iter()
        .map(|(id, p)| {
            let c = &p["HealthCheckConfig"];
            HealthCheck {
                id: id.to_string(),
                kind: val(&c["Type"]),
                alarm: cfn_ref(&c["AlarmIdentifier"]["Name"]),
                region: val(&c["AlarmIdentifier"]["Region"]),
                insufficient_data: val(&c["InsufficientDataHealthStatus"]),
            }
        })
        .collect();
    let records = cfn_resources(&doc, "AWS::Route53::RecordSet")
        .into_iter()
        .map(|(id, p)| Record {
            id: id.to_string(),
            ttl: val(&p["TTL"]),
            failover: val(&p["Failover"]),
            health_check: cfn_ref(&p["HealthCheckId"]),
        })
        .collect();
    Template {
        file: CFN,
        alarms,
        health_checks,
        records,
    }
}

// ---------------------------------------------------------------- Terraform

const TF_DIR: &str = "infra/terraform";

/// Every top-level block of the module's `.tf` files.
fn tf_blocks() -> Vec<hcl::Block> {
    let mut files: Vec<_> = std::fs::read_dir(repo_file(TF_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tf"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .tf file in {TF_DIR}");
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let body = hcl::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            body.into_blocks().collect::<Vec<_>>()
        })
        .collect()
}

fn labels(b: &hcl::Block) -> Vec<&str> {
    b.labels().iter().map(|l| l.as_str()).collect()
}

fn attr<'a>(body: &'a hcl::Body, key: &str) -> Option<&'a hcl::Expression> {
    body.attributes()
        .find(|a| a.key.as_str() == key)
        .map(|a| &a.expr)
}

/// `var.NAME` → `NAME`.
fn var_name(e: &hcl::Expression) -> Option<&str> {
    let hcl::Expression::Traversal(t) = e else {
        return None;
    };
    match (&t.expr, t.operators.as_slice()) {
        (hcl::Expression::Variable(v), [hcl::TraversalOperator::GetAttr(name)])
            if v.as_str() == "var" =>
        {
            Some(name.as_str())
        }
        _ => None,
    }
}

/// `RESOURCE_TYPE.NAME[...]...` → `NAME`, for references to another resource.
fn resource_ref(e: &hcl::Expression, type_: &str) -> Option<String> {
    let hcl::Expression::Traversal(t) = e else {
        return None;
    };
    match (&t.expr, t.operators.first()) {
        (hcl::Expression::Variable(v), Some(hcl::TraversalOperator::GetAttr(name)))
            if v.as_str() == type_ =>
        {
            Some(name.to_string())
        }
        _ => None,
    }
}

/// What the validations of variable `name` bound it to: `contains([...], var.name)` and
/// `var.name <= N`.
fn tf_bounds(e: &hcl::Expression, name: &str, p: &mut Param) {
    use hcl::expr::{BinaryOperator, Operation};
    match e {
        hcl::Expression::FuncCall(f) if f.name.name.as_str() == "contains" => {
            if let [hcl::Expression::Array(items), v] = f.args.as_slice()
                && var_name(v) == Some(name)
            {
                p.allowed = items.iter().map(lit_text).collect();
            }
        }
        hcl::Expression::Operation(op) => {
            if let Operation::Binary(b) = op.as_ref() {
                if b.operator == BinaryOperator::LessEq
                    && var_name(&b.lhs_expr) == Some(name)
                    && let hcl::Expression::Number(n) = &b.rhs_expr
                {
                    p.max = n.as_f64();
                }
                tf_bounds(&b.lhs_expr, name, p);
                tf_bounds(&b.rhs_expr, name, p);
            }
        }
        hcl::Expression::Parenthesis(inner) => tf_bounds(inner, name, p),
        _ => {}
    }
}

fn lit_text(e: &hcl::Expression) -> String {
    match e {
        hcl::Expression::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tf_val(blocks: &[hcl::Block], e: &hcl::Expression) -> Val {
    match e {
        hcl::Expression::String(_) | hcl::Expression::Number(_) | hcl::Expression::Bool(_) => {
            Val::Lit(lit_text(e))
        }
        _ => match var_name(e) {
            Some(name) => {
                let var = blocks
                    .iter()
                    .find(|b| b.identifier() == "variable" && labels(b) == [name])
                    .unwrap_or_else(|| panic!("{TF_DIR}: no variable {name:?}"));
                let mut p = Param {
                    name: name.to_string(),
                    default: attr(var.body(), "default")
                        .filter(|d| !matches!(d, hcl::Expression::Null))
                        .map(lit_text),
                    allowed: Vec::new(),
                    max: None,
                };
                for v in var
                    .body()
                    .blocks()
                    .filter(|b| b.identifier() == "validation")
                {
                    if let Some(cond) = attr(v.body(), "condition") {
                        tf_bounds(cond, name, &mut p);
                    }
                }
                Val::Param(p)
            }
            None => Val::Expr(e.to_string()),
        },
    }
}

fn tf_resources<'a>(blocks: &'a [hcl::Block], type_: &str) -> Vec<(String, &'a hcl::Body)> {
    blocks
        .iter()
        .filter(|b| b.identifier() == "resource" && labels(b).first() == Some(&type_))
        .map(|b| (format!("{type_}.{}", labels(b)[1]), b.body()))
        .collect()
}

fn terraform() -> Template {
    let blocks = tf_blocks();
    let val = |b: &hcl::Body, k: &str| attr(b, k).map(|e| tf_val(&blocks, e));
    let alarms = tf_resources(&blocks, "aws_cloudwatch_metric_alarm")
        .into_iter()
        .map(|(id, b)| Alarm {
            namespace: val(b, "namespace").unwrap_or(Val::Expr("(none)".into())),
            metric: val(b, "metric_name").unwrap_or(Val::Expr("(none)".into())),
            dimensions: match attr(b, "dimensions") {
                Some(hcl::Expression::Object(o)) => o.keys().map(|k| k.to_string()).collect(),
                _ => Vec::new(),
            },
            unit: val(b, "unit"),
            statistic: val(b, "statistic"),
            period: val(b, "period"),
            evaluation_periods: val(b, "evaluation_periods"),
            datapoints_to_alarm: val(b, "datapoints_to_alarm"),
            treat_missing_data: val(b, "treat_missing_data"),
            id,
        })
        .collect();
    let health_checks = tf_resources(&blocks, "aws_route53_health_check")
        .into_iter()
        .map(|(id, b)| HealthCheck {
            kind: val(b, "type"),
            alarm: attr(b, "cloudwatch_alarm_name")
                .and_then(|e| resource_ref(e, "aws_cloudwatch_metric_alarm"))
                .map(|n| format!("aws_cloudwatch_metric_alarm.{n}")),
            region: val(b, "cloudwatch_alarm_region"),
            insufficient_data: val(b, "insufficient_data_health_status"),
            id,
        })
        .collect();
    let records = tf_resources(&blocks, "aws_route53_record")
        .into_iter()
        .map(|(id, b)| Record {
            ttl: val(b, "ttl"),
            failover: b
                .blocks()
                .find(|p| p.identifier() == "failover_routing_policy")
                .and_then(|p| val(p.body(), "type")),
            health_check: attr(b, "health_check_id")
                .and_then(|e| resource_ref(e, "aws_route53_health_check"))
                .map(|n| format!("aws_route53_health_check.{n}")),
            id,
        })
        .collect();
    Template {
        file: TF_DIR,
        alarms,
        health_checks,
        records,
    }
}

// ---------------------------------------------------------------- the rules

/// The contract metric an alarm watches, or why it watches none.
fn metric_of(a: &Alarm) -> Result<Metric, String> {
    let name = match &a.metric {
        Val::Lit(n) => n,
        other => return Err(format!("{}: metric name is not a literal: {other:?}", a.id)),
    };
    contract::METRICS
        .iter()
        .find(|m| m.name == name)
        .copied()
        .ok_or_else(|| format!("{}: metric {name:?} is not one readyprobe publishes", a.id))
}

/// Every way `a` departs from the contract and the alarm rules.
fn alarm_problems(a: &Alarm) -> Vec<String> {
    let mut out = Vec::new();
    let mut bad = |what: String| out.push(format!("{}: {what}", a.id));
    if a.namespace.default_value() != Some(contract::DEFAULT_NAMESPACE) {
        bad(format!(
            "namespace {:?}: its default must be {:?}",
            a.namespace,
            contract::DEFAULT_NAMESPACE
        ));
    }
    let metric = match metric_of(a) {
        Ok(m) => m,
        Err(e) => {
            out.push(e);
            return out;
        }
    };
    let mut dims = a.dimensions.clone();
    let mut want: Vec<String> = metric.dimensions.iter().map(|d| d.to_string()).collect();
    dims.sort();
    want.sort();
    if dims != want {
        bad(format!(
            "dimensions {dims:?}, but {} has {want:?}",
            metric.name
        ));
    }
    if a.unit != Some(Val::Lit(metric.unit.as_str().into())) {
        bad(format!(
            "unit {:?}, but {} is published as {:?}",
            a.unit,
            metric.name,
            metric.unit.as_str()
        ));
    }
    if a.period != Some(Val::Lit(contract::ALARM_PERIOD.to_string())) {
        bad(format!(
            "period {:?}, not {}",
            a.period,
            contract::ALARM_PERIOD
        ));
    }
    match a.statistic.as_ref().and_then(Val::values) {
        Some(stats)
            if stats
                .iter()
                .all(|s| contract::ROUTE53_STATISTICS.contains(&s.as_str())) => {}
        other => bad(format!(
            "statistic {other:?}: each must be one of {:?}",
            contract::ROUTE53_STATISTICS
        )),
    }
    if a.datapoints_to_alarm.is_none() || a.datapoints_to_alarm != a.evaluation_periods {
        bad(format!(
            "DatapointsToAlarm {:?} is not EvaluationPeriods {:?}",
            a.datapoints_to_alarm, a.evaluation_periods
        ));
    }
    let missing = ["breaching", "notBreaching", "ignore", "missing"];
    if !matches!(&a.treat_missing_data, Some(Val::Lit(t)) if missing.contains(&t.as_str())) {
        bad(format!(
            "TreatMissingData {:?} is not set explicitly",
            a.treat_missing_data
        ));
    }
    out
}

/// Every problem of the template's health checks and records.
fn routing_problems(t: &Template) -> Vec<String> {
    let mut out = Vec::new();
    let readiness: Vec<&str> = t
        .alarms
        .iter()
        .filter(|a| a.metric == Val::Lit(contract::READINESS.name.into()))
        .map(|a| a.id.as_str())
        .collect();
    if readiness.is_empty() {
        out.push(format!("no alarm on {}", contract::READINESS.name));
    }
    for h in &t.health_checks {
        if h.kind != Some(Val::Lit("CLOUDWATCH_METRIC".into())) {
            out.push(format!(
                "{}: type {:?}, not CLOUDWATCH_METRIC",
                h.id, h.kind
            ));
        }
        if !h.alarm.as_deref().is_some_and(|a| readiness.contains(&a)) {
            out.push(format!(
                "{}: follows {:?}, not a Readiness alarm",
                h.id, h.alarm
            ));
        }
        let statuses = ["Healthy", "Unhealthy", "LastKnownStatus"];
        // The stack's region, where its alarms are: {"Ref": "AWS::Region"} or the provider's.
        let own_region = [
            Val::Expr(r#"{"Ref":"AWS::Region"}"#.into()),
            Val::Expr("data.aws_region.current.name".into()),
        ];
        if !h.region.as_ref().is_some_and(|r| own_region.contains(r)) {
            out.push(format!(
                "{}: alarm region {:?} is not the stack's",
                h.id, h.region
            ));
        }
        match &h.insufficient_data {
            Some(Val::Param(p))
                if p.default.is_none()
                    && !p.allowed.is_empty()
                    && p.allowed.iter().all(|s| statuses.contains(&s.as_str())) => {}
            other => out.push(format!(
                "{}: InsufficientDataHealthStatus {other:?} must come from a parameter without default allowing {statuses:?}",
                h.id
            )),
        }
    }
    for r in &t.records {
        let max = contract::MAX_RECORD_TTL as f64;
        let ttl_ok = match &r.ttl {
            Some(Val::Lit(v)) => v.parse::<f64>().is_ok_and(|v| v <= max),
            Some(Val::Param(p)) => {
                p.max.is_some_and(|m| m <= max)
                    && p.default
                        .as_deref()
                        .is_none_or(|d| d.parse::<f64>().is_ok_and(|v| v <= max))
            }
            _ => false,
        };
        if !ttl_ok {
            out.push(format!("{}: TTL {:?} not bounded by {max}", r.id, r.ttl));
        }
        let hc_ids: Vec<&str> = t.health_checks.iter().map(|h| h.id.as_str()).collect();
        if !r
            .health_check
            .as_deref()
            .is_some_and(|h| hc_ids.contains(&h))
        {
            out.push(format!(
                "{}: health check {:?} is not one of {hc_ids:?}",
                r.id, r.health_check
            ));
        }
        if r.failover.is_none() {
            out.push(format!("{}: not a failover record", r.id));
        }
    }
    out
}

fn check(t: &Template) {
    assert!(!t.alarms.is_empty(), "{}: no alarm found", t.file);
    assert!(
        !t.health_checks.is_empty(),
        "{}: no health check found",
        t.file
    );
    assert!(!t.records.is_empty(), "{}: no record found", t.file);
    let mut problems: Vec<String> = t.alarms.iter().flat_map(alarm_problems).collect();
    problems.extend(routing_problems(t));
    assert!(
        problems.is_empty(),
        "{} departs from src/contract.rs:\n  {}",
        t.file,
        problems.join("\n  ")
    );
}

#[test]
fn cloudformation_matches_the_metric_contract() {
    let t = cloudformation();
    check(&t);
    // Two branches: an alarm, a health check and a record each, one record per role.
    let readiness = t
        .alarms
        .iter()
        .filter(|a| a.metric == Val::Lit(contract::READINESS.name.into()))
        .count();
    assert_eq!(
        (readiness, t.health_checks.len(), t.records.len()),
        (2, 2, 2)
    );
    let mut roles: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| r.failover.clone())
        .collect();
    roles.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(
        roles,
        [Val::Lit("PRIMARY".into()), Val::Lit("SECONDARY".into())]
    );
}

#[test]
fn terraform_matches_the_metric_contract() {
    let t = terraform();
    check(&t);
    // One resource per branch, keyed by role (var.branches validates PRIMARY and SECONDARY).
    for r in &t.records {
        assert_eq!(r.failover, Some(Val::Expr("each.key".into())), "{}", r.id);
    }
}

/// The task role may publish only into the namespace the alarms watch.
#[test]
fn cloudformation_task_role_publishes_only_into_the_namespace() {
    let doc = cfn_doc();
    let (_, role) = cfn_resources(&doc, "AWS::IAM::Role")
        .into_iter()
        .find(|(id, _)| *id == "TaskRole")
        .expect("TaskRole");
    let statements = role["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements");
    let put = statements
        .iter()
        .find(|s| s["Action"] == "cloudwatch:PutMetricData")
        .expect("a PutMetricData statement");
    let ns = cfn_val(
        &doc,
        &put["Condition"]["StringEquals"]["cloudwatch:namespace"],
    );
    assert!(
        matches!(&ns, Val::Param(p) if p.name == "Namespace"),
        "PutMetricData is not limited to the Namespace parameter: {ns:?}"
    );
}
