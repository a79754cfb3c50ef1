//! The evidence sink: an append-only JSON-lines file of attempts, transitions, publishes,
//! starts and stops. Each record is written as one whole line and flushed, so a crash or a
//! SIGKILL leaves at worst a missing last record, never a torn one that parses as something else.

use crate::clock::rfc3339;
use crate::readiness::Millis;
use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Appends evidence records.
#[derive(Debug)]
pub struct EvidenceWriter {
    path: PathBuf,
    file: File,
    service: String,
    prober: String,
    /// Records written by this writer.
    pub written: u64,
    /// Records that could not be written (disk full, I/O error). Probing and publishing go on:
    /// a full disk must not silence the readiness metric.
    pub failed: u64,
}

impl EvidenceWriter {
    /// Open (create or append) the evidence file, creating its directory.
    ///
    /// # Errors
    /// The I/O error, for the caller to report with the path.
    pub fn open(path: &Path, service: &str, prober: &str) -> io::Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EvidenceWriter {
            path: path.to_owned(),
            file,
            service: service.into(),
            prober: prober.into(),
            written: 0,
            failed: 0,
        })
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record: `{"at": RFC 3339, "kind": kind, "service", "prober", ...fields}`.
    /// `fields` must serialise to a JSON object; other values are stored under `"value"`.
    ///
    /// A failed write is counted in [`failed`](Self::failed) and logged (the first, then every
    /// hundredth), never returned: evidence is a record of the control loop, not a reason to stop
    /// it.
    pub fn write(&mut self, kind: &str, at: Millis, fields: impl serde::Serialize) {
        let line = encode(kind, at, &self.service, &self.prober, fields);
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => self.written += 1,
            Err(e) => {
                self.failed += 1;
                if self.failed % 100 == 1 {
                    tracing::error!(
                        path = %self.path.display(),
                        error = %e,
                        failed = self.failed,
                        "cannot write evidence; probing and publishing go on"
                    );
                }
            }
        }
    }

    /// Flush and fsync.
    ///
    /// # Errors
    /// The I/O error.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.sync_data()
    }
}

/// Encode one evidence line, newline included (pure).
pub fn encode(
    kind: &str,
    at: Millis,
    service: &str,
    prober: &str,
    fields: impl serde::Serialize,
) -> String {
    let mut m = Map::new();
    m.insert("at".into(), Value::String(rfc3339(at)));
    m.insert("at_ms".into(), Value::from(at));
    m.insert("kind".into(), Value::String(kind.into()));
    m.insert("service".into(), Value::String(service.into()));
    m.insert("prober".into(), Value::String(prober.into()));
    match serde_json::to_value(fields) {
        Ok(Value::Object(o)) => m.extend(o),
        Ok(Value::Null) => {}
        Ok(other) => {
            m.insert("value".into(), other);
        }
        Err(e) => {
            m.insert("encode_error".into(), Value::String(e.to_string()));
        }
    }
    let mut s = Value::Object(m).to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shape() {
        let l = encode(
            "stop",
            0,
            "svc",
            "p1",
            serde_json::json!({"reason": "sigterm"}),
        );
        let v: Value = serde_json::from_str(l.trim_end()).unwrap();
        assert_eq!(v["kind"], "stop");
        assert_eq!(v["at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["reason"], "sigterm");
        assert!(l.ends_with('\n') && !l.trim_end().contains('\n'));
    }
}
