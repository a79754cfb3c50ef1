//! The templates for a hosted zone in another account than the prober: the publish role
//! (`infra/cloudformation/readyprobe-publish-role.yaml`, `infra/terraform/modules/publish-role`)
//! trusts the probers' task roles only with the external id, may publish only into the config's
//! namespaces, and may read exactly what `check --aws` and `drill report --alarms` call, nothing
//! that writes; the prober's task role may assume the roles it is given and no other; the
//! per-service Terraform module takes the root module's variables unchanged. Then the role
//! template deployed by the emulator's CloudFormation and assumed with the external id.

use crate::infra_contract::{
    CFN_PROBER, CFN_ROLE, TF_ROLE, TF_SERVICE, attr, cfn_doc_of, cfn_eval, cfn_eval_deep, labels,
    repo_file, tf_attr, tf_block, tf_blocks_of, tf_list, tf_resources, tf_text,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The SDK operations the readers call, as IAM actions. A read the code adds must be added here
/// and to both role templates, or [`calls_of_the_readers`] fails.
const READ_ACTIONS: &[(&str, &str)] = &[
    ("describe_alarms", "cloudwatch:DescribeAlarms"),
    (
        "describe_alarms_for_metric",
        "cloudwatch:DescribeAlarmsForMetric",
    ),
    ("describe_alarm_history", "cloudwatch:DescribeAlarmHistory"),
    ("get_metric_statistics", "cloudwatch:GetMetricStatistics"),
    ("list_health_checks", "route53:ListHealthChecks"),
    ("list_hosted_zones_by_name", "route53:ListHostedZonesByName"),
    (
        "list_resource_record_sets",
        "route53:ListResourceRecordSets",
    ),
];

/// The files whose AWS calls go through the publish role: `check --aws` and `drill report
/// --alarms`.
fn reader_files() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(repo_file("src/aws_check"))
        .expect("src/aws_check")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.push(repo_file("src/report/alarms.rs"));
    files
}

/// The IAM action of every `.describe_…()`, `.list_…()` and `.get_…()` call in the readers.
fn calls_of_the_readers() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for file in reader_files() {
        let text = std::fs::read_to_string(&file).expect("a reader");
        for (i, _) in text.match_indices('.') {
            let rest = &text[i + 1..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            let is_read = ["describe_", "list_", "get_"]
                .iter()
                .any(|p| name.starts_with(p));
            if !is_read || !rest[name.len()..].starts_with("()") {
                continue;
            }
            let action = READ_ACTIONS
                .iter()
                .find(|(op, _)| *op == name)
                .map(|(_, a)| a.to_string())
                .unwrap_or_else(|| {
                    panic!(
                        "{}: .{name}() is not in READ_ACTIONS: add its IAM action there and to the publish role",
                        file.display()
                    )
                });
            out.insert(action);
        }
    }
    out
}

/// The CloudFormation role's inline policies by name.
fn cfn_policies(doc: &Value) -> BTreeMap<String, Value> {
    doc["Resources"]["PublishRole"]["Properties"]["Policies"]
        .as_array()
        .expect("Policies")
        .iter()
        .map(|p| {
            (
                p["PolicyName"].as_str().expect("a name").to_string(),
                p["PolicyDocument"]["Statement"].clone(),
            )
        })
        .collect()
}

/// The statements of Terraform policy document `name` of the role module.
fn tf_statements(blocks: &[hcl::Block], name: &str) -> Vec<hcl::Body> {
    tf_block(blocks, "data", &["aws_iam_policy_document", name])
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .map(|b| b.body().clone())
        .collect()
}

/// `(test, variable, values)` of each condition of a Terraform statement.
fn tf_conditions(statement: &hcl::Body) -> Vec<(String, String, String)> {
    statement
        .blocks()
        .filter(|b| b.identifier() == "condition")
        .map(|c| {
            let b = c.body();
            let values = match attr(b, "values") {
                Some(hcl::Expression::Array(_)) => format!("[{}]", tf_list(b, "values").join(", ")),
                _ => tf_attr(b, "values"),
            };
            (tf_attr(b, "test"), tf_attr(b, "variable"), values)
        })
        .collect()
}

#[test]
fn publish_role_reads_what_the_readers_call_and_only_reads() {
    let called = calls_of_the_readers();
    assert!(
        called.len() >= 5,
        "too few calls found, the scan is broken: {called:?}"
    );
    for action in &called {
        let op = action.split(':').nth(1).expect("service:Operation");
        assert!(
            ["Describe", "List", "Get"]
                .iter()
                .any(|p| op.starts_with(p)),
            "{action} is not a read"
        );
    }

    let doc = cfn_doc_of(CFN_ROLE);
    let policies = cfn_policies(&doc);
    assert_eq!(
        policies.keys().collect::<Vec<_>>(),
        ["publish", "read"],
        "{CFN_ROLE}: the role has the publish and the read policy, nothing else"
    );
    let role = &doc["Resources"]["PublishRole"]["Properties"];
    assert!(role.get("ManagedPolicyArns").is_none(), "no managed policy");
    let read = policies["read"].as_array().expect("statements");
    let [st] = read.as_slice() else {
        panic!("one read statement: {read:?}")
    };
    assert_eq!(
        (&st["Effect"], &st["Resource"]),
        (&json!("Allow"), &json!("*"))
    );
    let granted: BTreeSet<String> = st["Action"]
        .as_array()
        .expect("a list of actions")
        .iter()
        .map(|a| a.as_str().expect("an action").to_string())
        .collect();
    assert_eq!(granted, called, "{CFN_ROLE}: reads granted != reads called");

    let blocks = tf_blocks_of(TF_ROLE);
    let policies: Vec<String> = tf_resources(&blocks, "aws_iam_role_policy")
        .into_iter()
        .map(|(_, b)| tf_attr(b, "policy"))
        .collect();
    assert_eq!(
        policies,
        [
            "data.aws_iam_policy_document.publish.json",
            "data.aws_iam_policy_document.read.json"
        ]
    );
    assert!(tf_resources(&blocks, "aws_iam_role_policy_attachment").is_empty());
    let read = tf_statements(&blocks, "read");
    let [st] = read.as_slice() else {
        panic!("one read statement")
    };
    assert_eq!(tf_list(st, "resources"), ["*"]);
    assert!(tf_conditions(st).is_empty() && tf_attr(st, "effect").is_empty());
    let granted: BTreeSet<String> = tf_list(st, "actions").into_iter().collect();
    assert_eq!(granted, called, "{TF_ROLE}: reads granted != reads called");
}

#[test]
fn publish_role_publishes_only_into_the_namespaces() {
    let doc = cfn_doc_of(CFN_ROLE);
    let publish = cfn_policies(&doc)["publish"].clone();
    let [st] = publish.as_array().expect("statements").as_slice() else {
        panic!("one publish statement: {publish}")
    };
    assert_eq!(
        (&st["Effect"], &st["Action"], &st["Resource"]),
        (
            &json!("Allow"),
            &json!("cloudwatch:PutMetricData"),
            &json!("*")
        )
    );
    let allowed = |extra: &[&str]| {
        let extra = if extra.is_empty() {
            vec![""]
        } else {
            extra.to_vec()
        };
        let params = BTreeMap::from([
            ("Namespace", Value::from("Readyprobe")),
            ("ExtraNamespaces", Value::from(extra)),
        ]);
        cfn_eval_deep(&doc, &st["Condition"], &params)
    };
    assert_eq!(
        allowed(&[]),
        json!({"StringEquals": {"cloudwatch:namespace": ["Readyprobe"]}})
    );
    assert_eq!(
        allowed(&["Orders"]),
        json!({"StringEquals": {"cloudwatch:namespace": ["Readyprobe", "Orders"]}})
    );

    let blocks = tf_blocks_of(TF_ROLE);
    let publish = tf_statements(&blocks, "publish");
    let [st] = publish.as_slice() else {
        panic!("one publish statement")
    };
    assert_eq!(tf_list(st, "actions"), ["cloudwatch:PutMetricData"]);
    assert_eq!(
        tf_conditions(st),
        [(
            "StringEquals".to_string(),
            "cloudwatch:namespace".to_string(),
            "distinct(var.namespaces)".to_string()
        )]
    );
}

#[test]
fn publish_role_trusts_only_the_probers_with_the_external_id() {
    let doc = cfn_doc_of(CFN_ROLE);
    let trust = &doc["Resources"]["PublishRole"]["Properties"]["AssumeRolePolicyDocument"];
    assert_eq!(
        trust["Statement"],
        json!([{
            "Effect": "Allow",
            "Principal": {"AWS": {"Ref": "TrustedRoleArns"}},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": {"Ref": "ExternalId"}}},
        }])
    );
    // Required, and the config's rule for external_id (shared with AWS's ExternalId).
    let p = &doc["Parameters"]["ExternalId"];
    assert!(p.get("Default").is_none(), "ExternalId has a default");
    assert_eq!(p["AllowedPattern"], "^[A-Za-z0-9+=,.@:/-]{2,1224}$");
    assert!(
        doc["Parameters"]["TrustedRoleArns"]
            .get("Default")
            .is_none()
    );

    let blocks = tf_blocks_of(TF_ROLE);
    let trust = tf_statements(&blocks, "trust");
    let [st] = trust.as_slice() else {
        panic!("one trust statement")
    };
    assert_eq!(tf_list(st, "actions"), ["sts:AssumeRole"]);
    let principals: Vec<(String, String)> = st
        .blocks()
        .filter(|b| b.identifier() == "principals")
        .map(|p| (tf_attr(p.body(), "type"), tf_attr(p.body(), "identifiers")))
        .collect();
    assert_eq!(
        principals,
        [("AWS".to_string(), "var.trusted_role_arns".to_string())]
    );
    assert_eq!(
        tf_conditions(st),
        [(
            "StringEquals".to_string(),
            "sts:ExternalId".to_string(),
            "[var.external_id]".to_string()
        )]
    );
    let role = tf_block(&blocks, "resource", &["aws_iam_role", "publish"]);
    assert_eq!(
        tf_attr(role, "assume_role_policy"),
        "data.aws_iam_policy_document.trust.json"
    );
    for name in ["external_id", "trusted_role_arns"] {
        let v = tf_block(&blocks, "variable", &[name]);
        assert!(attr(v, "default").is_none(), "{name} has a default");
    }
}

/// The prober's task role may `sts:AssumeRole` exactly the roles named, and only when some are.
#[test]
fn prober_may_assume_only_the_publish_roles_it_names() {
    let doc = cfn_doc_of(CFN_PROBER);
    let policy = &doc["Resources"]["PublishRolesPolicy"];
    assert_eq!(policy["Properties"]["Roles"], json!([{"Ref": "TaskRole"}]));
    let cond = policy["Condition"].as_str().expect("a conditional policy");
    let arn = "arn:aws:iam::111122223333:role/readyprobe-publish";
    for (given, applies) in [(vec![""], false), (vec![arn], true)] {
        let params = BTreeMap::from([("PublishRoleArns", Value::from(given.clone()))]);
        assert_eq!(
            cfn_eval(&doc, &doc["Conditions"][cond], &params),
            Value::Bool(applies),
            "{given:?}"
        );
        if applies {
            let st = cfn_eval_deep(
                &doc,
                &policy["Properties"]["PolicyDocument"]["Statement"],
                &params,
            );
            assert_eq!(
                st,
                json!([{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": [arn]}])
            );
        }
    }
    // Nowhere else: the task role's own policy grants no sts action.
    let own = doc["Resources"]["TaskRole"]["Properties"]["Policies"].to_string();
    assert!(!own.contains("sts:"), "the task role's own policy: {own}");

    let blocks = crate::infra_contract::tf_blocks_of("infra/terraform");
    let task = tf_block(&blocks, "data", &["aws_iam_policy_document", "task"]);
    let dynamic: Vec<&hcl::Block> = task
        .blocks()
        .filter(|b| b.identifier() == "dynamic" && labels(b) == ["statement"])
        .filter(|b| tf_attr(b.body(), "for_each").contains("var.publish_role_arns"))
        .collect();
    let [d] = dynamic.as_slice() else {
        panic!("one statement over var.publish_role_arns")
    };
    let content = d
        .body()
        .blocks()
        .find(|b| b.identifier() == "content")
        .expect("content");
    assert_eq!(tf_list(content.body(), "actions"), ["sts:AssumeRole"]);
    assert_eq!(tf_attr(content.body(), "resources"), "statement.value");
    let stated = hcl::format::to_string(task).expect("format");
    assert_eq!(stated.matches("sts:").count(), 1, "{stated}");
}

/// The root module passes its per-service variables to `modules/service` unchanged, so each
/// has one definition: the same type, default and validations in both.
#[test]
fn service_module_variables_are_the_roots() {
    let root = tf_blocks_of("infra/terraform");
    let service = tf_blocks_of(TF_SERVICE);
    let vars: Vec<&hcl::Block> = service
        .iter()
        .filter(|b| b.identifier() == "variable")
        .collect();
    assert!(vars.len() >= 9, "{TF_SERVICE}: {} variables", vars.len());
    // The two-region variables are the per-service module's own (the root is one region).
    for v in vars
        .into_iter()
        .filter(|v| !["alarms_only", "other_region_alarms"].contains(&labels(v)[0]))
    {
        let name = labels(v)[0];
        let r = tf_block(&root, "variable", &[name]);
        let text = |b: &hcl::Body| hcl::format::to_string(b).expect("format");
        assert_eq!(
            text(r),
            text(v.body()),
            "variable {name} differs between infra/terraform and {TF_SERVICE}"
        );
        let call = tf_block(&root, "module", &["service"]);
        assert_eq!(
            tf_text(attr(call, name).unwrap_or_else(|| panic!("module.service lacks {name}"))),
            format!("var.{name}")
        );
    }
}

/// The role template as shipped, deployed by LocalStack's CloudFormation: its `RoleArn` output is
/// the role named `RoleName` (the ARN the config's `role_arn` predicts), a prober assumes it with
/// the external id and session name `readyprobe-<prober_id>`, is then that role's session, and
/// publishes into the namespace with its credentials. Not exercised: a refused AssumeRole (wrong
/// external id, untrusted caller): LocalStack does not enforce trust policies, so the trust is
/// checked statically above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publish_role_deploys_and_is_assumed_with_the_external_id() {
    use crate::support::cloudwatch;
    let Some(cw) = cloudwatch::cloudwatch_or_skip().await else {
        return;
    };
    let conf = cloudwatch::sdk_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&conf);
    if let Err(e) = cfn.list_stacks().send().await {
        crate::support::skip_or_panic(&format!(
            "LocalStack's CloudFormation does not answer ({e:?}); LOCALSTACK_SERVICES in .ci/localstack.sh"
        ));
        return;
    }
    let ns = cloudwatch::unique_namespace("cross_account");
    let uniq = ns.rsplit('/').next().expect("a namespace").to_string();
    let role_name = format!("readyprobe-publish-{uniq}");
    let external_id = "rp:orders/2026-12=ok";
    let sts = aws_sdk_sts::Client::new(&conf);
    let me = sts
        .get_caller_identity()
        .send()
        .await
        .expect("GetCallerIdentity");
    let account = me.account().expect("an account").to_string();
    let params: BTreeMap<String, String> = [
        (
            "TrustedRoleArns",
            format!("arn:aws:iam::{account}:role/readyprobe-task-it"),
        ),
        ("ExternalId", external_id.to_string()),
        ("RoleName", role_name.clone()),
        ("Namespace", ns.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let stack = format!("readyprobe-role-{uniq}");
    let role_arn = deploy_role(&cfn, &stack, params).await;
    assert_eq!(role_arn, format!("arn:aws:iam::{account}:role/{role_name}"));

    let session = "readyprobe-rehearsal-1";
    let assumed = sts
        .assume_role()
        .role_arn(&role_arn)
        .role_session_name(session)
        .external_id(external_id)
        .send()
        .await
        .expect("AssumeRole with the external id");
    let c = assumed.credentials().expect("credentials");
    let creds = aws_credential_types::Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_string()),
        None,
        "publish-role",
    );
    let as_role = aws_sdk_sts::Client::from_conf(
        aws_sdk_sts::config::Builder::from(&conf)
            .credentials_provider(creds.clone())
            .build(),
    );
    let who = as_role
        .get_caller_identity()
        .send()
        .await
        .expect("GetCallerIdentity as the role");
    assert_eq!(
        who.arn(),
        Some(format!("arn:aws:sts::{account}:assumed-role/{role_name}/{session}").as_str())
    );
    let publisher = aws_sdk_cloudwatch::Client::from_conf(
        aws_sdk_cloudwatch::config::Builder::from(&conf)
            .credentials_provider(creds)
            .build(),
    );
    let datum = aws_sdk_cloudwatch::types::MetricDatum::builder()
        .metric_name("Readiness")
        .dimensions(dim("Service", "orders-db"))
        .dimensions(dim("Branch", "primary"))
        .unit(aws_sdk_cloudwatch::types::StandardUnit::None)
        .value(1.0)
        .build();
    publisher
        .put_metric_data()
        .namespace(&ns)
        .metric_data(datum)
        .send()
        .await
        .expect("PutMetricData as the role");
    let q = cloudwatch::MetricQuery::new(&ns, "Readiness")
        .dims(&[("Service", "orders-db"), ("Branch", "primary")]);
    let values = q
        .poll(&cw, std::time::Duration::from_secs(30), |v| !v.is_empty())
        .await;
    assert!(!values.is_empty(), "the role's datum did not arrive");
    let _ = cfn.delete_stack().stack_name(&stack).send().await;
}

/// Deploys the role template as stack `stack` and returns its `RoleArn` output.
async fn deploy_role(
    cfn: &aws_sdk_cloudformation::Client,
    stack: &str,
    params: BTreeMap<String, String>,
) -> String {
    let body = std::fs::read_to_string(repo_file(CFN_ROLE)).expect("the role template");
    crate::rehearsed_deploy::deploy(cfn, stack, body, params).await;
    let out = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .expect("DescribeStacks");
    out.stacks()[0]
        .outputs()
        .iter()
        .find(|o| o.output_key() == Some("RoleArn"))
        .and_then(|o| o.output_value())
        .expect("a RoleArn output")
        .to_string()
}

fn dim(name: &str, value: &str) -> aws_sdk_cloudwatch::types::Dimension {
    aws_sdk_cloudwatch::types::Dimension::builder()
        .name(name)
        .value(value)
        .build()
}
