//! Property-based fuzzing of the two readers of untrusted files: the config (parse, validate,
//! report, plan) and the evidence reader (`record::read_lines`). Neither may panic, hang or hold
//! more than its bound; every report stays one escaped line per issue.
//!
//! Cases per target: 256 (the key grammar 1024), or `READYPROBE_FUZZ_CASES` (see docs/development.md for the long run).
//! A failure is not persisted to a file: each one found becomes a named test below.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError};
use readyprobe::record::{self, MAX_LINE_BYTES};
use std::io::Read;
use std::path::Path;

fn runner(default_cases: u32) -> RunnerConfig {
    let cases = std::env::var("READYPROBE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    }
}

// ---- config ----------------------------------------------------------------------------------

use crate::support::config::BASE_TCP as BASE;

/// [`BASE`] as (table, line) pairs the grammar can override key by key.
const BASE_TABLES: [(&str, &str); 4] = [
    (
        "service",
        "name = \"orders-db\"\nstable_name = \"mysql.orders.internal.example\"",
    ),
    ("probe", "kind = \"tcp\""),
    ("probe.tcp", "port = 3306"),
    ("", ""),
];

/// [`BASE`]'s branches.
const BASE_BRANCHES: &str = "[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"mysql-primary.orders.internal.example\"\n[[branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"mysql-secondary.orders.internal.example\"\n";

/// Every table and key of the config reference, `""` being the top level.
const KEYS: &[(&str, &[&str])] = &[
    ("", &["prober_id", "state_dir"]),
    ("service", &["name", "stable_name"]),
    ("readiness", &["window", "min_attempts", "initial"]),
    (
        "readiness.declare_unready",
        &["success_rate_below", "for", "window"],
    ),
    (
        "readiness.declare_ready",
        &["success_rate_at_or_above", "for", "window", "approval"],
    ),
    ("publish", &["interval", "namespace", "sinks"]),
    (
        "publish.cloudwatch",
        &[
            "region",
            "endpoint_url",
            "operation_timeout",
            "max_attempts",
        ],
    ),
    ("evidence", &["path", "max_size_mb"]),
    ("state", &["store", "poll_interval"]),
    (
        "state.s3",
        &["bucket", "key_prefix", "region", "endpoint_url"],
    ),
    (
        "dns",
        &["nameservers", "address_family", "resolv_conf", "timeout"],
    ),
    (
        "probe",
        &["kind", "interval", "suspect_interval", "timeout", "jitter"],
    ),
    (
        "probe.step_timeout",
        &["resolve", "connect", "tls", "auth", "write", "verify"],
    ),
    (
        "probe.tls",
        &[
            "ssl_mode",
            "ssl_ca",
            "ssl_cert",
            "ssl_key",
            "tls_min_version",
        ],
    ),
    (
        "probe.mysql",
        &["port", "user", "password", "database", "table"],
    ),
    ("probe.tcp", &["port"]),
    (
        "probe.http",
        &[
            "port",
            "method",
            "path",
            "headers",
            "body",
            "expect_status",
            "expect_body_contains",
            "expect_json",
            "expect_header",
        ],
    ),
    ("probe.http.verify", &["method", "path", "expect_status"]),
    ("probe.otlp", &["port", "path", "headers"]),
];

const BRANCH_KEYS: &[&str] = &["name", "role", "endpoint", "port", "weight"];

/// Values of every type, valid and hostile, offered to every key (type confusion included).
const VALUES: &[&str] = &[
    "\"0s\"",
    "\"1ns\"",
    "\"10ms\"",
    "\"2s\"",
    "\"25h\"",
    "\"366d\"",
    "\"5000000000000000000s\"",
    "\"-1s\"",
    "\"2 parsecs\"",
    "0",
    "-1",
    "1",
    "3306",
    "65536",
    "9223372036854775807",
    "1e308",
    "nan",
    "-inf",
    "99.5",
    "true",
    "\"\"",
    "\"PRIMARY\"",
    "\"SECONDARY\"",
    "\"mysql\"",
    "\"tcp\"",
    "\"http\"",
    "\"otlp\"",
    "\"s3\"",
    "\"file\"",
    "\"emf\"",
    "\"cloudwatch\"",
    "\"required\"",
    "\"verify_identity\"",
    "\"1.3\"",
    "\"ipv6\"",
    "\"mysql-primary.orders.internal.example\"",
    "\"mysql.orders.internal.example\"",
    "\"127.0.0.1\"",
    "\"http://127.0.0.1:4566\"",
    "\"not a url\"",
    "\"/orders\"",
    "\"\\u001b]0;x\\u0007\\r\\nFORGED\"",
    "\"\\u202eevil\"",
    "\"ü\"",
    "[]",
    "[\"emf\", \"emf\"]",
    "[\"8.8.8.8\", \"::1:53\", \"x\"]",
    "[200, 70000]",
    "{ env = \"X\" }",
    "{ file = \"/nonexistent\" }",
    "{ env = \"X\", file = \"y\" }",
    "{ pointer = \"/a\", equals = \"b\" }",
    "{ for = \"1m\", window = \"2m\" }",
    "{ a = { b = { c = 1 } } }",
];

/// A value from [`VALUES`] or a long or odd string.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::sample::select(VALUES).prop_map(str::to_string),
        1 => (1usize..400).prop_map(|n| format!("\"{}\"", "a".repeat(n))),
        1 => "[a-z.\\-_]{0,80}".prop_map(|s| format!("\"{s}\"")),
    ]
}

/// The base config with tables dropped, keys set and `[[branch]]` tables added: TOML that
/// mostly parses, so validation is what gets exercised.
fn grammar_config() -> impl Strategy<Value = String> {
    let entry = (0..KEYS.len(), 0usize..16, value());
    let branch = proptest::collection::vec((0..BRANCH_KEYS.len(), value()), 0..5);
    // A quarter of the cases change only the branches, so accepted configs are frequent too.
    let entries = prop_oneof![
        1 => Just(Vec::new()),
        3 => proptest::collection::vec(entry, 1..24),
    ];
    (
        entries,
        proptest::collection::vec(branch, 0..4),
        proptest::bool::weighted(0.8),
    )
        .prop_map(|(entries, branches, keep_base)| {
            let mut tables: Vec<(String, Vec<String>)> = Vec::new();
            if keep_base {
                for (name, line) in BASE_TABLES {
                    tables.push((name.to_string(), vec![line.to_string()]));
                }
            }
            for (t, k, v) in entries {
                let (table, keys) = KEYS[t];
                let key = keys[k % keys.len()];
                let line = format!("{key} = {v}");
                match tables.iter_mut().find(|(n, _)| n == table) {
                    // A key set twice replaces the earlier value (a duplicate is its own case).
                    Some((_, lines)) => match lines
                        .iter_mut()
                        .find(|l| l.starts_with(&format!("{key} =")))
                    {
                        Some(l) => *l = line,
                        None => lines.push(line),
                    },
                    None => tables.push((table.to_string(), vec![line])),
                }
            }
            let mut text = String::new();
            if let Some((_, top)) = tables.iter().find(|(n, _)| n.is_empty()) {
                text.push_str(&top.join("\n"));
                text.push('\n');
            }
            for (name, lines) in tables.iter().filter(|(n, _)| !n.is_empty()) {
                text.push_str(&format!("[{name}]\n{}\n", lines.join("\n")));
            }
            if keep_base {
                text.push_str(BASE_BRANCHES);
            }
            for b in branches {
                text.push_str("[[branch]]\n");
                // One value per key: the last drawn.
                let b: std::collections::BTreeMap<usize, String> = b.into_iter().collect();
                for (k, v) in b {
                    text.push_str(&format!("{} = {v}\n", BRANCH_KEYS[k]));
                }
            }
            text
        })
}

/// The base config with bytes replaced, inserted and removed.
fn mutated(base: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..12).prop_map(
        move |edits| {
            let mut b = base.to_vec();
            for (at, byte, op) in edits {
                let i = at.index(b.len() + 1);
                match op {
                    0 if i < b.len() => b[i] = byte,
                    1 => b.insert(i, byte),
                    _ if i < b.len() => {
                        b.remove(i);
                    }
                    _ => b.push(byte),
                }
            }
            b
        },
    )
}

/// Parse, validate and report `text`: no panic; an accepted config renders its plan; a
/// rejected one reports at least one issue, each on one line without a raw control character
/// and located within the file.
fn check_config(text: &str) -> Result<(), TestCaseError> {
    match readyprobe::config::parse(Path::new("fuzz.toml"), text) {
        Ok(cfg) => {
            let plan = readyprobe::cli::plan(&cfg);
            prop_assert!(plan.contains("valid"));
        }
        Err(e) => {
            prop_assert!(!e.issues.is_empty());
            let shown = e.to_string();
            prop_assert!(
                !shown.chars().any(|c| c.is_control() && c != '\n'),
                "raw control character in {shown:?}"
            );
            prop_assert_eq!(shown.lines().count(), e.issues.len() + 1, "{}", shown);
            let lines = text.split('\n').count();
            for i in &e.issues {
                if let Some(l) = i.line {
                    prop_assert!((1..=lines).contains(&l), "line {l} of {lines}: {i:?}");
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(runner(256))]

    /// Arbitrary bytes (as the lossy UTF-8 a file read would give).
    #[test]
    fn config_from_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_config(&String::from_utf8_lossy(&bytes))?;
    }



    /// A valid config with a few bytes changed.
    #[test]
    fn config_mutated(bytes in mutated(BASE.as_bytes())) {
        check_config(&String::from_utf8_lossy(&bytes))?;
    }
}

/// The grammar reaches every outcome: accepted configs, validation errors and syntax errors
/// (a generator that only produced syntax errors would fuzz the TOML parser, not readyprobe).
#[test]
fn the_config_grammar_reaches_validation() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut ok, mut invalid, mut syntax) = (0, 0, 0);
    for _ in 0..400 {
        let text = grammar_config().new_tree(&mut runner).unwrap().current();
        match readyprobe::config::parse(Path::new("fuzz.toml"), &text) {
            Ok(_) => ok += 1,
            Err(e)
                if e.issues[0].key == "(syntax)"
                    || e.issues[0].message.starts_with("duplicate") =>
            {
                syntax += 1;
            }
            Err(_) => invalid += 1,
        }
    }
    assert!(
        ok >= 10 && invalid >= 100 && syntax >= 5,
        "accepted {ok}, invalid {invalid}, syntax {syntax}"
    );
}

proptest! {
    // More cases: a hostile value must land on a key whose error quotes it.
    #![proptest_config(runner(1024))]

    /// TOML from the grammar of the real keys and hostile values.
    #[test]
    fn config_from_the_key_grammar(text in grammar_config()) {
        check_config(&text)?;
    }
}

// ---- evidence --------------------------------------------------------------------------------

/// Real evidence lines, one per record kind the fuzzer mutates.
const RECORDS: &str = concat!(
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"start","config":"probes/orders-db.toml","branches":[{"name":"primary","role":"PRIMARY","endpoint":"primary.orders-db.example.internal","port":3306}],"duration_ms":600000,"state_store":"/var/lib/readyprobe/orders-db.json","restored":[{"branch":"primary","state":"ready","since":1767236645678}]}"#,
    "\n",
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"attempt","branch":"secondary","seq":3,"marker":"fedcba9876543210fedcba9876543210","started_at":1767323044678,"finished_at":1767323045678,"steps":[{"step":"connect","duration_ms":0.5,"ok":false,"class":"tcp_refused"}],"answers":[],"address":"10.0.1.5:3306","result":"failure","step":"connect","class":"tcp_refused","message":"connection refused"}"#,
    "\n",
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"transition","branch":"primary","transition":{"from":"ready","to":"unready","at":1767323045678,"reason":"3 of 3 attempts failed in 30s","held_since":1767323015678,"unready_window":{"window_ms":30000,"finished":3,"failed":3,"success_rate_percent":0.0,"failure_classes":[["tcp_refused",3]]},"ready_window":{"window_ms":300000,"finished":30,"failed":3,"success_rate_percent":90.0,"failure_classes":[["tcp_refused",3]]}},"published":0.0,"override":null}"#,
    "\n",
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"publish","sink":"cloudwatch","reason":"transition","datums":1,"sent":0,"tries":3,"dropped":true,"outcome":"failed","error":"connection refused"}"#,
    "\n",
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"override","branch":"primary","action":"set","override":{"force":"unready","by":"alice","reason":"maintenance","at":1767322985678,"expires_at":1767326645678}}"#,
    "\n",
    r#"{"at":"2026-01-02T03:04:05.678Z","at_ms":1767323045678,"service":"orders-db","prober":"az-a","kind":"stop","reason":"SIGTERM","attempts":{"primary":120,"secondary":119},"abandoned":1,"transitions":2,"dropped_batches":{"cloudwatch":1},"final_states":{"primary":"ready","secondary":"pending_approval"},"approvals_applied":0,"approvals_rejected":1,"state_sync_failures":0,"evidence_write_failures":0}"#,
    "\n",
);

/// Read `bytes` as an evidence file: no panic, at most one item per line, line numbers
/// ascending within the file.
fn check_evidence(bytes: &[u8]) -> Result<(), TestCaseError> {
    let lines = bytes.split(|b| *b == b'\n').count();
    let mut n = 0;
    let mut last_error_line = 0;
    for item in record::read_lines(bytes) {
        n += 1;
        if let Err(e) = item {
            prop_assert!(e.line > last_error_line && e.line as usize <= lines, "{e}");
            last_error_line = e.line;
        }
    }
    prop_assert!(n <= lines, "{n} items from {lines} lines");
    Ok(())
}

proptest! {
    #![proptest_config(runner(256))]

    /// Arbitrary bytes.
    #[test]
    fn evidence_from_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        check_evidence(&bytes)?;
    }

    /// Real records with bytes changed, inserted and removed.
    #[test]
    fn evidence_mutated(bytes in mutated(RECORDS.as_bytes())) {
        check_evidence(&bytes)?;
    }
}

/// The fixture is real: every line reads as a record, so the mutations start from the format.
#[test]
fn evidence_fixture_reads_cleanly() {
    let read: Vec<_> = record::read_lines(RECORDS.as_bytes()).collect();
    assert_eq!(read.len(), 6);
    assert!(read.iter().all(Result::is_ok), "{read:?}");
}

/// A line far beyond the bound is skipped as too long while reading on through it, without
/// being held: the reader takes 3 MiB without a newline from a stream, then a good record.
#[test]
fn evidence_overlong_line_is_one_error_then_reading_goes_on() {
    let long = std::io::repeat(b'x').take(3 * MAX_LINE_BYTES as u64);
    let first_record = RECORDS.split_inclusive('\n').next().unwrap();
    let reader =
        std::io::BufReader::new(long.chain(b"\n".as_slice()).chain(first_record.as_bytes()));
    let read: Vec<_> = record::read_lines(reader).collect();
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(read[0].as_ref().is_err_and(|e| e.line == 1));
    assert!(read[1].is_ok(), "{read:?}");
}
