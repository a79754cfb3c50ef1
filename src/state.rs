//! The readiness state store: one JSON file per service in `state_dir`, replaced atomically.
//!
//! A bounded run (ECS scheduled task) loads it at start and saves it at every publish tick and
//! at stop, so consecutive runs continue one another (a `for` clock may span runs). A corrupt or
//! unreadable file is an error: the prober never silently starts as `ready` from it.

use crate::readiness::{Millis, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Format version of the state file.
pub const STATE_VERSION: u32 = 1;

/// The saved state of one service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SavedState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// Service name (a file of another service is refused).
    pub service: String,
    /// When it was saved, ms since the epoch.
    pub saved_at: Millis,
    /// Readiness per branch name.
    pub branches: BTreeMap<String, Snapshot>,
}

/// A state file problem.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Could not read or write.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a valid state file.
    #[error(
        "state file {path} is corrupt or of another format: {reason}; move it aside to start from `initial`"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The file store.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// The store of one prober's view of `service` in `dir`
    /// (`dir/state-<service>-<prober_id>.json`): probers sharing a directory never overwrite
    /// each other's state.
    pub fn new(dir: &Path, service: &str, prober_id: &str) -> Self {
        let safe = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        FileStore {
            path: dir.join(format!("state-{}-{}.json", safe(service), safe(prober_id))),
        }
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Load the saved state; `Ok(None)` when there is none yet.
    ///
    /// # Errors
    /// [`StateError`] when the file exists but cannot be read or parsed, or belongs to another
    /// service or version.
    pub fn load(&self, service: &str) -> Result<Option<SavedState>, StateError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let s: SavedState = serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        if s.version != STATE_VERSION {
            return Err(StateError::Corrupt {
                path: self.path.clone(),
                reason: format!("version {} (expected {STATE_VERSION})", s.version),
            });
        }
        if s.service != service {
            return Err(StateError::Corrupt {
                path: self.path.clone(),
                reason: format!("it belongs to service {:?}", s.service),
            });
        }
        Ok(Some(s))
    }

    /// Save atomically: write a temporary file beside it, fsync, rename over, fsync the directory.
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save(&self, state: &SavedState) -> Result<(), StateError> {
        let io = |source| StateError::Io {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = self
            .path
            .with_extension(format!("json.tmp.{}", std::process::id()));
        let body = serde_json::to_vec_pretty(state).expect("state serialises");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&body).map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::ReadinessState;

    #[test]
    fn round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "orders-db", "p1");
        assert!(store.load("orders-db").unwrap().is_none());
        let mut branches = BTreeMap::new();
        branches.insert(
            "primary".to_string(),
            Snapshot {
                state: ReadinessState::Ready,
                since: Some(5),
                unready_holding_since: None,
                ready_holding_since: None,
                attempts: vec![],
            },
        );
        let s = SavedState {
            version: STATE_VERSION,
            service: "orders-db".into(),
            saved_at: 10,
            branches,
        };
        store.save(&s).unwrap();
        assert_eq!(store.load("orders-db").unwrap(), Some(s));
        assert!(matches!(
            store.load("other"),
            Err(StateError::Corrupt { .. })
        ));
        std::fs::write(store.path(), "{\"version\":1,").unwrap();
        assert!(matches!(
            store.load("orders-db"),
            Err(StateError::Corrupt { .. })
        ));
    }
}
