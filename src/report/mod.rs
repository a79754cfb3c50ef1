//! The drill report: a recorded drill's evidence (or a simulation) as a timeline picture and a
//! phase table. [`model`] is what a report shows; [`merge`] builds it from evidence lines of one
//! or more probers and [`phases`] measures each failover and failback in it; [`alarms`] adds the
//! CloudWatch alarm lanes; [`s3_evidence`] reads evidence segments from S3; [`svg`], [`html`]
//! and [`markdown`] draw it.
//!
//! Everything but [`alarms`]' fetch and [`s3_evidence`] is pure: no I/O, no clock.

pub mod alarms;
pub mod html;
pub mod markdown;
pub mod merge;
pub mod model;
pub mod phases;
pub mod s3_evidence;
pub mod svg;
