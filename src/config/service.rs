//! `[service]` and `[[branch]]`: what is failed over, and the branches probed by their own names.

use super::issues::Issues;
use super::probe::ProbeConfig;
use super::raw::{RawBranch, RawService};
use super::region::region_problem;
use super::secret::SecretRef;
use super::values::Role;
use std::collections::BTreeSet;

/// The longest name a CloudWatch dimension value may carry here, characters. CloudWatch's own
/// limit is 1024, but a name also keys files, the state document and the evidence; 255 is the
/// file-name limit of common Linux file systems.
const MAX_NAME_LEN: usize = 255;
/// The longest service name, characters: it is part of the file store's file names, the longest
/// being `control-<service>.json.tmp.<pid>` (`state::FileStore`; a pid has at most 10 digits),
/// and a file name is at most 255 bytes.
pub(super) const MAX_SERVICE_NAME_LEN: usize =
    MAX_NAME_LEN - "control-".len() - ".json.tmp.".len() - 10;
/// Width of the `prober_id` and `branch` columns of the canary table (probes/mysql-canary.sql).
pub(super) const MAX_CANARY_ID_LEN: usize = 64;

/// The service being failed over.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// Service name, the `Service` metric dimension (e.g. `orders-db`).
    pub name: String,
    /// The failover record name; branch probes never resolve it.
    pub stable_name: String,
}

/// One failover branch.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// Branch name, the `Branch` metric dimension (e.g. `primary`).
    pub name: String,
    /// Route 53 failover role.
    pub role: Role,
    /// The branch-specific endpoint name, resolved on every attempt.
    pub endpoint: String,
    /// Server port.
    pub port: u16,
    /// The AWS region the branch runs in, if named: `check --aws` warns when every alarm its
    /// health check follows is in this region (`alarm_in_branch_region`), and an RDS IAM token
    /// for the branch is signed for it ([`Branch::token_region`]).
    pub region: Option<String>,
}

impl Branch {
    /// The region the branch's RDS IAM token is signed for (a token is valid only in the
    /// database's region): the branch's `region`, else `rds_iam.region` (`default`); `None`
    /// when neither is named, which config refuses ([`rds_iam_regions`]).
    pub fn token_region<'a>(&'a self, default: Option<&'a str>) -> Option<&'a str> {
        self.region.as_deref().or(default)
    }
}

/// With an RDS IAM password, each branch must have a region to sign its token for: its own
/// `region` or `rds_iam.region`. `key` is the branch list's (`branch`).
pub(super) fn rds_iam_regions(
    probe: &ProbeConfig,
    branches: &[Branch],
    key: &str,
    issues: &mut Issues<'_>,
) {
    let Some((_, SecretRef::RdsIam { region: None })) = probe.kind.database_login() else {
        return;
    };
    let password_key = format!("probe.{}.password", probe.kind.name());
    for (i, b) in branches.iter().enumerate() {
        if b.region.is_none() {
            let branch = format!("{key}[{i}]");
            let at = issues
                .line_of_key(&branch)
                .map(|l| format!(", line {l}"))
                .unwrap_or_default();
            issues.error(
                &password_key,
                format!(
                    "rds_iam names no region and {branch} ({:?}{at}) names none: set rds_iam.region or {branch}.region (an RDS IAM token is valid only in the database's region)",
                    b.name
                ),
            );
        }
    }
}

/// A DNS name as compared and resolved: trimmed, without the root dot, lower case.
pub(super) fn normalise_name(s: &str) -> String {
    s.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Check a name that becomes a CloudWatch dimension value (and keys files and documents):
/// 1–`max` characters of printable ASCII. CloudWatch dimension values must be ASCII without
/// control characters; a name that cannot be published would fail every publish.
pub(super) fn check_dimension(key: &str, value: &str, max: usize, issues: &mut Issues<'_>) {
    if value.is_empty() || value.len() > max {
        issues.error(
            key,
            format!(
                "must be 1–{max} characters, it has {} (it is a CloudWatch dimension value and part of file names)",
                value.chars().count()
            ),
        );
    } else if let Some(c) = value.chars().find(|c| !matches!(c, ' '..='~')) {
        issues.error(
            key,
            format!(
                "{value:?} contains {c:?}: CloudWatch dimension values are printable ASCII (no control characters, no non-ASCII letters)"
            ),
        );
    }
}

/// Validate `[service]` (or one `[[service]]`, whose key is `key`, e.g. `service[2]`).
pub(super) fn section(raw: RawService, key: &str, issues: &mut Issues<'_>) -> Option<Service> {
    let service = Service {
        name: raw.name.trim().to_string(),
        stable_name: normalise_name(&raw.stable_name),
    };
    let name_key = format!("{key}.name");
    check_dimension(&name_key, &service.name, MAX_SERVICE_NAME_LEN, issues);
    let stable_key = format!("{key}.stable_name");
    if service.stable_name.is_empty() {
        issues.error(stable_key, "must be the failover record name");
    } else if let Err(why) = check_hostname(&service.stable_name) {
        issues.error(stable_key, why);
    }
    Some(service)
}

/// Validate the `[[branch]]` list (or a service's `[[service.branch]]`, whose key is `key`).
/// `default_port` is the probe kind's (`None` when it has none
/// or the probe table is invalid: then a missing port is not reported again).
pub(super) fn branches(
    raw: Vec<RawBranch>,
    key: &str,
    service: &Service,
    default_port: Option<u16>,
    probe_ok: bool,
    issues: &mut Issues<'_>,
) -> Option<Vec<Branch>> {
    if raw.is_empty() {
        issues.error(
            key,
            format!(
                "at least one [[{}]] is required (usually a PRIMARY and a SECONDARY)",
                if key == "branch" {
                    key
                } else {
                    "service.branch"
                }
            ),
        );
    }
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut roles = BTreeSet::new();
    for (i, b) in raw.into_iter().enumerate() {
        let name = b.name.trim().to_string();
        let key = |k: &str| format!("{key}[{i}].{k}");
        // The canary table's column is the tighter bound.
        check_dimension(&key("name"), &name, MAX_CANARY_ID_LEN, issues);
        if !names.insert(name.clone()) {
            issues.error(key("name"), format!("duplicate branch name {name:?}"));
        }
        if name == super::END_TO_END_KEY {
            issues.error(
                key("name"),
                format!(
                    "{name:?} is reserved: it keys the stable-name probe's end-to-end canary row"
                ),
            );
        }
        if !roles.insert(b.role) {
            issues.error(
                key("role"),
                format!(
                    "a second {} branch; a failover record set has one of each",
                    b.role
                ),
            );
        }
        let endpoint = normalise_name(&b.endpoint);
        if let Err(why) = check_endpoint(&endpoint, service) {
            issues.error(key("endpoint"), why);
        }
        if let Some(why) = b.region.as_deref().and_then(region_problem) {
            issues.error(key("region"), why);
        }
        let port = b.port.map(|p| p.get()).or(default_port);
        match port {
            Some(port) => out.push(Branch {
                name,
                role: b.role,
                endpoint,
                port,
                region: b.region,
            }),
            None if probe_ok => {
                issues.error(key("port"), "no port: set it here or in [probe.tcp]");
            }
            None => {}
        }
    }
    Some(out)
}

fn check_endpoint(endpoint: &str, service: &Service) -> Result<(), String> {
    if endpoint.is_empty() {
        return Err("must not be empty".into());
    }
    check_hostname(endpoint)?;
    if endpoint.eq_ignore_ascii_case(&service.stable_name) {
        return Err(format!(
            "{endpoint:?} is the service's stable name; a branch probe must use its branch-specific name, or it would measure whatever Route 53 answers (a circular control loop)"
        ));
    }
    Ok(())
}

/// Check that `name` is a DNS host name readyprobe can resolve: not an IP address (a branch is
/// probed by its name), at most 253 characters (RFC 1035), labels of 1–63 characters of
/// letters, digits, `-` and `_`, not starting or ending with `-` (RFC 1123). `_` is accepted:
/// Route 53 record names may carry it (e.g. `_mysql._tcp.example`), and resolvers look such
/// names up like any other.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_hostname(name: &str) -> Result<(), String> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "{name:?} is an IP address; a branch is probed by its branch-specific DNS name, so the resolve step sees what the records say"
        ));
    }
    if name.len() > 253 {
        return Err(format!(
            "a name of {} characters is longer than the 253 a DNS name may have",
            name.chars().count()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "{name:?} is not a valid host name (each dot-separated label is 1–63 characters)"
            ));
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "{name:?} is not a valid host name (letters, digits, '-' and '_' only; no scheme, port or path)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "{name:?} is not a valid host name (a label must not start or end with '-')"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    fn config(region_line: &str) -> String {
        format!(
            "[service]\nname = \"s\"\nstable_name = \"s.internal.example\"\n[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 5432\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n{region_line}\n[[branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"s.internal.example.net\"\n"
        )
    }

    fn rds_iam(password_region: &str, primary_region: &str) -> String {
        format!(
            "[service]\nname = \"s\"\nstable_name = \"s.internal.example\"\n[probe]\nkind = \"postgres\"\n[probe.tls]\nssl_mode = \"verify_identity\"\nssl_ca = \"/etc/ca.pem\"\n[probe.postgres]\nuser = \"probe\"\npassword = {{ rds_iam = {{ {password_region} }} }}\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n{primary_region}\n[[branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"s.internal.example.net\"\nregion = \"us-east-1\"\n"
        )
    }

    /// A branch's RDS IAM token is signed for its own `region`, else `rds_iam.region`; a branch
    /// with neither is an error on the password's key and line naming the branch's key and line.
    #[test]
    fn each_branch_needs_a_region_to_sign_its_rds_iam_token_for() {
        let regions = |text: &str| {
            let c = parse(Path::new("t.toml"), text).unwrap_or_else(|e| panic!("{e}"));
            let Some((_, crate::config::SecretRef::RdsIam { region })) =
                c.services[0].probe.kind.database_login()
            else {
                panic!("no rds_iam password")
            };
            let default = region.as_deref();
            c.services[0]
                .branches
                .iter()
                .map(|b| b.token_region(default).map(str::to_string))
                .collect::<Vec<_>>()
        };
        let some = |r: &str| Some(r.to_string());
        assert_eq!(
            regions(&rds_iam("", "region = \"eu-west-1\"")),
            [some("eu-west-1"), some("us-east-1")]
        );
        assert_eq!(
            regions(&rds_iam("region = \"eu-west-1\"", "")),
            [some("eu-west-1"), some("us-east-1")]
        );
        let e = parse(Path::new("t.toml"), &rds_iam("", "")).unwrap_err();
        assert_eq!(e.issues.len(), 1, "{e}");
        let issue = &e.issues[0];
        assert_eq!(
            (issue.key.as_str(), issue.line),
            ("probe.postgres.password", Some(11)),
            "{e}"
        );
        assert!(
            issue.message.contains(
                "rds_iam names no region and branch[0] (\"primary\", line 12) names none: set rds_iam.region or branch[0].region"
            ),
            "{e}"
        );
    }

    /// `region` is optional, kept as written, and a value that is no region name is an issue
    /// naming the branch's key and line.
    #[test]
    fn a_branch_region_is_optional_and_checked() {
        let c = parse(Path::new("t.toml"), &config("region = \"eu-west-1\"")).unwrap();
        let regions: Vec<Option<&str>> = c.services[0]
            .branches
            .iter()
            .map(|b| b.region.as_deref())
            .collect();
        assert_eq!(regions, [Some("eu-west-1"), None]);
        for bad in ["EU-WEST-1", "", "eu west 1", "euwest", "-eu-west-1"] {
            let e = parse(Path::new("t.toml"), &config(&format!("region = {bad:?}"))).unwrap_err();
            let issue = &e.issues[0];
            assert_eq!(issue.key, "branch[0].region", "{bad:?}: {e}");
            assert_eq!(issue.line, Some(12), "{bad:?}: {e}");
            assert!(issue.message.contains("not an AWS region name"), "{e}");
        }
    }
}
