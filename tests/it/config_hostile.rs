//! Hostile and absurd configs: every value that would break every attempt or publish is an
//! error naming its file, line and key; text from the file never reaches a terminal raw; error
//! reporting stays linear in the file size.

use readyprobe::config::{self, Issue};
use std::path::Path;

use crate::support::config::BASE_TCP as BASE;

fn issues(text: &str) -> Vec<Issue> {
    match config::parse(Path::new("hostile.toml"), text) {
        Ok(_) => vec![],
        Err(e) => e.issues,
    }
}

/// `BASE` with `add` appended (a new table) or, with `replace`, one text swapped.
fn with(replace: &str, by: &str) -> String {
    assert!(BASE.contains(replace), "{replace}");
    BASE.replacen(replace, by, 1)
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// Exactly one error, on `key`, on the line holding `needle`, whose message contains `says`.
#[track_caller]
fn one_error(text: &str, key: &str, needle: &str, says: &str) {
    let got = issues(text);
    assert_eq!(got.len(), 1, "{key}: {got:#?}\n{text}");
    assert_eq!(got[0].key, key, "{got:#?}");
    assert_eq!(got[0].line, Some(line_of(text, needle)), "{got:#?}");
    assert!(got[0].message.contains(says), "{key}: {got:#?}");
}

#[test]
fn the_base_config_is_valid() {
    assert_eq!(issues(BASE), vec![]);
}

/// Timeouts no attempt or publish can finish in, each refused at its key with its minimum.
#[test]
fn absurd_timeouts_are_errors_naming_key_line_and_minimum() {
    for (table, line, key, min) in [
        ("[probe]", "timeout = \"1ns\"", "probe.timeout", "10ms"),
        ("[probe]", "timeout = \"9ms\"", "probe.timeout", "10ms"),
        ("[probe]", "timeout = \"0s\"", "probe.timeout", "10ms"),
        ("[dns]", "timeout = \"0s\"", "dns.timeout", "10ms"),
        ("[dns]", "timeout = \"999us\"", "dns.timeout", "10ms"),
        (
            "[probe.step_timeout]",
            "connect = \"1ns\"",
            "probe.step_timeout.connect",
            "10ms",
        ),
        (
            "[publish.cloudwatch]",
            "operation_timeout = \"0s\"",
            "publish.cloudwatch.operation_timeout",
            "1s",
        ),
        (
            "[publish.cloudwatch]",
            "operation_timeout = \"999ms\"",
            "publish.cloudwatch.operation_timeout",
            "1s",
        ),
    ] {
        let text = if table == "[probe]" {
            with("kind = \"tcp\"", &format!("kind = \"tcp\"\n{line}"))
        } else {
            format!("{BASE}\n{table}\n{line}\n")
        };
        one_error(&text, key, line, &format!("minimum, {min}"));
    }
    // The minimums themselves are accepted.
    for (table, line) in [
        ("[dns]", "timeout = \"10ms\""),
        ("[publish.cloudwatch]", "operation_timeout = \"1s\""),
        ("[probe.step_timeout]", "connect = \"10ms\""),
    ] {
        assert_eq!(issues(&format!("{BASE}\n{table}\n{line}\n")), vec![]);
    }
}

/// A zero interval is one error on the interval, not follow-on errors about the timeout,
/// jitter and readiness windows the user never wrote.
#[test]
fn a_zero_interval_is_one_clear_error() {
    for interval in ["0s", "1ns", "99ms"] {
        let text = with(
            "kind = \"tcp\"",
            &format!("kind = \"tcp\"\ninterval = \"{interval}\""),
        );
        one_error(&text, "probe.interval", "interval =", "at least 100ms");
    }
    // A timeout written beside it is still checked against its own minimum.
    let text = with(
        "kind = \"tcp\"",
        "kind = \"tcp\"\ninterval = \"0s\"\ntimeout = \"0s\"",
    );
    let keys: Vec<String> = issues(&text).into_iter().map(|i| i.key).collect();
    assert_eq!(keys, ["probe.interval", "probe.timeout"]);
}

/// Readiness windows and `for` durations beyond a day are refused (a huge window grew the
/// control document without bound); a day is accepted.
#[test]
fn readiness_windows_are_bounded_at_a_day() {
    for (line, key) in [
        ("window = \"25h\"", "readiness.window"),
        (
            "declare_unready = { for = \"2d\" }",
            "readiness.declare_unready.for",
        ),
        (
            "declare_unready = { window = \"24h 1s\" }",
            "readiness.declare_unready.window",
        ),
        (
            "declare_ready = { for = \"366d\" }",
            "readiness.declare_ready.for",
        ),
        (
            "declare_ready = { window = \"30d\" }",
            "readiness.declare_ready.window",
        ),
    ] {
        let text = format!("{BASE}\n[readiness]\n{line}\n");
        one_error(&text, key, line, "longest readiness window, 24h");
    }
    // A day is accepted where the window's attempts fit the control document.
    let day = format!(
        "{BASE}\n[readiness]\nwindow = \"24h\"\ndeclare_ready = {{ for = \"24h\" }}\ndeclare_unready = {{ for = \"24h\" }}\n"
    );
    let ok = day.replacen("kind = \"tcp\"", "kind = \"tcp\"\ninterval = \"5s\"", 1);
    assert_eq!(issues(&ok), vec![]);
    // At the default 2 s interval a day holds 43,200 attempts per branch, all saved to the
    // control document on every sync.
    one_error(&day, "readiness.window", "window = ", "more than 20000");
}

/// Endpoint overrides are absolute http(s) URLs with a host and no credentials.
#[test]
fn endpoint_urls_must_be_http_urls_with_a_host() {
    for (url, says) in [
        ("not a url", "not a URL"),
        ("", "not a URL"),
        ("localhost:4566", "http:// or https://"),
        ("ftp://example.test", "http:// or https://"),
        ("/just/a/path", "http:// or https://"),
        ("http://user:pw@127.0.0.1:4566", "user name or password"),
    ] {
        for (table, key) in [
            ("[publish.cloudwatch]", "publish.cloudwatch.endpoint_url"),
            (
                "[state]\nstore = \"s3\"\n[state.s3]\nbucket = \"b\"",
                "state.s3.endpoint_url",
            ),
        ] {
            let line = format!("endpoint_url = \"{url}\"");
            let text = format!("{BASE}\n{table}\n{line}\n");
            one_error(&text, key, "endpoint_url", says);
            if url.contains("pw@") {
                assert!(!issues(&text)[0].message.contains("pw@"));
            }
        }
    }
    for url in [
        "http://127.0.0.1:4566",
        "https://monitoring.eu-west-1.amazonaws.com",
        "http://[::1]:4566/",
    ] {
        let text = format!("{BASE}\n[publish.cloudwatch]\nendpoint_url = \"{url}\"\n");
        assert_eq!(issues(&text), vec![], "{url}");
    }
}

/// Names CloudWatch cannot carry as dimension values, or the file store cannot put in a file
/// name, are refused.
#[test]
fn names_are_printable_ascii_within_their_bounds() {
    let long = |n: usize| "s".repeat(n);
    for (name, says) in [
        ("orders\u{1b}[31m".to_string(), "printable ASCII"),
        ("orders\tdb".to_string(), "printable ASCII"),
        ("bestellungen-ü".to_string(), "printable ASCII"),
        ("orders\u{7f}".to_string(), "printable ASCII"),
        (long(256), "1–227 characters"),
        (long(228), "1–227 characters"),
    ] {
        let text = with(
            "name = \"orders-db\"",
            &format!("name = {}", toml_string(&name)),
        );
        one_error(&text, "service.name", "name = ", says);
    }
    for (name, says) in [
        ("primary\u{0}".to_string(), "printable ASCII"),
        ("primär".to_string(), "printable ASCII"),
        ("primary\u{202e}".to_string(), "printable ASCII"),
        (long(65), "1–64 characters"),
        (long(256), "1–64 characters"),
    ] {
        let text = with(
            "name = \"primary\"",
            &format!("name = {}", toml_string(&name)),
        );
        one_error(&text, "branch[0].name", &toml_string(&name), says);
    }
    // The longest accepted names.
    let text = with("name = \"orders-db\"", &format!("name = \"{}\"", long(227))).replacen(
        "name = \"primary\"",
        &format!("name = \"{}\"", long(64)),
        1,
    );
    assert_eq!(issues(&text), vec![]);
}

/// The longest accepted service name still makes file-store file names the file system takes
/// (a 256-character one failed with "File name too long").
#[tokio::test]
async fn the_longest_service_name_fits_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let text = with(
        "name = \"orders-db\"",
        &format!("name = \"{}\"", "s".repeat(227)),
    );
    let cfg = config::parse(&dir.path().join("c.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let file = readyprobe::state::FileStore::new(dir.path(), &cfg.services[0].service.name);
    let path = file.path().to_owned();
    readyprobe::state::Store::File(file)
        .update(|doc| {
            doc.probers.clear();
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(path.exists());
}

/// Stable names and branch endpoints are DNS host names: labels of 1–63 letters, digits, `-`
/// and `_` that neither start nor end with `-`, 253 characters in all.
#[test]
fn stable_names_and_endpoints_are_host_names() {
    let label = |n: usize| "a".repeat(n);
    let too_long = format!("{0}.{0}.{0}.{0}.example", label(62));
    for bad in [
        "mysql .orders.example",
        "mysql\u{1b}.orders.example",
        "-mysql.orders.example",
        "mysql-.orders.example",
        "mysql..orders.example",
        "mysql.ördërs.example",
        "https://mysql.orders.example",
        &format!("{}.example", label(64)),
        &too_long,
    ] {
        let text = with(
            "stable_name = \"mysql.orders.internal.example\"",
            &format!("stable_name = {}", toml_string(bad)),
        );
        one_error(&text, "service.stable_name", "stable_name", "");
        let text = with(
            "endpoint = \"mysql-primary.orders.internal.example\"",
            &format!("endpoint = {}", toml_string(bad)),
        );
        one_error(&text, "branch[0].endpoint", "endpoint = ", "");
    }
    let ok = with(
        "stable_name = \"mysql.orders.internal.example\"",
        &format!("stable_name = \"_mysql._tcp.{}.example.\"", label(63)),
    );
    assert_eq!(issues(&ok), vec![]);
}

/// A one-line TOML basic string holding `s`, everything but printable ASCII escaped.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// A key or table written twice is an error naming it by its dotted path (toml's own message
/// is only "duplicate key").
#[test]
fn a_duplicate_key_names_the_key() {
    for (text, key) in [
        (
            with("port = 3306", "port = 3306\nport = 3307"),
            "probe.tcp.port",
        ),
        (
            with("kind = \"tcp\"", "kind = \"tcp\"\nkind = \"tcp\""),
            "probe.kind",
        ),
        (format!("{BASE}\n[probe]\ninterval = \"5s\"\n"), "probe"),
        (
            with(
                "[[branch]]",
                "[[branch]] # first\nname = \"x\"\nname = \"y\"",
            )
            .replacen("name = \"primary\"\n", "", 1),
            "branch.name",
        ),
        ("a = 1\na = 2\n".to_string(), "a"),
    ] {
        let got = issues(&text);
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!(got[0].key, key, "{got:#?}");
        assert!(got[0].message.contains(&format!("`{key}`")), "{got:#?}");
    }
}

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
}

/// What a terminal would receive: no escape, bell or carriage-return byte, and no line the
/// input forged.
#[track_caller]
fn assert_inert(out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    assert!(
        !out.iter().any(|b| matches!(b, 0x1b | 0x07 | b'\r' | 0x9b)),
        "raw control byte in:\n{text:?}"
    );
    assert!(!text.contains('\u{202e}'), "{text:?}");
    assert!(
        !text.lines().any(|l| l.starts_with("FORGED")),
        "a forged line:\n{text}"
    );
}

/// `check` and its error report never echo a config's control characters raw: escape
/// sequences from keys, values and names are shown escaped.
#[test]
fn check_escapes_control_characters_from_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nFORGED line\u{202e}";
    for text in [
        // An unknown key (the serde error quotes it).
        with(
            "[service]",
            &format!("[service]\n{} = 1", toml_string(hostile)),
        ),
        // A duplicate key (the syntax error now names it).
        format!(
            "{} = 1\n{} = 2\n",
            toml_string(hostile),
            toml_string(hostile)
        ),
        // An invalid name (the message quotes it).
        with(
            "name = \"orders-db\"",
            &format!("name = {}", toml_string(hostile)),
        ),
        // An unknown enum value.
        with(
            "kind = \"tcp\"",
            &format!("kind = {}", toml_string(hostile)),
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let out = bin()
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{text}");
        assert_inert(&out.stderr);
        // Shown, escaped (as Rust writes it, or as the file wrote it).
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("\\u{1b}]0;pwned") || err.contains("\\u001B]0;pwned"),
            "{err}"
        );
    }
}

/// `status` shows the free text of a state document (any writer's) escaped, and `override`
/// and `approve` refuse to record control characters.
#[tokio::test]
async fn status_escapes_control_characters_from_the_state_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, BASE).unwrap();
    let reason = "maintenance\u{1b}[2J\nFORGED: branch primary ready\u{7}";
    for cmd in ["override", "approve"] {
        let out = bin()
            .args([cmd, "--branch", "primary", "--expires", "1h", "--config"])
            .arg(&path)
            .args(["--by", "ops", "--reason", reason])
            .args(if cmd == "override" {
                &["--force", "unready"][..]
            } else {
                &[]
            })
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{cmd}");
        assert_inert(&out.stderr);
    }
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let file = readyprobe::state::FileStore::new(&state_dir, "orders-db");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    readyprobe::state::Store::File(file)
        .update(move |doc| {
            doc.overrides.insert(
                "primary".into(),
                readyprobe::control::Override {
                    force: readyprobe::control::Forced::Unready,
                    by: "ops\r\nFORGED by".into(),
                    reason: reason.into(),
                    at: now,
                    expires_at: now + 3_600_000,
                },
            );
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = bin()
        .args(["status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_inert(&out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("maintenance\\u{1b}[2J\\nFORGED"), "{text}");
}

/// Error reporting is linear in the file: a config of just under 1 MiB made of ~22,500 tiny
/// `[[branch]]` tables, each with four errors, is reported in full, first to last table. (It
/// took minutes of CPU when each issue's line was found by rescanning the text; no timing is
/// asserted, the fixed line lookup is what keeps it fast.)
#[test]
fn many_bad_tables_are_all_reported() {
    let head = "[service]\nname = \"s\"\nstable_name = \"s.example\"\n[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 1\n";
    let table = "[[branch]]\nname=\"\"\nrole=\"PRIMARY\"\nendpoint=\"\"\n";
    let n = (1024 * 1024 - head.len()) / table.len();
    let text = format!("{head}{}", table.repeat(n));
    assert!(text.len() <= 1024 * 1024 && n > 22_000, "{n}");
    let got = issues(&text);
    let last_line = text.lines().count();
    let first = &got[0];
    let last = got.last().unwrap();
    assert_eq!(
        (first.key.as_str(), first.line),
        ("branch[0].name", Some(9))
    );
    assert_eq!(
        (last.key.clone(), last.line),
        (format!("branch[{}].endpoint", n - 1), Some(last_line)),
        "{}",
        got.len()
    );
    // Four problems per table but the first (which is the only PRIMARY and its name unique).
    assert_eq!(got.len(), 4 * n - 2);
}

/// `probe` prints what the peer sent (here a certificate subject with escape sequences, from a
/// real TLS server on loopback) escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_escapes_what_the_peer_sent() {
    use crate::support::config::ConfigBuilder;
    use crate::support::dns::DnsServer;
    use crate::support::tls::TestCa;
    let ca = TestCa::new();
    // Presented, not verified (`required`): any subject reaches the report.
    let cert = ca.client_cert("evil\u{1b}]0;pwned\u{7}\u{1b}[2J\nFORGED line");
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.rustls_server_config());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(s).await;
            });
        }
    });
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gateway", std::net::Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = ConfigBuilder::new(dir.path(), "gateway", "gw.orders.internal.example")
        .nameserver(dns.addr())
        .kind("tcp")
        .set("probe.tcp", "port", i64::from(port))
        .tls("required", None)
        .branch(
            "primary",
            "PRIMARY",
            "gateway.orders.internal.example",
            None,
        )
        .write(&dir.path().join("c.toml"));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["probe", "--branch", "primary", "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    server.abort();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_inert(&out.stdout);
    assert!(
        text.contains("certificate") && text.contains("pwned"),
        "{text}"
    );
}

/// Each publish target is a sink of its own (a queue, a task, a client, a `PutMetricData` per
/// tick, its series billed): a service lists at most ten; 10,000 is one error on the key's
/// line, and ten are fine.
#[test]
fn publish_targets_are_bounded_per_service() {
    let list = |n: usize| {
        let t: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "{{ name = \"t{i}\", endpoint_url = \"http://10.0.0.1:{}\" }}",
                    1000 + i
                )
            })
            .collect();
        with(
            "[service]\n",
            &format!(
                "[publish]\nsinks = [\"cloudwatch\"]\n\n[service]\npublish = [{}]\n",
                t.join(", ")
            ),
        )
    };
    assert_eq!(issues(&list(10)), vec![]);
    for n in [11, 10_000] {
        one_error(
            &list(n),
            "service.publish",
            "publish = [",
            &format!("lists {n} targets; at most 10"),
        );
    }
}

/// Two targets of one service that differ only by name are one destination: every datum would
/// be sent and billed twice. The second is an error on its own line.
#[test]
fn one_destination_is_one_target() {
    let text = with(
        "[service]\n",
        "[publish]\nsinks = [\"cloudwatch\"]\n\n[service]\npublish = [\n  { name = \"a\", region = \"eu-west-1\" },\n  { name = \"b\", region = \"eu-west-1\" },\n]\n",
    );
    one_error(
        &text,
        "service.publish[1].name",
        "name = \"b\"",
        "the same destination as target \"a\"",
    );
    let other = text.replace(
        "name = \"b\", region = \"eu-west-1\"",
        "name = \"b\", region = \"eu-west-1\", role_arn = \"arn:aws:iam::111122223333:role/pub\"",
    );
    assert_eq!(issues(&other), vec![]);
}

/// A region name of 100,000 characters, as a branch's region or an RDS IAM token's, is one
/// error that quotes a bounded part of it.
#[test]
fn a_huge_region_name_is_quoted_bounded() {
    let huge = "a".repeat(100_000);
    let branch = with(
        "name = \"primary\"\n",
        &format!("name = \"primary\"\nregion = \"{huge}\"\n"),
    );
    let iam = BASE
        .replace("kind = \"tcp\"", "kind = \"postgres\"")
        .replace(
            "[probe.tcp]\nport = 3306\n",
            &format!("[probe.tls]\nssl_mode = \"verify_identity\"\nssl_ca = \"/ca.pem\"\n\n[probe.postgres]\nuser = \"readyprobe\"\npassword = {{ rds_iam = {{ region = \"{huge}\" }} }}\n"),
        );
    for (text, key) in [
        (branch, "branch[0].region"),
        (iam, "probe.postgres.password"),
    ] {
        let got = issues(&text);
        assert_eq!(got.len(), 1, "{key}: {} issues", got.len());
        assert_eq!(got[0].key, key, "{}", got[0].message.len());
        assert!(
            got[0].message.len() < 300,
            "{key}: {} bytes",
            got[0].message.len()
        );
    }
}
