//! The fold's services: its start, and a reload's adding, removing and changing a service.

use super::*;
use crate::config::escape_controls;
use crate::readiness::{Millis, Readiness, Snapshot};
use crate::record::{RemovedBranch, Restored};
use std::collections::BTreeMap;

impl Fold {
    /// Start the fold: each branch's readiness restored from this prober's saved state in its
    /// service's document when there is one, and the stores' overrides taken. Returns the fold
    /// and what to log, record and publish at start.
    pub fn start(setup: Setup<'_>, now: Millis) -> (Fold, Vec<Effect>) {
        let mut fold = Fold {
            services: BTreeMap::new(),
            unavailable: setup.unavailable.to_vec(),
            branches: BTreeMap::new(),
            sinks: setup.sinks.to_vec(),
            metrics: setup.metrics,
            outstanding: BTreeMap::new(),
            handed: BTreeMap::new(),
            failures: BTreeMap::new(),
            failures_since: now,
            next_batch: 0,
            summary: RunSummary::default(),
            effects: Vec::new(),
            prober: String::new(),
            wakeup: None,
            removed_branches: Vec::new(),
        };
        fold.prober = setup.prober.to_string();
        for (i, s) in setup.services.iter().enumerate() {
            fold.start_service(i, s, now);
        }
        let effects = std::mem::take(&mut fold.effects);
        (fold, effects)
    }

    fn start_service(&mut self, svc: ServiceId, setup: &ServiceSetup<'_>, now: Millis) {
        let prober = self.prober.clone();
        let prober = prober.as_str();
        let mine = setup.doc.probers.get(prober);
        let mut restored = Vec::new();
        let mut branches = Vec::with_capacity(setup.branches.len());
        for name in setup.branches {
            let readiness = match mine.and_then(|s| s.branches.get(name)) {
                Some(snap) => {
                    restored.push(Restored {
                        branch: name.clone(),
                        state: snap.state,
                        since: snap.since,
                    });
                    Readiness::restore(setup.policy.clone(), snap.clone().clamped(now))
                }
                None => Readiness::new(setup.policy.clone()),
            };
            branches.push(Branch {
                svc,
                name: name.clone(),
                suspect: readiness.suspect().is_some(),
                readiness,
                acc: TickAcc::default(),
                ov: None,
            });
        }
        self.branches.insert(svc, branches);
        let service = setup.service;
        for r in &restored {
            self.effects.push(log(
                Level::Info,
                format!("restored readiness state from {}", setup.store_location),
                Fields {
                    state: Some(r.state.as_str().into()),
                    ..branch_fields(service, &r.branch)
                },
            ));
        }
        self.services.insert(
            svc,
            Svc {
                name: service.to_string(),
                namespace: setup.namespace.to_string(),
                sinks: setup.sinks.to_vec(),
                restored,
                // Decisions this prober id already has in the document were taken (and recorded)
                // by an earlier run: a restart must not record them again as news.
                recorded: setup
                    .doc
                    .approvals
                    .iter()
                    .filter(|a| a.decisions.contains_key(prober))
                    .map(|a| a.id.clone())
                    .collect(),
                // Likewise markers this prober id took before: an earlier run recorded them.
                markers: setup
                    .doc
                    .markers
                    .iter()
                    .filter(|m| m.taken.contains_key(prober))
                    .map(|m| m.id.clone())
                    .collect(),
                both_unready_logged: false,
                selected_branch: None,
                stable_name_success: None,
                sync_failures: BTreeMap::new(),
                counted_since: now,
                pacing: BTreeMap::new(),
            },
        );
        for (b, snap) in mine.map(|p| &p.branches).into_iter().flatten() {
            if setup.branches.contains(b) && snap.clone().clamped(now) != *snap {
                self.effects.push(log(
                    Level::Warn,
                    "saved state is dated after this host's clock (clock skew between probers, or a clock stepped back): its future instants are ignored",
                    branch_fields(service, b),
                ));
            }
        }
        self.apply_overrides(svc, setup.doc, now);
        for b in mine.map(|p| p.branches.keys()).into_iter().flatten() {
            if !setup.branches.contains(b) {
                self.effects.push(log(
                    Level::Warn,
                    "saved state has a branch that is not in the config; it is dropped at the next save",
                    branch_fields(service, b),
                ));
            }
        }
    }

    /// Add a service, at the start of the run or brought by a reload: its branches restored
    /// from its control document, its `start` record (with what was restored) first.
    pub(super) fn add_service(&mut self, n: &NewService, now: Millis) {
        if self.services.contains_key(&n.id) {
            return;
        }
        let setup = ServiceSetup {
            service: &n.service,
            namespace: &n.namespace,
            sinks: &n.sinks,
            policy: &n.policy,
            branches: &n.branches,
            store_location: &n.store_location,
            doc: &n.doc,
        };
        let at = self.effects.len();
        self.start_service(n.id, &setup, now);
        let mut start = (*n.start).clone();
        start.restored = self.restored(n.id).to_vec();
        let record = Effect::Record(now, n.service.clone(), Record::Start(start));
        self.effects.insert(at, record);
        if n.by_reload {
            self.effects.push(log(
                Level::Info,
                "service added by a reload",
                service_fields(&n.service),
            ));
        }
    }

    /// Drop a service a reload removed: its branches, overrides and datums.
    pub(super) fn remove_service(&mut self, svc: ServiceId) {
        let Some(s) = self.services.remove(&svc) else {
            return;
        };
        self.branches.remove(&svc);
        self.effects.push(log(
            Level::Info,
            "service removed by a reload: its datums stop",
            service_fields(&s.name),
        ));
    }

    /// Take a running service's new settings. An untouched branch keeps everything; a reset
    /// one keeps its state (so a reload never makes an unready branch look ready, nor a ready
    /// one unknown) and gathers its window afresh under the new settings; a new one starts in
    /// the policy's initial state; one no longer named is dropped.
    pub(super) fn change_service(&mut self, c: ServiceChange) {
        let Some(s) = self.services.get_mut(&c.id) else {
            return;
        };
        s.namespace = c.namespace;
        s.sinks = c.sinks;
        let name = s.name.clone();
        let mut old: BTreeMap<String, Branch> = self
            .branches
            .remove(&c.id)
            .unwrap_or_default()
            .into_iter()
            .map(|b| (b.name.clone(), b))
            .collect();
        let mut branches = Vec::with_capacity(c.branches.len());
        for bc in c.branches {
            let branch = match old.remove(&bc.name) {
                Some(mut b) if !bc.reset => {
                    // Carried whole (state, window, holding clocks): a reload never makes a
                    // failing branch look better than its evidence. A new policy judges the
                    // carried window from now on.
                    if *b.readiness.policy() != c.policy {
                        let snap = b.readiness.snapshot();
                        b.readiness = Readiness::restore(c.policy.clone(), snap);
                    }
                    b
                }
                Some(mut b) => {
                    let snap = b.readiness.snapshot();
                    let fresh = Snapshot {
                        state: snap.state,
                        since: snap.since,
                        unready_holding_since: None,
                        ready_holding_since: None,
                        attempts: Vec::new(),
                        flaps: Vec::new(),
                    };
                    b.readiness = Readiness::restore(c.policy.clone(), fresh);
                    self.effects.push(log(
                        Level::Info,
                        "a reload changed the branch's target (endpoint, port or probe kind): the state is kept, its window and clocks start afresh",
                        Fields {
                            state: Some(b.readiness.state().as_str().into()),
                            ..branch_fields(&name, &bc.name)
                        },
                    ));
                    b
                }
                None => Branch {
                    svc: c.id,
                    name: bc.name,
                    readiness: Readiness::new(c.policy.clone()),
                    acc: TickAcc::default(),
                    ov: None,
                    suspect: false,
                },
            };
            branches.push(branch);
        }
        self.branches.insert(c.id, branches);
        for ix in 0..self.branch_count(c.id) {
            self.repace(c.id, ix);
        }
        for b in old.keys() {
            self.effects.push(log(
                Level::Info,
                "branch removed by a reload: its datums stop",
                branch_fields(&name, b),
            ));
            self.removed_branches.push(RemovedBranch {
                service: name.clone(),
                branch: b.clone(),
            });
        }
    }
}

impl Fold {
    /// A service that cannot start: said at ERROR and recorded. A problem names config paths:
    /// control characters in it never reach the terminal raw.
    pub(super) fn service_unavailable(
        &mut self,
        service: String,
        problems: Vec<String>,
        now: Millis,
    ) {
        self.effects.push(log(
            Level::Error,
            "this service cannot start: it is not probed (ServiceUnavailable = 1); the other services run",
            Fields {
                problems: Some(escape_controls(&problems.join("; ")).into_owned()),
                ..service_fields(&escape_controls(&service))
            },
        ));
        let record = Record::ServiceUnavailable(ServiceUnavailable { problems });
        self.effects.push(Effect::Record(now, service, record));
    }

    /// A reload applied (INFO, a few names per list: the record keeps every name) or refused
    /// (ERROR, every problem), then its `reload` record, with the branches its changes removed.
    pub(super) fn reloaded(&mut self, mut r: Reload, services: usize, now: Millis) {
        r.removed_branches = std::mem::take(&mut self.removed_branches);
        let line = if r.applied {
            log(
                Level::Info,
                "reload applied",
                Fields {
                    added: Some(few(&r.added)),
                    removed: Some(few(&r.removed)),
                    changed: Some(few(&r.changed)),
                    unavailable: Some(few(&r.unavailable)),
                    services: Some(services as u64),
                    ..Fields::default()
                },
            )
        } else {
            log(
                Level::Error,
                "reload refused: the running config is kept unchanged",
                Fields {
                    problems: Some(r.problems.join("; ")),
                    ..Fields::default()
                },
            )
        };
        self.effects.push(line);
        self.record(now, Record::Reload(r));
    }

    /// A config read again waits for the reload being prepared.
    pub(super) fn reload_waiting(&mut self, replaced: bool) {
        let fields = more(MoreFields {
            replaced: Some(replaced),
            ..MoreFields::default()
        });
        self.effects.push(log(
            Level::Info,
            "a reload is in progress: the config just read is taken once it is done (a newer one replaces it)",
            fields,
        ));
    }

    /// A reload admitted: what it prepares beside the run.
    pub(super) fn reload_staging(
        &mut self,
        running: usize,
        changed: &[String],
        to_start: &[String],
    ) {
        let fields = Fields {
            changed: Some(few(changed)),
            ..more(MoreFields {
                running: Some(running as u64),
                to_start: Some(few(to_start)),
                ..MoreFields::default()
            })
        };
        let line = log(
            Level::Info,
            "reload: preparing services beside the run",
            fields,
        );
        self.effects.push(line);
    }

    /// A reload about to apply: the new config's warnings, then each likely rename.
    pub(super) fn reload_planned(&mut self, warnings: Vec<String>, renames: Vec<Rename>) {
        for w in warnings {
            let line = log(Level::Warn, format!("config: {w}"), Fields::default());
            self.effects.push(line);
        }
        for r in renames {
            let fields = Fields {
                removed: Some(escape_controls(&r.removed).into_owned()),
                added: Some(escape_controls(&r.added).into_owned()),
                ..more(MoreFields {
                    endpoints: Some(escape_controls(&r.endpoints.join(", ")).into_owned()),
                    ..MoreFields::default()
                })
            };
            self.effects.push(log(
                Level::Warn,
                "a reload removed a service and added one that probes the same endpoints: a rename is a remove and an add, so the added service starts from its own state, not the removed one's",
                fields,
            ));
        }
    }

    /// The sinks of namespaces no service publishes to any more are stopping.
    pub(super) fn namespaces_retired(&mut self, namespaces: Vec<String>) {
        for ns in namespaces {
            let fields = more(MoreFields {
                namespace: Some(ns),
                ..MoreFields::default()
            });
            self.effects.push(log(
                Level::Info,
                "no service publishes to this namespace any more: its sinks send what they hold and stop",
                fields,
            ));
        }
    }

    /// The final save of a service a reload removed: saved, or its document keeps what it had.
    pub(super) fn removed_saved(&mut self, saved: Result<String, String>) {
        let line = match saved {
            Ok(location) => log(
                Level::Info,
                "saved the state of a service a reload removed",
                Fields {
                    state: Some(location),
                    ..Fields::default()
                },
            ),
            Err(error) => log(
                Level::Error,
                "cannot save the state of a service a reload removed; its document keeps the last state saved",
                Fields {
                    error: Some(error),
                    ..Fields::default()
                },
            ),
        };
        self.effects.push(line);
    }
}

/// Up to a few names, then how many more: a log line stays short with a thousand services (the
/// `reload` record keeps every name).
pub(super) fn few(names: &[String]) -> String {
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

#[cfg(test)]
mod few_tests {
    use super::few;

    /// A log line names at most five services and counts the rest.
    #[test]
    fn a_log_line_names_a_few_services() {
        let names = |n: usize| (0..n).map(|i| format!("s{i}")).collect::<Vec<_>>();
        assert_eq!(few(&names(0)), "none");
        assert_eq!(few(&names(5)), "s0, s1, s2, s3, s4");
        assert_eq!(few(&names(1000)), "s0, s1, s2, s3, s4 and 995 more");
    }
}
