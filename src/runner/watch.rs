//! The config read again while running: at each SIGHUP, and at each `[reload] poll` that finds
//! its source changed ([`Watch`]). Every config read goes to the run as a SIGHUP's always has,
//! valid or not: the run applies it or logs and records its refusal (`reload.rs`). A source
//! that cannot be read at a poll is logged with its class, the config running is kept, and the
//! next poll tries again.

use crate::config::{self, Config, ConfigError};
use crate::config_source::{Identity, Reader, Verdict, Watch};
use std::time::Duration;
use tokio::signal::unix::Signal;
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};

/// Configs read again, one per SIGHUP or change found.
pub type Reloads = mpsc::Receiver<Result<Config, ConfigError>>;

/// What to watch: the source, the identity of the config read at start, how often to poll
/// (`None`: only at SIGHUP), and the `--prober-id` that applies to every config read.
#[derive(Debug)]
pub struct Watched {
    /// The source's reader.
    pub reader: Reader,
    /// What the config read at start was.
    pub identity: Identity,
    /// The poll, if any.
    pub poll: Option<Duration>,
    /// `--prober-id`, checked at start.
    pub prober_id: Option<String>,
}

/// Start watching: a task reads the config again at each SIGHUP `hup` delivers and at each
/// poll that finds a change, and sends it. `None` when there is neither.
pub fn watch(w: Watched, hup: Option<Signal>) -> Option<Reloads> {
    if hup.is_none() && w.poll.is_none() {
        return None;
    }
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(serve(w, hup, tx));
    Some(rx)
}

/// Why the config is read.
enum Trigger {
    Signal,
    Poll,
}

async fn serve(w: Watched, mut hup: Option<Signal>, tx: mpsc::Sender<Result<Config, ConfigError>>) {
    let mut state = Watch::new(w.identity);
    let mut polls = w.poll.map(|d| {
        let mut i = interval_at(Instant::now() + d, d);
        i.set_missed_tick_behavior(MissedTickBehavior::Delay);
        i
    });
    let source = config::escape_controls(&w.reader.source().to_string()).into_owned();
    loop {
        let trigger = tokio::select! {
            got = next_signal(&mut hup) => match got {
                Some(()) => Trigger::Signal,
                None => continue,
            },
            () = next_poll(&mut polls) => Trigger::Poll,
        };
        let fetched = match trigger {
            Trigger::Signal => {
                tracing::info!(config = %source, "SIGHUP: reading the config again");
                match w.reader.read(None).await {
                    Ok(Some(f)) => {
                        state.took(f.identity.clone());
                        Ok(f.text)
                    }
                    Ok(None) => continue,
                    Err(e) => Err(ConfigError::file(&w.reader.source().name(), e.to_string())),
                }
            }
            Trigger::Poll => match poll(&w.reader, &mut state, &source).await {
                Some(text) => Ok(text),
                None => continue,
            },
        };
        let cfg = match fetched {
            Ok(text) => parse(&w.reader, text, w.prober_id.clone()).await,
            Err(e) => Err(e),
        };
        if tx.send(cfg).await.is_err() {
            break;
        }
    }
}

/// One poll: the text to reload when the source changed; else `None`, a failed read logged.
async fn poll(reader: &Reader, state: &mut Watch, source: &str) -> Option<String> {
    let was_failing = state.failing();
    let read = reader.read(Some(state.last())).await;
    let seen = match &read {
        Ok(f) => Ok(f.as_ref().map(|f| &f.identity)),
        Err(e) => Err(e.class),
    };
    let verdict = state.observe(seen);
    // What the peer sent (an error message, an ETag) is escaped: it cannot forge log lines.
    let esc = |s: &str| config::escape_controls(s).into_owned();
    match (verdict, read) {
        (Verdict::FirstFailure, Err(e)) => {
            tracing::warn!(config = %source, class = e.class, error = %esc(&e.reason),
                "cannot read the config source; the running config is kept and the source is read again at the next poll");
            None
        }
        (Verdict::StillFailing, Err(e)) => {
            tracing::debug!(config = %source, class = e.class, error = %esc(&e.reason), "config source still unreadable");
            None
        }
        (Verdict::Changed, Ok(Some(f))) => {
            tracing::info!(config = %source, identity = %esc(&f.identity.to_string()), "config source changed: validating it and reloading as at a SIGHUP");
            Some(f.text)
        }
        (_, _) => {
            if was_failing {
                tracing::info!(config = %source, "config source readable again, unchanged");
            }
            None
        }
    }
}

/// Validate a config read again, off the runtime's workers; `prober_id` applies to it as at
/// start-up.
async fn parse(
    reader: &Reader,
    text: String,
    prober_id: Option<String>,
) -> Result<Config, ConfigError> {
    let name = reader.source().name();
    let job = tokio::task::spawn_blocking(move || {
        config::parse(&name, &text).map(|mut cfg| {
            // Checked at start-up; the same value is valid now.
            if let Some(id) = prober_id {
                cfg.prober_id = id;
            }
            cfg
        })
    });
    job.await.unwrap_or_else(|e| {
        Err(ConfigError::file(
            &reader.source().name(),
            format!("validating the config failed inside readyprobe: {e}"),
        ))
    })
}

/// The next SIGHUP; `None` once the handler is gone (then never again); never without one.
async fn next_signal(hup: &mut Option<Signal>) -> Option<()> {
    let Some(h) = hup else {
        return std::future::pending().await;
    };
    let got = h.recv().await;
    if got.is_none() {
        *hup = None;
    }
    got
}

/// The next poll; never without a poll.
async fn next_poll(polls: &mut Option<Interval>) {
    match polls {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}
