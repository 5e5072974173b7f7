//! The production store, on sled.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::checkpoint::{COMMIT_KEY, Checkpoints};
use super::journal::{Entry, Journal};
use super::manifest::{Found, Manifest, Verdict, verdict};
use super::{SCHEMA_VERSION, Store, StoreError};

const SCHEMA_KEY: &str = "schema_version";
const STORE_ID_KEY: &str = "store_id";
/// The last id handed out by `next_id`.
const LAST_ID_KEY: &str = "last_id";

/// Which sled tree a journal entry belongs to.
const JOBS: u8 = 0;
const PAYLOADS: u8 = 1;
const SIDECARS: u8 = 2;
const MACHINES: u8 = 3;
const META: u8 = 4;

mod store_calls;

/// sled holds the records; the journal (see `journal`) makes each write durable at `durable()`
/// with one `fdatasync`, and checkpoints bring sled's own files to stable storage.
#[derive(Debug)]
pub struct SledStore {
    path: PathBuf,
    trees: [sled::Tree; 5],
    journal: Arc<Journal>,
    checkpoints: Arc<Checkpoints>,
    last_id: AtomicU64,
    /// Where each durable sync's duration is recorded (`autoscaler_store_flush_seconds`).
    flush_seconds: Option<prometheus_client::metrics::histogram::Histogram>,
}

/// sled's page cache. Every record the service uses lives in its own memory too; sled is read at
/// start-up and for the payload of a job taken before a restart, so its cache buys little, and
/// sled's default (1 GiB) let resident memory grow with the store: 279 MiB with 10,000
/// machines and 20,000 jobs in the footprint benchmark, 236–241 MiB with 16 MiB, with no
/// change to the relay figures; 4 MiB took 2–3 MiB more off once start-up no longer read the
/// journal whole.
const CACHE_CAPACITY: u64 = 4 * 1024 * 1024;

impl SledStore {
    /// Opens (or creates) the store in `dir`. Refuses a store written by a newer schema, and a
    /// database that does not match its manifest (see `manifest`). Replays the journal, then
    /// checkpoints, so that the store starts with an empty journal.
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
            .cache_capacity(CACHE_CAPACITY)
            // Checkpoints flush sled; its own timer would only add syncs at random moments.
            .flush_every_ms(None)
            .open()
            .map_err(|e| open_err(e.to_string()))?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| open_err(e.to_string()));
        let trees = [
            tree("jobs")?,
            tree("payloads")?,
            tree("sidecars")?,
            tree("machines")?,
            tree("meta")?,
        ];
        // The manifest's journal position counts only if the database proves to be the store it
        // describes (`verdict` below refuses to open otherwise, before anything is replayed).
        let covered = manifest.as_ref().and_then(|m| m.journal_covered);
        let (journal, replay) = Journal::open(dir, covered)?;
        let journal = Arc::new(journal);
        let checkpoints = Checkpoints::new(
            dir,
            db.clone(),
            trees[META as usize].clone(),
            journal.clone(),
        );
        let store = Self {
            path: dir.to_path_buf(),
            trees,
            journal,
            checkpoints: Arc::new(checkpoints),
            last_id: AtomicU64::new(0),
            flush_seconds: None,
        };
        let found = store.found()?;
        store.checkpoints.set_commit(found.commit);
        let store_id = match verdict(dir, manifest.as_ref(), &found)? {
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
        store.checkpoints.set_store_id(store_id);
        for entry in replay.entries() {
            store.replay(entry)?;
        }
        drop(replay);
        store.check_schema()?;
        let last_id = store.meta(LAST_ID_KEY)?.map_or(Ok(0), |v| {
            be_u64(&v).ok_or_else(|| corrupt(LAST_ID_KEY, v.len()))
        })?;
        // Stores from before `last_id` drew ids from sled's generator, which only grows.
        let from_sled = db.generate_id().map_err(io)?;
        store
            .last_id
            .store(last_id.max(from_sled), Ordering::SeqCst);
        store.checkpoints.run(true)?;
        store.journal.sync_now()?;
        Ok(store)
    }

    fn tree(&self, id: u8) -> &sled::Tree {
        &self.trees[id as usize]
    }

    /// Applies one journalled write to sled (start-up), without journalling it again: the
    /// checkpoint that ends `open` brings it to stable storage before anything is written to
    /// the journal, whose files keep it until then. (Journalling it again held the whole journal
    /// in memory a second time and wrote it out once more: 230 MiB at the peak with the
    /// footprint benchmark's 100 MB journal.)
    fn replay(&self, entry: Entry) -> Result<(), StoreError> {
        let tree_of = |tree: u8| {
            self.trees
                .get(tree as usize)
                .ok_or_else(|| unknown_tree(tree))
        };
        match entry {
            Entry::Begin => Ok(()),
            Entry::Put { tree, key, value } => {
                tree_of(tree)?.insert(key, value).map_err(io).map(drop)
            }
            Entry::Remove { tree, key } => tree_of(tree)?.remove(key).map_err(io).map(drop),
        }
    }

    fn put(&self, tree: u8, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let tree_ref = self
            .trees
            .get(tree as usize)
            .ok_or_else(|| unknown_tree(tree))?;
        self.journal.record(|| {
            tree_ref.insert(key, value).map_err(io)?;
            Ok((
                (),
                Entry::Put {
                    tree,
                    key: key.to_vec(),
                    value: value.to_vec(),
                },
            ))
        })
    }

    fn remove(&self, tree: u8, key: &[u8]) -> Result<(), StoreError> {
        let tree_ref = self
            .trees
            .get(tree as usize)
            .ok_or_else(|| unknown_tree(tree))?;
        self.journal.record(|| {
            tree_ref.remove(key).map_err(io)?;
            Ok((
                (),
                Entry::Remove {
                    tree,
                    key: key.to_vec(),
                },
            ))
        })
    }

    /// What the database says about itself, for the manifest check.
    fn found(&self) -> Result<Found, StoreError> {
        let store_id = self
            .meta(STORE_ID_KEY)?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        let commit = match self.meta(COMMIT_KEY)? {
            Some(v) => be_u64(&v).ok_or_else(|| corrupt(COMMIT_KEY, v.len()))?,
            None => 0,
        };
        let has_records = [JOBS, SIDECARS, MACHINES, META]
            .iter()
            .any(|&t| !self.tree(t).is_empty());
        Ok(Found {
            store_id,
            commit,
            has_records,
        })
    }

    /// Brings sled's files to stable storage and records the commit number in the manifest.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.checkpoints.run(true)
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

    /// Records each durable sync's duration in `histogram`.
    #[must_use]
    pub fn with_flush_histogram(
        mut self,
        histogram: prometheus_client::metrics::histogram::Histogram,
    ) -> Self {
        self.flush_seconds = Some(histogram);
        self
    }

    /// How many journal syncs reached the disk; with `durable` calls this shows the group
    /// commit.
    pub fn flush_count(&self) -> u64 {
        self.journal.sync_count()
    }

    /// Starts a checkpoint in the background when the journal asks for one (its epoch is long,
    /// or the last checkpoint is old), unless one is running.
    fn checkpoint_if_due(&self) {
        let c = &self.checkpoints;
        if c.running.swap(true, Ordering::SeqCst) {
            return;
        }
        // A switch needs the checkpoint of the previous one done (see `journal`).
        let owed = c.owed.load(Ordering::SeqCst);
        let switched = !owed && self.journal.switch_if_long();
        if switched {
            c.owed.store(true, Ordering::SeqCst);
        }
        if owed || switched || c.stale() {
            c.run_in_background();
        } else {
            c.running.store(false, Ordering::SeqCst);
        }
    }
}

/// A checkpoint still running in the background holds the database open: the store waits for
/// it, so that a store dropped can be opened again at once (a restart within one process, the
/// tests), rather than find sled's lock still taken.
impl Drop for SledStore {
    fn drop(&mut self) {
        self.checkpoints.wait_background();
    }
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn unknown_tree(tree: u8) -> StoreError {
    StoreError::Corrupt {
        kind: "journal",
        key: tree.to_string(),
        detail: "an entry names a tree this build does not have".into(),
    }
}

fn corrupt(key: &str, len: usize) -> StoreError {
    StoreError::Corrupt {
        kind: "meta",
        key: key.into(),
        detail: format!("{len} bytes instead of 8"),
    }
}

fn be_u64(v: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(v).ok().map(u64::from_be_bytes)
}

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}
