//! The pipeline fixture: two real MariaDB branches with TLS from a test CA, named by an
//! in-process DNS server, plus config and evidence helpers for driving `readyprobe run`.

use super::cloudwatch::cloudwatch_or_skip;
use super::config::{ConfigBuilder, path, secret_file};
use super::dns::DnsServer;
use super::mariadb::MariaDb;
use super::tls::TestCa;
use readyprobe::config::Config;
use readyprobe::runner::{RunError, RunOptions, RunSummary};
use readyprobe::sink::emf::EmfBuffer;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;

/// The canary identity's password in every fixture.
pub const PASSWORD: &str = "canary-Pw-7";
/// The DNS zone of the branches.
pub const ZONE: &str = "orders.internal.example";
/// Endpoint of the primary branch.
pub const PRIMARY: &str = "mysql-primary.orders.internal.example";
/// Endpoint of the secondary branch.
pub const SECONDARY: &str = "mysql-secondary.orders.internal.example";

/// A compressed policy for tests: 300 ms attempts, 3 s windows, unready after 1 s, ready after 3 s.
pub const FAST_POLICY: &str = r#"
[readiness]
window = "3s"
min_attempts = 5
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "3s" }
"#;

/// The shared top of a test `[[service]]` config: file store, the `emf` sink, the evidence file,
/// a 500 ms state poll, the test DNS server, [`FAST_POLICY`], and 300 ms attempts of `kind`.
pub fn fleet_header(
    prober: &str,
    dir: &std::path::Path,
    evidence: &std::path::Path,
    dns: std::net::SocketAddr,
    (namespace, publish_interval): (&str, &str),
    kind: &str,
) -> String {
    format!(
        r#"
prober_id = "{prober}"
state_dir = {state:?}

[publish]
interval = "{publish_interval}"
sinks = ["emf"]
namespace = "{namespace}"

[evidence]
path = {evidence:?}

[state]
poll_interval = "500ms"

[dns]
nameservers = ["{dns}"]
timeout = "200ms"

{FAST_POLICY}

[probe]
kind = "{kind}"
interval = "300ms"
timeout = "250ms"
jitter = "100ms"
"#,
        state = dir.join("state"),
    )
}

/// Two branches and their names.
pub struct Pipeline {
    /// The test CA (keeps its files alive).
    pub ca: TestCa,
    /// PRIMARY branch server.
    pub primary: MariaDb,
    /// SECONDARY branch server.
    pub secondary: MariaDb,
    /// Serves the branch names.
    pub dns: DnsServer,
    /// Config, password file, state and evidence live here.
    pub dir: tempfile::TempDir,
}

/// Knobs of a generated config.
pub struct ConfigOpts<'a> {
    /// CloudWatch namespace.
    pub namespace: &'a str,
    /// `publish.sinks`.
    pub sinks: &'a [&'a str],
    /// `[readiness]` table text.
    pub policy: &'a str,
    /// Probe interval, ms.
    pub interval_ms: u64,
    /// Attempt timeout, ms.
    pub timeout_ms: u64,
    /// Publish interval, ms.
    pub publish_ms: u64,
    /// Port the primary branch is probed on (default: the server's).
    pub primary_port: Option<u16>,
    /// CloudWatch endpoint.
    pub endpoint: Option<String>,
    /// `[state]` table text.
    pub state: &'a str,
}

impl Default for ConfigOpts<'_> {
    fn default() -> Self {
        ConfigOpts {
            namespace: "Readyprobe",
            sinks: &["emf"],
            policy: FAST_POLICY,
            interval_ms: 300,
            timeout_ms: 250,
            publish_ms: 1000,
            primary_port: None,
            endpoint: None,
            state: "[state]\npoll_interval = \"500ms\"\n",
        }
    }
}

impl Pipeline {
    /// Start everything, or `None` (after a loud skip line) when MariaDB is unavailable outside CI.
    pub async fn start_or_skip() -> Option<Pipeline> {
        let ca = TestCa::new();
        let lo = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let pc = ca.server_cert(&[PRIMARY], &lo);
        let sc = ca.server_cert(&[SECONDARY], &lo);
        let primary = MariaDb::start_or_skip(Some(&pc)).await?;
        let secondary = MariaDb::start_or_skip(Some(&sc)).await?;
        primary.install_canary(PASSWORD).await;
        secondary.install_canary(PASSWORD).await;
        let dns = DnsServer::start(ZONE).await;
        dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
        dns.set_a("mysql-secondary", Ipv4Addr::LOCALHOST, 5).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
        Some(Pipeline {
            ca,
            primary,
            secondary,
            dns,
            dir,
        })
    }

    /// The evidence file path of generated configs.
    pub fn evidence(&self) -> PathBuf {
        self.dir.path().join("evidence.jsonl")
    }

    /// The builder of the config for `opts`: both branches with TLS from the test CA, the
    /// password from a file, names from the test DNS server.
    pub fn builder(&self, o: &ConfigOpts<'_>) -> ConfigBuilder {
        let dir = self.dir.path();
        let mut b = ConfigBuilder::new(dir, "orders-db", "mysql.orders.internal.example")
            .clear("readiness")
            .merge(o.policy)
            .set("publish", "interval", format!("{}ms", o.publish_ms))
            .set("publish", "namespace", o.namespace)
            .set(
                "publish",
                "sinks",
                toml::Value::Array(o.sinks.iter().map(|s| (*s).into()).collect()),
            )
            .set("evidence", "path", path(&self.evidence()))
            .merge(o.state)
            .nameserver(self.dns.addr())
            .set("dns", "timeout", "200ms")
            .kind("mysql")
            .set("probe", "interval", format!("{}ms", o.interval_ms))
            .set("probe", "timeout", format!("{}ms", o.timeout_ms))
            .set("probe", "jitter", "0s")
            .tls("verify_identity", Some(self.ca.ca_pem_path()))
            .set("probe.mysql", "user", "readyprobe")
            .set(
                "probe.mysql",
                "password",
                secret_file(&dir.join("password")),
            )
            .branch(
                "primary",
                "PRIMARY",
                PRIMARY,
                Some(o.primary_port.unwrap_or(self.primary.port())),
            )
            .branch(
                "secondary",
                "SECONDARY",
                SECONDARY,
                Some(self.secondary.port()),
            );
        if let Some(e) = &o.endpoint {
            b = b.set("publish.cloudwatch", "endpoint_url", e.as_str()).set(
                "publish.cloudwatch",
                "region",
                "us-east-1",
            );
        }
        b
    }

    /// Config text for `opts`.
    pub fn config_text(&self, o: &ConfigOpts<'_>) -> String {
        self.builder(o).build()
    }

    /// Write a config file and return its path.
    pub fn write_config(&self, name: &str, o: &ConfigOpts<'_>) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, self.config_text(o)).unwrap();
        p
    }

    /// Write and validate a config.
    pub fn config(&self, name: &str, o: &ConfigOpts<'_>) -> Config {
        let p = self.write_config(name, o);
        readyprobe::config::load(&p).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A `readyprobe run` in this process; stop it with [`Running::stop`].
pub struct Running {
    /// What the `emf` sink wrote (kept out of the test output).
    pub emf: EmfBuffer,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<RunSummary, RunError>>,
}

impl Running {
    /// Start the runner on `cfg`.
    pub fn start(cfg: Config, duration: Option<Duration>) -> Running {
        let (tx, rx) = oneshot::channel::<()>();
        let stop = async move {
            let _ = rx.await;
            "test"
        };
        let emf = EmfBuffer::new();
        let task = tokio::spawn(readyprobe::runner::run(
            cfg,
            RunOptions {
                duration,
                grace: Duration::from_secs(3),
                emf_out: Some(emf.clone()),
                heartbeat: None,
            },
            stop,
        ));
        Running {
            emf,
            stop: Some(tx),
            task,
        }
    }

    /// Request a stop and wait for the summary.
    pub async fn stop(mut self) -> RunSummary {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.finish().await
    }

    /// Wait for the run to end by itself (`duration`).
    pub async fn finish(self) -> RunSummary {
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("run did not stop within 60 s")
            .expect("run task panicked")
            .expect("run failed")
    }
}

/// Every evidence record so far (a torn last line is a test failure).
pub fn read_evidence(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad evidence line {l:?}: {e}")))
        .collect()
}

/// Poll the evidence file until `pred` holds; panics with the tail of the file after `timeout`.
pub async fn wait_evidence(
    path: &Path,
    timeout: Duration,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let end = tokio::time::Instant::now() + timeout;
    loop {
        let ev = read_evidence(path);
        if pred(&ev) {
            return ev;
        }
        if tokio::time::Instant::now() > end {
            let brief = |v: &Value| {
                let mut s = v.to_string();
                s.truncate(400);
                s
            };
            let tail: Vec<String> = ev.iter().rev().take(8).map(brief).collect();
            // Attempts and publishes crowd the tail; the decisions are what a failure is about.
            let decisions: Vec<String> = ev
                .iter()
                .filter(|v| v["kind"] != "attempt" && v["kind"] != "publish")
                .rev()
                .take(12)
                .map(brief)
                .collect();
            panic!(
                "evidence condition not met within {timeout:?}; last records:\n{}\nlast other records:\n{}",
                tail.join("\n"),
                decisions.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publish ticks recorded after evidence record `from` (by `prober` when given): one per batch,
/// however many sinks it went to. A test that needs the prober to publish again after an event
/// waits for these rather than sleeping a tick's worth.
pub fn ticks_since(ev: &[Value], from: usize, prober: Option<&str>) -> usize {
    let mut batches = std::collections::BTreeSet::new();
    ev.iter()
        .skip(from)
        .filter(|v| v["kind"] == "publish" && v["reason"] == "tick")
        .filter(|v| prober.is_none_or(|p| v["prober"] == p))
        .filter(|v| {
            // Records written before batch ids count one each.
            v["batch"]
                .as_u64()
                .is_none_or(|b| batches.insert((v["prober"].to_string(), b)))
        })
        .count()
}

/// Waits until `n` publish ticks follow evidence record `from` ([`ticks_since`]); returns the
/// evidence then.
pub async fn wait_ticks(path: &Path, from: usize, n: usize) -> Vec<Value> {
    wait_evidence(path, Duration::from_secs(30), |ev| {
        ticks_since(ev, from, None) >= n
    })
    .await
}

/// Transitions recorded for `branch`, as (from, to, at_ms, held_since).
pub fn transitions(ev: &[Value], branch: &str) -> Vec<(String, String, i64, Option<i64>)> {
    ev.iter()
        .filter(|v| v["kind"] == "transition" && v["branch"] == branch)
        .map(|v| {
            let t = &v["transition"];
            (
                t["from"].as_str().unwrap().to_string(),
                t["to"].as_str().unwrap().to_string(),
                t["at"].as_i64().unwrap(),
                t["held_since"].as_i64(),
            )
        })
        .collect()
}

/// True once `branch` has a transition to `to`.
pub fn has_transition(ev: &[Value], branch: &str, to: &str) -> bool {
    transitions(ev, branch).iter().any(|t| t.1 == to)
}

/// Attempt records of `branch`.
pub fn attempts<'a>(ev: &'a [Value], branch: &str) -> Vec<&'a Value> {
    ev.iter()
        .filter(|v| v["kind"] == "attempt" && v["branch"] == branch)
        .collect()
}

/// The CloudWatch client, or `None` after a loud skip (panics under CI).
///
/// The prober takes credentials from the default AWS chain, as in production; the emulator
/// accepts any, and `.cargo/config.toml` gives test processes fake ones.
pub async fn cloudwatch() -> Option<aws_sdk_cloudwatch::Client> {
    cloudwatch_or_skip().await
}
