//! The `emf` sink: CloudWatch Embedded Metric Format JSON lines on stdout (the embedded default),
//! or into an [`EmfBuffer`] where a caller (a test) wants to read them instead.
//!
//! One line per datum, so a reader (or the CloudWatch Logs agent) never has to split groups.

use super::{Datum, SendFuture, Sink, Value};
use serde_json::{Map, json};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Encode one datum as an EMF line (pure). `None` for a non-finite datum.
pub fn encode(namespace: &str, d: &Datum) -> Option<String> {
    if !d.is_finite() {
        return None;
    }
    let dim_names: Vec<&str> = d.dimensions.iter().map(|(k, _)| *k).collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": d.timestamp,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [dim_names],
                "Metrics": [{"Name": d.metric, "Unit": d.unit.as_str(), "StorageResolution": crate::contract::STORAGE_RESOLUTION}],
            }],
        }),
    );
    for (k, v) in &d.dimensions {
        root.insert((*k).into(), json!(v));
    }
    let value = match &d.value {
        Value::Single(v) => json!(v),
        Value::Samples(s) => json!(s),
    };
    root.insert(d.metric.into(), value);
    Some(serde_json::Value::Object(root).to_string())
}

/// A shared in-memory destination for EMF lines; clones write to and read the same bytes.
#[derive(Debug, Clone, Default)]
pub struct EmfBuffer(Arc<Mutex<Vec<u8>>>);

impl EmfBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything written so far, one EMF document per line.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Write for EmfBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where the lines go.
enum Out {
    /// The process's stdout, locked per batch so batches never interleave with other output.
    Stdout,
    /// Any other writer.
    Writer(Box<dyn Write + Send>),
}

/// Writes EMF lines to stdout or an injected writer.
pub struct EmfSink {
    namespace: String,
    out: Out,
}

impl std::fmt::Debug for EmfSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let out = match self.out {
            Out::Stdout => "stdout",
            Out::Writer(_) => "writer",
        };
        f.debug_struct("EmfSink")
            .field("namespace", &self.namespace)
            .field("out", &out)
            .finish()
    }
}

impl EmfSink {
    /// A sink for `namespace` writing to stdout.
    pub fn new(namespace: impl Into<String>) -> Self {
        EmfSink {
            namespace: namespace.into(),
            out: Out::Stdout,
        }
    }

    /// A sink for `namespace` writing to `out` (e.g. an [`EmfBuffer`]).
    pub fn with_writer(namespace: impl Into<String>, out: Box<dyn Write + Send>) -> Self {
        EmfSink {
            namespace: namespace.into(),
            out: Out::Writer(out),
        }
    }
}

/// Lines are written in pieces of about this many bytes, so a tick of 70,000 datums never holds
/// all its lines in memory at once.
const CHUNK: usize = 64 * 1024;

/// Encode `datums` as lines and write them to `out` a chunk at a time; the number written.
fn write_lines(out: &mut dyn Write, namespace: &str, datums: &[Datum]) -> std::io::Result<usize> {
    let mut buf = String::with_capacity(CHUNK + 4096);
    let mut n = 0;
    for d in datums {
        if let Some(line) = encode(namespace, d) {
            buf.push_str(&line);
            buf.push('\n');
            n += 1;
            if buf.len() >= CHUNK {
                out.write_all(buf.as_bytes())?;
                buf.clear();
            }
        }
    }
    out.write_all(buf.as_bytes())?;
    out.flush()?;
    Ok(n)
}

impl Sink for EmfSink {
    fn name(&self) -> &'static str {
        "emf"
    }

    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a> {
        Box::pin(async move {
            let EmfSink { namespace, out } = self;
            let written = match out {
                // Locked for the whole batch: batches never interleave with other output.
                Out::Stdout => write_lines(&mut std::io::stdout().lock(), namespace, datums),
                Out::Writer(w) => write_lines(w.as_mut(), namespace, datums),
            };
            written.map_err(|e| super::SinkError {
                message: format!("emf output: {e}"),
                // The destination (stdout, a pipe) cannot be written.
                class: crate::record::PublishFailureClass::PublishUnreachable,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Unit;

    #[test]
    fn golden_readiness_line() {
        let d = Datum {
            metric: "Readiness",
            dimensions: vec![
                ("Service", "orders-db".into()),
                ("Branch", "primary".into()),
            ],
            value: Value::Single(1.0),
            unit: Unit::None,
            timestamp: 1_700_000_000_000,
            since: None,
        };
        // Key order depends on serde_json's preserve_order feature; compare as JSON values.
        let got: serde_json::Value =
            serde_json::from_str(&encode("Readyprobe", &d).unwrap()).unwrap();
        let want: serde_json::Value = serde_json::from_str(
            r#"{"_aws":{"CloudWatchMetrics":[{"Dimensions":[["Service","Branch"]],"Metrics":[{"Name":"Readiness","StorageResolution":60,"Unit":"None"}],"Namespace":"Readyprobe"}],"Timestamp":1700000000000},"Branch":"primary","Readiness":1.0,"Service":"orders-db"}"#,
        )
        .unwrap();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn writes_one_line_per_finite_datum_to_the_injected_writer() {
        let buf = EmfBuffer::new();
        let mut sink = EmfSink::with_writer("N", Box::new(buf.clone()));
        let d = |v| Datum {
            metric: "Attempts",
            dimensions: vec![("Service", "s".into())],
            value: Value::Single(v),
            unit: Unit::Count,
            timestamp: 0,
            since: None,
        };
        let sent = sink.send(&[d(1.0), d(f64::NAN), d(2.0)]).await.unwrap();
        assert_eq!(sent, 2);
        let lines = buf.lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains("\"Attempts\":2.0"), "{}", lines[1]);
    }

    #[test]
    fn non_finite_is_never_encoded() {
        let mut d = Datum {
            metric: "SuccessRate",
            dimensions: vec![],
            value: Value::Single(f64::NAN),
            unit: Unit::Percent,
            timestamp: 0,
            since: None,
        };
        assert!(encode("N", &d).is_none());
        d.value = Value::Samples(vec![1.0, f64::INFINITY]);
        assert!(encode("N", &d).is_none());
    }
}
