//! The pure core: state machines and decisions as plain data and functions. Nothing in here
//! does IO, reads a clock or spawns a task; time comes in as an argument.

pub mod acceptance;
pub mod backoff;
pub mod breaker;
pub mod classes;
pub mod demand;
pub mod features;
pub mod job;
pub mod machine;
pub mod payload;
pub mod pipelines;
pub mod reconcile;
pub mod routing;
pub mod scaler;
pub mod schedule;
pub mod throttle;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as handed in by the caller.
pub type Millis = u64;

/// The share of jobs a p95 wait target lets wait longer than the target: one in twenty. The
/// demand-aware buffer (`demand`) and the timing of a pipeline's next stage (`pipelines`) both
/// read their tails at it.
pub const P95_SHARE: f64 = 0.05;

/// A sidecar (a runner attached to a pool), numbered by the autoscaler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SidecarId(pub u64);

impl std::fmt::Display for SidecarId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A GitLab job id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
