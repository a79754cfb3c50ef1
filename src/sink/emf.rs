//! The `emf` sink: CloudWatch Embedded Metric Format JSON lines on stdout (the embedded default).
//!
//! One line per datum, so a reader (or the CloudWatch Logs agent) never has to split groups.

use super::{Datum, SendFuture, Sink, Value};
use serde_json::{Map, json};
use std::io::Write;

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
                "Metrics": [{"Name": d.metric, "Unit": d.unit.as_str(), "StorageResolution": 60}],
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

/// Writes EMF lines to stdout.
#[derive(Debug)]
pub struct EmfSink {
    namespace: String,
}

impl EmfSink {
    /// A sink for `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        EmfSink {
            namespace: namespace.into(),
        }
    }
}

impl Sink for EmfSink {
    fn name(&self) -> &'static str {
        "emf"
    }

    fn send<'a>(&'a mut self, datums: &'a [Datum]) -> SendFuture<'a> {
        Box::pin(async move {
            let mut buf = String::new();
            let mut n = 0;
            for d in datums {
                if let Some(line) = encode(&self.namespace, d) {
                    buf.push_str(&line);
                    buf.push('\n');
                    n += 1;
                }
            }
            let mut out = std::io::stdout().lock();
            out.write_all(buf.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| super::SinkError {
                    message: format!("stdout: {e}"),
                    retryable: false,
                })?;
            Ok(n)
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

    #[test]
    fn non_finite_is_never_encoded() {
        let mut d = Datum {
            metric: "SuccessRate",
            dimensions: vec![],
            value: Value::Single(f64::NAN),
            unit: Unit::Percent,
            timestamp: 0,
        };
        assert!(encode("N", &d).is_none());
        d.value = Value::Samples(vec![1.0, f64::INFINITY]);
        assert!(encode("N", &d).is_none());
    }
}
