//! Integration tests.

mod harness_smoke;
mod support;
