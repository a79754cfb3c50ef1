//! Integration tests.

mod cli;
mod dns_cases;
mod failback;
mod harness_smoke;
mod http_kind;
mod otlp_kind;
mod pipeline;
mod steps;
mod support;
mod tcp_kind;
mod tls;
