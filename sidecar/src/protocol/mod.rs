//! Request and response bodies of the runner API (runner-protocol.md §2–§4) and the job payload
//! (§3.4). Only the payload fields the sidecar uses are modelled; unknown fields are ignored,
//! like the runner's Go structs do.
//!
//! The types live in `runners` (runner info, register/verify/unregister), `job` (job
//! request and payload) and `update` (job update, failure reasons), and are re-exported
//! here so that callers name them `protocol::X`.

mod job;
mod runners;
mod update;

use serde::Deserialize;

pub use job::{
    ArtifactSpec, ArtifactsFile, Dependency, GitInfo, JobFeatures, JobInfo, JobRequest,
    JobResponse, JobRunnerInfo, Step, Variable, When,
};
pub use runners::{
    ConfigInfo, Features, RegisterRequest, RunnerCredentials, RunnerInfo, UnregisterRequest,
    VerifyRequest, go_arch,
};
pub use update::{FailureReason, JobOutput, JobState, UpdateJobRequest};

/// Go's `encoding/json` leaves a field untouched on `null`; GitLab sends `null` for many
/// optional values (`expire_in`, `artifacts`, …), so `null` means "default" here too
/// instead of making the whole payload undecodable.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
