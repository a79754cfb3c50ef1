//! Start-up preparation: read the secrets, CA bundles, client identities and resolv.conf the
//! config names, and build what every branch probe needs.
//!
//! Config validation never touches the file system or the environment; this is the one place
//! that does, so `check` can ask it once and report every problem (`run` refuses to start on any).
//! Each input is checked on its own, so one missing file never hides another.

use super::target::{BranchProbe, Header, Redactor, Target};
use super::{http, mysql, otlp, postgres, resolve, tcp, tls};
use crate::config::{
    Config, Dns, HeaderValueSource, ProbeKind, SecretRef, ServiceConfig, SslMode, TlsSettings,
};
use crate::secrets::{SecretCache, SecretCell};
use hickory_resolver::TokioResolver;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// Largest PEM file or resolv.conf read at start-up, in bytes: a CA bundle of a few hundred
/// certificates fits.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Largest secret file read at start-up, in bytes.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// One input `run` needs at start-up and cannot have: a CA bundle, a client certificate or key, a
/// secret, or resolv.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareProblem {
    /// The config keys naming the input, e.g. `probe.tls.ssl_ca`; several when more than one
    /// key names the same file or variable, so each input is reported once.
    pub keys: Vec<String>,
    /// The file path, or `environment variable NAME` / `file PATH` for a secret; never a secret's
    /// value.
    pub subject: String,
    /// What is wrong with it, worded to follow the subject, e.g. `is not readable: not found`.
    pub reason: String,
}

impl fmt::Display for PrepareProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {}",
            self.keys.join(", "),
            self.subject,
            self.reason
        )
    }
}

/// Start-up failure while preparing probes: every problem found (resolv.conf first, then the probe
/// kind's secrets and TLS files).
#[derive(Debug, Clone, thiserror::Error)]
pub struct PrepareError {
    /// One entry per unavailable file or secret; never empty.
    pub problems: Vec<PrepareProblem>,
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// Problems found so far, one per input, and the digest of the inputs read meanwhile.
#[derive(Debug, Default)]
struct Problems(Vec<PrepareProblem>, Reads);

/// A digest of the bytes a service's preparation read: its CA bundle, client certificate and
/// key, and secret values. Two preparations that read the same bytes have the same digest, so a
/// reload can tell that a file or secret changed under an unchanged config. Compared only within
/// one process, never printed (its `Debug` shows nothing of it).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct InputsDigest(u64);

impl fmt::Debug for InputsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InputsDigest(<redacted>)")
    }
}

/// The digest being built: each input by its config key and its bytes, both length-prefixed.
#[derive(Debug, Default)]
struct Reads(std::hash::DefaultHasher);

impl Reads {
    fn add(&mut self, key: &str, bytes: &[u8]) {
        use std::hash::Hasher;
        for part in [key.as_bytes(), bytes] {
            self.0.write_usize(part.len());
            self.0.write(part);
        }
    }

    fn digest(&self) -> InputsDigest {
        use std::hash::Hasher;
        InputsDigest(self.0.finish())
    }
}

impl Problems {
    /// Record a problem; the same subject with the same reason under another key only adds the key.
    fn push(&mut self, key: String, subject: String, reason: String) {
        if let Some(p) = self
            .0
            .iter_mut()
            .find(|p| p.subject == subject && p.reason == reason)
        {
            if !p.keys.contains(&key) {
                p.keys.push(key);
            }
            return;
        }
        self.0.push(PrepareProblem {
            keys: vec![key],
            subject,
            reason,
        });
    }
}

/// Prepare the probes of every branch of every service: read secrets, load CA bundles and
/// client identities, build the resolver. A Secrets Manager secret is unavailable here.
///
/// # Errors
/// [`PrepareError`] listing every secret, CA bundle, client certificate or key and resolv.conf
/// that is unavailable, each once.
pub fn prepare(cfg: &Config) -> Result<(TokioResolver, Vec<BranchProbe>), PrepareError> {
    // Environment and file secrets only: a Secrets Manager secret is read into a cache first
    // (`SecretCache::read_missing`), then [`branches`] takes it.
    let secrets = &SecretCache::default();
    let resolver = resolver(cfg);
    let mut problems = resolver
        .as_ref()
        .err()
        .map(|e| e.problems.clone())
        .unwrap_or_default();
    let mut probes = Vec::new();
    for svc in &cfg.services {
        match branches(cfg, svc, secrets) {
            Ok(p) => probes.extend(p),
            Err(e) => {
                for p in e.problems {
                    if !problems.contains(&p) {
                        problems.push(p);
                    }
                }
            }
        }
    }
    match resolver {
        Ok(r) if problems.is_empty() => Ok((r, probes)),
        _ => Err(PrepareError { problems }),
    }
}

/// Prepare one service's branch probes and the resolver (the `probe` command).
///
/// # Errors
/// As [`prepare`], for the resolver's and this service's inputs.
pub fn prepare_service(
    cfg: &Config,
    svc: &ServiceConfig,
    secrets: &SecretCache,
) -> Result<(TokioResolver, Vec<BranchProbe>), PrepareError> {
    match (resolver(cfg), branches(cfg, svc, secrets)) {
        (Ok(r), Ok(p)) => Ok((r, p)),
        (r, p) => {
            let mut problems = r.err().map(|e| e.problems).unwrap_or_default();
            problems.extend(p.err().map(|e| e.problems).unwrap_or_default());
            Err(PrepareError { problems })
        }
    }
}

/// Build the resolver every branch shares.
///
/// # Errors
/// [`PrepareError`] naming resolv.conf when it is unusable.
pub fn resolver(cfg: &Config) -> Result<TokioResolver, PrepareError> {
    let mut problems = Problems::default();
    match prepare_resolver(&cfg.dns, &mut problems) {
        Some(r) if problems.0.is_empty() => Ok(r),
        _ => Err(PrepareError {
            problems: problems.0,
        }),
    }
}

/// Prepare one service's branch probes: its secrets, CA bundle and client identity.
///
/// # Errors
/// [`PrepareError`] listing each of its inputs that is unavailable.
pub fn branches(
    cfg: &Config,
    svc: &ServiceConfig,
    secrets: &SecretCache,
) -> Result<Vec<BranchProbe>, PrepareError> {
    branches_and_digest(cfg, svc, secrets).map(|(probes, _)| probes)
}

/// [`branches`], with the digest of the inputs read (a reload compares it with the running
/// one's).
///
/// # Errors
/// As [`branches`].
pub fn branches_and_digest(
    cfg: &Config,
    svc: &ServiceConfig,
    secrets: &SecretCache,
) -> Result<(Vec<BranchProbe>, InputsDigest), PrepareError> {
    let mut problems = Problems::default();
    let target = prepare_target(&svc.probe.kind, secrets, &mut problems);
    let targets: Vec<Option<Target>> = match &target {
        Some(t) => svc
            .branches
            .iter()
            .map(|b| branch_target(t, &svc.probe.kind, b, secrets, &mut problems))
            .collect(),
        None => Vec::new(),
    };
    if target.is_none() || !problems.0.is_empty() {
        return Err(PrepareError {
            problems: problems.0,
        });
    }
    let tls_verified = tls_settings(&svc.probe.kind).verified();
    let digest = problems.1.digest();
    // One redactor for the service's secrets, built once; a branch with its own RDS IAM token
    // gets one that knows that token too.
    let shared = target.as_ref().map(|t| Redactor::of(t.secrets()));
    let per_branch = matches!(
        svc.probe.kind.database_login(),
        Some((_, SecretRef::RdsIam { .. }))
    );
    let probes = svc
        .branches
        .iter()
        .zip(targets.into_iter().flatten())
        .map(|(b, target)| BranchProbe {
            branch: b.clone(),
            prober_id: cfg.prober_id.clone(),
            stable_name: svc.service.stable_name.clone(),
            address_family: cfg.dns.address_family,
            timeout: svc.probe.timeout,
            step_timeouts: svc.probe.step_timeouts,
            redactor: match (&shared, per_branch) {
                (Some(r), false) => r.clone(),
                _ => Redactor::of(target.secrets()),
            },
            target,
            tls_verified,
            end_to_end: false,
        })
        .collect();
    Ok((probes, digest))
}

/// The service's target for branch `b`: the same, but with an RDS IAM password the token signed
/// for the branch's endpoint, port and region; `None` (and a problem) when that token is
/// unavailable.
fn branch_target(
    target: &Target,
    kind: &ProbeKind,
    b: &crate::config::Branch,
    secrets: &SecretCache,
    problems: &mut Problems,
) -> Option<Target> {
    let Some((user, r @ SecretRef::RdsIam { region })) = kind.database_login() else {
        return Some(target.clone());
    };
    let key = format!("probe.{}.password", kind.name());
    let Some(region) = b.token_region(region.as_deref()) else {
        // Config refuses this; a problem, not a panic, all the same.
        problems.push(
            key,
            r.to_string(),
            format!("branch {:?} has no region to sign for", b.name),
        );
        return None;
    };
    let what = crate::secrets::tokens::token_for(region, &b.endpoint, b.port, user);
    match secrets.token_cell(&what) {
        Ok(cell) => Some(target.with_database_password(cell)),
        Err(reason) => {
            problems.push(key, what.to_string(), reason);
            None
        }
    }
}

/// One line (for `check`) naming the secrets shorter than
/// [`super::target::MIN_TRANSFORMED_SECRET_CHARS`] characters; `None` when there are none.
pub fn short_secret_warning(probes: &[BranchProbe]) -> Option<String> {
    let keys = probes.first()?.target.short_secret_keys();
    (!keys.is_empty()).then(|| {
        format!(
            "{}: shorter than {} characters: a weak secret, and redacting it from what targets send back marks every occurrence of it in other words",
            keys.join(", "),
            super::target::MIN_TRANSFORMED_SECRET_CHARS
        )
    })
}

fn prepare_resolver(dns: &Dns, problems: &mut Problems) -> Option<TokioResolver> {
    const KEY: &str = "dns.resolv_conf";
    let resolv_conf = match &dns.nameservers {
        Some(_) => Vec::new(),
        None => match read_capped(&dns.resolv_conf, MAX_FILE_BYTES) {
            Ok(bytes) => bytes,
            Err(reason) => {
                problems.push(KEY.into(), dns.resolv_conf.display().to_string(), reason);
                return None;
            }
        },
    };
    match resolve::build_resolver_from(dns, resolv_conf) {
        Ok(r) => Some(r),
        Err(e) => {
            let (subject, reason) = match e {
                resolve::ResolverSetupError::Read { path, source } => {
                    (path, format!("is not readable: {}", io_reason(&source)))
                }
                resolve::ResolverSetupError::NoNameserver { path } => (
                    path,
                    "lists no nameserver; set dns.nameservers in the config".into(),
                ),
                resolve::ResolverSetupError::Parse { path, reason } => {
                    (path, format!("cannot be parsed: {reason}"))
                }
            };
            problems.push(KEY.into(), subject, reason);
            None
        }
    }
}

/// The kind's TLS settings (the mysql kind keeps them among its own).
fn tls_settings(kind: &ProbeKind) -> TlsSettings {
    match kind {
        ProbeKind::Mysql(m) => TlsSettings {
            ssl_mode: m.ssl_mode,
            ssl_ca: m.ssl_ca.clone(),
            client_identity: m.client_identity.clone(),
            tls_min_version: m.tls_min_version,
            danger_send_secrets_unverified: false,
        },
        ProbeKind::Postgres(p) => p.tls.clone(),
        ProbeKind::Tcp(t) => t.tls.clone(),
        ProbeKind::Http(h) => h.tls.clone(),
        ProbeKind::Otlp(o) => o.tls.clone(),
    }
}

fn prepare_target(
    kind: &ProbeKind,
    secrets: &SecretCache,
    problems: &mut Problems,
) -> Option<Target> {
    // The kind's table holds its secrets; [probe.tls] holds the TLS settings of every kind.
    let prefix = format!("probe.{}", kind.name());
    let tls_table = "probe.tls";
    match kind {
        ProbeKind::Mysql(m) => {
            let password = secret(format!("{prefix}.password"), &m.password, secrets, problems);
            let tls = tls_config(tls_table, &tls_settings(kind), problems)?;
            Some(Target::Mysql(Box::new(mysql::MysqlTarget {
                settings: m.clone(),
                password: password?,
                tls,
            })))
        }
        ProbeKind::Postgres(p) => {
            let password = secret(format!("{prefix}.password"), &p.password, secrets, problems);
            let tls = tls_config(tls_table, &p.tls, problems)?;
            Some(Target::Postgres(Box::new(postgres::PostgresTarget {
                settings: p.clone(),
                password: password?,
                tls,
            })))
        }
        ProbeKind::Http(h) => {
            let headers = headers(&prefix, &h.headers, secrets, problems);
            let tls = tls_config(tls_table, &h.tls, problems);
            Some(Target::Http(Box::new(http::HttpTarget {
                headers: headers?,
                tls: tls?,
                settings: (**h).clone(),
            })))
        }
        ProbeKind::Otlp(o) => {
            let headers = headers(&prefix, &o.headers, secrets, problems);
            let tls = tls_config(tls_table, &o.tls, problems);
            Some(Target::Otlp(Box::new(otlp::OtlpTarget {
                headers: headers?,
                tls: tls?,
                settings: o.clone(),
            })))
        }
        ProbeKind::Tcp(t) => Some(Target::Tcp(tcp::TcpTarget {
            tls: tls_config(tls_table, &t.tls, problems)?,
        })),
    }
}

/// Read one secret (a Secrets Manager one from the run's cache, which read it before); `None`
/// (and a problem) when it is unavailable.
fn secret(
    key: String,
    r: &SecretRef,
    secrets: &SecretCache,
    problems: &mut Problems,
) -> Option<SecretCell> {
    let value = match r {
        // Signed per branch (its endpoint and port): [`branch_target`] puts the branch's token
        // in place of this empty value, which is never sent.
        SecretRef::RdsIam { .. } => {
            problems.1.add(&key, r.to_string().as_bytes());
            return Some(SecretCell::fixed(String::new()));
        }
        SecretRef::SecretsManager(sm) => {
            return match secrets.cell(sm) {
                // The reference, not the value: a rotation is no changed input for a reload.
                Ok(cell) => {
                    problems.1.add(&key, r.to_string().as_bytes());
                    Some(cell)
                }
                Err(reason) => {
                    problems.push(key, r.to_string(), reason);
                    None
                }
            };
        }
        SecretRef::File(path) => match read_capped(path, MAX_SECRET_BYTES) {
            Ok(bytes) => r.value_of_file_contents(bytes),
            Err(reason) => {
                problems.push(key, r.to_string(), reason);
                return None;
            }
        },
        SecretRef::Env(_) => r.resolve(),
    };
    match value {
        Ok(v) => {
            problems.1.add(&key, v.as_bytes());
            Some(SecretCell::fixed(v))
        }
        Err(e) => {
            problems.push(key, r.to_string(), format!("is unavailable: {}", e.reason));
            None
        }
    }
}

/// Header values with their secrets read; every unavailable secret is a problem.
fn headers(
    prefix: &str,
    headers: &[(::http::HeaderName, HeaderValueSource)],
    secrets: &SecretCache,
    problems: &mut Problems,
) -> Option<Vec<Header>> {
    let mut out = Vec::with_capacity(headers.len());
    let mut complete = true;
    for (name, v) in headers {
        let header = |value: SecretCell, secret: bool| Header {
            name: name.clone(),
            value,
            secret,
        };
        match v {
            HeaderValueSource::Plain(s) => out.push(header(SecretCell::fixed(s.clone()), false)),
            HeaderValueSource::Secret(r) => {
                match secret(format!("{prefix}.headers.{name}"), r, secrets, problems) {
                    Some(value) => out.push(header(value, true)),
                    None => complete = false,
                }
            }
        }
    }
    complete.then_some(out)
}

/// The TLS client configuration (`None` inside when TLS is disabled), read at start-up only;
/// `None` when a file it needs is unavailable. The CA bundle, certificate and key are checked one
/// by one first, so each bad file is named.
fn tls_config(
    prefix: &str,
    s: &TlsSettings,
    problems: &mut Problems,
) -> Option<Option<Arc<ClientConfig>>> {
    if s.ssl_mode == SslMode::Disabled {
        return Some(None);
    }
    let mut usable = true;
    let mut check =
        |field: &str, path: &Path, parse: fn(&[u8]) -> Result<(), String>| match read_pem(path)
            .and_then(|bytes| parse(&bytes).map(|()| bytes))
        {
            Ok(bytes) => problems.1.add(&format!("{prefix}.{field}"), &bytes),
            Err(reason) => {
                problems.push(
                    format!("{prefix}.{field}"),
                    path.display().to_string(),
                    reason,
                );
                usable = false;
            }
        };
    if matches!(s.ssl_mode, SslMode::VerifyCa | SslMode::VerifyIdentity)
        && let Some(ca) = &s.ssl_ca
    {
        check("ssl_ca", ca, parse_ca_bundle);
    }
    if let Some(id) = &s.client_identity {
        check("ssl_cert", &id.cert, parse_certificates);
        check("ssl_key", &id.key, parse_private_key);
    }
    if !usable {
        return None;
    }
    match tls::client_config_for(s) {
        Ok(c) => Some(c),
        Err(tls::TlsSetupError(reason)) => {
            let key = |k: &str| format!("{prefix}.{k}");
            let (keys, subject, reason) = match (&s.client_identity, &s.ssl_ca) {
                (Some(id), _) => (
                    vec![key("ssl_cert"), key("ssl_key")],
                    format!("{} and {}", id.cert.display(), id.key.display()),
                    format!("cannot be used together: {reason}"),
                ),
                (None, Some(ca)) => (
                    vec![key("ssl_ca")],
                    ca.display().to_string(),
                    format!("cannot be used: {reason}"),
                ),
                (None, None) => (
                    vec![key("ssl_mode")],
                    "the TLS client configuration".into(),
                    format!("cannot be built: {reason}"),
                ),
            };
            problems.0.push(PrepareProblem {
                keys,
                subject,
                reason,
            });
            None
        }
    }
}

fn parse_ca_bundle(pem: &[u8]) -> Result<(), String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not valid PEM: {e}"))?;
    let (added, _) = RootCertStore::empty().add_parsable_certificates(certs);
    if added == 0 {
        return Err("holds no usable CA certificate".into());
    }
    Ok(())
}

fn parse_certificates(pem: &[u8]) -> Result<(), String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(())
}

fn parse_private_key(pem: &[u8]) -> Result<(), String> {
    PrivateKeyDer::from_pem_slice(pem)
        .map(|_| ())
        .map_err(|e| format!("holds no usable private key: {e}"))
}

/// A PEM file's contents, at most [`MAX_FILE_BYTES`].
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    read_capped(path, MAX_FILE_BYTES)
}

/// The value of a secret `run` reads itself (a file, read capped at [`MAX_SECRET_BYTES`] as
/// probe targets read theirs, or an environment variable), or why not; for the otlp sink's
/// headers.
pub(crate) fn local_secret(r: &SecretRef) -> Result<String, String> {
    let value = match r {
        SecretRef::File(path) => r.value_of_file_contents(read_capped(path, MAX_SECRET_BYTES)?),
        _ => r.resolve(),
    };
    value.map_err(|e| e.reason)
}

/// A regular file's contents, refused when over `max` bytes. Opened once without blocking (a
/// FIFO's `open` returns at once), checked to be a regular file on the open descriptor, and read
/// through a `max + 1` cap: a file whose reported size is 0 (`/proc/kallsyms`) or that grows is
/// still cut off, never read whole.
fn read_capped(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let unreadable = |e: std::io::Error| format!("is not readable: {}", io_reason(&e));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let meta = f.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let too_large = || format!("is larger than {} KiB", max / 1024);
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// An I/O error in a few words, without the OS error number.
fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "not found".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientIdentityFiles;

    fn tls_settings(ca: &Path, cert: &Path, key: &Path) -> TlsSettings {
        TlsSettings {
            ssl_mode: SslMode::VerifyIdentity,
            ssl_ca: Some(ca.to_owned()),
            client_identity: Some(ClientIdentityFiles {
                cert: cert.to_owned(),
                key: key.to_owned(),
            }),
            tls_min_version: crate::config::MinVersion::Tls12,
            danger_send_secrets_unverified: false,
        }
    }

    #[test]
    fn every_unusable_tls_file_is_one_problem() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let mut problems = Problems::default();
        let s = tls_settings(&missing, &empty, dir.path());
        assert!(tls_config("probe.tls", &s, &mut problems).is_none());
        let text: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                format!(
                    "probe.tls.ssl_ca: {} is not readable: not found",
                    missing.display()
                ),
                format!(
                    "probe.tls.ssl_cert: {} holds no certificate",
                    empty.display()
                ),
                format!(
                    "probe.tls.ssl_key: {} is not a regular file",
                    dir.path().display()
                ),
            ]
        );
    }

    /// A self-signed CA certificate and its key as PEM files in `dir`, named `{name}.pem` and
    /// `{name}.key`.
    fn self_signed(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut params = rcgen::CertificateParams::new(vec!["ca.example".to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn usable_tls_files_build_a_client_config_and_a_mismatched_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, key) = self_signed(dir.path(), "a");
        let (_, other_key) = self_signed(dir.path(), "b");
        let mut problems = Problems::default();
        let built = tls_config("probe.tls", &tls_settings(&ca, &ca, &key), &mut problems);
        assert!(matches!(built, Some(Some(_))), "{problems:?}");
        assert!(problems.0.is_empty());

        let s = tls_settings(&ca, &ca, &other_key);
        assert!(tls_config("probe.tls", &s, &mut problems).is_none());
        assert_eq!(problems.0.len(), 1);
        assert!(
            problems.0[0].to_string().starts_with(&format!(
                "probe.tls.ssl_cert, probe.tls.ssl_key: {} and {} cannot be used together: client identity:",
                ca.display(),
                other_key.display()
            )),
            "{problems:?}"
        );
    }

    /// The digest follows the bytes read, wherever they are read from, and never shows.
    #[test]
    fn the_inputs_digest_follows_the_bytes_read() {
        let dir = tempfile::tempdir().unwrap();
        let (a, key) = self_signed(dir.path(), "a");
        let (b, _) = self_signed(dir.path(), "b");
        let digest = |ca: &Path| {
            let mut problems = Problems::default();
            let s = tls_settings(ca, &a, &key);
            assert!(tls_config("probe.tls", &s, &mut problems).is_some());
            problems.1.digest()
        };
        let first = digest(&a);
        assert_eq!(first, digest(&a));
        let renewed = dir.path().join("renewed.pem");
        std::fs::copy(&b, &renewed).unwrap();
        assert_ne!(first, digest(&renewed));
        std::fs::copy(&a, &renewed).unwrap();
        assert_eq!(first, digest(&renewed));
        assert_eq!(format!("{first:?}"), "InputsDigest(<redacted>)");
    }

    #[test]
    fn one_file_named_by_two_keys_is_one_problem() {
        let missing = Path::new("/nonexistent/readyprobe/identity.pem");
        let mut problems = Problems::default();
        let s = tls_settings(
            Path::new("/nonexistent/readyprobe/ca.pem"),
            missing,
            missing,
        );
        assert!(tls_config("probe.tls", &s, &mut problems).is_none());
        assert_eq!(problems.0.len(), 2);
        assert_eq!(
            problems.0[1].keys,
            ["probe.tls.ssl_cert", "probe.tls.ssl_key"]
        );
    }

    #[test]
    fn every_unavailable_secret_is_one_problem_and_values_never_appear() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("token");
        std::fs::write(&good, "s3cret\n").unwrap();
        let name = |n: &'static str| ::http::HeaderName::from_static(n);
        let unset = SecretRef::Env("READYPROBE_UNIT_SURELY_UNSET".into());
        let hs = vec![
            (name("x-a"), HeaderValueSource::Secret(unset.clone())),
            (
                name("x-b"),
                HeaderValueSource::Secret(SecretRef::File(good)),
            ),
            (name("x-c"), HeaderValueSource::Plain("plain".into())),
            (
                name("x-d"),
                HeaderValueSource::Secret(SecretRef::File(dir.path().to_owned())),
            ),
            (name("x-e"), HeaderValueSource::Secret(unset)),
        ];
        let mut problems = Problems::default();
        let cache = SecretCache::default();
        assert!(headers("probe.http", &hs, &cache, &mut problems).is_none());
        let text = PrepareError {
            problems: problems.0,
        }
        .to_string();
        assert!(
            text.starts_with(
                "probe.http.headers.x-a, probe.http.headers.x-e: environment variable READYPROBE_UNIT_SURELY_UNSET is unavailable"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "; probe.http.headers.x-d: file {} is not a regular file",
                dir.path().display()
            )),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");

        let mut problems = Problems::default();
        let ok = headers("probe.tls", &hs[1..3], &cache, &mut problems).unwrap();
        assert!(problems.0.is_empty());
        assert_eq!((&*ok[0].value.get(), ok[0].secret), ("s3cret", true));
        assert_eq!((&*ok[1].value.get(), ok[1].secret), ("plain", false));
        assert_eq!(format!("{ok:?}"), r#"[x-b: <redacted>, x-c: "plain"]"#);
    }

    #[test]
    fn an_oversized_secret_file_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 65 * 1024]).unwrap();
        let mut problems = Problems::default();
        let r = SecretRef::File(big.clone());
        let cache = SecretCache::default();
        assert!(secret("probe.mysql.password".into(), &r, &cache, &mut problems).is_none());
        assert_eq!(
            problems.0[0].to_string(),
            format!(
                "probe.mysql.password: file {} is larger than 64 KiB",
                big.display()
            )
        );
    }

    /// The otlp sink's file secrets are read under the same cap as a probe target's.
    #[test]
    fn a_local_secret_file_is_read_capped() {
        let dir = tempfile::tempdir().unwrap();
        let (big, small) = (dir.path().join("big"), dir.path().join("small"));
        std::fs::write(&big, vec![b'x'; 65 * 1024]).unwrap();
        std::fs::write(&small, "tok\n").unwrap();
        let got = local_secret(&SecretRef::File(big));
        assert_eq!(got, Err("is larger than 64 KiB".to_string()));
        assert_eq!(local_secret(&SecretRef::File(small)).as_deref(), Ok("tok"));
    }

    /// A /proc file reports size 0 whatever it holds: the cap is on the bytes read, not on the
    /// size the file system reports.
    #[test]
    fn a_file_reporting_size_zero_is_still_capped() {
        let path = Path::new("/proc/kallsyms");
        let meta = std::fs::metadata(path).expect("/proc/kallsyms is readable here");
        assert_eq!(meta.len(), 0);
        let mut problems = Problems::default();
        let r = SecretRef::File(path.to_owned());
        let cache = SecretCache::default();
        assert!(secret("probe.mysql.password".into(), &r, &cache, &mut problems).is_none());
        assert_eq!(
            problems.0[0].to_string(),
            "probe.mysql.password: file /proc/kallsyms is larger than 64 KiB"
        );
        assert_eq!(read_pem(path).unwrap_err(), "is larger than 1024 KiB");
        let dns = Dns {
            nameservers: None,
            resolv_conf: path.to_owned(),
            timeout: std::time::Duration::from_secs(1),
            address_family: crate::config::AddressFamily::Ipv4ThenIpv6,
        };
        assert!(prepare_resolver(&dns, &mut problems).is_none());
        assert_eq!(
            problems.0[1].to_string(),
            "dns.resolv_conf: /proc/kallsyms is larger than 1024 KiB"
        );
    }

    /// A FIFO is refused at once: opening it does not wait for a writer.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read_pem(&fifo).unwrap_err(), "is not a regular file");
    }

    #[test]
    fn a_missing_resolv_conf_is_a_problem_not_a_hang() {
        let mut problems = Problems::default();
        let dns = Dns {
            nameservers: None,
            resolv_conf: "/dev/zero".into(),
            timeout: std::time::Duration::from_secs(1),
            address_family: crate::config::AddressFamily::Ipv4ThenIpv6,
        };
        assert!(prepare_resolver(&dns, &mut problems).is_none());
        assert_eq!(
            problems.0[0].to_string(),
            "dns.resolv_conf: /dev/zero is not a regular file"
        );
    }
}
