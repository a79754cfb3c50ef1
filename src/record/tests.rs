//! Golden lines per kind (the evidence contract) and a write/read round trip.

use super::*;
use crate::control::Forced;
use crate::failure::{FailureClass, Step};
use crate::probe::{DnsMeta, Outcome, StepRecord, mysql, resolve, tls};
use crate::readiness::{DampingEvidence, ReadinessState, WindowStats};
use expect_test::{Expect, expect};

/// 2026-01-02T03:04:05.678Z.
const AT: Millis = 1_767_323_045_678;

fn line(record: Record) -> String {
    Envelope::new(AT, "orders-db", "az-a", record)
        .to_line()
        .unwrap()
}

fn check(record: Record, golden: Expect) {
    let l = line(record.clone());
    assert!(l.ends_with('\n') && !l.trim_end().contains('\n'));
    golden.assert_eq(l.trim_end());
    // The line reads back as the record it was written from.
    let back: Envelope = serde_json::from_str(&l).unwrap();
    assert_eq!(back.record, record);
    assert_eq!(back.at_ms, AT);
}

fn stats(window_ms: u64, finished: u32, failed: u32) -> WindowStats {
    WindowStats {
        window_ms,
        finished,
        failed,
        success_rate_percent: (finished > 0)
            .then(|| f64::from(finished - failed) / f64::from(finished) * 100.0),
        failure_classes: if failed > 0 {
            vec![(FailureClass::TcpRefused, failed)]
        } else {
            Vec::new()
        },
    }
}

fn an_override() -> Override {
    Override {
        force: Forced::Unready,
        by: "alice".into(),
        reason: "maintenance".into(),
        at: AT - 60_000,
        expires_at: AT + 3_600_000,
    }
}

fn start() -> Record {
    Record::Start(Start {
        config: "probes/orders-db.toml".into(),
        branches: vec![StartBranch {
            name: "primary".into(),
            role: "PRIMARY".into(),
            endpoint: "primary.orders-db.example.internal".into(),
            port: 3306,
        }],
        duration_ms: Some(600_000),
        state_store: "/var/lib/readyprobe/orders-db.json".into(),
        restored: vec![Restored {
            branch: "primary".into(),
            state: ReadinessState::Ready,
            since: Some(AT - 86_400_000),
        }],
        probe_interval_ms: Some(2_000),
        probe_timeout_ms: Some(1_500),
        suspect_interval_ms: Some(500),
        publish_interval_ms: Some(60_000),
        policy: vec![
            "initial unknown, min_attempts 10".into(),
            "declare unready: success rate < 95% over 1m held for 3m".into(),
        ],
        approval_required: Some(true),
        stable_name_interval_ms: Some(30_000),
        stable_name_end_to_end: Some(true),
        namespace: Some("Readyprobe".into()),
        initial: Some(ReadinessState::Unknown),
    })
}

fn attempt_ok() -> Record {
    Record::Attempt(Attempt {
        branch: "primary".into(),
        seq: 42,
        marker: "0123456789abcdef0123456789abcdef".into(),
        started_at: AT - 25,
        finished_at: AT,
        steps: vec![
            StepRecord {
                step: Step::Resolve,
                duration_ms: 1.5,
                ok: true,
                class: None,
            },
            StepRecord {
                step: Step::Connect,
                duration_ms: 0.25,
                ok: true,
                class: None,
            },
        ],
        answers: vec![resolve::Answer {
            name: "primary.orders-db.example.internal.".into(),
            rtype: "A".into(),
            data: "10.0.0.5".into(),
            ttl: 60,
        }],
        dns: Some(DnsMeta {
            rcode: "NoError".into(),
            authoritative: true,
        }),
        address: Some("10.0.0.5:3306".into()),
        tls: Some(tls::TlsInfo {
            version: "TLSv1_3".into(),
            cipher_suite: "TLS13_AES_128_GCM_SHA256".into(),
            peer_certificates: 2,
            leaf_not_after: Some(AT + 86_400_000),
        }),
        tls_verified: true,
        certificate_not_after: Some(AT + 86_400_000),
        certificate_subject: Some("CN=db-1.orders-db.example.internal".into()),
        server: Some(mysql::ServerIdentity {
            hostname: "db-1".into(),
            server_id: 7,
            read_only: false,
            innodb_read_only: false,
            in_recovery: false,
            version: "11.4.2-MariaDB".into(),
        }),
        http: None,
        otlp: None,
        not_counted: false,
        outcome: Outcome::Success,
    })
}

fn attempt_failed() -> Record {
    Record::Attempt(Attempt {
        branch: "secondary".into(),
        seq: 3,
        marker: "fedcba9876543210fedcba9876543210".into(),
        started_at: AT - 1000,
        finished_at: AT,
        steps: vec![StepRecord {
            step: Step::Connect,
            duration_ms: 0.5,
            ok: false,
            class: Some(FailureClass::TcpRefused),
        }],
        answers: Vec::new(),
        dns: None,
        address: Some("10.0.1.5:3306".into()),
        tls: None,
        tls_verified: false,
        certificate_not_after: None,
        certificate_subject: None,
        server: None,
        http: None,
        otlp: None,
        not_counted: false,
        outcome: Outcome::Failure {
            step: Step::Connect,
            class: FailureClass::TcpRefused,
            message: "connection refused".into(),
        },
    })
}

fn transition() -> Record {
    Record::Transition(TransitionRecord {
        branch: "primary".into(),
        transition: Transition {
            from: ReadinessState::Ready,
            to: ReadinessState::Unready,
            at: AT,
            reason: "3 of 3 attempts failed in 30s".into(),
            held_since: Some(AT - 30_000),
            unready_window: stats(30_000, 3, 3),
            ready_window: stats(300_000, 30, 3),
            damping: None,
        },
        published: Some(0.0),
        override_: None,
        batch: Some(7),
    })
}

/// A recovery flap damping made wait: 4 flaps in the period, so 2 × the 10m ready `for`.
fn transition_damped() -> Record {
    Record::Transition(TransitionRecord {
        branch: "primary".into(),
        transition: Transition {
            from: ReadinessState::Unready,
            to: ReadinessState::Ready,
            at: AT,
            reason: "success rate 100% >= 99% over the last 5m (150 attempts, 0 failed) held for 20m (required 20m, since 2026-01-02T02:44:05.678Z); flap damping: 4 ready → unready flaps within 1h (more than 3): the ready condition needed 20m (for 10m × 2^1, at most 1h)".into(),
            held_since: Some(AT - 1_200_000),
            unready_window: stats(60_000, 30, 0),
            ready_window: stats(300_000, 150, 0),
            damping: Some(DampingEvidence {
                recent_flaps: 4,
                ready_for_ms: 1_200_000,
            }),
        },
        published: Some(1.0),
        override_: None,
        batch: None,
    })
}

fn publish_sent() -> Record {
    Record::Publish(
        Publish::new(
            "cloudwatch",
            PublishReason::Tick,
            12,
            12,
            1,
            PublishOutcome::Sent,
            None,
        )
        .with_batch(7),
    )
}

fn publish_failed() -> Record {
    Record::Publish(
        Publish::new(
            "cloudwatch",
            PublishReason::Transition,
            1,
            0,
            3,
            PublishOutcome::Failed,
            Some("connection refused".into()),
        )
        .with_class(Some(PublishFailureClass::PublishUnreachable)),
    )
}

fn approval() -> Record {
    Record::Approval(ApprovalRecord {
        branch: "primary".into(),
        approval_id: "1767323000000-3f2a".into(),
        by: "alice".into(),
        reason: "replica caught up".into(),
        given_at: AT - 45_678,
        expires_at: AT + 854_322,
        applied: true,
        detail: "applied: the ready condition still holds".into(),
    })
}

fn approval_not_applied() -> Record {
    Record::ApprovalNotApplied(ApprovalNotApplied {
        branch: "primary".into(),
        approval_id: "1767323000000-3f2a".into(),
        state: ReadinessState::Unready,
    })
}

fn override_set() -> Record {
    Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::Set,
        override_: Some(an_override()),
    })
}

fn override_cleared() -> Record {
    Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::Cleared,
        override_: None,
    })
}

fn state_sync_failed() -> Record {
    Record::StateSyncFailed(StateSyncFailed {
        error: "state store /var/lib/readyprobe/orders-db.json: permission denied".into(),
        class: Some(StoreSyncFailureClass::Io),
        started_at: Some(AT - 5000),
    })
}

fn evidence_reopened() -> Record {
    Record::EvidenceReopened(EvidenceReopened {
        path: "/var/log/readyprobe/evidence.jsonl".into(),
    })
}

fn evidence_segment() -> Record {
    Record::EvidenceSegment(EvidenceSegment {
        segment: "orders-db/az-a/20260102T030000Z-4711.jsonl.gz".into(),
        event: SegmentEvent::UploadFailed,
        class: Some(PublishFailureClass::PublishUnreachable),
        retry_in_ms: Some(8_000),
        bytes: None,
        count: 3,
    })
}

fn duplicate_prober() -> Record {
    Record::DuplicateProber(DuplicateProber {
        state_store: "s3://readyprobe-state/readyprobe/control-orders-db.json".into(),
        instance: "6f1c2a9e04b7d3c8".into(),
        other_instance: "b2e47d10c9a35f61".into(),
        other_saved_at: 1767323040012,
    })
}

fn stop() -> Record {
    Record::Stop(Stop {
        reason: "SIGTERM".into(),
        attempts: [("primary".to_string(), 120), ("secondary".to_string(), 119)].into(),
        abandoned: 1,
        transitions: 2,
        dropped_batches: [("cloudwatch".to_string(), 1)].into(),
        final_states: [
            ("primary".to_string(), ReadinessState::Ready),
            ("secondary".to_string(), ReadinessState::PendingApproval),
        ]
        .into(),
        approvals_applied: 0,
        approvals_rejected: 1,
        state_sync_failures: 0,
        evidence_write_failures: 0,
    })
}

/// One example of every kind (and of every shape a kind's optional parts give).
fn every_kind() -> Vec<Record> {
    vec![
        start(),
        attempt_ok(),
        attempt_failed(),
        Record::AttemptAbandoned(AttemptAbandoned {
            branch: "primary".into(),
            seq: 43,
            cause: None,
        }),
        transition(),
        transition_damped(),
        publish_sent(),
        publish_failed(),
        approval(),
        approval_not_applied(),
        override_set(),
        override_cleared(),
        state_sync_failed(),
        Record::BothBranchesUnready(BothBranchesUnready::new()),
        evidence_reopened(),
        evidence_segment(),
        duplicate_prober(),
        reload(),
        marker(),
        stable_name_selected(),
        stable_name_failed(),
        stop(),
    ]
}

fn stable_name_selected() -> Record {
    Record::StableName(StableNameRecord {
        stable_name: "orders-db.example.internal".into(),
        answers: vec![
            resolve::Answer {
                name: "orders-db.example.internal.".into(),
                rtype: "CNAME".into(),
                data: "orders-db-a.example.internal.".into(),
                ttl: 60,
            },
            resolve::Answer {
                name: "orders-db-a.example.internal.".into(),
                rtype: "A".into(),
                data: "10.0.1.15".into(),
                ttl: 30,
            },
        ],
        selected: Some("primary".into()),
        unknown_target: false,
        ambiguous: vec![],
        class: None,
        error: None,
        branch_failures: BTreeMap::new(),
        end_to_end: None,
    })
}

fn stable_name_failed() -> Record {
    Record::StableName(StableNameRecord {
        stable_name: "orders-db.example.internal".into(),
        answers: vec![],
        selected: None,
        unknown_target: false,
        ambiguous: vec![],
        class: Some(FailureClass::DnsTimeout),
        error: Some("request timed out".into()),
        branch_failures: BTreeMap::from([("secondary".into(), FailureClass::DnsTimeout)]),
        end_to_end: None,
    })
}

/// A round whose answer matches no branch, with its end-to-end attempt through the stable name.
fn stable_name_unknown_with_end_to_end() -> Record {
    Record::StableName(StableNameRecord {
        stable_name: "orders-db.example.internal".into(),
        answers: vec![resolve::Answer {
            name: "orders-db.example.internal.".into(),
            rtype: "A".into(),
            data: "10.0.9.9".into(),
            ttl: 60,
        }],
        selected: None,
        unknown_target: true,
        ambiguous: vec![],
        class: Some(FailureClass::StableNameUnknownTarget),
        error: Some("the answer matches no branch: orders-db.example.internal. A 10.0.9.9".into()),
        branch_failures: BTreeMap::new(),
        end_to_end: Some(EndToEnd {
            started_at: AT - 1000,
            finished_at: AT - 990,
            address: Some("10.0.9.9:3306".into()),
            outcome: Outcome::Failure {
                step: Step::Connect,
                class: FailureClass::TcpRefused,
                message: "connection refused".into(),
            },
        }),
    })
}

#[test]
fn golden_stable_name_end_to_end() {
    check(
        stable_name_unknown_with_end_to_end(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"stable_name","stable_name":"orders-db.example.internal","answers":[{"name":"orders-db.example.internal.","type":"A","data":"10.0.9.9","ttl":60}],"selected":null,"unknown_target":true,"class":"stable_name_unknown_target","error":"the answer matches no branch: orders-db.example.internal. A 10.0.9.9","end_to_end":{"started_at":1767323044678,"finished_at":1767323044688,"address":"10.0.9.9:3306","result":"failure","step":"connect","class":"tcp_refused","message":"connection refused"}}"#
        ]],
    );
}

#[test]
fn golden_stable_name() {
    check(
        stable_name_selected(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"stable_name","stable_name":"orders-db.example.internal","answers":[{"name":"orders-db.example.internal.","type":"CNAME","data":"orders-db-a.example.internal.","ttl":60},{"name":"orders-db-a.example.internal.","type":"A","data":"10.0.1.15","ttl":30}],"selected":"primary","unknown_target":false,"class":null,"error":null}"#
        ]],
    );
    check(
        stable_name_failed(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"stable_name","stable_name":"orders-db.example.internal","answers":[],"selected":null,"unknown_target":false,"class":"dns_timeout","error":"request timed out","branch_failures":{"secondary":"dns_timeout"}}"#
        ]],
    );
}

fn marker() -> Record {
    Record::Marker(MarkerRecord {
        marker_id: "1767323000000-0a1b2c3d".into(),
        marker_kind: MarkerKind::Fault,
        label: "blocked writer path".into(),
        by: "alice".into(),
        given_at: AT - 45_678,
    })
}

#[test]
fn golden_marker() {
    check(
        marker(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"marker","marker_id":"1767323000000-0a1b2c3d","marker_kind":"fault","label":"blocked writer path","by":"alice","given_at":1767323000000}"#
        ]],
    );
}

fn reload() -> Record {
    Record::Reload(Reload {
        applied: true,
        added: vec!["payments-db".into()],
        removed: vec!["orders-api".into()],
        changed: vec![],
        unavailable: vec![],
        problems: vec![],
        removed_branches: Vec::new(),
    })
}

#[test]
fn golden_reload() {
    check(
        reload(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"reload","applied":true,"added":["payments-db"],"removed":["orders-api"],"changed":[],"unavailable":[],"problems":[]}"#
        ]],
    );
}

/// A reload that removed a branch of a service that runs on names it (older lines, without
/// the field, read as above).
#[test]
fn golden_reload_removing_a_branch() {
    let Record::Reload(mut r) = reload() else {
        unreachable!()
    };
    r.removed_branches = vec![RemovedBranch {
        service: "orders-db".into(),
        branch: "secondary".into(),
    }];
    r.changed = vec!["orders-db".into()];
    check(
        Record::Reload(r),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"reload","applied":true,"added":["payments-db"],"removed":["orders-api"],"changed":["orders-db"],"unavailable":[],"problems":[],"removed_branches":[{"service":"orders-db","branch":"secondary"}]}"#
        ]],
    );
}

#[test]
fn golden_start() {
    check(
        start(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"start","config":"probes/orders-db.toml","branches":[{"name":"primary","role":"PRIMARY","endpoint":"primary.orders-db.example.internal","port":3306}],"duration_ms":600000,"state_store":"/var/lib/readyprobe/orders-db.json","restored":[{"branch":"primary","state":"ready","since":1767236645678}],"probe_interval_ms":2000,"probe_timeout_ms":1500,"suspect_interval_ms":500,"publish_interval_ms":60000,"policy":["initial unknown, min_attempts 10","declare unready: success rate < 95% over 1m held for 3m"],"approval_required":true,"stable_name_interval_ms":30000,"stable_name_end_to_end":true,"namespace":"Readyprobe","initial":"unknown"}"#
        ]],
    );
}

/// A `start` line written before it carried the policy reads, its later fields empty; a line's
/// `record_seq` (put there by the evidence writer) reads back and is never written from here.
#[test]
fn an_older_start_line_reads_and_record_seq_reads_back() {
    let old = r#"{"record_seq":7,"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"start","config":"c.toml","branches":[],"duration_ms":null,"state_store":"s","restored":[]}"#;
    let e: Envelope = serde_json::from_str(old).unwrap();
    assert_eq!(e.record_seq, Some(7));
    let Record::Start(s) = &e.record else {
        panic!("{e:?}")
    };
    assert_eq!((s.probe_interval_ms, s.approval_required), (None, None));
    assert_eq!(s.suspect_interval_ms, None);
    assert!(s.policy.is_empty());
    assert!(!e.to_line().unwrap().contains("record_seq"));
}

#[test]
fn golden_attempt() {
    check(
        attempt_ok(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"attempt","branch":"primary","seq":42,"marker":"0123456789abcdef0123456789abcdef","started_at":1767323045653,"finished_at":1767323045678,"steps":[{"step":"resolve","duration_ms":1.5,"ok":true},{"step":"connect","duration_ms":0.25,"ok":true}],"answers":[{"name":"primary.orders-db.example.internal.","type":"A","data":"10.0.0.5","ttl":60}],"dns":{"rcode":"NoError","authoritative":true},"address":"10.0.0.5:3306","tls":{"version":"TLSv1_3","cipher_suite":"TLS13_AES_128_GCM_SHA256","peer_certificates":2,"leaf_not_after":1767409445678},"tls_verified":true,"certificate_not_after":1767409445678,"certificate_subject":"CN=db-1.orders-db.example.internal","server":{"hostname":"db-1","server_id":7,"read_only":false,"innodb_read_only":false,"version":"11.4.2-MariaDB"},"result":"success"}"#
        ]],
    );
    check(
        attempt_failed(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"attempt","branch":"secondary","seq":3,"marker":"fedcba9876543210fedcba9876543210","started_at":1767323044678,"finished_at":1767323045678,"steps":[{"step":"connect","duration_ms":0.5,"ok":false,"class":"tcp_refused"}],"answers":[],"address":"10.0.1.5:3306","tls_verified":false,"result":"failure","step":"connect","class":"tcp_refused","message":"connection refused"}"#
        ]],
    );
}

#[test]
fn golden_attempt_abandoned() {
    check(
        Record::AttemptAbandoned(AttemptAbandoned {
            branch: "primary".into(),
            seq: 43,
            cause: None,
        }),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"attempt_abandoned","branch":"primary","seq":43}"#
        ]],
    );
}

#[test]
fn golden_attempt_abandoned_by_a_reload() {
    check(
        Record::AttemptAbandoned(AttemptAbandoned {
            branch: "primary".into(),
            seq: 43,
            cause: Some(crate::record::AbandonCause::Reload),
        }),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"attempt_abandoned","branch":"primary","seq":43,"cause":"reload"}"#
        ]],
    );
}

#[test]
fn golden_transition() {
    check(
        transition(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"transition","branch":"primary","transition":{"from":"ready","to":"unready","at":1767323045678,"reason":"3 of 3 attempts failed in 30s","held_since":1767323015678,"unready_window":{"window_ms":30000,"finished":3,"failed":3,"success_rate_percent":0.0,"failure_classes":[["tcp_refused",3]]},"ready_window":{"window_ms":300000,"finished":30,"failed":3,"success_rate_percent":90.0,"failure_classes":[["tcp_refused",3]]}},"published":0.0,"override":null,"batch":7}"#
        ]],
    );
}

/// Damping evidence is written only on the transitions it shaped; older lines without it read.
#[test]
fn golden_transition_damped() {
    check(
        transition_damped(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"transition","branch":"primary","transition":{"from":"unready","to":"ready","at":1767323045678,"reason":"success rate 100% >= 99% over the last 5m (150 attempts, 0 failed) held for 20m (required 20m, since 2026-01-02T02:44:05.678Z); flap damping: 4 ready → unready flaps within 1h (more than 3): the ready condition needed 20m (for 10m × 2^1, at most 1h)","held_since":1767321845678,"unready_window":{"window_ms":60000,"finished":30,"failed":0,"success_rate_percent":100.0,"failure_classes":[]},"ready_window":{"window_ms":300000,"finished":150,"failed":0,"success_rate_percent":100.0,"failure_classes":[]},"damping":{"recent_flaps":4,"ready_for_ms":1200000}},"published":1.0,"override":null}"#
        ]],
    );
    let line = line(transition());
    assert!(!line.contains("damping"), "{line}");
    let back: Envelope = serde_json::from_str(&line).unwrap();
    let Record::Transition(t) = back.record else {
        panic!("{back:?}")
    };
    assert_eq!(t.transition.damping, None);
}

/// A batch sent to a target a service names carries the target's name; a record of the default
/// target or of `emf` (above) has no `target` key.
#[test]
fn golden_publish_to_a_target() {
    let failed = Publish::new(
        "cloudwatch",
        PublishReason::Tick,
        3,
        0,
        1,
        PublishOutcome::Failed,
        Some(
            "PutMetricData failed: no credentials for role arn:aws:iam::111122223333:role/pub"
                .into(),
        ),
    )
    .with_class(Some(PublishFailureClass::PublishCredentials))
    .with_batch(9)
    .with_target(Some("eu-west-1@111122223333/pub".into()));
    check(
        Record::Publish(failed),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"cloudwatch","reason":"tick","datums":3,"sent":0,"tries":1,"dropped":true,"outcome":"failed","error":"PutMetricData failed: no credentials for role arn:aws:iam::111122223333:role/pub","class":"publish_credentials","batch":9,"target":"eu-west-1@111122223333/pub"}"#
        ]],
    );
}

#[test]
fn golden_publish() {
    check(
        publish_sent(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"cloudwatch","reason":"tick","datums":12,"sent":12,"tries":1,"dropped":false,"outcome":"sent","error":null,"class":null,"batch":7}"#
        ]],
    );
    check(
        publish_failed(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"cloudwatch","reason":"transition","datums":1,"sent":0,"tries":3,"dropped":true,"outcome":"failed","error":"connection refused","class":"publish_unreachable"}"#
        ]],
    );
    let never_tried = |outcome, error: &str| {
        Record::Publish(Publish::new(
            "emf",
            PublishReason::Final,
            4,
            0,
            0,
            outcome,
            Some(error.into()),
        ))
    };
    check(
        never_tried(PublishOutcome::DroppedQueueFull, "sink queue full"),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"emf","reason":"final","datums":4,"sent":0,"tries":0,"dropped":true,"outcome":"dropped_queue_full","error":"sink queue full","class":null}"#
        ]],
    );
    check(
        never_tried(PublishOutcome::Expired, "its publish window closed"),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"emf","reason":"final","datums":4,"sent":0,"tries":0,"dropped":true,"outcome":"expired","error":"its publish window closed","class":null}"#
        ]],
    );
    check(
        never_tried(PublishOutcome::SinkStopped, "sink stopped"),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"emf","reason":"final","datums":4,"sent":0,"tries":0,"dropped":true,"outcome":"sink_stopped","error":"sink stopped","class":null}"#
        ]],
    );
    check(
        never_tried(
            PublishOutcome::AbandonedAtShutdown,
            "abandoned at shutdown: the grace period ended before it was sent",
        ),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"emf","reason":"final","datums":4,"sent":0,"tries":0,"dropped":true,"outcome":"abandoned_at_shutdown","error":"abandoned at shutdown: the grace period ended before it was sent","class":null}"#
        ]],
    );
}

#[test]
fn golden_approval() {
    check(
        approval(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"approval","branch":"primary","approval_id":"1767323000000-3f2a","by":"alice","reason":"replica caught up","given_at":1767323000000,"expires_at":1767323900000,"applied":true,"detail":"applied: the ready condition still holds"}"#
        ]],
    );
}

#[test]
fn golden_approval_not_applied() {
    check(
        approval_not_applied(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"approval_not_applied","branch":"primary","approval_id":"1767323000000-3f2a","state":"unready"}"#
        ]],
    );
}

#[test]
fn golden_override() {
    check(
        override_set(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"override","branch":"primary","action":"set","override":{"force":"unready","by":"alice","reason":"maintenance","at":1767322985678,"expires_at":1767326645678}}"#
        ]],
    );
    check(
        override_cleared(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"override","branch":"primary","action":"cleared"}"#
        ]],
    );
    let expired = Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::Expired,
        override_: Some(an_override()),
    });
    check(
        expired,
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"override","branch":"primary","action":"expired","override":{"force":"unready","by":"alice","reason":"maintenance","at":1767322985678,"expires_at":1767326645678}}"#
        ]],
    );
    let dropped = Record::Override(OverrideRecord {
        branch: "primary".into(),
        action: OverrideAction::DroppedAhead,
        override_: Some(an_override()),
    });
    check(
        dropped,
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"override","branch":"primary","action":"dropped_ahead","override":{"force":"unready","by":"alice","reason":"maintenance","at":1767322985678,"expires_at":1767326645678}}"#
        ]],
    );
}

#[test]
fn golden_state_sync_failed() {
    check(
        state_sync_failed(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"state_sync_failed","error":"state store /var/lib/readyprobe/orders-db.json: permission denied","class":"io","started_at":1767323040678}"#
        ]],
    );
    let final_sync = Record::StateSyncFailed(StateSyncFailed {
        error: "the final sync did not finish within the grace period".into(),
        class: Some(StoreSyncFailureClass::Timeout),
        started_at: None,
    });
    check(
        final_sync,
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"state_sync_failed","error":"the final sync did not finish within the grace period","class":"timeout","started_at":null}"#
        ]],
    );
}

#[test]
fn golden_both_branches_unready() {
    check(
        Record::BothBranchesUnready(BothBranchesUnready::new()),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"both_branches_unready","explanation":"no branch is ready; with every failover health check unhealthy Route 53 answers with the primary record anyway (fail-open)"}"#
        ]],
    );
}

#[test]
fn golden_evidence_reopened() {
    check(
        evidence_reopened(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"evidence_reopened","path":"/var/log/readyprobe/evidence.jsonl"}"#
        ]],
    );
}

#[test]
fn golden_evidence_segment() {
    check(
        evidence_segment(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"evidence_segment","segment":"orders-db/az-a/20260102T030000Z-4711.jsonl.gz","event":"upload_failed","class":"publish_unreachable","retry_in_ms":8000,"count":3}"#
        ]],
    );
}

#[test]
fn golden_duplicate_prober() {
    check(
        duplicate_prober(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"duplicate_prober","state_store":"s3://readyprobe-state/readyprobe/control-orders-db.json","instance":"6f1c2a9e04b7d3c8","other_instance":"b2e47d10c9a35f61","other_saved_at":1767323040012}"#
        ]],
    );
}

#[test]
fn golden_stop() {
    check(
        stop(),
        expect![[
            r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"stop","reason":"SIGTERM","attempts":{"primary":120,"secondary":119},"abandoned":1,"transitions":2,"dropped_batches":{"cloudwatch":1},"final_states":{"primary":"ready","secondary":"pending_approval"},"approvals_applied":0,"approvals_rejected":1,"state_sync_failures":0,"evidence_write_failures":0}"#
        ]],
    );
}

#[test]
fn kind_names_the_serialised_tag() {
    for r in every_kind() {
        let v: serde_json::Value = serde_json::from_str(&line(r.clone())).unwrap();
        assert_eq!(v["kind"], r.kind());
    }
}

#[test]
fn printed_names_are_the_serialised_ones() {
    fn check_all<T: Serialize + strum::VariantArray + Copy + Into<&'static str>>() {
        for v in T::VARIANTS {
            let printed: &'static str = (*v).into();
            assert_eq!(serde_json::to_value(v).unwrap(), printed);
        }
    }
    check_all::<PublishOutcome>();
    check_all::<PublishReason>();
    check_all::<PublishFailureClass>();
    check_all::<OverrideAction>();
    check_all::<StoreSyncFailureClass>();
}

#[tokio::test]
async fn writes_every_kind_and_reads_it_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let mut w = crate::sink::evidence::EvidenceWriter::open(&p, "orders-db", "az-a", 1 << 20, 1024)
        .unwrap();
    let written: Vec<Envelope> = every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, r)| Envelope::new(AT + i as Millis, "orders-db", "az-a", r))
        .collect();
    // Each line reads back with the number the writer gave it.
    let numbered: Vec<Envelope> = written
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, mut e)| {
            e.record_seq = Some(i as u64 + 1);
            e
        })
        .collect();
    for e in &written {
        w.record(e.at_ms, &e.record);
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    assert!(w.close(deadline).await);
    assert_eq!(w.failed(), 0);
    let f = std::io::BufReader::new(std::fs::File::open(&p).unwrap());
    let read: Vec<Envelope> = read_lines(f).map(Result::unwrap).collect();
    assert_eq!(read, numbered);
}

#[test]
fn bad_lines_are_numbered_errors_and_reading_goes_on() {
    let good = line(evidence_reopened());
    let long = "x".repeat(MAX_LINE_BYTES + 10);
    let text = format!("{good}\nnot json\n{long}\n{{\"kind\":\"unknown\"}}\n{good}{{\"at\":");
    let items: Vec<_> = read_lines(text.as_bytes()).collect();
    let summary: Vec<String> = items
        .iter()
        .map(|i| match i {
            Ok(e) => format!("ok {}", e.record.kind()),
            Err(e) => format!(
                "line {} {}",
                e.line,
                match e.reason {
                    LineErrorReason::Io(_) => "io",
                    LineErrorReason::TooLong => "too long",
                    LineErrorReason::Parse(_) => "parse",
                }
            ),
        })
        .collect();
    assert_eq!(
        summary,
        [
            "ok evidence_reopened",
            "line 3 parse",
            "line 4 too long",
            "line 5 parse",
            "ok evidence_reopened",
            "line 7 parse"
        ]
    );
}
