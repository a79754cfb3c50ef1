//! Hostile input to `drill report` and `simulate --out`: evidence "files" that are not files,
//! extreme times, names that are markup. Each case must end (bounded), exit as `--help` says and
//! never panic.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run the binary with `args`, killed after `limit`: (exit code, stdout, stderr, time taken).
/// A run that had to be killed exits -1. Its output is drained while it runs (a full pipe would
/// stall it).
fn run_bounded(args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    run_bounded_env(args, &[], limit)
}

/// [`run_bounded`] with extra environment variables.
fn run_bounded_env(
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (i32, String, String, Duration) {
    use std::io::Read;
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_readyprobe"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
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
    (
        status,
        out.join().unwrap(),
        err.join().unwrap(),
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

/// One evidence line of `kind` at `at_ms` (a marker given then, or a successful attempt of
/// branch `primary`), as a prober writes it.
fn line(seq: u64, at_ms: i64, kind: &str) -> String {
    let head = format!(
        r#"{{"record_seq":{seq},"at":"2026-12-01T19:42:44.869Z","at_ms":{at_ms},"service":"orders-queue","prober":"az-a""#
    );
    match kind {
        "marker" => format!(
            r#"{head},"kind":"marker","marker_id":"m{seq}","marker_kind":"fault","label":"kill primary","by":"h","given_at":{at_ms}}}"#
        ),
        _ => format!(
            r#"{head},"kind":"attempt","branch":"primary","seq":{seq},"marker":"55848ea23848a8e12f6566f038a4f4e5","started_at":{at_ms},"finished_at":{at_ms},"steps":[{{"step":"resolve","duration_ms":0.1,"ok":true}},{{"step":"connect","duration_ms":0.1,"ok":true}}],"answers":[],"dns":{{"rcode":"NoError","authoritative":false}},"address":"127.0.0.1:17002","tls_verified":false,"result":"success"}}"#
        ),
    }
}

/// Times at the ends of `i64` are lines left out and listed with their line number (they
/// overflowed the report's span arithmetic: a panic in a debug build, wrapped garbage in a
/// release build); the widest valid window (1970 to 9999) still makes a report.
#[test]
fn drill_report_lists_out_of_range_times_and_takes_the_widest_window() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("times.jsonl");
    let t = 1_796_154_164_852;
    let lines = [
        line(1, t, "attempt"),
        line(2, t + 1000, "marker"),
        line(3, i64::MIN, "attempt"),
        line(4, i64::MAX, "marker"),
        line(5, -1, "attempt"),
        line(6, t + 2000, "attempt"),
    ];
    std::fs::write(&ev, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let (code, _, err, _) = report(&ev, &out);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for n in [3, 4, 5] {
        assert!(
            md.contains(&format!(
                "times.jsonl: line {n}: not an evidence record: time"
            )),
            "line {n}: {md}"
        );
    }
    assert!(!md.contains("times.jsonl: line 6"), "{md}");

    let wide = [
        line(1, 0, "attempt"),
        line(2, 1, "marker"),
        line(3, 253_402_300_799_999, "attempt"),
    ];
    std::fs::write(&ev, wide.join("\n") + "\n").unwrap();
    let (code, _, err, took) = report(&ev, &out);
    assert_eq!(code, 0, "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("9999-12-31T23:59:59.999Z"), "{md}");
}

/// A name that is markup: HTML, a Markdown link and table cell, a CDATA end, a newline, a bell,
/// a right-to-left override.
const EVIL: &str = "<script>document.title='PWNED'</script><img src=x onerror=alert(1)>[x](javascript:alert(2))|]]>\n\u{7}\u{202e}gnp.exe";

/// Service, branch, prober and marker label and author all `EVIL`: neither report holds a raw
/// tag, a link or the override; the HTML escapes them, the Markdown backslash-escapes them.
#[test]
fn drill_report_writes_markup_in_names_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("evil.jsonl");
    let evil = serde_json::to_string(EVIL).unwrap();
    let t = 1_796_154_164_852;
    let text = [line(1, t, "attempt"), line(2, t + 1000, "marker")]
        .join("\n")
        .replace("\"orders-queue\"", &evil)
        .replace("\"primary\"", &evil)
        .replace("\"az-a\"", &evil)
        .replace("\"kill primary\"", &evil)
        .replace("\"h\"", &evil);
    std::fs::write(&ev, text + "\n").unwrap();
    let out = dir.path().join("out");
    let (code, stdout, err, _) = report(&ev, &out);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(md.contains("\\<script\\>"), "{md}");
    for (name, text) in [
        ("report.md", &md),
        ("report.html", &html),
        ("stdout", &stdout),
    ] {
        // What a Markdown viewer sees once the backslash escapes are taken out; in HTML a
        // link's Markdown is text.
        let bare = text
            .replace("\\\\", "")
            .replace("\\<", "")
            .replace("\\]", "");
        let link = (name != "report.html").then_some("](javascript");
        for bad in ["<script", "<img", "\u{202e}", "\u{7}"]
            .into_iter()
            .chain(link)
        {
            assert!(!bare.contains(bad), "{name} holds {bad:?}: {text}");
        }
    }
}

/// `--out` holding links named like the outputs (a shared directory): `drill report` and
/// `simulate --out` replace the links with their files and leave the links' targets alone; an
/// earlier report is replaced whole.
#[test]
fn out_dir_links_are_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    for name in [
        "report.md",
        "report.html",
        "report.json",
        "simulation.md",
        "simulation.json",
    ] {
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
    }
    let ev = d.join("ev.jsonl");
    std::fs::write(&ev, line(1, 1_796_154_164_852, "attempt") + "\n").unwrap();
    for _ in 0..2 {
        let (code, _, err, _) = report(&ev, &out);
        assert_eq!(code, 0, "{err}");
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
    let (code, _, err, _) = run_bounded(
        &[
            "simulate",
            "--config",
            repo.join("orders-db.toml").to_str().unwrap(),
            "--scenario",
            repo.join("scenario-noise-outage.toml").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    for name in [
        "report.md",
        "report.json",
        "simulation.md",
        "simulation.json",
        "report.html",
    ] {
        let m = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(m.is_file(), "{name}: {m:?}");
    }
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 5, "no temporary file left: {names:?}");
}

/// A day of 3 % noise at a 100 ms interval flaps thousands of times: the table prints (it
/// panicked on a flaps cell of 66,000 characters), listing the first flap times and counting
/// the rest.
#[test]
fn simulate_prints_a_day_of_flapping_noise() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"state_dir = "{}"
[service]
name = "orders-queue"
stable_name = "mq.orders.internal.example"
[readiness]
window = "3s"
min_attempts = 3
declare_unready = {{ success_rate_below = 95.0, for = "1s" }}
declare_ready = {{ success_rate_at_or_above = 99.0, for = "2s" }}
[publish]
sinks = ["emf"]
[probe]
kind = "tcp"
interval = "100ms"
timeout = "80ms"
[probe.tcp]
port = 5671
[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mq-a.orders.internal.example"
[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mq-b.orders.internal.example"
"#,
            d.display()
        ),
    )
    .unwrap();
    let scenario = d.join("scenario.toml");
    std::fs::write(
        &scenario,
        "duration = \"24h\"\ninitial = \"ready\"\n[[branch]]\nname = \"primary\"\n[[branch.noise]]\nfail_percent = 3.0\n",
    )
    .unwrap();
    let (code, out, err, _) = run_bounded(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--scenario",
            scenario.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.contains(" more)"))
        .unwrap_or_default();
    assert!(row.len() < 2_000, "{row}");
    assert!(row.contains("primary"), "{out}");
}

/// `--alarms` against a CloudWatch endpoint that accepts and never answers: the first service's
/// fetch ends at its timeout, the others are not asked (each would wait as long again), the
/// report is written and the exit is 74.
#[test]
fn alarms_from_a_silent_endpoint_stop_after_the_first_service() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("ev.jsonl");
    let lines: Vec<String> = ["alpha", "beta", "gamma"]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            line(i as u64 + 1, 1_767_323_045_678 + i as i64, "attempt").replace("orders-queue", s)
        })
        .collect();
    std::fs::write(&ev, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("r");
    let (code, stdout, err, took) = run_bounded_env(
        &[
            "drill",
            "report",
            "--evidence",
            ev.to_str().unwrap(),
            "--alarms",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, 74, "{stdout}{err}");
    // One service's timeout (10 s), not three.
    assert!(took < Duration::from_secs(25), "took {took:?}: {err}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("2 remaining service(s) not asked"), "{md}");
    drop(l);
}
