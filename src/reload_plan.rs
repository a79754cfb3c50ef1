//! The plan of a reload, pure: what a config read again does to the running one (services
//! removed, changed branch by branch, started, left unavailable, renamed) or why it is refused.
//! The run shell stages and executes it (`runner/reload.rs`); `docs/operations.md`, "Reload".
//!
//! Configs are compared with `==` on the validated types (a redacting `Debug` hides nothing);
//! what secrets and files hold is compared by the digest each service was prepared with
//! (`probe::InputsDigest` in a run; any `PartialEq` value here).

use crate::config::{Config, ServiceConfig, StoreKind, escape_controls};
use crate::fold::ServiceId;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// A running service as the plan sees it: its id, settings and the digest of the inputs its
/// probes were prepared from.
#[derive(Debug, Clone, Copy)]
pub struct Running<'a, D> {
    /// Its id in the run.
    pub id: ServiceId,
    /// Its settings in force.
    pub cfg: &'a ServiceConfig,
    /// What its secrets and files held when it was prepared.
    pub inputs: D,
}

/// What to stage for a config that passed the first look ([`admit`]): the services to prepare
/// again and those to start, by name, in the new config's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    /// Running services the new config keeps (prepared again: a file may change under the
    /// same config).
    pub running: Vec<String>,
    /// Of those, the ones whose settings changed.
    pub changed: Vec<String>,
    /// Services that are not running (new, or unable to start before).
    pub to_start: Vec<String>,
}

/// The first look at a config read again: refused (the problems, one sentence each) when it
/// changes a setting that needs a restart; else what to stage.
///
/// # Errors
/// One problem per key that needs a restart ([`restart_keys`]).
pub fn admit<D>(
    old: &Config,
    running: &[Running<'_, D>],
    new: &Config,
) -> Result<Staging, Vec<String>> {
    let restart = restart_keys(old, new);
    if !restart.is_empty() {
        return Err(restart
            .iter()
            .map(|k| format!("{k} changed: it takes effect only after a restart"))
            .collect());
    }
    let mut staging = Staging {
        running: Vec::new(),
        changed: Vec::new(),
        to_start: Vec::new(),
    };
    for s in &new.services {
        let name = s.service.name.clone();
        match running.iter().find(|r| r.cfg.service.name == name) {
            Some(r) => {
                if r.cfg != s {
                    staging.changed.push(name.clone());
                }
                staging.running.push(name);
            }
            None => staging.to_start.push(name),
        }
    }
    Ok(staging)
}

/// What staging found for a service of the new config: the digest of the inputs it was
/// prepared from (for one to start: its control document loaded too), or why it cannot run.
pub type Staged<D> = Result<D, Vec<String>>;

/// What a reload does, applied as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Running services it drops.
    pub removed: Vec<ServiceId>,
    /// Names it drops (running or not), for the `reload` record.
    pub removed_names: Vec<String>,
    /// Running services whose settings or inputs changed.
    pub changed: Vec<Change>,
    /// Unchanged running services whose stable-name loop restarts (`[stable_name_probe]`
    /// changed).
    pub stable_restarts: Vec<ServiceId>,
    /// Services to start, by name (prepared, their documents loaded).
    pub start: Vec<String>,
    /// Services of the new config that cannot start, with why.
    pub unavailable: Vec<(String, Vec<String>)>,
    /// A removed and an added service that probe the same endpoints: most likely a rename,
    /// which starts the added one from its own (empty) state.
    pub renames: Vec<Rename>,
}

/// New settings of a running service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Its id.
    pub id: ServiceId,
    /// Its name.
    pub name: String,
    /// Its branches from now on, in config order; a running branch not named here is removed.
    pub branches: Vec<BranchPlan>,
    /// Whether its stable-name loop restarts (what it probes changed).
    pub stable_restart: bool,
}

/// One branch of a [`Change`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchPlan {
    /// Branch name.
    pub name: String,
    /// Its loop restarts (or starts, for a new branch): what it is probed with changed, the
    /// service's probe settings or inputs included.
    pub restart: bool,
    /// Its target changed (endpoint, port or probe kind): its readiness state is kept but its
    /// window and holding clocks start afresh. Otherwise they are carried over the reload
    /// (under the new policy), so a reload never makes a failing branch look better than its
    /// evidence.
    pub retarget: bool,
}

/// A likely rename: a removed service and an added one share branch endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// The removed service.
    pub removed: String,
    /// The added service.
    pub added: String,
    /// The endpoints both probe.
    pub endpoints: Vec<String>,
}

/// The plan of a config [`admit`] let through, from what staging found for each service
/// (`staged`, by name; a service missing from it could not be prepared).
///
/// # Errors
/// The problems (control characters escaped) when a running service it keeps cannot be
/// prepared again, or when it would leave no service probed (the same config at start exits
/// 78).
pub fn plan<D: PartialEq + Clone>(
    old: &Config,
    running: &[Running<'_, D>],
    new: &Config,
    staged: &HashMap<String, Staged<D>>,
) -> Result<Plan, Vec<String>> {
    let unprepared = || Err(vec!["could not be prepared".to_string()]);
    let get = |name: &str| staged.get(name).cloned().unwrap_or_else(unprepared);
    let names: BTreeSet<&str> = new
        .services
        .iter()
        .map(|s| s.service.name.as_str())
        .collect();
    let mut plan = Plan::default();
    for s in &old.services {
        if !names.contains(s.service.name.as_str()) {
            plan.removed_names.push(s.service.name.clone());
        }
    }
    plan.removed = running
        .iter()
        .filter(|r| !names.contains(r.cfg.service.name.as_str()))
        .map(|r| r.id)
        .collect();
    let stable_changed = old.stable_name_probe != new.stable_name_probe;
    let mut problems = Vec::new();
    let mut probed = 0;
    for s in &new.services {
        let name = &s.service.name;
        let Some(r) = running.iter().find(|r| &r.cfg.service.name == name) else {
            match get(name) {
                Ok(_) => {
                    probed += 1;
                    plan.start.push(name.clone());
                }
                Err(p) => plan.unavailable.push((name.clone(), p)),
            }
            continue;
        };
        match get(name) {
            Ok(inputs) => {
                probed += 1;
                if r.cfg != s || r.inputs != inputs {
                    plan.changed.push(change(r, s, &inputs, stable_changed));
                } else if stable_changed {
                    plan.stable_restarts.push(r.id);
                }
            }
            Err(p) => problems.extend(
                p.iter()
                    .map(|p| escape_controls(&format!("{name}: {p}")).into_owned()),
            ),
        }
    }
    if problems.is_empty() && probed == 0 {
        let left: Vec<String> = plan
            .unavailable
            .iter()
            .map(|(n, p)| escape_controls(&format!("{n}: {}", p.join("; "))).into_owned())
            .collect();
        problems.push(format!(
            "the new config leaves no service probed (at start it would exit 78): {}",
            left.join("; ")
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    plan.renames = renames(old, &plan.removed_names, new, &plan.start);
    Ok(plan)
}

/// What changes for running service `r` under its new settings `s` and inputs.
fn change<D: PartialEq>(
    r: &Running<'_, D>,
    s: &ServiceConfig,
    inputs: &D,
    stable_changed: bool,
) -> Change {
    let old = r.cfg;
    let shared = r.inputs == *inputs
        && old.service == s.service
        && old.probe == s.probe
        && old.policy == s.policy;
    let same_kind =
        std::mem::discriminant(&old.probe.kind) == std::mem::discriminant(&s.probe.kind);
    let branches = s
        .branches
        .iter()
        .map(|b| {
            let before = old.branches.iter().find(|o| o.name == b.name);
            BranchPlan {
                name: b.name.clone(),
                restart: before.is_none_or(|o| !shared || o != b),
                retarget: before
                    .is_some_and(|o| !same_kind || o.endpoint != b.endpoint || o.port != b.port),
            }
        })
        .collect();
    Change {
        id: r.id,
        name: s.service.name.clone(),
        branches,
        stable_restart: stable_changed
            || r.inputs != *inputs
            || old.service != s.service
            || old.probe != s.probe
            || old.branches != s.branches,
    }
}

/// Each removed service (of `old`) that shares a branch endpoint with a service started that
/// `old` did not have: a rename loses the removed one's state.
fn renames(old: &Config, removed: &[String], new: &Config, started: &[String]) -> Vec<Rename> {
    let endpoints = |cfg: &Config, name: &str| -> BTreeSet<String> {
        cfg.services
            .iter()
            .filter(|s| s.service.name == name)
            .flat_map(|s| s.branches.iter().map(|b| b.endpoint.clone()))
            .collect()
    };
    let added = started
        .iter()
        .filter(|n| !old.services.iter().any(|s| &s.service.name == *n));
    let mut out = Vec::new();
    for a in added {
        let theirs = endpoints(new, a);
        for r in removed {
            let shared: Vec<String> = endpoints(old, r).intersection(&theirs).cloned().collect();
            if !shared.is_empty() {
                out.push(Rename {
                    removed: r.clone(),
                    added: a.clone(),
                    endpoints: shared,
                });
            }
        }
    }
    out
}

/// The settings a running process cannot take without a restart (the state store, the evidence
/// file, the sinks and publish tick, the prober id, the resolver, the reload poll, `[serve]`), by config
/// key: each key whose effective value changed, except a value that only follows another named
/// key (a `poll_interval` or `operation_timeout` capped at the publish interval, a default
/// evidence path under `state_dir`), so a refusal names what the operator edited.
pub fn restart_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let (p, q) = (&old.publish, &new.publish);
    let capped = |a: Duration, b: Duration| a == b || capped_alike(a, p.interval, b, q.interval);
    let (c, d) = (&p.cloudwatch, &q.cloudwatch);
    let evidence = old.evidence_path == new.evidence_path
        || (old.evidence_path == old.state_dir.join("evidence.jsonl")
            && new.evidence_path == new.state_dir.join("evidence.jsonl"));
    let (x, y) = (&old.dns, &new.dns);
    let mut checks = vec![
        ("prober_id", old.prober_id == new.prober_id),
        ("state_dir", old.state_dir == new.state_dir),
        (
            "state.poll_interval",
            capped(old.state.poll_interval, new.state.poll_interval),
        ),
        ("publish.interval", p.interval == q.interval),
        ("publish.sinks", p.sinks == q.sinks),
        ("publish.metrics", p.metrics == q.metrics),
        ("publish.cloudwatch.region", c.region == d.region),
        (
            "publish.cloudwatch.endpoint_url",
            c.endpoint_url == d.endpoint_url,
        ),
        (
            "publish.cloudwatch.role_arn",
            c.role.as_ref().map(|r| &r.role_arn) == d.role.as_ref().map(|r| &r.role_arn),
        ),
        (
            "publish.cloudwatch.external_id",
            c.role.as_ref().map(|r| &r.external_id) == d.role.as_ref().map(|r| &r.external_id),
        ),
        (
            "publish.cloudwatch.operation_timeout",
            capped(c.operation_timeout, d.operation_timeout),
        ),
        (
            "publish.cloudwatch.max_attempts",
            c.max_attempts == d.max_attempts,
        ),
        ("publish.otlp", p.otlp == q.otlp),
        ("evidence.path", evidence),
        (
            "evidence.max_size_mb",
            old.evidence_max_bytes == new.evidence_max_bytes,
        ),
        ("evidence.s3", old.evidence_s3 == new.evidence_s3),
        ("dns.nameservers", x.nameservers == y.nameservers),
        ("dns.resolv_conf", x.resolv_conf == y.resolv_conf),
        ("dns.timeout", x.timeout == y.timeout),
        ("dns.address_family", x.address_family == y.address_family),
        ("reload.poll", old.reload_poll == new.reload_poll),
    ];
    match (&old.state.store, &new.state.store) {
        (StoreKind::File, StoreKind::File) => {}
        (StoreKind::S3(a), StoreKind::S3(b)) => checks.extend([
            ("state.s3.bucket", a.bucket == b.bucket),
            ("state.s3.key_prefix", a.key_prefix == b.key_prefix),
            ("state.s3.region", a.region == b.region),
            ("state.s3.endpoint_url", a.endpoint_url == b.endpoint_url),
        ]),
        _ => checks.push(("state.store", false)),
    }
    match (&old.serve, &new.serve) {
        (None, None) => {}
        (Some(a), Some(b)) => checks.extend([
            ("serve.listen", a.listen == b.listen),
            (
                "serve.max_connections",
                a.max_connections == b.max_connections,
            ),
            (
                "serve.request_timeout",
                a.request_timeout == b.request_timeout,
            ),
        ]),
        _ => checks.push(("serve", false)),
    }
    checks
        .into_iter()
        .filter(|(_, unchanged)| !unchanged)
        .map(|(key, _)| key)
        .collect()
}

/// Whether `a` (capped at interval `ai`) and `b` (capped at `bi`) can be one operator value
/// capped at two intervals: `min(ai, v) == a` and `min(bi, v) == b` for some `v`. Then a change
/// from `a` to `b` comes from the interval alone.
fn capped_alike(a: Duration, ai: Duration, b: Duration, bi: Duration) -> bool {
    [a, b, Duration::MAX]
        .into_iter()
        .any(|v| ai.min(v) == a && bi.min(v) == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A two-service config: `top` goes at the top level, `alpha` into the first service, and
    /// `primary` is the first service's primary branch (endpoint and port lines).
    fn config_with(top: &str, alpha: &str, primary: &str) -> Config {
        let text = format!(
            r#"
prober_id = "p1"
{top}
[probe]
kind = "tcp"
interval = "2s"

[[service]]
name = "alpha"
stable_name = "alpha.example.internal"
{alpha}
[[service.branch]]
name = "primary"
role = "PRIMARY"
{primary}

[[service]]
name = "beta"
stable_name = "beta.example.internal"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "beta-primary.example.internal"
port = 5432
"#
        );
        crate::config::parse(Path::new("/etc/readyprobe/fleet.toml"), &text)
            .unwrap_or_else(|e| panic!("{:?}", e.issues))
    }

    const PRIMARY: &str = "endpoint = \"alpha-primary.example.internal\"\nport = 5432";

    fn config(top: &str, alpha: &str) -> Config {
        config_with(top, alpha, PRIMARY)
    }

    fn running(cfg: &Config) -> Vec<Running<'_, u64>> {
        cfg.services
            .iter()
            .enumerate()
            .map(|(id, s)| Running {
                id,
                cfg: s,
                inputs: 0,
            })
            .collect()
    }

    /// Every service of `cfg` staged with digest 0.
    fn staged_ok(cfg: &Config) -> HashMap<String, Staged<u64>> {
        cfg.services
            .iter()
            .map(|s| (s.service.name.clone(), Ok(0)))
            .collect()
    }

    fn changed(plan: &Plan) -> Vec<&str> {
        plan.changed.iter().map(|c| c.name.as_str()).collect()
    }

    /// A top-level default changes only the services that take it: one that sets the key itself
    /// keeps its effective settings, so it is not changed (nor are its loops restarted).
    #[test]
    fn a_changed_default_changes_only_the_services_that_take_it() {
        let own = "readiness = { initial = \"unready\" }";
        let old = config("[readiness]\ninitial = \"unknown\"", own);
        let new = config("[readiness]\ninitial = \"ready\"", own);
        let staging = admit(&old, &running(&old), &new).unwrap();
        assert_eq!(staging.changed, ["beta"]);
        assert_eq!(staging.running, ["alpha", "beta"]);
        let plan = super::plan(&old, &running(&old), &new, &staged_ok(&new)).unwrap();
        assert_eq!(changed(&plan), ["beta"]);
        assert!(plan.removed.is_empty() && plan.start.is_empty());
        // The same for the default namespace and another readiness default.
        let own = "namespace = \"Own\"\nreadiness = { min_attempts = 4 }";
        let old = config("[publish]\nnamespace = \"A\"", own);
        let new = config(
            "[publish]\nnamespace = \"B\"\n[readiness]\nmin_attempts = 3",
            own,
        );
        let plan = super::plan(&old, &running(&old), &new, &staged_ok(&new)).unwrap();
        assert_eq!(changed(&plan), ["beta"]);
    }

    /// A changed probe setting restarts every branch's loop but carries the readiness (the
    /// target is the same); a new port or probe kind retargets the branch; a file that reads
    /// otherwise under the same config (another digest) changes the service too.
    #[test]
    fn only_a_new_target_starts_a_branchs_window_afresh() {
        let old = config("", "");
        let slower = config("", "probe = { timeout = \"1s\" }");
        let plan = super::plan(&old, &running(&old), &slower, &staged_ok(&slower)).unwrap();
        let alpha = &plan.changed[0];
        assert_eq!(
            alpha.branches,
            [BranchPlan {
                name: "primary".into(),
                restart: true,
                retarget: false,
            }]
        );
        let moved = config_with(
            "",
            "",
            "endpoint = \"alpha-primary.example.internal\"\nport = 5433",
        );
        let plan = super::plan(&old, &running(&old), &moved, &staged_ok(&moved)).unwrap();
        assert!(plan.changed[0].branches[0].retarget);
        let http = config(
            "",
            "probe = { kind = \"http\", http = { path = \"/\" }, tls = { ssl_mode = \"disabled\" } }",
        );
        let plan = super::plan(&old, &running(&old), &http, &staged_ok(&http)).unwrap();
        assert!(plan.changed[0].branches[0].retarget);
        // The same config, a secret that reads otherwise: changed, restarted, carried.
        let mut staged = staged_ok(&old);
        staged.insert("beta".into(), Ok(7));
        let plan = super::plan(&old, &running(&old), &old, &staged).unwrap();
        assert_eq!(changed(&plan), ["beta"]);
        assert!(plan.changed[0].branches[0].restart);
        assert!(!plan.changed[0].branches[0].retarget);
    }

    /// A running service that cannot be prepared again refuses the reload; a config whose
    /// every service is unavailable would leave nothing probed: refused too (at start it exits
    /// 78). A service that cannot start beside one that runs is only reported.
    #[test]
    fn a_reload_that_leaves_no_service_probed_is_refused() {
        let old = config("", "");
        let mut staged = staged_ok(&old);
        staged.insert("alpha".into(), Err(vec!["secret \u{1b}[31m gone".into()]));
        let problems = plan(&old, &running(&old), &old, &staged).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("alpha: secret "), "{problems:?}");
        assert!(!problems[0].contains('\u{1b}'), "escaped: {problems:?}");
        // Nothing running, both unavailable.
        let problems = plan::<u64>(&old, &[], &old, &HashMap::new()).unwrap_err();
        assert!(problems[0].contains("no service probed"), "{problems:?}");
        // One of two to start unavailable: applied, that one reported.
        let mut staged = staged_ok(&old);
        staged.remove("beta");
        let plan = super::plan(&old, &[], &old, &staged).unwrap();
        assert_eq!(plan.start, ["alpha"]);
        assert_eq!(plan.unavailable[0].0, "beta");
    }

    /// A removed service and an added one with a branch endpoint in common: a likely rename.
    #[test]
    fn a_rename_is_seen_by_the_endpoints_it_keeps() {
        let old = config("", "");
        let text = |name: &str| {
            format!(
                "prober_id = \"p1\"\n[probe]\nkind = \"tcp\"\n[[service]]\nname = \"{name}\"\nstable_name = \"alpha.example.internal\"\n[[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\n{PRIMARY}\n"
            )
        };
        let new = crate::config::parse(Path::new("/x.toml"), &text("alpha2")).unwrap();
        let plan = super::plan(&old, &running(&old), &new, &staged_ok(&new)).unwrap();
        assert_eq!(plan.removed, [0, 1]);
        assert_eq!(plan.removed_names, ["alpha", "beta"]);
        assert_eq!(
            plan.renames,
            [Rename {
                removed: "alpha".into(),
                added: "alpha2".into(),
                endpoints: vec!["alpha-primary.example.internal".into()],
            }]
        );
    }

    /// A refusal names the keys the operator edited: a new publish interval moves the poll
    /// interval and the CloudWatch timeout capped at it, and a new `state_dir` the default
    /// evidence path under it, without naming those.
    #[test]
    fn a_refusal_names_only_the_keys_whose_own_value_changed() {
        let keys = |a: &str, b: &str| restart_keys(&config(a, ""), &config(b, ""));
        assert_eq!(
            keys(
                "[publish]\ninterval = \"60s\"",
                "[publish]\ninterval = \"5s\""
            ),
            ["publish.interval"]
        );
        assert_eq!(
            keys(
                "[publish]\ninterval = \"5s\"",
                "[publish]\ninterval = \"60s\""
            ),
            ["publish.interval"]
        );
        assert_eq!(
            keys("state_dir = \"/var/a\"", "state_dir = \"/var/b\""),
            ["state_dir"]
        );
        assert_eq!(
            keys(
                "[publish]\nmetrics = \"full\"",
                "[publish]\nmetrics = \"control\""
            ),
            ["publish.metrics"]
        );
        // The operator's own value changed too: named.
        assert_eq!(
            keys(
                "[publish]\ninterval = \"60s\"\n[state]\npoll_interval = \"3s\"",
                "[publish]\ninterval = \"5s\"\n[state]\npoll_interval = \"4s\""
            ),
            ["state.poll_interval", "publish.interval"]
        );
        assert_eq!(
            keys(
                "[publish.cloudwatch]\nmax_attempts = 3",
                "[publish.cloudwatch]\nmax_attempts = 4"
            ),
            ["publish.cloudwatch.max_attempts"]
        );
        assert_eq!(keys("", "[dns]\ntimeout = \"2s\""), ["dns.timeout"]);
        assert_eq!(
            keys("[reload]\npoll = \"5s\"", "[reload]\npoll = \"9s\""),
            ["reload.poll"]
        );
        assert_eq!(keys("", "[serve]"), ["serve"]);
        assert_eq!(keys("[serve]", ""), ["serve"]);
        assert!(keys("[serve]", "[serve]\nlisten = \"127.0.0.1:9464\"").is_empty());
        assert_eq!(
            keys(
                "[serve]",
                "[serve]\nlisten = \"127.0.0.1:9465\"\nrequest_timeout = \"2s\""
            ),
            ["serve.listen", "serve.request_timeout"]
        );
        assert_eq!(
            keys("", "[evidence.s3]\nbucket = \"drills\""),
            ["evidence.s3"]
        );
        assert!(keys("", "").is_empty());
        let old = config("", "");
        let problems = admit(&old, &running(&old), &config("[dns]\ntimeout = \"2s\"", ""));
        assert_eq!(
            problems.unwrap_err(),
            ["dns.timeout changed: it takes effect only after a restart"]
        );
    }
}
