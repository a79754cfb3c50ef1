use super::*;
use http_body_util::{BodyExt, Empty};

fn feed() -> Feed {
    Feed::new("az-a", Duration::from_secs(10), Clock::start())
}

fn request<B>(method: Method, path: &str, body: B) -> Request<B> {
    let mut r = Request::new(body);
    *r.method_mut() = method;
    *r.uri_mut() = path.parse().unwrap();
    r
}

async fn text(r: Response<Full<Bytes>>) -> String {
    let body = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn healthz_turns_503_when_the_loop_has_not_ticked_for_three_intervals() {
    let f = feed();
    let get = |f: &Feed| respond(&request(Method::GET, "/healthz", Empty::<Bytes>::new()), f);
    tokio::time::advance(Duration::from_secs(25)).await;
    f.ticked(f.clock.now_ms());
    tokio::time::advance(Duration::from_secs(30)).await;
    let r = get(&f);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(text(r).await, "ok: the run loop ticked 30s ago\n");
    tokio::time::advance(Duration::from_millis(1)).await;
    let r = get(&f);
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        text(r).await,
        "unhealthy: the run loop last ticked 30s 1ms ago, more than 30s (3 publish intervals)\n"
    );
}

#[tokio::test]
async fn status_holds_each_running_service_as_of_its_last_sync() {
    let f = feed();
    let get = |f: &Feed| respond(&request(Method::GET, "/status", Empty::<Bytes>::new()), f);
    let v: serde_json::Value = serde_json::from_str(&text(get(&f)).await).unwrap();
    assert_eq!(v, serde_json::json!({"prober": "az-a", "services": {}}));
    f.synced(0, &ControlDoc::new("orders"));
    f.synced(1, &ControlDoc::new("billing"));
    let r = get(&f);
    assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
    let v: serde_json::Value = serde_json::from_str(&text(r).await).unwrap();
    let orders = &v["services"]["orders"];
    assert_eq!(orders["service"], "orders", "{v}");
    assert!(orders["freshness"]["read_at"].is_i64(), "{v}");
    assert_eq!(v["services"]["billing"]["service"], "billing", "{v}");
    f.forget(0);
    let v: serde_json::Value = serde_json::from_str(&text(get(&f)).await).unwrap();
    let names: Vec<&String> = v["services"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["billing"]);
}

/// `read_at` is when the sync read the document, not the scrape's time; the probers' ages are
/// as of the scrape.
#[tokio::test(start_paused = true)]
async fn status_read_at_is_the_sync_time_and_ages_run_on() {
    let f = feed();
    let get = |f: &Feed| respond(&request(Method::GET, "/status", Empty::<Bytes>::new()), f);
    let mut doc = ControlDoc::new("orders");
    let synced_at = f.clock.now_ms();
    let saved = crate::control::ProberState {
        saved_at: synced_at,
        branches: Default::default(),
    };
    doc.probers.insert("az-a".into(), saved);
    f.synced(0, &doc);
    tokio::time::advance(Duration::from_secs(30)).await;
    let v: serde_json::Value = serde_json::from_str(&text(get(&f)).await).unwrap();
    let fresh = &v["services"]["orders"]["freshness"];
    assert_eq!(fresh["read_at"], synced_at, "{v}");
    assert_eq!(fresh["probers"]["az-a"]["age_ms"], 30_000, "{v}");
}

#[tokio::test]
async fn routes_methods_and_bodies() {
    let f = feed();
    let status = |r: Response<Full<Bytes>>| r.status().as_u16();
    let empty = || Empty::<Bytes>::new();
    let m = respond(&request(Method::GET, "/metrics?x=1", empty()), &f);
    assert_eq!(m.headers()[CONTENT_TYPE], PROMETHEUS_TEXT);
    assert_eq!(m.headers()[VARY], "accept");
    let mut om = request(Method::GET, "/metrics", empty());
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    om.headers_mut()
        .insert(ACCEPT, HeaderValue::from_static(prometheus));
    let om = respond(&om, &f);
    assert_eq!(om.headers()[CONTENT_TYPE], OPENMETRICS);
    assert!(text(om).await.ends_with("# EOF\n"));
    assert_eq!(
        status(respond(&request(Method::HEAD, "/metrics", empty()), &f)),
        200
    );
    assert_eq!(
        status(respond(&request(Method::GET, "/metrics/", empty()), &f)),
        404
    );
    let post = respond(&request(Method::POST, "/metrics", empty()), &f);
    assert_eq!(post.headers()[ALLOW], "GET, HEAD");
    assert_eq!(status(post), 405);
    // A body is refused before the method or the path is looked at.
    let body = || Full::new(Bytes::from_static(b"x"));
    for (method, path) in [(Method::GET, "/metrics"), (Method::PUT, "/nowhere")] {
        let r = respond(&request(method, path, body()), &f);
        assert_eq!(r.headers()[CONNECTION], "close");
        assert_eq!(status(r), 413);
    }
}

#[tokio::test]
async fn metrics_follows_accept_across_several_fields() {
    let f = feed();
    let mut r = request(Method::GET, "/metrics", Empty::<Bytes>::new());
    for v in ["text/plain;q=0.5", "application/openmetrics-text"] {
        r.headers_mut().append(ACCEPT, HeaderValue::from_static(v));
    }
    assert_eq!(respond(&r, &f).headers()[CONTENT_TYPE], OPENMETRICS);
    // A field that is not text is passed over, not a reason to fail the scrape.
    let mut r = request(Method::GET, "/metrics", Empty::<Bytes>::new());
    let bytes = HeaderValue::from_bytes(b"application/openmetrics-text\xff").unwrap();
    r.headers_mut().append(ACCEPT, bytes);
    let m = respond(&r, &f);
    assert_eq!(m.status(), StatusCode::OK);
    assert_eq!(m.headers()[CONTENT_TYPE], PROMETHEUS_TEXT);
}

#[test]
fn accept_names_openmetrics_with_a_q_above_zero_and_not_below_text_plain() {
    let cases = [
        // Prometheus 2.x, with and without its OpenMetrics scrape protocol.
        (
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            true,
        ),
        ("text/plain;version=0.0.4;q=1,*/*;q=0.1", false),
        ("application/openmetrics-text", true),
        ("Application/OpenMetrics-Text; Version=1.0.0", true),
        (
            " application/openmetrics-text ; q = 0.2 , text/plain ; q=0.1",
            true,
        ),
        // curl, a browser, no Accept at all.
        ("*/*", false),
        (
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            false,
        ),
        ("", false),
        // An explicit q=0 means "not this"; a bad q counts as 0.
        ("application/openmetrics-text;q=0", false),
        ("application/openmetrics-text;q=0.000,text/plain", false),
        ("application/openmetrics-text;q=high", false),
        ("application/openmetrics-text;q=NaN", false),
        (
            "application/openmetrics-text;q=0,application/openmetrics-text;q=0.3",
            true,
        ),
        // A client preferring the Prometheus text gets it; a tie goes to OpenMetrics.
        ("text/plain;q=0.9,application/openmetrics-text;q=0.5", false),
        ("text/plain,application/openmetrics-text", true),
        ("application/openmetrics-textual", false),
        (";;,,;q=1", false),
    ];
    for (accept, want) in cases {
        assert_eq!(wants_openmetrics(accept), want, "{accept:?}");
    }
}

/// A publish of branch `primary`'s readiness `v`, as a tick or a transition hands it over.
fn readiness(v: f64) -> crate::fold::Effect {
    let datum = crate::datum::Datum {
        metric: crate::contract::READINESS.name,
        dimensions: vec![
            (crate::contract::SERVICE, "orders".into()),
            (crate::contract::BRANCH, "primary".into()),
        ],
        value: crate::datum::Value::Single(v),
        unit: crate::contract::READINESS.unit,
        timestamp: 1_764_936_000_000,
        since: None,
    };
    crate::fold::Effect::Publish(crate::fold::Batch {
        id: 1,
        datums: vec![datum],
        reason: crate::record::PublishReason::Tick,
        sinks: vec![crate::datum::SinkId::of("cloudwatch")],
        namespace: "Readyprobe".into(),
    })
}

/// The body of a `/metrics` answer as the one buffer it is (no copy).
async fn body_of(r: Response<Full<Bytes>>) -> Bytes {
    let mut body = r.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    frame.into_data().unwrap()
}

/// Concurrent scrapes share one encoding (a flood of slow readers of a large fleet's /metrics
/// held one copy each: 64 readers of 3.7 MB took 200 MB), until `REUSE_FOR` passes or a
/// readiness gauge moves; at most `MAX_ENCODINGS` distinct ones are alive at once, and a scrape
/// beyond them gets 503 until one is done.
#[tokio::test(start_paused = true)]
async fn scrapes_share_an_encoding_and_bound_the_distinct_ones_alive() {
    let f = feed();
    let get = |f: &Feed| respond(&request(Method::GET, "/metrics", Empty::<Bytes>::new()), f);
    f.exposition.observe(&readiness(1.0), 0);
    let a = body_of(get(&f)).await;
    let b = body_of(get(&f)).await;
    assert_eq!(
        a.as_ptr(),
        b.as_ptr(),
        "two scrapes in a row share the text"
    );
    assert!(String::from_utf8_lossy(&a).contains("branch=\"primary\"} 1"));
    // The same readiness published again (each tick does) moves nothing.
    f.exposition.observe(&readiness(1.0), 0);
    let b = body_of(get(&f)).await;
    assert_eq!(
        a.as_ptr(),
        b.as_ptr(),
        "a tick that moved no gauge keeps the text"
    );
    // A readiness change is in the very next scrape, however recent the last encoding.
    f.exposition.observe(&readiness(0.0), 0);
    let c = body_of(get(&f)).await;
    assert_ne!(a.as_ptr(), c.as_ptr());
    assert!(String::from_utf8_lossy(&c).contains("branch=\"primary\"} 0"));
    // Distinct encodings alive (each kept by a slow reader): a bounded number.
    let mut alive = vec![a, b, c];
    let mut refused = None;
    for _ in 0..64 {
        tokio::time::advance(REUSE_FOR).await;
        let r = get(&f);
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            refused = Some(r);
            break;
        }
        alive.push(body_of(r).await);
    }
    let refused = refused.expect("no scrape was refused with 64 distinct encodings alive");
    assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
    let mut distinct: Vec<*const u8> = alive.iter().map(|b| b.as_ptr()).collect();
    distinct.dedup();
    assert_eq!(distinct.len(), MAX_ENCODINGS, "{distinct:?}");
    // /status draws on the same bound.
    let status = |f: &Feed| respond(&request(Method::GET, "/status", Empty::<Bytes>::new()), f);
    assert_eq!(status(&f).status(), StatusCode::SERVICE_UNAVAILABLE);
    // Once the readers are done, scrapes are answered again.
    drop(alive);
    assert_eq!(get(&f).status(), StatusCode::OK);
    let s1 = body_of(status(&f)).await;
    let s2 = body_of(status(&f)).await;
    assert_eq!(s1.as_ptr(), s2.as_ptr(), "/status shares its text too");
    f.synced(0, &ControlDoc::new("orders"));
    let s3 = body_of(status(&f)).await;
    assert!(
        String::from_utf8_lossy(&s3).contains("\"orders\""),
        "a sync is in the next one"
    );
}
