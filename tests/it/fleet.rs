//! Several services in one process: two `mysql` services on throwaway MariaDB servers, one `http`
//! service on a loopback HTTP server, and one service whose secret is missing, all in one config
//! run by one runner.

use crate::support::fixture::*;
use crate::support::mariadb::MariaDb;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use tokio::net::TcpListener;

const PAYMENTS_PRIMARY: &str = "payments-primary.orders.internal.example";
const PAYMENTS_SECONDARY: &str = "payments-secondary.orders.internal.example";

/// An HTTP server on loopback answering 200 to every request; aborted on drop.
struct Http {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn http_server() -> Http {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    Http { port, task }
}

/// Transitions of `service`'s `branch`, as (from, to).
fn moves(ev: &[Value], service: &str, branch: &str) -> Vec<(String, String)> {
    ev.iter()
        .filter(|v| v["kind"] == "transition" && v["service"] == service && v["branch"] == branch)
        .map(|v| {
            let t = &v["transition"];
            (t["from"].to_string(), t["to"].as_str().unwrap().to_string())
        })
        .collect()
}

fn reached(ev: &[Value], service: &str, branch: &str, to: &str) -> bool {
    moves(ev, service, branch).iter().any(|(_, t)| t == to)
}

/// The six (service, branch) pairs that run.
const RUNNING: [(&str, &str); 6] = [
    ("orders-db", "primary"),
    ("orders-db", "secondary"),
    ("payments-db", "primary"),
    ("payments-db", "secondary"),
    ("orders-api", "primary"),
    ("orders-api", "secondary"),
];

/// The config: three services that can run and one whose password file is missing.
fn fleet_config(p: &Pipeline, payments: &MariaDb, http: &Http) -> String {
    let dir = p.dir.path();
    let ev_path = p.evidence();
    let header = fleet_header(
        "fleet-test",
        dir,
        &ev_path,
        p.dns.addr(),
        ("Fleet", "1s"),
        "mysql",
    );
    format!(
        r#"{header}
[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = {ca:?}

[probe.mysql]
user = "readyprobe"
password = {{ file = {password:?} }}

[[service]]
name = "orders-db"
stable_name = "mysql.orders.internal.example"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{PRIMARY}"
port = {p1}
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "{SECONDARY}"
port = {p2}

[[service]]
name = "payments-db"
stable_name = "mysql.payments.internal.example"
probe = {{ mysql = {{ port = {p3} }} }}
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{PAYMENTS_PRIMARY}"
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "{PAYMENTS_SECONDARY}"

[[service]]
name = "orders-api"
stable_name = "api.orders.internal.example"
[service.probe]
kind = "http"
[service.probe.tls]
ssl_mode = "disabled"
[service.probe.http]
port = {http}
path = "/health"
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "api-primary.orders.internal.example"
[[service.branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "api-secondary.orders.internal.example"

[[service]]
name = "broken-db"
stable_name = "mysql.broken.internal.example"
probe = {{ mysql = {{ password = {{ file = {missing:?} }} }} }}
[[service.branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.broken.internal.example"
"#,
        ca = p.ca.ca_pem_path(),
        password = dir.join("password"),
        missing = dir.join("no-such-password"),
        p1 = p.primary.port(),
        p2 = p.secondary.port(),
        p3 = payments.port(),
        http = http.port,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_in_one_process_and_a_broken_one_reported() {
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let lo = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let cert =
        p.ca.server_cert(&[PAYMENTS_PRIMARY, PAYMENTS_SECONDARY], &lo);
    let Some(payments) = MariaDb::start_or_skip(Some(&cert)).await else {
        return;
    };
    payments.install_canary(PASSWORD).await;
    for name in [
        "payments-primary",
        "payments-secondary",
        "api-primary",
        "api-secondary",
    ] {
        p.dns.set_a(name, Ipv4Addr::LOCALHOST, 5).await;
    }
    let http = http_server().await;
    let dir = p.dir.path();
    let ev_path = p.evidence();
    let text = fleet_config(&p, &payments, &http);
    let path = dir.join("fleet.toml");
    std::fs::write(&path, &text).unwrap();
    let cfg = readyprobe::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.services.len(), 4);

    let run = Running::start(cfg, None);
    let emf = run.emf.clone();
    // Every running branch of every service reaches ready.
    wait_evidence(&ev_path, Duration::from_secs(60), |ev| {
        RUNNING.iter().all(|(s, b)| reached(ev, s, b, "ready"))
    })
    .await;
    // One service's primary turns read-only: that branch, and only it, becomes unready.
    let before = read_evidence(&ev_path).len();
    p.primary.set_read_only(true).await;
    let ev = wait_evidence(&ev_path, Duration::from_secs(20), |ev| {
        reached(&ev[before..], "orders-db", "primary", "unready")
    })
    .await;
    // Wide margin: three publish ticks, more than the 1 s unready `for`.
    wait_ticks(&ev_path, ev.len(), 3).await;
    let s = run.stop().await;
    p.primary.set_read_only(false).await;
    let ev = read_evidence(&ev_path);
    let after = &ev[before..];
    for (service, branch) in &RUNNING[1..] {
        assert!(
            moves(after, service, branch).is_empty(),
            "{service}/{branch} moved: {:?}",
            moves(after, service, branch)
        );
        let key = format!("{service}/{branch}");
        assert_eq!(s.final_states[&key].as_str(), "ready", "{key}");
    }
    assert_eq!(s.final_states["orders-db/primary"].as_str(), "unready");
    assert!(
        !s.final_states.keys().any(|k| k.starts_with("broken-db")),
        "{:?}",
        s.final_states
    );
    // Each running service's attempts carry their service; the broken one has none.
    for service in ["orders-db", "payments-db", "orders-api"] {
        assert!(
            ev.iter().any(|v| v["kind"] == "attempt"
                && v["service"] == service
                && v["result"] == "success"),
            "{service}: no successful attempt"
        );
    }
    assert!(
        !ev.iter()
            .any(|v| v["kind"] == "attempt" && v["service"] == "broken-db")
    );
    // The broken service is reported: one evidence record naming the missing secret, and a
    // ServiceUnavailable datum at every publish tick.
    let unavailable: Vec<_> = ev
        .iter()
        .filter(|v| v["kind"] == "service_unavailable")
        .collect();
    assert_eq!(unavailable.len(), 1, "{unavailable:?}");
    assert_eq!(unavailable[0]["service"], "broken-db");
    let problems = unavailable[0]["problems"].to_string();
    assert!(
        problems.contains("probe.mysql.password") && problems.contains("no-such-password"),
        "{problems}"
    );
    let emf = emf.lines();
    let flagged = emf
        .iter()
        .filter(|l| l.contains("\"ServiceUnavailable\"") && l.contains("\"broken-db\""))
        .count();
    let ticks = ev
        .iter()
        .filter(|v| v["kind"] == "publish" && (v["reason"] == "tick" || v["reason"] == "final"))
        .count();
    assert!(ticks >= 5, "{ticks} ticks");
    assert_eq!(flagged, ticks, "one ServiceUnavailable datum per tick");
    for service in ["orders-db", "payments-db", "orders-api"] {
        let needle = format!("\"Service\":\"{service}\"");
        assert!(
            emf.iter()
                .any(|l| l.contains("\"Heartbeat\"") && l.contains(&needle)),
            "{service}: no Heartbeat"
        );
    }
}
