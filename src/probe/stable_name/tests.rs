//! The matching, pure: answers in, selection out.

use super::*;

fn a(name: &str, rtype: &str, data: &str) -> Answer {
    Answer {
        name: name.into(),
        rtype: rtype.into(),
        data: data.into(),
        ttl: 30,
    }
}

fn res(answers: Vec<Answer>) -> Resolution {
    Resolution {
        answers,
        ..Default::default()
    }
}

fn branches<'a>(p: &'a Resolution, s: &'a Resolution) -> Vec<BranchAnswer<'a>> {
    vec![
        BranchAnswer {
            name: "primary",
            role: Role::Primary,
            endpoint: "db-a.example.test",
            resolution: Some(p),
        },
        BranchAnswer {
            name: "secondary",
            role: Role::Secondary,
            endpoint: "db-b.example.test",
            resolution: Some(s),
        },
    ]
}

fn pair() -> (Resolution, Resolution) {
    (
        res(vec![a("db-a.example.test.", "A", "10.0.0.1")]),
        res(vec![
            a("db-b.example.test.", "CNAME", "host-b.example.test."),
            a("host-b.example.test.", "A", "10.0.0.2"),
        ]),
    )
}

#[test]
fn shared_address_selects_that_branch() {
    let (p, s) = pair();
    let b = branches(&p, &s);
    let sel = select(&[a("db.example.test.", "A", "10.0.0.1")], &b);
    assert_eq!(
        sel,
        Selection::Branch {
            name: "primary".into(),
            role: Role::Primary
        }
    );
    assert_eq!(sel.datum(), 1.0);
    let sel = select(&[a("db.example.test.", "A", "10.0.0.2")], &b);
    assert_eq!(sel.branch_name(), Some("secondary"));
    assert_eq!(sel.datum(), 2.0);
}

#[test]
fn cname_to_the_endpoint_or_its_chain_selects_that_branch() {
    let (p, s) = pair();
    let b = branches(&p, &s);
    // CNAME to the configured endpoint, case and root dot aside.
    let sel = select(&[a("db.example.test.", "CNAME", "DB-B.example.test.")], &b);
    assert_eq!(sel.branch_name(), Some("secondary"));
    // CNAME to a name inside the branch's own chain.
    let sel = select(
        &[a("db.example.test.", "CNAME", "host-b.example.test.")],
        &b,
    );
    assert_eq!(sel.branch_name(), Some("secondary"));
}

#[test]
fn an_answer_no_branch_has_is_unknown() {
    let (p, s) = pair();
    let b = branches(&p, &s);
    let sel = select(&[a("db.example.test.", "A", "10.0.0.9")], &b);
    assert_eq!(sel, Selection::Unknown);
    assert_eq!(sel.datum(), 0.0);
    assert_eq!(sel.branch_name(), None);
    // The owner name of the stable record itself never counts as a match.
    let sel = select(&[a("db-a.example.test.", "A", "10.0.0.9")], &b);
    assert_eq!(sel, Selection::Unknown);
}

#[test]
fn overlapping_branches_are_ambiguous() {
    let p = res(vec![a("db-a.example.test.", "A", "10.0.0.1")]);
    let s = res(vec![a("db-b.example.test.", "A", "10.0.0.1")]);
    let sel = select(&[a("db.example.test.", "A", "10.0.0.1")], &branches(&p, &s));
    assert_eq!(
        sel,
        Selection::Ambiguous(vec!["primary".into(), "secondary".into()])
    );
    assert_eq!(sel.datum(), 0.0);
}

#[test]
fn a_branch_that_did_not_resolve_still_matches_by_endpoint_name() {
    let (p, _) = pair();
    let mut b = branches(&p, &p);
    b[1].resolution = None;
    let sel = select(&[a("db.example.test.", "CNAME", "db-b.example.test.")], &b);
    assert_eq!(sel.branch_name(), Some("secondary"));
    let sel = select(&[a("db.example.test.", "A", "10.0.0.7")], &b);
    assert_eq!(sel, Selection::Unknown);
}

#[test]
fn observation_flags_unknown_target_only_for_unknown() {
    let mut o = Observation {
        answers: vec![],
        selection: Some(Selection::Unknown),
        failure: None,
        branch_failures: vec![],
    };
    assert!(o.unknown_target());
    o.selection = None;
    assert!(!o.unknown_target());
    o.selection = Some(Selection::Ambiguous(vec![]));
    assert!(!o.unknown_target());
}

#[test]
fn the_record_says_selected_unknown_or_the_failure() {
    let o = Observation {
        answers: vec![a("db.example.test.", "A", "10.0.0.9")],
        selection: Some(Selection::Unknown),
        failure: None,
        branch_failures: vec![("secondary".into(), FailureClass::DnsTimeout)],
    };
    let r = o.record("db.example.test");
    assert!(r.unknown_target);
    assert_eq!(r.selected, None);
    assert_eq!(r.class, Some(FailureClass::StableNameUnknownTarget));
    assert_eq!(
        r.error.as_deref(),
        Some("the answer matches no branch: db.example.test. A 10.0.0.9")
    );
    assert_eq!(r.branch_failures["secondary"], FailureClass::DnsTimeout);
    assert_eq!(o.datum(), 0.0);
    let o = Observation {
        answers: vec![],
        selection: None,
        failure: Some((FailureClass::DnsNxdomain, "no such name".into())),
        branch_failures: vec![],
    };
    let r = o.record("db.example.test");
    assert!(!r.unknown_target);
    assert_eq!(r.class, Some(FailureClass::DnsNxdomain));
    assert_eq!(r.error.as_deref(), Some("no such name"));
    let o = Observation {
        answers: vec![a("db.example.test.", "A", "10.0.0.2")],
        selection: Some(Selection::Branch {
            name: "secondary".into(),
            role: Role::Secondary,
        }),
        failure: None,
        branch_failures: vec![],
    };
    assert_eq!(
        o.record("db.example.test").selected.as_deref(),
        Some("secondary")
    );
    assert_eq!(o.datum(), 2.0);
}

/// The two branches of a `tcp` service, each on its own port, prepared as `run` does.
fn tcp_probes() -> Vec<BranchProbe> {
    let text = r#"
[service]
name = "orders-db"
stable_name = "db.example.test"

[probe]
kind = "tcp"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "db-b.example.test"
port = 3307

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "db-a.example.test"
port = 3306
"#;
    let cfg = crate::config::parse(std::path::Path::new("t.toml"), text)
        .unwrap_or_else(|e| panic!("{:?}", e.issues));
    crate::probe::branches(
        &cfg,
        &cfg.services[0],
        &crate::secrets::SecretCache::default(),
    )
    .unwrap()
}

/// The end-to-end attempt goes to the stable name with the selected branch's port, else the
/// PRIMARY's; its canary row is the reserved key, and only it may resolve the stable name.
#[test]
fn the_end_to_end_probe_is_the_selected_branchs_through_the_stable_name() {
    let probes: Vec<BranchProbe> = tcp_probes()
        .iter()
        .map(BranchProbe::through_stable_name)
        .collect();
    for p in &probes {
        assert_eq!(p.branch.endpoint, "db.example.test");
        assert!(p.end_to_end);
        assert_eq!(p.canary_key(), crate::config::END_TO_END_KEY);
    }
    let secondary = Selection::Branch {
        name: "secondary".into(),
        role: Role::Secondary,
    };
    let port = |s: Option<&Selection>| end_to_end_probe(&probes, s).map(|p| p.branch.port);
    assert_eq!(port(Some(&secondary)), Some(3307));
    assert_eq!(port(Some(&Selection::Unknown)), Some(3306));
    assert_eq!(port(Some(&Selection::Ambiguous(vec![]))), Some(3306));
    assert_eq!(port(None), Some(3306));
    assert_eq!(end_to_end_probe(&[], None).map(|p| p.branch.port), None);
    // The branches' own probes are unchanged.
    let own = tcp_probes();
    assert!(
        own.iter()
            .all(|p| !p.end_to_end && p.canary_key() == p.branch.name)
    );
}
