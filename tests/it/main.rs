//! Integration tests.

mod check_aws;
mod cli;
mod config_hostile;
mod drill;
mod failback;
mod fault_matrix;
mod fleet;
mod fuzz;
mod harness_smoke;
mod hostile_state;
mod http_kind;
mod infra_alarm;
mod infra_contract;
mod mysql_kind;
mod otlp_kind;
mod pipeline;
mod publish_faults;
mod reload;
mod resolve_step;
mod secret_leak;
mod simulate;
mod stable_name;
mod state_dir;
mod support;
mod tcp_kind;
mod tls_step;
