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

#[tokio::test]
async fn routes_methods_and_bodies() {
    let f = feed();
    let status = |r: Response<Full<Bytes>>| r.status().as_u16();
    let empty = || Empty::<Bytes>::new();
    let m = respond(&request(Method::GET, "/metrics?x=1", empty()), &f);
    assert_eq!(m.headers()[CONTENT_TYPE], OPENMETRICS);
    assert!(text(m).await.ends_with("# EOF\n"));
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
