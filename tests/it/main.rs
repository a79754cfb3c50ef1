//! Integration tests.

mod harness_smoke;
mod pipeline;
mod support;
