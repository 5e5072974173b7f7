//! The production store, on sled.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;

use super::manifest::{Found, Manifest, Verdict, verdict};
use super::records::{decode, encode};
use super::{JobRecord, MachineRecord, SCHEMA_VERSION, SidecarRecord, Store, StoreError};
use crate::core::{JobId, SidecarId};

const SCHEMA_KEY: &str = "schema_version";
const STORE_ID_KEY: &str = "store_id";
/// Counts flushes; the manifest records a value the database reached, to detect a damaged log.
const COMMIT_KEY: &str = "commit";
/// How often a flush also brings the manifest's commit number up to date.
const MANIFEST_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug)]
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    jobs: sled::Tree,
    payloads: sled::Tree,
    sidecars: sled::Tree,
    machines: sled::Tree,
    meta: sled::Tree,
    /// Writes completed so far, and how many of them a finished flush covered. `durable` compares
    /// the two so that a caller whose writes were covered by someone else's flush returns at once.
    writes: AtomicU64,
    flushed: AtomicU64,
    flushes: AtomicU64,
    flush_lock: tokio::sync::Mutex<()>,
    store_id: String,
    /// The last commit number flushed to disk.
    commit: AtomicU64,
    manifest_written: std::sync::Mutex<std::time::Instant>,
    /// Where each flush's duration is recorded (`autoscaler_store_flush_seconds`).
    flush_seconds: Option<prometheus_client::metrics::histogram::Histogram>,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`. Refuses a store written by a newer schema, and a
    /// database that does not match its manifest (see `manifest`).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let open_err = |detail: String| StoreError::Open {
            path: dir.display().to_string(),
            detail,
        };
        std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        let manifest = Manifest::read(dir)?;
        let db = sled::Config::new()
            .path(dir.join("db"))
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| open_err(e.to_string()))?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| open_err(e.to_string()));
        let mut store = Self {
            path: dir.to_path_buf(),
            jobs: tree("jobs")?,
            payloads: tree("payloads")?,
            sidecars: tree("sidecars")?,
            machines: tree("machines")?,
            meta: tree("meta")?,
            db,
            writes: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_lock: tokio::sync::Mutex::new(()),
            store_id: String::new(),
            commit: AtomicU64::new(0),
            manifest_written: std::sync::Mutex::new(std::time::Instant::now()),
            flush_seconds: None,
        };
        let found = store.found()?;
        store.commit.store(found.commit, Ordering::SeqCst);
        store.store_id = match verdict(dir, manifest.as_ref(), &found)? {
            Verdict::Adopt => {
                let id = format!("{:016x}", rand::random::<u64>());
                store.put_meta(STORE_ID_KEY, id.as_bytes())?;
                id
            }
            Verdict::Intact => found.store_id.unwrap_or_default(),
            Verdict::Rewrite => {
                tracing::warn!(path = %dir.display(), "the store manifest was missing; writing a new one");
                found.store_id.unwrap_or_default()
            }
        };
        store.check_schema()?;
        store.db.flush().map_err(io)?;
        store.checkpoint()?;
        Ok(store)
    }

    /// What the database says about itself, for the manifest check.
    fn found(&self) -> Result<Found, StoreError> {
        let store_id = self
            .meta(STORE_ID_KEY)?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        let commit = match self.meta(COMMIT_KEY)? {
            Some(v) => <[u8; 8]>::try_from(v.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| StoreError::Corrupt {
                    kind: "meta",
                    key: COMMIT_KEY.into(),
                    detail: format!("{} bytes instead of 8", v.len()),
                })?,
            None => 0,
        };
        let has_records = [&self.jobs, &self.sidecars, &self.machines, &self.meta]
            .iter()
            .any(|t| !t.is_empty());
        Ok(Found {
            store_id,
            commit,
            has_records,
        })
    }

    /// Records the last flushed commit number in the manifest.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let manifest = Manifest::new(
            SCHEMA_VERSION,
            self.store_id.clone(),
            self.commit.load(Ordering::SeqCst),
        );
        manifest.write(&self.path)?;
        self.manifest_written_now();
        Ok(())
    }

    fn manifest_written_now(&self) {
        *self
            .manifest_written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = std::time::Instant::now();
    }

    fn check_schema(&self) -> Result<(), StoreError> {
        match self.meta(SCHEMA_KEY)? {
            None => self.put_meta(SCHEMA_KEY, &SCHEMA_VERSION.to_be_bytes()),
            Some(bytes) => {
                let found = <[u8; 4]>::try_from(bytes.as_slice())
                    .map(u32::from_be_bytes)
                    .map_err(|_| StoreError::Corrupt {
                        kind: "meta",
                        key: SCHEMA_KEY.into(),
                        detail: format!("{} bytes instead of 4", bytes.len()),
                    })?;
                if found > SCHEMA_VERSION {
                    return Err(StoreError::NewerSchema {
                        path: self.path.display().to_string(),
                        found,
                        supported: SCHEMA_VERSION,
                    });
                }
                // Older schemas would be migrated here, one version step at a time.
                Ok(())
            }
        }
    }

    /// Records each flush's duration in `histogram`.
    #[must_use]
    pub fn with_flush_histogram(
        mut self,
        histogram: prometheus_client::metrics::histogram::Histogram,
    ) -> Self {
        self.flush_seconds = Some(histogram);
        self
    }

    /// How many flushes reached the disk; with `durable` calls this shows the group commit.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    fn manifest_due(&self) -> bool {
        self.manifest_written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .elapsed()
            >= MANIFEST_EVERY
    }

    fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn all<T: serde::de::DeserializeOwned>(
    tree: &sled::Tree,
    kind: &'static str,
) -> Result<Vec<T>, StoreError> {
    tree.iter()
        .map(|item| {
            let (k, v) = item.map_err(io)?;
            let id = <[u8; 8]>::try_from(k.as_ref())
                .map(u64::from_be_bytes)
                .unwrap_or(0);
            decode(kind, &id.to_string(), &v)
        })
        .collect()
}

impl Store for SledStore {
    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.jobs.insert(key(job.id.0), encode(job)?).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.jobs
            .get(key(id.0))
            .map_err(io)?
            .map(|v| decode("job", &id.to_string(), &v))
            .transpose()
    }

    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        all(&self.jobs, "job")
    }

    fn remove_job(&self, id: JobId) -> Result<(), StoreError> {
        self.jobs.remove(key(id.0)).map_err(io)?;
        self.payloads.remove(key(id.0)).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn put_payload(&self, id: JobId, payload: &[u8]) -> Result<(), StoreError> {
        // The payload is GitLab's bytes: stored raw, never re-encoded, so hand-out is byte for byte.
        self.payloads.insert(key(id.0), payload).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn payload(&self, id: JobId) -> Result<Option<bytes::Bytes>, StoreError> {
        Ok(self
            .payloads
            .get(key(id.0))
            .map_err(io)?
            .map(|v| bytes::Bytes::copy_from_slice(&v)))
    }

    fn put_machine(&self, machine: &MachineRecord) -> Result<(), StoreError> {
        self.machines
            .insert(machine.id.as_bytes(), encode(machine)?)
            .map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn machines(&self) -> Result<Vec<MachineRecord>, StoreError> {
        self.machines
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(io)?;
                decode("machine", &String::from_utf8_lossy(&k), &v)
            })
            .collect()
    }

    fn remove_machine(&self, id: &str) -> Result<(), StoreError> {
        self.machines.remove(id.as_bytes()).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn put_sidecar(&self, sidecar: &SidecarRecord) -> Result<(), StoreError> {
        self.sidecars
            .insert(key(sidecar.id.0), encode(sidecar)?)
            .map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn sidecars(&self) -> Result<Vec<SidecarRecord>, StoreError> {
        all(&self.sidecars, "sidecar")
    }

    fn remove_sidecar(&self, id: SidecarId) -> Result<(), StoreError> {
        self.sidecars.remove(key(id.0)).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value).map_err(io)?;
        self.wrote();
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta.get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    fn next_id(&self) -> Result<u64, StoreError> {
        // sled persists a high-water mark, so ids stay unique across restarts and crashes.
        let id = self.db.generate_id().map_err(io)? + 1;
        self.wrote();
        Ok(id)
    }

    fn durable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let target = self.writes.load(Ordering::SeqCst);
            if self.flushed.load(Ordering::SeqCst) >= target {
                return Ok(());
            }
            let _turn = self.flush_lock.lock().await;
            // While we waited for our turn, another caller's flush may have covered our writes.
            if self.flushed.load(Ordering::SeqCst) >= target {
                return Ok(());
            }
            let covered = self.writes.load(Ordering::SeqCst);
            // The commit number rides in the same flush; the manifest learns it afterwards.
            let commit = self.commit.load(Ordering::SeqCst) + 1;
            self.meta
                .insert(COMMIT_KEY, &commit.to_be_bytes())
                .map_err(io)?;
            let db = self.db.clone();
            let manifest = self.manifest_due().then(|| {
                (
                    Manifest::new(SCHEMA_VERSION, self.store_id.clone(), commit),
                    self.path.clone(),
                )
            });
            let wrote_manifest = manifest.is_some();
            let started = std::time::Instant::now();
            tokio::task::spawn_blocking(move || {
                db.flush().map_err(io)?;
                match manifest {
                    Some((manifest, dir)) => manifest.write(&dir),
                    None => Ok(()),
                }
            })
            .await
            .map_err(|e| StoreError::Io(format!("flush task failed: {e}")))??;
            self.commit.store(commit, Ordering::SeqCst);
            self.flushed.fetch_max(covered, Ordering::SeqCst);
            self.flushes.fetch_add(1, Ordering::Relaxed);
            if let Some(h) = &self.flush_seconds {
                h.observe(started.elapsed().as_secs_f64());
            }
            if wrote_manifest {
                self.manifest_written_now();
            }
            Ok(())
        })
    }
}
