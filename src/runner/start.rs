//! Start-up of a run: every service prepared and its control document loaded, each on its
//! own; the fold built; each service launched ([`launch`], the one way a service starts, at
//! start-up and at a reload) or reported unavailable; the `start` record of a service.

use super::shell::Shell;
use super::wiring::{Fleet, Live, Loops, Probes, RunOptions, Tag};
use crate::clock::Clock;
use crate::config::{Config, ServiceConfig, StoreKind};
use crate::control::ControlDoc;
use crate::fold::{Fold, Input, NewService, ServiceId, Setup};
use crate::probe::{self, PrepareError};
use crate::record::{Start, StartBranch};
use crate::scheduler::BranchEvent;
use crate::secrets::SecretCache;
use crate::sink::SinkQueue;
use crate::sink::evidence::EvidenceWriter;
use crate::state::{FileStore, S3Store, StateError, Store};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Open the configured state store for `service`'s control document.
pub async fn open_store(cfg: &Config, service: &str) -> Store {
    match &cfg.state.store {
        StoreKind::File => Store::File(FileStore::new(&cfg.state_dir, service)),
        StoreKind::S3(s3) => Store::S3(S3Store::new(s3, service).await),
    }
}

/// The services that could be prepared, each with its branch probes, and the ones that could
/// not, each with its problems.
pub(super) struct Prepared<'a> {
    pub(super) running: Vec<(&'a ServiceConfig, Probes)>,
    pub(super) resolver: Option<hickory_resolver::TokioResolver>,
    pub(super) unavailable: Vec<(&'a ServiceConfig, PrepareError)>,
}

/// Prepare every service on its own: one that cannot be prepared does not stop the others.
/// The resolver is built once; without it no service runs.
pub(super) fn prepare_all<'a>(cfg: &'a Config, secrets: &SecretCache) -> Prepared<'a> {
    let mut p = Prepared {
        running: Vec::new(),
        resolver: None,
        unavailable: Vec::new(),
    };
    let resolver = match probe::resolver(cfg) {
        Ok(r) => r,
        Err(e) => {
            p.unavailable = cfg.services.iter().map(|s| (s, e.clone())).collect();
            return p;
        }
    };
    for svc in &cfg.services {
        match probe::branches_and_digest(cfg, svc, secrets) {
            Ok(probes) => p.running.push((svc, probes)),
            Err(e) => p.unavailable.push((svc, e)),
        }
    }
    if !p.running.is_empty() {
        p.resolver = Some(resolver);
    }
    p
}

/// The services whose control document could be loaded, with it and their store, and the
/// ones whose document could not (unreadable or corrupt), with the error: those are not
/// probed, and their document is never written.
pub(super) struct Loaded<'a> {
    pub(super) running: Vec<(&'a ServiceConfig, Probes, Store, ControlDoc)>,
    pub(super) unavailable: Vec<(&'a ServiceConfig, Vec<String>)>,
    /// The first store error, for the exit code when no service can start.
    pub(super) first_error: Option<StateError>,
}

/// Load the control document of every prepared service, each on its own.
pub(super) async fn load_all<'a>(cfg: &Config, prepared: Prepared<'a>) -> Loaded<'a> {
    let mut l = Loaded {
        running: Vec::new(),
        unavailable: prepared
            .unavailable
            .into_iter()
            .map(|(svc, e)| (svc, problems_of(&e)))
            .collect(),
        first_error: None,
    };
    for (svc, probes) in prepared.running {
        let store = open_store(cfg, &svc.service.name).await;
        match store.load().await {
            Ok(doc) => l.running.push((svc, probes, store, doc)),
            Err(e) => {
                l.unavailable.push((svc, vec![e.to_string()]));
                l.first_error.get_or_insert(e);
            }
        }
    }
    l
}

pub(super) fn problems_of(e: &PrepareError) -> Vec<String> {
    e.problems.iter().map(ToString::to_string).collect()
}

/// Build the fold from the stored documents, write the start records (one per running service),
/// report each service that could not start, and start the branch loops.
pub(super) fn start(
    cfg: &Config,
    opts: &RunOptions,
    clock: Clock,
    loaded: Loaded<'_>,
    (evidence, sinks): (EvidenceWriter, Vec<(String, SinkQueue)>),
    (resolver, secrets): (hickory_resolver::TokioResolver, SecretCache),
    served: Option<std::sync::Arc<crate::serve::Feed>>,
) -> (Shell, Fleet, mpsc::Receiver<(Tag, BranchEvent)>) {
    let now = clock.now_ms();
    let unavailable: Vec<crate::fold::Unavailable> = loaded
        .unavailable
        .iter()
        .map(|(svc, _)| {
            let sinks = super::wiring::fold_sinks(cfg, svc);
            (svc.service.name.clone(), svc.namespace.clone(), sinks)
        })
        .collect();
    let mut sink_names: Vec<&'static str> = Vec::new();
    for (_, q) in &sinks {
        if !sink_names.contains(&q.name()) {
            sink_names.push(q.name());
        }
    }
    let setup = Setup {
        prober: &cfg.prober_id,
        services: &[],
        unavailable: &unavailable,
        sinks: &sink_names,
        metrics: cfg.publish.metrics,
    };
    let (fold, effects) = Fold::start(setup, now);
    let mut shell = Shell {
        fold,
        evidence,
        sinks,
        clock,
        stores: BTreeMap::new(),
        instances: BTreeMap::new(),
        instance: format!("{:016x}", rand::random::<u64>()),
        paces: BTreeMap::new(),
        served,
        prober: cfg.prober_id.clone(),
        publish_window: cfg.publish.interval,
        sync_bound: cfg.state.poll_interval.max(Duration::from_secs(5)),
    };
    let (tx, events) = mpsc::channel::<(Tag, BranchEvent)>(256);
    let mut fleet = Fleet {
        cfg: cfg.clone(),
        live: BTreeMap::new(),
        next_id: 0,
        loops: Loops {
            tx: Some(tx),
            resolver,
            clock,
            grace: opts.grace,
            stop: CancellationToken::new(),
            next_feed: 0,
            secrets,
        },
    };
    tokio::spawn(
        fleet
            .loops
            .secrets
            .clone()
            .refresh(fleet.loops.stop.clone()),
    );
    shell.execute(effects);
    // Every service enters the fold as a reload's does ([`launch`]); ids from 0.
    let duration_ms = opts.duration.map(|d| d.as_millis() as u64);
    for (svc, probes, store, doc) in loaded.running {
        let id = fleet.next_id;
        fleet.next_id += 1;
        let service = (svc, probes, store, doc);
        launch(
            &mut shell,
            &mut fleet,
            cfg,
            (id, service),
            (duration_ms, false),
        );
    }
    for (svc, problems) in loaded.unavailable {
        report_unavailable(&mut shell, &svc.service.name, problems);
    }
    let mut earlier = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&cfg.state_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("state-") && name.ends_with(".json") {
                earlier.push(e.path().display().to_string());
            }
        }
    }
    shell.feed(Input::EarlierStateFiles(earlier));
    (shell, fleet, events)
}

/// Launch service `id`: it enters the fold ([`Input::AddService`], which records its `start`
/// and restores its branches from its control document `doc`), its store is kept, its branch
/// loops (paced from the fold) and its stable-name loop start. The one way a service starts,
/// at start-up and at a reload (`by_reload`).
pub(super) fn launch(
    shell: &mut Shell,
    fleet: &mut Fleet,
    cfg: &Config,
    (id, (svc, (probes, inputs), store, doc)): (
        ServiceId,
        (&ServiceConfig, Probes, Store, ControlDoc),
    ),
    (duration_ms, by_reload): (Option<u64>, bool),
) {
    let store_location = store.location();
    let start = start_record(cfg, svc, store_location.clone(), duration_ms);
    if let Some(f) = &shell.served {
        // `/status` shows the document as loaded until the service's first sync.
        f.synced(id, &doc);
    }
    shell.feed(Input::AddService(Box::new(NewService {
        id,
        service: svc.service.name.clone(),
        namespace: svc.namespace.clone(),
        sinks: super::wiring::fold_sinks(cfg, svc),
        policy: svc.policy.clone(),
        branches: svc.branches.iter().map(|b| b.name.clone()).collect(),
        store_location,
        doc,
        start: Box::new(start),
        by_reload,
    })));
    shell.add_store(id, store);
    let stable = fleet.loops.spawn_stable_name(id, svc, cfg, &probes);
    let (loops, paces) = fleet.loops.spawn(id, svc, probes);
    shell.pace(id, &svc.probe, paces);
    let live = Live {
        cfg: svc.clone(),
        inputs,
        loops: loops.into_iter().collect(),
        stable,
    };
    fleet.live.insert(id, live);
}

/// The `start` record of a service (`restored` is the fold's to fill in).
fn start_record(
    cfg: &Config,
    svc: &ServiceConfig,
    state_store: String,
    duration_ms: Option<u64>,
) -> Start {
    Start {
        config: cfg.source.display().to_string(),
        branches: svc
            .branches
            .iter()
            .map(|b| StartBranch {
                name: b.name.clone(),
                role: b.role.as_str().to_string(),
                endpoint: b.endpoint.clone(),
                port: b.port,
            })
            .collect(),
        duration_ms,
        state_store,
        restored: Vec::new(),
        probe_interval_ms: Some(ms(svc.probe.interval)),
        probe_timeout_ms: Some(ms(svc.probe.timeout)),
        suspect_interval_ms: svc.probe.suspect_interval.map(ms),
        publish_interval_ms: Some(ms(cfg.publish.interval)),
        policy: crate::readiness::policy_lines(&svc.policy, None),
        approval_required: Some(svc.policy.approval_required),
        stable_name_interval_ms: cfg
            .stable_name_probe
            .enabled
            .then(|| ms(cfg.stable_name_probe.interval)),
        stable_name_end_to_end: cfg
            .stable_name_probe
            .enabled
            .then_some(cfg.stable_name_probe.end_to_end),
        namespace: Some(svc.namespace.clone()),
        initial: Some(svc.policy.initial),
    }
}

/// A duration in whole ms (saturating).
pub(super) fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Say at ERROR and in the evidence (the fold's effects) that a service is not probed.
pub(super) fn report_unavailable(shell: &mut Shell, service: &str, problems: Vec<String>) {
    let service = service.to_string();
    shell.feed(Input::ServiceUnavailable { service, problems });
}
