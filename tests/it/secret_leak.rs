//! No configured secret leaves readyprobe: a distinctive secret, used as the MySQL password and as
//! an http header secret, appears in no output, log line (text or JSON), evidence record or state
//! file of `check`, `check --strict`, `probe`, `run` and `status`, in no answer of `run`'s
//! `[serve]` endpoint (`/metrics` in both formats, `/status`, `/healthz`, scraped while it runs),
//! nor in the `Debug` of the loaded config and the prepared targets. The peers include a failure path (a server that
//! expects another password) and an HTTPS server that reflects the header into its answer.

use crate::http_kind::{Echo, EchoServer};
use crate::support::config::{ConfigBuilder, path, secret_env, secret_file};
use crate::support::fixture::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const API: &str = "api-primary.orders.internal.example";
const TOKEN_VAR: &str = "READYPROBE_LEAK_TEST_TOKEN";

/// A fresh distinctive secret, and the random part that must not appear even alone.
fn secret() -> (String, String) {
    let tail = format!("{:016x}", rand::random::<u64>());
    (format!("S3cr3t-{tail}"), tail)
}

/// Panics when `text` holds the secret or its random part.
fn assert_clean(what: &str, text: &str, (secret, tail): &(String, String)) {
    assert!(
        !text.contains(secret.as_str()) && !text.contains(tail.as_str()),
        "{what} leaks the secret:\n{text}"
    );
}

/// The http config: a marked POST to the echo server with the secret twice, from `token`
/// (Authorization) and from a file (x-api-key).
fn http_config(
    dir: &Path,
    dns: std::net::SocketAddr,
    port: u16,
    ca: &Path,
    token: toml::Value,
) -> ConfigBuilder {
    ConfigBuilder::new(dir, "orders-api", "api.orders.internal.example")
        .clear("readiness")
        .merge(FAST_POLICY)
        .set("publish", "interval", "1000ms")
        .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
        .set("evidence", "path", path(&dir.join("http-evidence.jsonl")))
        .nameserver(dns)
        .set("dns", "timeout", "200ms")
        .kind("http")
        .set("probe", "interval", "300ms")
        .set("probe", "timeout", "250ms")
        .set("probe", "jitter", "0s")
        .tls("verify_identity", Some(ca))
        .set("serve", "listen", "127.0.0.1:0")
        .set("probe.http", "port", i64::from(port))
        .set("probe.http", "path", "/orders")
        .set("probe.http", "body", r#"{"canary": "{{marker}}"}"#)
        .merge(&format!(
            "[probe.http]\nheaders = {{ authorization = {}, x-api-key = {} }}\nexpect_json = {{ pointer = \"/id\", equals = \"{{{{marker}}}}\" }}\nexpect_header = {{ name = \"x-branch\", equals = \"{{{{branch}}}}\" }}\n",
            token,
            secret_file(&dir.join("api-key")),
        ))
        .branch("primary", "PRIMARY", API, None)
}

/// Run the binary with the token variable set; returns exit code and stdout + stderr.
fn readyprobe(args: &[&str], config: &Path, token: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(TOKEN_VAR, token)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The `Accept` of a Prometheus 2 scrape (OpenMetrics first).
const OPENMETRICS_ACCEPT: &str =
    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// One GET of `path` on `addr` (`accept` as the Accept field, when given): the whole answer,
/// head and body, or `None` when the endpoint does not answer (the run has ended).
fn scrape(addr: &str, path: &str, accept: Option<&str>) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: prober\r\n{accept}\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    Some(String::from_utf8_lossy(&raw).into_owned())
}

/// The address `run` logged it serves on (text or JSON log line), once it has.
fn served_addr(log: &str) -> Option<String> {
    let (_, rest) = log.split_once("serving /metrics on ")?;
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || ".:[]".contains(*c))
        .collect();
    (!addr.is_empty()).then_some(addr)
}

/// Like [`readyprobe`] for a `run` whose config has `[serve]`: while it runs, its `/metrics`
/// (OpenMetrics and text 0.0.4), `/status` and `/healthz` are scraped again and again; the
/// answers follow its output in the text returned. Panics unless a `/metrics` answer held an
/// attempt and `/status` and `/healthz` answered 200.
fn run_scraped(args: &[&str], config: &Path, token: &str) -> (Option<i32>, String) {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(TOKEN_VAR, token)
        .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()))
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    let mut answers = Vec::new();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        assert!(Instant::now() < end, "{args:?} did not end");
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(addr) = served_addr(&log) {
            let routes = [
                ("/metrics", Some(OPENMETRICS_ACCEPT)),
                ("/metrics", None),
                ("/status", None),
                ("/healthz", None),
            ];
            for (path, accept) in routes {
                answers.extend(scrape(&addr, path, accept).map(|a| (path, a)));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let got = |path: &str, what: &str| {
        answers
            .iter()
            .any(|(p, a)| *p == path && a.starts_with("HTTP/1.1 200 ") && a.contains(what))
    };
    let seen: Vec<&str> = answers.iter().map(|(p, _)| *p).collect();
    assert!(
        got("/metrics", "readyprobe_attempts_total{")
            && got("/metrics", "# EOF")
            && got("/status", "\"services\"")
            && got("/healthz", "ok: "),
        "{args:?}: not every route was scraped while it ran: {seen:?}"
    );
    let mut text = std::fs::read_to_string(&stdout).unwrap();
    text.push_str(&std::fs::read_to_string(&stderr).unwrap());
    for (path, answer) in &answers {
        text.push_str(&format!("\n--- {path}\n{answer}"));
    }
    (code, text)
}

/// Every command an operator runs against `config` (the two runs with text and JSON logs at debug
/// level, their `[serve]` endpoint scraped), each output checked; `during(i)` runs before the `i`th command.
fn every_command(config: &Path, branch: &str, s: &(String, String), mut during: impl FnMut(usize)) {
    let runs: [&[&str]; 7] = [
        &["check"],
        &["check", "--strict"],
        &["probe", "--branch", branch],
        &[
            "--log-format",
            "text",
            "--log-level",
            "debug",
            "run",
            "--duration",
            "2s",
        ],
        &[
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "run",
            "--duration",
            "2s",
        ],
        &["status"],
        &["status", "--json"],
    ];
    for (i, args) in runs.iter().enumerate() {
        during(i);
        let (code, text) = if args.contains(&"run") {
            run_scraped(args, config, &s.0)
        } else {
            readyprobe(args, config, &s.0)
        };
        assert!(matches!(code, Some(0 | 1)), "{args:?}: {code:?}\n{text}");
        assert_clean(&format!("{args:?}"), &text, s);
    }
}

/// Every file under `dir` but the secret files themselves.
fn assert_files_clean(dir: &Path, skip: &[&Path], s: &(String, String)) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            assert_files_clean(&p, skip, s);
        } else if !skip.contains(&p.as_path()) {
            let bytes = std::fs::read(&p).unwrap();
            assert_clean(
                &p.display().to_string(),
                &String::from_utf8_lossy(&bytes),
                s,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_appears_in_no_output_log_evidence_or_state_file() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let s = secret();
    let dir = p.dir.path();
    // The primary takes the secret; the secondary still expects the fixture's password, so
    // every attempt there fails at auth with the secret sent.
    p.primary
        .root_exec(&format!(
            "ALTER USER 'readyprobe'@'%' IDENTIFIED BY '{}'",
            s.0
        ))
        .await;
    std::fs::write(dir.join("password"), format!("{}\n", s.0)).unwrap();
    std::fs::write(dir.join("api-key"), format!("{}\n", s.0)).unwrap();
    let echo = EchoServer::start(&p.ca, API).await;
    p.dns
        .set_a("api-primary", std::net::Ipv4Addr::LOCALHOST, 5)
        .await;

    let mysql = p
        .builder(&ConfigOpts::default())
        .set("serve", "listen", "127.0.0.1:0")
        .write(&dir.join("mysql.toml"));
    let token = secret_env(TOKEN_VAR);
    let http = http_config(dir, p.dns.addr(), echo.port, p.ca.ca_pem_path(), token)
        .write(&dir.join("http.toml"));

    every_command(&mysql, "secondary", &s, |_| {});
    let ev = read_evidence(&p.evidence());
    let classes = |branch: &str| -> Vec<String> {
        attempts(&ev, branch)
            .iter()
            .map(|a| a["class"].as_str().unwrap_or("success").to_string())
            .collect()
    };
    assert!(classes("primary").iter().any(|c| c == "success"), "{ev:?}");
    assert!(
        classes("secondary").iter().any(|c| c == "auth_denied"),
        "{ev:?}"
    );

    // The echo server answers with the secret in its headers and body; `probe` and the JSON-log
    // run meet it reflected into the branch header, the text-log run into every answer.
    every_command(&http, "primary", &s, |i| {
        echo.set(if i == 3 {
            Echo::Everywhere
        } else {
            Echo::Header
        });
    });
    let ev = read_evidence(&dir.join("http-evidence.jsonl"));
    let results: Vec<&str> = attempts(&ev, "primary")
        .iter()
        .map(|a| a["class"].as_str().unwrap_or("success"))
        .collect();
    assert!(results.contains(&"success"), "{results:?}");
    assert!(results.contains(&"http_wrong_branch"), "{results:?}");

    let secrets = [dir.join("password"), dir.join("api-key")];
    let skip: Vec<&Path> = secrets.iter().map(|p| p.as_path()).collect();
    assert_files_clean(dir, &skip, &s);
}

/// The `Debug` of the loaded configs and of the prepared targets (which hold the resolved
/// secrets) shows no secret value.
#[test]
fn debug_of_config_and_prepared_targets_holds_no_secret() {
    let s = secret();
    let ca = crate::support::tls::TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("password"), &s.0).unwrap();
    std::fs::write(dir.join("api-key"), &s.0).unwrap();
    let ns: std::net::SocketAddr = "127.0.0.1:53".parse().unwrap();
    let mysql = ConfigBuilder::new(dir, "orders-db", "mysql.orders.internal.example")
        .nameserver(ns)
        .kind("mysql")
        .tls("verify_identity", Some(ca.ca_pem_path()))
        .set("probe.mysql", "user", "readyprobe")
        .set(
            "probe.mysql",
            "password",
            secret_file(&dir.join("password")),
        )
        .branch("primary", "PRIMARY", PRIMARY, Some(3306));
    let token = secret_file(&dir.join("api-key"));
    let http = http_config(dir, ns, 443, ca.ca_pem_path(), token);
    for (name, b) in [("mysql.toml", mysql), ("http.toml", http)] {
        let cfg = b.load(&dir.join(name));
        assert_clean("Config Debug", &format!("{cfg:?}"), &s);
        let (_, probes) = readyprobe::probe::prepare(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !probes[0].target.secrets().is_empty(),
            "{name}: secrets resolved"
        );
        assert_clean("BranchProbe Debug", &format!("{probes:?}"), &s);
    }
}

/// A secret shorter than 8 characters (here a 1-character token) is weak and its redaction
/// marks every occurrence of it in other words: `check` says so in one warning line naming the
/// key, and no more; a longer secret (the api key) is not named.
#[test]
fn check_warns_once_about_a_short_secret() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let ca = crate::support::tls::TestCa::new();
    std::fs::write(dir.join("api-key"), "a-long-enough-key\n").unwrap();
    let ns: std::net::SocketAddr = "127.0.0.1:53".parse().unwrap();
    let config = http_config(dir, ns, 443, ca.ca_pem_path(), secret_env(TOKEN_VAR))
        .write(&dir.join("short.toml"));
    let (code, text) = readyprobe(&["check"], &config, "e");
    assert_eq!(code, Some(0), "{text}");
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("secret")).collect();
    assert_eq!(
        warnings,
        [
            "warning: probe.http.headers.authorization: shorter than 8 characters: a weak secret, and redacting it from what targets send back marks every occurrence of it in other words"
        ],
        "{text}"
    );
}
