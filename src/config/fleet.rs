//! The `[[service]]` form: several services in one config. Shared settings are read once; each
//! service's `probe` and `readiness` tables are merged key by key over the top-level ones
//! (nested tables recursively; a service naming another `kind` drops the default's kind table),
//! then validated by the same sections as the single-service form, with keys named
//! `service[i].…`.

use super::issues::{Issues, Scope};
use super::raw::{RawFleetConfig, RawFleetService, RawProbe, RawReadiness, RawService};
use super::{
    Config, Publish, RawShared, ServiceConfig, probe, publish, readiness, service, shared_sections,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use toml::{Table, Value};

/// `{ probe = … }`, so serde's key paths start with `probe.` as in a file.
#[derive(Deserialize)]
struct ProbeOnly {
    probe: RawProbe,
}

/// `{ readiness = … }`.
#[derive(Deserialize)]
struct ReadinessOnly {
    readiness: RawReadiness,
}

/// `over` merged into `base` key by key; tables merge recursively, anything else replaces.
fn merge(base: &mut Table, over: Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// A service's probe table over the default: a different `kind` drops the default's kind table.
fn merged_probe(default: Option<&Table>, own: Option<Table>) -> Table {
    let mut t = default.cloned().unwrap_or_default();
    if let Some(own) = own {
        if let (Some(Value::String(old)), Some(new)) = (t.get("kind"), own.get("kind"))
            && new.as_str() != Some(old.as_str())
        {
            let old = old.clone();
            t.remove(&old);
        }
        merge(&mut t, own);
    }
    t
}

/// `table` read as `T` under the top-level key `name`; a serde error is recorded in scope.
fn read<T: for<'de> Deserialize<'de>>(
    name: &str,
    table: Table,
    issues: &mut Issues<'_>,
) -> Option<T> {
    let mut wrapper = Table::new();
    wrapper.insert(name.into(), Value::Table(table));
    match serde_path_to_error::deserialize(Value::Table(wrapper)) {
        Ok(t) => Some(t),
        Err(e) => {
            let i = issues.serde_issue(&e);
            issues.error(i.key, i.message);
            None
        }
    }
}

/// The checked stage of the `[[service]]` form. Pure: `host` is the default prober id.
pub(super) fn validate(
    path: &Path,
    raw: RawFleetConfig,
    host: Option<String>,
    issues: &mut Issues<'_>,
) -> Option<Config> {
    if raw.branch.is_some() {
        issues.error(
            "branch",
            "with [[service]] entries, each service lists its own branches as [[service.branch]]",
        );
    }
    if raw.service.is_empty() {
        issues.error("service", "at least one [[service]] is required");
    }
    let shared = RawShared {
        prober_id: raw.prober_id,
        state_dir: raw.state_dir,
        publish: raw.publish,
        evidence: raw.evidence,
        state: raw.state,
        dns: raw.dns,
        route53: raw.route53,
        stable_name_probe: raw.stable_name_probe,
        reload: raw.reload,
        serve: raw.serve,
    };
    let config = shared_sections(path, shared, host, issues);
    let publish = config.as_ref().map(|c| c.publish.clone());
    let mut names = BTreeSet::new();
    let mut documents = BTreeSet::new();
    let mut services = Vec::new();
    for (i, s) in raw.service.into_iter().enumerate() {
        let key = format!("service[{i}]");
        let name = s.name.trim();
        let document = format!("control-{}.json", crate::config::safe(name));
        if !names.insert(name.to_string()) {
            issues.error(
                format!("{key}.name"),
                format!("duplicate service name {name:?}"),
            );
        } else if !documents.insert(document.clone()) {
            issues.error(
                format!("{key}.name"),
                format!("{name:?} shares its control document {document} with an earlier service (characters other than A–Z a–z 0–9 - _ . become _): rename one"),
            );
        }
        let defaults = (raw.probe.as_ref(), raw.readiness.as_ref());
        services.push(one(path, key, s, defaults, publish.as_ref(), issues));
    }
    let mut config = config?;
    config.services = services.into_iter().collect::<Option<_>>()?;
    check_shared_canary_rows(&config.services, issues);
    check_target_names(&config.services, issues);
    Some(config)
}

/// A target name means one target in the whole config: the run keeps a sink and a client per
/// name, and the evidence names targets by it. Two services naming different settings by one
/// name is an error at the second.
fn check_target_names(services: &[ServiceConfig], issues: &mut Issues<'_>) {
    let mut seen: BTreeMap<&str, (usize, &super::PublishTarget)> = BTreeMap::new();
    for (i, s) in services.iter().enumerate() {
        for t in &s.publish_targets {
            match seen.get(t.name.as_str()) {
                Some((first, was)) if *was != t => issues.error(
                    format!("service[{i}].publish"),
                    format!(
                        "target {:?} differs from the target of that name in service[{first}] (region, endpoint_url or role): a name means one target in the config; give one of them another name",
                        t.name
                    ),
                ),
                Some(_) => {}
                None => {
                    seen.insert(&t.name, (i, t));
                }
            }
        }
    }
}

/// The canary row (`mysql`, `postgres`) is keyed by (prober_id, branch): two services of one
/// kind with a branch of the same name and the same canary table overwrite each other's row on a
/// server both reach, and each then reads the other's marker (`verify_mismatch`). On one
/// endpoint and port that is certain: an error naming both services. On different endpoints it
/// happens only where they lead to one server: one warning for all.
fn check_shared_canary_rows(services: &[ServiceConfig], issues: &mut Issues<'_>) {
    // (kind, the canary table with its database, branch)
    type Row<'a> = (&'static str, String, &'a str);
    let mut rows: BTreeMap<Row<'_>, &str> = BTreeMap::new();
    let mut servers: BTreeMap<(Row<'_>, String, u16), (usize, &str)> = BTreeMap::new();
    let mut shared = Vec::new();
    for (i, s) in services.iter().enumerate() {
        let (kind, table) = match &s.probe.kind {
            probe::ProbeKind::Mysql(m) => ("mysql", format!("`{}`.`{}`", m.database, m.table)),
            probe::ProbeKind::Postgres(p) => (
                "postgres",
                format!("{}.{}.{}", p.database, p.schema, p.table),
            ),
            _ => continue,
        };
        let name = s.service.name.as_str();
        for (k, b) in s.branches.iter().enumerate() {
            let row = (kind, table.clone(), b.name.as_str());
            let server = (row.clone(), service::normalise_name(&b.endpoint), b.port);
            if let Some((first, first_name)) = servers.get(&server) {
                issues.error(
                    format!("service[{i}].branch[{k}].name"),
                    format!(
                        "service[{i}] {name:?} and service[{first}] {first_name:?} both probe branch {:?} on {}:{} with the canary table {}: they would write each other's canary row (verify_mismatch); give one of them its own probe.{kind}.table",
                        row.2, server.1, server.2, row.1
                    ),
                );
                continue;
            }
            servers.insert(server, (i, name));
            match rows.get(&row) {
                Some(first) => shared.push((*first, name, row)),
                None => {
                    rows.insert(row, name);
                }
            }
        }
    }
    if let Some((first, other, (kind, table, branch))) = shared.first() {
        issues.warn(format!(
            "{} branches share a {kind} canary row key with an earlier service, e.g. {first:?} and {other:?}, branch {branch:?} in {table}: where two such services reach one server, each reads the other's marker (verify_mismatch); give each service on a shared server its own probe.{kind}.table",
            shared.len()
        ));
    }
}

/// Validate one `[[service]]` with the defaults merged in.
fn one(
    path: &Path,
    key: String,
    s: RawFleetService,
    (probe_default, readiness_default): (Option<&Table>, Option<&Table>),
    publish: Option<&Publish>,
    issues: &mut Issues<'_>,
) -> Option<ServiceConfig> {
    let base = super::source::base_dir(path);
    let raw_service = RawService {
        name: s.name,
        stable_name: s.stable_name,
        publish: None,
    };
    let service = service::section(raw_service, &key, issues)?;
    let publish_targets = publish::targets(s.publish, &format!("{key}.publish"), publish, issues);
    if let Some(ns) = &s.namespace
        && !publish::namespace_ok(ns)
    {
        issues.error(
            format!("{key}.namespace"),
            "CloudWatch namespaces are 1–255 ASCII characters, must not start with \"AWS/\" or ':'",
        );
    }
    issues.scope = Some(Scope {
        prefix: key.clone(),
        name: service.name.clone(),
    });
    let raw_probe = read::<ProbeOnly>("probe", merged_probe(probe_default, s.probe), issues);
    let mut r = readiness_default.cloned().unwrap_or_default();
    merge(&mut r, s.readiness.unwrap_or_default());
    let raw_readiness = read::<ReadinessOnly>("readiness", r, issues);
    let (probe, interval) = match raw_probe {
        Some(p) => {
            let interval = probe::interval(&p.probe);
            let spread = p.probe.jitter.is_none();
            let mut probe = probe::section(p.probe, base, issues);
            // Many branches in one process: their first attempts spread over the interval.
            if let Some(c) = probe.as_mut().filter(|_| spread) {
                c.jitter = c.interval * 9 / 10;
            }
            (probe, interval)
        }
        None => (None, None),
    };
    let policy = raw_readiness.and_then(|r| readiness::section(&r.readiness, interval, issues));
    if let (Some(p), Some(policy)) = (&probe, &policy) {
        readiness::suspect_fits(policy, (p.interval, p.suspect_interval), issues);
    }
    issues.scope = None;
    let default_port = probe.as_ref().and_then(|p| p.kind.default_port());
    let branches = service::branches(
        s.branch,
        &format!("{key}.branch"),
        &service,
        default_port,
        probe.is_some(),
        issues,
    )?;
    if let Some(p) = &probe {
        issues.scope = Some(Scope {
            prefix: key.clone(),
            name: service.name.clone(),
        });
        service::rds_iam_regions(p, &branches, &format!("{key}.branch"), issues);
        issues.scope = None;
    }
    Some(ServiceConfig {
        namespace: s.namespace.or(publish.map(|p| p.namespace.clone()))?,
        service,
        policy: policy?,
        probe: probe?,
        branches,
        publish_targets: publish_targets?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Issue, ProbeKind, parse};
    use std::path::Path;
    use std::time::Duration;

    const FLEET: &str = r#"
prober_id = "az-a"

[probe]
kind = "mysql"
interval = "2s"
[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "/etc/ssl/rds.pem"
[probe.mysql]
user = "readyprobe"
password = { env = "PW" }

[readiness]
window = "60s"
declare_unready = { success_rate_below = 95.0, for = "3m" }

[[service]]
name = "orders-db"
stable_name = "mysql.orders.internal.example"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"

[[service]]
name = "payments-db"
stable_name = "mysql.payments.internal.example"
namespace = "Payments"
probe = { interval = "5s", mysql = { database = "canary" } }
readiness = { declare_unready = { for = "1m" } }
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.payments.internal.example"

[[service]]
name = "orders-api"
stable_name = "api.orders.internal.example"
[service.probe]
kind = "http"
[service.probe.http]
path = "/health"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "api-primary.orders.internal.example"
"#;

    fn issues(text: &str) -> Vec<Issue> {
        match parse(Path::new("fleet.toml"), text) {
            Ok(_) => vec![],
            Err(e) => e.issues,
        }
    }

    fn line_of(text: &str, needle: &str) -> Option<usize> {
        let lines: Vec<&str> = text.lines().collect();
        lines
            .iter()
            .rposition(|l| l.contains(needle))
            .map(|i| i + 1)
    }

    /// Two mysql services with a branch of the same name and the same canary table get one
    /// warning; a table of their own clears it.
    #[test]
    fn a_shared_canary_row_key_is_warned_once() {
        let two = FLEET.replace(r#"mysql = { database = "canary" }"#, "");
        let c = parse(Path::new("fleet.toml"), &two).unwrap_or_else(|e| panic!("{e}"));
        let w: Vec<_> = c
            .warnings
            .iter()
            .filter(|w| w.contains("canary row"))
            .collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(r#""orders-db" and "payments-db", branch "primary""#),
            "{w:?}"
        );
        let c = parse(Path::new("fleet.toml"), FLEET).unwrap_or_else(|e| panic!("{e}"));
        assert!(!c.warnings.iter().any(|w| w.contains("canary row")));
    }

    /// Two mysql services whose branch of one name reaches the same server (endpoint and port)
    /// with the same canary table would write each other's canary row: an error on the later
    /// branch's name naming both services. A table of its own clears it.
    #[test]
    fn a_canary_row_shared_on_one_server_is_an_error_naming_both_services() {
        let one_server = FLEET
            .replace(r#"mysql = { database = "canary" }"#, "")
            .replace(
                "mysql-primary.payments.internal.example",
                "MySQL-Primary.orders.internal.example.",
            );
        let got = issues(&one_server);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "service[1].branch[0].name");
        // The branch's name, two lines above its endpoint.
        let endpoint = line_of(&one_server, "MySQL-Primary").unwrap();
        assert_eq!(got[0].line, Some(endpoint - 2));
        assert!(
            got[0].message.contains(r#"service[0] "orders-db""#)
                && got[0].message.contains(r#"service[1] "payments-db""#)
                && got[0].message.contains("`readyprobe`.`canary`"),
            "{got:?}"
        );
        let own_table = one_server.replace(
            r#"probe = { interval = "5s", "#,
            r#"probe = { interval = "5s", mysql = { table = "canary_payments" }, "#,
        );
        assert!(issues(&own_table).is_empty(), "{:?}", issues(&own_table));
    }

    /// An `rds_iam` password without a region in the shared `[probe]`: each branch naming no
    /// region of its own is an error on the password's line naming the service and the branch.
    #[test]
    fn a_fleet_branch_without_a_region_for_its_rds_iam_token_is_named() {
        let text = FLEET
            .replace(
                r#"password = { env = "PW" }"#,
                "password = { rds_iam = {} }",
            )
            .replace(
                "endpoint = \"mysql-secondary.orders.internal.example\"",
                "endpoint = \"mysql-secondary.orders.internal.example\"\nregion = \"us-east-1\"",
            );
        let got = issues(&text);
        let password = line_of(&text, "rds_iam");
        let branch = |needle| line_of(&text, needle).map(|l| l - 3);
        let want = [
            ("service[0]", "orders-db", branch("mysql-primary.orders")),
            (
                "service[1]",
                "payments-db",
                branch("mysql-primary.payments"),
            ),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (issue, (service, name, line)) in got.iter().zip(want) {
            assert_eq!(
                (issue.key.as_str(), issue.line),
                ("probe.mysql.password", password)
            );
            let branch = format!("{service}.branch[0]");
            assert!(
                issue.message.contains(&format!(
                    "{branch} (\"primary\", line {}) names none: set rds_iam.region or {branch}.region",
                    line.unwrap()
                )) && issue.message.contains(&format!("in {service} \"{name}\"")),
                "{issue:?}"
            );
        }
        let with_default = text.replace("rds_iam = {}", "rds_iam = { region = \"eu-west-1\" }");
        assert!(issues(&with_default).is_empty());
    }

    /// One finding shared by many services is one warning naming the first three and counting
    /// the rest; the services keep their order.
    #[test]
    fn a_warning_shared_by_many_services_is_one_line() {
        let mut text = "[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 5432\n".to_string();
        for i in 0..6 {
            text.push_str(&format!(
                "[[service]]\nname = \"s{i}\"\nstable_name = \"s{i}.internal.example\"\n[[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p{i}.internal.example\"\n"
            ));
        }
        let c = parse(Path::new("fleet.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let w: Vec<_> = c
            .warnings
            .iter()
            .filter(|w| w.contains("liveness-level"))
            .collect();
        assert_eq!(w.len(), 1, "{:?}", c.warnings);
        assert!(
            w[0].starts_with(
                r#"service[0] "s0", service[1] "s1", service[2] "s2" and 3 more services: "#
            ),
            "{w:?}"
        );
    }

    /// Each service's tables are merged key by key over the defaults; another kind replaces
    /// the default's kind table.
    #[test]
    fn services_merge_their_overrides_over_the_defaults() {
        let c =
            parse(Path::new("/etc/readyprobe/fleet.toml"), FLEET).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = c.services.iter().map(|s| s.service.name.as_str()).collect();
        assert_eq!(names, ["orders-db", "payments-db", "orders-api"]);
        let [orders, payments, api] = &c.services[..] else {
            panic!()
        };
        assert_eq!(orders.probe.interval, Duration::from_secs(2));
        // Without `jitter`, first attempts spread over 90 % of the interval.
        assert_eq!(orders.probe.jitter, Duration::from_millis(1800));
        assert_eq!(orders.namespace, "Readyprobe");
        assert_eq!(payments.probe.interval, Duration::from_secs(5));
        assert_eq!(payments.namespace, "Payments");
        let ProbeKind::Mysql(m) = &payments.probe.kind else {
            panic!("{:?}", payments.probe.kind)
        };
        // Nested tables merge: the user is the default's, the database the service's.
        assert_eq!(
            (m.user.as_str(), m.database.as_str()),
            ("readyprobe", "canary")
        );
        assert!(m.ssl_ca.is_some());
        assert_eq!(
            payments.policy.declare_unready.for_,
            Duration::from_secs(60)
        );
        assert_eq!(payments.policy.declare_unready.threshold_percent, 95.0);
        assert_eq!(orders.policy.declare_unready.for_, Duration::from_secs(180));
        let ProbeKind::Http(h) = &api.probe.kind else {
            panic!("{:?}", api.probe.kind)
        };
        assert_eq!(h.request.path, "/health");
        assert_eq!(api.branches[0].port, 443);
        assert_eq!(c.service(Some("payments-db")).unwrap().branches.len(), 1);
        let e = c.service(None).unwrap_err();
        assert!(e.contains("orders-db, payments-db, orders-api"), "{e}");
        assert!(c.service(Some("nope")).unwrap_err().contains("orders-api"));
    }

    /// Errors name the service by index, with the line where the key is written.
    #[test]
    fn errors_name_the_service_key_and_line() {
        let text = FLEET.replace(
            "endpoint = \"mysql-primary.payments.internal.example\"",
            "endpoint = \"mysql.payments.internal.example\"",
        );
        let got = issues(&text);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "service[1].branch[0].endpoint");
        assert_eq!(got[0].line, line_of(&text, "endpoint = \"mysql.payments"));

        // A service's own bad value is its key; an inherited one stays the top-level key and
        // the message names the service.
        let text = FLEET.replace("interval = \"5s\"", "interval = \"5s\", timeout = \"9s\"");
        let got = issues(&text);
        assert_eq!(got[0].key, "service[1].probe.timeout", "{got:?}");
        assert_eq!(got[0].line, line_of(&text, "timeout = \"9s\""));
        let text = FLEET.replace("interval = \"2s\"", "interval = \"2s\"\ntimeout = \"3s\"");
        let got = issues(&text);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|i| i.key == "probe.timeout"), "{got:?}");
        assert!(
            got[0].message.contains("service[0] \"orders-db\""),
            "{got:?}"
        );
        assert_eq!(got[0].line, line_of(&text, "timeout = \"3s\""));

        let text = FLEET.replace("path = \"/health\"", "path = \"/health\"\npaht = 1");
        let got = issues(&text);
        assert_eq!(got[0].key, "service[2].probe.http.paht", "{got:?}");
        assert_eq!(got[0].line, line_of(&text, "paht"));

        let text = FLEET.replace("name = \"payments-db\"", "name = \"orders-db\"");
        let got = issues(&text);
        assert_eq!(got[0].key, "service[1].name", "{got:?}");
        assert!(got[0].message.contains("duplicate"), "{got:?}");

        let text = FLEET.replace("name = \"payments-db\"", "name = \"orders db\"");
        let text = text.replace("name = \"orders-api\"", "name = \"orders/db\"");
        let got = issues(&text);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "service[2].name", "{got:?}");
        assert!(got[0].message.contains("control-orders_db.json"), "{got:?}");

        let text = FLEET.replace("namespace = \"Payments\"", "namespace = \"AWS/RDS\"");
        assert_eq!(issues(&text)[0].key, "service[1].namespace");

        let text = format!(
            "{FLEET}\n[[branch]]\nname = \"x\"\nrole = \"PRIMARY\"\nendpoint = \"x.example\"\n"
        );
        assert_eq!(issues(&text)[0].key, "branch");
        let text = FLEET.replace("[probe.mysql]\nuser = \"readyprobe\"\n", "[probe.mysql]\n");
        let got = issues(&text);
        assert!(
            got.iter().any(|i| i.key == "service[0].probe.mysql.user"),
            "{got:?}"
        );
    }
}
