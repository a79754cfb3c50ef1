//! The binary as operators and scripts use it: exit codes, messages, signals, files left behind.

use crate::support::config::{ConfigBuilder, secret_env};
use crate::support::fixture::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_readyprobe"))
}

/// An S3 config or evidence without a region anywhere in the chain: the message names what to
/// set, and no request is made (the endpoint is a closed port).
#[test]
fn s3_sources_without_a_region_say_to_set_one() {
    let home = tempfile::tempdir().unwrap();
    let out = no_region(&home)
        .args(["check", "--config", "s3://readyprobe-cfg/orders.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    let want = "s3://readyprobe-cfg/orders.toml: (file): GetObject: no AWS region: set AWS_REGION";
    assert!(err.contains(want), "{err}");
    let out = no_region(&home)
        .args([
            "drill",
            "report",
            "--evidence",
            "s3://readyprobe-ev/drills/",
        ])
        .arg("--out")
        .arg(home.path().join("report"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{err}");
    let want = "cannot list s3://readyprobe-ev/drills/: no AWS region: set AWS_REGION";
    assert!(err.contains(want), "{err}");
}

/// The binary with test credentials and no region anywhere in the AWS chain.
fn no_region(home: &tempfile::TempDir) -> Command {
    let mut cmd = bin();
    cmd.env_clear()
        .env("HOME", home.path())
        .env("AWS_CONFIG_FILE", home.path().join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.path().join("none"))
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
    cmd
}

#[test]
fn check_rejects_bad_config_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[readiness]
declare_unready = { success_rate_below = 95.0, for = "3m" }
declare_ready = { success_rate_at_or_above = 90.0, for = "10m" }

[probe]
kind = "mysql"
interval = "2s"
timeout = "2s"
tls = { ssl_mode = "disabled" }
[probe.mysql]
user = "readyprobe"
password = { env = "X" }
# the lines below are counted by the assertions

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql.orders.internal.example."
"#,
    )
    .unwrap();
    let out = bin()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display();
    // Every problem, each with file, line and key.
    assert!(
        err.contains(&format!(
            "{p}:7: readiness.declare_ready.success_rate_at_or_above"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{p}:12: probe.timeout")), "{err}");
    assert!(
        err.contains(&format!("{p}:22: branch[0].endpoint")),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    std::fs::write(
        &path,
        "[service]\nname = \"x\"\nstable_name = \"y\"\nbogus = 1\n",
    )
    .unwrap();
    let out = bin()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":4: service.bogus") && err.contains("unknown field"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_64_and_help_exits_0() {
    let out = bin().args(["run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "missing --config");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
    let out = bin().args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = bin()
        .args(["--log-level", "debgu", "check", "--config", "x"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "a mistyped level must not silence the logs"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("debgu"));
    let out = bin()
        .args(["check", "--config", "/dev/zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "not a regular file");
    let out = bin().args(["--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in ["run", "check", "probe"] {
        assert!(help.contains(cmd), "{help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_missing_secret_exits_78_and_publishes_nothing() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let text = p
        .builder(&ConfigOpts::default())
        .set(
            "probe.mysql",
            "password",
            secret_env("READYPROBE_TEST_SURELY_UNSET"),
        )
        .build();
    assert!(text.contains("READYPROBE_TEST_SURELY_UNSET"));
    let path = p.dir.path().join("nosecret.toml");
    std::fs::write(&path, text).unwrap();
    let out = bin()
        .args(["run", "--duration", "5s", "--config"])
        .arg(&path)
        .env_remove("READYPROBE_TEST_SURELY_UNSET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("environment variable READYPROBE_TEST_SURELY_UNSET"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing is published: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !p.evidence().exists(),
        "no evidence of a run that never started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_0_within_grace_with_complete_evidence() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let path = p.write_config("term.toml", &ConfigOpts::default());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--grace", "3s", "--config"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_evidence(&p.evidence(), Duration::from_secs(20), |ev| {
        attempts(ev, "primary").len() >= 3
    })
    .await;
    let pid = child.id().unwrap().to_string();
    let sent = tokio::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(8), child.wait())
        .await
        .expect("exit within the 3 s grace period (plus margin)")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(sent.elapsed() < Duration::from_secs(6));
    let ev = read_evidence(&p.evidence()); // panics on a torn line
    let last = ev.last().unwrap();
    assert_eq!(last["kind"], "stop");
    assert_eq!(last["reason"], "SIGTERM");
    let publishes = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && v["reason"] == "final")
        .count();
    assert_eq!(publishes, 1, "one final datum set");
}

/// `readyprobe run --grace <grace>` on `config`, logs to `log`, EMF to nowhere.
fn spawn_run(
    config: &std::path::Path,
    grace: &str,
    log: &std::path::Path,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(["run", "--grace", grace, "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Send SIGTERM and wait for the exit; returns the exit code and the time from just before the
/// signal was sent to the exit.
async fn terminate(
    child: &mut tokio::process::Child,
    log: &std::path::Path,
) -> (Option<i32>, Duration) {
    let pid = child.id().unwrap().to_string();
    let sent = tokio::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = match tokio::time::timeout(Duration::from_secs(15), child.wait()).await {
        Ok(s) => s.unwrap(),
        Err(_) => panic!(
            "no exit 15 s after SIGTERM; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    };
    (status.code(), sent.elapsed())
}

fn mkfifo(path: &std::path::Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// With `--grace 1s` the process must be gone 3 s after SIGTERM. The extra second covers what
/// the product does not control: starting kill(1), the scheduler waking the stopping threads and
/// the kernel reaping the process on a loaded machine. It is still shorter than any hang this
/// test provokes: a FIFO blocks a plain `open` for ever, and the held lock keeps a blocking
/// thread waiting for the lock (5 s) at least 4.4 s past the signal.
const EXIT_BOUND: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_state_store_never_keeps_the_process_past_grace_plus_2s() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let path = p.write_config("hang.toml", &ConfigOpts::default());
    let state = p.dir.path().join("state");
    let doc = state.join("control-orders-db.json");
    let lock_path = state.join("control-orders-db.lock");
    let log = p.dir.path().join("run.log");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // 1. The control document becomes a FIFO mid-run: syncs fail with a clear error at once,
    // and SIGTERM ends the run normally.
    let mut child = spawn_run(&path, "1s", &log);
    wait_evidence(&p.evidence(), Duration::from_secs(20), |ev| {
        attempts(ev, "primary").len() >= 3 && doc.exists()
    })
    .await;
    {
        // Under the store's lock, so that no save in progress renames a file over the FIFO.
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .open(&lock_path)
            .unwrap();
        lock.lock().unwrap();
        std::fs::remove_file(&doc).unwrap();
        mkfifo(&doc);
    }
    wait_evidence(&p.evidence(), Duration::from_secs(20), |ev| {
        ev.iter().any(|v| {
            v["kind"] == "state_sync_failed" && v.to_string().contains("not a regular file")
        })
    })
    .await;
    let (code, took) = terminate(&mut child, &log).await;
    assert_eq!(code, Some(0), "{}", log_text());
    assert!(
        took < EXIT_BOUND,
        "exit {took:?} after SIGTERM; log:\n{}",
        log_text()
    );
    let ev = read_evidence(&p.evidence());
    assert_eq!(ev.last().unwrap()["kind"], "stop");

    // 2. A FIFO as the control document at start-up: exit 74 at once, naming the problem.
    let started = std::time::Instant::now();
    let out = bin().args(["run", "--config"]).arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    // Not the 10 s store bound, and not a hang.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // 3. The lock held for ever by someone else: the state save waits on a blocking thread that
    // outlives the run; the process exits without it.
    std::fs::remove_file(&doc).unwrap();
    let mut child = spawn_run(&path, "1s", &log);
    // The document exists again once this run has saved its state.
    wait_evidence(&p.evidence(), Duration::from_secs(20), |_| doc.exists()).await;
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    // Past the 500 ms poll interval: a save is now waiting for the lock, and began at most
    // 600 ms before the signal.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (code, took) = terminate(&mut child, &log).await;
    assert!(
        took < EXIT_BOUND,
        "exit {took:?} after SIGTERM; log:\n{}",
        log_text()
    );
    // 0 when the run's own stop (its final save gives up after 2 s) wins, 74 when the
    // grace + 2 s bound had to end it; under load either may come first.
    assert!(
        matches!(code, Some(0) | Some(74)),
        "exit {code:?}; log:\n{}",
        log_text()
    );
    drop(lock);
}

/// The inputs a config names that only `prepare` reads: CA bundles (when the ssl-mode verifies),
/// client certificates and keys, secret files (absolute or relative to the config's directory),
/// and secret environment variables. Read from the TOML itself, whatever the config's layout.
#[derive(Debug, Default)]
struct NamedInputs {
    /// Config key and path of each file.
    files: Vec<(String, std::path::PathBuf)>,
    /// Config key and name of each secret variable.
    env: Vec<(String, String)>,
}

fn named_inputs(path: &std::path::Path) -> NamedInputs {
    fn walk(t: &toml::Table, at: &str, dir: &std::path::Path, out: &mut NamedInputs) {
        let verifies = matches!(
            t.get("ssl_mode").and_then(|v| v.as_str()),
            Some("verify_ca" | "verify_identity")
        );
        for (k, v) in t {
            let key = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            match (k.as_str(), v) {
                ("ssl_ca", toml::Value::String(p)) if verifies => {
                    out.files.push((key, dir.join(p)))
                }
                ("ssl_cert" | "ssl_key", toml::Value::String(p)) => {
                    out.files.push((key, dir.join(p)))
                }
                // A secret by reference names its own table's key.
                ("env", toml::Value::String(e)) if t.len() == 1 => {
                    out.env.push((at.to_string(), e.clone()))
                }
                ("file", toml::Value::String(p)) if t.len() == 1 => {
                    out.files.push((at.to_string(), dir.join(p)))
                }
                (_, toml::Value::Table(inner)) => walk(inner, &key, dir, out),
                (_, toml::Value::Array(items)) => {
                    for i in items {
                        if let toml::Value::Table(inner) = i {
                            walk(inner, &key, dir, out);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let text = std::fs::read_to_string(path).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let mut out = NamedInputs::default();
    walk(&table, "", path.parent().unwrap(), &mut out);
    out.files.sort();
    out.files.dedup();
    out.env.sort();
    out.env.dedup();
    out
}

fn lines_naming<'a>(text: &'a str, what: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(what)).collect()
}

#[test]
fn check_passes_every_example_and_strict_names_each_missing_input_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        // `simulate` scenarios, not configs (tests/it/simulate.rs runs them).
        .filter(|p| {
            !p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("scenario-")
        })
        .collect();
    examples.sort();
    assert!(
        !examples.is_empty(),
        "no example configs in {}",
        dir.display()
    );
    for path in examples {
        let inputs = named_inputs(&path);
        // Every secret variable is unset here, so each is a problem; a file is one when it is
        // absent (as the examples' /etc/readyprobe files are on a test machine).
        // (config key, subject) of each input that must be reported.
        let missing: Vec<(&str, String)> = inputs
            .files
            .iter()
            .filter(|(_, f)| !f.is_file())
            .map(|(k, f)| (k.as_str(), f.display().to_string()))
            .chain(
                inputs
                    .env
                    .iter()
                    .map(|(k, e)| (k.as_str(), format!("environment variable {e}"))),
            )
            .collect();
        let check = |strict: bool| {
            let mut c = bin();
            c.arg("check").args(strict.then_some("--strict"));
            c.arg("--config").arg(&path);
            for (_, e) in &inputs.env {
                c.env_remove(e);
            }
            c.output().unwrap()
        };

        let out = check(false);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let name = path.display();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(": valid"), "{name}: {stdout}");
        let warnings: Vec<&str> = lines_naming(&stdout, "(run would ");
        for w in &warnings {
            assert!(w.starts_with("warning: "), "{name}: {w}");
            let n = stdout.lines().filter(|l| l == w).count();
            assert_eq!(n, 1, "{name}: printed {n} times: {w}");
        }
        for (key, m) in &missing {
            let named: Vec<_> = warnings.iter().filter(|w| w.contains(m.as_str())).collect();
            assert_eq!(
                named.len(),
                1,
                "{name}: {m} must be named by exactly one warning:\n{stdout}"
            );
            // A [[service]]'s own input is named by its probe key, with the service after it.
            let key = key.strip_prefix("service.").unwrap_or(key);
            assert!(
                named[0].starts_with(&format!("warning: {key}")),
                "{name}: the warning names the key the file sets, {key}: {}",
                named[0]
            );
        }

        let out = check(true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = if missing.is_empty() { 0 } else { 78 };
        assert_eq!(out.status.code(), Some(expected), "{name}: {stderr}");
        for (_, m) in &missing {
            let named = lines_naming(&stderr, m);
            assert_eq!(named.len(), 1, "{name}: {m} must be named once:\n{stderr}");
            assert!(named[0].starts_with("error: "), "{name}: {stderr}");
        }
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("(run would "),
            "{name}: --strict reports problems as errors only"
        );
    }
}

/// An http config whose header secrets are a variable and a file, neither available.
fn config_with_missing_secrets(dir: &std::path::Path, tls: &str) -> std::path::PathBuf {
    ConfigBuilder::new(dir, "orders-api", "api.orders.example")
        .top("state_dir", crate::support::config::path(dir))
        .nameserver("127.0.0.1:53")
        .kind("http")
        .merge(&format!(
            r#"[probe.tls]
{tls}
[probe.http]
method = "POST"
path = "/orders"
headers = {{ authorization = {{ env = "READYPROBE_TEST_SURELY_UNSET" }}, x-api-key = {{ file = "missing-key" }} }}
"#
        ))
        .branch("primary", "PRIMARY", "api-primary.orders.example", None)
        .branch("secondary", "SECONDARY", "api-secondary.orders.example", None)
        .write(&dir.join("secrets.toml"))
}

#[test]
fn run_names_every_unavailable_secret_once_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with_missing_secrets(
        dir.path(),
        "ssl_mode = \"disabled\"\ndanger_send_secrets_unverified = true",
    );
    let out = bin()
        .args(["run", "--duration", "5s", "--config"])
        .arg(&path)
        .env_remove("READYPROBE_TEST_SURELY_UNSET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    for (key, subject) in [
        (
            "probe.http.headers.authorization",
            "environment variable READYPROBE_TEST_SURELY_UNSET".to_string(),
        ),
        (
            "probe.http.headers.x-api-key",
            format!("file {}", dir.path().join("missing-key").display()),
        ),
    ] {
        let named = lines_naming(&err, &subject);
        assert_eq!(named.len(), 1, "{err}");
        assert!(named[0].starts_with(&format!("error: {key}: ")), "{err}");
    }
    assert!(out.stdout.is_empty());
    assert!(!dir.path().join("evidence.jsonl").exists());
}

#[test]
fn operator_commands_need_neither_secrets_nor_ca_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with_missing_secrets(
        dir.path(),
        "ssl_mode = \"verify_identity\"\nssl_ca = \"/nonexistent/readyprobe/ca.pem\"",
    );
    let run = |args: &[&str]| {
        let out = bin()
            .args(args)
            .arg("--config")
            .arg(&path)
            .env_remove("READYPROBE_TEST_SURELY_UNSET")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains("/nonexistent/readyprobe") && !text.contains("READYPROBE_TEST_SURELY"),
            "{args:?} must not look at the CA or the secrets: {text}"
        );
        (out.status.code(), text)
    };
    let (code, text) = run(&["status"]);
    assert_eq!(code, Some(0), "{text}");
    let force = [
        "override",
        "--branch",
        "primary",
        "--force",
        "unready",
        "--expires",
        "1h",
        "--reason",
        "maintenance",
        "--by",
        "it",
    ];
    let (code, text) = run(&force);
    assert_eq!(code, Some(0), "{text}");
    // No prober waits for approval: recorded, exit 1 (not a config or input error).
    let (code, text) = run(&[
        "approve", "--branch", "primary", "--by", "it", "--reason", "test",
    ]);
    assert_eq!(code, Some(1), "{text}");
    let (code, text) = run(&["override", "--branch", "primary", "--clear"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run(&["status", "--json"]);
    assert_eq!(code, Some(0), "{text}");
}

/// `--by` and `--reason` (and a drill marker's `--by`) are bounded: 64 approvals with 128 KiB
/// of each once wrote a control document over the 16 MiB every reader refuses. An overlong one
/// is a usage error (exit 64) naming the bound, and nothing is written.
#[test]
fn overlong_by_or_reason_is_a_usage_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with_missing_secrets(
        dir.path(),
        "ssl_mode = \"verify_identity\"\nssl_ca = \"/nonexistent/readyprobe/ca.pem\"",
    );
    let run = |args: &[&str]| {
        let out = bin()
            .args(args)
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    let huge = "x".repeat(100 * 1024);
    let by_101 = "b".repeat(101);
    let reason_1001 = "r".repeat(1001);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "approve", "--branch", "primary", "--by", &huge, "--reason", "ok",
            ],
            "--by has 102400 characters; at most 100",
        ),
        (
            vec![
                "approve",
                "--branch",
                "primary",
                "--by",
                "al",
                "--reason",
                &reason_1001,
            ],
            "--reason has 1001 characters; at most 1000",
        ),
        (
            vec![
                "override",
                "--branch",
                "primary",
                "--force",
                "unready",
                "--expires",
                "1h",
                "--reason",
                "ok",
                "--by",
                &by_101,
            ],
            "--by has 101 characters; at most 100",
        ),
        (
            vec![
                "override",
                "--branch",
                "primary",
                "--force",
                "unready",
                "--expires",
                "1h",
                "--reason",
                &huge,
                "--by",
                "al",
            ],
            "--reason has 102400 characters; at most 1000",
        ),
        (
            vec!["drill", "mark", "--label", "fault", "--by", &huge],
            "--by has 102400 characters; at most 100",
        ),
    ];
    for (args, says) in cases {
        let (code, err) = run(&args);
        assert_eq!(code, Some(64), "{}: {err}", args[0]);
        assert!(err.contains(says), "{}: {err}", args[0]);
    }
    assert!(!dir.path().join("control-orders-api.json").exists());
    // At the bounds: accepted (approve exits 1: no prober waits for it).
    let (code, err) = run(&[
        "approve",
        "--branch",
        "primary",
        "--by",
        &"b".repeat(100),
        "--reason",
        &"r".repeat(1000),
    ]);
    assert_eq!(code, Some(1), "{err}");
}

/// With several services, the operator commands act on the one `--service` names, in its own
/// control document; without it they name the services and change nothing.
#[test]
fn operator_commands_take_the_service_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/fleet.toml"),
    )
    .unwrap()
    .replace(
        "state_dir = \"/var/lib/readyprobe\"",
        &format!("state_dir = {:?}", dir.path()),
    )
    .replace("store = \"s3\"", "store = \"file\"")
    .replace(
        "s3 = { bucket = \"readyprobe-state\", key_prefix = \"readyprobe/\" }",
        "",
    );
    let path = dir.path().join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    let run = |args: &[&str]| {
        let out = bin()
            .args(args)
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let force = |service: Option<&str>| {
        let mut a = vec![
            "override",
            "--branch",
            "primary",
            "--force",
            "unready",
            "--expires",
            "1h",
            "--reason",
            "maintenance",
            "--by",
            "it",
        ];
        if let Some(s) = service {
            a.extend(["--service", s]);
        }
        run(&a)
    };
    for args in [
        &["status"][..],
        &[
            "approve", "--branch", "primary", "--by", "it", "--reason", "x",
        ],
    ] {
        let (code, text) = run(args);
        assert_eq!(code, Some(64), "{args:?}: {text}");
        assert!(
            text.contains("--service") && text.contains("orders-db, payments-db, orders-api"),
            "{args:?}: {text}"
        );
    }
    let (code, text) = force(None);
    assert_eq!(code, Some(64), "{text}");
    let (code, text) = force(Some("billing-db"));
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("no service \"billing-db\""), "{text}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing written"
    );

    let (code, text) = force(Some("payments-db"));
    assert_eq!(code, Some(0), "{text}");
    let doc = |service: &str| {
        std::fs::read_to_string(dir.path().join(format!("control-{service}.json"))).ok()
    };
    let payments = doc("payments-db").expect("payments-db's control document");
    assert!(payments.contains("maintenance"), "{payments}");
    assert!(doc("orders-db").is_none() && doc("orders-api").is_none());
    let (code, text) = run(&["status", "--service", "payments-db"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("payments-db"), "{text}");
    let (code, text) = run(&["status", "--service", "orders-db"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("maintenance"), "{text}");
}

/// Writes `fleet.toml` in `dir`: a `gateway` TCP service (on `port`, its probe table ending in
/// `gateway_tls`) that can start, and a `broken-db` MySQL service whose password file is missing.
fn write_fleet_config(
    dir: &std::path::Path,
    ns: impl std::fmt::Display,
    port: u16,
    gateway_tls: &str,
) -> std::path::PathBuf {
    let text = format!(
        r#"
state_dir = {dir:?}
[publish]
interval = "1s"
[dns]
nameservers = ["{ns}"]
[probe]
kind = "mysql"
interval = "200ms"
[probe.tls]
ssl_mode = "disabled"
danger_send_secrets_unverified = true
[probe.mysql]
user = "readyprobe"
password = {{ file = {missing:?} }}

[[service]]
name = "gateway"
stable_name = "gw.fleet.internal.example"
probe = {{ kind = "tcp", tcp = {{ port = {port} }}{gateway_tls} }}
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "gw-primary.fleet.internal.example"

[[service]]
name = "broken-db"
stable_name = "db.fleet.internal.example"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "db-primary.fleet.internal.example"
"#,
        dir = dir,
        missing = dir.join("no-such-password"),
    );
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A `[[service]]` config: a service whose secret is missing is reported (ERROR line, evidence,
/// `ServiceUnavailable` datum) while the other runs (exit 0); with no service able to start,
/// `run` exits 78 and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_starts_the_services_it_can_and_reports_the_others() {
    let dns = crate::support::dns::DnsServer::start("fleet.internal.example").await;
    dns.set_a("gw-primary", std::net::Ipv4Addr::LOCALHOST, 5)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let write = |gateway_tls: &str| write_fleet_config(dir.path(), dns.addr(), port, gateway_tls);
    let run = |path: &std::path::Path| {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || {
            bin()
                .args(["run", "--duration", "3s", "--config"])
                .arg(&path)
                .output()
                .unwrap()
        })
    };
    let out = run(&write("")).await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let error = lines_naming(&stderr, "this service cannot start");
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(
        error[0].contains("ERROR")
            && error[0].contains("broken-db")
            && error[0].contains("no-such-password"),
        "{}",
        error[0]
    );
    let datums = |metric: &str, service: &str| {
        stdout
            .lines()
            .filter(|l| {
                l.contains(&format!("\"{metric}\""))
                    && l.contains(&format!("\"Service\":\"{service}\""))
            })
            .count()
    };
    assert!(datums("ServiceUnavailable", "broken-db") >= 2, "{stdout}");
    assert!(datums("Heartbeat", "gateway") >= 2, "{stdout}");
    assert_eq!(datums("Heartbeat", "broken-db"), 0, "{stdout}");
    let ev = read_evidence(&dir.path().join("evidence.jsonl"));
    assert!(
        ev.iter()
            .any(|v| v["kind"] == "service_unavailable" && v["service"] == "broken-db")
    );
    assert!(
        ev.iter().any(|v| v["kind"] == "attempt"
            && v["service"] == "gateway"
            && v["result"] == "success")
    );

    // Both services unavailable: nothing starts.
    std::fs::remove_file(dir.path().join("evidence.jsonl")).unwrap();
    let path = write(&format!(
        ", tls = {{ ssl_mode = \"verify_identity\", ssl_ca = {:?} }}",
        dir.path().join("no-such-ca.pem")
    ));
    let out = run(&path).await.unwrap();
    let stderr = crate::support::run::unavailable_input(&out, "no-such-ca.pem");
    assert!(stderr.contains("no-such-password"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(!dir.path().join("evidence.jsonl").exists());
    accept.abort();
}

/// `check` on probes/orders-db.toml as shipped (`full`) and with `publish.metrics = "control"`:
/// each prices its own profile in the table and both on the comparison line.
#[test]
fn check_prices_both_metrics_profiles() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/orders-db.toml");
    let text = std::fs::read_to_string(&src).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("orders-db.toml");
    let edited = text.replacen("[publish]\n", "[publish]\nmetrics = \"control\"\n", 1);
    assert_ne!(edited, text);
    std::fs::write(&control, edited).unwrap();
    let check = |path: &std::path::Path| {
        let out = bin()
            .args(["check", "--config"])
            .arg(path)
            .env("READYPROBE_MYSQL_PASSWORD", "x")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let line = |text: &str, start: &str| {
        let l = text.lines().find(|l| l.trim_start().starts_with(start));
        l.unwrap_or_else(|| panic!("no {start:?} line in\n{text}"))
            .to_string()
    };
    let (full, lean) = (check(&src), check(&control));
    assert!(
        line(&full, "custom metrics").contains("24 series"),
        "{full}"
    );
    assert!(line(&lean, "custom metrics").contains("4 series"), "{lean}");
    assert!(line(&full, "total").ends_with("$9.43"), "{full}");
    assert!(line(&lean, "total").ends_with("$3.15"), "{lean}");
    let profiles = "publish.metrics profiles vs one Synthetics canary per branch ($104.88";
    assert!(
        line(&full, profiles).ends_with("full $9.43 (this config), 1/11.1; control $3.15, 1/33.2"),
        "{full}"
    );
    assert!(
        line(&lean, profiles).ends_with("full $9.43, 1/11.1; control $3.15 (this config), 1/33.2"),
        "{lean}"
    );
}
