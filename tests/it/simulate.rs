//! `readyprobe simulate` as a team runs it before a drill: the built binary on a config and a
//! scenario file, its JSON checked against the policy arithmetic written out here.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_readyprobe"))
}

/// The production policy of `probes/orders-db.toml`: attempts every 2 s (timeout 1.5 s, connect
/// step 1 s); unready below 95 % over 60 s (30 attempts, at least 10) held 3 m; ready at 99 % or
/// more over 5 m (150 attempts) held 10 m, no approval; a publish tick every 60 s.
const CONFIG: &str = r#"[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[readiness]
window = "60s"
min_attempts = 10
declare_unready = { success_rate_below = 95.0, for = "3m" }
declare_ready = { success_rate_at_or_above = 99.0, for = "10m", window = "5m", approval = "none" }

[publish]
interval = "60s"
sinks = ["emf"]

[probe]
kind = "mysql"
interval = "2s"
timeout = "1500ms"
tls = { ssl_mode = "verify_identity", ssl_ca = "/etc/readyprobe/rds-ca.pem" }
[probe.step_timeout]
connect = "1s"
[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn simulate(dir: &Path, scenario: &str, extra: &[&str]) -> Output {
    let config = write(dir, "config.toml", CONFIG);
    let scenario = write(dir, "scenario.toml", scenario);
    bin()
        .args(["simulate", "--config"])
        .arg(&config)
        .arg("--scenario")
        .arg(&scenario)
        .args(extra)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn branch<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap()
}

/// `(phase name, since_fault_ms)` of a phase list.
fn phases(list: &Value) -> Vec<(String, Option<i64>)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["since_fault_ms"].as_i64(),
            )
        })
        .collect()
}

fn since(list: &Value, name: &str) -> Option<i64> {
    phases(list)
        .into_iter()
        .find(|(n, _)| n.starts_with(name))
        .unwrap_or_else(|| panic!("no phase {name}"))
        .1
}

const S: i64 = 1000;
const M: i64 = 60 * S;

#[test]
fn noise_then_an_outage_follows_the_policy_arithmetic_without_a_flap() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("report");
    let scenario = r#"duration = "60m"
seed = 7
initial = "ready"

[[branch]]
name = "primary"
[[branch.noise]]
until = "10m"
fail_percent = 2.0
class = "tcp_timeout"
[[branch.fault]]
from = "10m"
until = "25m"
class = "server_read_only"
"#;
    let out = simulate(
        dir.path(),
        scenario,
        &["--format", "json", "--out", out_dir.to_str().unwrap()],
    );
    let r = json(&out);
    let p = branch(&r, "primary");
    // The outage fails its 450 attempts (15 m / 2 s); the noise failed some of the 300 before.
    let failed = p["failed_attempts"].as_i64().unwrap();
    assert!(failed > 450 && failed < 450 + 30, "{failed}");
    // No flap during the noise: two failures in a 60 s window (28/30 = 93.3 % < 95 %) happen by
    // chance at 2 %, but the unready condition must then hold at every evaluation for 3 m.
    assert_eq!(p["flaps"], serde_json::json!([]));
    let to: Vec<&str> = p["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to"].as_str().unwrap())
        .collect();
    assert_eq!(to, ["unready", "ready"]);

    let fault = &p["faults"][0];
    let over = &fault["failover"];
    // Detection: `server_read_only` is definitive, so the unready condition (holding from the
    // second failure, 28/30 = 93.3 % < 95 %) fires without waiting 3 m once the read-only
    // failures, unbroken, span 20 s (`definitive_for`) from the first (the attempt that starts
    // at the fault) to the last: at fault + 20 s.
    let detection = since(over, "detection").unwrap();
    assert_eq!(detection, 20 * S);
    let unready = &p["transitions"][0]["reason"];
    assert!(
        unready.as_str().unwrap().contains("definitive rule fired"),
        "{unready}"
    );
    // Alarm: Minimum over the minute 10m–11m holds the 0 published at detection; evaluated at
    // its end, 11m: fault + 1 m. Health check 30 s later (the default delay); the answer moves to
    // SECONDARY at once (answer delay 0); every cache has it a TTL (60 s) later.
    assert_eq!(since(over, "alarm"), Some(M));
    assert_eq!(since(over, "health check"), Some(M + 30 * S));
    assert_eq!(since(over, "DNS selection"), Some(M + 30 * S));
    assert_eq!(since(over, "cache expiry"), Some(2 * M + 30 * S));
    let dns = over
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "DNS selection")
        .unwrap();
    assert_eq!(dns["note"], "answer SECONDARY");

    let back = &fault["failback"];
    // Failback: 150 attempts in the 5 m window tolerate one failure (149/150 = 99.3 %); the
    // condition starts holding when the second-last failing attempt (25m - 4 s) leaves the
    // window, at 25m - 4 s + 5 m, and fires 10 m later: 14 m 56 s after the fault ended.
    assert_eq!(since(back, "first successful attempt"), Some(0));
    assert_eq!(since(back, "pending_approval"), None);
    assert_eq!(since(back, "readiness 1 published"), Some(14 * M + 56 * S));
    // The minute 39m–40m still holds the tick's 0 at 39m; 40m–41m is all 1: OK at 41m.
    assert_eq!(since(back, "alarm"), Some(16 * M));
    assert_eq!(since(back, "health check"), Some(16 * M + 30 * S));
    assert_eq!(since(back, "DNS selection"), Some(16 * M + 30 * S));
    assert_eq!(since(back, "cache expiry"), Some(17 * M + 30 * S));
    assert_eq!(r["fail_open"], serde_json::json!([]));

    // --out: the same report as Markdown and JSON.
    let md = std::fs::read_to_string(out_dir.join("simulation.md")).unwrap();
    assert!(md.contains("| detection: readiness 0 published |"), "{md}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("simulation.json")).unwrap())
            .unwrap();
    assert_eq!(written, r);
    // ... and drawn as a drill report is: lanes, the scripted fault as a marker rule.
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "{html}");
    assert!(html.contains("data-lane=\"stable:"), "{html}");
    assert!(html.contains("scripted fault"), "{html}");

    // The default output is the table, the same run.
    let table = simulate(dir.path(), scenario, &[]);
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("detection: readiness 0 published"), "{text}");
    assert!(text.contains("assumptions"), "{text}");
}

#[test]
fn both_branches_failing_gives_the_fail_open_answer() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = r#"duration = "45m"
initial = "ready"

[[branch]]
name = "primary"
[[branch.fault]]
from = "10m"
until = "40m"
class = "tcp_timeout"

[[branch]]
name = "secondary"
[[branch.fault]]
from = "20m"
until = "40m"
class = "server_read_only"
"#;
    let r = json(&simulate(dir.path(), scenario, &["--format", "json"]));
    // Primary (tcp_timeout, ambiguous): unready 3 m 3 s after its fault (tcp_timeout attempts end
    // 1 s after their start, the second at fault + 3 s), ALARM at the next minute's end
    // (fault + 4 m), unhealthy 30 s later: 14m30s, the answer SECONDARY. Secondary
    // (server_read_only, definitive): unready 20 s after its fault (`definitive_for` after its
    // first read-only answer), ALARM at 21m, unhealthy at 21m30s: no record healthy, Route 53
    // answers PRIMARY anyway, to the end (failback takes ~15 m).
    let answers: Vec<(i64, &str, bool)> = r["answer"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["at"].as_i64().unwrap(),
                c["to"]["record"].as_str().unwrap(),
                c["to"]["fail_open"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [
            (14 * M + 30 * S, "SECONDARY", false),
            (21 * M + 30 * S, "PRIMARY", true)
        ]
    );
    assert_eq!(
        r["fail_open"],
        serde_json::json!([{ "from": 21 * M + 30 * S, "until": null }])
    );
    let over = &branch(&r, "secondary")["faults"][0]["failover"];
    assert_eq!(since(over, "DNS selection"), Some(M + 30 * S));
    let dns = over
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "DNS selection")
        .unwrap();
    assert!(dns["note"].as_str().unwrap().contains("fail-open"), "{dns}");
}

#[test]
fn a_bad_scenario_key_exits_64_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = simulate(
        dir.path(),
        "duration = \"1h\"\n\n[[branch]]\nname = \"primary\"\n[[branch.fault]]\nfrom = \"10m\"\nuntil = \"20m\"\nfail_pct = 50\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    let path = dir.path().join("scenario.toml");
    assert!(
        err.contains(&format!(
            "{}:8: branch[0].fault[0].fail_pct",
            path.display()
        )),
        "{err}"
    );
    // An unknown branch: the line of its name.
    let out = simulate(
        dir.path(),
        "duration = \"1h\"\n[[branch]]\nname = \"tertiary\"\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:3: branch[0].name", path.display())),
        "{err}"
    );
    // A scenario that cannot be read: 74.
    let config = write(dir.path(), "config.toml", CONFIG);
    let out = bin()
        .args(["simulate", "--config"])
        .arg(&config)
        .arg("--scenario")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(74));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read scenario file "), "{err}");
}

/// The example scenarios in `probes/` run against the configs their comments name, and reach
/// the phases they promise.
#[test]
fn the_example_scenarios_run_against_their_configs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (scenario, config, service, pending) in [
        ("scenario-noise-outage.toml", "orders-db.toml", None, false),
        (
            "scenario-readonly-failback.toml",
            "fleet.toml",
            Some("payments-db"),
            true,
        ),
    ] {
        let text = std::fs::read_to_string(repo.join("probes").join(scenario)).unwrap();
        assert!(
            text.contains(&format!("--config probes/{config}")),
            "{scenario}"
        );
        let mut cmd = bin();
        cmd.args(["simulate", "--format", "json", "--config"])
            .arg(repo.join("probes").join(config))
            .arg("--scenario")
            .arg(repo.join("probes").join(scenario));
        if let Some(s) = service {
            cmd.args(["--service", s]);
        }
        let r = json(&cmd.output().unwrap());
        let p = branch(&r, "primary");
        assert_eq!(p["flaps"], serde_json::json!([]), "{scenario}");
        let fault = &p["faults"][0];
        assert!(
            since(&fault["failover"], "DNS selection").is_some(),
            "{scenario}"
        );
        assert!(
            since(&fault["failback"], "DNS selection").is_some(),
            "{scenario}"
        );
        assert_eq!(fault["pending_approval_ms"].is_i64(), pending, "{scenario}");
    }
}

/// The cross-region scenarios in `probes/`, through the binary: the wrong answers of every
/// layout, as BENCHMARKS.md ("Cross-region layouts") and docs/deploy.md state them. The chosen
/// layout (calculated, threshold 2, children Healthy) gives none when a region goes dark, whatever
/// Route 53 reads from its alarms, nor under an impaired CloudWatch; the own-region layout gives
/// one under every insufficient-data status.
#[test]
fn the_cross_region_scenarios_decide_the_layout() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenarios = [
        "region-dark",
        "region-dark-stale",
        "cloudwatch-impaired",
        "path-cut",
        "path-cut-both-ways",
        "readonly-primary",
    ];
    // Wrong answers per scenario, in the order above.
    let want: [(&str, &str, [u64; 6]); 12] = [
        ("own_region", "Healthy", [1, 1, 0, 0, 0, 0]),
        ("own_region", "Unhealthy", [0, 2, 1, 0, 0, 0]),
        ("own_region", "LastKnownStatus", [1, 1, 0, 0, 0, 0]),
        ("other_region", "Healthy", [0, 0, 0, 1, 0, 0]),
        ("other_region", "Unhealthy", [3, 1, 0, 1, 0, 0]),
        ("other_region", "LastKnownStatus", [0, 0, 0, 1, 0, 0]),
        ("calculated 1", "Healthy", [1, 1, 0, 0, 0, 0]),
        ("calculated 1", "Unhealthy", [0, 2, 0, 0, 0, 0]),
        ("calculated 1", "LastKnownStatus", [1, 1, 0, 0, 0, 0]),
        ("calculated 2", "Healthy", [0, 0, 0, 1, 0, 0]),
        ("calculated 2", "Unhealthy", [3, 1, 0, 1, 0, 0]),
        ("calculated 2", "LastKnownStatus", [0, 0, 0, 1, 0, 0]),
    ];
    let mut got: Vec<(String, String, [u64; 6])> = Vec::new();
    for (i, sc) in scenarios.iter().enumerate() {
        let file = format!("scenario-{sc}.toml");
        let text = std::fs::read_to_string(repo.join("probes").join(&file)).unwrap();
        assert!(text.contains("--config probes/orders-db.toml"), "{file}");
        let out = bin()
            .args(["simulate", "--format", "json", "--config"])
            .arg(repo.join("probes/orders-db.toml"))
            .arg("--scenario")
            .arg(repo.join("probes").join(&file))
            .output()
            .unwrap();
        let r = json(&out);
        let rows = r["layouts"].as_array().expect("a layouts table");
        assert_eq!(rows.len(), 12, "{file}");
        for row in rows {
            let layout = match &row["layout"] {
                Value::String(s) => s.clone(),
                other => format!("calculated {}", other["calculated"]),
            };
            let status = row["insufficient_data"].as_str().unwrap().to_string();
            let at = match got.iter().position(|g| g.0 == layout && g.1 == status) {
                Some(k) => k,
                None => {
                    got.push((layout, status, [0; 6]));
                    got.len() - 1
                }
            };
            got[at].2[i] = row["wrong_answers"].as_u64().unwrap();
        }
    }
    let want: Vec<(String, String, [u64; 6])> = want
        .iter()
        .map(|(l, s, w)| (l.to_string(), s.to_string(), *w))
        .collect();
    assert_eq!(got, want);
}
