//! The [`Store`] calls on sled's trees: each write applied to its tree and journalled
//! (`SledStore::put`, `SledStore::remove`), each read straight from sled.

use std::sync::atomic::Ordering;

use futures::future::BoxFuture;

use super::{JOBS, LAST_ID_KEY, MACHINES, META, PAYLOADS, SIDECARS, SledStore, be_u64, io, key};
use crate::core::{JobId, SidecarId};
use crate::store::journal::Entry;
use crate::store::records::{decode, encode};
use crate::store::{JobRecord, MachineRecord, SidecarRecord, Store, StoreError};

fn all<T: serde::de::DeserializeOwned>(
    tree: &sled::Tree,
    kind: &'static str,
) -> Result<Vec<T>, StoreError> {
    tree.iter()
        .map(|item| {
            let (k, v) = item.map_err(io)?;
            let id = be_u64(&k).unwrap_or(0);
            decode(kind, &id.to_string(), &v)
        })
        .collect()
}

impl Store for SledStore {
    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.put(JOBS, &key(job.id.0), &encode(job)?)
    }

    fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.tree(JOBS)
            .get(key(id.0))
            .map_err(io)?
            .map(|v| decode("job", &id.to_string(), &v))
            .transpose()
    }

    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        all(self.tree(JOBS), "job")
    }

    fn remove_job(&self, id: JobId) -> Result<(), StoreError> {
        self.remove(JOBS, &key(id.0))?;
        self.remove(PAYLOADS, &key(id.0))
    }

    fn put_payload(&self, id: JobId, payload: &[u8]) -> Result<(), StoreError> {
        // The payload is GitLab's bytes: stored raw, never re-encoded, so hand-out is byte for byte.
        self.put(PAYLOADS, &key(id.0), payload)
    }

    fn payload(&self, id: JobId) -> Result<Option<bytes::Bytes>, StoreError> {
        Ok(self
            .tree(PAYLOADS)
            .get(key(id.0))
            .map_err(io)?
            .map(|v| bytes::Bytes::copy_from_slice(&v)))
    }

    fn put_machine(&self, machine: &MachineRecord) -> Result<(), StoreError> {
        self.put(MACHINES, machine.id.as_bytes(), &encode(machine)?)
    }

    fn machines(&self) -> Result<Vec<MachineRecord>, StoreError> {
        self.tree(MACHINES)
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(io)?;
                decode("machine", &String::from_utf8_lossy(&k), &v)
            })
            .collect()
    }

    fn remove_machine(&self, id: &str) -> Result<(), StoreError> {
        self.remove(MACHINES, id.as_bytes())
    }

    fn put_sidecar(&self, sidecar: &SidecarRecord) -> Result<(), StoreError> {
        self.put(SIDECARS, &key(sidecar.id.0), &encode(sidecar)?)
    }

    fn sidecars(&self) -> Result<Vec<SidecarRecord>, StoreError> {
        all(self.tree(SIDECARS), "sidecar")
    }

    fn remove_sidecar(&self, id: SidecarId) -> Result<(), StoreError> {
        self.remove(SIDECARS, &key(id.0))
    }

    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.put(META, key.as_bytes(), value)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tree(META).get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    fn next_id(&self) -> Result<u64, StoreError> {
        // Counted under the journal's lock and journalled like any write, so ids stay unique
        // across restarts and power cuts once `durable` returned.
        let meta = self.tree(META);
        self.journal.record(|| {
            let id = self.last_id.load(Ordering::SeqCst) + 1;
            let value = id.to_be_bytes();
            meta.insert(LAST_ID_KEY, &value).map_err(io)?;
            self.last_id.store(id, Ordering::SeqCst);
            Ok((
                id,
                Entry::Put {
                    tree: META,
                    key: LAST_ID_KEY.as_bytes().to_vec(),
                    value: value.to_vec(),
                },
            ))
        })
    }

    fn durable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let started = crate::clock::monotonic();
            self.journal.durable().await?;
            if let Some(h) = &self.flush_seconds {
                h.observe(started.elapsed().as_secs_f64());
            }
            self.checkpoint_if_due();
            Ok(())
        })
    }
}
