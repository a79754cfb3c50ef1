//! The run's secrets that change: a [`SecretCell`] per secret, which a probe reads at each
//! attempt, and the [`SecretCache`] that fills the Secrets Manager ones, one entry per distinct
//! reference shared by every branch and service.
//!
//! The cache reads a secret at start-up (and when a reload names a new one), again every
//! `refresh`, and at once after an attempt the server denied ([`SecretCell::report_denied`]),
//! at most once per [`FORCED_GAP`] per secret: a rotation costs at most one failed attempt per
//! branch. A failed read keeps the last good value. Environment and file secrets are fixed cells,
//! read at start-up and at a reload only. RDS IAM tokens are live cells too, signed again
//! every [`tokens::RESIGN`] ([`tokens`]). No value is ever logged or shown by `Debug`.

pub mod redactor;
pub mod tokens;

use crate::aws::rds_token::TokenFor;
use crate::aws::secrets_manager::SecretsClient;
use crate::config::{Config, HeaderValueSource, ProbeKind, SecretRef, SecretsManagerRef};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The shortest gap between two reads of one secret that denied attempts trigger.
pub const FORCED_GAP: Duration = Duration::from_secs(60);
/// Values of one secret kept for redaction (the current one last): an attempt that started
/// before a refresh may still echo the value it sent.
const HISTORY: usize = 4;

/// One secret's value as the probes read it: fixed (an environment variable, a file), or live
/// (a Secrets Manager secret the cache replaces when it changes).
#[derive(Clone)]
pub struct SecretCell(Arc<Cell>);

struct Cell {
    /// The values held lately, the current one last; never empty.
    values: RwLock<Vec<Arc<str>>>,
    /// Bumped at each change of the value.
    generation: AtomicU64,
    /// An attempt sent this value and the server denied it.
    denied: AtomicBool,
    /// Wakes the cache's refresh task; `None` for a fixed cell.
    wake: Option<Arc<Notify>>,
}

impl SecretCell {
    /// A cell whose value never changes.
    pub fn fixed(value: String) -> SecretCell {
        SecretCell::with(value, None)
    }

    fn with(value: String, wake: Option<Arc<Notify>>) -> SecretCell {
        SecretCell(Arc::new(Cell {
            values: RwLock::new(vec![value.into()]),
            generation: AtomicU64::new(0),
            denied: AtomicBool::new(false),
            wake,
        }))
    }

    /// The current value.
    pub fn get(&self) -> Arc<str> {
        let values = self.0.values.read().unwrap_or_else(PoisonError::into_inner);
        values.last().cloned().unwrap_or_else(|| Arc::from(""))
    }

    /// The values held lately (at most [`HISTORY`]), the current one last.
    pub fn values(&self) -> Vec<Arc<str>> {
        self.0
            .values
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many times the value changed.
    pub fn generation(&self) -> u64 {
        self.0.generation.load(Ordering::Acquire)
    }

    /// An attempt sent this secret and the server denied it: a live cell asks the cache to
    /// read it again; a fixed one has nothing to read.
    pub fn report_denied(&self) {
        if let Some(wake) = &self.0.wake {
            self.0.denied.store(true, Ordering::Release);
            wake.notify_one();
        }
    }

    /// Replace the value; whether it changed.
    pub(crate) fn set(&self, value: String) -> bool {
        let mut values = self
            .0
            .values
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if values.last().is_some_and(|v| **v == *value) {
            return false;
        }
        values.retain(|v| **v != *value);
        values.push(value.into());
        let excess = values.len().saturating_sub(HISTORY);
        values.drain(..excess);
        self.0.generation.fetch_add(1, Ordering::AcqRel);
        true
    }
}

impl std::fmt::Debug for SecretCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretCell(<redacted>)")
    }
}

/// A cached Secrets Manager secret: its cell once read, else why it could not be.
struct Entry {
    cell: Option<SecretCell>,
    /// Why the first read failed (never a value).
    error: Option<String>,
    /// When it was last read (or tried).
    read_at: Instant,
    /// When a denied attempt last triggered a read.
    forced_at: Option<Instant>,
}

/// The run's Secrets Manager secrets, one entry per distinct reference.
#[derive(Clone, Default)]
pub struct SecretCache(Arc<Inner>);

#[derive(Default)]
struct Inner {
    entries: Mutex<BTreeMap<SecretsManagerRef, Entry>>,
    /// One client per region asked (`None`: the default chain's).
    clients: tokio::sync::Mutex<BTreeMap<Option<String>, SecretsClient>>,
    wake: Arc<Notify>,
    /// The RDS IAM tokens.
    tokens: tokens::Tokens,
}

impl std::fmt::Debug for SecretCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretCache({} secrets)", self.entries().len())
    }
}

/// Every Secrets Manager reference `cfg` makes, each once.
pub fn references(cfg: &Config) -> Vec<SecretsManagerRef> {
    let mut out: Vec<SecretsManagerRef> = Vec::new();
    for svc in &cfg.services {
        let headers = match &svc.probe.kind {
            ProbeKind::Mysql(m) => {
                if let SecretRef::SecretsManager(r) = &m.password {
                    out.push(r.clone());
                }
                continue;
            }
            ProbeKind::Postgres(p) => {
                if let SecretRef::SecretsManager(r) = &p.password {
                    out.push(r.clone());
                }
                continue;
            }
            ProbeKind::Http(h) => &h.headers,
            ProbeKind::Otlp(o) => &o.headers,
            ProbeKind::Tcp(_) => continue,
        };
        for (_, v) in headers {
            if let HeaderValueSource::Secret(SecretRef::SecretsManager(r)) = v {
                out.push(r.clone());
            }
        }
    }
    // The OTLP sink's header secrets are read with the probes' (restart-only: `publish.otlp`).
    for (_, v) in cfg.publish.otlp.iter().flat_map(|o| &o.headers) {
        if let HeaderValueSource::Secret(SecretRef::SecretsManager(r)) = v {
            out.push(r.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

impl SecretCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<SecretsManagerRef, Entry>> {
        self.0
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Read every Secrets Manager secret `cfg` names that the cache does not hold yet (or could
    /// not read before), side by side.
    pub async fn read_missing(&self, cfg: &Config) {
        self.0.tokens.sign_missing(cfg).await;
        let missing: Vec<SecretsManagerRef> = {
            let entries = self.entries();
            references(cfg)
                .into_iter()
                .filter(|r| entries.get(r).is_none_or(|e| e.cell.is_none()))
                .collect()
        };
        let mut reads = tokio::task::JoinSet::new();
        for r in missing {
            let cache = self.clone();
            reads.spawn(async move {
                let value = cache.read(&r).await;
                (r, value)
            });
        }
        let mut values = Vec::new();
        while let Some(done) = reads.join_next().await {
            match done {
                Ok(v) => values.push(v),
                Err(e) => tracing::error!(error = %e, "reading a secret failed inside readyprobe"),
            }
        }
        let now = Instant::now();
        let mut entries = self.entries();
        for (r, value) in values {
            let (cell, error) = match value {
                Ok(v) => (Some(SecretCell::with(v, Some(self.0.wake.clone()))), None),
                Err(e) => (None, Some(e)),
            };
            entries.insert(
                r,
                Entry {
                    cell,
                    error,
                    read_at: now,
                    forced_at: None,
                },
            );
        }
    }

    /// Forget the secrets `cfg` does not name (a reload removed or changed their references):
    /// they are not read again.
    pub fn retain(&self, cfg: &Config) {
        let named = references(cfg);
        self.entries().retain(|r, _| named.contains(r));
        self.0.tokens.retain(cfg);
    }

    /// Sign the RDS IAM tokens of `region` with `signer` rather than the default chain's
    /// credentials (before [`SecretCache::read_missing`]).
    pub async fn set_signer(&self, region: &str, signer: crate::aws::rds_token::Signer) {
        self.0.tokens.set_signer(region, signer).await;
    }

    /// The cell of the RDS IAM token `what`, or why it is unavailable (never the token).
    ///
    /// # Errors
    /// The reason when it could not be signed or was never signed.
    pub fn token_cell(&self, what: &TokenFor) -> Result<SecretCell, String> {
        self.0.tokens.cell(what)
    }

    /// The cell of `r`, or why it is unavailable (`is unavailable: …`, never the value).
    ///
    /// # Errors
    /// The reason when the first read failed or `r` was never read.
    pub fn cell(&self, r: &SecretsManagerRef) -> Result<SecretCell, String> {
        match self.entries().get(r) {
            Some(Entry { cell: Some(c), .. }) => Ok(c.clone()),
            Some(Entry { error: Some(e), .. }) => Err(e.clone()),
            _ => Err("is unavailable: it was not read".into()),
        }
    }

    /// The value of `r` now: `GetSecretValue`, then its `json_key`.
    async fn read(&self, r: &SecretsManagerRef) -> Result<String, String> {
        let client = {
            let region = r.region().map(str::to_string);
            let mut clients = self.0.clients.lock().await;
            match clients.get(&region) {
                Some(c) => c.clone(),
                None => {
                    let c = SecretsClient::new(region.as_deref()).await;
                    clients.insert(region, c.clone());
                    c
                }
            }
        };
        let raw = client
            .secret_string(&r.id)
            .await
            .map_err(|e| format!("is unavailable: {e}"))?;
        value_of(raw, r.json_key.as_deref())
    }

    /// Read each secret again when its `refresh` is due or a denied attempt asked (at most once
    /// per [`FORCED_GAP`]), until `stop`. A failed read keeps the last good value and is logged
    /// with its class.
    pub async fn refresh(self, stop: CancellationToken) {
        loop {
            let next = match (self.next_due(), self.0.tokens.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let far = Instant::now() + crate::config::MAX_REFRESH;
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.0.wake.notified() => {}
                () = tokio::time::sleep_until(next.unwrap_or(far)) => {}
            }
            self.0.tokens.resign_due(Instant::now()).await;
            for r in self.take_due(Instant::now()) {
                let value = self.read(&r).await;
                let Ok(cell) = self.cell(&r) else { continue };
                match value {
                    Ok(v) => {
                        if cell.set(v) {
                            tracing::info!(secret = %r, "secret read again: its value changed");
                        } else {
                            tracing::debug!(secret = %r, "secret read again: unchanged");
                        }
                    }
                    Err(reason) => tracing::warn!(
                        secret = %r,
                        "secret {reason}; the last value read is kept"
                    ),
                }
            }
        }
    }

    /// The earliest time a read is due.
    fn next_due(&self) -> Option<Instant> {
        self.entries()
            .iter()
            .filter_map(|(r, e)| {
                let cell = e.cell.as_ref()?;
                let periodic = e.read_at + r.refresh;
                let forced = cell
                    .0
                    .denied
                    .load(Ordering::Acquire)
                    .then(|| e.forced_at.map_or(e.read_at, |f| f + FORCED_GAP));
                Some(forced.map_or(periodic, |f| f.min(periodic)))
            })
            .min()
    }

    /// The references due at `now`, marked read (and forced, when a denial asked).
    fn take_due(&self, now: Instant) -> Vec<SecretsManagerRef> {
        let mut due = Vec::new();
        for (r, e) in self.entries().iter_mut() {
            let Some(cell) = &e.cell else { continue };
            let denied = cell.0.denied.load(Ordering::Acquire);
            let may_force = e.forced_at.is_none_or(|f| now >= f + FORCED_GAP);
            let forced = denied && may_force;
            if forced || now >= e.read_at + r.refresh {
                if forced {
                    e.forced_at = Some(now);
                    cell.0.denied.store(false, Ordering::Release);
                }
                e.read_at = now;
                due.push(r.clone());
            }
        }
        due
    }
}

/// The secret's value: the whole `SecretString`, or its `json_key` when it is a JSON object.
///
/// # Errors
/// Why not (`is not a JSON object`, `has no key …`, `… is not a string`, `is empty`), never
/// quoting the value.
pub fn value_of(raw: String, json_key: Option<&str>) -> Result<String, String> {
    let value = match json_key {
        None => raw,
        Some(k) => {
            let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&raw)
                .map_err(|_| format!("is not a JSON object, which json_key {k:?} needs"))?;
            match object.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(_) => return Err(format!("has a key {k:?} that is not a string")),
                None => return Err(format!("has no key {k:?}")),
            }
        }
    };
    if value.is_empty() {
        return Err("is empty".into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_key_picks_one_string_and_errors_never_quote_the_value() {
        let rds = r#"{"username":"probe","password":"p4ss-w0rd-LONG"}"#.to_string();
        assert_eq!(
            value_of(rds.clone(), Some("password")).unwrap(),
            "p4ss-w0rd-LONG"
        );
        assert_eq!(value_of(rds.clone(), None).unwrap(), rds);
        for (raw, key, want) in [
            (rds.as_str(), "pass", "has no key \"pass\""),
            (
                "p4ss-w0rd-LONG",
                "password",
                "is not a JSON object, which json_key \"password\" needs",
            ),
            (
                r#"{"password":12345678}"#,
                "password",
                "has a key \"password\" that is not a string",
            ),
            (r#"{"password":""}"#, "password", "is empty"),
        ] {
            let e = value_of(raw.to_string(), Some(key)).unwrap_err();
            assert_eq!(e, want);
            assert!(!e.contains("p4ss") && !e.contains("12345678"));
        }
    }

    #[test]
    fn a_cell_keeps_recent_values_and_counts_changes() {
        let c = SecretCell::with("a".into(), Some(Arc::default()));
        assert!(!c.set("a".into()));
        for v in ["b", "c", "d", "e"] {
            assert!(c.set(v.into()));
        }
        assert_eq!(&*c.get(), "e");
        assert_eq!(c.generation(), 4);
        let held: Vec<String> = c.values().iter().map(|v| v.to_string()).collect();
        assert_eq!(held, ["b", "c", "d", "e"]);
        assert_eq!(format!("{c:?}"), "SecretCell(<redacted>)");
    }

    fn insert(cache: &SecretCache, r: &SecretsManagerRef, cell: &SecretCell, at: Instant) {
        cache.entries().insert(
            r.clone(),
            Entry {
                cell: Some(cell.clone()),
                error: None,
                read_at: at,
                forced_at: None,
            },
        );
    }

    /// A reload that stops naming a secret stops its reads; one still named is kept.
    #[test]
    fn retain_forgets_what_the_config_no_longer_names() {
        let text = "[service]\nname = \"api\"\nstable_name = \"api.internal.example\"\n[probe]\nkind = \"http\"\n[probe.tls]\nssl_ca = \"/etc/ca.pem\"\n[probe.http]\npath = \"/\"\nheaders = { authorization = { secrets_manager = \"api/token\" } }\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n";
        let cfg = crate::config::parse(std::path::Path::new("/etc/api.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let named = references(&cfg);
        assert_eq!(named.len(), 1);
        let gone = SecretsManagerRef {
            id: "api/old".into(),
            ..named[0].clone()
        };
        let cache = SecretCache::default();
        let now = Instant::now();
        for r in [&named[0], &gone] {
            insert(&cache, r, &SecretCell::fixed("v".into()), now);
        }
        cache.retain(&cfg);
        assert!(cache.cell(&named[0]).is_ok());
        assert!(cache.cell(&gone).is_err());
    }

    /// The OTLP sink's Secrets Manager header is read with the probes' secrets (once, however
    /// many name it); its env one is not the cache's.
    #[test]
    fn the_otlp_sinks_header_secrets_are_referenced() {
        let text = "[publish]\nsinks = [\"otlp\"]\n[publish.otlp]\nendpoint = \"https://otel.internal.example\"\nssl_ca = \"/etc/otel-ca.pem\"\nheaders = { authorization = { secrets_manager = \"otel/token\" }, x-tenant = { env = \"TENANT\" } }\n[service]\nname = \"api\"\nstable_name = \"api.internal.example\"\n[probe]\nkind = \"http\"\n[probe.tls]\nssl_ca = \"/etc/ca.pem\"\n[probe.http]\npath = \"/\"\nheaders = { authorization = { secrets_manager = \"otel/token\" } }\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n";
        let cfg = crate::config::parse(std::path::Path::new("/etc/api.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let ids =
            |cfg: &Config| -> Vec<String> { references(cfg).into_iter().map(|r| r.id).collect() };
        assert_eq!(ids(&cfg), ["otel/token"]);
        let text = text.replace(
            "headers = { authorization = { secrets_manager = \"otel/token\" } }\n[[",
            "[[",
        );
        let cfg = crate::config::parse(std::path::Path::new("/etc/api.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ids(&cfg), ["otel/token"], "named by the sink alone");
    }

    /// Due every `refresh`; a denial makes it due at once, then not again within the gap.
    #[tokio::test(start_paused = true)]
    async fn a_denial_forces_a_read_at_most_once_per_gap() {
        let r = SecretsManagerRef {
            id: "rds!cluster-1".into(),
            json_key: Some("password".into()),
            refresh: Duration::from_secs(300),
            region: None,
        };
        let t0 = Instant::now();
        let cache = SecretCache::default();
        let cell = SecretCell::with("v".into(), Some(cache.0.wake.clone()));
        insert(&cache, &r, &cell, t0);
        assert_eq!(cache.next_due(), Some(t0 + r.refresh));
        assert!(cache.take_due(t0 + Duration::from_secs(10)).is_empty());
        cell.report_denied();
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(cache.take_due(t1), std::slice::from_ref(&r));
        cell.report_denied();
        let t2 = t1 + Duration::from_secs(30);
        assert!(cache.take_due(t2).is_empty(), "within the gap");
        assert_eq!(cache.next_due(), Some(t1 + FORCED_GAP));
        assert_eq!(cache.take_due(t1 + FORCED_GAP), std::slice::from_ref(&r));
        assert_eq!(cache.next_due(), Some(t1 + FORCED_GAP + r.refresh));
        // A fixed cell asks nothing.
        SecretCell::fixed("x".into()).report_denied();
    }
}
