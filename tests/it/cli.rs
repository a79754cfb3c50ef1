//! The binary as operators and scripts use it: exit codes, messages, signals, files left behind.

use crate::support::config::secret_env;
use crate::support::fixture::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_readyprobe"))
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

#[test]
fn every_example_config_in_probes_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            // Validation reads no file an example names: every example is valid anywhere.
            readyprobe::config::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 1, "no example configs in {}", dir.display());
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
