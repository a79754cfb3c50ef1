//! A reload (SIGHUP): the config read again with the start-up loader is applied to the running
//! process, service by service, or refused as a whole with the old config kept
//! (`docs/operations.md`, "Reload").
//!
//! Refused: an invalid config; a change to a setting that needs a restart ([`restart_keys`]); a
//! running service whose inputs cannot be prepared again. Preparing the services (every running
//! one too: a file or secret may change under the same config) and loading the documents of those
//! it adds runs beside the run loop ([`request`], [`Pending`]); the result
//! comes back as an event ([`finish`]). Applied: removed services stop (their loops are aborted,
//! an attempt in flight is recorded as abandoned, their state gets a final save); changed
//! services keep every branch whose settings are the same as they were (its loop, schedule and
//! readiness untouched) and restart the loops of the others, whose state is kept and whose window
//! starts afresh ([`crate::fold::BranchChange`]); new services start as at start-up, and so do
//! services that could not start before (retried at every reload). Sinks of a namespace no
//! service uses any more flush and stop.

use super::shell::Shell;
use super::{
    Fleet, Live, Probes, Syncs, Wiring, open_store, problems_of, report_unavailable, start_record,
};
use crate::config::{Config, ConfigError, ServiceConfig, StoreKind, escape_controls};
use crate::control::ControlDoc;
use crate::fold::{BranchChange, Input, NewService, ServiceChange, ServiceId};
use crate::probe::{self, BranchProbe};
use crate::record::{Record, Reload};
use crate::state::Store;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A service's branch probes and inputs digest, or why it cannot be prepared.
type Prepared = Result<Probes, Vec<String>>;

/// A service's store and control document as loaded, or why it could not be.
type Loaded = Result<(Store, ControlDoc), String>;

/// What the new config does to the running one, by service name.
struct Plan<'a> {
    /// Running services it drops.
    removed: Vec<ServiceId>,
    /// Names it drops (running or not).
    removed_names: Vec<String>,
    /// Running services it keeps, in its order, with their new settings and whether these
    /// changed (one whose settings did not is changed still when its inputs read otherwise).
    running: Vec<(ServiceId, &'a ServiceConfig, bool)>,
    /// Services that are not running (new, or unable to start before).
    to_start: Vec<&'a ServiceConfig>,
}

/// Two settings are the same when they print the same: every config type derives `Debug`, over
/// every field (secrets and files are held as references: what they hold is compared by the
/// inputs digest of each running service prepared again).
fn same<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// The settings a running process cannot take without a restart (the state store, the evidence
/// file, the sinks and publish tick, the prober id and the resolver), by config key: each key
/// whose effective value changed, except a value that only follows another named key (a
/// `poll_interval` or `operation_timeout` capped at the publish interval, a default evidence
/// path under `state_dir`), so a refusal names what the operator edited.
fn restart_keys(old: &Config, new: &Config) -> Vec<&'static str> {
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
        ("publish.cloudwatch.region", c.region == d.region),
        (
            "publish.cloudwatch.endpoint_url",
            c.endpoint_url == d.endpoint_url,
        ),
        (
            "publish.cloudwatch.operation_timeout",
            capped(c.operation_timeout, d.operation_timeout),
        ),
        (
            "publish.cloudwatch.max_attempts",
            c.max_attempts == d.max_attempts,
        ),
        ("evidence.path", evidence),
        (
            "evidence.max_size_mb",
            old.evidence_max_bytes == new.evidence_max_bytes,
        ),
        ("dns.nameservers", x.nameservers == y.nameservers),
        ("dns.resolv_conf", x.resolv_conf == y.resolv_conf),
        ("dns.timeout", x.timeout == y.timeout),
        ("dns.address_family", x.address_family == y.address_family),
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

impl<'a> Plan<'a> {
    fn of(fleet: &Fleet, new: &'a Config) -> Plan<'a> {
        Plan::between(&fleet.cfg, &fleet.live, new)
    }

    /// What `new` does to the running services `live` of config `old`. A running service is
    /// changed when its effective settings differ (a top-level default it overrides is not
    /// one of them).
    fn between(old: &Config, live: &BTreeMap<ServiceId, Live>, new: &'a Config) -> Plan<'a> {
        let by_name: HashMap<&str, &ServiceConfig> = new
            .services
            .iter()
            .map(|s| (s.service.name.as_str(), s))
            .collect();
        let running: HashMap<&str, (ServiceId, &Live)> = live
            .iter()
            .map(|(id, l)| (l.cfg.service.name.as_str(), (*id, l)))
            .collect();
        let mut plan = Plan {
            removed: Vec::new(),
            removed_names: Vec::new(),
            running: Vec::new(),
            to_start: Vec::new(),
        };
        for s in &old.services {
            let name = s.service.name.as_str();
            if !by_name.contains_key(name) {
                plan.removed_names.push(name.to_string());
                if let Some((id, _)) = running.get(name) {
                    plan.removed.push(*id);
                }
            }
        }
        for s in &new.services {
            match running.get(s.service.name.as_str()) {
                Some((id, live)) => plan.running.push((*id, s, !same(&live.cfg, s))),
                None => plan.to_start.push(s),
            }
        }
        plan
    }
}

/// Prepare the named services of `cfg` off the runtime (secrets and CA files are read, as at
/// start-up).
async fn prepare(cfg: Arc<Config>, names: Vec<String>) -> HashMap<String, Prepared> {
    let work = move || {
        let mut out = HashMap::new();
        for name in names {
            if let Some(svc) = cfg.services.iter().find(|s| s.service.name == name) {
                let r = probe::branches_and_digest(&cfg, svc).map_err(|e| problems_of(&e));
                out.insert(name, r);
            }
        }
        out
    };
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "preparing the reloaded services failed inside readyprobe");
        HashMap::new()
    })
}

/// Control documents of services a reload adds that are loaded at once.
const LOADS_AT_ONCE: usize = 16;

/// A reload being prepared beside the run loop, and the newest config read meanwhile.
#[derive(Default)]
pub(super) struct Pending {
    /// At most one preparation at a time.
    job: JoinSet<Staged>,
    /// SIGHUPs during a preparation coalesce: the newest config read waits here, replacing any
    /// older one, and is taken once the preparation in flight has been applied or refused.
    waiting: Option<Result<Config, ConfigError>>,
}

impl Pending {
    /// The finished preparation; never, while none is in flight.
    pub(super) async fn done(&mut self) -> Result<Staged, tokio::task::JoinError> {
        match self.job.join_next().await {
            Some(r) => r,
            None => std::future::pending().await,
        }
    }
}

/// What a reload's preparation produced off the loop: its services' probes and the control
/// documents (with their stores) of the services it starts.
pub(super) struct Staged {
    new: Arc<Config>,
    prepared: HashMap<String, Prepared>,
    loaded: HashMap<String, Loaded>,
}

/// Take a config read again. Refused at once when invalid or when it changes a setting that
/// needs a restart; else its changed and new services are prepared, and the documents of those
/// it starts loaded, in a task beside the loop ([`finish`] then applies it), so a slow or dead
/// store never stalls the other services' probing, publishing and syncs, nor a stop. A config
/// that comes while a preparation is in flight waits for it ([`Pending`]).
pub(super) fn request(
    shell: &mut Shell,
    fleet: &Fleet,
    pending: &mut Pending,
    new: Result<Config, ConfigError>,
) {
    if !pending.job.is_empty() {
        let replaced = pending.waiting.replace(new).is_some();
        tracing::info!(
            replaced,
            "a reload is in progress: the config just read is taken once it is done (a newer one replaces it)"
        );
        return;
    }
    let new = match new {
        Ok(c) => c,
        Err(e) => return refuse(shell, config_problems(&e)),
    };
    let restart = restart_keys(&fleet.cfg, &new);
    if !restart.is_empty() {
        let problems = restart
            .iter()
            .map(|k| format!("{k} changed: it takes effect only after a restart"))
            .collect();
        return refuse(shell, problems);
    }
    let plan = Plan::of(fleet, &new);
    let names = |list: Vec<&ServiceConfig>| list.iter().map(|s| s.service.name.clone()).collect();
    let running: Vec<String> = names(plan.running.iter().map(|(_, s, _)| *s).collect());
    let changed: Vec<String> = names(plan.running.iter().filter(|r| r.2).map(|r| r.1).collect());
    let to_start: Vec<String> = names(plan.to_start);
    tracing::info!(
        running = running.len(),
        changed = %few(&changed),
        to_start = %few(&to_start),
        "reload: preparing services beside the run"
    );
    pending.job.spawn(stage(Arc::new(new), running, to_start));
}

/// Up to a few names, then how many more: a log line stays short with a thousand services (the
/// `reload` record keeps every name).
fn few(names: &[String]) -> String {
    const SHOWN: usize = 5;
    if names.is_empty() {
        return "none".to_string();
    }
    let shown: Vec<_> = names
        .iter()
        .take(SHOWN)
        .map(|n| escape_controls(n))
        .collect();
    match names.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{} and {more} more", shown.join(", ")),
        _ => shown.join(", "),
    }
}

/// How long a reload may spend loading the control documents of the services it adds, in
/// all: twice a store's bound on one read. Services whose document has not come by then are
/// reported unavailable (tried again at the next reload) and the reload applies.
pub(super) const STAGING_BOUND: Duration = {
    let (s3, file) = (
        crate::state::S3_OPERATION_TIMEOUT.as_secs(),
        crate::state::FILE_OP_BOUND.as_secs(),
    );
    Duration::from_secs(2 * if s3 > file { s3 } else { file })
};

/// Prepare every service the new config runs, as at start-up (a kept one's files and secrets
/// are read again: they may have changed under the same config); unless a running one cannot be
/// prepared (the reload is then refused), load the control documents of the new ones that
/// could be, within [`STAGING_BOUND`].
async fn stage(new: Arc<Config>, running: Vec<String>, to_start: Vec<String>) -> Staged {
    let names = running.iter().chain(&to_start).cloned().collect();
    let prepared = prepare(new.clone(), names).await;
    let ok = |n: &&String| matches!(prepared.get(*n), Some(Ok(_)));
    let mut loaded = HashMap::new();
    if running.iter().all(|n| ok(&n)) {
        let names: Vec<String> = to_start.iter().filter(ok).cloned().collect();
        let loads = load_docs(&new, names.clone(), &mut loaded);
        if tokio::time::timeout(STAGING_BOUND, loads).await.is_err() {
            let bound = crate::clock::fmt_duration(STAGING_BOUND);
            for n in names {
                loaded.entry(n).or_insert_with(|| {
                    Err(format!(
                        "its control document was not loaded within the reload's {bound}; it is tried again at the next reload"
                    ))
                });
            }
        }
    }
    Staged {
        new,
        prepared,
        loaded,
    }
}

/// Load the control documents of `names`, [`LOADS_AT_ONCE`] at a time, into `loaded`. Dropped
/// (at the staging bound), the loads in flight are aborted.
async fn load_docs(new: &Arc<Config>, names: Vec<String>, loaded: &mut HashMap<String, Loaded>) {
    let mut loads = JoinSet::new();
    for name in names {
        if loads.len() >= LOADS_AT_ONCE
            && let Some(Ok((n, r))) = loads.join_next().await
        {
            loaded.insert(n, r);
        }
        let cfg = new.clone();
        loads.spawn(async move {
            let store = open_store(&cfg, &name).await;
            let doc = store.load().await.map_err(|e| e.to_string());
            (name, doc.map(|d| (store, d)))
        });
    }
    while let Some(j) = loads.join_next().await {
        if let Ok((n, r)) = j {
            loaded.insert(n, r);
        }
    }
}

/// Apply a finished preparation, or refuse it (a running service whose inputs cannot be
/// prepared, or a preparation that failed inside readyprobe) with the running config kept. A
/// running service is changed when its settings or its inputs digest differ.
pub(super) fn finish(
    shell: &mut Shell,
    w: &mut Wiring,
    syncs: &mut Syncs,
    staged: Result<Staged, tokio::task::JoinError>,
) {
    let Staged {
        new,
        mut prepared,
        mut loaded,
    } = match staged {
        Ok(s) => s,
        Err(e) => {
            let problem = format!("preparing the reload failed inside readyprobe: {e}");
            return refuse(shell, vec![problem]);
        }
    };
    let new = Arc::unwrap_or_clone(new);
    let plan = Plan::of(&w.fleet, &new);
    let mut take = |name: &str| {
        prepared
            .remove(name)
            .unwrap_or_else(|| Err(vec!["could not be prepared".to_string()]))
    };
    let mut changed = Vec::new();
    // Unchanged services whose stable-name loop restarts: `[stable_name_probe]` changed.
    let stable_changed = !same(&w.fleet.cfg.stable_name_probe, &new.stable_name_probe);
    let mut kept = Vec::new();
    let mut problems = Vec::new();
    for &(id, svc, settings_changed) in &plan.running {
        let name = &svc.service.name;
        match take(name) {
            Ok(probes) => {
                let inputs = w.fleet.live.get(&id).map(|l| l.inputs);
                if settings_changed || inputs != Some(probes.1) {
                    changed.push((id, svc, probes));
                } else if stable_changed {
                    kept.push((id, probes.0));
                }
            }
            // A problem names config paths: escaped before it is logged.
            Err(p) => problems.extend(
                p.iter()
                    .map(|p| escape_controls(&format!("{name}: {p}")).into_owned()),
            ),
        }
    }
    if !problems.is_empty() {
        return refuse(shell, problems);
    }
    let to_start: Vec<_> = plan
        .to_start
        .iter()
        .map(|s| {
            let doc = loaded.remove(&s.service.name);
            (*s, take(&s.service.name), doc)
        })
        .collect();
    for warning in &new.warnings {
        tracing::warn!("config: {warning}");
    }
    // Queues first: an added service may publish at once (an override in its document).
    for s in &new.services {
        shell.sinks.extend(w.sinks.add(&s.namespace));
    }
    for id in &plan.removed {
        remove(shell, w, syncs, *id);
    }
    syncs.fill(shell);
    let changed_names: Vec<String> = changed
        .iter()
        .map(|(_, s, _)| s.service.name.clone())
        .collect();
    for (id, svc, probes) in changed {
        change(shell, &mut w.fleet, (id, svc, probes), &new, stable_changed);
    }
    for (id, probes) in kept {
        follow_stable_name_probe(shell, &mut w.fleet, id, &new, &probes, true);
    }
    let (added, unavailable) = start_services(shell, &mut w.fleet, &new, to_start);
    // Every service of the new config publishes to its namespace (one that cannot start, its
    // ServiceUnavailable datum): the sinks of any other namespace flush and stop.
    let used: BTreeSet<String> = new.services.iter().map(|s| s.namespace.clone()).collect();
    w.sinks.retain(&mut shell.sinks, &used);
    let live: BTreeSet<&str> = w
        .fleet
        .live
        .values()
        .map(|l| l.cfg.service.name.as_str())
        .collect();
    let down = new
        .services
        .iter()
        .filter(|s| !live.contains(&s.service.name.as_str()))
        .map(|s| (s.service.name.clone(), s.namespace.clone()))
        .collect();
    shell.feed(Input::SetUnavailable(down));
    let record = Reload {
        applied: true,
        added,
        removed: plan.removed_names,
        changed: changed_names,
        unavailable,
        problems: Vec::new(),
    };
    tracing::info!(
        added = %few(&record.added),
        removed = %few(&record.removed),
        changed = %few(&record.changed),
        unavailable = %few(&record.unavailable),
        services = live.len(),
        "reload applied"
    );
    w.fleet.cfg = new;
    let now = shell.clock.now_ms();
    shell.write(now, &Record::Reload(record));
}

/// The config that waited for the reload just done, if any.
pub(super) fn next_waiting(pending: &mut Pending) -> Option<Result<Config, ConfigError>> {
    pending.waiting.take()
}

/// Each problem of an invalid config, located as `check` prints it.
fn config_problems(e: &ConfigError) -> Vec<String> {
    let path = e.path.display().to_string();
    let file = escape_controls(&path);
    e.issues
        .iter()
        .map(|i| {
            let (key, message) = (escape_controls(&i.key), escape_controls(&i.message));
            match i.line {
                Some(l) => format!("{file}:{l}: {key}: {message}"),
                None => format!("{file}: {key}: {message}"),
            }
        })
        .collect()
}

fn refuse(shell: &mut Shell, problems: Vec<String>) {
    tracing::error!(
        problems = %problems.join("; "),
        "reload refused: the running config is kept unchanged"
    );
    let record = Reload {
        applied: false,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
        unavailable: Vec::new(),
        problems,
    };
    let now = shell.clock.now_ms();
    shell.write(now, &Record::Reload(record));
}

/// Stop a running service: abort its loops, queue the final save of its state (it runs after
/// any sync of the service in flight, within the cap on syncs), drop it from the fold (its
/// datums stop) and forget its store.
fn remove(shell: &mut Shell, w: &mut Wiring, syncs: &mut Syncs, id: ServiceId) {
    w.fleet.stop_service(id);
    syncs.queue_removed(shell, id);
    shell.feed(Input::RemoveService(id));
    shell.remove_store(id);
}

/// Take a running service's new settings: restart the loops of the branches whose settings
/// changed (every branch's, when the inputs read otherwise) and start those that are new, stop
/// those that are gone; the rest run on.
/// Its stable-name loop restarts when what it probes changed (the stable name, the branches,
/// the probe settings or inputs) or `[stable_name_probe]` did (`stable_changed`).
fn change(
    shell: &mut Shell,
    fleet: &mut Fleet,
    (id, svc, (probes, inputs)): (ServiceId, &ServiceConfig, Probes),
    new: &Config,
    stable_changed: bool,
) {
    let Some(live) = fleet.live.get_mut(&id) else {
        return;
    };
    let old = &live.cfg;
    let shared = live.inputs == inputs
        && same(&old.service, &svc.service)
        && same(&old.probe, &svc.probe)
        && same(&old.policy, &svc.policy);
    let stable_restart = stable_changed
        || live.inputs != inputs
        || !same(&old.service, &svc.service)
        || !same(&old.probe, &svc.probe)
        || !same(&old.branches, &svc.branches);
    let mut branches = Vec::new();
    let mut restart = Vec::new();
    for b in &svc.branches {
        let before = old.branches.iter().find(|o| o.name == b.name);
        let reset = before.is_some_and(|o| !shared || !same(o, b));
        if reset || before.is_none() {
            restart.push(b.name.clone());
        }
        branches.push(BranchChange {
            name: b.name.clone(),
            reset,
        });
    }
    let mut loops = std::mem::take(&mut live.loops);
    loops.retain(|name, (_, h)| {
        let keep = !restart.contains(name) && svc.branches.iter().any(|b| &b.name == name);
        if !keep {
            h.abort();
        }
        keep
    });
    if let Some(live) = fleet.live.get_mut(&id) {
        live.cfg = svc.clone();
        live.inputs = inputs;
    }
    follow_stable_name_probe(shell, fleet, id, new, &probes, stable_restart);
    let fresh = probes
        .into_iter()
        .filter(|p| restart.contains(&p.branch.name))
        .collect();
    let (fresh, paces) = fleet.loops.spawn(id, svc, fresh);
    loops.extend(fresh);
    if let Some(live) = fleet.live.get_mut(&id) {
        live.loops = loops;
    }
    shell.feed(Input::ChangeService(Box::new(ServiceChange {
        id,
        namespace: svc.namespace.clone(),
        policy: svc.policy.clone(),
        branches,
    })));
    // Paced after the change, so a restarted branch starts at the pace of its new state (not
    // logged suspect for the state it had before the reload reset it).
    shell.pace(id, &svc.probe, paces);
}

/// Make running service `id`'s stable-name loop follow `cfg`'s `[stable_name_probe]`: stopped
/// when it is off (the service's `SelectedBranch` and `StableNameSuccess` datums stop with it),
/// started from `probes` when it is on and none runs, restarted when `restart` (what it probes
/// changed). Rounds of a stopped or replaced loop are dropped ([`Fleet::route`]).
fn follow_stable_name_probe(
    shell: &mut Shell,
    fleet: &mut Fleet,
    id: ServiceId,
    cfg: &Config,
    probes: &[BranchProbe],
    restart: bool,
) {
    let Some(live) = fleet.live.get_mut(&id) else {
        return;
    };
    let enabled = cfg.stable_name_probe.enabled;
    if (restart || !enabled)
        && let Some((_, h)) = live.stable.take()
    {
        h.abort();
        if !enabled {
            shell.feed(Input::StableNameStopped { service: id });
        }
    }
    if enabled && live.stable.is_none() {
        live.stable = fleet.loops.spawn_stable_name(id, &live.cfg, cfg, probes);
    }
}

/// Start the services that are not running, as at start-up: each whose inputs or control
/// document are unavailable is reported and left out. Returns the names started and those
/// left out.
fn start_services(
    shell: &mut Shell,
    fleet: &mut Fleet,
    cfg: &Config,
    to_start: Vec<(&ServiceConfig, Prepared, Option<Loaded>)>,
) -> (Vec<String>, Vec<String>) {
    let (mut added, mut unavailable) = (Vec::new(), Vec::new());
    for (svc, prepared, loaded) in to_start {
        let name = svc.service.name.clone();
        let now = shell.clock.now_ms();
        let loaded = prepared.and_then(|probes| match loaded {
            Some(Ok((store, doc))) => Ok((probes, store, doc)),
            Some(Err(e)) => Err(vec![e]),
            None => Err(vec!["its control document was not loaded".to_string()]),
        });
        let ((probes, inputs), store, doc) = match loaded {
            Ok(l) => l,
            Err(problems) => {
                report_unavailable(shell, now, &name, problems);
                unavailable.push(name);
                continue;
            }
        };
        let id = fleet.next_id;
        fleet.next_id += 1;
        let location = store.location();
        shell.feed(Input::AddService(Box::new(NewService {
            id,
            service: name.clone(),
            namespace: svc.namespace.clone(),
            policy: svc.policy.clone(),
            branches: svc.branches.iter().map(|b| b.name.clone()).collect(),
            store_location: location.clone(),
            doc,
        })));
        let restored = shell.fold.restored(id).to_vec();
        let record = start_record(cfg, svc, location, restored, None);
        shell.evidence.record_for(now, &name, &record);
        shell.add_store(id, store);
        let stable = fleet.loops.spawn_stable_name(id, svc, cfg, &probes);
        let (loops, paces) = fleet.loops.spawn(id, svc, probes);
        shell.pace(id, &svc.probe, paces);
        let loops: BTreeMap<_, _> = loops.into_iter().collect();
        fleet.live.insert(
            id,
            Live {
                cfg: svc.clone(),
                inputs,
                loops,
                stable,
            },
        );
        added.push(name);
    }
    (added, unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A two-service config: `top` goes at the top level, `alpha` into the first service.
    fn config(top: &str, alpha: &str) -> Config {
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
endpoint = "alpha-primary.example.internal"
port = 5432

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

    fn running(cfg: &Config) -> BTreeMap<ServiceId, Live> {
        cfg.services
            .iter()
            .enumerate()
            .map(|(id, s)| {
                let live = Live {
                    cfg: s.clone(),
                    inputs: Default::default(),
                    loops: BTreeMap::new(),
                    stable: None,
                };
                (id, live)
            })
            .collect()
    }

    fn changed<'a>(plan: &Plan<'a>) -> Vec<&'a str> {
        plan.running
            .iter()
            .filter(|r| r.2)
            .map(|(_, s, _)| s.service.name.as_str())
            .collect()
    }

    /// A top-level default changes only the services that take it: one that sets the key itself
    /// keeps its effective settings, so it is not changed (nor are its loops restarted).
    #[test]
    fn a_changed_default_changes_only_the_services_that_take_it() {
        let own = "readiness = { initial = \"unready\" }";
        let old = config("[readiness]\ninitial = \"unknown\"", own);
        let new = config("[readiness]\ninitial = \"ready\"", own);
        let plan = Plan::between(&old, &running(&old), &new);
        assert_eq!(changed(&plan), ["beta"]);
        assert!(plan.removed.is_empty() && plan.to_start.is_empty());
        // The same for the default namespace and another readiness default.
        let own = "namespace = \"Own\"\nreadiness = { min_attempts = 4 }";
        let old = config("[publish]\nnamespace = \"A\"", own);
        let new = config(
            "[publish]\nnamespace = \"B\"\n[readiness]\nmin_attempts = 3",
            own,
        );
        let plan = Plan::between(&old, &running(&old), &new);
        assert_eq!(changed(&plan), ["beta"]);
    }

    /// A log line names at most five services and counts the rest.
    #[test]
    fn a_log_line_names_a_few_services() {
        let names = |n: usize| (0..n).map(|i| format!("s{i}")).collect::<Vec<_>>();
        assert_eq!(few(&names(0)), "none");
        assert_eq!(few(&names(5)), "s0, s1, s2, s3, s4");
        assert_eq!(few(&names(1000)), "s0, s1, s2, s3, s4 and 995 more");
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
        assert!(keys("", "").is_empty());
    }
}
