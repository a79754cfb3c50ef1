//! The operator commands: `approve`, `override` and `status`. They read and write the state
//! store only: no probe, no secret, no CA file, no publish.

use super::{EXIT_ATTEMPT_FAILED, EXIT_INVALID_CONFIG, EXIT_IO, EXIT_OK, ForceArg};
use crate::config::{Config, ServiceConfig};
use crate::runner;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Longest approval validity: an approval is a decision about the evidence of now.
pub const MAX_APPROVAL: Duration = Duration::from_secs(24 * 3600);
/// Longest override ([`crate::control::MAX_OVERRIDE_MS`], which also bounds what a prober
/// applies).
pub const MAX_OVERRIDE: Duration =
    Duration::from_millis(crate::control::MAX_OVERRIDE_MS.unsigned_abs());

/// An expiry must outlast two state-store syncs (or no prober may ever read it) and stay within
/// `max`.
fn check_expiry(cfg: &Config, d: Duration, max: Duration) -> Result<(), String> {
    let min = cfg.state.poll_interval * 2;
    if d < min {
        return Err(format!(
            "{} is shorter than two state syncs ({}): probers might never read it",
            crate::clock::fmt_duration(d),
            crate::clock::fmt_duration(min)
        ));
    }
    if d > max {
        return Err(format!(
            "{} is longer than the maximum {}",
            crate::clock::fmt_duration(d),
            crate::clock::fmt_duration(max)
        ));
    }
    Ok(())
}

fn now_ms() -> crate::readiness::Millis {
    crate::clock::Clock::start().now_ms()
}

/// What `override` acts on: the config, the service and its branch.
pub(super) struct Target<'a> {
    pub(super) cfg: &'a Config,
    pub(super) svc: &'a ServiceConfig,
    pub(super) branch: &'a str,
}

pub(super) fn check_branch(
    cfg: &Config,
    svc: &ServiceConfig,
    branch: &str,
) -> Result<(), ExitCode> {
    if svc.branches.iter().any(|b| b.name == branch) {
        return Ok(());
    }
    let names: Vec<_> = svc.branches.iter().map(|b| b.name.as_str()).collect();
    let of = if cfg.services.len() > 1 {
        format!(" service {:?} of", svc.service.name)
    } else {
        String::new()
    };
    eprintln!(
        "error: no branch {branch:?} in{of} {}; branches: {}",
        cfg.source.display(),
        names.join(", ")
    );
    Err(ExitCode::from(EXIT_INVALID_CONFIG))
}

/// Refuse `value` of option `flag` (e.g. `--by`) over `max` characters: every record is kept in
/// the control document, which every prober and operator reads whole (at most 16 MiB).
pub(super) fn check_length(flag: &str, value: &str, max: usize) -> Result<(), String> {
    let n = value.chars().count();
    if n > max {
        return Err(format!(
            "{flag} has {n} characters; at most {max} (it is kept in the shared control document)"
        ));
    }
    Ok(())
}

/// `--by` and `--reason` are one line of text of bounded length ([`check_length`]): a control
/// character would reach every later `status` reader's terminal (escaped there) and the
/// evidence.
fn printable_record(by: &str, reason: &str) -> Result<(), ExitCode> {
    let bounded = check_length("--by", by, crate::control::MAX_BY_CHARS)
        .and_then(|()| check_length("--reason", reason, crate::control::MAX_REASON_CHARS));
    if let Err(e) = bounded {
        eprintln!("error: {e}");
        return Err(ExitCode::from(EXIT_INVALID_CONFIG));
    }
    if (by.chars().chain(reason.chars())).any(char::is_control) {
        eprintln!(
            "error: --by and --reason must not contain control characters (newlines, escapes)"
        );
        return Err(ExitCode::from(EXIT_INVALID_CONFIG));
    }
    Ok(())
}

fn store_error(e: crate::state::StateError) -> ExitCode {
    eprintln!("error: {}", crate::config::escape_controls(&e.to_string()));
    ExitCode::from(EXIT_IO)
}

pub(super) async fn approve(
    cfg: &Config,
    svc: &ServiceConfig,
    branch: &str,
    by: &str,
    reason: &str,
    expires: Duration,
) -> ExitCode {
    if let Err(c) = check_branch(cfg, svc, branch) {
        return c;
    }
    if let Err(e) = check_expiry(cfg, expires, MAX_APPROVAL) {
        eprintln!("error: --expires: {e}");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    if by.trim().is_empty() || reason.trim().is_empty() {
        eprintln!("error: --by and --reason must not be empty (they are the approval's record)");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    if let Err(c) = printable_record(by, reason) {
        return c;
    }
    let now = now_ms();
    let approval = crate::control::Approval {
        id: format!("{now}-{:08x}", rand::random::<u32>()),
        branch: branch.to_string(),
        by: by.to_string(),
        reason: reason.to_string(),
        at: now,
        expires_at: now + expires.as_millis() as i64,
        decisions: Default::default(),
    };
    let store = runner::open_store(cfg, &svc.service.name).await;
    let a = approval.clone();
    let doc = match store
        .update(move |doc| {
            doc.approvals.push(a.clone());
            Ok(())
        })
        .await
    {
        Ok(d) => d,
        Err(e) => return store_error(e),
    };
    // Probers that saved recently (control::PROBER_FRESH_MS) will read the approval soon; older
    // entries (a stopped prober, a scheduled task between runs) read it if they come back in time.
    let fresh = |p: &crate::control::ProberState| p.is_fresh(now);
    let mut states = Vec::new();
    let (mut pending_fresh, mut pending_stale) = (false, false);
    for (id, ps) in &doc.probers {
        if let Some(b) = ps.branches.get(branch) {
            let pending = b.state == crate::readiness::ReadinessState::PendingApproval;
            if fresh(ps) {
                pending_fresh |= pending;
                states.push(format!("{id}: {}", b.state.as_str()));
            } else {
                pending_stale |= pending;
                states.push(format!(
                    "{id}: {} (last saved {} ago)",
                    b.state.as_str(),
                    crate::clock::fmt_duration(Duration::from_secs(
                        ((now - ps.saved_at).max(0) / 1000) as u64
                    ))
                ));
            }
        }
    }
    println!(
        "approval {} for branch {branch} recorded in {} (by {by}, expires {})",
        approval.id,
        store.location(),
        crate::clock::rfc3339(approval.expires_at)
    );
    let states = if states.is_empty() {
        "no prober has saved state for this branch yet".to_string()
    } else {
        // Prober ids come from the shared document, any writer's.
        crate::config::escape_controls(&states.join(", ")).into_owned()
    };
    if pending_fresh {
        println!(
            "probers apply it at their next sync (within {}) if the ready condition still holds; branch states: {states}",
            crate::clock::fmt_duration(cfg.state.poll_interval)
        );
        ExitCode::from(EXIT_OK)
    } else if pending_stale {
        eprintln!(
            "warning: only probers that have not saved recently have branch {branch} in pending_approval ({states}); they apply it only if they run again before it expires and the ready condition still holds"
        );
        ExitCode::from(EXIT_OK)
    } else {
        eprintln!(
            "warning: no prober has branch {branch} in pending_approval ({states}); the approval will be rejected when read and does not pre-authorise a later failback"
        );
        ExitCode::from(EXIT_ATTEMPT_FAILED)
    }
}

pub(super) async fn override_cmd(
    Target { cfg, svc, branch }: Target<'_>,
    force: Option<ForceArg>,
    expires: Option<Duration>,
    reason: Option<String>,
    by: String,
    clear: bool,
) -> ExitCode {
    if let Err(c) = check_branch(cfg, svc, branch) {
        return c;
    }
    let now = now_ms();
    let store = runner::open_store(cfg, &svc.service.name).await;
    let b = branch.to_string();
    let new = if clear {
        None
    } else {
        let (Some(force), Some(expires), Some(reason)) = (force, expires, reason) else {
            eprintln!("error: --force needs --expires and --reason");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        };
        if let Err(e) = check_expiry(cfg, expires, MAX_OVERRIDE) {
            eprintln!("error: --expires: {e}");
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
        if by.trim().is_empty() || reason.trim().is_empty() {
            eprintln!(
                "error: --by and --reason must not be empty (they are the override's record)"
            );
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
        if let Err(c) = printable_record(&by, &reason) {
            return c;
        }
        Some(crate::control::Override {
            force: match force {
                ForceArg::Ready => crate::control::Forced::Ready,
                ForceArg::Unready => crate::control::Forced::Unready,
            },
            by,
            reason,
            at: now,
            expires_at: now + expires.as_millis() as i64,
        })
    };
    let n = new.clone();
    let had = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let had2 = had.clone();
    let r = store
        .update(move |doc| {
            let before = match &n {
                Some(o) => doc.overrides.insert(b.clone(), o.clone()),
                None => doc.overrides.remove(&b),
            };
            had2.store(
                before.is_some_and(|o| o.active(now)),
                std::sync::atomic::Ordering::Relaxed,
            );
            Ok(())
        })
        .await;
    if let Err(e) = r {
        return store_error(e);
    }
    if new.is_none() && !had.load(std::sync::atomic::Ordering::Relaxed) {
        println!("branch {branch} had no override in force; nothing to clear");
        return ExitCode::from(EXIT_OK);
    }
    match new {
        Some(o) => println!(
            "override for branch {branch}: publish {} until {} ({}); probers apply it within {}",
            o.force.as_str(),
            crate::clock::rfc3339(o.expires_at),
            crate::config::escape_controls(&o.reason),
            crate::clock::fmt_duration(cfg.state.poll_interval)
        ),
        None => println!(
            "override for branch {branch} cleared; probers publish the computed readiness within {}",
            crate::clock::fmt_duration(cfg.state.poll_interval)
        ),
    }
    ExitCode::from(EXIT_OK)
}

pub(super) async fn status(cfg: &Config, svc: &ServiceConfig, json: bool) -> ExitCode {
    let store = runner::open_store(cfg, &svc.service.name).await;
    let doc = match store.load().await {
        Ok(d) => d,
        Err(e) => return store_error(e),
    };
    if json {
        let now = now_ms();
        match serde_json::to_string_pretty(&crate::control::with_freshness(&doc, now, now)) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot encode the control document: {e}");
                return ExitCode::from(EXIT_IO);
            }
        }
    } else {
        let branches: Vec<String> = svc.branches.iter().map(|b| b.name.clone()).collect();
        // The document is any writer's: its ids, names and reasons are escaped field by field
        // (a newline in a reason must not forge a line of the report).
        let mut text = crate::control::render_status(&inert(doc), &svc.policy, &branches, now_ms());
        if cfg.services.len() > 1 {
            // The hint must work when copied: with several services `approve` needs the name.
            text = text.replace(
                "(readyprobe approve --branch ",
                &format!(
                    "(readyprobe approve --service {} --branch ",
                    svc.service.name
                ),
            );
        }
        print!("{}", crate::config::escape_controls_by_line(&text));
    }
    ExitCode::from(EXIT_OK)
}

/// `doc` with every free-text field escaped for a terminal ([`crate::config::escape_controls`]).
/// Names that are already printable, as every configured branch name is, are unchanged.
fn inert(mut doc: crate::control::ControlDoc) -> crate::control::ControlDoc {
    let esc = |s: &mut String| {
        if let std::borrow::Cow::Owned(e) = crate::config::escape_controls(s) {
            *s = e;
        }
    };
    esc(&mut doc.service);
    doc.probers = rekey(doc.probers);
    for o in doc.overrides.values_mut() {
        esc(&mut o.by);
        esc(&mut o.reason);
    }
    for a in &mut doc.approvals {
        for f in [&mut a.id, &mut a.branch, &mut a.by, &mut a.reason] {
            esc(f);
        }
        a.decisions = rekey(std::mem::take(&mut a.decisions));
    }
    doc
}

fn rekey<V>(m: std::collections::BTreeMap<String, V>) -> std::collections::BTreeMap<String, V> {
    m.into_iter()
        .map(|(k, v)| (crate::config::escape_controls(&k).into_owned(), v))
        .collect()
}
