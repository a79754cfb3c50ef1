//! The heartbeat of `run --heartbeat`: the select loop asks for a beat every
//! [`crate::heartbeat::EVERY`], and the file is written on a blocking thread, at most one write
//! at a time, so a slow or hung file system never holds the loop. A write that is still hanging
//! at the next beat is not joined by another: the file goes stale, which is what `health` is
//! for. A failure to write is logged once per run of failures and never stops probing.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::task::JoinHandle;

/// The heartbeat writer of one run.
pub(super) struct Heartbeat {
    path: Arc<PathBuf>,
    in_flight: Option<JoinHandle<()>>,
    /// Set while writes fail, so a run of failures is logged once (and its end once).
    failing: Arc<AtomicBool>,
}

impl Heartbeat {
    pub(super) fn new(path: PathBuf) -> Self {
        Heartbeat {
            path: Arc::new(path),
            in_flight: None,
            failing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Rewrite the file off the loop, unless the previous write has not returned yet.
    pub(super) fn beat(&mut self) {
        if self.in_flight.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (path, failing) = (self.path.clone(), self.failing.clone());
        self.in_flight = Some(tokio::task::spawn_blocking(
            move || match crate::heartbeat::beat(&path) {
                Ok(()) => {
                    if failing.swap(false, Ordering::Relaxed) {
                        tracing::info!(path = %path.display(), "heartbeat written again");
                    }
                }
                Err(e) => {
                    if !failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "cannot write the heartbeat ({e}); probing goes on, `readyprobe health` will report it stale (logged once until a write succeeds)"
                        );
                    }
                }
            },
        ));
    }
}
