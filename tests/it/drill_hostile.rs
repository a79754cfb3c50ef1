//! Hostile input to `drill report` and `simulate --out`: evidence "files" that are not files,
//! extreme times, names that are markup. Each case must end (bounded), exit as `--help` says and
//! never panic.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run the binary with `args`, killed after `limit`: (exit code, stdout, stderr, time taken).
/// A run that had to be killed exits -1.
fn run_bounded(args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break -1;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    (
        status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

fn report(evidence: &Path, out: &Path) -> (i32, String, String, Duration) {
    run_bounded(
        &[
            "drill",
            "report",
            "--evidence",
            evidence.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    )
}

/// A FIFO without a writer and `/dev/zero` are refused at once (exit 74, the path named): a
/// plain open waits for the FIFO's writer forever, and `/dev/zero` is a line that never ends.
#[test]
fn drill_report_refuses_a_fifo_and_a_device_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("evidence.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let (code, _, err, took) = report(path, &dir.path().join("out"));
        assert_eq!(code, 74, "{}: {err}", path.display());
        assert!(
            err.contains("not a regular file") && err.contains(path.to_str().unwrap()),
            "{err}"
        );
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
    assert!(!dir.path().join("out").exists());
}
