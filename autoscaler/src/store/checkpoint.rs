//! Checkpoints: sled flushed and its files `fdatasync`ed, so that the journal's older epoch is
//! no longer needed, and the manifest brought up to date.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::SCHEMA_VERSION;
use super::StoreError;
use super::journal::{Journal, Position};
use super::manifest::Manifest;

/// Counts checkpoints; the manifest records a value the database reached, to detect a damaged
/// log.
pub(super) const COMMIT_KEY: &str = "commit";
/// How often the manifest's commit number is brought up to date.
const MANIFEST_EVERY: Duration = Duration::from_secs(10);
/// A journal that is not long enough for a switch is still checkpointed this often, so that
/// sled's files and the manifest do not fall far behind.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct Checkpoints {
    path: PathBuf,
    db: sled::Db,
    journal: std::sync::Arc<Journal>,
    /// The journal position the last successful checkpoint covered, for the manifest.
    covered: Mutex<Option<Position>>,
    meta: sled::Tree,
    store_id: std::sync::OnceLock<String>,
    /// The last commit number on stable storage in sled.
    commit: AtomicU64,
    manifest_written: Mutex<Option<Instant>>,
    last: Mutex<Instant>,
    /// One checkpoint at a time.
    pub(super) running: AtomicBool,
    /// The journal switched epochs and the checkpoint that covers the old one has not succeeded
    /// yet: no further switch until it has.
    pub(super) owed: AtomicBool,
    /// Blob files (sled keeps large values in files of their own) already synced.
    synced_blobs: Mutex<HashSet<OsString>>,
    failing: AtomicBool,
    /// Background checkpoints not yet over, each holding the database open; the store waits
    /// for none before it is dropped, so that the database is closed when the store is.
    background: std::sync::Arc<Background>,
}

/// Background checkpoints in flight: counted under a lock, with a condition to wait on.
#[derive(Debug, Default)]
pub(super) struct Background {
    active: Mutex<usize>,
    over: std::sync::Condvar,
}

/// One background checkpoint, counted from its spawn until it is dropped: when it has run, or
/// when a runtime shutting down drops it unrun (which must not leave the count up).
struct InFlight(std::sync::Arc<Background>);

impl InFlight {
    fn new(background: &std::sync::Arc<Background>) -> Self {
        *lock(&background.active) += 1;
        Self(background.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *lock(&self.0.active) -= 1;
        self.0.over.notify_all();
    }
}

impl Background {
    /// Blocks until no background checkpoint is left.
    pub(super) fn wait_none(&self) {
        let mut active = lock(&self.active);
        while *active > 0 {
            active = self
                .over
                .wait(active)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Checkpoints {
    pub(super) fn new(
        path: &Path,
        db: sled::Db,
        meta: sled::Tree,
        journal: std::sync::Arc<Journal>,
    ) -> Self {
        Self {
            path: path.to_path_buf(),
            db,
            journal,
            covered: Mutex::new(None),
            meta,
            store_id: std::sync::OnceLock::new(),
            commit: AtomicU64::new(0),
            manifest_written: Mutex::new(None),
            last: Mutex::new(crate::clock::monotonic()),
            running: AtomicBool::new(false),
            owed: AtomicBool::new(false),
            synced_blobs: Mutex::new(HashSet::new()),
            failing: AtomicBool::new(false),
            background: std::sync::Arc::default(),
        }
    }

    pub(super) fn set_store_id(&self, id: String) {
        let _ = self.store_id.set(id);
    }

    pub(super) fn set_commit(&self, commit: u64) {
        self.commit.store(commit, Ordering::SeqCst);
    }

    pub(super) fn commit(&self) -> u64 {
        self.commit.load(Ordering::SeqCst)
    }

    pub(super) fn stale(&self) -> bool {
        lock(&self.last).elapsed() >= CHECKPOINT_EVERY
    }

    /// Flushes sled, `fdatasync`s its files and advances the commit number; writes the manifest
    /// when `manifest` is set or it is due.
    pub(super) fn run(&self, manifest: bool) -> Result<(), StoreError> {
        // Taken before the flush: everything recorded up to here is in what sled flushes.
        let covered = self.journal.position();
        let commit = self.commit() + 1;
        self.meta
            .insert(COMMIT_KEY, &commit.to_be_bytes())
            .map_err(sled_io)?;
        self.db.flush().map_err(sled_io)?;
        self.sync_files()?;
        self.commit.store(commit, Ordering::SeqCst);
        *lock(&self.covered) = Some(covered);
        *lock(&self.last) = crate::clock::monotonic();
        let due = lock(&self.manifest_written).is_none_or(|t| t.elapsed() >= MANIFEST_EVERY);
        if manifest || due {
            self.write_manifest()?;
        }
        Ok(())
    }

    /// Records the last checkpointed commit number in the manifest.
    pub(super) fn write_manifest(&self) -> Result<(), StoreError> {
        let id = self.store_id.get().cloned().unwrap_or_default();
        let mut manifest = Manifest::new(SCHEMA_VERSION, id, self.commit());
        if let Some(covered) = *lock(&self.covered) {
            manifest = manifest.covering(covered);
        }
        manifest.write(&self.path)?;
        *lock(&self.manifest_written) = Some(crate::clock::monotonic());
        Ok(())
    }

    /// Runs a checkpoint on a blocking thread, logging a failure once until one works again.
    pub(super) fn run_in_background(self: &std::sync::Arc<Self>) {
        let this = self.clone();
        let in_flight = InFlight::new(&self.background);
        tokio::task::spawn_blocking(move || {
            match this.run(false) {
                Ok(()) => {
                    this.owed.store(false, Ordering::SeqCst);
                    if this.failing.swap(false, Ordering::SeqCst) {
                        tracing::info!("store checkpoints work again");
                    }
                }
                Err(e) => {
                    if !this.failing.swap(true, Ordering::SeqCst) {
                        tracing::error!(error = %e,
                            "store checkpoint failed; writes stay durable in the journal, which grows until one works");
                    }
                }
            }
            this.running.store(false, Ordering::SeqCst);
            // The database closes with its last handle: this one goes before the count does.
            drop(this);
            drop(in_flight);
        });
    }

    /// Waits for the checkpoints running in the background to end.
    pub(super) fn wait_background(&self) {
        self.background.wait_none();
    }

    /// `fdatasync` of what sled wrote: its log, the blob files it wrote since the last time
    /// (it never syncs those itself) and the directories that name them.
    fn sync_files(&self) -> Result<(), StoreError> {
        let db = self.path.join("db");
        sync(&db.join("db"))?;
        let blobs = db.join("blobs");
        if let Ok(entries) = std::fs::read_dir(&blobs) {
            let mut synced = lock(&self.synced_blobs);
            let mut present = HashSet::new();
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !synced.contains(&name) {
                    sync(&entry.path())?;
                }
                present.insert(name);
            }
            // sled deletes blobs it no longer needs; forget those.
            *synced = present;
            sync(&blobs)?;
        }
        sync(&db)
    }
}

fn sync(path: &Path) -> Result<(), StoreError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_data())
        .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))
}

fn sled_io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain values: a panic elsewhere leaves them whole.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
