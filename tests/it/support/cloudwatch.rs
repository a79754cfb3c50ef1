//! CloudWatch emulator access for integration tests (LocalStack by default): endpoint, health
//! check, SDK client, GetMetricData reads and per-test namespaces.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
use aws_sdk_cloudwatch::{
    Client,
    config::Credentials,
    types::{Dimension, Metric, MetricDataQuery, MetricStat, ScanBy},
};
use aws_smithy_types::DateTime;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// Environment variable naming the emulator endpoint.
pub const ENDPOINT_ENV: &str = "READYPROBE_TEST_CLOUDWATCH_ENDPOINT";
/// LocalStack's default edge endpoint.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4566";
/// Region the test client uses.
pub const REGION: &str = "us-east-1";

/// The emulator endpoint: `$READYPROBE_TEST_CLOUDWATCH_ENDPOINT`, else LocalStack's default.
pub fn endpoint() -> String {
    std::env::var(ENDPOINT_ENV)
        .ok()
        .map(|s| s.trim().trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

/// Checks that the emulator answers HTTP at [`endpoint`]: `GET /_localstack/health` over a plain
/// HTTP/1.0 request with a 3 s budget. A LocalStack that reports its `cloudwatch` service as
/// `disabled` or `error` counts as unhealthy; a non-LocalStack emulator answering 404 counts as
/// reachable. Returns a short description on success.
pub async fn health() -> Result<String, String> {
    let endpoint = endpoint();
    let authority = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("health check supports http:// endpoints only, got {endpoint}"))?;
    let authority = authority.split('/').next().unwrap_or(authority);
    let request = async {
        let mut stream = TcpStream::connect(authority).await?;
        stream
            .write_all(
                format!(
                    "GET /_localstack/health HTTP/1.0\r\nHost: {authority}\r\n\
                     Accept: application/json\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(3), request)
        .await
        .map_err(|_| format!("no answer from {endpoint} within 3 s"))?
        .map_err(|e| format!("{endpoint}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{endpoint} did not answer HTTP: {head:?}"))?;
    match status {
        200 => {
            let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            match json
                .pointer("/services/cloudwatch")
                .and_then(|v| v.as_str())
            {
                Some(state @ ("disabled" | "error")) => Err(format!(
                    "LocalStack at {endpoint} reports cloudwatch {state}"
                )),
                Some(state) => Ok(format!("LocalStack at {endpoint}, cloudwatch {state}")),
                None => Ok(format!("{endpoint} healthy (no per-service status)")),
            }
        }
        404 => Ok(format!("{endpoint} answers HTTP (not LocalStack)")),
        other => Err(format!("{endpoint} health check answered HTTP {other}")),
    }
}

/// A CloudWatch client for the emulator: region us-east-1, static credentials `test`/`test`,
/// endpoint [`endpoint`], 3 s connect / 10 s attempt / 30 s operation timeouts, 3 attempts.
pub async fn cloudwatch_client() -> Client {
    Client::new(&sdk_config().await)
}

/// The SDK configuration of [`cloudwatch_client`], for the emulator's other services.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "readyprobe-it",
        ))
        .endpoint_url(endpoint())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(10))
                .operation_timeout(Duration::from_secs(30))
                .build(),
        )
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await
}

/// A client when the emulator is healthy; otherwise under `CI=true` panics, else prints a loud
/// `SKIPPED:` line and returns `None` (the test should return early).
pub async fn cloudwatch_or_skip() -> Option<Client> {
    match health().await {
        Ok(_) => Some(cloudwatch_client().await),
        Err(why) => {
            super::skip_or_panic(&format!(
                "CloudWatch emulator unavailable ({why}); start it with `.ci/localstack.sh start` \
                 or set {ENDPOINT_ENV}"
            ));
            None
        }
    }
}

/// A namespace no other test (or earlier run) uses: `readyprobe-it/<test>/<pid>-<nanos>-<n>`,
/// with characters CloudWatch does not allow replaced by `_`.
pub fn unique_namespace(test_name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let test: String = test_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | '#') {
                c
            } else {
                '_'
            }
        })
        .take(150)
        .collect();
    format!("readyprobe-it/{test}/{}-{nanos}-{n}", std::process::id())
}

/// One metric's statistic over a time window, read with GetMetricData.
#[derive(Clone, Debug)]
pub struct MetricQuery {
    pub namespace: String,
    pub metric: String,
    pub dims: Vec<(String, String)>,
    pub start: SystemTime,
    pub end: SystemTime,
    /// Seconds (60 unless changed).
    pub period: i32,
    /// `Sum`, `Average`, `Maximum`, `Minimum`, `SampleCount`, `p99`, ...
    pub stat: String,
}

impl MetricQuery {
    /// `Sum` per 60 s of `metric` with no dimensions, from 15 minutes ago to 5 minutes ahead.
    pub fn new(namespace: &str, metric: &str) -> MetricQuery {
        let now = SystemTime::now();
        MetricQuery {
            namespace: namespace.to_string(),
            metric: metric.to_string(),
            dims: Vec::new(),
            start: now - Duration::from_secs(15 * 60),
            end: now + Duration::from_secs(5 * 60),
            period: 60,
            stat: "Sum".to_string(),
        }
    }

    /// Sets the dimensions (name, value); the metric must carry exactly these.
    pub fn dims(mut self, dims: &[(&str, &str)]) -> MetricQuery {
        self.dims = dims
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// Sets the time window.
    pub fn window(mut self, start: SystemTime, end: SystemTime) -> MetricQuery {
        self.start = start;
        self.end = end;
        self
    }

    /// Sets the period in seconds.
    pub fn period(mut self, period: i32) -> MetricQuery {
        self.period = period;
        self
    }

    /// Sets the statistic.
    pub fn stat(mut self, stat: &str) -> MetricQuery {
        self.stat = stat.to_string();
        self
    }

    /// Runs GetMetricData (all pages); values in ascending timestamp order. Panics on API errors.
    ///
    /// The window is widened to period boundaries (start floored, end ceiled, relative to the
    /// Unix epoch), as CloudWatch itself does for recent data; LocalStack does not, and would
    /// otherwise put its buckets at `start + k * period`, so the same data would get different
    /// timestamps for different windows.
    pub async fn fetch(&self, client: &Client) -> Vec<(SystemTime, f64)> {
        let period = u64::try_from(self.period.max(1)).unwrap_or(60);
        let start = align(self.start, period, false);
        let end = align(self.end, period, true);
        let metric = Metric::builder()
            .namespace(&self.namespace)
            .metric_name(&self.metric)
            .set_dimensions(Some(
                self.dims
                    .iter()
                    .map(|(k, v)| Dimension::builder().name(k).value(v).build())
                    .collect(),
            ))
            .build();
        let query = MetricDataQuery::builder()
            .id("q")
            .metric_stat(
                MetricStat::builder()
                    .metric(metric)
                    .period(self.period)
                    .stat(&self.stat)
                    .build(),
            )
            .return_data(true)
            .build();
        let mut out = Vec::new();
        let mut next_token: Option<String> = None;
        loop {
            let response = client
                .get_metric_data()
                .metric_data_queries(query.clone())
                .start_time(DateTime::from(start))
                .end_time(DateTime::from(end))
                .scan_by(ScanBy::TimestampAscending)
                .set_next_token(next_token.take())
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "GetMetricData {self:?} failed: {}",
                        aws_sdk_cloudwatch::error::DisplayErrorContext(&e)
                    )
                });
            for result in response.metric_data_results() {
                for (ts, value) in result.timestamps().iter().zip(result.values()) {
                    let ts = SystemTime::try_from(*ts)
                        .unwrap_or_else(|e| panic!("timestamp {ts:?} out of range: {e}"));
                    out.push((ts, *value));
                }
            }
            match response.next_token() {
                Some(token) if !token.is_empty() => next_token = Some(token.to_string()),
                _ => break,
            }
        }
        out.sort_by_key(|(ts, _)| *ts);
        out
    }

    /// Fetches every 500 ms until `done(values)` holds or `timeout` passes; returns the last
    /// values either way (the caller asserts on them).
    pub async fn poll(
        &self,
        client: &Client,
        timeout: Duration,
        mut done: impl FnMut(&[(SystemTime, f64)]) -> bool,
    ) -> Vec<(SystemTime, f64)> {
        let deadline = Instant::now() + timeout;
        loop {
            let values = self.fetch(client).await;
            if done(&values) || Instant::now() >= deadline {
                return values;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// `t` rounded down (or up) to a multiple of `step` seconds since the Unix epoch.
fn align(t: SystemTime, step: u64, up: bool) -> SystemTime {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut secs = since.as_secs() / step * step;
    if up && (secs < since.as_secs() || since.subsec_nanos() > 0) {
        secs += step;
    }
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// GetMetricData for one metric and statistic: `(timestamp, value)` in ascending time order.
/// Shorthand for [`MetricQuery`]`::fetch`.
#[allow(clippy::too_many_arguments)] // mirrors the API's own parameters one to one
pub async fn get_metric_values(
    client: &Client,
    namespace: &str,
    metric: &str,
    dims: &[(&str, &str)],
    start: SystemTime,
    end: SystemTime,
    period: i32,
    stat: &str,
) -> Vec<(SystemTime, f64)> {
    MetricQuery::new(namespace, metric)
        .dims(dims)
        .window(start, end)
        .period(period)
        .stat(stat)
        .fetch(client)
        .await
}

/// The alarms a test puts, deleted when it ends, passed or failed (on drop). The emulator keeps
/// evaluating every alarm it holds, each once per period, for as long as it runs (and
/// `infra/local/test.sh` leaves it running for the next run): alarms left behind pile up run
/// after run and slow every later alarm evaluation and request.
pub struct PutAlarms {
    client: Client,
    names: std::sync::Mutex<Vec<String>>,
}

impl PutAlarms {
    /// Alarms put through `client` (its account and region).
    pub fn new(client: &Client) -> PutAlarms {
        PutAlarms {
            client: client.clone(),
            names: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Deletes `name` too when this drops.
    pub fn add(&self, name: &str) {
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name.to_string());
    }
}

impl Drop for PutAlarms {
    fn drop(&mut self) {
        let names = std::mem::take(
            self.names
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if names.is_empty() {
            return;
        }
        let client = self.client.clone();
        // Drop cannot await: the deletion runs on a runtime of its own, on a thread of its own
        // (this one may be inside the test's runtime), bounded, and its outcome ignored.
        let deleting = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                for chunk in names.chunks(100) {
                    let delete = client
                        .delete_alarms()
                        .set_alarm_names(Some(chunk.to_vec()))
                        .send();
                    let _ = tokio::time::timeout(Duration::from_secs(10), delete).await;
                }
            });
        });
        let _ = deleting.join();
    }
}
