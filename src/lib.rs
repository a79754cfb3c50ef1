//! readyprobe: probes each Route 53 failover branch by its own name, folds the attempts into one
//! 0/1 readiness metric per branch with asymmetric hysteresis, and publishes it for the CloudWatch
//! alarm that drives the failover health check. See ARCHITECTURE.md for the code map.

pub mod aws;
pub mod aws_check;
pub mod aws_vocab;
pub mod cli;
pub mod clock;
pub mod config;
pub mod config_source;
pub mod contract;
pub mod control;
pub mod datum;
pub mod failure;
pub mod fold;
pub mod heartbeat;
pub mod otlp_wire;
pub mod probe;
pub mod readiness;
pub mod record;
pub mod regular_file;
pub mod reload_plan;
pub mod report;
pub mod runner;
pub mod scheduler;
pub mod secrets;
pub mod serve;
pub mod simulate;
pub mod sink;
pub mod state;

#[cfg(test)]
mod module_graph;
