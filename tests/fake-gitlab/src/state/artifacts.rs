//! Artifacts as GitLab guards them (runner-protocol.md §7): who may upload or download with which
//! job token, when a second upload of a type is refused, and the `/storage/` keys of
//! `--artifacts-redirect`.

use crate::control::JobStatus;

use super::{State, StoredArtifact, random_alphanumeric};

/// Why a job token may not touch an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArtifactAccess {
    NotFound,
    Forbidden,
    NotProcessing(JobStatus),
}

/// Whether an uploaded file may be kept (Rails refuses a second, different file of a type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UploadDecision {
    Store,
    /// Same bytes as the stored one: success without change.
    Identical,
    Conflict,
}

impl State {
    /// Upload needs the job's own token while it runs (or is canceling, for `when: always`).
    pub fn authorize_upload(&self, id: u64, token: &str) -> Result<(), ArtifactAccess> {
        let job = self.jobs.get(&id).ok_or(ArtifactAccess::NotFound)?;
        if job.token != token {
            return Err(ArtifactAccess::Forbidden);
        }
        match job.status {
            JobStatus::Running | JobStatus::Canceling => Ok(()),
            other => Err(ArtifactAccess::NotProcessing(other)),
        }
    }

    pub fn upload_decision(
        &self,
        id: u64,
        artifact_type: &str,
        sha256: &[u8; 32],
    ) -> UploadDecision {
        match self
            .jobs
            .get(&id)
            .and_then(|job| job.artifacts.get(artifact_type))
        {
            None => UploadDecision::Store,
            Some(stored) if &stored.sha256 == sha256 => UploadDecision::Identical,
            Some(_) => UploadDecision::Conflict,
        }
    }

    pub fn record_artifact(&mut self, id: u64, artifact: StoredArtifact) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        self.storage_keys.insert(
            artifact.storage_key.clone(),
            (id, artifact.artifact_type.clone()),
        );
        if let Some(old) = job
            .artifacts
            .insert(artifact.artifact_type.clone(), artifact)
        {
            self.storage_keys.remove(&old.storage_key);
        }
    }

    /// Download of job `id`'s archive with a job token: the job's own, or that of a running job
    /// that lists `id` among its dependencies (runner-protocol.md §7.2).
    pub fn authorize_download(
        &self,
        id: u64,
        token: &str,
    ) -> Result<StoredArtifact, ArtifactAccess> {
        let target = self.jobs.get(&id).ok_or(ArtifactAccess::NotFound)?;
        let caller = self
            .job_ids_by_token
            .get(token)
            .and_then(|caller_id| self.jobs.get(caller_id))
            .ok_or(ArtifactAccess::Forbidden)?;
        let allowed = caller.id == id
            || (matches!(caller.status, JobStatus::Running | JobStatus::Canceling)
                && caller.spec.dependencies.contains(&id));
        if !allowed {
            return Err(ArtifactAccess::Forbidden);
        }
        target
            .artifacts
            .get("archive")
            .cloned()
            .ok_or(ArtifactAccess::NotFound)
    }

    pub fn artifact(&self, id: u64, artifact_type: &str) -> Option<StoredArtifact> {
        self.jobs.get(&id)?.artifacts.get(artifact_type).cloned()
    }

    pub fn artifact_by_storage_key(&self, key: &str) -> Option<StoredArtifact> {
        let (id, artifact_type) = self.storage_keys.get(key)?;
        self.artifact(*id, artifact_type)
    }
}

/// A fresh unguessable storage key.
pub(crate) fn new_storage_key() -> String {
    random_alphanumeric(32)
}
