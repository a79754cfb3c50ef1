//! The AWS edge: every SDK client is built here from one [`AwsTarget`] (region, endpoint,
//! timeouts, tries, response body limit, the default credentials chain), and every AWS error
//! code the prober reads is classified by one table ([`codes`]).
//!
//! [`secrets_manager`] reads one secret (the run's secret cache calls it); [`rds_token`] signs
//! RDS IAM database login tokens.
//!
//! Role-based publishing (STS AssumeRole) is done in [`AwsTarget::session`]: the one place
//! that loads credentials for every client; [`target_for`] maps a configured publish target
//! to its [`AwsTarget`]. The alarm and health-check vocabulary is a pure
//! leaf beside it ([`crate::aws_vocab`]), so `simulate` and `config` use it without the SDK.

pub mod body_limit;
pub mod cause;
pub mod client;
pub mod codes;
pub mod rds_token;
pub mod secrets_manager;

pub use body_limit::BodyLimit;
pub use client::{AssumeRoleSpec, AwsTarget, Retries, Session, Timeouts, target_for};
pub use codes::{CodeKind, kind_of};
