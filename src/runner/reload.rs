//! A reload (SIGHUP) executed: the config read again with the start-up loader is admitted or
//! refused, staged beside the run loop, planned and applied (`docs/operations.md`, "Reload").
//! One direction: signal → [`request`] (the config read again, [`reload_plan::admit`]) →
//! [`stage`] (prepare every service the new config runs, load the documents of those it starts,
//! off the loop; SIGHUPs meanwhile coalesce in [`Pending`]) → [`finish`]
//! ([`reload_plan::plan`], pure) → one step per planned item (remove, change, start) → the fold's
//! inputs and the `reload` record. What to do is the plan's; this module only does it.

use super::shell::Shell;
use super::start::{launch, open_store, problems_of, report_unavailable};
use super::syncs::Syncs;
use super::wiring::{Fleet, Probes, Wiring};
use crate::config::{Config, ConfigError, ServiceConfig, escape_controls};
use crate::control::ControlDoc;
use crate::fold::{BranchChange, Input, Rename, ServiceChange, ServiceId};
use crate::probe::{self, BranchProbe, InputsDigest};
use crate::record::Reload;
use crate::reload_plan::{self, Change, Running};
use crate::secrets::SecretCache;
use crate::state::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A service's branch probes and inputs digest, or why it cannot be prepared.
type Prepared = Result<Probes, Vec<String>>;

/// A service's store and control document as loaded, or why it could not be.
type Loaded = Result<(Store, ControlDoc), String>;

/// Prepare the named services of `cfg` off the runtime (secrets and CA files are read, as at
/// start-up).
async fn prepare(
    cfg: Arc<Config>,
    names: Vec<String>,
    secrets: SecretCache,
) -> HashMap<String, Prepared> {
    // Secrets Manager secrets the new config names for the first time are read now; the ones
    // already read are kept (their own task reads them again).
    secrets.read_missing(&cfg).await;
    let work = move || {
        let mut out = HashMap::new();
        for name in names {
            if let Some(svc) = cfg.services.iter().find(|s| s.service.name == name) {
                let r =
                    probe::branches_and_digest(&cfg, svc, &secrets).map_err(|e| problems_of(&e));
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
    /// The running services it prepared again (the others it prepared are to start).
    running: Vec<String>,
    prepared: HashMap<String, Prepared>,
    loaded: HashMap<String, Loaded>,
}

impl Staged {
    /// What staging found for each service, as the plan takes it: a running service's inputs
    /// digest, or one to start's once its control document is loaded too; else why not.
    fn found(&self) -> HashMap<String, reload_plan::Staged<InputsDigest>> {
        self.prepared
            .iter()
            .map(|(name, p)| {
                let found = match (p, self.loaded.get(name)) {
                    (Err(problems), _) => Err(problems.clone()),
                    (Ok((_, inputs)), _) if self.running.contains(name) => Ok(*inputs),
                    (Ok((_, inputs)), Some(Ok(_))) => Ok(*inputs),
                    (Ok(_), Some(Err(e))) => Err(vec![e.clone()]),
                    (Ok(_), None) => Err(vec!["its control document was not loaded".to_string()]),
                };
                (name.clone(), found)
            })
            .collect()
    }
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
        shell.feed(Input::ReloadWaiting { replaced });
        return;
    }
    let new = match new {
        Ok(c) => c,
        Err(e) => return refuse(shell, config_problems(&e)),
    };
    let staging = match reload_plan::admit(&fleet.cfg, &running(fleet), &new) {
        Ok(s) => s,
        Err(problems) => return refuse(shell, problems),
    };
    shell.feed(Input::ReloadStaging {
        running: staging.running.len(),
        changed: staging.changed,
        to_start: staging.to_start.clone(),
    });
    let secrets = fleet.loops.secrets.clone();
    let job = stage(Arc::new(new), staging.running, staging.to_start, secrets);
    pending.job.spawn(job);
}

/// The running services as the plan sees them.
fn running(fleet: &Fleet) -> Vec<Running<'_, InputsDigest>> {
    fleet
        .live
        .iter()
        .map(|(id, l)| Running {
            id: *id,
            cfg: &l.cfg,
            inputs: l.inputs,
        })
        .collect()
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
async fn stage(
    new: Arc<Config>,
    running: Vec<String>,
    to_start: Vec<String>,
    secrets: SecretCache,
) -> Staged {
    let names = running.iter().chain(&to_start).cloned().collect();
    let prepared = prepare(new.clone(), names, secrets).await;
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
        running,
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

/// Apply a finished preparation as [`reload_plan::plan`] says, or refuse it (a running service
/// whose inputs cannot be prepared, a config that leaves no service probed, a preparation
/// that failed inside readyprobe) with the running config kept.
pub(super) fn finish(
    shell: &mut Shell,
    w: &mut Wiring,
    syncs: &mut Syncs,
    staged: Result<Staged, tokio::task::JoinError>,
) {
    let staged = match staged {
        Ok(s) => s,
        Err(e) => {
            let problem = format!("preparing the reload failed inside readyprobe: {e}");
            return refuse(shell, vec![problem]);
        }
    };
    let found = staged.found();
    let new = Arc::unwrap_or_clone(staged.new);
    let (mut prepared, mut loaded) = (staged.prepared, staged.loaded);
    let plan = match reload_plan::plan(&w.fleet.cfg, &running(&w.fleet), &new, &found) {
        Ok(p) => p,
        Err(problems) => return refuse(shell, problems),
    };
    let renames = plan.renames.iter().map(|r| Rename {
        removed: r.removed.clone(),
        added: r.added.clone(),
        endpoints: r.endpoints.clone(),
    });
    shell.feed(Input::ReloadPlanned {
        warnings: new.warnings.clone(),
        renames: renames.collect(),
    });
    // Queues first: an added service may publish at once (an override in its document).
    for s in &new.services {
        w.sinks.add(&mut shell.sinks, &new, s);
    }
    for id in &plan.removed {
        remove(shell, w, syncs, *id);
    }
    syncs.fill(shell);
    let svc = |name: &str| new.services.iter().find(|s| s.service.name == name);
    let mut probes = |name: &str| prepared.remove(name).and_then(Result::ok);
    for c in &plan.changed {
        if let (Some(s), Some(p)) = (svc(&c.name), probes(&c.name)) {
            change(shell, &mut w.fleet, (c, s, p), &new);
        }
    }
    for id in &plan.stable_restarts {
        let name = w.fleet.live.get(id).map(|l| l.cfg.service.name.clone());
        if let Some((p, _)) = name.and_then(|n| probes(&n)) {
            follow_stable_name_probe(shell, &mut w.fleet, *id, &new, &p, true);
        }
    }
    let mut unavailable: Vec<(String, Vec<String>)> = plan.unavailable.clone();
    let mut added = Vec::new();
    for name in &plan.start {
        let (Some(s), Some(p), Some(Ok((store, doc)))) =
            (svc(name), probes(name), loaded.remove(name))
        else {
            unavailable.push((name.clone(), vec!["could not be prepared".to_string()]));
            continue;
        };
        let id = w.fleet.next_id;
        w.fleet.next_id += 1;
        launch(
            shell,
            &mut w.fleet,
            &new,
            (id, (s, p, store, doc)),
            (None, true),
        );
        added.push(name.clone());
    }
    for (name, problems) in &unavailable {
        report_unavailable(shell, name, problems.clone());
    }
    applied(shell, w, new, plan, added, unavailable);
}

/// Finish an applied reload: stop the sinks of namespaces no service uses, tell the fold which
/// services cannot start, log and record it, and keep the new config.
fn applied(
    shell: &mut Shell,
    w: &mut Wiring,
    new: Config,
    plan: reload_plan::Plan,
    added: Vec<String>,
    unavailable: Vec<(String, Vec<String>)>,
) {
    // Every service of the new config publishes to its namespace and targets (one that cannot
    // start, its ServiceUnavailable datum): the sinks of any other flush and stop.
    let retired = w.sinks.retain(&mut shell.sinks, &new);
    shell.feed(Input::NamespacesRetired(retired));
    let down = new
        .services
        .iter()
        .filter(|s| unavailable.iter().any(|(n, _)| *n == s.service.name))
        .map(|s| {
            let sinks = super::wiring::fold_sinks(&new, s);
            (s.service.name.clone(), s.namespace.clone(), sinks)
        })
        .collect();
    shell.feed(Input::SetUnavailable(down));
    let record = Reload {
        applied: true,
        added,
        removed: plan.removed_names,
        changed: plan.changed.into_iter().map(|c| c.name).collect(),
        unavailable: unavailable.into_iter().map(|(n, _)| n).collect(),
        problems: Vec::new(),
        removed_branches: Vec::new(),
    };
    let services = w.fleet.live.len();
    w.fleet.cfg = new;
    // Secrets no service names any more are not read again.
    w.fleet.loops.secrets.retain(&w.fleet.cfg);
    shell.feed(Input::Reloaded {
        record: Box::new(record),
        services,
    });
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
    let record = Reload {
        applied: false,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
        unavailable: Vec::new(),
        problems,
        removed_branches: Vec::new(),
    };
    let services = shell.stores.len();
    shell.feed(Input::Reloaded {
        record: Box::new(record),
        services,
    });
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

/// Take a running service's new settings as its [`Change`] says: restart the loops of the
/// branches it restarts and start those that are new, stop those that are gone; the rest run
/// on. The fold carries each branch's readiness over (afresh only where its target changed).
fn change(
    shell: &mut Shell,
    fleet: &mut Fleet,
    (c, svc, (probes, inputs)): (&Change, &ServiceConfig, Probes),
    new: &Config,
) {
    let Some(live) = fleet.live.get_mut(&c.id) else {
        return;
    };
    let restart: Vec<&str> = c
        .branches
        .iter()
        .filter(|b| b.restart)
        .map(|b| b.name.as_str())
        .collect();
    let mut loops = std::mem::take(&mut live.loops);
    loops.retain(|name, (_, h)| {
        let keep = !restart.contains(&name.as_str()) && c.branches.iter().any(|b| &b.name == name);
        if !keep {
            h.abort();
        }
        keep
    });
    live.cfg = svc.clone();
    live.inputs = inputs;
    follow_stable_name_probe(shell, fleet, c.id, new, &probes, c.stable_restart);
    let fresh = probes
        .into_iter()
        .filter(|p| restart.contains(&p.branch.name.as_str()))
        .collect();
    let (fresh, paces) = fleet.loops.spawn(c.id, svc, fresh);
    loops.extend(fresh);
    if let Some(live) = fleet.live.get_mut(&c.id) {
        live.loops = loops;
    }
    shell.feed(Input::ChangeService(Box::new(ServiceChange {
        id: c.id,
        namespace: svc.namespace.clone(),
        sinks: super::wiring::fold_sinks(new, svc),
        policy: svc.policy.clone(),
        branches: c
            .branches
            .iter()
            .map(|b| BranchChange {
                name: b.name.clone(),
                reset: b.retarget,
            })
            .collect(),
    })));
    // Paced after the change, so a restarted branch starts at the pace of its state then.
    shell.pace(c.id, &svc.probe, paces);
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
