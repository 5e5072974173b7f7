//! Durable state behind one trait, with a sled implementation for production and an in-memory
//! one for tests; `conformance` holds the suite both must pass.
//!
//! Writes are cheap and buffered; [`Store::durable`] returns once everything written before the
//! call is on stable storage (for sled: `fdatasync` of the store's journal, see `journal`).
//! Concurrent callers share one sync (group commit), so durability costs one `fdatasync` per
//! burst of acceptances, not one per job.

mod checkpoint;
mod journal;
mod manifest;
mod memory;
mod records;
mod sled_store;

#[cfg(test)]
mod conformance;

use futures::future::BoxFuture;

use crate::core::{JobId, SidecarId};
pub use memory::MemoryStore;
pub use records::{
    DependencyGrant, Endpoint, HostKey, HostKeySource, JobRecord, JobStep, MachineRecord,
    RECORD_VERSION, SidecarRecord, SpooledUpload, TimelineEntry,
};
pub use sled_store::SledStore;

/// The schema this build reads and writes. Bumped when records or trees change meaning; a store
/// with a higher number was written by a newer build and is refused.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {detail}")]
    Open { path: String, detail: String },
    #[error(
        "the store at {path} was written by a newer autoscaler (schema {found}, this build reads up to {supported}); \
         run the newer version or restore a backup"
    )]
    NewerSchema {
        path: String,
        found: u32,
        supported: u32,
    },
    /// The database does not match its manifest: damaged files, never silently reset.
    #[error("the store at {path} is damaged: {detail}")]
    Damaged { path: String, detail: String },
    #[error("{kind} record {key} is corrupt: {detail}")]
    Corrupt {
        kind: &'static str,
        key: String,
        detail: String,
    },
    #[error("{kind} record {key} has format version {version}, which this build cannot read")]
    UnsupportedRecordVersion {
        kind: &'static str,
        key: String,
        version: u8,
    },
    #[error("cannot encode a record: {0}")]
    Encode(String),
    #[error("store I/O failed: {0}")]
    Io(String),
}

/// The autoscaler's durable state.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError>;
    fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError>;
    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError>;
    /// Removes the job and its payload.
    fn remove_job(&self, id: JobId) -> Result<(), StoreError>;

    /// The job payload exactly as GitLab sent it.
    fn put_payload(&self, id: JobId, payload: &[u8]) -> Result<(), StoreError>;
    fn payload(&self, id: JobId) -> Result<Option<bytes::Bytes>, StoreError>;

    fn put_machine(&self, machine: &MachineRecord) -> Result<(), StoreError>;
    fn machines(&self) -> Result<Vec<MachineRecord>, StoreError>;
    fn remove_machine(&self, id: &str) -> Result<(), StoreError>;

    fn put_sidecar(&self, sidecar: &SidecarRecord) -> Result<(), StoreError>;
    fn sidecars(&self) -> Result<Vec<SidecarRecord>, StoreError>;
    fn remove_sidecar(&self, id: SidecarId) -> Result<(), StoreError>;

    /// Small named values (a pool's runner `system_id`, ...).
    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// A number never handed out before by this store, even across restarts.
    fn next_id(&self) -> Result<u64, StoreError>;

    /// Resolves once every write made before the call is durable.
    fn durable(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}
