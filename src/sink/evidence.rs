//! The evidence sink: an append-only JSON-lines file of attempts, transitions, publishes,
//! starts and stops. Each record is written as one whole line and flushed, so a crash or a
//! SIGKILL leaves at worst a missing last record, never a torn one that parses as something else.
//!
//! The file is bounded: when the next record would take it past `max_bytes`, it is renamed to
//! `<path>.1` (replacing the previous generation) and a fresh file is started, so a long-running
//! service keeps between one and two generations on disk.

use crate::clock::rfc3339;
use crate::readiness::Millis;
use crate::record::{Envelope, Record};
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
    /// Size of the current file, bytes.
    size: u64,
    /// Rotation threshold, bytes.
    max_bytes: u64,
}

impl EvidenceWriter {
    /// Open (create or append) the evidence file, creating its directory.
    ///
    /// # Errors
    /// The I/O error, for the caller to report with the path.
    pub fn open(path: &Path, service: &str, prober: &str, max_bytes: u64) -> io::Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(EvidenceWriter {
            path: path.to_owned(),
            file,
            service: service.into(),
            prober: prober.into(),
            written: 0,
            failed: 0,
            size,
            max_bytes: max_bytes.max(4096),
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
        self.append(&line);
    }

    /// Append one typed record at `at` (ms since the epoch), in its [`Envelope`].
    ///
    /// Failures are counted and logged as for [`write`](Self::write), never returned.
    pub fn record(&mut self, at: Millis, record: &Record) {
        let envelope = Envelope::new(at, &self.service, &self.prober, record.clone());
        match envelope.to_line() {
            Ok(line) => self.append(&line),
            Err(e) => self.count_failure(&e),
        }
    }

    fn append(&mut self, line: &str) {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate();
        }
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => {
                self.written += 1;
                self.size += line.len() as u64;
            }
            Err(e) => self.count_failure(&e),
        }
    }

    fn count_failure(&mut self, e: &dyn std::fmt::Display) {
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

    /// Reopen the file when it was removed or replaced under us (an operator's `rm`, a log
    /// shipper's move), so later records are not written into an unlinked inode. Returns true
    /// when it reopened.
    pub fn reopen_if_replaced(&mut self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let ours = self.file.metadata().map(|m| (m.dev(), m.ino())).ok();
        let on_disk = std::fs::metadata(&self.path)
            .map(|m| (m.dev(), m.ino()))
            .ok();
        if ours.is_some() && ours == on_disk {
            return false;
        }
        if let Some(dir) = self.path.parent()
            && !dir.as_os_str().is_empty()
        {
            let _ = std::fs::create_dir_all(dir);
        }
        match OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            Ok(f) => {
                self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
                self.file = f;
                tracing::warn!(path = %self.path.display(), "evidence file was removed or replaced; reopened");
                true
            }
            Err(e) => {
                self.failed += 1;
                tracing::error!(path = %self.path.display(), error = %e, "evidence file was removed and cannot be recreated");
                false
            }
        }
    }

    fn rotate(&mut self) {
        let old = self.path.with_extension(match self.path.extension() {
            Some(e) => format!("{}.1", e.to_string_lossy()),
            None => "1".into(),
        });
        let reopened = std::fs::rename(&self.path, &old).and_then(|_| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
        });
        match reopened {
            Ok(f) => {
                self.file = f;
                self.size = 0;
                tracing::info!(path = %self.path.display(), previous = %old.display(), "evidence file rotated");
            }
            Err(e) => {
                // Keep appending to the old handle; better a large file than lost records.
                tracing::error!(path = %self.path.display(), error = %e, "cannot rotate evidence");
                self.size = 0;
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
    fn reopens_a_removed_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.jsonl");
        let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
        w.write("a", 0, serde_json::json!({}));
        assert!(!w.reopen_if_replaced());
        std::fs::remove_file(&p).unwrap();
        assert!(w.reopen_if_replaced());
        w.write("b", 1, serde_json::json!({}));
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("\"kind\":\"b\""));
    }

    #[test]
    fn rotates_at_max_bytes_keeping_one_generation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("evidence.jsonl");
        let mut w = EvidenceWriter::open(&p, "s", "p", 4096).unwrap();
        for i in 0..200 {
            w.write("attempt", i, serde_json::json!({"seq": i}));
        }
        assert_eq!(w.written, 200);
        assert_eq!(w.failed, 0);
        let cur = std::fs::read_to_string(&p).unwrap();
        let prev = std::fs::read_to_string(dir.path().join("evidence.jsonl.1")).unwrap();
        assert!(cur.len() <= 4096 && prev.len() <= 4096);
        // Nothing torn, and the newest record is in the current file.
        for l in cur.lines().chain(prev.lines()) {
            serde_json::from_str::<Value>(l).unwrap();
        }
        assert!(cur.trim_end().ends_with("\"seq\":199}") || cur.contains("\"seq\":199"));
    }

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
