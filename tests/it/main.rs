//! Integration tests.

mod cli;
mod harness_smoke;
mod pipeline;
mod steps;
mod support;
