//! The fold's side of the state store: syncs done and failed, approvals, overrides and drill
//! markers.

use super::*;
use crate::control::{Approval, ControlDoc, Decision, Marker, Override};
use crate::datum::transition_datum;
use crate::readiness::Millis;
use crate::record::{
    ApprovalNotApplied, ApprovalRecord, MarkerRecord, OverrideAction, OverrideRecord,
    PublishReason, Record, StateSyncFailed, StoreSyncFailureClass,
};

impl Fold {
    /// Take a finished sync: record its decisions, apply approved failbacks, take overrides.
    pub(super) fn sync_done(
        &mut self,
        svc: usize,
        doc: &ControlDoc,
        decided: Vec<(Approval, Decision)>,
        now: Millis,
    ) {
        let Some(s) = self.services.get_mut(&svc) else {
            return;
        };
        let service = s.name.clone();
        for (a, d) in decided {
            if let Some(s) = self.services.get_mut(&svc) {
                s.recorded.insert(a.id.clone());
            }
            self.record_for(
                svc,
                now,
                Record::Approval(ApprovalRecord {
                    branch: a.branch.clone(),
                    approval_id: a.id.clone(),
                    by: a.by.clone(),
                    reason: a.reason.clone(),
                    given_at: a.at,
                    expires_at: a.expires_at,
                    applied: d.applied,
                    detail: d.detail.clone(),
                }),
            );
            if d.applied {
                self.apply_approval(svc, &a, now);
            } else {
                self.summary.approvals_rejected += 1;
                self.effects.push(log(
                    Level::Warn,
                    "operator approval rejected",
                    Fields {
                        by: Some(a.by.clone()),
                        detail: Some(d.detail.clone()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
            }
        }
        self.apply_overrides(svc, doc, now);
    }

    /// Record the drill markers a sync took, once each: a marker id already recorded is not
    /// recorded again. The ids kept are those still in the document (it prunes old markers).
    pub(super) fn record_markers(
        &mut self,
        svc: usize,
        doc: &ControlDoc,
        markers: Vec<Marker>,
        now: Millis,
    ) {
        let Some(s) = self.services.get_mut(&svc) else {
            return;
        };
        s.markers
            .retain(|id| doc.markers.iter().any(|m| &m.id == id));
        let fresh: Vec<Marker> = markers
            .into_iter()
            .filter(|m| s.markers.insert(m.id.clone()))
            .collect();
        let service = s.name.clone();
        for m in fresh {
            self.effects.push(log(
                Level::Info,
                "drill marker",
                Fields {
                    by: Some(m.by.clone()),
                    state: Some(m.kind.as_str().into()),
                    detail: Some(m.label.clone()),
                    ..service_fields(&service)
                },
            ));
            let r = MarkerRecord {
                marker_id: m.id,
                marker_kind: m.kind,
                label: m.label,
                by: m.by,
                given_at: m.at,
            };
            self.record_for(svc, now, Record::Marker(r));
        }
    }

    /// Apply an approval the store decided as applied to the live state.
    fn apply_approval(&mut self, svc: usize, a: &Approval, now: Millis) {
        let Some(ix) = self.branch_ix(svc, &a.branch) else {
            return;
        };
        let service = self.svc_name(svc).to_string();
        let Some(b) = self.branch_mut(svc, ix) else {
            return;
        };
        match b.readiness.approve(now) {
            Ok(t) => {
                self.summary.approvals_applied += 1;
                self.effects.push(log(
                    Level::Info,
                    "operator approval applied",
                    Fields {
                        by: Some(a.by.clone()),
                        reason: Some(a.reason.clone()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
                self.on_transition(svc, ix, &t);
                self.repace(svc, ix);
            }
            Err(e) => {
                // The branch left pending_approval while the sync was in flight.
                let state = b.readiness.state();
                self.effects.push(log(
                    Level::Warn,
                    "approval decided but not applied: the branch left pending_approval meanwhile",
                    Fields {
                        error: Some(e.to_string()),
                        ..branch_fields(&service, &a.branch)
                    },
                ));
                self.record_for(
                    svc,
                    now,
                    Record::ApprovalNotApplied(ApprovalNotApplied {
                        branch: a.branch.clone(),
                        approval_id: a.id.clone(),
                        state,
                    }),
                );
            }
        }
    }

    pub(super) fn sync_failed(
        &mut self,
        svc: usize,
        error: String,
        class: StoreSyncFailureClass,
        started: Option<Millis>,
        now: Millis,
    ) {
        self.summary.state_sync_failures += 1;
        if let Some(s) = self.services.get_mut(&svc) {
            *s.sync_failures.entry(class).or_default() += 1;
        }
        let message = match started {
            Some(_) => {
                "cannot sync with the state store; probing goes on, retrying at the next poll"
            }
            None => "final state sync did not finish within the grace period",
        };
        self.effects.push(log(
            Level::Error,
            message,
            Fields {
                error: Some(error.clone()),
                ..service_fields(self.svc_name(svc))
            },
        ));
        self.record_for(
            svc,
            now,
            Record::StateSyncFailed(StateSyncFailed {
                error,
                class: Some(class),
                started_at: started,
            }),
        );
    }

    /// Take the store's overrides, each as applied at `now` ([`Override::bounded`], so the first
    /// line and record show the end applied); record and publish at once every one that starts,
    /// changes or is cleared.
    pub(super) fn apply_overrides(&mut self, svc: usize, doc: &ControlDoc, now: Millis) {
        // Expiries first, so the one that just ran out is recorded as expired, not as cleared
        // when the store's copy of it is seen to be inactive.
        self.expire_overrides_of(svc, now);
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let new = doc
                .overrides
                .get(&b.name)
                .filter(|o| o.active(now))
                .map(|o| o.bounded(now));
            if b.ov == new {
                continue;
            }
            b.ov = new;
            let (name, ov, effective) = (b.name.clone(), b.ov.clone(), b.effective(now));
            let service = self.svc_name(svc).to_string();
            match ov {
                Some(o) => {
                    self.effects.push(log(
                        Level::Warn,
                        "override in force: the published readiness is forced",
                        Fields {
                            force: Some(o.force.as_str().into()),
                            by: Some(o.by.clone()),
                            reason: Some(o.reason.clone()),
                            expires_at: Some(crate::clock::rfc3339(o.expires_at)),
                            ..branch_fields(&service, &name)
                        },
                    ));
                    self.override_record(svc, now, &name, OverrideAction::Set, Some(o));
                }
                None => {
                    self.effects.push(log(
                        Level::Warn,
                        "override cleared: the computed readiness is published again",
                        branch_fields(&service, &name),
                    ));
                    self.override_record(svc, now, &name, OverrideAction::Cleared, None);
                }
            }
            // A cleared override whose branch is unknown has nothing to publish.
            if let Some(v) = effective {
                let d = transition_datum(&service, &name, v, now);
                self.publish(svc, vec![d], PublishReason::Override);
            }
        }
    }

    /// End overrides whose expiry passed (no store round trip needed).
    pub(super) fn expire_overrides(&mut self, now: Millis) {
        let ids: Vec<ServiceId> = self.branches.keys().copied().collect();
        for svc in ids {
            self.expire_overrides_of(svc, now);
        }
    }

    /// End service `svc`'s overrides whose expiry passed.
    fn expire_overrides_of(&mut self, svc: ServiceId, now: Millis) {
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let Some(o) = b.ov.take_if(|o| !o.active(now)) else {
                continue;
            };
            let (name, effective) = (b.name.clone(), b.effective(now));
            let service = self.svc_name(svc).to_string();
            self.effects.push(log(
                Level::Warn,
                "override expired: the computed readiness is published again",
                Fields {
                    force: Some(o.force.as_str().into()),
                    ..branch_fields(&service, &name)
                },
            ));
            self.override_record(svc, now, &name, OverrideAction::Expired, Some(o));
            if let Some(v) = effective {
                let d = transition_datum(&service, &name, v, now);
                self.publish(svc, vec![d], PublishReason::Override);
            }
        }
    }

    /// Overrides a sync dropped unapplied because they were set in the future: each said at
    /// WARN and recorded (`override`, action `dropped_ahead`).
    pub(super) fn dropped_ahead(
        &mut self,
        svc: ServiceId,
        dropped: Vec<(String, Override)>,
        now: Millis,
    ) {
        let service = self.svc_name(svc).to_string();
        for (branch, o) in dropped {
            self.effects.push(log(
                Level::Warn,
                format!(
                    "override dropped unapplied: set at {}, more than {} ahead of this prober's clock (a host whose clock runs ahead?); set it again from a host with a correct clock",
                    crate::clock::rfc3339(o.at),
                    crate::clock::fmt_duration_ms(crate::control::MAX_CLOCK_SKEW_MS)
                ),
                Fields {
                    force: Some(o.force.as_str().into()),
                    by: Some(o.by.clone()),
                    reason: Some(o.reason.clone()),
                    ..branch_fields(&service, &branch)
                },
            ));
            self.override_record(svc, now, &branch, OverrideAction::DroppedAhead, Some(o));
        }
    }

    fn override_record(
        &mut self,
        svc: usize,
        now: Millis,
        branch: &str,
        action: OverrideAction,
        ov: Option<Override>,
    ) {
        self.record_for(
            svc,
            now,
            Record::Override(OverrideRecord {
                branch: branch.to_string(),
                action,
                override_: ov,
            }),
        );
    }
}

impl Fold {
    /// Another process saves under this prober id: said at ERROR (naming the store) and
    /// recorded, until one of the two is stopped or given its own id.
    pub(super) fn duplicate_prober(&mut self, d: DuplicateProber, now: Millis) {
        let detail = format!(
            "instance {}, other instance {} saved at {}",
            d.instance,
            d.other_instance,
            crate::clock::rfc3339(d.other_saved_at)
        );
        self.effects.push(log(
            Level::Error,
            format!(
                "another readyprobe process runs with prober_id {:?} on this state store: the two overwrite each other's readiness and canary rows (verify_mismatch); give each prober its own prober_id",
                self.prober
            ),
            Fields {
                state: Some(d.state_store.clone()),
                detail: Some(detail),
                ..Fields::default()
            },
        ));
        self.record(now, Record::DuplicateProber(d));
    }
}
