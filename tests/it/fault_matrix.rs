//! The fault matrix (issue 8): one named test per fault, each on real components — a throwaway
//! MariaDB, in-process DNS, real TLS, a network namespace with nftables, an in-process TCP proxy.
//!
//! Each row runs `readyprobe run` (in process, for a few seconds) on one branch and reads the
//! evidence file. It asserts the failing step and class, that every attempt ended within its
//! deadline, and that every attempt started on its tick, so a fault can neither hang an attempt
//! nor delay the next one. Bounds are wide (hundreds of ms) so a loaded machine passes and a hang
//! does not.

mod dns;
mod mysql;
mod postgres;
mod tcp;
mod tls;

use crate::support::config::{ConfigBuilder, path, secret_file};
use crate::support::dns::DnsServer;
use crate::support::fixture::{PASSWORD, PRIMARY, Running, ZONE, attempts, read_evidence};
use crate::support::mariadb::{MariaDb, MariaDbOptions};
use crate::support::tls::TestCa;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

/// Between attempt starts.
const INTERVAL_MS: i64 = 1000;
/// The attempt deadline.
const TIMEOUT_MS: i64 = 700;
/// `dns.timeout`, per query.
const DNS_TIMEOUT_MS: i64 = 300;
/// Slack on every time bound: wide for a loaded 2-core machine, far below a hang.
const SLACK_MS: i64 = 450;

/// One row's world: a CA, the branch's name in DNS, a directory for config and evidence, and
/// (for most rows) a MariaDB serving TLS for the branch name with the canary installed.
pub struct Row {
    pub ca: TestCa,
    pub dns: DnsServer,
    pub dir: tempfile::TempDir,
    pub db: Option<MariaDb>,
}

impl Row {
    /// DNS, CA and directory; `mysql-primary` points at 127.0.0.1.
    pub async fn bare() -> Row {
        let dns = DnsServer::start(ZONE).await;
        dns.set_a("mysql-primary", Ipv4Addr::LOCALHOST, 5).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
        Row {
            ca: TestCa::new(),
            dns,
            dir,
            db: None,
        }
    }

    /// [`Row::bare`] plus a MariaDB started with `extra_args`; `None` after a loud skip when
    /// MariaDB is not installed (panics under `CI=true`).
    pub async fn with_db(extra_args: &[&str]) -> Option<Row> {
        let mut row = Row::bare().await;
        let cert = row
            .ca
            .server_cert(&[PRIMARY], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let db = MariaDb::start_with_or_skip(MariaDbOptions {
            tls: Some(cert),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        })
        .await?;
        db.install_canary(PASSWORD).await;
        row.db = Some(db);
        Some(row)
    }

    /// The database (rows made by [`Row::with_db`]).
    pub fn db(&self) -> &MariaDb {
        self.db.as_ref().expect("a row with a database")
    }

    pub fn evidence(&self) -> PathBuf {
        self.dir.path().join("evidence.jsonl")
    }

    /// A `mysql` probe of one branch, `primary` at `PRIMARY:port`, TLS verified against the
    /// test CA, on the row's timing.
    pub fn config(&self, port: u16) -> ConfigBuilder {
        let dir = self.dir.path();
        ConfigBuilder::new(dir, "orders-db", "mysql.orders.internal.example")
            .set("publish", "interval", "1s")
            .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
            .set("evidence", "path", path(&self.evidence()))
            .nameserver(self.dns.addr())
            .set("dns", "timeout", format!("{DNS_TIMEOUT_MS}ms"))
            .kind("mysql")
            .set("probe", "interval", format!("{INTERVAL_MS}ms"))
            .set("probe", "timeout", format!("{TIMEOUT_MS}ms"))
            .set("probe", "jitter", "0s")
            .tls("verify_identity", Some(self.ca.ca_pem_path()))
            .set("probe.mysql", "user", "readyprobe")
            .set(
                "probe.mysql",
                "password",
                secret_file(&dir.join("password")),
            )
            .branch("primary", "PRIMARY", PRIMARY, Some(port))
    }

    /// The row's config for the database's own port.
    pub fn db_config(&self) -> ConfigBuilder {
        self.config(self.db().port())
    }

    /// Start `readyprobe run` on `config` for `duration`.
    pub fn start(&self, config: &ConfigBuilder, duration: Duration) -> Running {
        let cfg = config.load(&self.dir.path().join("fault.toml"));
        Running::start(cfg, Some(duration))
    }

    /// Run `readyprobe run` on `config` for `duration` (three ticks for 2.5 s); the branch's
    /// attempt records, after checking their timing with [`check_timing`].
    pub async fn run(&self, config: &ConfigBuilder, duration: Duration) -> Vec<Value> {
        self.start(config, duration).finish().await;
        self.attempts()
    }

    /// The attempt records so far, timing checked.
    pub fn attempts(&self) -> Vec<Value> {
        let ev = read_evidence(&self.evidence());
        let got: Vec<Value> = attempts(&ev, "primary").into_iter().cloned().collect();
        check_timing(&got);
        got
    }
}

/// The default run: ticks at 0, 1 and 2 s.
pub const THREE_TICKS: Duration = Duration::from_millis(2500);

/// Every attempt ended within its deadline, and attempt `i` started on tick `i` (the ticks are
/// fixed-rate from the first start, so a slow attempt must not push later ones back).
pub fn check_timing(attempts: &[Value]) {
    assert!(
        attempts.len() >= 2,
        "at least two attempts in the run: {attempts:#?}"
    );
    let ms = |a: &Value, k: &str| a[k].as_i64().unwrap_or_else(|| panic!("{k} in {a}"));
    let first = ms(&attempts[0], "started_at");
    for (i, a) in attempts.iter().enumerate() {
        let took = ms(a, "finished_at") - ms(a, "started_at");
        assert!(
            (0..=TIMEOUT_MS + SLACK_MS).contains(&took),
            "attempt {i} took {took} ms, deadline {TIMEOUT_MS} ms: {a}"
        );
        let late = ms(a, "started_at") - first - i as i64 * INTERVAL_MS;
        assert!(
            (-100..=SLACK_MS).contains(&late),
            "attempt {i} started {late} ms off its tick (interval {INTERVAL_MS} ms): {attempts:#?}"
        );
        assert_eq!(
            a["seq"].as_u64(),
            Some(i as u64 + 1),
            "no attempt missing: {a}"
        );
    }
}

/// The step and class of a failed attempt record.
pub fn failure(a: &Value) -> (&str, &str) {
    assert_eq!(a["result"], "failure", "{a}");
    (a["step"].as_str().unwrap(), a["class"].as_str().unwrap())
}

/// Every attempt failed at `step` with `class`.
pub fn all_fail(attempts: &[Value], step: &str, class: &str) {
    for a in attempts {
        assert_eq!(failure(a), (step, class), "{a}");
    }
}

/// How long the attempt took, ms.
pub fn took(a: &Value) -> i64 {
    a["finished_at"].as_i64().unwrap() - a["started_at"].as_i64().unwrap()
}
