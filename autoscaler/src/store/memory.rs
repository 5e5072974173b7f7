//! The in-memory store: the fake for tests of everything above the store.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::future::BoxFuture;

use super::{JobRecord, MachineRecord, SidecarRecord, Store, StoreError};
use crate::core::{JobId, SidecarId};

#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    ids: AtomicU64,
    /// Set by a test: every write fails, as on a full or failing disk.
    failing: AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    jobs: BTreeMap<JobId, JobRecord>,
    payloads: BTreeMap<JobId, bytes::Bytes>,
    sidecars: BTreeMap<SidecarId, SidecarRecord>,
    machines: BTreeMap<String, MachineRecord>,
    meta: BTreeMap<String, Vec<u8>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every write fail (`true`) or work again, as a disk that fills up and is freed.
    pub fn fail_writes(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Io("No space left on device (simulated)".into()));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves maps that are still consistent (each operation
        // is a single insert or remove), so a poisoned lock is safe to keep using.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.writable()?;
        self.lock().jobs.insert(job.id, job.clone());
        Ok(())
    }

    fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Ok(self.lock().jobs.values().cloned().collect())
    }

    fn remove_job(&self, id: JobId) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.jobs.remove(&id);
        inner.payloads.remove(&id);
        Ok(())
    }

    fn put_payload(&self, id: JobId, payload: &[u8]) -> Result<(), StoreError> {
        self.writable()?;
        self.lock()
            .payloads
            .insert(id, bytes::Bytes::copy_from_slice(payload));
        Ok(())
    }

    fn payload(&self, id: JobId) -> Result<Option<bytes::Bytes>, StoreError> {
        Ok(self.lock().payloads.get(&id).cloned())
    }

    fn put_machine(&self, machine: &MachineRecord) -> Result<(), StoreError> {
        self.lock()
            .machines
            .insert(machine.id.clone(), machine.clone());
        Ok(())
    }

    fn machines(&self) -> Result<Vec<MachineRecord>, StoreError> {
        Ok(self.lock().machines.values().cloned().collect())
    }

    fn remove_machine(&self, id: &str) -> Result<(), StoreError> {
        self.lock().machines.remove(id);
        Ok(())
    }

    fn put_sidecar(&self, sidecar: &SidecarRecord) -> Result<(), StoreError> {
        self.lock().sidecars.insert(sidecar.id, sidecar.clone());
        Ok(())
    }

    fn sidecars(&self) -> Result<Vec<SidecarRecord>, StoreError> {
        Ok(self.lock().sidecars.values().cloned().collect())
    }

    fn remove_sidecar(&self, id: SidecarId) -> Result<(), StoreError> {
        self.lock().sidecars.remove(&id);
        Ok(())
    }

    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.writable()?;
        self.lock().meta.insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock().meta.get(key).cloned())
    }

    fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self.ids.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn durable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
}
