//! The fold's batches: publish ticks and their datums, and the account of every batch handed to a
//! sink (refusals, reports, batches never sent).

use super::*;
use crate::datum::{
    BranchTick, Datum, Refusal, SinkId, SinkReport, counted_since, for_profile,
    publish_failure_datums, selected_branch_datum, service_unavailable_datum,
    stable_name_success_datum, store_sync_failure_datums, tick_datums,
};
use crate::readiness::{Millis, fails_open};
use crate::record::{BothBranchesUnready, Publish, PublishOutcome, PublishReason, Record};
use std::collections::BTreeMap;

/// The sink that publishes the fold's own accounting (`PublishFailures`).
const EMF: &str = "emf";

/// What a batch that a sink's queue refused became.
fn refusal_outcome(why: Refusal) -> PublishOutcome {
    match why {
        Refusal::Closed => PublishOutcome::SinkStopped,
    }
}

impl Fold {
    /// Every batch handed to a sink and never reported (the grace period ended first) is
    /// dropped: count, log and record each.
    pub fn abandon_unsent(&mut self, now: Millis) -> Vec<Effect> {
        for ((sink, _), o) in std::mem::take(&mut self.outstanding) {
            let why = "abandoned at shutdown: the grace period ended before it was sent";
            let reason = <&str>::from(o.reason);
            self.unsent(
                &sink,
                &o,
                reason,
                why,
                PublishOutcome::AbandonedAtShutdown,
                now,
            );
        }
        std::mem::take(&mut self.effects)
    }

    /// Evaluate every branch at `now`, then publish the tick's datums (each service's heartbeat
    /// included), one batch per namespace and set of sinks: services of one namespace with the
    /// same sinks share a batch; the `emf` sink gets each of them.
    pub(super) fn tick(&mut self, reason: PublishReason, now: Millis) {
        self.expire_overrides(now);
        let mut by_route: BTreeMap<(String, Vec<SinkId>), Vec<Datum>> = BTreeMap::new();
        let ids: Vec<ServiceId> = self.services.keys().copied().collect();
        for svc in ids {
            let datums = self.tick_service(svc, now);
            let ns = self.namespace(svc);
            let sinks = self.services.get(&svc).map(|s| s.sinks.clone());
            let sinks = sinks.unwrap_or_default();
            by_route.entry((ns, sinks)).or_default().extend(datums);
        }
        for (name, ns, sinks) in &self.unavailable {
            let d = service_unavailable_datum(name, now);
            by_route
                .entry((ns.clone(), sinks.clone()))
                .or_default()
                .push(d);
        }
        for ((ns, sinks), datums) in by_route {
            self.publish_to(datums, reason, sinks, ns);
        }
        self.publish_failures(now);
    }

    /// Evaluate service `svc`'s branches at `now`; its tick datums.
    fn tick_service(&mut self, svc: usize, now: Millis) -> Vec<Datum> {
        let mut ticks = Vec::new();
        for i in 0..self.branch_count(svc) {
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            if let Some(t) = b.readiness.evaluate(now) {
                self.on_transition(svc, i, &t);
            }
            self.repace(svc, i);
            let Some(b) = self.branch_mut(svc, i) else {
                continue;
            };
            let stats = b
                .readiness
                .window_stats(now, b.readiness.policy().declare_unready.window);
            let acc = std::mem::take(&mut b.acc);
            let effective = b.effective(now);
            ticks.push(BranchTick {
                branch: b.name.clone(),
                readiness: effective,
                is_ready: effective == Some(1.0),
                is_known: effective.is_some(),
                success_rate: stats.success_rate_percent,
                attempts: acc.attempts,
                failed: acc.failed,
                step_durations: acc.steps.into_iter().collect(),
                // Only what a handshake showed since the last tick: no handshake, no datum.
                cert_not_after: acc.cert_not_after,
            });
        }
        let all_unready = fails_open(ticks.iter().map(BranchTick::published)) == Some(true);
        let name = self.svc_name(svc).to_string();
        let logged = self
            .services
            .get(&svc)
            .is_some_and(|s| s.both_unready_logged);
        if all_unready && !logged {
            self.effects.push(log(
                Level::Error,
                "NO BRANCH IS READY: Route 53 failover fails open and answers with the PRIMARY regardless; BothBranchesUnready = 1",
                service_fields(&name),
            ));
            self.record_for(
                svc,
                now,
                Record::BothBranchesUnready(BothBranchesUnready::new()),
            );
            self.set_unready_logged(svc, true);
        } else if !all_unready {
            self.set_unready_logged(svc, false);
        }
        let mut datums = tick_datums(&name, &ticks, now);
        if let Some(s) = self.services.get_mut(&svc) {
            if let Some(v) = s.selected_branch {
                datums.push(selected_branch_datum(&name, v, now));
            }
            if let Some(v) = s.stable_name_success {
                datums.push(stable_name_success_datum(&name, v, now));
            }
            // For every sink, unlike `PublishFailures`: a store failure does not depend on one.
            let failed = std::mem::take(&mut s.sync_failures);
            datums.extend(store_sync_failure_datums(&name, &failed, now));
            // The counts cover the span since the previous tick, whenever that was (late,
            // skipped or final ticks make spans of any length).
            counted_since(&mut datums, s.counted_since);
            s.counted_since = now;
        }
        datums
    }

    /// The failed batches counted since the last tick, as `PublishFailures` datums for the
    /// `emf` sink only: the count must not depend on the sink that is failing. Not for `otlp`
    /// either: a batch of its own each tick, newer than the tick's, would be what a failing
    /// collector's queue works on first, and the tick batches would expire behind it. With several
    /// services each one's datum carries the run's count (their batches are shared).
    fn publish_failures(&mut self, now: Millis) {
        let counts: Vec<_> = std::mem::take(&mut self.failures).into_iter().collect();
        let since = std::mem::replace(&mut self.failures_since, now);
        if counts.is_empty() || !self.sinks.contains(&EMF) {
            return;
        }
        let mut by_ns: BTreeMap<String, Vec<Datum>> = BTreeMap::new();
        for s in self.services.values() {
            let mut datums = publish_failure_datums(&s.name, &counts, now);
            counted_since(&mut datums, since);
            by_ns.entry(s.namespace.clone()).or_default().extend(datums);
        }
        for (ns, datums) in by_ns {
            let emf = vec![SinkId::of(EMF)];
            self.publish_to(datums, PublishReason::PublishFailures, emf, ns);
        }
    }

    /// Hand a batch of service `svc` to each of its sinks; each stays outstanding until the
    /// sink reports it or its queue refuses it.
    pub(super) fn publish(&mut self, svc: ServiceId, datums: Vec<Datum>, reason: PublishReason) {
        let Some(s) = self.services.get(&svc) else {
            return;
        };
        let (namespace, sinks) = (s.namespace.clone(), s.sinks.clone());
        self.publish_to(datums, reason, sinks, namespace);
    }

    /// Hand a batch for `namespace` to `sinks`. The sinks `publish.metrics` limits
    /// ([`MetricsProfile::limits`]) get only the datums it sends; the others get them all. With
    /// both kinds of sinks and a limiting profile that is two batches, one per group, each
    /// accounted on its own. A group left with no datum gets no batch (what the profile leaves
    /// out never was for a sink, so it is no drop).
    ///
    /// [`MetricsProfile::limits`]: crate::contract::MetricsProfile::limits
    fn publish_to(
        &mut self,
        datums: Vec<Datum>,
        reason: PublishReason,
        sinks: Vec<SinkId>,
        namespace: String,
    ) {
        let profile = self.metrics;
        let (limited, full): (Vec<SinkId>, Vec<SinkId>) =
            sinks.into_iter().partition(|s| profile.limits(s.kind));
        if !full.is_empty() && !limited.is_empty() {
            let some = for_profile(datums.clone(), profile);
            self.hand_batch(some, reason, limited, namespace.clone());
            self.hand_batch(datums, reason, full, namespace);
        } else if limited.is_empty() {
            self.hand_batch(datums, reason, full, namespace);
        } else {
            let some = for_profile(datums, profile);
            self.hand_batch(some, reason, limited, namespace);
        }
    }

    /// Hand one batch to `sinks`; each stays outstanding until the sink reports it or its
    /// queue refuses it. No datum, no batch.
    fn hand_batch(
        &mut self,
        datums: Vec<Datum>,
        reason: PublishReason,
        sinks: Vec<SinkId>,
        namespace: String,
    ) {
        if datums.is_empty() {
            return;
        }
        self.next_batch += 1;
        let id = self.next_batch;
        for sink in &sinks {
            *self.handed.entry(sink.clone()).or_default() += 1;
            self.outstanding.insert(
                (sink.clone(), id),
                Outstanding {
                    reason,
                    datums: datums.len(),
                    batch: id,
                },
            );
        }
        self.effects.push(Effect::Publish(Batch {
            id,
            datums,
            reason,
            sinks,
            namespace,
        }));
    }

    pub(super) fn refused(&mut self, sink: SinkId, batch: u64, why: Refusal, now: Millis) {
        let Some(o) = self.outstanding.remove(&(sink.clone(), batch)) else {
            return;
        };
        self.unsent(&sink, &o, why.why(), why.why(), refusal_outcome(why), now);
    }

    /// A batch that never reached its sink: counted as dropped, logged (with `log_reason`) and
    /// recorded (with `why` as its error).
    fn unsent(
        &mut self,
        sink: &SinkId,
        o: &Outstanding,
        log_reason: &str,
        why: &str,
        outcome: PublishOutcome,
        now: Millis,
    ) {
        let message = match outcome {
            PublishOutcome::AbandonedAtShutdown => "publish abandoned at shutdown",
            _ => "publish dropped",
        };
        *self
            .summary
            .dropped_batches
            .entry(sink.to_string())
            .or_default() += 1;
        self.effects.push(log(
            Level::Warn,
            message,
            Fields {
                sink: Some(sink.to_string()),
                datums: Some(o.datums as u64),
                reason: Some(log_reason.into()),
                ..Fields::default()
            },
        ));
        let publish = Publish::new(
            sink.kind,
            o.reason,
            o.datums,
            0,
            0,
            outcome,
            Some(why.into()),
        );
        let publish = publish.with_target(sink.target.as_deref().map(str::to_string));
        self.record(now, Record::Publish(publish.with_batch(o.batch)));
    }

    pub(super) fn on_report(&mut self, r: SinkReport, now: Millis) {
        let Some(o) = self.outstanding.remove(&(r.sink.clone(), r.batch)) else {
            return;
        };
        let fields = Fields {
            sink: Some(r.sink.to_string()),
            datums: Some(r.datums as u64),
            ..Fields::default()
        };
        if r.outcome.is_dropped() {
            *self
                .summary
                .dropped_batches
                .entry(r.sink.to_string())
                .or_default() += 1;
            if let Some(c) = r.class {
                *self.failures.entry(c).or_default() += 1;
            }
            let message = match r.outcome {
                PublishOutcome::Failed => "publish failed; batch dropped",
                PublishOutcome::Expired => "publish expired in the queue; batch dropped",
                _ => "publish dropped",
            };
            self.effects.push(log(
                Level::Warn,
                message,
                Fields {
                    tries: Some(u64::from(r.tries)),
                    class: r.class.map(|c| c.as_str().into()),
                    error: r.error.clone(),
                    reason: Some(<&str>::from(o.reason).into()),
                    ..fields
                },
            ));
        } else if r.error.is_some() {
            // Sent, but the destination refused part of it and said why (an OTLP partial
            // success): worth a warning, not a drop.
            self.effects.push(log(
                Level::Warn,
                "published in part: the destination refused some datums",
                Fields {
                    datums: Some(r.sent as u64),
                    error: r.error.clone(),
                    ..fields
                },
            ));
        } else {
            self.effects.push(log(
                Level::Debug,
                "published",
                Fields {
                    datums: Some(r.sent as u64),
                    ..fields
                },
            ));
        }
        let publish = Publish::new(
            r.sink.kind,
            o.reason,
            r.datums,
            r.sent,
            r.tries,
            r.outcome,
            r.error,
        );
        let target = r.sink.target.as_deref().map(str::to_string);
        let publish = publish
            .with_class(r.class)
            .with_batch(o.batch)
            .with_target(target);
        self.record(now, Record::Publish(publish));
    }
}
