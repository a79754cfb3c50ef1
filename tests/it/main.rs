//! Integration tests.

mod cli;
mod failback;
mod harness_smoke;
mod http_kind;
mod mysql_kind;
mod otlp_kind;
mod pipeline;
mod resolve_step;
mod state_dir;
mod support;
mod tcp_kind;
mod tls_step;
