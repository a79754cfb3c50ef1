//! Integration tests.

mod cli;
mod config_hostile;
mod failback;
mod fuzz;
mod harness_smoke;
mod http_kind;
mod mysql_kind;
mod otlp_kind;
mod pipeline;
mod resolve_step;
mod support;
mod tcp_kind;
mod tls_step;
