//! The deployment templates against the metric contract (`src/contract.rs`): every alarm in
//! `infra/cloudformation/readyprobe-service.yaml` and `infra/terraform/*.tf` watches a series the
//! code publishes (namespace, metric name, dimension names, unit), with the rules a Route 53
//! `CLOUDWATCH_METRIC` health check needs (period, statistic, no "M out of N", explicit missing-data
//! handling); every health check follows a `Readiness` alarm with an operator-chosen
//! `InsufficientDataHealthStatus`; every failover record has a health check and a short TTL; every
//! service gets the alarms for people (heartbeat, fail-open, service unavailable). Both templates
//! are read into one shape ([`Template`]) and checked by the same rules. Then the shape of the
//! deployment: one prober for many services, bounded scheduled runs, a stable prober id per task,
//! the task role's trust and S3 permissions against what the state store does, constrained
//! parameters, and an image whose default build bakes no config.

use readyprobe::contract::{self, Metric};
use serde_json::Value;
use std::collections::BTreeMap;
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
    pub comparison: Option<Val>,
    pub threshold: Option<Val>,
    /// The alarm actions, as the template writes them.
    pub actions: Option<String>,
    /// What the resource repeats over (Terraform `for_each`), as written.
    pub for_each: Option<String>,
}

/// One Route 53 health check.
#[derive(Debug)]
pub struct HealthCheck {
    pub id: String,
    pub kind: Option<Val>,
    /// The id of the alarm it follows.
    pub alarm: Option<String>,
    /// It follows that alarm as the other region's stack (module call) of the template creates
    /// it, named the same: branches in two regions.
    pub elsewhere: bool,
    /// The alarm's region: the stack's own, or the other region's parameter when `elsewhere`.
    pub region: Option<Val>,
    /// Each value it may take (both arms of a condition).
    pub insufficient_data: Vec<Val>,
    /// A `CALCULATED` check's children (health check ids) and threshold.
    pub children: Vec<String>,
    pub threshold: Option<Val>,
    /// What the resource repeats over (Terraform `for_each`), as written.
    pub for_each: Option<String>,
}

/// One failover record.
#[derive(Debug)]
pub struct Record {
    pub id: String,
    pub ttl: Option<Val>,
    pub failover: Option<Val>,
    /// The id of its health check, each it may be (both arms of a condition).
    pub health_check: Vec<String>,
    /// What the resource repeats over (Terraform `for_each`), as written.
    pub for_each: Option<String>,
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

/// The per-service CloudFormation template (one stack per service): alarms, health checks,
/// records.
pub const CFN: &str = "infra/cloudformation/readyprobe-service.yaml";
/// The prober's CloudFormation template (one stack for all services): tasks, roles, log group.
pub const CFN_PROBER: &str = "infra/cloudformation/readyprobe.yaml";

/// The publish role's CloudFormation template (in the account of the health checks).
pub const CFN_ROLE: &str = "infra/cloudformation/readyprobe-publish-role.yaml";

/// The per-service template as JSON.
pub fn cfn_doc() -> Value {
    cfn_doc_of(CFN)
}

/// A template as JSON (they use long-form intrinsics, so plain YAML reads them).
pub fn cfn_doc_of(rel: &str) -> Value {
    let text = std::fs::read_to_string(repo_file(rel)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
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

/// The values `v` may take: both arms of an `Fn::If`, else `v` (absent: none).
fn cfn_arms(v: &Value) -> Vec<Value> {
    match v["Fn::If"].as_array().map(Vec::as_slice) {
        Some([_, a, b]) => vec![a.clone(), b.clone()],
        _ if v.is_null() => Vec::new(),
        _ => vec![v.clone()],
    }
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
            comparison: val(&p["ComparisonOperator"]),
            threshold: val(&p["Threshold"]),
            actions: (!p["AlarmActions"].is_null()).then(|| p["AlarmActions"].to_string()),
            for_each: None,
        })
        .collect();
    // An alarm named by its `AlarmName` rather than by `Ref`: the same alarm, as the other
    // region's stack of this template creates it.
    let by_name = |v: &Value| {
        cfn_resources(&doc, "AWS::CloudWatch::Alarm")
            .into_iter()
            .find(|(_, a)| !v.is_null() && a["AlarmName"] == *v)
            .map(|(id, _)| id.to_string())
    };
    let health_checks = cfn_resources(&doc, "AWS::Route53::HealthCheck")
        .into_iter()
        .map(|(id, p)| {
            let c = &p["HealthCheckConfig"];
            let name = &c["AlarmIdentifier"]["Name"];
            HealthCheck {
                id: id.to_string(),
                kind: val(&c["Type"]),
                alarm: cfn_ref(name).or_else(|| by_name(name)),
                elsewhere: cfn_ref(name).is_none() && by_name(name).is_some(),
                region: val(&c["AlarmIdentifier"]["Region"]),
                insufficient_data: cfn_arms(&c["InsufficientDataHealthStatus"])
                    .iter()
                    .map(|v| cfn_val(&doc, v))
                    .collect(),
                children: c["ChildHealthChecks"]
                    .as_array()
                    .map(|a| a.iter().filter_map(cfn_ref).collect())
                    .unwrap_or_default(),
                threshold: val(&c["HealthThreshold"]),
                for_each: None,
            }
        })
        .collect();
    let records = cfn_resources(&doc, "AWS::Route53::RecordSet")
        .into_iter()
        .map(|(id, p)| Record {
            id: id.to_string(),
            ttl: val(&p["TTL"]),
            failover: val(&p["Failover"]),
            health_check: cfn_arms(&p["HealthCheckId"])
                .iter()
                .filter_map(cfn_ref)
                .collect(),
            for_each: None,
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

/// The root module: the prober, and the per-service unit through [`TF_SERVICE`].
const TF_DIR: &str = "infra/terraform";
/// The per-service unit (alarms, health checks, records), in any account.
pub const TF_SERVICE: &str = "infra/terraform/modules/service";
/// The publish role, in the account of the health checks.
pub const TF_ROLE: &str = "infra/terraform/modules/publish-role";

/// Every top-level block of the root module's `.tf` files.
fn tf_blocks() -> Vec<hcl::Block> {
    tf_blocks_of(TF_DIR)
}

/// Every top-level block of the `.tf` files of the module in `dir`.
pub fn tf_blocks_of(dir: &str) -> Vec<hcl::Block> {
    let mut files: Vec<_> = std::fs::read_dir(repo_file(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tf"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .tf file in {dir}");
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let body = hcl::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            body.into_blocks().collect::<Vec<_>>()
        })
        .collect()
}

pub fn labels(b: &hcl::Block) -> Vec<&str> {
    b.labels().iter().map(|l| l.as_str()).collect()
}

pub fn attr<'a>(body: &'a hcl::Body, key: &str) -> Option<&'a hcl::Expression> {
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

/// An expression as written, a string or template without its quotes.
pub fn tf_text(e: &hcl::Expression) -> String {
    match e {
        hcl::Expression::TemplateExpr(t) => t.to_string(),
        other => lit_text(other),
    }
}

fn tf_val(blocks: &[hcl::Block], e: &hcl::Expression) -> Val {
    match e {
        hcl::Expression::String(_) | hcl::Expression::Number(_) | hcl::Expression::Bool(_) => {
            Val::Lit(lit_text(e))
        }
        // `coalesce(each.value.x, var.x)`: a per-service value, else the variable's.
        hcl::Expression::FuncCall(f) if f.name.to_string() == "coalesce" => {
            match f.args.last().and_then(var_name) {
                Some(name) => Val::Param(tf_var(blocks, name)),
                None => Val::Expr(e.to_string()),
            }
        }
        _ => match var_name(e) {
            Some(name) => Val::Param(tf_var(blocks, name)),
            None => Val::Expr(e.to_string()),
        },
    }
}

/// What variable `name` allows: its default and the bounds of its validations.
fn tf_var(blocks: &[hcl::Block], name: &str) -> Param {
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
    p
}

pub fn tf_resources<'a>(blocks: &'a [hcl::Block], type_: &str) -> Vec<(String, &'a hcl::Body)> {
    blocks
        .iter()
        .filter(|b| b.identifier() == "resource" && labels(b).first() == Some(&type_))
        .map(|b| (format!("{type_}.{}", labels(b)[1]), b.body()))
        .collect()
}

/// The values `e` may take: both arms of a conditional, else `e`.
fn tf_arms(e: &hcl::Expression) -> Vec<&hcl::Expression> {
    match e {
        hcl::Expression::Conditional(c) => vec![&c.true_expr, &c.false_expr],
        other => vec![other],
    }
}

/// The alarm resource whose names output `name` gives (`alarm_names = { for k, a in
/// aws_cloudwatch_metric_alarm.X : k => a.alarm_name }`), as `aws_cloudwatch_metric_alarm.X`.
fn tf_output_alarm(blocks: &[hcl::Block], name: &str) -> String {
    let out = tf_block(blocks, "output", &[name]);
    let text = tf_attr(out, "value");
    let kind = "aws_cloudwatch_metric_alarm.";
    let at = text
        .find(kind)
        .unwrap_or_else(|| panic!("output {name}: {text}"));
    let id: String = text[at + kind.len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    assert!(
        text.contains(&format!("{kind}{id} : k => a.alarm_name")),
        "output {name} does not give the alarms' names: {text}"
    );
    format!("{kind}{id}")
}

fn terraform() -> Template {
    let blocks = tf_blocks_of(TF_SERVICE);
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
            comparison: val(b, "comparison_operator"),
            threshold: val(b, "threshold"),
            actions: attr(b, "alarm_actions").map(tf_text),
            for_each: attr(b, "for_each").map(tf_text),
            id,
        })
        .collect();
    // `var.other_region_alarms.alarm_names[...]`: the Readiness alarms of the module's call in
    // the other region (its `region_alarms` output).
    let elsewhere = |b: &hcl::Body| {
        tf_attr(b, "cloudwatch_alarm_name").starts_with("var.other_region_alarms.alarm_names[")
    };
    let health_checks = tf_resources(&blocks, "aws_route53_health_check")
        .into_iter()
        .map(|(id, b)| HealthCheck {
            kind: val(b, "type"),
            alarm: if elsewhere(b) {
                Some(tf_output_alarm(&blocks, "region_alarms"))
            } else {
                attr(b, "cloudwatch_alarm_name")
                    .and_then(|e| resource_ref(e, "aws_cloudwatch_metric_alarm"))
                    .map(|n| format!("aws_cloudwatch_metric_alarm.{n}"))
            },
            elsewhere: elsewhere(b),
            region: val(b, "cloudwatch_alarm_region"),
            insufficient_data: attr(b, "insufficient_data_health_status")
                .map(|e| tf_arms(e).into_iter().map(|e| tf_val(&blocks, e)).collect())
                .unwrap_or_default(),
            children: match attr(b, "child_healthchecks") {
                Some(hcl::Expression::Array(items)) => items
                    .iter()
                    .filter_map(|e| resource_ref(e, "aws_route53_health_check"))
                    .map(|n| format!("aws_route53_health_check.{n}"))
                    .collect(),
                _ => Vec::new(),
            },
            threshold: val(b, "child_health_threshold"),
            for_each: attr(b, "for_each").map(tf_text),
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
                .map(tf_arms)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| resource_ref(e, "aws_route53_health_check"))
                .map(|n| format!("aws_route53_health_check.{n}"))
                .collect(),
            for_each: attr(b, "for_each").map(tf_text),
            id,
        })
        .collect();
    Template {
        file: TF_SERVICE,
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
        if h.kind == Some(Val::Lit("CALCULATED".into())) {
            out.extend(calculated_problems(t, h));
        } else {
            out.extend(metric_check_problems(t, h, &readiness));
        }
    }
    out.extend(record_problems(t));
    out
}

/// A `CLOUDWATCH_METRIC` check: it follows a `Readiness` alarm in the stack's own region, or the
/// same alarm in the other region as a child of a `CALCULATED` check; without data it reports
/// what the operator chose, or `Healthy` (abstains) only as such a child.
fn metric_check_problems(t: &Template, h: &HealthCheck, readiness: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
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
    let child = t.health_checks.iter().any(|c| c.children.contains(&h.id));
    // The stack's region, where its alarms are: {"Ref": "AWS::Region"} or the provider's; or
    // the other region's stack (module call) of the template.
    let region_ok = match &h.region {
        Some(Val::Param(p)) if h.elsewhere => p.name == "OtherAlarmRegion",
        Some(Val::Expr(e)) if h.elsewhere => e == "var.other_region_alarms.region",
        Some(Val::Expr(e)) => {
            e == r#"{"Ref":"AWS::Region"}"# || e == "data.aws_region.current.name"
        }
        _ => false,
    };
    if !region_ok || (h.elsewhere && !child) {
        out.push(format!(
            "{}: alarm region {:?} is not the stack's, nor the other region's as a CALCULATED check's child",
            h.id, h.region
        ));
    }
    let statuses = ["Healthy", "Unhealthy", "LastKnownStatus"];
    let chosen = |v: &Val| {
        matches!(v, Val::Param(p) if p.default.is_none()
            && !p.allowed.is_empty()
            && p.allowed.iter().all(|s| statuses.contains(&s.as_str())))
    };
    let abstains = |v: &Val| *v == Val::Lit("Healthy".into());
    let ok = !h.insufficient_data.is_empty()
        && h.insufficient_data
            .iter()
            .all(|v| chosen(v) || (child && abstains(v)))
        && (child || h.insufficient_data.iter().any(chosen));
    if !ok {
        out.push(format!(
            "{}: InsufficientDataHealthStatus {:?} must come from a parameter without default allowing {statuses:?} \
             (or be Healthy in a CALCULATED check's child)",
            h.id, h.insufficient_data
        ));
    }
    out
}

/// A `CALCULATED` check: healthy only while every child is (threshold = children), its children
/// the same branch's alarm in this region and in the other.
fn calculated_problems(t: &Template, h: &HealthCheck) -> Vec<String> {
    let mut out = Vec::new();
    let kids: Vec<&HealthCheck> = h
        .children
        .iter()
        .filter_map(|c| t.health_checks.iter().find(|k| &k.id == c))
        .collect();
    if kids.len() < 2 || kids.len() != h.children.len() {
        out.push(format!(
            "{}: children {:?} are not two or more of the template's checks",
            h.id, h.children
        ));
    }
    if h.threshold != Some(Val::Lit(kids.len().to_string())) {
        out.push(format!(
            "{}: threshold {:?} is not every child ({})",
            h.id,
            h.threshold,
            kids.len()
        ));
    }
    let one_alarm = kids.windows(2).all(|w| w[0].alarm == w[1].alarm);
    let both_regions = kids.iter().any(|k| k.elsewhere) && kids.iter().any(|k| !k.elsewhere);
    if !one_alarm || !both_regions {
        out.push(format!(
            "{}: children do not follow one branch's alarm in this region and the other",
            h.id
        ));
    }
    out
}

/// Every failover record has a short TTL and a role, and follows one of the template's checks.
fn record_problems(t: &Template) -> Vec<String> {
    let mut out = Vec::new();
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
        let elsewhere: Vec<&str> = t
            .health_checks
            .iter()
            .filter(|h| h.elsewhere)
            .map(|h| h.id.as_str())
            .collect();
        if r.health_check.is_empty()
            || !r
                .health_check
                .iter()
                .all(|h| hc_ids.contains(&h.as_str()) && !elsewhere.contains(&h.as_str()))
        {
            out.push(format!(
                "{}: health check {:?} is not one of {hc_ids:?} (the other region's alone is not)",
                r.id, r.health_check
            ));
        }
        if r.failover.is_none() {
            out.push(format!("{}: not a failover record", r.id));
        }
    }
    out
}

/// The alarms for people each service gets: (metric, statistic, comparison, missing data).
/// `ServiceUnavailable` says a prober runs without the service (README, metric contract).
const PEOPLE_ALARMS: &[(&str, &str, &str, &str)] = &[
    ("Heartbeat", "SampleCount", "LessThanThreshold", "breaching"),
    (
        "BothBranchesUnready",
        "Maximum",
        "GreaterThanOrEqualToThreshold",
        "notBreaching",
    ),
    (
        "ServiceUnavailable",
        "Maximum",
        "GreaterThanOrEqualToThreshold",
        "notBreaching",
    ),
];

/// Every way the template's alarms for people depart from [`PEOPLE_ALARMS`]: each once, firing
/// at threshold 1 as listed, with the template's alarm topic as its action.
fn people_alarm_problems(t: &Template) -> Vec<String> {
    let mut out = Vec::new();
    for (metric, stat, cmp, missing) in PEOPLE_ALARMS {
        let found: Vec<&Alarm> = t
            .alarms
            .iter()
            .filter(|a| a.metric == Val::Lit((*metric).into()))
            .collect();
        let [a] = found.as_slice() else {
            out.push(format!("{} alarms on {metric}, not one", found.len()));
            continue;
        };
        let want = [
            ("statistic", &a.statistic, *stat),
            ("comparison", &a.comparison, *cmp),
            ("threshold", &a.threshold, "1"),
            ("TreatMissingData", &a.treat_missing_data, *missing),
        ];
        for (what, got, want) in want {
            if got.as_ref().and_then(Val::default_value) != Some(want) {
                out.push(format!("{}: {what} {got:?}, not {want}", a.id));
            }
        }
        let topic = ["AlarmTopicArn", "local.alarm_actions"];
        if !a
            .actions
            .as_deref()
            .is_some_and(|x| topic.iter().any(|t| x.contains(t)))
        {
            out.push(format!(
                "{}: actions {:?} are not the alarm topic",
                a.id, a.actions
            ));
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
    problems.extend(people_alarm_problems(t));
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
    // Two branches: an alarm, a health check and a record each, one record per role; with
    // OtherAlarmRegion two more checks each (the other region's alarm, the CALCULATED one).
    let readiness = t
        .alarms
        .iter()
        .filter(|a| a.metric == Val::Lit(contract::READINESS.name.into()))
        .count();
    let calculated = t.health_checks.iter().filter(|h| !h.children.is_empty());
    assert_eq!(
        (
            readiness,
            t.health_checks.len(),
            calculated.count(),
            t.records.len()
        ),
        (2, 6, 2, 2)
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

/// `check`'s cost estimate (`src/cli/cost.rs`) counts, per service of two branches, the alarms and
/// health checks this template creates, all at the standard-resolution alarm price.
#[test]
fn cost_estimate_counts_the_cloudformation_alarms() {
    use readyprobe::cli::cost;
    let t = cloudformation();
    // One region (the stack's defaults): no other region's check, no CALCULATED one.
    let one_region = t
        .health_checks
        .iter()
        .filter(|h| h.children.is_empty() && !h.elsewhere);
    assert_eq!(
        (t.alarms.len() as u64, one_region.count()),
        (2 + cost::ALARMS_PER_SERVICE, 2)
    );
    for a in &t.alarms {
        assert_eq!(a.period, Some(Val::Lit("60".into())), "{}", a.id);
    }
}

#[test]
fn terraform_matches_the_metric_contract() {
    let t = terraform();
    check(&t);
    // One resource per branch of every service (var.services validates PRIMARY and SECONDARY).
    for r in &t.records {
        assert_eq!(
            r.failover,
            Some(Val::Expr("each.value.role".into())),
            "{}",
            r.id
        );
    }
}

/// The task role may publish only into the namespaces of the config: `Namespace`, and the
/// per-service ones listed in `ExtraNamespaces` (issue 10, review 2: a `[[service]]` namespace
/// could not be published into).
#[test]
fn cloudformation_task_role_publishes_only_into_the_namespaces() {
    let doc = cfn_doc_of(CFN_PROBER);
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
    let condition = put["Condition"].as_object().expect("a Condition");
    assert_eq!(
        condition.keys().collect::<Vec<_>>(),
        ["StringEquals"],
        "one StringEquals condition (cloudwatch:namespace is single-valued): {condition:?}"
    );
    let allowed = |extra: &[&str]| {
        let params = BTreeMap::from([
            ("Namespace", Value::from("Readyprobe")),
            (
                "ExtraNamespaces",
                Value::from(if extra.is_empty() {
                    vec![""]
                } else {
                    extra.to_vec()
                }),
            ),
        ]);
        cfn_eval(
            &doc,
            &put["Condition"]["StringEquals"]["cloudwatch:namespace"],
            &params,
        )
    };
    assert_eq!(allowed(&[]), serde_json::json!(["Readyprobe"]));
    assert_eq!(
        allowed(&["Orders", "Gateways"]),
        serde_json::json!(["Readyprobe", "Orders", "Gateways"])
    );
}

/// The same in Terraform: `namespace` and the namespaces the services set, and nothing else.
#[test]
fn terraform_task_role_publishes_only_into_the_namespaces() {
    use hcl::eval::{Context, Evaluate, FuncArgs, FuncDef, ParamType};
    fn concat(args: FuncArgs) -> Result<hcl::Value, String> {
        let mut out = Vec::new();
        for a in args.iter() {
            match a {
                hcl::Value::Array(items) => out.extend(items.iter().cloned()),
                other => return Err(format!("concat of {other}")),
            }
        }
        Ok(hcl::Value::Array(out))
    }
    fn tf_values(args: FuncArgs) -> Result<hcl::Value, String> {
        match &args[0] {
            hcl::Value::Object(o) => Ok(hcl::Value::Array(o.values().cloned().collect())),
            other => Err(format!("values of {other}")),
        }
    }
    fn distinct(args: FuncArgs) -> Result<hcl::Value, String> {
        let hcl::Value::Array(items) = &args[0] else {
            return Err("distinct of a non-list".into());
        };
        let mut out: Vec<hcl::Value> = Vec::new();
        for i in items {
            if !out.contains(i) {
                out.push(i.clone());
            }
        }
        Ok(hcl::Value::Array(out))
    }
    let blocks = tf_blocks();
    let policy = tf_block(&blocks, "data", &["aws_iam_policy_document", "task"]);
    let put = policy
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .find(|b| tf_list(b.body(), "actions") == ["cloudwatch:PutMetricData"])
        .expect("a PutMetricData statement");
    let conditions: Vec<&hcl::Block> = put
        .body()
        .blocks()
        .filter(|b| b.identifier() == "condition")
        .collect();
    assert_eq!(conditions.len(), 1, "one condition");
    let c = conditions[0].body();
    assert_eq!(tf_attr(c, "test"), "StringEquals");
    assert_eq!(tf_attr(c, "variable"), "cloudwatch:namespace");
    let values = attr(c, "values").expect("values");
    let allowed = |own: &[Option<&str>]| {
        let mut ctx = Context::new();
        ctx.declare_func(
            "concat",
            FuncDef::builder()
                .variadic_param(ParamType::Any)
                .build(concat),
        );
        ctx.declare_func("distinct", FuncDef::new(distinct, [ParamType::Any]));
        ctx.declare_func("values", FuncDef::new(tf_values, [ParamType::Any]));
        let services: serde_json::Map<String, Value> = own
            .iter()
            .enumerate()
            .map(|(i, ns)| (format!("s{i}"), serde_json::json!({ "namespace": ns })))
            .collect();
        let var = serde_json::json!({ "namespace": "Readyprobe", "services": services });
        ctx.declare_var("var", hcl::to_value(var).expect("an HCL value"));
        values
            .evaluate(&ctx)
            .unwrap_or_else(|e| panic!("{values:?}: {e}"))
    };
    assert_eq!(
        allowed(&[None]),
        hcl::to_value(["Readyprobe"]).expect("value")
    );
    assert_eq!(
        allowed(&[None, Some("Orders"), Some("Readyprobe"), Some("Orders")]),
        hcl::to_value(["Readyprobe", "Orders"]).expect("value")
    );
    // Each service's alarms watch its own namespace, else the module's.
    let service = tf_blocks_of(TF_SERVICE);
    let alarms = tf_resources(&service, "aws_cloudwatch_metric_alarm");
    assert!(!alarms.is_empty(), "{TF_SERVICE}: no alarm");
    for (_, body) in alarms {
        let ns = tf_attr(body, "namespace");
        assert!(
            ns.contains("each.value.namespace") && ns.contains("var.namespace"),
            "an alarm that ignores the service's namespace: {ns}"
        );
    }
}

// ---------------------------------------------------------------- the deployment's shape

/// A Terraform block by kind and labels, e.g. `("resource", ["aws_ecs_service", "prober"])`.
pub fn tf_block<'a>(blocks: &'a [hcl::Block], kind: &str, want: &[&str]) -> &'a hcl::Body {
    blocks
        .iter()
        .find(|b| b.identifier() == kind && labels(b) == want)
        .unwrap_or_else(|| panic!("{TF_DIR}: no {kind} {want:?}"))
        .body()
}

/// The text of attribute `key` of `body` (empty when absent).
pub fn tf_attr(body: &hcl::Body, key: &str) -> String {
    attr(body, key).map(tf_text).unwrap_or_default()
}

/// The items of list attribute `key` of `body`, each as written.
pub fn tf_list(body: &hcl::Body, key: &str) -> Vec<String> {
    match attr(body, key) {
        Some(hcl::Expression::Array(items)) => items.iter().map(tf_text).collect(),
        other => panic!("{key}: not a list: {other:?}"),
    }
}

/// The `locals` attribute `name`.
fn tf_local<'a>(blocks: &'a [hcl::Block], name: &str) -> &'a hcl::Expression {
    blocks
        .iter()
        .filter(|b| b.identifier() == "locals")
        .find_map(|b| attr(b.body(), name))
        .unwrap_or_else(|| panic!("{TF_DIR}: no local {name}"))
}

/// The resource types of a CloudFormation template, with those a `Fn::ForEach` loop makes.
fn cfn_types(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (id, r) in doc["Resources"].as_object().expect("Resources") {
        if id.starts_with("Fn::ForEach::") {
            let fragment = r[2].as_object().expect("a Fn::ForEach fragment");
            out.extend(
                fragment
                    .values()
                    .map(|r| r["Type"].as_str().unwrap_or("?").into()),
            );
        } else {
            out.push(r["Type"].as_str().unwrap_or("?").into());
        }
    }
    out
}

/// What a service's stack holds, and what the prober's stack holds.
const PER_SERVICE_TYPES: &[&str] = &[
    "AWS::CloudWatch::Alarm",
    "AWS::Route53::HealthCheck",
    "AWS::Route53::RecordSet",
];

/// Issue 10 (fleet): one prober runs every service of its config, so the prober (tasks, roles,
/// log group) is deployed once and the per-service unit (alarms, health checks, records) once per
/// service: two CloudFormation templates; in Terraform, `for_each` over `var.services`.
#[test]
fn one_prober_for_many_services() {
    let service = cfn_types(&cfn_doc());
    assert!(
        service
            .iter()
            .all(|t| PER_SERVICE_TYPES.contains(&t.as_str())),
        "{CFN} holds more than the per-service unit: {service:?}"
    );
    let prober = cfn_types(&cfn_doc_of(CFN_PROBER));
    assert!(
        !prober
            .iter()
            .any(|t| PER_SERVICE_TYPES.contains(&t.as_str())),
        "{CFN_PROBER} holds per-service resources: {prober:?}"
    );
    for t in [
        "AWS::ECS::TaskDefinition",
        "AWS::IAM::Role",
        "AWS::Logs::LogGroup",
    ] {
        assert!(prober.iter().any(|p| p == t), "{CFN_PROBER}: no {t}");
    }

    let blocks = tf_blocks();
    let service_blocks = tf_blocks_of(TF_SERVICE);
    let services = tf_block(&service_blocks, "variable", &["services"]);
    assert!(
        tf_attr(services, "type").starts_with("map("),
        "var.services is not a map"
    );
    assert!(
        tf_text(tf_local(&service_blocks, "branches")).contains("var.services"),
        "local.branches is not made from var.services"
    );
    let t = terraform();
    for a in t
        .alarms
        .iter()
        .filter(|a| a.metric == Val::Lit(contract::READINESS.name.into()))
    {
        assert_eq!(a.for_each.as_deref(), Some("local.branches"), "{}", a.id);
    }
    // The health checks per branch too, unless the call holds a region's alarms only, or (the
    // other region's and the CALCULATED ones) the branches are in one region.
    for h in &t.health_checks {
        let want = if h.elsewhere || !h.children.is_empty() {
            "local.cross_region ? local.branches : {}"
        } else {
            "var.alarms_only ? {} : local.branches"
        };
        assert_eq!(h.for_each.as_deref(), Some(want), "{}", h.id);
    }
    // The records too, unless `create_records` is off (a cutover's first step).
    for r in &t.records {
        assert_eq!(
            r.for_each.as_deref(),
            Some("var.create_records && !var.alarms_only ? local.branches : {}"),
            "{}",
            r.id
        );
    }
    for a in t
        .alarms
        .iter()
        .filter(|a| a.metric != Val::Lit(contract::READINESS.name.into()))
    {
        assert_eq!(a.for_each.as_deref(), Some("var.services"), "{}", a.id);
    }
    // The prober's resources are not repeated per service.
    for (kind, name) in [
        ("aws_ecs_task_definition", "prober"),
        ("aws_iam_role", "task"),
        ("aws_cloudwatch_log_group", "prober"),
        ("aws_security_group", "prober"),
    ] {
        let each = tf_attr(tf_block(&blocks, "resource", &[kind, name]), "for_each");
        assert!(
            !each.contains("services"),
            "{kind}.{name} repeats per service"
        );
    }
}

/// Parses `55s` / `5m` / `1h`, s.
fn secs(d: &str) -> u64 {
    let (n, unit) = d.split_at(d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("duration {d:?}"));
    match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => panic!("duration {d:?}: unit {unit:?}"),
    }
}

/// `rate(N minute[s])` → N × 60 s.
fn rate_secs(expr: &str) -> u64 {
    let inner = expr
        .strip_prefix("rate(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("schedule {expr:?} is not rate(...)"));
    let (n, unit) = inner.split_once(' ').expect("rate(N unit)");
    let n: u64 = n.parse().expect("a number of minutes");
    match (n, unit) {
        (1, "minute") => 60,
        (_, "minutes") if n > 1 => n * 60,
        _ => panic!("schedule {expr:?}"),
    }
}

/// How much later one scheduled task may start than the one before it (Fargate start-up
/// varies) without the runs overlapping or the gap growing past the policy's bound, s.
const START_SKEW: u64 = 10;

/// Issue 10 (scheduled mode): the run length comes from the schedule's rate (rate − a margin),
/// so that a run's process (its `--duration`, then at most `--grace` + `STOP_SLACK`) ends before
/// the next starts, and the gap without probing stays below what the production policy bridges
/// (a window still holding `min_attempts`): window − min_attempts × interval.
#[test]
fn scheduled_runs_neither_overlap_nor_leave_a_gap() {
    let cfg = readyprobe::config::load(&repo_file("probes/orders-db.toml")).expect("orders-db");
    let svc = &cfg.services[0];
    let bridge = svc.policy.declare_unready.window.as_secs()
        - u64::from(svc.policy.min_attempts) * svc.probe.interval.as_secs();
    let slack = readyprobe::cli::STOP_SLACK.as_secs();

    let doc = cfn_doc_of(CFN_PROBER);
    let minutes: Vec<String> = doc["Parameters"]["ScheduleMinutes"]["AllowedValues"]
        .as_array()
        .expect("ScheduleMinutes: AllowedValues")
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect();
    // The container's command: --grace G, and --duration from the ScheduleRun row.
    let slot = doc["Resources"]["Fn::ForEach::Slot"][2]["TaskDefinition&{SubnetId}"].clone();
    let cmd = slot["Properties"]["ContainerDefinitions"][0]["Command"]["Fn::If"][1].clone();
    let arg = |flag: &str| {
        let args = cmd.as_array().expect("the scheduled command");
        let i = args.iter().position(|a| a == flag).expect(flag);
        args[i + 1].clone()
    };
    let grace = secs(arg("--grace").as_str().expect("--grace literal"));
    assert_eq!(
        arg("--duration"),
        serde_json::json!({"Fn::FindInMap": ["ScheduleRun", {"Ref": "ScheduleMinutes"}, "Duration"]})
    );
    let schedule = &doc["Resources"]["Fn::ForEach::Slot"][2]["Schedule&{SubnetId}"];
    assert_eq!(
        schedule["Properties"]["ScheduleExpression"],
        serde_json::json!({"Fn::FindInMap": ["ScheduleRun", {"Ref": "ScheduleMinutes"}, "Expression"]})
    );
    let mut cfn_rows = Vec::new();
    for m in &minutes {
        let row = &doc["Mappings"]["ScheduleRun"][m];
        let (rate, run) = (
            row["Expression"].as_str().expect("Expression"),
            row["Duration"].as_str().expect("Duration"),
        );
        assert_eq!(rate_secs(rate), m.parse::<u64>().unwrap() * 60, "row {m}");
        let margin = rate_secs(rate) - secs(run);
        assert!(
            margin >= grace + slack + START_SKEW,
            "row {m}: a run ends {margin} s before the next starts, less than --grace {grace} s + {slack} s + {START_SKEW} s"
        );
        assert!(
            margin + START_SKEW <= bridge,
            "row {m}: a gap of {margin} s + {START_SKEW} s exceeds the {bridge} s the policy bridges"
        );
        cfn_rows.push((m.clone(), rate.to_string(), run.to_string()));
    }

    // Terraform: the same rows, from its locals evaluated for each allowed schedule_minutes.
    let blocks = tf_blocks();
    let p = tf_var(&blocks, "schedule_minutes");
    assert_eq!(
        p.allowed, minutes,
        "schedule_minutes and ScheduleMinutes allow different rates"
    );
    let command = tf_text(tf_local(&blocks, "command"));
    assert!(
        command.contains("\"--grace\", \"${local.grace_seconds}s\"")
            && command.contains("[\"--duration\", local.run_duration]"),
        "local.command does not run for local.run_duration with --grace: {command}"
    );
    assert_eq!(
        tf_text(tf_local(&blocks, "grace_seconds")),
        grace.to_string()
    );
    let schedule = tf_block(&blocks, "resource", &["aws_scheduler_schedule", "prober"]);
    assert_eq!(
        tf_attr(schedule, "schedule_expression"),
        "local.schedule_expression"
    );
    for (m, rate, run) in cfn_rows {
        use hcl::eval::Evaluate;
        let mut ctx = hcl::eval::Context::new();
        ctx.declare_var(
            "var",
            hcl::value!({ schedule_minutes = (m.parse::<u64>().unwrap()) }),
        );
        let margin = tf_local(&blocks, "schedule_margin_seconds")
            .evaluate(&ctx)
            .unwrap();
        ctx.declare_var("local", hcl::value!({ schedule_margin_seconds = (margin) }));
        let eval = |name: &str| match tf_local(&blocks, name).evaluate(&ctx) {
            Ok(hcl::Value::String(s)) => s,
            other => panic!("local.{name} for {m} minutes: {other:?}"),
        };
        assert_eq!(
            (eval("schedule_expression"), eval("run_duration")),
            (rate, run),
            "{m} minutes"
        );
    }
}

/// The value, as written, of the `{ name = NAME, value = ... }` object anywhere in `e` (an ECS
/// container's environment entry).
fn tf_env(e: &hcl::Expression, name: &str) -> Option<String> {
    use hcl::Expression as E;
    match e {
        E::Object(o) => {
            let get = |k: &str| {
                o.iter()
                    .find(|(key, _)| key.to_string() == k)
                    .map(|(_, v)| v)
            };
            if get("name").map(tf_text).as_deref() == Some(name) {
                return get("value").map(tf_text);
            }
            o.values().find_map(|v| tf_env(v, name))
        }
        E::Array(items) => items.iter().find_map(|v| tf_env(v, name)),
        E::FuncCall(f) => f.args.iter().find_map(|v| tf_env(v, name)),
        E::Parenthesis(inner) => tf_env(inner, name),
        _ => None,
    }
}

/// Issue 10 (prober id): every prober task gets a stable `prober_id` from its task definition,
/// `<name>-<subnet id>` (one task per subnet, never two at once), so that a replaced task
/// continues its entry in the control document instead of adding one named after its host.
#[test]
fn each_prober_task_has_a_stable_prober_id() {
    let doc = cfn_doc_of(CFN_PROBER);
    let slot = &doc["Resources"]["Fn::ForEach::Slot"];
    assert_eq!(slot[0], "SubnetId");
    assert_eq!(slot[1], serde_json::json!({"Ref": "SubnetIds"}));
    let task = &slot[2]["TaskDefinition&{SubnetId}"]["Properties"];
    let env = task["ContainerDefinitions"][0]["Environment"]
        .as_array()
        .expect("Environment");
    assert!(
        env.contains(&serde_json::json!({
            "Name": "READYPROBE_PROBER_ID",
            "Value": {"Fn::Sub": "${ProberName}-${SubnetId}"}
        })),
        "no stable READYPROBE_PROBER_ID: {env:?}"
    );
    let svc = &slot[2]["Service&{SubnetId}"]["Properties"];
    assert_eq!(svc["DesiredCount"], 1);
    assert_eq!(
        svc["DeploymentConfiguration"],
        serde_json::json!({
            "MinimumHealthyPercent": 0,
            "MaximumPercent": 100,
            "DeploymentCircuitBreaker": {"Enable": true, "Rollback": true}
        })
    );
    assert_eq!(
        svc["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"],
        serde_json::json!([{"Ref": "SubnetId"}])
    );
    // The longest id the parameters allow is one readyprobe accepts.
    let name = "x".repeat(24);
    assert!(
        doc["Parameters"]["ProberName"]["AllowedPattern"]
            .as_str()
            .is_some_and(|p| p.contains("{1,24}"))
    );
    readyprobe::config::check_prober_id(&format!("{name}-subnet-0123456789abcdef0"))
        .expect("the longest prober id");

    let blocks = tf_blocks();
    let task = tf_block(&blocks, "resource", &["aws_ecs_task_definition", "prober"]);
    assert_eq!(tf_attr(task, "for_each"), "local.slots");
    let container = attr(task, "container_definitions").expect("container_definitions");
    assert_eq!(
        tf_env(container, "READYPROBE_PROBER_ID").as_deref(),
        Some("${var.name}-${each.key}"),
        "aws_ecs_task_definition.prober: no stable READYPROBE_PROBER_ID"
    );
    let svc = tf_block(&blocks, "resource", &["aws_ecs_service", "prober"]);
    for (k, v) in [
        ("desired_count", "1"),
        ("deployment_minimum_healthy_percent", "0"),
        ("deployment_maximum_percent", "100"),
    ] {
        assert_eq!(tf_attr(svc, k), v, "aws_ecs_service.prober {k}");
    }
    assert!(tf_attr(svc, "for_each").contains("local.slots"));
    assert_eq!(
        tf_text(tf_local(&blocks, "slots")),
        "{for s in var.subnet_ids : s => s}"
    );
}

/// Issue 10 (confused deputy): the task role trusts ECS tasks of this account and region only.
#[test]
fn task_role_trusts_only_this_accounts_ecs_tasks() {
    let doc = cfn_doc_of(CFN_PROBER);
    let role = &doc["Resources"]["TaskRole"]["Properties"];
    let cond = &role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"];
    assert_eq!(
        cond["ArnLike"]["aws:SourceArn"],
        serde_json::json!({"Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:*"})
    );
    assert_eq!(
        cond["StringEquals"]["aws:SourceAccount"],
        serde_json::json!({"Ref": "AWS::AccountId"})
    );

    let blocks = tf_blocks();
    let role = tf_block(&blocks, "resource", &["aws_iam_role", "task"]);
    let doc_name = tf_attr(role, "assume_role_policy");
    let name = doc_name
        .strip_prefix("data.aws_iam_policy_document.")
        .and_then(|n| n.strip_suffix(".json"))
        .unwrap_or_else(|| panic!("task role trust: {doc_name}"));
    let trust = tf_block(&blocks, "data", &["aws_iam_policy_document", name]);
    let conditions: Vec<(String, String, Vec<String>)> = trust
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .flat_map(|s| s.body().blocks().filter(|b| b.identifier() == "condition"))
        .map(|c| {
            let b = c.body();
            (
                tf_attr(b, "test"),
                tf_attr(b, "variable"),
                tf_list(b, "values"),
            )
        })
        .collect();
    let account = "data.aws_caller_identity.current.account_id";
    let want = [
        (
            "ArnLike",
            "aws:SourceArn",
            format!(
                "arn:${{data.aws_partition.current.partition}}:ecs:${{data.aws_region.current.name}}:${{{account}}}:*"
            ),
        ),
        ("StringEquals", "aws:SourceAccount", account.to_string()),
    ];
    for (test, var, values) in want {
        assert!(
            conditions
                .iter()
                .any(|c| c.0 == test && c.1 == var && c.2 == [values.as_str()]),
            "task role trust lacks {test} {var} {values}: {conditions:?}"
        );
    }
}

/// Issue 10 (constraints): every CloudFormation parameter is constrained (a pattern, a list, or
/// a range), and every Terraform variable has a validation.
#[test]
fn every_parameter_and_variable_is_constrained() {
    let mut loose = Vec::new();
    for file in [CFN, CFN_PROBER, CFN_ROLE] {
        let doc = cfn_doc_of(file);
        for (name, p) in doc["Parameters"].as_object().expect("Parameters") {
            let ok = p.get("AllowedValues").is_some()
                || match p["Type"].as_str() {
                    Some("Number") => p.get("MinValue").is_some() && p.get("MaxValue").is_some(),
                    Some("AWS::EC2::VPC::Id") => true, // CloudFormation checks it exists
                    _ => p.get("AllowedPattern").is_some(),
                };
            if !ok {
                loose.push(format!("{file}: {name}"));
            }
        }
    }
    for dir in [TF_DIR, TF_SERVICE, TF_ROLE] {
        for b in tf_blocks_of(dir)
            .iter()
            .filter(|b| b.identifier() == "variable")
        {
            if !b.body().blocks().any(|v| v.identifier() == "validation") {
                loose.push(format!("{dir}: variable {:?}", labels(b)));
            }
        }
    }
    assert!(loose.is_empty(), "unconstrained:\n  {}", loose.join("\n  "));
}

/// Evaluate a CloudFormation value over parameter values: `Ref`, `Fn::Equals`, `Fn::Not`,
/// `Fn::And`, `Fn::Or`, `Fn::If` (on the template's `Conditions`), `Fn::Join`, `Fn::Select`, `Fn::Split` and
/// `Fn::Sub` (`${Name}` from its map, then the parameters). A `CommaDelimitedList` parameter is
/// an array.
pub fn cfn_eval(doc: &Value, e: &Value, params: &BTreeMap<&str, Value>) -> Value {
    let ev = |v: &Value| cfn_eval(doc, v, params);
    let obj = match e {
        Value::Object(o)
            if o.len() == 1 && o.keys().all(|k| k == "Ref" || k.starts_with("Fn::")) =>
        {
            o
        }
        Value::Array(a) => return Value::Array(a.iter().map(ev).collect()),
        _ => return e.clone(),
    };
    let (f, args) = obj.iter().next().expect("one key");
    let list = || args.as_array().expect("a list of arguments");
    let text = |v: Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("not text: {v}"))
    };
    match f.as_str() {
        "Ref" => {
            let name = args.as_str().expect("Ref names a parameter");
            params
                .get(name)
                .cloned()
                .unwrap_or_else(|| panic!("no value for {name}"))
        }
        "Fn::Equals" => Value::Bool(ev(&list()[0]) == ev(&list()[1])),
        "Fn::Not" => Value::Bool(ev(&list()[0]) == Value::Bool(false)),
        "Fn::And" => Value::Bool(list().iter().all(|v| ev(v) == Value::Bool(true))),
        "Fn::Or" => Value::Bool(list().iter().any(|v| ev(v) == Value::Bool(true))),
        "Fn::If" => {
            let name = list()[0].as_str().expect("a condition name");
            let cond = ev(&doc["Conditions"][name]) == Value::Bool(true);
            ev(&list()[if cond { 1 } else { 2 }])
        }
        "Fn::Join" => {
            let items = ev(&list()[1]);
            let items: Vec<String> = items
                .as_array()
                .expect("a list")
                .iter()
                .map(|v| text(v.clone()))
                .collect();
            Value::from(items.join(list()[0].as_str().expect("a separator")))
        }
        "Fn::Select" => {
            let i = list()[0].as_u64().expect("an index") as usize;
            ev(&list()[1])
                .as_array()
                .and_then(|a| a.get(i).cloned())
                .unwrap_or_else(|| panic!("Fn::Select {i} out of range"))
        }
        "Fn::Split" => {
            let whole = text(ev(&list()[1]));
            let sep = list()[0].as_str().expect("a separator");
            Value::Array(whole.split(sep).map(Value::from).collect())
        }
        "Fn::Sub" => {
            let (template, vars) = match args {
                Value::String(t) => (t.clone(), serde_json::Map::new()),
                _ => (
                    text(list()[0].clone()),
                    list()[1].as_object().cloned().unwrap_or_default(),
                ),
            };
            let mut out = template;
            for (k, v) in &vars {
                out = out.replace(&format!("${{{k}}}"), &text(ev(v)));
            }
            for (k, v) in params {
                if let Some(v) = v.as_str() {
                    out = out.replace(&format!("${{{k}}}"), v);
                }
            }
            assert!(!out.contains("${"), "unfilled Fn::Sub: {out}");
            Value::from(out)
        }
        other => panic!("a function this test does not evaluate: {other}"),
    }
}

/// [`cfn_eval`] inside every object and list too (a policy statement's `Resource`, `Condition`).
pub fn cfn_eval_deep(doc: &Value, e: &Value, params: &BTreeMap<&str, Value>) -> Value {
    let intrinsic = |o: &serde_json::Map<String, Value>| {
        o.len() == 1 && o.keys().all(|k| k == "Ref" || k.starts_with("Fn::"))
    };
    match e {
        Value::Object(o) if !intrinsic(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), cfn_eval_deep(doc, v, params)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| cfn_eval_deep(doc, v, params)).collect()),
        Value::Object(_) => cfn_eval_deep(doc, &cfn_eval(doc, e, params), params),
        _ => e.clone(),
    }
}

/// [`cfn_eval`] over text parameters.
fn cfn_rule_value(doc: &Value, e: &Value, params: &BTreeMap<&str, &str>) -> Value {
    let params = params.iter().map(|(k, v)| (*k, Value::from(*v))).collect();
    cfn_eval(doc, e, &params)
}

/// The `AssertDescription` of every assertion of the template's `Rules` that fails for
/// `params`.
fn cfn_rules_failed(doc: &Value, params: &BTreeMap<&str, &str>) -> Vec<String> {
    let mut out = Vec::new();
    for (id, rule) in doc["Rules"].as_object().expect("Rules").iter() {
        if let Some(c) = rule.get("RuleCondition")
            && cfn_rule_value(doc, c, params) != Value::Bool(true)
        {
            continue;
        }
        for a in rule["Assertions"].as_array().expect("Assertions") {
            if cfn_rule_value(doc, &a["Assert"], params) != Value::Bool(true) {
                let what = a["AssertDescription"].as_str().unwrap_or(id.as_str());
                out.push(what.to_string());
            }
        }
    }
    out
}

/// Issue 10 (review 2): the service template refuses what the config refuses, before any
/// resource is made: two branches of one name, and a branch endpoint that is the stable name (a
/// CNAME to itself). Its DNS names are lower case, so `Fn::Equals` compares them as the config
/// does, without case.
#[test]
fn cloudformation_rules_refuse_what_the_config_refuses() {
    let doc = cfn_doc();
    let good = BTreeMap::from([
        ("PrimaryBranchName", "primary"),
        ("SecondaryBranchName", "secondary"),
        ("PrimaryEndpoint", "db-a.orders.internal"),
        ("SecondaryEndpoint", "db-b.orders.internal"),
        ("StableName", "db.orders.internal"),
        ("OtherAlarmRegion", "eu-central-1"),
        ("AWS::Region", "eu-west-1"),
    ]);
    assert_eq!(cfn_rules_failed(&doc, &good), Vec::<String>::new());
    let cases = [
        (
            "SecondaryBranchName",
            "primary",
            "SecondaryBranchName must differ",
        ),
        (
            "PrimaryEndpoint",
            "db.orders.internal",
            "PrimaryEndpoint must not be StableName",
        ),
        (
            "SecondaryEndpoint",
            "db.orders.internal",
            "SecondaryEndpoint must not be StableName",
        ),
        (
            "OtherAlarmRegion",
            "eu-west-1",
            "OtherAlarmRegion must be another region",
        ),
    ];
    for (key, value, want) in cases {
        let mut params = good.clone();
        params.insert(key, value);
        let failed = cfn_rules_failed(&doc, &params);
        assert!(
            failed.len() == 1 && failed[0].contains(want),
            "{key} = {value}: {failed:?}"
        );
    }
    for p in ["PrimaryEndpoint", "SecondaryEndpoint", "StableName"] {
        let pattern = doc["Parameters"][p]["AllowedPattern"]
            .as_str()
            .unwrap_or_default();
        assert!(
            pattern.starts_with('^') && !pattern.contains("A-Z"),
            "{CFN}: {p} accepts upper case, which Fn::Equals compares with case: {pattern}"
        );
    }
}

/// The verdict of each validation of Terraform variable `services` on `services` (JSON):
/// `None` for one that uses a function this test does not define.
fn tf_services_verdicts(services: serde_json::Value) -> Vec<Option<bool>> {
    use hcl::eval::{Context, Evaluate, FuncArgs, FuncDef, ParamType};
    fn alltrue(args: FuncArgs) -> Result<hcl::Value, String> {
        match &args[0] {
            hcl::Value::Array(a) => Ok(hcl::Value::Bool(
                a.iter().all(|v| *v == hcl::Value::Bool(true)),
            )),
            other => Err(format!("alltrue of {other}")),
        }
    }
    fn values(args: FuncArgs) -> Result<hcl::Value, String> {
        match &args[0] {
            hcl::Value::Object(o) => Ok(hcl::Value::Array(o.values().cloned().collect())),
            other => Err(format!("values of {other}")),
        }
    }
    fn lower(args: FuncArgs) -> Result<hcl::Value, String> {
        match &args[0] {
            hcl::Value::String(s) => Ok(hcl::Value::String(s.to_lowercase())),
            other => Err(format!("lower of {other}")),
        }
    }
    let mut ctx = Context::new();
    ctx.declare_func("alltrue", FuncDef::new(alltrue, [ParamType::Any]));
    ctx.declare_func("values", FuncDef::new(values, [ParamType::Any]));
    ctx.declare_func("lower", FuncDef::new(lower, [ParamType::String]));
    let var = hcl::to_value(serde_json::json!({ "services": services })).expect("an HCL value");
    ctx.declare_var("var", var);
    let blocks = tf_blocks();
    let body = tf_block(&blocks, "variable", &["services"]);
    body.blocks()
        .filter(|v| v.identifier() == "validation")
        .map(|v| {
            let cond = attr(v.body(), "condition").expect("a condition");
            match cond.evaluate(&ctx) {
                Ok(hcl::Value::Bool(b)) => Some(b),
                _ => None,
            }
        })
        .collect()
}

/// Issue 10 (review 2): Terraform refuses a branch endpoint that is the service's stable name,
/// in any case, as the config does.
#[test]
fn terraform_refuses_an_endpoint_that_is_the_stable_name() {
    let services = |primary: &str| {
        serde_json::json!({ "orders-db": {
            "stable_name": "db.orders.internal",
            "hosted_zone_id": "Z123",
            "branches": [
                { "name": "primary", "role": "PRIMARY", "endpoint": primary },
                { "name": "secondary", "role": "SECONDARY", "endpoint": "db-b.orders.internal" },
            ],
        }})
    };
    let good = tf_services_verdicts(services("db-a.orders.internal"));
    assert!(
        good.contains(&Some(true)) && !good.contains(&Some(false)),
        "{good:?}"
    );
    for bad in ["db.orders.internal", "DB.Orders.Internal"] {
        let verdicts = tf_services_verdicts(services(bad));
        assert!(verdicts.contains(&Some(false)), "{bad}: {verdicts:?}");
    }
}

/// Issue 10 (image): the default `docker build` bakes no config (one naming a file the image
/// lacks could not start); `infra/image/rootfs-test.sh` runs the default command and `check`
/// against what the Dockerfile bakes.
#[test]
fn the_default_image_bakes_no_config() {
    let text = std::fs::read_to_string(repo_file("Dockerfile")).unwrap();
    let default = text
        .lines()
        .find_map(|l| l.strip_prefix("ARG CONFIG="))
        .expect("Dockerfile: ARG CONFIG=");
    assert_eq!(default, "", "the default build bakes {default}");
    let copies: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("COPY") && l.contains("/etc/readyprobe"))
        .collect();
    assert_eq!(copies, ["COPY --from=build /out/config/ /etc/readyprobe/"]);
}

/// An IAM pattern (`*` any characters, `?` one) against `s`.
fn iam_match(pattern: &str, s: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some(('*', rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some(('?', rest)) => !s.is_empty() && go(rest, &s[1..]),
            Some((c, rest)) => s.first() == Some(c) && go(rest, &s[1..]),
        }
    }
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    go(&p, &s)
}

/// One S3 statement of the task role: actions, resource pattern, `s3:prefix` pattern.
#[derive(Debug, PartialEq)]
struct S3Grant {
    actions: Vec<String>,
    resource: String,
    prefix: Option<String>,
}

/// The S3 statements of the CloudFormation task role, parameters replaced by `vars`.
fn cfn_s3_grants(vars: &[(&str, &str)]) -> Vec<S3Grant> {
    let doc = cfn_doc_of(CFN_PROBER);
    let sub = |v: &Value| {
        let mut s = v["Fn::Sub"]
            .as_str()
            .unwrap_or_else(|| panic!("not Fn::Sub: {v}"))
            .to_string();
        for (k, v) in vars {
            s = s.replace(&format!("${{{k}}}"), v);
        }
        s
    };
    doc["Resources"]["TaskRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .filter(|st| st["Action"].to_string().contains("s3:"))
        .map(|st| S3Grant {
            actions: match &st["Action"] {
                Value::String(a) => vec![a.clone()],
                other => other
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().into())
                    .collect(),
            },
            resource: sub(&st["Resource"]),
            prefix: st["Condition"]["StringLike"].get("s3:prefix").map(sub),
        })
        .collect()
}

/// The S3 statements of the Terraform task policy, variables replaced by `vars`.
fn tf_s3_grants(vars: &[(&str, &str)]) -> Vec<S3Grant> {
    let blocks = tf_blocks();
    let sub = |mut list: Vec<String>| {
        assert_eq!(list.len(), 1, "{list:?}");
        let mut s = list.remove(0);
        for (k, v) in vars {
            s = s.replace(&format!("${{{k}}}"), v);
        }
        s
    };
    tf_block(&blocks, "data", &["aws_iam_policy_document", "task"])
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .map(hcl::Block::body)
        .filter(|b| tf_attr(b, "actions").contains("s3:"))
        .map(|b| S3Grant {
            actions: match attr(b, "actions") {
                Some(hcl::Expression::Array(a)) => a.iter().map(tf_text).collect(),
                other => panic!("actions: {other:?}"),
            },
            resource: sub(tf_list(b, "resources")),
            prefix: b
                .blocks()
                .find(|c| {
                    c.identifier() == "condition" && tf_attr(c.body(), "variable") == "s3:prefix"
                })
                .map(|c| {
                    assert_eq!(tf_attr(c.body(), "test"), "StringLike");
                    sub(tf_list(c.body(), "values"))
                }),
        })
        .collect()
}

/// Issue 10 (S3): the task role's S3 permissions are what the state store needs and no more.
/// The store (src/state.rs `S3Store`) reads and conditionally writes one document per service and
/// never lists; `s3:ListBucket` is there only so that S3 answers the first read of a missing
/// document with 404 rather than 403, and is limited to the documents' names. The keys are the
/// ones the real store writes on the S3 emulator, for two services of one prober.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_policy_allows_what_the_store_does_and_no_more() {
    if crate::support::cloudwatch::cloudwatch_or_skip()
        .await
        .is_none()
    {
        return;
    }
    let endpoint = crate::support::cloudwatch::endpoint();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(
            &aws_config::defaults(aws_config::BehaviorVersion::latest())
                .region(aws_config::Region::new("us-east-1"))
                .endpoint_url(&endpoint)
                .load()
                .await,
        )
        .force_path_style(true)
        .build(),
    );
    let bucket = format!("readyprobe-it-{}", rand::random::<u32>());
    s3.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    // The templates' default prefix is the config's default.
    let prod = readyprobe::config::load(&repo_file("probes/orders-db.toml")).expect("orders-db");
    let readyprobe::config::StoreKind::S3(prod_s3) = &prod.state.store else {
        panic!("orders-db.toml: not the s3 store");
    };
    let prefix = prod_s3.key_prefix.clone();
    let doc = cfn_doc_of(CFN_PROBER);
    assert_eq!(doc["Parameters"]["StatePrefix"]["Default"], prefix.as_str());
    assert_eq!(
        tf_var(&tf_blocks(), "state_prefix").default.as_deref(),
        Some(prefix.as_str())
    );

    let cfg = readyprobe::config::S3State {
        bucket: bucket.clone(),
        key_prefix: prefix.clone(),
        region: Some("us-east-1".into()),
        endpoint_url: Some(endpoint),
    };
    for service in ["orders-db", "payments.db_2"] {
        let store = readyprobe::state::S3Store::new(&cfg, service).await;
        store.load().await.expect("a missing document reads as new");
        store.update(|_| Ok(())).await.expect("write the document");
    }
    let listed = s3
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .expect("list");
    let keys: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");

    let cfn = cfn_s3_grants(&[
        ("AWS::Partition", "aws"),
        ("StateBucket", &bucket),
        ("StatePrefix", &prefix),
    ]);
    let tf = tf_s3_grants(&[
        ("data.aws_partition.current.partition", "aws"),
        ("var.state_bucket", &bucket),
        ("var.state_prefix", &prefix),
    ]);
    assert_eq!(cfn, tf, "the templates grant different S3 permissions");
    let [objects, list] = cfn.as_slice() else {
        panic!("not two S3 statements: {cfn:?}")
    };
    assert_eq!(objects.actions, ["s3:GetObject", "s3:PutObject"]);
    assert_eq!(objects.prefix, None);
    assert_eq!(list.actions, ["s3:ListBucket"]);
    assert_eq!(list.resource, format!("arn:aws:s3:::{bucket}"));
    let list_prefix = list
        .prefix
        .as_deref()
        .expect("ListBucket without an s3:prefix condition");
    for key in &keys {
        assert!(
            iam_match(&objects.resource, &format!("arn:aws:s3:::{bucket}/{key}")),
            "{key} not granted by {}",
            objects.resource
        );
        assert!(iam_match(list_prefix, key), "{key} not under {list_prefix}");
    }
    for other in [
        format!("{prefix}evidence.jsonl"),
        "elsewhere/control-x.json".into(),
        String::new(),
    ] {
        assert!(
            !iam_match(&objects.resource, &format!("arn:aws:s3:::{bucket}/{other}")),
            "{other:?} granted"
        );
        assert!(!iam_match(list_prefix, &other), "listing {other:?} granted");
    }
}

/// The grants of the inputs a config may name (evidence bucket, config object, secret and its
/// key) are the same in both templates: the CloudFormation policies, evaluated over the example
/// root module's values, give exactly the statements `infra/terraform/tests/` expects of the
/// module's policy; each policy exists only when its parameter is set; a secret ARN is granted
/// as given, a name (an `rds!` one) with the suffix Secrets Manager appends.
#[test]
fn input_grants_agree_across_templates() {
    let doc = cfn_doc_of(CFN_PROBER);
    let mut params: BTreeMap<&str, Value> = [
        ("AWS::Partition", "aws"),
        ("AWS::Region", "eu-west-1"),
        ("AWS::AccountId", "123456789012"),
        ("EvidenceBucket", "readyprobe-evidence"),
        ("EvidencePrefix", "readyprobe/evidence/"),
        (
            "ConfigS3Uri",
            "s3://readyprobe-config/platform/readyprobe.toml",
        ),
        (
            "ProbeSecret",
            "rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789",
        ),
        ("ProbeSecretJsonKey", "password"),
        (
            "ProbeSecretKmsKeyArn",
            "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, Value::from(v)))
    .collect();
    let statements = |params: &BTreeMap<&str, Value>| -> Vec<Value> {
        let mut out = Vec::new();
        for id in [
            "EvidencePolicy",
            "ConfigObjectPolicy",
            "ProbeSecretPolicy",
            "ProbeSecretKeyPolicy",
        ] {
            let r = &doc["Resources"][id];
            assert_eq!(
                r["Properties"]["Roles"],
                serde_json::json!([{"Ref": "TaskRole"}])
            );
            let cond = r["Condition"].as_str().expect("a conditional policy");
            if cfn_eval(&doc, &doc["Conditions"][cond], params) == Value::Bool(true) {
                let st = &r["Properties"]["PolicyDocument"]["Statement"];
                out.extend(
                    cfn_eval_deep(&doc, st, params)
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                );
            }
        }
        out
    };
    let want = serde_json::json!([
        {"Effect": "Allow", "Action": "s3:PutObject",
         "Resource": "arn:aws:s3:::readyprobe-evidence/readyprobe/evidence/*"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::readyprobe-evidence",
         "Condition": {"StringLike": {"s3:prefix": "readyprobe/evidence/*"}}},
        {"Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::readyprobe-config/platform/readyprobe.toml"},
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
         "Resource": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789-??????"},
        {"Effect": "Allow", "Action": "kms:Decrypt",
         "Resource": "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
         "Condition": {"StringEquals": {"kms:ViaService": "secretsmanager.eu-west-1.amazonaws.com"}}},
    ]);
    assert_eq!(Value::Array(statements(&params)), want);

    // The Terraform module's expectations are the same statements.
    let tftest = std::fs::read_to_string(repo_file("infra/terraform/tests/example.tftest.hcl"))
        .expect("the Terraform tests");
    for grant in [
        "arn:aws:s3:::readyprobe-evidence/readyprobe/evidence/*",
        "\"s3:prefix\" = \"readyprobe/evidence/*\"",
        "arn:aws:s3:::readyprobe-config/platform/readyprobe.toml",
        "secret:rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789-??????",
        "\"kms:ViaService\" = \"secretsmanager.eu-west-1.amazonaws.com\"",
    ] {
        assert!(
            tftest.contains(grant),
            "infra/terraform/tests lacks {grant}"
        );
    }

    // An ARN is granted as given.
    let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf";
    params.insert("ProbeSecret", Value::from(arn));
    assert!(statements(&params).iter().any(|s| s["Resource"] == arn));
    // Nothing set, nothing granted.
    for k in [
        "EvidenceBucket",
        "ConfigS3Uri",
        "ProbeSecret",
        "ProbeSecretKmsKeyArn",
    ] {
        params.insert(k, Value::from(""));
    }
    assert_eq!(statements(&params), Vec::<Value>::new());
}

/// Both prober templates run the same container: the health check in exec form, the heartbeat
/// file on the writable volume, no secret injected by ECS, the chosen architecture, and the
/// circuit breaker.
#[test]
fn prober_containers_agree_across_templates() {
    let doc = cfn_doc_of(CFN_PROBER);
    let slot = &doc["Resources"]["Fn::ForEach::Slot"][2];
    let task = &slot["TaskDefinition&{SubnetId}"]["Properties"];
    let c = &task["ContainerDefinitions"][0];
    assert_eq!(
        c["HealthCheck"]["Command"],
        serde_json::json!(["CMD", "/usr/local/bin/readyprobe", "health"])
    );
    assert!(
        c["Environment"]
            .as_array()
            .expect("Environment")
            .contains(&serde_json::json!(
                {"Name": "READYPROBE_HEARTBEAT", "Value": "/var/lib/readyprobe/heartbeat"}
            ))
    );
    assert!(c.get("Secrets").is_none(), "ECS injects no secret");
    assert_eq!(
        task["RuntimePlatform"]["CpuArchitecture"],
        serde_json::json!({"Ref": "Architecture"})
    );
    let arch = &doc["Parameters"]["Architecture"];
    assert_eq!(
        arch["AllowedValues"],
        serde_json::json!(["X86_64", "ARM64"])
    );

    let blocks = tf_blocks();
    let v = tf_var(&blocks, "architecture");
    assert_eq!(v.allowed, ["X86_64", "ARM64"]);
    assert_eq!(v.default.as_deref(), arch["Default"].as_str());
    let task = tf_block(&blocks, "resource", &["aws_ecs_task_definition", "prober"]);
    let container = tf_text(attr(task, "container_definitions").expect("containers"));
    for want in [
        "[\"CMD\", \"/usr/local/bin/readyprobe\", \"health\"]",
        "READYPROBE_HEARTBEAT",
    ] {
        assert!(container.contains(want), "Terraform container lacks {want}");
    }
    assert!(!container.contains("secrets"), "ECS injects no secret");
    assert_eq!(
        tf_text(tf_local(&blocks, "heartbeat_path")),
        "/var/lib/readyprobe/heartbeat"
    );
}

/// `publish.metrics = "control"` must still feed every alarm the templates create: each watches
/// a metric of the control profile.
#[test]
fn template_alarms_watch_only_control_profile_metrics() {
    for t in [cloudformation(), terraform()] {
        assert!(!t.alarms.is_empty(), "{}", t.file);
        for a in &t.alarms {
            let m = metric_of(a).unwrap_or_else(|e| panic!("{}: {e}", t.file));
            assert!(
                readyprobe::contract::MetricsProfile::Control.sends(m.name),
                "{}: {} watches {}, which publish.metrics = \"control\" does not send",
                t.file,
                a.id,
                m.name
            );
        }
    }
}
