//! The estimated monthly AWS cost of a config at list prices (pure), for `check`: the custom
//! metrics it publishes, its `PutMetricData` requests (the `cloudwatch` sink) or its CloudWatch
//! Logs bytes (the `emf` sink), and the alarms and Route 53 health checks that the templates in
//! `infra/cloudformation/` create for it.
//!
//! The datums are the ones a publish tick carries when every branch is known and every step
//! succeeds, built by the sinks' own code ([`sink::tick_datums`]), split into requests by
//! [`cloudwatch::batches`] and written as lines by [`emf::encode`], so the estimate follows the
//! code that publishes.

use crate::clock::Millis;
use crate::config::{self, Config, MetricsProfile, ProbeKind, ServiceConfig, SinkKind};
use crate::sink::{self, BranchTick, Datum, SinkId, cloudwatch, emf};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// List prices, us-east-1, US dollars, as of 2026-12-01: custom metrics ($0.30, then $0.10
/// beyond 10,000) and endpoint health checks ($0.50 AWS, $0.75 non-AWS) agree with public
/// pricing summaries read that day; the other figures, the Route 53 optional features above all,
/// were not checked against the pricing pages (Amazon CloudWatch pricing, Amazon Route 53
/// pricing) and should be before a budget relies on them. The free tier is not applied: it
/// is per account and shared with everything else in it.
pub mod price {
    /// CloudWatch custom metrics per metric-month, in tiers: (metrics in the tier, price), in
    /// order. $0.30 for the first 10,000; the later tiers are the page's volume discounts.
    pub const METRIC_TIERS: &[(u64, f64)] = &[
        (10_000, 0.30),
        (240_000, 0.10),
        (750_000, 0.05),
        (u64::MAX, 0.02),
    ];
    /// CloudWatch API requests (`PutMetricData`), per 1,000 requests.
    pub const PER_1000_REQUESTS: f64 = 0.01;
    /// CloudWatch standard-resolution (60 s period) alarm, per alarm-metric-month.
    pub const STANDARD_ALARM: f64 = 0.10;
    /// CloudWatch high-resolution (10 s period) alarm, per alarm-metric-month.
    pub const HIGH_RESOLUTION_ALARM: f64 = 0.30;
    /// CloudWatch Logs ingestion (standard log class), per GB.
    pub const LOGS_PER_GB: f64 = 0.50;
    /// Route 53 health check of an AWS endpoint (the price of a `CLOUDWATCH_METRIC` check, and
    /// the one used for a `CALCULATED` check, not checked against the pricing page),
    /// per health check-month, optional features extra.
    pub const AWS_ENDPOINT_HEALTH_CHECK: f64 = 0.50;
    /// Route 53 health check of a non-AWS endpoint (HTTPS/TCP), per health check-month.
    pub const NON_AWS_ENDPOINT_HEALTH_CHECK: f64 = 0.75;
    /// Route 53 optional feature: fast interval (10 s), per health check-month.
    pub const FAST_INTERVAL: f64 = 1.00;
    /// Route 53 optional feature: string matching, per health check-month.
    pub const STRING_MATCHING: f64 = 2.00;
    /// CloudWatch Synthetics, per canary run (its Lambda, storage and logs extra).
    pub const CANARY_RUN: f64 = 0.0012;
    /// S3 Standard PUT requests (`[evidence.s3]` segments), per 1,000 requests.
    pub const S3_PER_1000_PUTS: f64 = 0.005;
    /// Secrets Manager API calls (`GetSecretValue`), per 10,000 calls; the secret's own
    /// monthly price is its owner's, whoever reads it.
    pub const SECRETS_PER_10000_CALLS: f64 = 0.05;
    /// S3 Standard GET requests (a polled `s3://` config; an unchanged object's 304 counts
    /// too), per 1,000 requests.
    pub const S3_PER_1000_GETS: f64 = 0.0004;
}

/// The line `check` prints for a config read from S3 and polled every `every`: the reads a
/// month of one prober and their price. Each prober polls on its own.
pub fn config_poll_line(every: std::time::Duration) -> String {
    let reads = MONTH_MS / (every.as_millis().max(1) as u64);
    format!(
        "config poll: every {}, {} GetObject requests a month per prober, ${:.2} at ${} per 1,000",
        humantime::format_duration(every),
        grouped(reads),
        reads as f64 / 1000.0 * price::S3_PER_1000_GETS,
        price::S3_PER_1000_GETS
    )
}

/// The month of the estimate: 30 days, ms (43,200 one-minute ticks).
pub const MONTH_MS: u64 = 30 * 86_400_000;

/// Bytes CloudWatch Logs counts per log event on top of its text (the `PutLogEvents` size
/// accounting); counted as ingested, which errs on the high side.
pub const LOG_EVENT_OVERHEAD: u64 = 26;

/// Bytes in a GB of ingestion: 10^9 (the higher of the two readings of GB).
pub const GB: f64 = 1e9;

/// Alarms `readyprobe-service.yaml` creates per service besides one per branch: heartbeat,
/// fail-open and service-unavailable. All standard resolution (period 60 s).
pub const ALARMS_PER_SERVICE: u64 = 3;

/// The value of each `StepDuration` sample in the estimate, ms: 17 significant digits, as an
/// unrounded `f64` duration is written in an EMF line at its longest.
const SAMPLE_MS: f64 = 1.234_567_890_123_456_7;

/// The timestamp of the estimate's datums (any ms since the epoch of 13 digits).
const AT: Millis = 1_800_000_000_000;

/// The monthly quantities of one config (pure). Requests and log bytes are per prober process;
/// the series, alarms and health checks are shared by every prober of the config.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Unique custom metrics (namespace, name and dimension values) at steady state.
    pub metrics: u64,
    /// Datums one publish tick carries, every namespace.
    pub datums_per_tick: u64,
    /// `PutMetricData` requests per tick (0 without the `cloudwatch` sink).
    pub requests_per_tick: u64,
    /// Publish ticks in [`MONTH_MS`].
    pub ticks_per_month: u64,
    /// EMF bytes per tick as CloudWatch Logs counts them (0 without the `emf` sink).
    pub log_bytes_per_tick: u64,
    /// Standard-resolution alarms (one per branch plus [`ALARMS_PER_SERVICE`]; in both regions
    /// for a service in the cross-region layout).
    pub alarms: u64,
    /// Route 53 health checks: one `CLOUDWATCH_METRIC` per branch; three per branch of a service
    /// in the cross-region layout (one per region's alarm and a `CALCULATED` one over both).
    pub health_checks: u64,
    /// How many of `health_checks` are `CALCULATED` (one per branch in the cross-region layout).
    pub calculated_health_checks: u64,
    /// The services priced in the cross-region layout ([`cross_region`]).
    pub cross_region: Vec<String>,
    /// Series the other region's prober adds for them, in the accounts its datums go to
    /// (`other_region`): in `targets` for a named target's, else the prober's account's.
    pub other_region_metrics: u64,
    /// S3 PUTs per month of one prober's `[evidence.s3]` segments (one per `segment`; a
    /// segment closed early at `segment_max_mb` adds one), 0 without it.
    pub evidence_puts: u64,
    /// Secrets Manager secrets read (distinct references).
    pub secrets: u64,
    /// Their `GetSecretValue` calls per month of one prober, one per `refresh` each (the
    /// reads denied attempts trigger, at most one a minute, come on top).
    pub secret_reads: u64,
    /// Per CloudWatch target a service names (each account and region bills its own series
    /// and requests): its name, series and requests per tick; empty when every service
    /// publishes to `[publish.cloudwatch]`'s target alone.
    pub targets: Vec<TargetCost>,
    /// Custom metrics per billing target (the default target and `emf` first), for the tiers.
    metrics_by_target: Vec<u64>,
}

/// What one named CloudWatch target receives.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCost {
    /// The target's name.
    pub name: String,
    /// Series it holds, the other region's ([`Estimate::other_region_metrics`]) included.
    pub metrics: u64,
    /// `PutMetricData` requests per tick to it.
    pub requests_per_tick: u64,
}

impl TargetCost {
    /// Dollars per month for its series and one prober's requests.
    pub fn usd(&self, ticks_per_month: u64) -> f64 {
        let requests = (self.requests_per_tick * ticks_per_month) as f64;
        metrics_usd(self.metrics) + requests / 1000.0 * price::PER_1000_REQUESTS
    }
}

impl Estimate {
    /// `PutMetricData` requests per month of one prober.
    pub fn requests(&self) -> u64 {
        self.requests_per_tick * self.ticks_per_month
    }
    /// EMF bytes per month of one prober.
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes_per_tick * self.ticks_per_month
    }
    /// Dollars for the custom metrics, tiered per target (each account's own tiers).
    pub fn metrics_usd(&self) -> f64 {
        self.metrics_by_target.iter().map(|n| metrics_usd(*n)).sum()
    }
    /// Dollars for one prober's requests.
    pub fn requests_usd(&self) -> f64 {
        self.requests() as f64 / 1000.0 * price::PER_1000_REQUESTS
    }
    /// Dollars for one prober's log ingestion.
    pub fn logs_usd(&self) -> f64 {
        self.log_bytes() as f64 / GB * price::LOGS_PER_GB
    }
    /// Dollars for the alarms.
    pub fn alarms_usd(&self) -> f64 {
        self.alarms as f64 * price::STANDARD_ALARM
    }
    /// Dollars for the health checks.
    pub fn health_checks_usd(&self) -> f64 {
        self.health_checks as f64 * price::AWS_ENDPOINT_HEALTH_CHECK
    }
    /// Dollars for one prober's evidence segment PUTs.
    pub fn evidence_usd(&self) -> f64 {
        self.evidence_puts as f64 / 1000.0 * price::S3_PER_1000_PUTS
    }
    /// Dollars for one prober's `GetSecretValue` calls.
    pub fn secret_reads_usd(&self) -> f64 {
        self.secret_reads as f64 / 10_000.0 * price::SECRETS_PER_10000_CALLS
    }
    /// What each prober beyond the first adds: its requests, its log ingestion, its evidence
    /// PUTs and its secret reads.
    pub fn per_extra_prober_usd(&self) -> f64 {
        self.requests_usd() + self.logs_usd() + self.evidence_usd() + self.secret_reads_usd()
    }
    /// Everything, with one prober.
    pub fn total_usd(&self) -> f64 {
        self.metrics_usd()
            + self.alarms_usd()
            + self.health_checks_usd()
            + self.per_extra_prober_usd()
    }
}

/// Dollars per month for `n` custom metrics through [`price::METRIC_TIERS`].
pub fn metrics_usd(n: u64) -> f64 {
    let (mut left, mut usd) = (n, 0.0);
    for (size, each) in price::METRIC_TIERS {
        let here = left.min(*size);
        usd += here as f64 * each;
        left -= here;
    }
    usd
}

/// A series: namespace, metric name and dimensions.
type Series<'a> = (&'a str, &'static str, Vec<(&'static str, String)>);

/// Where a sink's series are billed: `None` for the prober's account (the `emf` sink and
/// `[publish.cloudwatch]`'s own target), else a named target.
type Place = Option<Arc<str>>;

/// The series per billing place.
type PerTarget<'a> = BTreeMap<Place, BTreeSet<Series<'a>>>;

/// One publish tick of this prober: the series and `PutMetricData` requests per billing
/// place, the datums, and the EMF bytes.
#[derive(Default)]
struct Tick<'a> {
    series: PerTarget<'a>,
    requests: BTreeMap<Place, u64>,
    datums: u64,
    bytes: u64,
}

/// This prober's tick of `cfg` with the metrics `profile` sends: services of one namespace
/// with the same sinks ([`sink::sinks_of`]) share a batch, as the fold packs them.
fn this_prober(cfg: &Config, profile: MetricsProfile) -> Tick<'_> {
    type Batch = (Vec<SinkKind>, Vec<Datum>);
    let mut batches: BTreeMap<(&str, Vec<SinkId>), Batch> = BTreeMap::new();
    for s in &cfg.services {
        let sinks = sink::sinks_of(&cfg.publish, &s.publish_targets);
        let kinds = sinks.iter().map(|r| r.kind).collect();
        let ids = sinks.into_iter().map(|r| r.id).collect();
        let (_, datums) = batches
            .entry((s.namespace.as_str(), ids))
            .or_insert_with(|| (kinds, Vec::new()));
        datums.extend(service_tick(cfg, s, profile));
    }
    let mut tick = Tick::default();
    for ((ns, ids), (kinds, datums)) in &batches {
        tick.datums += datums.len() as u64;
        for (id, kind) in ids.iter().zip(kinds) {
            match kind {
                // No CloudWatch cost: its collector is no AWS bill.
                SinkKind::Otlp => continue,
                SinkKind::CloudWatch => {
                    let n = cloudwatch::batches(datums, AT).0.len() as u64;
                    *tick.requests.entry(id.target.clone()).or_default() += n;
                }
                SinkKind::Emf => {
                    tick.bytes += datums
                        .iter()
                        .filter_map(|d| emf::encode(ns, d))
                        .map(|line| line.len() as u64 + LOG_EVENT_OVERHEAD)
                        .sum::<u64>();
                }
            }
            let series = datums.iter().map(|d| (*ns, d.metric, d.dimensions.clone()));
            tick.series
                .entry(id.target.clone())
                .or_default()
                .extend(series);
        }
    }
    tick
}

/// The series the other region's prober adds for the services in the cross-region layout, per
/// billing place. It runs the same file but for `[publish.cloudwatch] region`, so a service's
/// series go where this prober sends them ([`sink::sinks_of`]), in the other region: the
/// prober's account (the `emf` sink, the default target) and each named target whose region is
/// `[publish.cloudwatch]`'s; a target of another region gets the same series from both probers.
fn other_region(cfg: &Config, profile: MetricsProfile) -> PerTarget<'_> {
    let mut per = PerTarget::new();
    for s in cfg.services.iter().filter(|s| cross_region(s)) {
        let tick = service_tick(cfg, s, profile);
        for route in sink::sinks_of(&cfg.publish, &s.publish_targets) {
            if route.kind == SinkKind::Otlp
                || route
                    .target
                    .is_some_and(|t| t.region != cfg.publish.cloudwatch.region)
            {
                continue;
            }
            let series = tick
                .iter()
                .map(|d| (s.namespace.as_str(), d.metric, d.dimensions.clone()));
            per.entry(route.id.target).or_default().extend(series);
        }
    }
    per
}

/// The estimate of `cfg` with the metrics its `publish.metrics` sends (pure).
pub fn estimate(cfg: &Config) -> Estimate {
    estimate_profile(cfg, cfg.publish.metrics)
}

/// The estimate of `cfg` had it set `publish.metrics = profile` (pure).
pub fn estimate_profile(cfg: &Config, profile: MetricsProfile) -> Estimate {
    let tick = this_prober(cfg, profile);
    let other = other_region(cfg, profile);
    let count = |per: &PerTarget<'_>, t: &Place| per.get(t).map_or(0, |s| s.len() as u64);
    let cross: Vec<&ServiceConfig> = cfg.services.iter().filter(|s| cross_region(s)).collect();
    let branches: u64 = cfg.services.iter().map(|s| s.branches.len() as u64).sum();
    let cross_branches: u64 = cross.iter().map(|s| s.branches.len() as u64).sum();
    let cross_alarms = cross_branches + ALARMS_PER_SERVICE * cross.len() as u64;
    let interval_ms = cfg.publish.interval.as_millis().max(1) as u64;
    let secrets = crate::secrets::references(cfg);
    let secret_reads = secrets
        .iter()
        .map(|r| MONTH_MS / r.refresh.as_millis().max(1) as u64)
        .sum();
    let targets = tick
        .series
        .keys()
        .filter_map(|t| {
            Some(TargetCost {
                name: t.as_deref()?.to_string(),
                metrics: count(&tick.series, t) + count(&other, t),
                requests_per_tick: tick.requests.get(t).copied().unwrap_or(0),
            })
        })
        .collect();
    // Tiered per billing place and region: places of one account tiered apart err high.
    let metrics_by_target: Vec<u64> = (tick.series.values().chain(other.values()))
        .map(|s| s.len() as u64)
        .collect();
    Estimate {
        metrics: metrics_by_target.iter().sum(),
        datums_per_tick: tick.datums,
        requests_per_tick: tick.requests.values().sum(),
        ticks_per_month: MONTH_MS / interval_ms,
        log_bytes_per_tick: tick.bytes,
        alarms: branches + ALARMS_PER_SERVICE * cfg.services.len() as u64 + cross_alarms,
        health_checks: branches + 2 * cross_branches,
        calculated_health_checks: cross_branches,
        cross_region: cross.iter().map(|s| s.service.name.clone()).collect(),
        other_region_metrics: other.values().map(|s| s.len() as u64).sum(),
        evidence_puts: cfg
            .evidence_s3
            .as_ref()
            .map_or(0, |s3| MONTH_MS / (s3.segment.as_millis().max(1) as u64)),
        secrets: secrets.len() as u64,
        secret_reads,
        targets,
        metrics_by_target,
    }
}

/// Whether a service is priced in the cross-region layout (`docs/deploy.md`, "Branches in two
/// regions"): its branches name two different `region`s. The prober cannot see the deployment,
/// so the estimate says which layout it priced.
pub fn cross_region(svc: &ServiceConfig) -> bool {
    let regions: BTreeSet<&str> = svc
        .branches
        .iter()
        .filter_map(|b| b.region.as_deref())
        .collect();
    regions.len() > 1
}

/// The steps one attempt of `kind` runs, in order.
pub(super) fn probe_steps(kind: &ProbeKind) -> &'static str {
    let tls = |mode: config::SslMode| mode != config::SslMode::Disabled;
    match kind {
        ProbeKind::Mysql(m) if tls(m.ssl_mode) => "resolve → connect → tls → auth → write → verify",
        ProbeKind::Mysql(_) => "resolve → connect → auth → write → verify",
        ProbeKind::Postgres(p) if tls(p.tls.ssl_mode) => {
            "resolve → connect → tls → auth → write → verify"
        }
        ProbeKind::Postgres(_) => "resolve → connect → auth → write → verify",
        ProbeKind::Tcp(t) if tls(t.tls.ssl_mode) => "resolve → connect → tls",
        ProbeKind::Tcp(_) => "resolve → connect",
        ProbeKind::Http(h) => match (tls(h.tls.ssl_mode), h.verify.is_some()) {
            (false, false) => "resolve → connect → write",
            (false, true) => "resolve → connect → write → verify",
            (true, false) => "resolve → connect → tls → write",
            (true, true) => "resolve → connect → tls → write → verify",
        },
        ProbeKind::Otlp(o) if tls(o.tls.ssl_mode) => "resolve → connect → tls → write",
        ProbeKind::Otlp(_) => "resolve → connect → write",
    }
}

/// The datums of one service's tick at steady state: every branch known and ready, every step
/// of every attempt since the previous tick succeeded, a stable-name round made.
/// Only the metrics `profile` sends.
fn service_tick(cfg: &Config, svc: &ServiceConfig, profile: MetricsProfile) -> Vec<Datum> {
    let steps: Vec<&'static str> = probe_steps(&svc.probe.kind).split(" → ").collect();
    let tls = steps.contains(&"tls");
    let tick_ms = cfg.publish.interval.as_millis();
    let probe_ms = svc.probe.interval.as_millis().max(1);
    let attempts = tick_ms.div_ceil(probe_ms).max(1) as u64;
    let branches: Vec<BranchTick> = svc
        .branches
        .iter()
        .map(|b| BranchTick {
            branch: b.name.clone(),
            readiness: Some(1.0),
            is_ready: true,
            is_known: true,
            success_rate: Some(100.0),
            attempts,
            failed: 0,
            step_durations: steps
                .iter()
                .map(|s| (*s, vec![SAMPLE_MS; attempts as usize]))
                .collect(),
            cert_not_after: tls.then_some(AT + 90 * 86_400_000),
        })
        .collect();
    let name = &svc.service.name;
    let mut out = sink::tick_datums(name, &branches, AT);
    let stable = &cfg.stable_name_probe;
    if stable.enabled {
        out.push(sink::selected_branch_datum(name, 1.0, AT));
        if stable.end_to_end {
            out.push(sink::stable_name_success_datum(name, 1.0, AT));
        }
    }
    sink::for_profile(out, profile)
}

/// Synthetics canary runs per month at one run a minute.
pub const CANARY_RUNS_PER_MONTH: u64 = MONTH_MS / 60_000;

/// Dollars per month of one CloudWatch Synthetics canary per branch of `cfg`, one run a minute,
/// each with the alarm and `CLOUDWATCH_METRIC` health check a failover record needs (its
/// Lambda, storage, logs and network interfaces left out: a floor).
pub fn canaries_usd(cfg: &Config) -> f64 {
    let branches: usize = cfg.services.iter().map(|s| s.branches.len()).sum();
    let each = CANARY_RUNS_PER_MONTH as f64 * price::CANARY_RUN
        + price::STANDARD_ALARM
        + price::AWS_ENDPOINT_HEALTH_CHECK;
    branches as f64 * each
}

/// The `check` line comparing both `publish.metrics` profiles of `cfg` (one prober each) with
/// one Synthetics canary per branch.
pub fn profiles_line(cfg: &Config) -> String {
    let canaries = canaries_usd(cfg);
    let part = |p: MetricsProfile| {
        let usd = estimate_profile(cfg, p).total_usd();
        let ratio = if usd > 0.0 { canaries / usd } else { 0.0 };
        let mark = if p == cfg.publish.metrics {
            " (this config)"
        } else {
            ""
        };
        format!("{} ${usd:.2}{mark}, 1/{ratio:.1}", p.as_str())
    };
    format!(
        "  publish.metrics profiles vs one Synthetics canary per branch (${canaries:.2}, a run a minute, its alarm and health check): {}; {}",
        part(MetricsProfile::Full),
        part(MetricsProfile::Control)
    )
}

/// `n` with a comma between groups of three digits: `43,200`.
pub(super) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The rows of each named target, then the rest (the default target and the `emf` sink's
/// series, in the prober's own account) when some target is named: what, detail, dollars.
fn target_rows(e: &Estimate) -> Vec<(String, String, f64)> {
    if e.targets.is_empty() {
        return Vec::new();
    }
    let own = TargetCost {
        name: "the prober's account (default target, emf)".into(),
        metrics: e.metrics - e.targets.iter().map(|t| t.metrics).sum::<u64>(),
        requests_per_tick: e.requests_per_tick
            - e.targets.iter().map(|t| t.requests_per_tick).sum::<u64>(),
    };
    e.targets
        .iter()
        .map(|t| (format!("  of which to {}", t.name), t))
        .chain((own.metrics > 0).then(|| (format!("  of which in {}", own.name), &own)))
        .map(|(what, t)| {
            let detail = format!(
                "{} series, {} request{} per tick (in the rows above; that account bills them)",
                grouped(t.metrics),
                t.requests_per_tick,
                if t.requests_per_tick == 1 { "" } else { "s" }
            );
            (what, detail, t.usd(e.ticks_per_month))
        })
        .collect()
}

/// The `check` section: one line per item, the total, what a further prober adds, and what the
/// estimate leaves out.
pub fn section(e: &Estimate) -> String {
    let usd = |v: f64| format!("${v:.2}");
    let mut lines = vec![
        "estimated AWS cost per month (us-east-1 list prices of 2026-12-01, 30-day month, one prober; no free tier):".to_string(),
    ];
    let mut row = |what: &str, detail: String, v: f64| {
        lines.push(format!("  {what:<22} {detail:<58} {:>9}", usd(v)));
    };
    row(
        "custom metrics",
        format!(
            "{} series, ${:.2} each up to {}",
            grouped(e.metrics),
            price::METRIC_TIERS[0].1,
            grouped(price::METRIC_TIERS[0].0)
        ),
        e.metrics_usd(),
    );
    if e.requests_per_tick > 0 {
        row(
            "PutMetricData",
            format!(
                "{} requests ({} per tick of {} datums), ${:.2} per 1,000",
                grouped(e.requests()),
                e.requests_per_tick,
                grouped(e.datums_per_tick),
                price::PER_1000_REQUESTS
            ),
            e.requests_usd(),
        );
    }
    for (what, detail, usd) in target_rows(e) {
        row(&what, detail, usd);
    }
    if e.log_bytes_per_tick > 0 {
        row(
            "CloudWatch Logs (emf)",
            format!(
                "{:.1} MB ingested ({} bytes per tick), ${:.2} per GB",
                e.log_bytes() as f64 / 1e6,
                grouped(e.log_bytes_per_tick),
                price::LOGS_PER_GB
            ),
            e.logs_usd(),
        );
    }
    if e.evidence_puts > 0 {
        row(
            "S3 evidence PUTs",
            format!(
                "{} segments, ${:.3} per 1,000 PUTs",
                grouped(e.evidence_puts),
                price::S3_PER_1000_PUTS
            ),
            e.evidence_usd(),
        );
    }
    if e.secrets > 0 {
        row(
            "GetSecretValue",
            format!(
                "{} calls ({} secret{}, each every refresh), ${:.2} per 10,000",
                grouped(e.secret_reads),
                e.secrets,
                if e.secrets == 1 { "" } else { "s" },
                price::SECRETS_PER_10000_CALLS
            ),
            e.secret_reads_usd(),
        );
    }
    row(
        "alarms",
        format!(
            "{} standard resolution, ${:.2} each",
            e.alarms,
            price::STANDARD_ALARM
        ),
        e.alarms_usd(),
    );
    let calculated = match e.calculated_health_checks {
        0 => String::new(),
        n => format!(" + {n} CALCULATED"),
    };
    row(
        "Route 53 health checks",
        format!(
            "{} CLOUDWATCH_METRIC{calculated}, ${:.2} each",
            e.health_checks - e.calculated_health_checks,
            price::AWS_ENDPOINT_HEALTH_CHECK
        ),
        e.health_checks_usd(),
    );
    row("total", String::new(), e.total_usd());
    lines.push(format!(
        "  each further prober (the prober stack runs one per subnet) adds {} (its requests, log bytes, evidence PUTs and GetSecretValue calls; series, alarms and health checks are shared)",
        usd(e.per_extra_prober_usd())
    ));
    lines.push(layout_line(e));
    lines.push("  not counted: series published only while something fails (ServiceUnavailable, PublishFailures, StoreSyncFailures), transition datums, the prober's own logs, log storage, evidence storage, the tasks, the state store".into());
    lines.join("\n")
}

/// With the `otlp` sink: the line saying it costs nothing on AWS's bill (what its collector's
/// backend bills is not known here); `None` without it.
pub fn otlp_line(cfg: &Config) -> Option<String> {
    cfg.publish.otlp.as_ref().map(|_| {
        "  otlp sink: no CloudWatch cost (every metric goes to the collector, whatever publish.metrics; what its backend bills is not counted)".to_string()
    })
}

/// Which layout the alarms and health checks were priced for.
fn layout_line(e: &Estimate) -> String {
    if e.cross_region.is_empty() {
        return "  layout priced: one region (the branches name no two regions): one alarm and one CLOUDWATCH_METRIC health check per branch".into();
    }
    format!(
        "  layout priced for {} (branches in two regions): the cross-region layout, a prober in each region: alarms in both regions, per branch a CLOUDWATCH_METRIC health check per region and a CALCULATED one, the other region's {} series; the other prober's requests are a further prober's",
        e.cross_region.join(", "),
        grouped(e.other_region_metrics)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use std::path::Path;

    fn load(name: &str) -> Config {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("probes")
            .join(name);
        config::load(&path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Cents, so that sums compare exactly.
    fn cents(usd: f64) -> i64 {
        (usd * 100.0).round() as i64
    }

    /// `n` `[[service]]`s of two `tcp` branches without TLS, in `namespace` (or the default).
    fn tcp_fleet(n: usize, namespace: Option<&str>, publish: &str) -> Config {
        let mut text = format!(
            "state_dir = \"/tmp/x\"\n[publish]\ninterval = \"{publish}\"\nsinks = [\"cloudwatch\"]\n[readiness]\nmin_attempts = 5\n[probe]\nkind = \"tcp\"\ninterval = \"10s\"\n[probe.tcp]\nport = 5672\n[probe.tls]\nssl_mode = \"disabled\"\n"
        );
        for i in 0..n {
            let ns = namespace
                .map(|ns| format!("namespace = \"{ns}\"\n"))
                .unwrap_or_default();
            text.push_str(&format!(
                "[[service]]\nname = \"s{i}\"\nstable_name = \"s{i}.internal.example\"\n{ns}\
                 [[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p{i}.internal.example\"\n\
                 [[service.branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"q{i}.internal.example\"\n"
            ));
        }
        config::parse(Path::new("/etc/readyprobe/fleet.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// One PUT per segment: a 1-minute segment is 43,200 PUTs in a 30-day month.
    #[test]
    fn evidence_segments_are_priced_per_put() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/probes/orders-db.toml"
        ))
        .unwrap();
        let with = format!("{text}\n[evidence.s3]\nbucket = \"drills\"\n");
        let cfg = config::parse(Path::new("/etc/readyprobe/orders.toml"), &with).unwrap();
        let e = estimate(&cfg);
        assert_eq!(e.evidence_puts, 43_200);
        assert_eq!(cents(e.evidence_usd()), 22);
        assert!(section(&e).contains("S3 evidence PUTs"), "{}", section(&e));
        assert_eq!(estimate(&load("orders-db.toml")).evidence_puts, 0);
    }

    /// One read per `refresh` per distinct secret: two headers naming one secret are one.
    #[test]
    fn secret_reads_per_month() {
        let text = "state_dir = \"/tmp/x\"\n[service]\nname = \"api\"\nstable_name = \"api.internal.example\"\n[probe]\nkind = \"http\"\n[probe.tls]\nssl_ca = \"/etc/ca.pem\"\n[probe.http]\npath = \"/\"\nheaders = { authorization = { secrets_manager = \"api/token\", refresh = \"10m\" }, x-api-key = { secrets_manager = \"api/token\", refresh = \"10m\" }, x-b = { secrets_manager = \"api/other\" } }\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"p.internal.example\"\n";
        let cfg = config::parse(Path::new("/etc/readyprobe/api.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let e = estimate(&cfg);
        // 30 days: 4,320 reads every 10 min, 8,640 every 5 min.
        assert_eq!((e.secrets, e.secret_reads), (2, 12_960));
        assert_eq!(cents(e.secret_reads_usd() * 100.0), 648);
        assert!(section(&e).contains("12,960 calls (2 secrets, each every refresh)"));
    }

    /// A 30 s poll of an `s3://` config is 86,400 GETs in a 30-day month.
    #[test]
    fn config_poll_reads_per_month() {
        assert_eq!(
            config_poll_line(std::time::Duration::from_secs(30)),
            "config poll: every 30s, 86,400 GetObject requests a month per prober, $0.03 at $0.0004 per 1,000"
        );
    }

    #[test]
    fn grouped_digits() {
        let g: Vec<String> = [0, 999, 1_000, 43_200, 1_234_567].map(grouped).into();
        assert_eq!(g, ["0", "999", "1,000", "43,200", "1,234,567"]);
    }

    #[test]
    fn metric_tiers() {
        assert_eq!(cents(metrics_usd(0)), 0);
        // 10,000 × $0.30 = $3,000.00; one more at $0.10.
        assert_eq!(cents(metrics_usd(10_000)), 300_000);
        assert_eq!(cents(metrics_usd(10_001)), 300_010);
        // $3,000 + 240,000 × $0.10 = $27,000; the next at $0.05.
        assert_eq!(cents(metrics_usd(250_000)), 2_700_000);
        assert_eq!(cents(metrics_usd(250_001)), 2_700_005);
        // $27,000 + 750,000 × $0.05 = $64,500; then $0.02 each.
        assert_eq!(cents(metrics_usd(1_000_000)), 6_450_000);
        assert_eq!(cents(metrics_usd(1_000_100)), 6_450_200);
    }

    /// probes/orders-db.toml: one mysql service with TLS, two branches, both sinks, 60 s ticks.
    #[test]
    fn orders_db() {
        let e = estimate(&load("orders-db.toml"));
        // Per branch: Readiness, SuccessRate, Attempts, FailedAttempts, CertificateExpiryDays,
        // StepDuration × 6 steps (resolve, connect, tls, auth, write, verify) = 11; × 2
        // branches + Heartbeat + BothBranchesUnready = 24.
        assert_eq!(e.metrics, 24);
        assert_eq!(e.datums_per_tick, 24);
        assert_eq!(cents(e.metrics_usd()), 720); // 24 × $0.30
        // 24 datums fit one request; 30 days × 1,440 ticks = 43,200 requests × $0.01 / 1,000.
        assert_eq!((e.requests_per_tick, e.ticks_per_month), (1, 43_200));
        assert_eq!(e.requests(), 43_200);
        assert_eq!(cents(e.requests_usd()), 43); // $0.432
        // 2 readiness alarms + heartbeat, fail-open, service-unavailable = 5 × $0.10.
        assert_eq!((e.alarms, cents(e.alarms_usd())), (5, 50));
        // 2 CLOUDWATCH_METRIC health checks × $0.50.
        assert_eq!((e.health_checks, cents(e.health_checks_usd())), (2, 100));
        // EMF: 24 lines a tick, each a few hundred bytes (StepDuration carries the 30 samples
        // of a 2 s probe in a 60 s tick).
        assert!(
            (24 * 150..24 * 1_500).contains(&e.log_bytes_per_tick),
            "{e:?}"
        );
        assert_eq!(e.log_bytes(), e.log_bytes_per_tick * 43_200);
        let sum = e.metrics_usd() + e.requests_usd() + e.logs_usd() + 0.50 + 1.00;
        assert_eq!(cents(e.total_usd()), cents(sum));
        assert_eq!(
            cents(e.per_extra_prober_usd()),
            cents(e.requests_usd() + e.logs_usd())
        );
    }

    /// probes/orders-db-cross-region.toml: orders-db with its branches in two regions, priced
    /// as the templates deploy the cross-region layout.
    #[test]
    fn branches_in_two_regions_are_priced_in_the_cross_region_layout() {
        let e = estimate(&load("orders-db-cross-region.toml"));
        // orders-db's 24 series in each region's CloudWatch, each fed by its region's prober.
        assert_eq!(e.metrics, 48);
        assert_eq!(cents(e.metrics_usd()), 1_440); // 48 × $0.30
        // orders-db's 5 alarms in each region (the AlarmsOnly stack makes the same five).
        assert_eq!((e.alarms, cents(e.alarms_usd())), (10, 100));
        // Per branch a CLOUDWATCH_METRIC check per region and a CALCULATED one: 6 × $0.50.
        assert_eq!((e.health_checks, cents(e.health_checks_usd())), (6, 300));
        let text = section(&e);
        assert!(
            text.contains("4 CLOUDWATCH_METRIC + 2 CALCULATED"),
            "{text}"
        );
        assert!(
            text.contains("layout priced for orders-db (branches in two regions)"),
            "{text}"
        );
        // One prober's requests, as in one region; the other prober's are a further prober's.
        assert_eq!(e.requests(), estimate(&load("orders-db.toml")).requests());
        let one = section(&estimate(&load("orders-db.toml")));
        assert!(one.contains("layout priced: one region"), "{one}");
    }

    /// probes/fleet.toml: two mysql services (24 series each, as above) and an http one with
    /// TLS (per branch 4 + CertificateExpiryDays + 4 steps = 9; × 2 + 2 = 20): 68 series, the
    /// 68 datums a minute the plan's summary counts.
    #[test]
    fn fleet() {
        let cfg = load("fleet.toml");
        let e = estimate(&cfg);
        assert_eq!((e.metrics, e.datums_per_tick), (68, 68));
        assert!(
            super::super::plan(&cfg).contains("up to 68 datums/min"),
            "the summary and the estimate count the same datums"
        );
        assert_eq!(cents(e.metrics_usd()), 2_040); // 68 × $0.30
        assert_eq!(e.requests(), 43_200); // one namespace, 68 datums: 1 request a tick
        assert_eq!((e.alarms, cents(e.alarms_usd())), (15, 150)); // 3 × (2 + 3) × $0.10
        assert_eq!((e.health_checks, cents(e.health_checks_usd())), (6, 300)); // 6 × $0.50
    }

    /// The requests follow the sink's batching: 1,000 datums a request, a batch per namespace.
    #[test]
    fn requests_follow_the_batching() {
        // tcp without TLS: per branch 4 + 2 steps = 6; × 2 + 2 = 14 datums per service.
        // 100 services: 1,400 datums a tick = 2 requests (1,000 + 400).
        let e = estimate(&tcp_fleet(100, None, "60s"));
        assert_eq!((e.metrics, e.datums_per_tick), (1_400, 1_400));
        assert_eq!(e.requests_per_tick, 2);
        assert_eq!(e.requests(), 86_400); // 2 × 43,200
        assert_eq!(cents(e.requests_usd()), 86); // $0.864
        assert_eq!(cents(e.metrics_usd()), 42_000); // 1,400 × $0.30
        assert_eq!(e.log_bytes_per_tick, 0, "no emf sink");
        // 50 services in another namespace: 700 datums there, 700 in the default: 2 requests.
        let mut cfg = tcp_fleet(100, None, "60s");
        for s in cfg.services.iter_mut().take(50) {
            s.namespace = "Other".into();
        }
        assert_eq!(estimate(&cfg).requests_per_tick, 2);
        // A 30 s tick doubles the requests, not the series.
        let e = estimate(&tcp_fleet(1, None, "30s"));
        assert_eq!(
            (e.metrics, e.requests_per_tick, e.ticks_per_month),
            (14, 1, 86_400)
        );
    }

    /// probes/orders-db.toml under both profiles: `control` keeps the 4 series alarms read
    /// and costs at most 1/20 of one canary per branch.
    #[test]
    fn control_profile_of_orders_db() {
        let cfg = load("orders-db.toml");
        assert_eq!(cfg.publish.metrics, MetricsProfile::Full);
        let full = estimate_profile(&cfg, MetricsProfile::Full);
        assert_eq!(full, estimate(&cfg));
        let control = estimate_profile(&cfg, MetricsProfile::Control);
        // 2 × Readiness + Heartbeat + BothBranchesUnready.
        assert_eq!((control.metrics, control.datums_per_tick), (4, 4));
        assert_eq!(cents(control.metrics_usd()), 120);
        assert_eq!(control.requests(), full.requests());
        assert!(control.log_bytes_per_tick < full.log_bytes_per_tick / 5);
        assert_eq!((control.alarms, control.health_checks), (full.alarms, 2));
        // 2 × (43,200 × $0.0012 + $0.10 + $0.50).
        assert_eq!(cents(canaries_usd(&cfg)), 10_488);
        assert!(
            control.total_usd() * 20.0 <= canaries_usd(&cfg),
            "{control:?}"
        );
        let line = profiles_line(&cfg);
        assert!(line.contains("($104.88"), "{line}");
        assert!(line.contains("full $9.43 (this config), 1/11.1"), "{line}");
        assert!(line.contains("control $"), "{line}");
    }

    #[test]
    fn section_of_orders_db() {
        let text = section(&estimate(&load("orders-db.toml")));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("estimated AWS cost per month"),
            "{text}"
        );
        assert!(
            lines[1].contains("24 series") && lines[1].ends_with("$7.20"),
            "{text}"
        );
        assert!(
            lines[2].contains("43,200 requests") && lines[2].ends_with("$0.43"),
            "{text}"
        );
        assert!(lines[3].starts_with("  CloudWatch Logs (emf)"), "{text}");
        assert!(
            lines[4].ends_with("$0.50") && lines[5].ends_with("$1.00"),
            "{text}"
        );
        assert!(lines[6].starts_with("  total"), "{text}");
    }

    /// probes/orders-db-cross-region.toml with `sinks` and orders-db's `publish` set to `publish`.
    fn cross_region_with(sinks: &str, publish: &str) -> Estimate {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/probes/orders-db-cross-region.toml"
        ))
        .unwrap();
        let stable = "stable_name = \"mysql.orders.internal.example\"";
        let text = text
            .replacen(stable, &format!("{stable}\n{publish}"), 1)
            .replacen(
                "sinks = [\"cloudwatch\", \"emf\"]",
                &format!("sinks = {sinks}"),
                1,
            );
        let cfg = config::parse(Path::new("/etc/readyprobe/orders.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.services[0].branches.len(), 2);
        estimate(&cfg)
    }

    /// The row of named target `name`, or of the prober's account for `None`, in `e`'s section.
    fn row_of(e: &Estimate, name: Option<&str>) -> Option<String> {
        let head = match name {
            Some(n) => format!("of which to {n} "),
            None => "of which in the prober's account".into(),
        };
        section(e)
            .lines()
            .find(|l| l.contains(&head))
            .map(str::to_string)
    }

    /// The cross-region layout with a target in another account: the other region's prober
    /// runs the same file, so its series go where this prober's go (a target that follows
    /// `[publish.cloudwatch] region` gets them in the other region), never to the prober's
    /// account unless the datums go there (the default target or `emf`).
    #[test]
    fn the_other_regions_series_go_where_the_services_datums_go() {
        let zone = "{ name = \"zone\", role_arn = \"arn:aws:iam::111122223333:role/p\" }";
        // Only the target in another account: the prober's account gets no series at all.
        let e = cross_region_with("[\"cloudwatch\"]", &format!("publish = {zone}"));
        assert_eq!((e.metrics, e.other_region_metrics), (48, 24), "{e:?}");
        assert_eq!(e.targets.len(), 1);
        assert_eq!(
            (e.targets[0].metrics, e.targets[0].requests_per_tick),
            (48, 1)
        );
        assert_eq!(row_of(&e, None), None, "{}", section(&e));
        let zone_row = row_of(&e, Some("zone")).unwrap_or_default();
        assert!(
            zone_row.contains(" 48 series, 1 request per tick"),
            "{zone_row}"
        );
        // With emf too: 24 series in each region of each account.
        let e = cross_region_with("[\"cloudwatch\", \"emf\"]", &format!("publish = {zone}"));
        assert_eq!((e.metrics, e.other_region_metrics), (96, 48), "{e:?}");
        assert_eq!(e.targets[0].metrics, 48);
        let own = row_of(&e, None).unwrap_or_default();
        assert!(
            own.contains(" 48 series, 0 requests per tick"),
            "{}",
            section(&e)
        );
        // The default target and the other account's: each gets both regions' 24.
        let both = format!("publish = [{zone}, {{ region = \"eu-west-1\" }}]");
        let e = cross_region_with("[\"cloudwatch\"]", &both);
        assert_eq!((e.metrics, e.other_region_metrics), (96, 48), "{e:?}");
        let own = row_of(&e, None).unwrap_or_default();
        assert!(
            own.contains(" 48 series, 1 request per tick"),
            "{}",
            section(&e)
        );
        // A target pinned to another region gets the same series from both probers.
        let pinned = "publish = { name = \"zone\", region = \"us-east-1\", role_arn = \"arn:aws:iam::111122223333:role/p\" }";
        let e = cross_region_with("[\"cloudwatch\"]", pinned);
        assert_eq!((e.metrics, e.other_region_metrics), (24, 0), "{e:?}");
        assert_eq!(row_of(&e, None), None, "{}", section(&e));
    }

    /// A service publishing to two targets: each bills its own series and requests, the
    /// default target the other service's; `check` lists each named target with its share.
    #[test]
    fn each_named_target_is_priced_apart() {
        let text = "state_dir = \"/tmp/x\"\n[publish]\nsinks = [\"cloudwatch\"]\n[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 1\n[probe.tls]\nssl_mode = \"disabled\"\n[[service]]\nname = \"a\"\nstable_name = \"a.internal.example\"\npublish = [{ region = \"eu-west-1\" }, { region = \"us-east-1\", role_arn = \"arn:aws:iam::111122223333:role/p\" }]\n[[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a1.internal.example\"\n[[service]]\nname = \"b\"\nstable_name = \"b.internal.example\"\n[[service.branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"b1.internal.example\"\n";
        let cfg = config::parse(std::path::Path::new("t.toml"), text).unwrap();
        let e = estimate(&cfg);
        let one = e.targets[0].metrics;
        assert_eq!(e.targets.len(), 2);
        assert_eq!(e.targets[0].name, "eu-west-1");
        assert_eq!(e.targets[1].name, "us-east-1@111122223333/p");
        assert_eq!(e.targets[1].metrics, one);
        // Service b (the default target) has as many series as a, in one more account.
        assert_eq!(e.metrics, 3 * one);
        assert_eq!(e.requests_per_tick, 3);
        assert_eq!(cents(e.metrics_usd()), cents(3.0 * metrics_usd(one)));
        let text = section(&e);
        assert!(
            text.contains("of which to us-east-1@111122223333/p"),
            "{text}"
        );
        // The rest of the series, service b's, is named too: the rows add up to the total.
        assert!(
            text.contains(&format!(
                "of which in the prober's account (default target, emf) {one} series, 1 request per tick"
            )),
            "{text}"
        );
    }

    /// The otlp sink adds no row and no dollar: the same estimate with it as without, and one
    /// line saying so.
    #[test]
    fn the_otlp_sink_has_no_cloudwatch_cost() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("probes")
            .join("orders-db.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let without = config::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(otlp_line(&without), None);
        let with = text.replacen(
            "[publish]",
            "[publish.otlp]\nendpoint = \"http://127.0.0.1:4318\"\n\n[publish]",
            1,
        );
        let sinks = with
            .lines()
            .find(|l| l.starts_with("sinks"))
            .unwrap()
            .to_string();
        let with = with.replacen(&sinks, &sinks.replacen('[', "[\"otlp\", ", 1), 1);
        let with = config::parse(&path, &with).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(estimate(&with), estimate(&without));
        assert!(otlp_line(&with).unwrap().contains("no CloudWatch cost"));
        let plan = crate::cli::plan::plan(&with);
        assert!(
            plan.contains("to otlp, cloudwatch, emf (stdout) in namespace"),
            "{plan}"
        );
        assert!(plan.contains("  otlp: POST http://127.0.0.1:4318/v1/metrics (OTLP/HTTP protobuf, every metric whatever publish.metrics; 10s a try, 3 tries)"), "{plan}");
        assert!(plan.contains("otlp sink: no CloudWatch cost"), "{plan}");
    }
}
