//! The text `check` prints: branches, steps, metrics and dimensions, the policy arithmetic. Pure.

use super::cost::probe_steps;
use crate::config::{self, Config, ProbeKind, ServiceConfig, SinkKind};
use crate::contract;
use std::path::PathBuf;

/// The `check` plan (pure): branches, steps, metrics and dimensions, the policy arithmetic.
pub fn plan(cfg: &Config) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write_plan(&mut s, cfg);
    s
}

fn write_plan(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "{}: valid", cfg.source.display())?;
    for svc in &cfg.services {
        let ns = if svc.namespace == cfg.publish.namespace {
            String::new()
        } else {
            format!(", namespace {}", svc.namespace)
        };
        writeln!(
            s,
            "service {} (stable name {}, never probed as a branch{ns})",
            svc.service.name, svc.service.stable_name
        )?;
        plan_probe(s, cfg, svc)?;
        plan_branches(s, svc)?;
        plan_readiness(s, svc)?;
        plan_targets(s, cfg, svc)?;
    }
    plan_publish(s, cfg)?;
    plan_evidence_and_state(s, cfg)?;
    if let Some(serve) = &cfg.serve {
        writeln!(
            s,
            "serve: /metrics, /healthz and /status on http://{} (at most {} connections, request timeout {})",
            serve.listen,
            serve.max_connections,
            crate::clock::fmt_duration(serve.request_timeout)
        )?;
    }
    writeln!(s, "{}", super::cost::section(&super::cost::estimate(cfg)))?;
    writeln!(s, "{}", super::cost::profiles_line(cfg))?;
    if let Some(line) = super::cost::otlp_line(cfg) {
        writeln!(s, "{line}")?;
    }
    writeln!(s, "{}", summary(cfg))?;
    for w in &cfg.warnings {
        writeln!(s, "warning: {w}")?;
    }
    Ok(())
}

/// Where the service's CloudWatch datums go: each target's region, role and endpoint (a target
/// bills its own series and requests: `check`'s cost lists each named one).
fn plan_targets(s: &mut String, cfg: &Config, svc: &ServiceConfig) -> std::fmt::Result {
    use std::fmt::Write;
    if !cfg.publish.sinks.contains(&SinkKind::CloudWatch) {
        return Ok(());
    }
    for t in &svc.publish_targets {
        let region = t.region.as_deref().unwrap_or("the AWS chain's");
        let role = t.role.as_ref().map_or_else(
            || "the prober's own credentials".to_string(),
            |r| {
                let ext = if r.external_id.is_some() {
                    ", with an external id"
                } else {
                    ""
                };
                format!(
                    "role {} (STS AssumeRole, session {}{ext})",
                    r.role_arn,
                    config::session_name(&cfg.prober_id)
                )
            },
        );
        let endpoint = t.endpoint_url.as_deref().unwrap_or("AWS's");
        writeln!(
            s,
            "  publishes to CloudWatch target {}: region {region}, {role}, endpoint {endpoint}",
            t.name
        )?;
    }
    Ok(())
}

/// The load of the whole config in one line: services, branches, attempts per second and the
/// most datums a minute of publish ticks carries (every step succeeding, every branch known, a
/// stable-name round made).
fn summary(cfg: &Config) -> String {
    let (mut branches, mut per_s, mut per_tick) = (0, 0.0, 0);
    for svc in &cfg.services {
        let n = svc.branches.len();
        branches += n;
        per_s += n as f64 / svc.probe.interval.as_secs_f64();
        let steps = probe_steps(&svc.probe.kind);
        let tls = usize::from(steps.contains("tls"));
        // Readiness, SuccessRate, Attempts, FailedAttempts, one StepDuration per step, and
        // CertificateExpiryDays with TLS; Heartbeat and BothBranchesUnready per service.
        per_tick += n * (4 + steps.split(" → ").count() + tls) + 2;
    }
    // SelectedBranch per service with the stable-name probe, and StableNameSuccess with its
    // end-to-end attempt.
    let stable = &cfg.stable_name_probe;
    per_tick += cfg.services.len()
        * (usize::from(stable.enabled) + usize::from(stable.enabled && stable.end_to_end));
    let ticks_per_min = 60.0 / cfg.publish.interval.as_secs_f64();
    let services = cfg.services.len();
    format!(
        "summary: {services} service{}, {branches} branch{}, {per_s:.1} attempts/s, up to {:.0} datums/min",
        if services == 1 { "" } else { "s" },
        if branches == 1 { "" } else { "es" },
        per_tick as f64 * ticks_per_min
    )
}

/// The probe section: schedule and steps, the kind's own settings, where DNS answers come from.
fn plan_probe(s: &mut String, cfg: &Config, svc: &ServiceConfig) -> std::fmt::Result {
    use std::fmt::Write;
    let d = crate::clock::fmt_duration;
    writeln!(
        s,
        "probe kind {} every {} (attempt timeout {}, first-attempt jitter ≤ {}): {}",
        svc.probe.kind.name(),
        d(svc.probe.interval),
        d(svc.probe.timeout),
        d(svc.probe.jitter),
        probe_steps(&svc.probe.kind)
    )?;
    writeln!(s, "  {}", pacing(&svc.probe))?;
    writeln!(s, "  {}", kind_settings(&svc.probe.kind))?;
    let dns = match &cfg.dns.nameservers {
        Some(ns) => ns
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        None => format!("nameservers from {}", cfg.dns.resolv_conf.display()),
    };
    writeln!(s, "  dns: {dns}")
}

/// Adaptive probing in one line: the interval while suspect and the attempts a branch makes a
/// day at steady state and while suspect (never two in flight: attempts that last their whole
/// timeout come once per timeout).
fn pacing(p: &config::ProbeConfig) -> String {
    let d = crate::clock::fmt_duration;
    let per_day = |every: std::time::Duration| {
        super::cost::grouped((86_400_000 / every.as_millis().max(1)) as u64)
    };
    let steady = per_day(p.interval);
    let Some(fast) = p.suspect_interval else {
        return format!(
            "adaptive probing off (no probe.suspect_interval): {steady} attempts/day per branch"
        );
    };
    let hung = if p.timeout > fast {
        format!(
            ", {} when every attempt takes its whole timeout",
            per_day(p.timeout)
        )
    } else {
        String::new()
    };
    format!(
        "while suspect (a condition holding, not yet fired, or unready) every {}: per branch {steady} attempts/day at steady state, up to {} while suspect{hung}",
        d(fast),
        per_day(fast)
    )
}

/// One line of the kind's own settings (never a secret's value).
fn kind_settings(kind: &ProbeKind) -> String {
    let ca = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| format!(", CA {}", p.display()))
            .unwrap_or_default()
    };
    match kind {
        ProbeKind::Mysql(m) => format!(
            "mysql user {} (password from {}), canary {}.{}, ssl_mode {}{}, TLS ≥ {}{}",
            m.user,
            m.password,
            m.database,
            m.table,
            m.ssl_mode.as_str(),
            ca(&m.ssl_ca),
            match m.tls_min_version {
                crate::config::MinVersion::Tls12 => "1.2",
                crate::config::MinVersion::Tls13 => "1.3",
            },
            m.client_identity
                .as_ref()
                .map(|c| format!(", client certificate {}", c.cert.display()))
                .unwrap_or_default()
        ),
        ProbeKind::Postgres(p) => format!(
            "postgres user {} (password from {}), canary {}.{}.{}, ssl_mode {}{}, TLS ≥ {}{}",
            p.user,
            p.password,
            p.database,
            p.schema,
            p.table,
            p.tls.ssl_mode.as_str(),
            ca(&p.tls.ssl_ca),
            match p.tls.tls_min_version {
                crate::config::MinVersion::Tls12 => "1.2",
                crate::config::MinVersion::Tls13 => "1.3",
            },
            p.tls
                .client_identity
                .as_ref()
                .map(|c| format!(", client certificate {}", c.cert.display()))
                .unwrap_or_default()
        ),
        ProbeKind::Otlp(o) => format!(
            "otlp POST {} (one marked gauge data point, OTLP/HTTP protobuf), ssl_mode {}",
            o.path,
            o.tls.ssl_mode.as_str()
        ),
        ProbeKind::Http(h) => format!(
            "http {} {}{}, ssl_mode {}, accepted status {}{}",
            h.request.method,
            h.request.path,
            h.verify
                .as_ref()
                .map(|v| format!(" then verify {} {}", v.method, v.path))
                .unwrap_or_default(),
            h.tls.ssl_mode.as_str(),
            if h.request.expect_status.is_empty() {
                "2xx".to_string()
            } else {
                format!("{:?}", h.request.expect_status)
            },
            h.expect_header
                .as_ref()
                .map(|(n, v)| format!(", response header {n} must be {v:?}"))
                .unwrap_or_default()
        ),
        ProbeKind::Tcp(t) => format!(
            "tcp, ssl_mode {}{} (liveness-level: proves the port answers, not that the branch can do its job)",
            t.tls.ssl_mode.as_str(),
            ca(&t.tls.ssl_ca)
        ),
    }
}

fn plan_branches(s: &mut String, svc: &ServiceConfig) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "branches:")?;
    for b in &svc.branches {
        writeln!(
            s,
            "  {:<12} {:<9} {}:{}{}",
            b.name,
            b.role.as_str(),
            b.endpoint,
            b.port,
            token_region(svc, b)
        )?;
    }
    Ok(())
}

/// With an RDS IAM password, the region the branch's token is signed for, and when the branch's
/// `region` overrides `rds_iam.region`, that it does.
fn token_region(svc: &ServiceConfig, b: &config::Branch) -> String {
    let Some((_, config::SecretRef::RdsIam { region })) = svc.probe.kind.database_login() else {
        return String::new();
    };
    match (b.token_region(region.as_deref()), region) {
        (Some(r), Some(default)) if r != default => {
            format!(", RDS IAM token for {r} (the branch's region, not rds_iam.region {default})")
        }
        (Some(r), _) => format!(", RDS IAM token for {r}"),
        (None, _) => String::new(),
    }
}

/// The readiness policy, with what one failed attempt does to each condition.
fn plan_readiness(s: &mut String, svc: &ServiceConfig) -> std::fmt::Result {
    use std::fmt::Write;
    let p = &svc.policy;
    let effect = |c, unready| config::one_failure_effect(c, svc.probe.interval, unready);
    let effects = [
        effect(&p.declare_unready, true),
        effect(&p.declare_ready, false),
    ];
    let lines = crate::readiness::policy_lines(p, Some(effects));
    let (head, rules) = lines.split_first().expect("a policy has lines");
    writeln!(s, "readiness ({head}):")?;
    for line in rules {
        writeln!(s, "  {line}")?;
    }
    Ok(())
}

/// Where the `otlp` sink sends (config refuses a query or fragment in the URL), the try's
/// limits, the headers by name (never a value).
fn plan_otlp(s: &mut String, o: &crate::config::OtlpSink) -> std::fmt::Result {
    use std::fmt::Write;
    let url = &o.endpoint;
    let names: Vec<String> = o
        .headers
        .iter()
        .map(|(n, v)| match v {
            crate::config::HeaderValueSource::Secret(_) => format!("{n} (secret)"),
            crate::config::HeaderValueSource::Plain(_) => n.to_string(),
        })
        .collect();
    let headers = if names.is_empty() {
        String::new()
    } else {
        format!(", headers {}", names.join(", "))
    };
    writeln!(
        s,
        "  otlp: POST {url} (OTLP/HTTP protobuf, every metric whatever publish.metrics; {} a try, {} tries{headers})",
        crate::clock::fmt_duration(o.timeout),
        o.max_tries,
    )
}

/// Where and how often metrics go, and the metric contract (names, units, dimensions).
fn plan_publish(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    let sinks: Vec<&str> = cfg
        .publish
        .sinks
        .iter()
        .map(|k| match k {
            SinkKind::CloudWatch => "cloudwatch",
            SinkKind::Emf => "emf (stdout)",
            SinkKind::Otlp => "otlp",
        })
        .collect();
    writeln!(
        s,
        "publish every {} to {} in namespace {} (standard resolution, {} s):",
        crate::clock::fmt_duration(cfg.publish.interval),
        sinks.join(", "),
        cfg.publish.namespace,
        contract::STORAGE_RESOLUTION
    )?;
    if let Some(o) = &cfg.publish.otlp {
        plan_otlp(s, o)?;
    }
    let failures = if cfg.publish.sinks.contains(&SinkKind::Emf) {
        " (emf only)"
    } else {
        ": not published, needs the emf sink"
    };
    for m in contract::METRICS {
        // What each value means where the unit does not say it, and when a series exists.
        let (value, when) = match m.name {
            n if n == contract::READINESS.name || n == contract::BOTH_BRANCHES_UNREADY.name => {
                (" (0/1)", "")
            }
            n if n == contract::CERTIFICATE_EXPIRY_DAYS.name => (" (days)", " (TLS)"),
            n if n == contract::PUBLISH_FAILURES.name => ("", failures),
            n if n == contract::SELECTED_BRANCH.name => {
                if !cfg.stable_name_probe.enabled {
                    continue;
                }
                (" (0/1/2)", " (stable-name probe)")
            }
            n if n == contract::STABLE_NAME_SUCCESS.name => {
                if !(cfg.stable_name_probe.enabled && cfg.stable_name_probe.end_to_end) {
                    continue;
                }
                (" (0/1)", " (end-to-end)")
            }
            n if n == contract::SERVICE_UNAVAILABLE.name => {
                if cfg.services.len() < 2 {
                    continue;
                }
                (" (1)", " (not prepared)")
            }
            _ => ("", ""),
        };
        let unit = format!("{}{value}", m.unit.as_str());
        let dims = m.dimensions.join(", ");
        let kept = kept_from_metric_sinks(cfg, m.name);
        writeln!(s, "  {:<22} {unit:<14} [{dims}{when}]{kept}", m.name)?;
    }
    Ok(())
}

/// For a metric `publish.metrics` keeps from `cloudwatch` and `emf`, where it still goes: the
/// `otlp` sink (`PublishFailures` apart, published on `emf` only), else nowhere. Empty when
/// the profile sends it.
fn kept_from_metric_sinks(cfg: &Config, name: &str) -> String {
    let profile = cfg.publish.metrics;
    if profile.sends(name) {
        return String::new();
    }
    let otlp = cfg.publish.sinks.contains(&SinkKind::Otlp);
    let goes = if otlp && name != contract::PUBLISH_FAILURES.name {
        "otlp only"
    } else {
        "not published"
    };
    format!(" {goes} (publish.metrics = \"{}\")", profile.as_str())
}

/// The evidence file, then this prober's id and the state store it syncs with.
fn plan_evidence_and_state(s: &mut String, cfg: &Config) -> std::fmt::Result {
    use std::fmt::Write;
    writeln!(s, "evidence: {}", cfg.evidence_path.display())?;
    if let Some(e) = &cfg.evidence_s3 {
        let service = crate::sink::segments::service_dir(cfg);
        writeln!(
            s,
            "evidence segments: s3://{}/{}{service}/{}/<start>-<first record_seq>.jsonl.gz, one every {} (or at {} MiB), spooled in {} up to {} MiB until uploaded",
            e.bucket,
            e.prefix,
            cfg.prober_id,
            crate::clock::fmt_duration(e.segment),
            e.segment_max_bytes >> 20,
            crate::sink::segments::spool_beside(&cfg.evidence_path).display(),
            e.spool_max_bytes >> 20
        )?;
    }
    let store = cfg
        .services
        .iter()
        .map(|svc| {
            let document = format!("control-{}.json", crate::config::safe(&svc.service.name));
            match &cfg.state.store {
                config::StoreKind::File => cfg.state_dir.join(document).display().to_string(),
                config::StoreKind::S3(s3) => {
                    format!("s3://{}/{}{document}", s3.bucket, s3.key_prefix)
                }
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    writeln!(
        s,
        "prober id {}; state store: {store} (synced every {})",
        cfg.prober_id,
        crate::clock::fmt_duration(cfg.state.poll_interval)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use expect_test::expect;

    const MYSQL: &str = r#"
prober_id = "az-a"
state_dir = "/var/lib/readyprobe"

[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[readiness]
window = "60s"
min_attempts = 10
declare_unready = { success_rate_below = 95.0, for = "3m" }
declare_ready = { success_rate_at_or_above = 99.0, for = "10m", window = "5m" }

[probe]
kind = "mysql"
interval = "2s"
timeout = "1500ms"

[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }

[probe.tls]
ssl_mode = "required"
danger_send_secrets_unverified = true

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"
"#;

    fn plan_of(text: &str) -> String {
        let path = std::path::Path::new("/etc/readyprobe/orders.toml");
        plan(&config::parse(path, text).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The probe section of the plan for [`MYSQL`] with its `[probe]` tables replaced by `kind`.
    fn probe_lines_of(kind: &str) -> String {
        let (head, _) = MYSQL.split_once("[probe]").unwrap_or_default();
        let (_, branches) = MYSQL.split_once("[[branch]]").unwrap_or_default();
        let text = format!("{head}{kind}\n[[branch]]{branches}");
        let plan = plan_of(&text);
        plan.lines()
            .skip_while(|l| !l.starts_with("probe kind"))
            .take(3)
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn plan_shows_where_evidence_segments_go() {
        let plan = plan_of(&format!("{MYSQL}\n[evidence.s3]\nbucket = \"drills\"\n"));
        assert!(
            plan.contains("evidence segments: s3://drills/readyprobe/evidence/orders-db/az-a/<start>-<first record_seq>.jsonl.gz, one every 1m (or at 16 MiB), spooled in /var/lib/readyprobe/evidence.spool up to 256 MiB until uploaded"),
            "{plan}"
        );
        assert!(plan.contains("S3 evidence PUTs"), "{plan}");
    }

    #[test]
    fn plan_names_every_section_once() {
        expect![[r#"
            /etc/readyprobe/orders.toml: valid
            service orders-db (stable name mysql.orders.internal.example, never probed as a branch)
            probe kind mysql every 2s (attempt timeout 1s 500ms, first-attempt jitter ≤ 200ms): resolve → connect → tls → auth → write → verify
              adaptive probing off (no probe.suspect_interval): 43,200 attempts/day per branch
              mysql user readyprobe (password from environment variable READYPROBE_MYSQL_PASSWORD), canary readyprobe.canary, ssl_mode required, TLS ≥ 1.2
              dns: nameservers from /etc/resolv.conf
            branches:
              primary      PRIMARY   mysql-primary.orders.internal.example:3306
              secondary    SECONDARY mysql-secondary.orders.internal.example:3306
            readiness (initial unknown, min_attempts 10):
              declare unready: success rate < 95% over 1m held for 3m; 30 attempts per 1m window; one failure → 96.7% (still above the threshold)
              definitive rule: the unready condition also fires once the latest attempts (two or more) failed with a definitive class, without a break, for 20s since the first
                definitive classes: dns_nxdomain, dns_nodata, dns_stable_name, tls_not_offered, tls_untrusted, tls_name_mismatch, tls_expired, tls_not_yet_valid, tls_protocol_version, auth_denied, server_read_only, verify_mismatch, http_body_mismatch, http_wrong_branch, canary_missing
                ambiguous classes:  dns_servfail, dns_refused, dns_timeout, dns_error, tcp_refused, tcp_timeout, tcp_unreachable, tcp_reset, tls_handshake, too_many_connections, lock_wait_timeout, server_gone_away, server_error, http_status, otlp_rejected, deadline_exceeded, protocol_error, internal_error, cannot_connect_now
              declare ready:   success rate ≥ 99% over 5m held for 10m; 150 attempts per 5m window; one failure → 99.3% (still meets the threshold)
              flap damping: after more than 3 ready → unready flaps within 1h, declare ready holds for 20m, 40m, 1h at 4, 5, 6 flaps (not 10m), doubling per flap up to 1h; flaps are forgotten after 1h without one
            publish every 1m to emf (stdout) in namespace Readyprobe (standard resolution, 60 s):
              Readiness              None (0/1)     [Service, Branch]
              SuccessRate            Percent        [Service, Branch]
              Attempts               Count          [Service, Branch]
              FailedAttempts         Count          [Service, Branch]
              StepDuration           Milliseconds   [Service, Branch, Step]
              CertificateExpiryDays  None (days)    [Service, Branch (TLS)]
              Heartbeat              Count          [Service]
              BothBranchesUnready    None (0/1)     [Service]
              PublishFailures        Count          [Service, Class (emf only)]
              StoreSyncFailures      Count          [Service, Class]
            evidence: /var/lib/readyprobe/evidence.jsonl
            prober id az-a; state store: /var/lib/readyprobe/control-orders-db.json (synced every 10s)
            estimated AWS cost per month (us-east-1 list prices of 2026-12-01, 30-day month, one prober; no free tier):
              custom metrics         24 series, $0.30 each up to 10,000                             $7.20
              CloudWatch Logs (emf)  600.7 MB ingested (13,905 bytes per tick), $0.50 per GB        $0.30
              alarms                 5 standard resolution, $0.10 each                              $0.50
              Route 53 health checks 2 CLOUDWATCH_METRIC, $0.50 each                                $1.00
              total                                                                                 $9.00
              each further prober (the prober stack runs one per subnet) adds $0.30 (its requests, log bytes, evidence PUTs and GetSecretValue calls; series, alarms and health checks are shared)
              layout priced: one region (the branches name no two regions): one alarm and one CLOUDWATCH_METRIC health check per branch
              not counted: series published only while something fails (ServiceUnavailable, PublishFailures, StoreSyncFailures), transition datums, the prober's own logs, log storage, evidence storage, the tasks, the state store
              publish.metrics profiles vs one Synthetics canary per branch ($104.88, a run a minute, its alarm and health check): full $9.00 (this config), 1/11.7; control $2.72, 1/38.5
            summary: 1 service, 2 branches, 1.0 attempts/s, up to 24 datums/min
            warning: probe.tls.danger_send_secrets_unverified is true: ssl_mode "required" does not verify the server's certificate, and probe.mysql.password is sent anyway; a server that is not the branch can capture it (evidence records tls_verified: false)
        "#]]
        .assert_eq(&plan_of(MYSQL));
    }

    #[test]
    fn plan_shows_where_serve_listens_when_set() {
        assert!(!plan_of(MYSQL).contains("serve:"));
        let plan = plan_of(&format!("{MYSQL}\n[serve]\n"));
        let line = "serve: /metrics, /healthz and /status on http://127.0.0.1:9464 (at most 64 connections, request timeout 5s)\n";
        assert!(
            plan.contains(&format!("(synced every 10s)\n{line}")),
            "{plan}"
        );
    }

    #[test]
    fn plan_shows_the_attempts_per_day_with_and_without_adaptive_probing() {
        let tcp = "[probe]\nkind = \"tcp\"\n[probe.tcp]\nport = 5672\n[probe.tls]\nssl_mode = \"disabled\"\n";
        expect![[r#"
            probe kind tcp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect
              adaptive probing off (no probe.suspect_interval): 43,200 attempts/day per branch
              tcp, ssl_mode disabled (liveness-level: proves the port answers, not that the branch can do its job)
        "#]].assert_eq(&probe_lines_of(tcp));
        expect![[r#"
            probe kind tcp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect
              while suspect (a condition holding, not yet fired, or unready) every 500ms: per branch 43,200 attempts/day at steady state, up to 172,800 while suspect, 54,000 when every attempt takes its whole timeout
              tcp, ssl_mode disabled (liveness-level: proves the port answers, not that the branch can do its job)
        "#]].assert_eq(&probe_lines_of(
            &tcp.replace("kind = \"tcp\"", "kind = \"tcp\"\nsuspect_interval = \"500ms\""),
        ));
    }

    #[test]
    fn plan_shows_each_kinds_steps_and_settings() {
        expect![[r#"
            probe kind tcp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect
              adaptive probing off (no probe.suspect_interval): 43,200 attempts/day per branch
              tcp, ssl_mode disabled (liveness-level: proves the port answers, not that the branch can do its job)
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"tcp\"\ninterval = \"2s\"\n[probe.tcp]\nport = 5672\n[probe.tls]\nssl_mode = \"disabled\"\n[dns]\nnameservers = [\"10.0.0.2\", \"10.0.1.2:5353\"]\n",
        ));
        expect![[r#"
            probe kind http every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect → tls → write → verify
              adaptive probing off (no probe.suspect_interval): 43,200 attempts/day per branch
              http POST /orders then verify GET /orders/{{marker}}, ssl_mode required, accepted status [201]
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"http\"\ninterval = \"2s\"\n[probe.tls]\nssl_mode = \"required\"\n[probe.http]\nmethod = \"POST\"\npath = \"/orders\"\nexpect_status = [201]\n[probe.http.verify]\nmethod = \"GET\"\npath = \"/orders/{{marker}}\"\n",
        ));
        expect![[r#"
            probe kind otlp every 2s (attempt timeout 1s 600ms, first-attempt jitter ≤ 200ms): resolve → connect → write
              adaptive probing off (no probe.suspect_interval): 43,200 attempts/day per branch
              otlp POST /v1/metrics (one marked gauge data point, OTLP/HTTP protobuf), ssl_mode disabled
        "#]].assert_eq(&probe_lines_of(
            "[probe]\nkind = \"otlp\"\ninterval = \"2s\"\n[probe.otlp]\n[probe.tls]\nssl_mode = \"disabled\"\n",
        ));
    }

    /// With `publish.metrics = "control"` the metric list says which rows `cloudwatch` and `emf`
    /// do not get, and where they still go: the `otlp` sink, or nowhere without it.
    #[test]
    fn plan_marks_the_metrics_control_keeps_from_cloudwatch_and_emf() {
        let rows = |plan: &str| -> Vec<String> {
            plan.lines()
                .skip_while(|l| !l.starts_with("publish every"))
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .filter(|l| !l.starts_with("  otlp:"))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect()
        };
        let control = MYSQL.replace(
            "[probe]\nkind",
            "[publish]\nmetrics = \"control\"\n[probe]\nkind",
        );
        assert_ne!(control, MYSQL);
        expect![[r#"
            [
                "Readiness None (0/1) [Service, Branch]",
                "SuccessRate Percent [Service, Branch] not published (publish.metrics = \"control\")",
                "Attempts Count [Service, Branch] not published (publish.metrics = \"control\")",
                "FailedAttempts Count [Service, Branch] not published (publish.metrics = \"control\")",
                "StepDuration Milliseconds [Service, Branch, Step] not published (publish.metrics = \"control\")",
                "CertificateExpiryDays None (days) [Service, Branch (TLS)] not published (publish.metrics = \"control\")",
                "Heartbeat Count [Service]",
                "BothBranchesUnready None (0/1) [Service]",
                "PublishFailures Count [Service, Class (emf only)] not published (publish.metrics = \"control\")",
                "StoreSyncFailures Count [Service, Class] not published (publish.metrics = \"control\")",
            ]
        "#]]
        .assert_debug_eq(&rows(&plan_of(&control)));
        let otlp = control.replace(
            "metrics = \"control\"\n",
            "metrics = \"control\"\nsinks = [\"emf\", \"otlp\"]\n[publish.otlp]\nendpoint = \"http://127.0.0.1:4318\"\n",
        );
        let with_otlp = rows(&plan_of(&otlp));
        assert!(
            with_otlp.contains(
                &"SuccessRate Percent [Service, Branch] otlp only (publish.metrics = \"control\")"
                    .to_string()
            ),
            "{with_otlp:?}"
        );
        assert!(with_otlp.contains(&"PublishFailures Count [Service, Class (emf only)] not published (publish.metrics = \"control\")".to_string()), "{with_otlp:?}");
        assert!(
            rows(&plan_of(MYSQL))
                .iter()
                .all(|r| !r.contains("publish.metrics"))
        );
    }

    /// The stable-name datums are listed and counted only when they are published:
    /// `SelectedBranch` with the probe, `StableNameSuccess` with its end-to-end attempt too.
    #[test]
    fn plan_lists_the_stable_name_datums_when_published() {
        let with = |section: &str| plan_of(&format!("{MYSQL}\n{section}\n"));
        let lines = |plan: &str, metric: &str| plan.lines().filter(|l| l.contains(metric)).count();
        let off = with("");
        assert_eq!(lines(&off, "SelectedBranch"), 0, "{off}");
        assert_eq!(lines(&off, "StableNameSuccess"), 0, "{off}");
        let on = with("[stable_name_probe]\nenabled = true");
        assert_eq!(lines(&on, "SelectedBranch"), 1, "{on}");
        assert_eq!(lines(&on, "StableNameSuccess"), 0, "{on}");
        assert!(on.contains("up to 25 datums/min"), "{on}");
        let e2e = with("[stable_name_probe]\nenabled = true\nend_to_end = true");
        assert_eq!(lines(&e2e, "SelectedBranch"), 1, "{e2e}");
        assert_eq!(lines(&e2e, "StableNameSuccess"), 1, "{e2e}");
        assert!(e2e.contains("up to 26 datums/min"), "{e2e}");
    }

    /// A config of several services: a plan per service, then one summary of the load.
    #[test]
    fn plan_of_several_services_ends_with_their_load() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/fleet.toml");
        let plan = plan(&config::load(&path).unwrap_or_else(|e| panic!("{e}")));
        let services: Vec<&str> = plan.lines().filter(|l| l.starts_with("service ")).collect();
        assert_eq!(services.len(), 3, "{plan}");
        assert_eq!(plan.matches("branches:").count(), 3, "{plan}");
        // 2 × (4 + 6 steps + TLS) + 2 per mysql service, 2 × (4 + 4 steps + TLS) + 2 for http.
        let summary: Vec<&str> = plan.lines().filter(|l| l.starts_with("summary:")).collect();
        assert_eq!(
            summary,
            ["summary: 3 services, 6 branches, 3.0 attempts/s, up to 68 datums/min"]
        );
    }

    /// With an RDS IAM password each branch line names its token's region, and says so when
    /// the branch's `region` overrides `rds_iam.region`.
    #[test]
    fn plan_shows_each_branchs_rds_iam_token_region() {
        let text = MYSQL
            .replace(
                "{ env = \"READYPROBE_MYSQL_PASSWORD\" }",
                "{ rds_iam = { region = \"eu-west-1\" } }",
            )
            .replace(
                "ssl_mode = \"required\"\ndanger_send_secrets_unverified = true",
                "ssl_mode = \"verify_identity\"\nssl_ca = \"/etc/ca.pem\"",
            )
            .replace(
                "endpoint = \"mysql-secondary.orders.internal.example\"",
                "endpoint = \"mysql-secondary.orders.internal.example\"\nregion = \"us-east-1\"",
            );
        let plan = plan_of(&text);
        let branches: Vec<&str> = plan
            .lines()
            .skip_while(|l| *l != "branches:")
            .skip(1)
            .take(2)
            .collect();
        assert_eq!(
            branches,
            [
                "  primary      PRIMARY   mysql-primary.orders.internal.example:3306, RDS IAM token for eu-west-1",
                "  secondary    SECONDARY mysql-secondary.orders.internal.example:3306, RDS IAM token for us-east-1 (the branch's region, not rds_iam.region eu-west-1)",
            ],
            "{plan}"
        );
    }

    #[test]
    fn plan_shows_each_target_with_its_region_role_and_endpoint() {
        let text = MYSQL.replacen(
            "[service]",
            "[publish]\nsinks = [\"cloudwatch\"]\n[publish.cloudwatch]\nregion = \"eu-west-1\"\nrole_arn = \"arn:aws:iam::111122223333:role/pub\"\nexternal_id = \"ext-1\"\n[service]\npublish = [{ name = \"net\" }, { region = \"us-east-1\", endpoint_url = \"http://127.0.0.1:4566\" }]",
            1,
        );
        let plan = plan_of(&text);
        assert!(plan.contains("  publishes to CloudWatch target net: region eu-west-1, role arn:aws:iam::111122223333:role/pub (STS AssumeRole, session readyprobe-az-a, with an external id), endpoint AWS's\n"), "{plan}");
        assert!(plan.contains("  publishes to CloudWatch target us-east-1@111122223333/pub: region us-east-1, role arn:aws:iam::111122223333:role/pub (STS AssumeRole, session readyprobe-az-a, with an external id), endpoint http://127.0.0.1:4566\n"), "{plan}");
        assert!(!plan.contains("ext-1"), "the external id is not printed");
    }
}
