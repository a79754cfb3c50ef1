//! The built binary's `run` as a child process: start it, signal it, stop it, read the address
//! its `[serve]` listens on, and replace its config file the way an operator does.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::process::Command;

/// How long a test waits for a record, a log line or an address before failing.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Replace the config file in one step, as an editor or a config management tool does.
pub fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Send `sig` to `child`, which must still run.
pub fn signal(child: &tokio::process::Child, sig: libc::c_int) {
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: kill(2) with the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// `run --grace grace --config source` (a path or an `s3://` URL), stdout to `stdout` and
/// stderr beside it (`.log`), killed on drop: a caller may add to its environment, then spawn.
pub fn run_command(source: impl AsRef<OsStr>, stdout: &Path, grace: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_readyprobe"));
    c.args(["run", "--grace", grace, "--config"])
        .arg(source)
        .stdout(Stdio::from(std::fs::File::create(stdout).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::create(stdout.with_extension("log")).unwrap(),
        ))
        .kill_on_drop(true);
    c
}

/// `run` with `--grace grace`, stdout to `stdout` and stderr beside it (`.log`).
pub fn spawn_graced(cfg: &Path, stdout: &Path, grace: &str) -> tokio::process::Child {
    run_command(cfg, stdout, grace).spawn().unwrap()
}
/// SIGTERM to `child`; it must exit 0 within 15 s.
pub async fn stop(child: &mut tokio::process::Child) {
    signal(child, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The stderr of a command that stopped at start-up on an unavailable input (a secret, a CA
/// bundle, the listen address: exit 78), which it must name in `why`.
pub fn unavailable_input(out: &Output, why: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains(why), "{why:?} not in {stderr}");
    stderr
}

/// The address `run` logged (`serving /metrics on <addr>`), polled from its stderr `log`.
pub async fn served_addr(log: &Path) -> SocketAddr {
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some((_, rest)) = text.split_once("serving /metrics on ") {
            let addr = rest.split_whitespace().next().unwrap_or_default();
            return addr
                .parse()
                .unwrap_or_else(|_| panic!("{addr:?} in {text}"));
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no address logged: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
