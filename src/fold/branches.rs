//! The fold's branches: attempts, readiness transitions, deadline wake-ups and the pace of each
//! branch loop (suspect or not).

use super::*;
use crate::control;
use crate::datum::transition_datum;
use crate::probe::{Attempt, Outcome};
use crate::readiness::{Millis, ReadinessState, Transition};
use crate::record::{PublishReason, Record, TransitionRecord};

impl Fold {
    /// After a change of branch `ix` of `svc`'s readiness: a [`Effect::Pace`] when it became or
    /// stopped being suspect.
    pub(super) fn repace(&mut self, svc: ServiceId, ix: usize) {
        let service = self.svc_name(svc).to_string();
        let Some(b) = self.branch_mut(svc, ix) else {
            return;
        };
        let suspect = b.readiness.suspect();
        if suspect.is_some() == b.suspect {
            return;
        }
        b.suspect = suspect.is_some();
        let branch = b.name.clone();
        self.pace(svc, service, branch, suspect);
    }

    /// Pace branch `branch` of `svc` (named `service`): the effect, then, when its loop is
    /// paced (adaptive probing on), the line that says at which interval it is probed now.
    fn pace(&mut self, svc: ServiceId, service: String, branch: String, suspect: Option<Suspect>) {
        let pacing = self.services.get(&svc).and_then(|s| s.pacing.get(&branch));
        let line = pacing.map(|p| match suspect {
            Some(why) => log(
                Level::Info,
                "branch suspect: probing at its suspect interval",
                Fields {
                    more: Some(Box::new(MoreFields {
                        why: Some(why.to_string()),
                        interval: Some(p.suspect_interval.clone()),
                        ..MoreFields::default()
                    })),
                    ..branch_fields(&service, &branch)
                },
            ),
            None => log(
                Level::Info,
                "branch no longer suspect: probing at its interval",
                Fields {
                    more: Some(Box::new(MoreFields {
                        interval: Some(p.interval.clone()),
                        ..MoreFields::default()
                    })),
                    ..branch_fields(&service, &branch)
                },
            ),
        });
        self.effects.push(Effect::Pace {
            id: svc,
            branch,
            suspect,
        });
        self.effects.extend(line);
    }

    /// Loops of `svc`'s `branches` started with `pacing`: kept for their pace lines; those
    /// already suspect are paced at their suspect interval now.
    pub(super) fn paced(&mut self, svc: ServiceId, branches: Vec<String>, pacing: Option<Pacing>) {
        let Some(s) = self.services.get_mut(&svc) else {
            return;
        };
        let service = s.name.clone();
        for branch in &branches {
            match &pacing {
                Some(p) => s.pacing.insert(branch.clone(), p.clone()),
                None => s.pacing.remove(branch),
            };
        }
        if pacing.is_none() {
            return;
        }
        for branch in branches {
            if let Some(why) = self.suspect(svc, &branch) {
                self.pace(svc, service.clone(), branch, Some(why));
            }
        }
    }

    /// An attempt of service `svc` cut off by shutdown: counted, recorded, folded nowhere.
    pub(super) fn abandoned(&mut self, svc: ServiceId, branch: String, seq: u64, now: Millis) {
        self.summary.abandoned += 1;
        let r = AttemptAbandoned {
            branch,
            seq,
            cause: None,
        };
        self.record_for(svc, now, Record::AttemptAbandoned(r));
    }

    /// An attempt of service `service` (by name: it may be gone) cut off because a reload
    /// stopped its loop: counted, recorded with cause `reload`, folded nowhere.
    pub(super) fn cancelled_by_reload(
        &mut self,
        service: String,
        branch: String,
        seq: u64,
        now: Millis,
    ) {
        self.summary.abandoned += 1;
        let r = AttemptAbandoned {
            branch,
            seq,
            cause: Some(AbandonCause::Reload),
        };
        let r = Record::AttemptAbandoned(r);
        self.effects.push(Effect::Record(now, service, r));
    }

    pub(super) fn on_attempt(&mut self, svc: usize, a: Box<Attempt>) {
        if !self.services.contains_key(&svc) {
            // A removed service's attempt that was already on its way.
            return;
        }
        let key = self.key(svc, &a.branch);
        *self.summary.attempts.entry(key).or_default() += 1;
        let fields = Fields {
            seq: Some(a.seq),
            ..branch_fields(self.svc_name(svc), &a.branch)
        };
        self.effects.push(match &a.outcome {
            Outcome::Success => log(Level::Debug, "attempt ok", fields),
            Outcome::Failure {
                step,
                class,
                message,
            } => log(
                Level::Debug,
                "attempt failed",
                Fields {
                    step: Some(step.to_string()),
                    class: Some(class.to_string()),
                    detail: Some(message.clone()),
                    ..fields
                },
            ),
        });
        let record = a.record();
        let ix = self.branch_ix(svc, &a.branch);
        let transition = ix.and_then(|i| {
            let b = self.branch_mut(svc, i)?;
            b.acc.attempts += 1;
            if a.outcome != Outcome::Success {
                b.acc.failed += 1;
            }
            for s in a.steps.iter().filter(|s| s.ok) {
                b.acc
                    .steps
                    .entry(s.step.as_str())
                    .or_default()
                    .push(s.duration_ms);
            }
            if let Some(na) = a.certificate_not_after {
                b.acc.cert_not_after = Some(na);
            }
            b.readiness.record(record)
        });
        self.record_for(svc, a.finished_at, Record::Attempt(*a));
        if let (Some(i), Some(t)) = (ix, transition) {
            self.on_transition(svc, i, &t);
        }
        if let Some(i) = ix {
            self.repace(svc, i);
        }
    }

    /// An attempt of a loop a reload stopped: the evidence and the run's count have it, no
    /// window does (its service is gone, or its branch starts afresh under new settings).
    pub(super) fn stopped_attempt(&mut self, service: String, mut a: Box<Attempt>) {
        a.not_counted = true;
        let only = self.services.len() == 1 && self.services.values().all(|s| s.name == service);
        let key = if only {
            a.branch.clone()
        } else {
            format!("{service}/{}", a.branch)
        };
        *self.summary.attempts.entry(key).or_default() += 1;
        self.effects.push(log(
            Level::Debug,
            "attempt of a loop a reload stopped: recorded, not counted in any window",
            Fields {
                seq: Some(a.seq),
                ..branch_fields(&service, &a.branch)
            },
        ));
        self.effects
            .push(Effect::Record(a.finished_at, service, Record::Attempt(*a)));
    }

    /// A transition of service `svc`'s branch `ix`.
    pub(super) fn on_transition(&mut self, svc: ServiceId, ix: usize, t: &Transition) {
        let Some(b) = self.branches.get(&svc).and_then(|v| v.get(ix)) else {
            return;
        };
        self.summary.transitions += 1;
        let branch = b.name.clone();
        let service = self.svc_name(svc).to_string();
        let ov = b.ov.clone().filter(|o| o.active(t.at));
        let published = control::effective_value(b.readiness.published_value(), ov.as_ref(), t.at);
        let classes: Vec<String> = t
            .unready_window
            .failure_classes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect();
        let level = if t.to == ReadinessState::Unready {
            Level::Warn
        } else {
            Level::Info
        };
        self.effects.push(log(
            level,
            "readiness transition",
            Fields {
                from: Some(t.from.as_str().into()),
                to: Some(t.to.as_str().into()),
                reason: Some(t.reason.clone()),
                failures: Some(format!("{classes:?}")),
                ..branch_fields(&service, &branch)
            },
        ));
        if t.to == ReadinessState::PendingApproval {
            let which = if self.services.len() > 1 {
                format!("--service {service} ")
            } else {
                String::new()
            };
            self.effects.push(log(
                Level::Warn,
                format!("ready condition held its full `for`: waiting for an operator (readyprobe approve {which}--branch {branch} --by WHO --reason TEXT)"),
                branch_fields(&service, &branch),
            ));
        }
        self.record_for(
            svc,
            t.at,
            Record::Transition(TransitionRecord {
                branch: branch.clone(),
                transition: t.clone(),
                published,
                override_: ov,
                // The id `publish` below gives its batch.
                batch: published.map(|_| self.next_batch + 1),
            }),
        );
        if let Some(v) = published {
            let d = transition_datum(&service, &branch, v, t.at);
            self.publish(svc, vec![d], PublishReason::Transition);
        }
    }

    /// The earliest readiness deadline of any branch ([`Readiness::next_deadline`]): when to
    /// feed [`Input::Wake`] if nothing else comes first. After a wake-up it is always later than
    /// the wake-up's instant (every branch whose deadline had come was evaluated then), so one
    /// never repeats.
    pub fn next_wakeup(&mut self) -> Option<Millis> {
        let branches = &self.branches;
        *self.wakeup.get_or_insert_with(|| {
            branches
                .values()
                .flatten()
                .filter_map(|b| b.readiness.next_deadline())
                .min()
        })
    }

    /// Evaluate at `now`, for [`Input::Wake`], every branch whose deadline has come:
    /// transitions and pace changes only. The others' deadlines are later, so evaluating them
    /// too would find nothing (and cost a pass over every branch at each of their deadlines).
    pub(super) fn wake(&mut self, now: Millis) {
        let ids: Vec<ServiceId> = self.branches.keys().copied().collect();
        for svc in ids {
            for i in 0..self.branch_count(svc) {
                let Some(b) = self.branch_mut(svc, i) else {
                    continue;
                };
                if b.readiness.next_deadline().is_none_or(|d| d > now) {
                    continue;
                }
                if let Some(t) = b.readiness.evaluate(now) {
                    self.on_transition(svc, i, &t);
                }
                self.repace(svc, i);
            }
        }
    }
}
