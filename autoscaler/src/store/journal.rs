//! The store's write-ahead journal: what makes a write durable.
//!
//! sled 0.34 flushes with `sync_file_range`, which leaves the data in the disk's write cache,
//! and its flush crosses two threads of its own. So every store write is also appended, in
//! order, to a journal of ours. The append is a `pwrite` at once, as the write is recorded: a
//! process that dies a moment later (`kill -9`, a panic, the OOM killer) leaves the entry in the
//! kernel's page cache, and the next start replays it. Only a power loss can take an entry
//! between its write and the next sync. `durable()` is one `fdatasync` of the journal, done by
//! the first caller for everyone waiting (group commit). sled is flushed, and its files
//! `fdatasync`ed, in the background at checkpoints; after that the journal's older half is no
//! longer needed.
//!
//! Two files alternate, `journal-0` and `journal-1`. Epoch `e` lives in file `e % 2`; it starts
//! with a `begin` entry and holds every write from the moment the previous epoch ended. A
//! switch to the next epoch happens only once the previous checkpoint covered the epoch before,
//! so at most two epochs exist and replaying both, older first, ends in the right state: every
//! entry is a whole put or remove, so replaying an entry sled already has changes nothing.
//!
//! An entry is `len: u32, epoch: u64, crc32: u32, body` (little endian); the checksum covers the
//! epoch and the body. Replay of a file stops at the first entry that is torn, foreign to the
//! file's epoch or absent (files are reused, so stale entries of older epochs follow).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::StoreError;

mod entry;
mod replay;
pub(super) use entry::Entry;
#[cfg(test)]
use entry::HEADER;
use entry::{Entries, encode};
pub(super) use replay::Replay;

/// Files grow in steps of zeros written ahead, so that a sync rarely has to record a new size.
const GROW_STEP: u64 = 256 * 1024;
/// An epoch this long asks for a checkpoint.
pub(super) const CHECKPOINT_BYTES: u64 = 1024 * 1024;

/// A point in the journal: byte `end` of epoch `epoch`'s file (an entry boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    pub epoch: u64,
    pub end: u64,
}

#[derive(Debug)]
pub(super) struct Journal {
    dir: PathBuf,
    files: [File; 2],
    state: Mutex<State>,
    /// Entries appended so far, and how many of them a finished sync covered.
    appended: AtomicU64,
    synced: tokio::sync::watch::Sender<u64>,
    /// Held by the one caller writing and syncing the active file.
    leading: AtomicBool,
    syncs: AtomicU64,
}

#[derive(Debug)]
struct State {
    epoch: u64,
    /// Encoded entries not yet written (a write failed, or the epoch's `begin` before the
    /// first sync), and where in the active file they go. Entries are written in order, so a
    /// new one waits here while any does.
    pending: Vec<u8>,
    offset: u64,
    /// How far the active file has been filled with zeros ahead of the writes.
    allocated: [u64; 2],
}

impl Journal {
    /// Opens the journal in `dir` and returns the epochs it holds, oldest first, to be replayed
    /// from `covered` on (what the last recorded checkpoint brought to stable storage in sled).
    /// New writes go to a new epoch, numbered past both.
    pub(super) fn open(
        dir: &Path,
        covered: Option<Position>,
    ) -> Result<(Self, Replay), StoreError> {
        let mut found = Vec::new();
        let mut files = Vec::new();
        let mut allocated = [0; 2];
        for (slot, size) in allocated.iter_mut().enumerate() {
            let path = dir.join(format!("journal-{slot}"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| io_at(&path, e))?;
            *size = file.metadata().map_err(|e| io_at(&path, e))?.len();
            if let Some(epoch) =
                replay::read_file(&file, *size, covered).map_err(|e| io_at(&path, e))?
            {
                found.push(epoch);
            }
            files.push(file);
        }
        found.sort_by_key(|e| e.epoch);
        // Past the covered epoch too: were the files lost, a new epoch numbered below it would
        // have its entries skipped at the next open.
        let epoch = found
            .last()
            .map_or(0, |e| e.epoch)
            .max(covered.map_or(0, |c| c.epoch))
            + 1;
        let [a, b]: [File; 2] = files.try_into().expect("two journal files");
        let journal = Self {
            dir: dir.to_path_buf(),
            files: [a, b],
            state: Mutex::new(State {
                epoch,
                pending: encode(epoch, &Entry::Begin),
                offset: 0,
                allocated,
            }),
            appended: AtomicU64::new(1),
            synced: tokio::sync::watch::Sender::new(0),
            leading: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
        };
        Ok((journal, Replay::new(found)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state whole before anything in it can panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies a write with `apply` and journals the entry it returns, both under one lock, so
    /// that the journal's order is the order in which sled saw the writes. The entry is written
    /// to the active file at once (not synced): from here on only a power loss can lose it. If
    /// that write fails, the entry waits in `pending` for the next sync, which reports the
    /// error to whoever needs the write durable.
    pub(super) fn record<T>(
        &self,
        apply: impl FnOnce() -> Result<(T, Entry), StoreError>,
    ) -> Result<T, StoreError> {
        let mut state = self.lock();
        let (result, entry) = apply()?;
        let bytes = encode(state.epoch, &entry);
        self.appended.fetch_add(1, Ordering::SeqCst);
        if !state.pending.is_empty() || self.write_at_end(&mut state, &bytes).is_err() {
            state.pending.extend_from_slice(&bytes);
        }
        Ok(result)
    }

    /// Writes `bytes` at the active file's end, growing the file ahead as needed, and moves the
    /// end past them. Called with the state locked: entries reach the file in recorded order.
    fn write_at_end(&self, state: &mut State, bytes: &[u8]) -> Result<(), StoreError> {
        let slot = (state.epoch % 2) as usize;
        let file = &self.files[slot];
        let end = state.offset + bytes.len() as u64;
        let grown = grow(file, state.allocated[slot], end)
            .and_then(|grown| {
                file.write_all_at(bytes, state.offset)?;
                Ok(grown)
            })
            .map_err(|e| io_at(&self.path(slot), e))?;
        state.allocated[slot] = state.allocated[slot].max(grown);
        state.offset = end;
        Ok(())
    }

    /// Where the journal stands now: every entry recorded before this point has been applied
    /// to sled (`record` applies and appends under one lock).
    pub(super) fn position(&self) -> Position {
        let state = self.lock();
        Position {
            epoch: state.epoch,
            end: state.offset + state.pending.len() as u64,
        }
    }

    /// How many syncs reached the disk: with concurrent `durable` calls this shows sharing.
    pub(super) fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Resolves once every entry appended before the call is on stable storage. The first
    /// caller writes and syncs for all; the others wait for its result and return if covered.
    pub(super) async fn durable(&self) -> Result<(), StoreError> {
        let target = self.appended.load(Ordering::SeqCst);
        let mut synced = self.synced.subscribe();
        loop {
            if *synced.borrow_and_update() >= target {
                return Ok(());
            }
            if !self.leading.swap(true, Ordering::SeqCst) {
                let result = blocking(|| self.sync_pending());
                self.leading.store(false, Ordering::SeqCst);
                // Waiters look again: covered, or one of them leads the next sync.
                self.synced.send_modify(|_| {});
                result?;
                continue;
            }
            // The leader wakes us whether its sync worked or not.
            let _ = synced.changed().await;
        }
    }

    /// Writes the entries still pending to the active file and `fdatasync`s it (outside the
    /// lock: records go on meanwhile). Only the leader calls this, so the epoch cannot switch
    /// under it. On failure the entries stay pending, to be written by the next sync.
    fn sync_pending(&self) -> Result<(), StoreError> {
        let (slot, covered) = {
            let mut state = self.lock();
            let covered = self.appended.load(Ordering::SeqCst);
            if !state.pending.is_empty() {
                let pending = std::mem::take(&mut state.pending);
                if let Err(e) = self.write_at_end(&mut state, &pending) {
                    state.pending = pending;
                    return Err(e);
                }
            }
            ((state.epoch % 2) as usize, covered)
        };
        self.files[slot]
            .sync_data()
            .map_err(|e| io_at(&self.path(slot), e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.synced.send_modify(|s| *s = (*s).max(covered));
        Ok(())
    }

    /// Writes and syncs what is pending, outside async code (start-up).
    pub(super) fn sync_now(&self) -> Result<(), StoreError> {
        while self.leading.swap(true, Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let result = self.sync_pending();
        self.leading.store(false, Ordering::SeqCst);
        self.synced.send_modify(|_| {});
        result
    }

    /// Starts a new epoch if the active one is long enough. The caller guarantees that the
    /// epoch before the active one is covered by a checkpoint, and checkpoints after this
    /// returns `true`: every write journalled before the switch is then in sled's flush.
    /// Skipped while a sync is writing the active file.
    pub(super) fn switch_if_long(&self) -> bool {
        if self.leading.swap(true, Ordering::SeqCst) {
            return false;
        }
        let switched = self.switch_if_long_leading();
        self.leading.store(false, Ordering::SeqCst);
        // A caller that found the lead taken waits for a wake-up: it may lead now.
        self.synced.send_modify(|_| {});
        switched
    }

    fn switch_if_long_leading(&self) -> bool {
        let mut state = self.lock();
        if state.offset + (state.pending.len() as u64) < CHECKPOINT_BYTES {
            return false;
        }
        // Entries written since the last sync must reach the disk before their file is left:
        // later syncs cover only the new one. Once per epoch, so under the lock. If it fails,
        // the epoch stays, and the next `durable` syncs the same file and reports the error.
        let old = &self.files[(state.epoch % 2) as usize];
        if blocking(|| old.sync_data()).is_err() {
            return false;
        }
        let epoch = state.epoch + 1;
        // Entries not yet written move to the new epoch: they were never acknowledged.
        let carried = std::mem::take(&mut state.pending);
        let mut pending = encode(epoch, &Entry::Begin);
        for entry in Entries::new(&carried, state.epoch) {
            pending.extend_from_slice(&encode(epoch, &entry));
        }
        self.appended.fetch_add(1, Ordering::SeqCst);
        state.epoch = epoch;
        state.offset = 0;
        // Written at once, so that the entries recorded from now on are written at once too.
        if self.write_at_end(&mut state, &pending).is_err() {
            state.pending = pending;
        }
        true
    }

    fn path(&self, slot: usize) -> PathBuf {
        self.dir.join(format!("journal-{slot}"))
    }
}

/// Runs a blocking file operation from async code: in place on a multi-threaded runtime (no
/// hand-off to another thread; the runtime moves its other tasks away meanwhile), directly
/// elsewhere (single-threaded tests, start-up).
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Fills `file` with zeros from `allocated` to past `end`, in steps, and returns the new end.
fn grow(file: &File, allocated: u64, end: u64) -> std::io::Result<u64> {
    if end <= allocated {
        return Ok(allocated);
    }
    let target = end.div_ceil(GROW_STEP) * GROW_STEP;
    let zeros = vec![0u8; (target - allocated) as usize];
    file.write_all_at(&zeros, allocated)?;
    Ok(target)
}

fn io_at(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
