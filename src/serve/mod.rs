//! `[serve]`: the prober's own HTTP endpoint (`/metrics`, `/healthz`, `/status`), bounded, on
//! its own thread so that no client can delay an attempt.

pub mod exposition;
