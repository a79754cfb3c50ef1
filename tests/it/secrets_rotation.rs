//! Secrets Manager secrets against the emulator through the real SDK: a rotation of the
//! secret and of the MariaDB user's password costs at most one failed attempt per branch and
//! no readiness transition; an `rds!`-style JSON secret is read by its `json_key`; a missing
//! key, a value that is not JSON, a deleted secret are named at start-up without the value; a
//! failed read keeps the last value; a reload reads a secret it names for the first time; a
//! secret header rotates at the cost of at most one 401.

use crate::support::cloudwatch::{REGION, cloudwatch_or_skip, endpoint};
use crate::support::fixture::*;
use crate::support::run::unavailable_input;
use aws_sdk_secretsmanager::config::Credentials;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A Secrets Manager client for the emulator, or `None` after a loud skip (panics under CI).
async fn secrets_or_skip() -> Option<aws_sdk_secretsmanager::Client> {
    cloudwatch_or_skip().await?;
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(REGION))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "readyprobe-it",
        ))
        .endpoint_url(endpoint())
        .load()
        .await;
    Some(aws_sdk_secretsmanager::Client::new(&conf))
}

/// A name no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Create secret `name` holding `value`; its ARN.
async fn create(sm: &aws_sdk_secretsmanager::Client, name: &str, value: &str) -> String {
    let out = sm
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!("create secret {name}: {e:?} (is secretsmanager among the emulator's services?)")
        });
    out.arn.expect("an ARN")
}

/// `{ secrets_manager = id, json_key = key }`.
fn sm_ref(id: &str, key: Option<&str>) -> toml::Value {
    let mut t = toml::Table::new();
    t.insert("secrets_manager".into(), id.into());
    if let Some(k) = key {
        t.insert("json_key".into(), k.into());
    }
    toml::Value::Table(t)
}

/// The binary with the emulator as its Secrets Manager endpoint (the default chain's variable).
fn readyprobe(args: &[&str], config: &Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_readyprobe"));
    c.args(args)
        .arg("--config")
        .arg(config)
        .env("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint())
        .env("AWS_REGION", REGION)
        .stdout(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Attempts at 2 s leave the refresh a wide margin to land before a branch's next attempt; one
/// failed attempt among a window's ten is no reason for a transition.
const ROTATION_POLICY: &str = r#"
[readiness]
window = "20s"
min_attempts = 3
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "2s" }
"#;

/// An RDS-managed secret's shape (JSON, read by its key) holding the fixture's password, and
/// a `run` (logs to the returned file) whose branches are both ready. The emulator refuses `!`
/// in a name it is asked to create (RDS creates `rds!` ones), so the secret is named by its ARN.
async fn run_ready(
    sm: &aws_sdk_secretsmanager::Client,
    p: &Pipeline,
    test: &str,
) -> (String, tokio::process::Child, std::path::PathBuf) {
    let name = unique(&format!("readyprobe-it/{test}"));
    let value = serde_json::json!({"username": "readyprobe", "password": PASSWORD});
    let arn = create(sm, &name, &value.to_string()).await;
    let opts = ConfigOpts {
        policy: ROTATION_POLICY,
        interval_ms: 2000,
        timeout_ms: 1500,
        ..ConfigOpts::default()
    };
    let text = p
        .builder(&opts)
        .set("probe.mysql", "password", sm_ref(&arn, Some("password")))
        .build();
    let config = p.dir.path().join(format!("{test}.toml"));
    std::fs::write(&config, text).unwrap();
    let log = p.dir.path().join(format!("{test}.log"));
    let child = readyprobe(&["run", "--grace", "3s"], &config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_evidence(&p.evidence(), Duration::from_secs(60), |ev| {
        has_transition(ev, "primary", "ready") && has_transition(ev, "secondary", "ready")
    })
    .await;
    (name, child, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_costs_at_most_one_failed_attempt_per_branch_and_no_transition() {
    let Some(sm) = secrets_or_skip().await else {
        return;
    };
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let json = |pw: &str| serde_json::json!({"username": "readyprobe", "password": pw}).to_string();
    let (name, child, log) = run_ready(&sm, &p, "rotation").await;
    let evidence = p.evidence();

    // Rotate as Secrets Manager's rotation does: the new value first, then the database.
    let new_password = "rotated-Pw-9f3c2a7e1b";
    sm.put_secret_value()
        .secret_id(&name)
        .secret_string(json(new_password))
        .send()
        .await
        .unwrap();
    let from = read_evidence(&evidence).len();
    for db in [&p.primary, &p.secondary] {
        db.root_exec(&format!(
            "ALTER USER 'readyprobe'@'%' IDENTIFIED BY '{new_password}'"
        ))
        .await;
    }
    // Each branch then succeeds five times in a row with the new password.
    let recovered = |ev: &[Value], branch: &str| {
        let after: Vec<&Value> = attempts(&ev[from.min(ev.len())..], branch);
        after.len() >= 6 && after.iter().rev().take(5).all(|a| a["result"] == "success")
    };
    let ev = wait_evidence(&evidence, Duration::from_secs(90), |ev| {
        recovered(ev, "primary") && recovered(ev, "secondary")
    })
    .await;
    let after = &ev[from..];
    let mut failed_total = 0;
    for branch in ["primary", "secondary"] {
        let failed: Vec<&Value> = attempts(after, branch)
            .into_iter()
            .filter(|a| a["result"] != "success")
            .collect();
        eprintln!(
            "{branch}: {} failed attempts after the rotation",
            failed.len()
        );
        assert!(failed.len() <= 1, "{branch}: {failed:#?}");
        for f in &failed {
            assert_eq!(f["class"], "auth_denied", "{branch}: {f}");
        }
        failed_total += failed.len();
    }
    // The old password stopped working, so some attempt failed and asked for the new one.
    assert!(
        failed_total >= 1,
        "no attempt failed: was the password changed?"
    );
    let transitions: Vec<&Value> = after.iter().filter(|v| v["kind"] == "transition").collect();
    assert!(transitions.is_empty(), "{transitions:#?}");

    stop_and_grep(child, &log, &evidence, &[PASSWORD, new_password]).await;
    let _ = sm
        .delete_secret()
        .secret_id(&name)
        .force_delete_without_recovery(true)
        .send()
        .await;
}

/// SIGTERM the run, see it exit 0, and find neither password in its logs or evidence, and the
/// refresh in its logs.
async fn stop_and_grep(
    mut child: tokio::process::Child,
    log: &Path,
    evidence: &Path,
    passwords: &[&str],
) {
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("run stops within its grace")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let logs = std::fs::read_to_string(log).unwrap();
    assert!(
        logs.contains("secret read again: its value changed"),
        "{logs}"
    );
    let evidence_text = std::fs::read_to_string(evidence).unwrap();
    for secret in passwords {
        assert!(
            !evidence_text.contains(*secret),
            "evidence holds a password"
        );
        assert!(!logs.contains(*secret), "logs hold a password:\n{logs}");
    }
}

/// `probe` on a config whose password is `reference`: exit 78, one line naming the key and
/// the reference, never the value.
async fn unavailable(reference: toml::Value, want: &str, value: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let text = crate::support::config::ConfigBuilder::new(
        dir.path(),
        "orders-db",
        "mysql.orders.internal.example",
    )
    .kind("mysql")
    .tls("required", None)
    .set("probe.tls", "danger_send_secrets_unverified", true)
    .set("probe.mysql", "user", "readyprobe")
    .set("probe.mysql", "password", reference)
    .branch("primary", "PRIMARY", PRIMARY, Some(3306))
    .build();
    std::fs::write(&config, text).unwrap();
    let out = readyprobe(&["probe", "--branch", "primary"], &config)
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    let stderr = unavailable_input(&out, &format!("probe.mysql.password: {want}"));
    assert!(!stderr.contains(value), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_secret_is_named_at_start_without_its_value() {
    let Some(sm) = secrets_or_skip().await else {
        return;
    };
    let value = "hidden-Value-4d1e8b";
    let json = unique("readyprobe-it/json");
    create(
        &sm,
        &json,
        &serde_json::json!({ "password": value }).to_string(),
    )
    .await;
    let plain = unique("readyprobe-it/plain");
    create(&sm, &plain, value).await;
    let deleted = unique("readyprobe-it/deleted");
    create(&sm, &deleted, value).await;
    sm.delete_secret().secret_id(&deleted).send().await.unwrap();

    unavailable(
        sm_ref(&json, Some("pass")),
        &format!("Secrets Manager secret {json} key pass has no key \"pass\""),
        value,
    )
    .await;
    unavailable(
        sm_ref(&plain, Some("password")),
        &format!(
            "Secrets Manager secret {plain} key password is not a JSON object, which json_key \"password\" needs"
        ),
        value,
    )
    .await;
    unavailable(
        sm_ref(&deleted, None),
        &format!("Secrets Manager secret {deleted} is unavailable: "),
        value,
    )
    .await;
    let missing = unique("readyprobe-it/missing");
    unavailable(
        sm_ref(&missing, None),
        &format!(
            "Secrets Manager secret {missing} is unavailable: not_found: ResourceNotFoundException"
        ),
        value,
    )
    .await;
    for id in [json, plain] {
        let _ = sm
            .delete_secret()
            .secret_id(id)
            .force_delete_without_recovery(true)
            .send()
            .await;
    }
}

/// A read that fails (the secret deleted) keeps the last value and logs its class: once the
/// database takes that value again, attempts succeed without another read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_keeps_the_last_value_and_logs_its_class() {
    let Some(sm) = secrets_or_skip().await else {
        return;
    };
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let (name, child, log) = run_ready(&sm, &p, "keep").await;
    let evidence = p.evidence();
    sm.delete_secret()
        .secret_id(&name)
        .force_delete_without_recovery(true)
        .send()
        .await
        .unwrap();
    // A denied attempt asks for a read, which finds no secret.
    p.primary
        .root_exec("ALTER USER 'readyprobe'@'%' IDENTIFIED BY 'other-Pw-5a0c'")
        .await;
    let warned = "is unavailable: not_found: ResourceNotFoundException";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap().contains(warned) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failed read logged:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    let line = logs.lines().find(|l| l.contains(warned)).unwrap();
    assert!(line.contains("the last value read is kept"), "{line}");
    // The kept value works again as soon as the database takes it.
    p.primary
        .root_exec(&format!(
            "ALTER USER 'readyprobe'@'%' IDENTIFIED BY '{PASSWORD}'"
        ))
        .await;
    let from = read_evidence(&evidence).len();
    wait_evidence(&evidence, Duration::from_secs(60), |ev| {
        attempts(&ev[from.min(ev.len())..], "primary")
            .iter()
            .any(|a| a["result"] == "success")
    })
    .await;
    let logs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logs.matches(warned).count(),
        1,
        "one read, within the minute:\n{logs}"
    );
    drop(child);
}

/// A reload that names a Secrets Manager secret reads it before it applies: the password moves
/// from a file to the secret without a failed attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reads_a_newly_named_secret() {
    let Some(sm) = secrets_or_skip().await else {
        return;
    };
    let Some(p) = Pipeline::start_or_skip().await else {
        return;
    };
    let opts = ConfigOpts {
        policy: ROTATION_POLICY,
        interval_ms: 2000,
        timeout_ms: 1500,
        ..ConfigOpts::default()
    };
    let config = p.write_config("reload.toml", &opts);
    let log = p.dir.path().join("reload.log");
    let child = readyprobe(&["run", "--grace", "3s"], &config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let evidence = p.evidence();
    wait_evidence(&evidence, Duration::from_secs(60), |ev| {
        has_transition(ev, "primary", "ready") && has_transition(ev, "secondary", "ready")
    })
    .await;
    let arn = create(&sm, &unique("readyprobe-it/reload"), PASSWORD).await;
    let text = p
        .builder(&opts)
        .set("probe.mysql", "password", sm_ref(&arn, None))
        .build();
    std::fs::write(&config, text).unwrap();
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: kill(2) with the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let reloaded = |ev: &[Value]| ev.iter().position(|v| v["kind"] == "reload");
    let ev = wait_evidence(&evidence, Duration::from_secs(60), |ev| {
        reloaded(ev).is_some_and(|at| {
            ["primary", "secondary"]
                .iter()
                .all(|b| attempts(&ev[at..], b).len() >= 3)
        })
    })
    .await;
    let at = reloaded(&ev).unwrap();
    assert_eq!(ev[at]["applied"], true, "{}", ev[at]);
    for b in ["primary", "secondary"] {
        let failed: Vec<&Value> = attempts(&ev[at..], b)
            .into_iter()
            .filter(|a| a["result"] != "success")
            .collect();
        assert!(failed.is_empty(), "{b}: {failed:#?}");
    }
    drop(child);
}

/// A loopback HTTP server answering 200 to the current bearer token and 401 to any other.
async fn token_server(token: Arc<Mutex<String>>) -> (u16, tokio::task::JoinHandle<()>) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let token = token.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let want = format!("Bearer {}", token.lock().unwrap());
                    let ok = req
                        .headers()
                        .get("authorization")
                        .is_some_and(|v| v == &want);
                    let status = if ok { 200 } else { 401 };
                    let body = Full::new(Bytes::from_static(b"{}"));
                    let resp = hyper::Response::builder().status(status).body(body);
                    async move { Ok::<_, std::convert::Infallible>(resp.unwrap()) }
                });
                let io = hyper_util::rt::TokioIo::new(s);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    (port, task)
}

/// A secret header rotates too: the 401 after the rotation asks for the secret again, and the
/// next attempt sends the new token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_header_costs_at_most_one_401() {
    let Some(sm) = secrets_or_skip().await else {
        return;
    };
    let old = "tok-Old-8c1f5e2a9d";
    let token = Arc::new(Mutex::new(old.to_string()));
    let (port, server) = token_server(token.clone()).await;
    let dns = crate::support::dns::DnsServer::start("api.internal.example").await;
    dns.set_a("primary", std::net::Ipv4Addr::LOCALHOST, 5).await;
    let name = unique("readyprobe-it/header");
    let arn = create(&sm, &name, &format!("Bearer {old}")).await;
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence.jsonl");
    let mut headers = toml::Table::new();
    headers.insert("authorization".into(), sm_ref(&arn, None));
    let text = crate::support::config::ConfigBuilder::new(
        dir.path(),
        "api",
        "stable.api.internal.example",
    )
    .nameserver(dns.addr())
    .kind("http")
    .tls("disabled", None)
    .set("probe.tls", "danger_send_secrets_unverified", true)
    .set("probe.http", "port", i64::from(port))
    .set("probe.http", "path", "/")
    .set("probe.http", "headers", toml::Value::Table(headers))
    .set("evidence", "path", evidence.display().to_string())
    .branch("primary", "PRIMARY", "primary.api.internal.example", None)
    .build();
    let config = dir.path().join("header.toml");
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("header.log");
    let child = readyprobe(&["run", "--grace", "3s"], &config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let successes = |ev: &[Value]| {
        attempts(ev, "primary")
            .iter()
            .filter(|a| a["result"] == "success")
            .count()
    };
    wait_evidence(&evidence, Duration::from_secs(60), |ev| successes(ev) >= 2).await;

    let new = "tok-New-3b7d0c6f4e";
    sm.put_secret_value()
        .secret_id(&name)
        .secret_string(format!("Bearer {new}"))
        .send()
        .await
        .unwrap();
    let from = read_evidence(&evidence).len();
    *token.lock().unwrap() = new.to_string();
    let ev = wait_evidence(&evidence, Duration::from_secs(60), |ev| {
        successes(&ev[from.min(ev.len())..]) >= 3
    })
    .await;
    let failed: Vec<&Value> = attempts(&ev[from..], "primary")
        .into_iter()
        .filter(|a| a["result"] != "success")
        .collect();
    eprintln!(
        "header: {} failed attempts after the rotation",
        failed.len()
    );
    assert!(failed.len() <= 1, "{failed:#?}");
    for f in &failed {
        assert_eq!(f["class"], "http_status", "{f}");
    }
    stop_and_grep(child, &log, &evidence, &[old, new]).await;
    server.abort();
}
