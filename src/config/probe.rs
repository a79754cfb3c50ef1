//! `[probe]`: timing shared by every kind, per-step deadlines, and dispatch to the kind's table.

use super::http::HttpProbe;
use super::issues::Issues;
use super::mysql::MysqlProbe;
use super::otlp::OtlpProbe;
use super::postgres::PostgresProbe;
use super::raw::{RawProbe, RawStepTimeouts};
use super::tcp::TcpProbe;
use super::values::KindName;
use super::{http, mysql, otlp, postgres, tcp, tls};
use crate::clock::fmt_duration;
use std::path::Path;
use std::time::Duration;

/// The probe run against each branch, as configured (the runtime one is
/// `probe::BranchProbe`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Time between attempt starts of one branch. Default 2 s.
    pub interval: Duration,
    /// Time between attempt starts while the branch is suspect (`readiness::Suspect`), from
    /// 100 ms to below `interval`; `None` (the default, or `interval` itself): adaptive probing
    /// is off.
    pub suspect_interval: Option<Duration>,
    /// Deadline of one whole attempt; must be shorter than `interval`. Default 80 % of the interval.
    pub timeout: Duration,
    /// Random delay added to each branch's first attempt, spreading branches apart. Default 10 %
    /// of the interval, at most 1 s.
    pub jitter: Duration,
    /// Per-step deadlines; each is also capped by what is left of the attempt deadline.
    pub step_timeouts: StepTimeouts,
    /// The kind-specific settings.
    pub kind: ProbeKind,
}

/// Per-step deadlines; each defaults to the attempt timeout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTimeouts {
    /// `resolve` step deadline.
    pub resolve: Duration,
    /// `connect` step deadline.
    pub connect: Duration,
    /// `tls` step deadline.
    pub tls: Duration,
    /// `auth` step deadline.
    pub auth: Duration,
    /// `write` step deadline.
    pub write: Duration,
    /// `verify` step deadline.
    pub verify: Duration,
}

/// Kind-specific probe settings; one variant per probe kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeKind {
    /// The MySQL/MariaDB writer probe.
    Mysql(MysqlProbe),
    /// The PostgreSQL writer probe.
    Postgres(PostgresProbe),
    /// Resolve, connect and optionally TLS: a liveness-level probe.
    Tcp(TcpProbe),
    /// A marked HTTP request on the branch's write path, with checks and an optional read-back.
    Http(Box<HttpProbe>),
    /// An OTLP/HTTP export of one marked data point to a telemetry gateway.
    Otlp(OtlpProbe),
}

impl ProbeKind {
    /// The database user and password reference of a database kind; `None` for the others.
    pub fn database_login(&self) -> Option<(&str, &super::secret::SecretRef)> {
        match self {
            ProbeKind::Mysql(m) => Some((&m.user, &m.password)),
            ProbeKind::Postgres(p) => Some((&p.user, &p.password)),
            ProbeKind::Tcp(_) | ProbeKind::Http(_) | ProbeKind::Otlp(_) => None,
        }
    }

    /// The kind's config name.
    pub fn name(&self) -> &'static str {
        match self {
            ProbeKind::Mysql(_) => KindName::Mysql,
            ProbeKind::Postgres(_) => KindName::Postgres,
            ProbeKind::Tcp(_) => KindName::Tcp,
            ProbeKind::Http(_) => KindName::Http,
            ProbeKind::Otlp(_) => KindName::Otlp,
        }
        .into()
    }

    /// The port a branch without its own is probed on (`None`: the `tcp` kind without a port).
    pub(super) fn default_port(&self) -> Option<u16> {
        match self {
            ProbeKind::Mysql(m) => Some(m.port),
            ProbeKind::Postgres(p) => Some(p.port),
            ProbeKind::Tcp(t) => t.port,
            ProbeKind::Http(h) => Some(h.port),
            ProbeKind::Otlp(o) => Some(o.port),
        }
    }
}

/// The shortest attempt interval.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The shortest attempt and step timeout: below it no DNS answer, TCP handshake or TLS
/// handshake completes even on loopback, so every attempt would fail.
pub(super) const MIN_TIMEOUT: Duration = Duration::from_millis(10);

/// The attempt interval (default 2 s), `None` when it is below the minimum: the rules that
/// depend on it (timeout, jitter, readiness windows) are then not checked, so the one error is
/// the interval's.
pub(super) fn interval(raw: &RawProbe) -> Option<Duration> {
    Some(raw.interval.unwrap_or(Duration::from_secs(2))).filter(|i| *i >= MIN_INTERVAL)
}

/// Attempt interval, timeout and jitter with their defaults and ordering rules.
fn timing(raw: &RawProbe, issues: &mut Issues<'_>) -> (Duration, Duration, Duration) {
    let Some(interval) = interval(raw) else {
        issues.error(
            "probe.interval",
            format!("must be at least {}", fmt_duration(MIN_INTERVAL)),
        );
        // Whatever else is written is checked against its own bounds only.
        let timeout = raw.timeout.unwrap_or(MIN_TIMEOUT);
        if timeout < MIN_TIMEOUT {
            issues.error("probe.timeout", too_short(timeout, MIN_TIMEOUT));
        }
        return (MIN_INTERVAL, timeout, Duration::ZERO);
    };
    let timeout = raw.timeout.unwrap_or(interval * 4 / 5);
    if timeout < MIN_TIMEOUT {
        issues.error("probe.timeout", too_short(timeout, MIN_TIMEOUT));
    } else if timeout >= interval {
        issues.error(
            "probe.timeout",
            format!(
                "the attempt timeout ({}) must be shorter than probe.interval ({}) so that at most one attempt per branch is in flight",
                issues.written("probe.timeout", timeout),
                issues.written("probe.interval", interval)
            ),
        );
    }
    let jitter = raw
        .jitter
        .unwrap_or_else(|| (interval / 10).min(Duration::from_secs(1)));
    if jitter >= interval {
        issues.error("probe.jitter", "must be shorter than probe.interval");
    }
    (interval, timeout, jitter)
}

/// `probe.suspect_interval`: at least [`MIN_INTERVAL`], at most `interval`; `None` when unset or
/// `interval` itself (adaptive probing off).
/// It may be shorter than the attempt timeout: one attempt is in flight at a time and a missed
/// tick is skipped, so a branch whose attempts hang is probed once per timeout.
fn suspect_interval(
    raw: &RawProbe,
    interval: Duration,
    issues: &mut Issues<'_>,
) -> Option<Duration> {
    let fast = raw.suspect_interval?;
    if fast < MIN_INTERVAL {
        issues.error(
            "probe.suspect_interval",
            format!(
                "must be at least {}: it bounds how often one branch is probed",
                fmt_duration(MIN_INTERVAL)
            ),
        );
        return None;
    }
    if fast > interval {
        issues.error(
            "probe.suspect_interval",
            format!(
                "({}) must not be longer than probe.interval ({}): it is the faster interval used while a branch is suspect",
                issues.written("probe.suspect_interval", fast),
                issues.written("probe.interval", interval)
            ),
        );
        return None;
    }
    (fast < interval).then_some(fast)
}

/// The message for a duration below its key's minimum.
pub(super) fn too_short(d: Duration, min: Duration) -> String {
    format!(
        "{} is shorter than the minimum, {}: nothing could finish in it",
        humantime::format_duration(d),
        fmt_duration(min)
    )
}

fn step_timeouts(st: &RawStepTimeouts, timeout: Duration, issues: &mut Issues<'_>) -> StepTimeouts {
    for (k, d) in [
        ("resolve", st.resolve),
        ("connect", st.connect),
        ("tls", st.tls),
        ("auth", st.auth),
        ("write", st.write),
        ("verify", st.verify),
    ] {
        match d {
            Some(d) if d < MIN_TIMEOUT => {
                issues.error(
                    format!("probe.step_timeout.{k}"),
                    too_short(d, MIN_TIMEOUT),
                );
            }
            Some(d) if d > timeout => issues.warn(format!(
                "probe.step_timeout.{k} ({}) is longer than probe.timeout ({}); the attempt deadline applies first",
                issues.written(&format!("probe.step_timeout.{k}"), d),
                issues.written("probe.timeout", timeout)
            )),
            _ => {}
        }
    }
    let step = |d: Option<Duration>| d.unwrap_or(timeout);
    StepTimeouts {
        resolve: step(st.resolve),
        connect: step(st.connect),
        tls: step(st.tls),
        auth: step(st.auth),
        write: step(st.write),
        verify: step(st.verify),
    }
}

/// Validate `[probe]` and its kind's table; `base` resolves relative paths.
pub(super) fn section(raw: RawProbe, base: &Path, issues: &mut Issues<'_>) -> Option<ProbeConfig> {
    let (interval, timeout, jitter) = timing(&raw, issues);
    let suspect_interval = suspect_interval(&raw, interval, issues);
    let step_timeouts = step_timeouts(&raw.step_timeout, timeout, issues);
    let kind = raw.kind;
    for (name, present) in [
        (KindName::Mysql, raw.mysql.is_some()),
        (KindName::Postgres, raw.postgres.is_some()),
        (KindName::Otlp, raw.otlp.is_some()),
        (KindName::Http, raw.http.is_some()),
        (KindName::Tcp, raw.tcp.is_some()),
    ] {
        if present && name != kind {
            issues.error(
                format!("probe.{name}"),
                format!("is set but probe.kind is \"{kind}\""),
            );
        }
    }
    let tls = tls::section(raw.tls.unwrap_or_default(), kind, base, issues)?;
    let missing = |issues: &mut Issues<'_>, what: &str| {
        issues.error(
            "probe.kind",
            format!("kind \"{kind}\" needs a [probe.{kind}] table{what}"),
        );
        None
    };
    let kind = match kind {
        KindName::Mysql => match raw.mysql {
            Some(m) => mysql::section(m, tls, base, issues).map(ProbeKind::Mysql),
            None => missing(issues, " (user, password, ...)"),
        },
        KindName::Postgres => match raw.postgres {
            Some(p) => postgres::section(p, tls, base, issues).map(ProbeKind::Postgres),
            None => missing(issues, " (user, password, ...)"),
        },
        KindName::Http => match raw.http {
            Some(h) => http::section(h, tls, base, issues).map(|h| ProbeKind::Http(Box::new(h))),
            None => missing(issues, " (at least `path`)"),
        },
        KindName::Otlp => match raw.otlp {
            Some(o) => otlp::section(o, tls, base, issues).map(ProbeKind::Otlp),
            None => missing(issues, ""),
        },
        // Every key of `[probe.tcp]` is optional: a port on each branch is enough.
        KindName::Tcp => tcp::section(raw.tcp.unwrap_or_default(), tls, issues).map(ProbeKind::Tcp),
    };
    Some(ProbeConfig {
        interval,
        suspect_interval,
        timeout,
        jitter,
        step_timeouts,
        kind: kind?,
    })
}
