//! A config read from its [`ConfigSource`]: a local file, or an S3 object through a client
//! built in [`crate::aws`] (region and endpoint from the default chain), either capped at
//! [`config::MAX_CONFIG_BYTES`]; each read with the [`Identity`] of what it read (an S3
//! object's ETag, a file's content digest). [`Watch`] decides, purely, whether a poll found a
//! change; `runner` applies one as a SIGHUP's reload.

use crate::config::{self, Config, ConfigError, ConfigSource};
use std::time::Duration;

/// How often an S3 config is read again when `[reload] poll` is not set. A local file is
/// polled only when it is set (SIGHUP reloads it).
pub const DEFAULT_S3_POLL: Duration = Duration::from_secs(30);

/// Bound of one S3 read, the body included.
pub const S3_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What a read saw: an S3 object's ETag, or the SHA-256 of a file's (or an object without an
/// ETag's) content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The object's ETag, as S3 sent it.
    ETag(String),
    /// SHA-256 of the text, hex.
    Content(String),
}

impl Identity {
    /// The identity of `text` by content.
    pub fn of_text(text: &str) -> Identity {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
        Identity::Content(d.as_ref().iter().map(|b| format!("{b:02x}")).collect())
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::ETag(e) => write!(f, "etag {e}"),
            Identity::Content(h) => write!(f, "sha256 {}", &h[..h.len().min(12)]),
        }
    }
}

/// A config's text as read, and its identity.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The text.
    pub text: String,
    /// What identifies it.
    pub identity: Identity,
}

/// Why a source could not be read: a class (for logs and counting) and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({class})")]
pub struct ReadError {
    /// `not_found`, `too_large`, `unreachable`, `timeout`, `io`, `other`, or an
    /// [`crate::aws::CodeKind`] name (`access_denied`, `throttled`, ...).
    pub class: &'static str,
    /// What happened.
    pub reason: String,
}

/// Reads one source; an S3 one through one client, built once.
#[derive(Debug, Clone)]
pub struct Reader {
    source: ConfigSource,
    s3: Option<aws_sdk_s3::Client>,
}

impl Reader {
    /// A reader of `source` (for S3: the default chain loaded once).
    pub async fn new(source: ConfigSource) -> Reader {
        let s3 = match &source {
            ConfigSource::File(_) => None,
            ConfigSource::S3 { .. } => {
                let target = crate::aws::AwsTarget {
                    region: None,
                    endpoint_url: None,
                    timeouts: crate::aws::Timeouts::per_call(S3_READ_TIMEOUT),
                    retries: crate::aws::Retries::SdkDefault,
                    // A little over the config cap, so an oversized object is refused with the
                    // config's own message; the limit stops an endless error body.
                    max_response_bytes: config::MAX_CONFIG_BYTES as usize + 64 * 1024,
                    role: None,
                };
                Some(aws_sdk_s3::Client::from_conf(
                    target.session().await.s3().build(),
                ))
            }
        };
        Reader { source, s3 }
    }

    /// The source it reads.
    pub fn source(&self) -> &ConfigSource {
        &self.source
    }

    /// Read the source. With `unless` an S3 read asks for the object only if its ETag differs
    /// (`Ok(None)`: unchanged); a file is read whole each time.
    ///
    /// # Errors
    /// [`ReadError`] when the source cannot be read or is over the cap.
    pub async fn read(&self, unless: Option<&Identity>) -> Result<Option<Fetched>, ReadError> {
        match (&self.source, &self.s3) {
            (ConfigSource::S3 { .. }, Some(client)) if client.config().region().is_none() => {
                // The SDK's own words ("A region must be set...") name no setting to fix.
                Err(ReadError {
                    class: "other",
                    reason: "GetObject: no AWS region: set AWS_REGION (or the profile's region)"
                        .into(),
                })
            }
            (ConfigSource::S3 { bucket, key }, Some(client)) => {
                let etag = match unless {
                    Some(Identity::ETag(e)) => Some(e.as_str()),
                    _ => None,
                };
                let read = read_s3(client, bucket, key, etag);
                match tokio::time::timeout(S3_READ_TIMEOUT, read).await {
                    Ok(r) => r,
                    Err(_) => Err(ReadError {
                        class: "timeout",
                        reason: format!(
                            "GetObject: no whole answer within {}",
                            crate::clock::fmt_duration(S3_READ_TIMEOUT)
                        ),
                    }),
                }
            }
            (source, _) => {
                let name = source.name();
                let text = tokio::task::spawn_blocking(move || config::read_file(&name))
                    .await
                    .map_err(|e| ReadError {
                        class: "other",
                        reason: format!("reading failed inside readyprobe: {e}"),
                    })?
                    .map_err(|e| file_error(&e))?;
                let identity = Identity::of_text(&text);
                Ok(Some(Fetched { text, identity }))
            }
        }
    }

    /// Read and validate the config, as at start-up: the config and the identity of what was
    /// read.
    ///
    /// # Errors
    /// [`ConfigError`] naming the source: unreadable (one `(file)` problem) or invalid.
    pub async fn load(&self) -> Result<(Config, Identity), ConfigError> {
        let name = self.source.name();
        let fetched = match self.read(None).await {
            Ok(Some(f)) => f,
            Ok(None) => {
                let why = "the source answered an unconditional read with no text";
                return Err(ConfigError::file(&name, why.into()));
            }
            Err(e) => return Err(ConfigError::file(&name, e.to_string())),
        };
        let identity = fetched.identity;
        let text = fetched.text;
        let parsed = tokio::task::spawn_blocking(move || config::parse(&name, &text)).await;
        match parsed {
            Ok(r) => r.map(|c| (c, identity)),
            Err(e) => Err(ConfigError::file(
                &self.source.name(),
                format!("validating failed inside readyprobe: {e}"),
            )),
        }
    }
}

/// A file's read error as a [`ReadError`].
fn file_error(e: &ConfigError) -> ReadError {
    let message = e.issues.first().map(|i| i.message.clone());
    let message = message.unwrap_or_else(|| e.to_string());
    let class = if message == config::TOO_LARGE {
        "too_large"
    } else if message.contains("No such file") {
        "not_found"
    } else {
        "io"
    };
    ReadError {
        class,
        reason: message,
    }
}

/// One GetObject, conditional on `etag` when given (HTTP 304: `Ok(None)`), its body capped.
async fn read_s3(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    etag: Option<&str>,
) -> Result<Option<Fetched>, ReadError> {
    let mut get = client.get_object().bucket(bucket).key(key);
    if let Some(e) = etag {
        get = get.if_none_match(e);
    }
    let mut o = match get.send().await {
        Ok(o) => o,
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 304) => {
            return Ok(None);
        }
        Err(e) => return Err(s3_error(&e)),
    };
    let too_large = || ReadError {
        class: "too_large",
        reason: config::TOO_LARGE.to_string(),
    };
    let cap = config::MAX_CONFIG_BYTES;
    if o.content_length().unwrap_or(0).max(0) as u64 > cap {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = o.body.try_next().await.map_err(|e| ReadError {
        class: "io",
        reason: format!("reading the object's body: {e}"),
    })? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > cap {
            return Err(too_large());
        }
    }
    let text = String::from_utf8(bytes).map_err(|e| ReadError {
        class: "other",
        reason: format!("not UTF-8 text: {e}"),
    })?;
    let identity = match o.e_tag() {
        Some(e) => Identity::ETag(e.to_string()),
        None => Identity::of_text(&text),
    };
    Ok(Some(Fetched { text, identity }))
}

/// A failed GetObject, classed: the service's code through [`crate::aws::kind_of`] (missing
/// object or bucket: `not_found`), else the transport's failure.
fn s3_error<R: std::fmt::Debug>(
    e: &aws_sdk_s3::error::SdkError<aws_sdk_s3::operation::get_object::GetObjectError, R>,
) -> ReadError {
    use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
    match e {
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("error");
            let class = class_of_code(code);
            let message = s.err().message().unwrap_or("(no message)");
            ReadError {
                class,
                reason: format!("GetObject: {code}: {message}"),
            }
        }
        SdkError::TimeoutError(_) => ReadError {
            class: "timeout",
            reason: "GetObject: timed out".into(),
        },
        other => {
            let mut reason = format!("GetObject: {other}");
            let mut src = std::error::Error::source(other);
            while let Some(x) = src {
                reason = format!("{reason}: {x}");
                src = x.source();
            }
            let class = match other {
                SdkError::DispatchFailure(d) if d.is_io() => "unreachable",
                SdkError::DispatchFailure(d) if d.is_timeout() => "timeout",
                // No region, no credentials: the process's setup, not the endpoint.
                _ => "other",
            };
            ReadError { class, reason }
        }
    }
}

/// The class of an S3 error code: a missing object or bucket is `not_found`, the rest as
/// [`crate::aws::kind_of`] names them, else `other`.
fn class_of_code(code: &str) -> &'static str {
    match code {
        "NoSuchKey" | "NoSuchBucket" => "not_found",
        c => crate::aws::kind_of(c).map_or("other", Into::into),
    }
}

/// How often `source` is polled for a change under `[reload] poll` = `poll`: as set; else
/// every [`DEFAULT_S3_POLL`] for S3 and never for a file.
pub fn poll_every(source: &ConfigSource, poll: Option<Duration>) -> Option<Duration> {
    match (source, poll) {
        (_, Some(p)) => Some(p),
        (ConfigSource::S3 { .. }, None) => Some(DEFAULT_S3_POLL),
        (ConfigSource::File(_), None) => None,
    }
}

/// The identity of the config last taken (at start, a SIGHUP or a poll), and the class of
/// the failure the source is reading with, if any. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    last: Identity,
    failing: Option<&'static str>,
}

/// What a poll's read means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The source holds what was last taken: nothing to do.
    Same,
    /// The source changed: validate it and reload as at a SIGHUP.
    Changed,
    /// The read failed, the first time in a row or for another class of reason: log it, keep the config running, retry at the
    /// next poll.
    FirstFailure,
    /// The read failed again, for the same class of reason.
    StillFailing,
}

impl Watch {
    /// Watching from the config taken at start, read as `identity`.
    pub fn new(identity: Identity) -> Watch {
        Watch {
            last: identity,
            failing: None,
        }
    }

    /// The identity of the config last taken (an S3 read asks only for another one).
    pub fn last(&self) -> &Identity {
        &self.last
    }

    /// Whether the last read failed.
    pub fn failing(&self) -> bool {
        self.failing.is_some()
    }

    /// A poll's read: `Ok(None)` when S3 said unchanged, `Ok(Some(identity))` what was read,
    /// `Err` a failure's [`ReadError::class`]. A change is taken (valid or not, it is not reloaded again), so an
    /// invalid edit is refused once and the next edit reloads.
    pub fn observe(&mut self, read: Result<Option<&Identity>, &'static str>) -> Verdict {
        let before = self.failing;
        self.failing = read.err();
        match read {
            Err(class) if before == Some(class) => Verdict::StillFailing,
            Err(_) => Verdict::FirstFailure,
            Ok(None) => Verdict::Same,
            Ok(Some(i)) if *i == self.last => Verdict::Same,
            Ok(Some(i)) => {
                self.last = i.clone();
                Verdict::Changed
            }
        }
    }

    /// A read outside polling (a SIGHUP's), taken whatever it holds.
    pub fn took(&mut self, identity: Identity) {
        self.last = identity;
        self.failing = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etag(s: &str) -> Identity {
        Identity::ETag(s.into())
    }

    #[test]
    fn a_poll_reloads_only_what_differs_from_the_config_last_taken() {
        let mut w = Watch::new(etag("\"a\""));
        assert_eq!(w.observe(Ok(None)), Verdict::Same);
        // A server that ignores If-None-Match sends the same object again: no reload.
        assert_eq!(w.observe(Ok(Some(&etag("\"a\"")))), Verdict::Same);
        assert_eq!(w.observe(Ok(Some(&etag("\"b\"")))), Verdict::Changed);
        assert_eq!(w.last(), &etag("\"b\""));
        // Taken once (an invalid edit is refused once, not at every poll).
        assert_eq!(w.observe(Ok(Some(&etag("\"b\"")))), Verdict::Same);
    }

    #[test]
    fn a_failing_source_is_reported_once_then_a_change_after_it_reloads() {
        let mut w = Watch::new(etag("\"a\""));
        assert_eq!(w.observe(Err("not_found")), Verdict::FirstFailure);
        assert!(w.failing());
        assert_eq!(w.observe(Err("not_found")), Verdict::StillFailing);
        // Back with what ran before: nothing to reload.
        assert_eq!(w.observe(Ok(Some(&etag("\"a\"")))), Verdict::Same);
        assert!(!w.failing());
        assert_eq!(w.observe(Err("not_found")), Verdict::FirstFailure);
        assert_eq!(w.observe(Ok(Some(&etag("\"c\"")))), Verdict::Changed);
    }

    /// A source failing for another reason (the object deleted, then put back not UTF-8 or too
    /// large) is reported again: the second reason is what the operator has to fix.
    #[test]
    fn a_failure_of_another_class_is_reported_again() {
        let mut w = Watch::new(etag("\"a\""));
        assert_eq!(w.observe(Err("not_found")), Verdict::FirstFailure);
        assert_eq!(w.observe(Err("not_found")), Verdict::StillFailing);
        assert_eq!(w.observe(Err("too_large")), Verdict::FirstFailure);
        assert_eq!(w.observe(Err("too_large")), Verdict::StillFailing);
        assert!(w.failing());
    }

    #[test]
    fn a_sighup_read_becomes_the_reference() {
        let mut w = Watch::new(Identity::of_text("one"));
        w.took(Identity::of_text("two"));
        assert_eq!(
            w.observe(Ok(Some(&Identity::of_text("two")))),
            Verdict::Same
        );
        assert_eq!(
            w.observe(Ok(Some(&Identity::of_text("three")))),
            Verdict::Changed
        );
    }

    #[test]
    fn file_content_identifies_a_file() {
        assert_eq!(Identity::of_text("x = 1\n"), Identity::of_text("x = 1\n"));
        assert_ne!(Identity::of_text("x = 1\n"), Identity::of_text("x = 2\n"));
        assert_eq!(Identity::of_text("").to_string(), "sha256 e3b0c44298fc");
    }

    #[test]
    fn s3_error_codes_are_classed_through_the_one_table() {
        for (code, class) in [
            ("NoSuchKey", "not_found"),
            ("NoSuchBucket", "not_found"),
            ("AccessDenied", "access_denied"),
            ("ExpiredToken", "expired_credentials"),
            ("SignatureDoesNotMatch", "invalid_credentials"),
            ("SlowDown", "throttled"),
            ("InternalError", "server_fault"),
            ("InvalidObjectState", "other"),
        ] {
            assert_eq!(class_of_code(code), class, "{code}");
        }
    }

    #[test]
    fn s3_configs_are_polled_by_default_and_files_only_when_asked() {
        let s3: ConfigSource = "s3://cfg-b/k.toml".parse().unwrap();
        let file: ConfigSource = "/etc/readyprobe.toml".parse().unwrap();
        assert_eq!(poll_every(&s3, None), Some(DEFAULT_S3_POLL));
        assert_eq!(poll_every(&file, None), None);
        let p = Some(Duration::from_secs(5));
        assert_eq!(poll_every(&file, p), p);
        assert_eq!(poll_every(&s3, p), p);
    }
}
