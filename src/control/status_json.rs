//! The JSON form of a control document that `status --json` prints and `/status` serves (pure:
//! the reading time is an argument).

use super::ControlDoc;
use crate::readiness::Millis;

/// `doc`, plus `freshness`: when it was read (`read_at`, ms since the epoch: now for `status
/// --json`, the last sync for `/status`) and per prober id its `age_ms` at `now` (since its last
/// save, negative when saved ahead of this clock) and whether it is `stale` at `now`
/// ([`super::ProberState::is_fresh`]).
pub fn with_freshness(doc: &ControlDoc, read_at: Millis, now: Millis) -> serde_json::Value {
    let probers: serde_json::Map<String, serde_json::Value> = doc
        .probers
        .iter()
        .map(|(id, p)| {
            let v = serde_json::json!({
                "age_ms": now.saturating_sub(p.saved_at),
                "stale": !p.is_fresh(now),
            });
            (id.clone(), v)
        })
        .collect();
    let mut v = serde_json::to_value(doc).unwrap_or_default();
    if let Some(top) = v.as_object_mut() {
        top.insert(
            "freshness".into(),
            serde_json::json!({"read_at": read_at, "probers": probers}),
        );
    }
    v
}
