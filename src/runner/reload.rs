//! A reload (SIGHUP): the config read again with the start-up loader is applied to the running
//! process, service by service, or refused as a whole with the old config kept
//! (`docs/operations.md`, "Reload").
//!
//! Refused: an invalid config; a change to a setting that needs a restart ([`restart_keys`]); a
//! changed service whose new inputs cannot be prepared. Applied: removed services stop (their
//! loops are aborted, an attempt in flight is dropped, their state gets a final save); changed
//! services keep every branch whose settings are the same as they were (its loop, schedule and
//! readiness untouched) and restart the loops of the others, whose state is kept and whose window
//! starts afresh ([`crate::fold::BranchChange`]); new services start as at start-up, and so do
//! services that could not start before (retried at every reload).

use super::shell::Shell;
use super::{
    Fleet, Live, Syncs, Wiring, open_store, problems_of, report_unavailable, start_record,
};
use crate::config::{Config, ConfigError, ServiceConfig, escape_controls};
use crate::fold::{BranchChange, Input, NewService, ServiceChange, ServiceId};
use crate::probe::{self, BranchProbe};
use crate::record::{Record, Reload};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;

/// A service's branch probes, or why it cannot be prepared.
type Prepared = Result<Vec<BranchProbe>, Vec<String>>;

/// What the new config does to the running one, by service name.
struct Plan<'a> {
    /// Running services it drops.
    removed: Vec<ServiceId>,
    /// Names it drops (running or not).
    removed_names: Vec<String>,
    /// Running services whose settings it changes, with their new settings.
    changed: Vec<(ServiceId, &'a ServiceConfig)>,
    /// Services that are not running (new, or unable to start before).
    to_start: Vec<&'a ServiceConfig>,
}

/// Two settings are the same when they print the same: every config type derives `Debug`, over
/// every field (secrets are held as references, so their values are not compared: a secret that
/// changed under the same reference is read again only for a service that restarts).
fn same<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// The settings a running process cannot take without a restart, by config key: the state
/// store, the evidence file, the sinks and publish tick, the prober id and the resolver.
fn restart_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let p = (&old.publish, &new.publish);
    let checks = [
        ("prober_id", old.prober_id == new.prober_id),
        ("state_dir", old.state_dir == new.state_dir),
        ("[state]", same(&old.state, &new.state)),
        ("publish.interval", p.0.interval == p.1.interval),
        ("publish.sinks", p.0.sinks == p.1.sinks),
        (
            "[publish.cloudwatch]",
            same(&p.0.cloudwatch, &p.1.cloudwatch),
        ),
        ("evidence.path", old.evidence_path == new.evidence_path),
        (
            "evidence.max_size_mb",
            old.evidence_max_bytes == new.evidence_max_bytes,
        ),
        ("[dns]", same(&old.dns, &new.dns)),
    ];
    checks
        .into_iter()
        .filter(|(_, unchanged)| !unchanged)
        .map(|(key, _)| key)
        .collect()
}

impl<'a> Plan<'a> {
    fn of(fleet: &Fleet, new: &'a Config) -> Plan<'a> {
        let by_name: HashMap<&str, &ServiceConfig> = new
            .services
            .iter()
            .map(|s| (s.service.name.as_str(), s))
            .collect();
        let running: HashMap<&str, (ServiceId, &Live)> = fleet
            .live
            .iter()
            .map(|(id, l)| (l.cfg.service.name.as_str(), (*id, l)))
            .collect();
        let mut plan = Plan {
            removed: Vec::new(),
            removed_names: Vec::new(),
            changed: Vec::new(),
            to_start: Vec::new(),
        };
        for s in &fleet.cfg.services {
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
                Some((id, live)) if !same(&live.cfg, s) => plan.changed.push((*id, s)),
                Some(_) => {}
                None => plan.to_start.push(s),
            }
        }
        plan
    }
}

/// Prepare the named services of `cfg` off the runtime (secrets and CA files are read).
async fn prepare(cfg: &Config, names: Vec<String>) -> HashMap<String, Prepared> {
    let cfg = cfg.clone();
    let work = move || {
        let mut out = HashMap::new();
        for name in names {
            if let Some(svc) = cfg.services.iter().find(|s| s.service.name == name) {
                let r = probe::branches(&cfg, svc).map_err(|e| problems_of(&e));
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

/// Take a config read again: apply it, or refuse it and keep the running one.
pub(super) async fn apply(
    shell: &mut Shell,
    w: &mut Wiring,
    syncs: &mut Syncs,
    new: Result<Config, ConfigError>,
) {
    let new = match new {
        Ok(c) => c,
        Err(e) => return refuse(shell, config_problems(&e)),
    };
    let restart = restart_keys(&w.fleet.cfg, &new);
    if !restart.is_empty() {
        let problems = restart
            .iter()
            .map(|k| format!("{k} changed: it takes effect only after a restart"))
            .collect();
        return refuse(shell, problems);
    }
    let plan = Plan::of(&w.fleet, &new);
    let names = plan
        .changed
        .iter()
        .map(|(_, s)| s)
        .chain(&plan.to_start)
        .map(|s| s.service.name.clone())
        .collect();
    let mut prepared = prepare(&new, names).await;
    let mut take = |name: &str| {
        prepared
            .remove(name)
            .unwrap_or_else(|| Err(vec!["could not be prepared".to_string()]))
    };
    let mut changed = Vec::new();
    let mut problems = Vec::new();
    for (id, svc) in &plan.changed {
        match take(&svc.service.name) {
            Ok(probes) => changed.push((*id, *svc, probes)),
            Err(p) => problems.extend(p.iter().map(|p| format!("{}: {p}", svc.service.name))),
        }
    }
    if !problems.is_empty() {
        return refuse(shell, problems);
    }
    let to_start: Vec<_> = plan
        .to_start
        .iter()
        .map(|s| (*s, take(&s.service.name)))
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
    for (id, svc, probes) in changed {
        change(shell, &mut w.fleet, id, svc, probes);
    }
    let (added, unavailable) = start_services(shell, &mut w.fleet, &new, to_start).await;
    let live: Vec<&str> = w
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
        changed: plan
            .changed
            .iter()
            .map(|(_, s)| s.service.name.clone())
            .collect(),
        unavailable,
        problems: Vec::new(),
    };
    tracing::info!(
        added = ?record.added,
        removed = ?record.removed,
        changed = ?record.changed,
        unavailable = ?record.unavailable,
        services = live.len(),
        "reload applied"
    );
    w.fleet.cfg = new;
    let now = shell.clock.now_ms();
    shell.write(now, &Record::Reload(record));
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

/// Stop a running service: abort its loops, start the final save of its state, drop it from
/// the fold (its datums stop) and forget its store.
fn remove(shell: &mut Shell, w: &mut Wiring, syncs: &mut Syncs, id: ServiceId) {
    w.fleet.stop_service(id);
    if let Some(store) = shell.stores.get(&id) {
        store.save_next();
    }
    syncs.spawn(shell, id);
    shell.feed(Input::RemoveService(id));
    shell.remove_store(id);
}

/// Take a running service's new settings: restart the loops of the branches whose settings
/// changed and start those that are new, stop those that are gone; the rest run on.
fn change(
    shell: &mut Shell,
    fleet: &mut Fleet,
    id: ServiceId,
    svc: &ServiceConfig,
    probes: Vec<BranchProbe>,
) {
    let Some(live) = fleet.live.get_mut(&id) else {
        return;
    };
    let old = &live.cfg;
    let shared = same(&old.service, &svc.service)
        && same(&old.probe, &svc.probe)
        && same(&old.policy, &svc.policy);
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
    let fresh = probes
        .into_iter()
        .filter(|p| restart.contains(&p.branch.name))
        .collect();
    loops.extend(fleet.loops.spawn(id, svc, fresh));
    if let Some(live) = fleet.live.get_mut(&id) {
        live.loops = loops;
        live.cfg = svc.clone();
    }
    shell.feed(Input::ChangeService(Box::new(ServiceChange {
        id,
        namespace: svc.namespace.clone(),
        policy: svc.policy.clone(),
        branches,
    })));
}

/// Start the services that are not running, as at start-up: each whose inputs or control
/// document are unavailable is reported and left out. Returns the names started and those
/// left out.
async fn start_services(
    shell: &mut Shell,
    fleet: &mut Fleet,
    cfg: &Config,
    to_start: Vec<(&ServiceConfig, Prepared)>,
) -> (Vec<String>, Vec<String>) {
    let (mut added, mut unavailable) = (Vec::new(), Vec::new());
    for (svc, prepared) in to_start {
        let name = svc.service.name.clone();
        let now = shell.clock.now_ms();
        let probes = match prepared {
            Ok(p) => p,
            Err(problems) => {
                report_unavailable(shell, now, &name, problems);
                unavailable.push(name);
                continue;
            }
        };
        let store = open_store(cfg, &name).await;
        let doc = match store.load().await {
            Ok(d) => d,
            Err(e) => {
                report_unavailable(shell, now, &name, vec![e.to_string()]);
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
        let loops: BTreeMap<_, _> = fleet.loops.spawn(id, svc, probes).into_iter().collect();
        fleet.live.insert(
            id,
            Live {
                cfg: svc.clone(),
                loops,
            },
        );
        added.push(name);
    }
    (added, unavailable)
}
