//! `readyprobe probe`: one real attempt against one branch, every step printed.

use super::{EXIT_ATTEMPT_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_UNAVAILABLE_INPUT};
use crate::config::{Config, ServiceConfig, escape_controls as esc};
use crate::probe::{self, Outcome};
use std::process::ExitCode;

pub(super) async fn probe_once(cfg: &Config, svc: &ServiceConfig, branch: &str) -> ExitCode {
    // A mistyped branch is a usage error (64) whatever else is missing.
    if let Err(code) = super::operator::check_branch(cfg, svc, branch) {
        return code;
    }
    let secrets = crate::secrets::SecretCache::default();
    secrets.read_missing(cfg).await;
    let (resolver, probes) = match probe::prepare_service(cfg, svc, &secrets) {
        Ok(x) => x,
        Err(e) => {
            for p in &e.problems {
                eprintln!("error: {}", esc(&p.to_string()));
            }
            eprintln!("error: cannot prepare probes; nothing was probed");
            return ExitCode::from(EXIT_UNAVAILABLE_INPUT);
        }
    };
    let Some(p) = probes.iter().find(|p| p.branch.name == branch) else {
        eprintln!("error: no probe was prepared for branch {branch:?}");
        return ExitCode::from(EXIT_INTERNAL);
    };
    let clock = crate::clock::Clock::start();
    let a = probe::run_attempt(p, &resolver, &clock, 1).await;
    println!(
        "branch {} ({}) endpoint {} port {}",
        p.branch.name,
        p.branch.role.as_str(),
        p.branch.endpoint,
        p.branch.port
    );
    for s in &a.steps {
        print_step(s, &a);
    }
    print_answers(&a);
    print_server(&a);
    match &a.outcome {
        Outcome::Success => {
            println!(
                "  outcome  {} (marker {}, {} ms)",
                a.outcome.as_str(),
                a.marker,
                a.finished_at - a.started_at
            );
            ExitCode::from(EXIT_OK)
        }
        Outcome::Failure {
            step,
            class,
            message,
        } => {
            // The message may quote the peer (a server error, a response body): escaped.
            println!(
                "  outcome  {} at {step}: {class}: {}",
                a.outcome.as_str(),
                esc(message)
            );
            ExitCode::from(EXIT_ATTEMPT_FAILED)
        }
    }
}

/// One step of `probe`'s report, with what the attempt learned in it.
fn print_step(s: &probe::StepRecord, a: &probe::Attempt) {
    use crate::failure::Step;
    let status = match s.class {
        None => "ok".to_string(),
        Some(c) => format!("FAILED {c}"),
    };
    println!(
        "  {:<8} {:>9.1} ms  {status}",
        s.step.as_str(),
        s.duration_ms
    );
    match s.step {
        Step::Resolve => {
            if let Some(m) = &a.dns {
                let auth = if m.authoritative {
                    " (authoritative)"
                } else {
                    ""
                };
                println!("             {} answer{auth}", m.rcode);
            }
            for ans in &a.answers {
                println!(
                    "             {} {} {} (ttl {} s)",
                    esc(&ans.name),
                    ans.rtype,
                    esc(&ans.data),
                    ans.ttl
                );
            }
        }
        Step::Connect => {
            if let Some(addr) = &a.address {
                println!("             connected to {addr}");
            }
        }
        Step::Tls => {
            if let Some(t) = &a.tls {
                println!(
                    "             {} {} ({} certificates)",
                    t.version, t.cipher_suite, t.peer_certificates
                );
            }
        }
        Step::Auth | Step::Write | Step::Verify => {}
    }
}

/// The `http` and `otlp` kinds' answers, whatever the outcome.
fn print_answers(a: &probe::Attempt) {
    let or_dash = |s: Option<u16>| s.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
    if let Some(h) = &a.http {
        println!(
            "  http     status {}{}",
            or_dash(h.status),
            h.verify_status
                .map(|s| format!(", verify status {s}"))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &a.otlp {
        println!(
            "  otlp     status {}{}{}",
            or_dash(o.status),
            o.rejected
                .map(|r| format!(", rejected {r}"))
                .unwrap_or_default(),
            o.message
                .as_ref()
                .map(|m| format!(": {}", esc(m)))
                .unwrap_or_default()
        );
    }
}

/// Who answered, as far as the attempt learned it: the certificate the server presented
/// (verified or not) and the server's own identity; printed also when a later step failed.
fn print_server(a: &probe::Attempt) {
    if let Some(subject) = &a.certificate_subject {
        println!("  server   certificate {}", esc(subject));
    }
    if let Some(na) = a.certificate_not_after {
        println!(
            "             certificate valid until {} ({:.1} days)",
            crate::clock::rfc3339(na),
            (na - a.finished_at) as f64 / 86_400_000.0
        );
    }
    if let Some(s) = &a.server {
        println!(
            "  server   hostname={} server_id={} read_only={} version={}",
            esc(&s.hostname),
            s.server_id,
            s.read_only,
            esc(&s.version)
        );
    }
}
