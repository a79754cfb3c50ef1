//! Fault injectors for the fault matrix (`tests/it/fault_matrix`): an in-process TCP proxy that
//! resets or trickles a connection at a chosen point, a peer that accepts and never speaks, a DNS
//! responder that answers late or truncated, and a network namespace whose nftables rules drop
//! or reset connections.

pub mod dns;
pub mod netns;
pub mod proxy;
