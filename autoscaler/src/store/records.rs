//! What the store holds, and how each record is framed on disk.
//!
//! Every value starts with one byte naming its record format version, followed by JSON. sled's
//! own file format is not stable across its versions, so our records must not depend on it:
//! an export/import or a move to another engine only needs this framing.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::core::job::JobPhase;
use crate::core::machine::MachineState;
use crate::core::{JobId, Millis, SidecarId};
use crate::secret::{Secret, TokenDigest};

/// The record format this build writes.
pub const RECORD_VERSION: u8 = 1;

/// A job the autoscaler holds. The payload GitLab sent is stored apart (written once, read at
/// hand-out) so that the frequent phase updates rewrite only this small record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub pool: String,
    /// The job token: relayed calls for this job must present it.
    pub token: Secret,
    /// The jobs whose artifacts this job may download, with the token GitLab gave for each.
    pub dependencies: Vec<DependencyGrant>,
    pub project_id: Option<u64>,
    /// Its pipeline, stage and name (from the payload), for the pipeline forecast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<crate::core::pipelines::PipelinePlace>,
    /// The machine class it runs on (`None`: its pool has no classes).
    #[serde(default)]
    pub class: Option<String>,
    pub phase: JobPhase,
    pub accepted_at: Millis,
    /// How long the job was pending at GitLab before it was handed to the autoscaler
    /// (`job_info.time_in_queue_seconds`), when GitLab said.
    #[serde(default)]
    pub queued_at_gitlab_ms: Option<u64>,
    /// Whether the payload's `features.failure_reasons` lists `runner_interrupted`: the reason
    /// a job interrupted by the loss of its machine is failed with, where GitLab takes it.
    #[serde(default)]
    pub runner_interrupted_listed: bool,
    /// GitLab confirmed an acceptance (`PUT state=running` answered `200`), the sidecar's or
    /// ours. Until then the autoscaler owes GitLab one.
    #[serde(default)]
    pub acknowledged: bool,
    /// GitLab holds the job for our acknowledgement (two-phase commit answered our `pending`
    /// keep-alive with `200`): the job's time at GitLab has not started, and ceasing the
    /// keep-alives releases it (runner-protocol.md §3.5).
    #[serde(default)]
    pub held: bool,
    /// Artifact uploads taken while GitLab could not, kept on disk until GitLab has them.
    #[serde(default)]
    pub spooled: Vec<SpooledUpload>,
    /// GitLab refused a spooled upload (status and message): the job's final state must say
    /// so, as a stock runner's would have.
    #[serde(default)]
    pub artifact_refusal: Option<String>,
    /// What happened to the job here, in order (see `jobs::timeline`).
    #[serde(default)]
    pub timeline: Vec<JobStep>,
    /// It ended as failed: GitLab took a final `failed` state for it, or refused its calls
    /// while it ran (canceled). GitLab skips the stages after a failed job, which the pipeline
    /// forecast learns from (`jobs::JobNews::Ended`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// One step of a job's life in the autoscaler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStep {
    pub at: Millis,
    /// `taken`, `held`, `handed_over`, `returned`, `started`, `failing`, `finished`.
    pub step: String,
    /// The sidecar it was handed to (`handed_over`).
    #[serde(default)]
    pub sidecar: Option<SidecarId>,
    #[serde(default)]
    pub detail: Option<String>,
}

/// An artifact upload kept on disk for GitLab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpooledUpload {
    pub file: String,
    pub query: Option<String>,
    pub content_type: String,
    pub size: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyGrant {
    pub id: JobId,
    pub token: Secret,
}

/// A sidecar attached to a pool. Only the digest of its token is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarRecord {
    pub id: SidecarId,
    pub pool: String,
    pub token_digest: TokenDigest,
    pub description: Option<String>,
    pub created_at: Millis,
    /// The machine this sidecar was injected into (none for a sidecar that registered itself).
    #[serde(default)]
    pub machine: Option<String>,
}

/// A machine of a pool, from the moment we decide to create it until the provider says it is
/// gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRecord {
    /// Our id; also the idempotency key given to the provisioner.
    pub id: String,
    pub pool: String,
    pub state: MachineState,
    /// When it entered `state`.
    pub since: Millis,
    pub created_at: Millis,
    /// The source (provisioner) that made it; empty in records from before sources existed,
    /// which belong to the pool's first source.
    #[serde(default)]
    pub source: String,
    /// Its machine class (`None`: its pool has no classes).
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub provider_id: Option<String>,
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    #[serde(default)]
    pub host_key: Option<HostKey>,
    #[serde(default)]
    pub sidecar: Option<SidecarId>,
    /// Jobs handed to it so far.
    #[serde(default)]
    pub use_count: u32,
    /// Why it is failed, draining or being destroyed.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub destroy_attempts: u32,
    /// When the next destroy attempt is due.
    #[serde(default)]
    pub next_attempt: Millis,
    /// When it was last started from `stopped` (the warm pool): its way back to ready is a
    /// start, not a boot, and is not taken as the pool's create-to-ready time.
    #[serde(default)]
    pub restarted_at: Option<Millis>,
    /// Its states over time (bounded), for operators and the demo.
    #[serde(default)]
    pub timeline: Vec<TimelineEntry>,
}

/// Where to reach a machine over SSH.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
}

/// The SSH host key a machine must present.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostKey {
    /// `type base64`, as in `known_hosts`.
    pub key: String,
    pub source: HostKeySource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKeySource {
    /// The provisioner reported it.
    Provider,
    /// Seen on the first connection and enforced since.
    FirstConnection,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub at: Millis,
    pub state: MachineState,
    #[serde(default)]
    pub reason: Option<String>,
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![RECORD_VERSION];
    serde_json::to_writer(&mut out, value).map_err(|e| StoreError::Encode(e.to_string()))?;
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(
    kind: &'static str,
    key: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&RECORD_VERSION, body)) => {
            serde_json::from_slice(body).map_err(|e| StoreError::Corrupt {
                kind,
                key: key.to_string(),
                detail: e.to_string(),
            })
        }
        Some((&version, _)) => Err(StoreError::UnsupportedRecordVersion {
            kind,
            key: key.to_string(),
            version,
        }),
        None => Err(StoreError::Corrupt {
            kind,
            key: key.to_string(),
            detail: "empty value".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_unknown_versions() {
        let s = SidecarRecord {
            id: SidecarId(3),
            pool: "p".into(),
            token_digest: TokenDigest::of("t"),
            description: None,
            created_at: 1,
            machine: None,
        };
        let bytes = encode(&s).unwrap();
        assert_eq!(bytes[0], RECORD_VERSION);
        assert_eq!(decode::<SidecarRecord>("sidecar", "3", &bytes).unwrap(), s);
        let mut future = bytes.clone();
        future[0] = 99;
        assert!(matches!(
            decode::<SidecarRecord>("sidecar", "3", &future),
            Err(StoreError::UnsupportedRecordVersion { version: 99, .. })
        ));
        assert!(matches!(
            decode::<SidecarRecord>("sidecar", "3", &bytes[..5]),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
