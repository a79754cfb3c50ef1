//! The store syncs of a run: at most [`SYNCS_IN_FLIGHT`] at once, the others queued, final
//! saves (at a stop, or of a service a reload removed) each after its service's sync in flight.

use super::shell::{Shell, SyncOutcome};
use crate::fold::ServiceId;
use std::collections::HashMap;
use std::future::Future;
use tokio::task::JoinSet;

/// At most this many store syncs run at once. A poll queues every service and the queue
/// drains as syncs finish, so thousands of services never hold thousands of sync tasks (each
/// with a copy of its service's readiness) at once; the file store runs
/// [`FILE_OPS`](crate::state::FILE_OPS) operations at a time anyway.
pub(super) const SYNCS_IN_FLIGHT: usize = 4 * crate::state::FILE_OPS;

/// A sync's task.
pub(super) type SyncTask = std::pin::Pin<Box<dyn Future<Output = SyncOutcome> + Send>>;

/// A final save waiting for a slot.
pub(super) struct FinalSave {
    pub(super) service: ServiceId,
    /// A removed service's, built as it was removed (the fold forgets it then); `None` for a
    /// running one's at shutdown, built as it starts (so at most [`SYNCS_IN_FLIGHT`] copies of
    /// the readiness at once).
    pub(super) task: Option<SyncTask>,
}

/// The store syncs in flight, at most [`SYNCS_IN_FLIGHT`], and the ones queued behind them:
/// final saves first, each once no sync of its service is in flight.
#[derive(Default)]
pub(super) struct Syncs {
    pub(super) set: JoinSet<SyncOutcome>,
    /// The service of each task, and whether it is a final save.
    pub(super) of: HashMap<tokio::task::Id, (usize, bool)>,
    /// Syncs in flight per service (a poll asks for every service: no scan of `of`).
    pub(super) busy: HashMap<usize, u32>,
    /// Services waiting for a free slot, in the order they were queued, each once.
    pub(super) queued: std::collections::VecDeque<usize>,
    pub(super) waiting: std::collections::HashSet<usize>,
    /// Final saves waiting, in the order they were queued.
    pub(super) finals: std::collections::VecDeque<FinalSave>,
}

impl Syncs {
    pub(super) fn busy(&self, service: usize) -> bool {
        self.busy.contains_key(&service)
    }

    /// Queue a sync of `service` unless one is in flight or queued already.
    pub(super) fn queue(&mut self, service: usize) {
        if !self.busy(service) && self.waiting.insert(service) {
            self.queued.push_back(service);
        }
    }

    /// Queue the final save of a service a reload removes: it starts once no sync of the
    /// service is in flight (so it writes last), and only once.
    pub(super) fn queue_removed(&mut self, shell: &Shell, service: ServiceId) {
        let store = shell.stores.get(&service).cloned();
        let sync = shell.sync_task(service);
        let task = async move {
            // Set as it starts: a sync in flight before it must not take the flag.
            if let Some(store) = store {
                store.save_next();
            }
            sync.await
        };
        self.finals.push_back(FinalSave {
            service,
            task: Some(Box::pin(task)),
        });
    }

    /// At shutdown: drop the queued syncs and queue the final save of every running service.
    pub(super) fn queue_shutdown(&mut self, shell: &Shell) {
        self.queued.clear();
        self.waiting.clear();
        for &service in shell.stores.keys() {
            self.finals.push_back(FinalSave {
                service,
                task: None,
            });
        }
    }

    /// The first final save whose service has no sync in flight.
    pub(super) fn next_final(&mut self) -> Option<FinalSave> {
        let i = self.finals.iter().position(|f| !self.busy(f.service))?;
        self.finals.remove(i)
    }

    /// Start final saves, then queued syncs, while fewer than [`SYNCS_IN_FLIGHT`] run (a
    /// service a reload removed meanwhile is skipped).
    pub(super) fn fill(&mut self, shell: &Shell) {
        while self.set.len() < SYNCS_IN_FLIGHT {
            if let Some(f) = self.next_final() {
                let task = f.task.unwrap_or_else(|| {
                    if let Some(store) = shell.stores.get(&f.service) {
                        store.save_next();
                    }
                    Box::pin(shell.sync_task(f.service))
                });
                self.start(f.service, true, task);
                continue;
            }
            let Some(service) = self.queued.pop_front() else {
                break;
            };
            self.waiting.remove(&service);
            if shell.stores.contains_key(&service) && !self.busy(service) {
                self.start(service, false, Box::pin(shell.sync_task(service)));
            }
        }
    }

    pub(super) fn start(&mut self, service: usize, last: bool, task: SyncTask) {
        let h = self.set.spawn(task);
        self.of.insert(h.id(), (service, last));
        *self.busy.entry(service).or_default() += 1;
    }

    /// The next finished sync, its service and whether it was a final save; `None` when none
    /// is in flight.
    pub(super) async fn next(
        &mut self,
    ) -> Option<(usize, bool, Result<SyncOutcome, tokio::task::JoinError>)> {
        let (id, joined) = match self.set.join_next_with_id().await? {
            Ok((id, o)) => (id, Ok(o)),
            Err(e) => (e.id(), Err(e)),
        };
        let (service, last) = self.of.remove(&id).unwrap_or_else(|| {
            let service = joined.as_ref().map(|o| o.service).unwrap_or_default();
            (service, false)
        });
        if let Some(n) = self.busy.get_mut(&service) {
            *n -= 1;
            if *n == 0 {
                self.busy.remove(&service);
            }
        }
        Some((service, last, joined))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A final save waits for its service's sync in flight; the others start first, in the
    /// order they were queued, and it starts once that sync is done.
    #[test]
    fn a_final_save_waits_for_its_services_sync_in_flight() {
        let mut syncs = Syncs::default();
        let never = || -> Option<SyncTask> { Some(Box::pin(std::future::pending())) };
        syncs.busy.insert(1, 1);
        for service in [1, 2, 3] {
            let task = never();
            syncs.finals.push_back(FinalSave { service, task });
        }
        let order: Vec<_> = std::iter::from_fn(|| syncs.next_final())
            .map(|f| f.service)
            .collect();
        assert_eq!(order, [2, 3]);
        syncs.busy.clear();
        assert_eq!(syncs.next_final().map(|f| f.service), Some(1));
        assert!(syncs.next_final().is_none());
    }
}
