//! Publishing to several targets and through an STS role, on the real binary: a role target's
//! datums arrive in the role's account (LocalStack keeps metrics per account) and keep arriving
//! across a renewal of the assumed credentials; a refused AssumeRole is `publish_credentials`
//! naming the role; a target that never answers delays no other target's `Readiness` tick.

use crate::publish_faults::{Run, config_builder, run_binary, target};
use crate::support::cloudwatch::{self as ls, cloudwatch_or_skip, unique_namespace};
use crate::support::dns::DnsServer;
use crate::support::fake_cloudwatch::{FakeCloudWatch, now_ms};
use crate::support::sts_front::{Mode, StsFront};
use serde_json::Value as Json;
use std::net::Ipv4Addr;
use std::time::Duration;

const ROLE: &str = "arn:aws:iam::111122223333:role/readyprobe-publish";
const ROLE_ACCOUNT: &str = "111122223333";

/// The environment of a run whose chain holds LocalStack's default credentials (account
/// 000000000000) and whose STS is `sts`.
fn env(sts: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL_STS", sts.into()),
    ]
}

const REMOVE: [&str; 4] = [
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

/// The `publish` records of the CloudWatch sink to `target` (`None`: the default target).
fn to_target<'a>(run: &'a Run, target: Option<&str>) -> Vec<&'a Json> {
    run.publishes("cloudwatch")
        .into_iter()
        .filter(|p| p["target"].as_str() == target)
        .collect()
}

/// A CloudWatch client of the emulator acting in `account` (LocalStack takes a 12-digit access
/// key id as the account).
async fn client_in(account: &str) -> aws_sdk_cloudwatch::Client {
    let conf = aws_sdk_cloudwatch::config::Builder::from(&ls::sdk_config().await)
        .credentials_provider(aws_sdk_cloudwatch::config::Credentials::new(
            account, "test", None, None, "it",
        ))
        .build();
    aws_sdk_cloudwatch::Client::from_conf(conf)
}

async fn heartbeat_series(client: &aws_sdk_cloudwatch::Client, ns: &str) -> usize {
    client
        .list_metrics()
        .namespace(ns)
        .metric_name("Heartbeat")
        .send()
        .await
        .map(|o| o.metrics().len())
        .unwrap_or_else(|e| panic!("ListMetrics: {e:?}"))
}

/// `[publish.cloudwatch] role_arn`: the prober assumes the role (its session named after the
/// prober, with the external id), its datums land in the role's account and not in the caller's,
/// and when the assumed credentials near their expiry (12 s here: the front shortens what
/// LocalStack's STS returns) the SDK assumes the role again and publishing goes on, no batch lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_target_publishes_into_the_roles_account_across_a_renewal() {
    let Some(_) = cloudwatch_or_skip().await else {
        return;
    };
    let upstream = ls::endpoint().trim_start_matches("http://").to_string();
    let sts = StsFront::start(Mode::Forward(Duration::from_secs(12)), &upstream).await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let ns = unique_namespace("a_role_target_publishes");
    let cfg = config_builder(dir.path(), &dns, port, &ls::endpoint())
        .top("prober_id", "az-a")
        .set("publish", "namespace", ns.as_str())
        .set("publish.cloudwatch", "role_arn", ROLE)
        .set("publish.cloudwatch", "external_id", "ext-readyprobe-1")
        .write(&dir.path().join("run.toml"));
    let env = env(&sts.url);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut renewed_at = None;
    let run = run_binary(&cfg, 30, &env, &REMOVE, |_| {
        let assumed = sts.assumed();
        if renewed_at.is_none() && assumed.len() >= 2 {
            renewed_at = Some(assumed[1].at);
        }
        // Stop 2.5 s after the renewal: two publish ticks with the new credentials.
        renewed_at.is_some_and(|t| now_ms() > t + 2_500)
    })
    .await;
    let renewed =
        renewed_at.expect("the role was not assumed again before its credentials expired");
    let assumed = sts.assumed();
    for call in &assumed {
        assert_eq!(call.field("RoleArn"), Some(ROLE));
        assert_eq!(call.field("RoleSessionName"), Some("readyprobe-az-a"));
        assert_eq!(call.field("ExternalId"), Some("ext-readyprobe-1"));
    }
    let cw = to_target(&run, None);
    assert!(!cw.is_empty(), "no cloudwatch publish records");
    for p in &cw {
        let ok = p["outcome"] == "sent" || p["outcome"] == "abandoned_at_shutdown";
        assert!(ok, "a batch was lost across the renewal: {p}");
    }
    let after: Vec<_> = cw
        .iter()
        .filter(|p| p["outcome"] == "sent" && p["at_ms"].as_i64().unwrap() > renewed)
        .collect();
    assert!(
        !after.is_empty(),
        "nothing was sent with the renewed credentials"
    );
    // The datums are the role account's, not the caller's.
    assert!(heartbeat_series(&client_in(ROLE_ACCOUNT).await, &ns).await >= 1);
    assert_eq!(
        heartbeat_series(&client_in("000000000000").await, &ns).await,
        0
    );
}

/// An AssumeRole that STS refuses (LocalStack's STS enforces no trust policy, so the front
/// answers 403 `AccessDenied` as STS does): every batch fails as `publish_credentials` with a
/// cause naming the role and STS's answer, nothing reaches CloudWatch, and the class is counted
/// on EMF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_assume_role_is_publish_credentials() {
    let sts = StsFront::start(Mode::Refuse, "127.0.0.1:9").await;
    let fake = FakeCloudWatch::start().await;
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_builder(dir.path(), &dns, port, &fake.url)
        .set("publish.cloudwatch", "role_arn", ROLE)
        .write(&dir.path().join("run.toml"));
    let env = env(&sts.url);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ev = dir.path().join("evidence.jsonl");
    let run = run_binary(&cfg, 20, &env, &REMOVE, |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        text.matches("\"class\":\"publish_credentials\"").count() >= 2
    })
    .await;
    let failed: Vec<_> = to_target(&run, None)
        .into_iter()
        .filter(|p| p["outcome"] == "failed")
        .collect();
    assert!(failed.len() >= 2, "{:?}", run.publishes("cloudwatch"));
    for p in &failed {
        assert_eq!(p["class"], "publish_credentials", "{p}");
        let e = p["error"].as_str().unwrap();
        assert!(e.contains(ROLE), "{e}");
        let sts =
            "(session readyprobe-it): STS answered AccessDenied: User: arn:aws:iam::000000000000";
        assert!(e.contains(sts), "{e}");
    }
    assert!(
        fake.seen().is_empty(),
        "a request reached CloudWatch without the role"
    );
    assert!(sts.calls().iter().all(|c| c.status == 403));
    let counted = run
        .emf
        .iter()
        .any(|l| l["PublishFailures"].is_number() && l["Class"] == "publish_credentials");
    assert!(counted, "no PublishFailures for publish_credentials on EMF");
}

/// Two targets of one service, one of them an endpoint that accepts connections and never
/// answers: every tick batch that timed out at the silent target was sent to the other, and
/// the other's `Readiness` datums arrive for every one of those ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_target_never_delays_another() {
    let fake = FakeCloudWatch::start().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s); // accepted, never read, never answered
        }
    });
    let (port, _t) = target().await;
    let dns = DnsServer::start("orders.internal.example").await;
    dns.set_a("gw-primary", Ipv4Addr::LOCALHOST, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = format!(
        "[service]\npublish = [{{ name = \"silent\", endpoint_url = \"{silent_url}\" }}, {{ name = \"live\", endpoint_url = \"{}\" }}]\n",
        fake.url
    );
    // Readiness 1 from the start: a `Readiness` datum at every tick.
    let cfg = config_builder(dir.path(), &dns, port, &fake.url)
        .set("readiness", "initial", "ready")
        .merge(&targets)
        .write(&dir.path().join("run.toml"));
    let env = env("http://127.0.0.1:9");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ev = dir.path().join("evidence.jsonl");
    let run = run_binary(&cfg, 20, &env, &REMOVE, |_| {
        let text = std::fs::read_to_string(&ev).unwrap_or_default();
        text.matches("\"class\":\"publish_timeout\"").count() >= 4
    })
    .await;
    let (live, dead) = (
        to_target(&run, Some("live")),
        to_target(&run, Some("silent")),
    );
    let timed_out: Vec<u64> = dead
        .iter()
        .filter(|p| p["reason"] == "tick" && p["class"] == "publish_timeout")
        .map(|p| p["batch"].as_u64().unwrap())
        .collect();
    assert!(timed_out.len() >= 4, "{dead:?}");
    let seen = fake.seen();
    for b in &timed_out {
        let p = live
            .iter()
            .find(|p| p["batch"].as_u64() == Some(*b))
            .unwrap_or_else(|| panic!("batch {b} never reached the live target: {live:?}"));
        assert_eq!(p["outcome"], "sent", "{p}");
    }
    // Each of those ticks' `Readiness` datum (its timestamp on EMF) reached the live target.
    let tick_times: Vec<i64> = run
        .emf
        .iter()
        .filter(|l| l["Readiness"].is_number())
        .filter_map(|l| l["_aws"]["Timestamp"].as_i64())
        .collect();
    let live_times: Vec<i64> = seen
        .iter()
        .filter(|s| s.accepted())
        .flat_map(|s| s.datums.iter())
        .filter(|d| d.metric == "Readiness" && d.dim("Branch") == Some("primary"))
        .map(|d| d.timestamp)
        .collect();
    let missing = tick_times
        .iter()
        .filter(|t| !live_times.contains(t))
        .count();
    // The last tick may be cut by the stop; every earlier one arrived.
    assert!(missing <= 1, "{missing} ticks missing at the live target");
    assert!(live_times.len() >= timed_out.len());
    // The default target is not used: the service names its own.
    assert!(to_target(&run, None).is_empty());
    assert!(!seen.is_empty());
}
