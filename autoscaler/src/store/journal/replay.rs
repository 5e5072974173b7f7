//! What `open` replays into sled: the epochs found in the journal files, from the point the
//! last recorded checkpoint covered on.
//!
//! The manifest records, with each checkpoint it witnesses, the journal position taken before
//! sled was flushed and synced: every entry before it is in sled on stable storage, so replaying
//! it again would only cost time and memory (a store whose journal held its whole history, 100
//! MB, took most of the start-up and twice its size in memory to replay). Entries after it, and
//! whole epochs after its epoch, are replayed; replaying one sled already has changes nothing.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::entry::{HEADER, read_epoch};
use super::{Entries, Entry, Position};

/// One journal file as replay needs it: its epoch, and the bytes past what the checkpoint
/// covered (starting at an entry boundary).
#[derive(Debug)]
pub(super) struct EpochBytes {
    pub(super) epoch: u64,
    bytes: Vec<u8>,
}

/// Reads what replay needs of one journal file of `size` bytes: the epoch its `begin` entry
/// names, then nothing of an epoch the checkpoint covered whole, the part past the covered end
/// of the covered epoch (an entry boundary, or past what was ever written there: zeros or an
/// older epoch's entries follow, where decoding stops), and the whole of a later one. (Reading
/// the files whole held a journal of the store's history, 180 MB, in memory at start-up, only
/// to skip it.) `None` for a file that does not start with a whole `begin` entry.
pub(super) fn read_file(
    file: &File,
    size: u64,
    covered: Option<Position>,
) -> std::io::Result<Option<EpochBytes>> {
    let mut begin = [0u8; HEADER + 1];
    if file.read_at(&mut begin, 0)? < begin.len() {
        return Ok(None);
    }
    let Some(epoch) = read_epoch(&begin) else {
        return Ok(None);
    };
    let from = match covered {
        Some(c) if c.epoch > epoch => size,
        Some(c) if c.epoch == epoch => c.end.min(size),
        _ => 0,
    };
    let mut bytes = vec![0; usize::try_from(size - from).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut bytes, from)?;
    Ok(Some(EpochBytes { epoch, bytes }))
}

/// The epochs found at open, oldest first: entries are decoded one at a time while they are
/// replayed, so that a long journal is never held twice in memory.
#[derive(Debug)]
pub(in crate::store) struct Replay {
    epochs: Vec<EpochBytes>,
}

impl Replay {
    pub(super) fn new(epochs: Vec<EpochBytes>) -> Self {
        Self { epochs }
    }

    /// Every entry not yet covered, oldest first (the `begin` entries left out): what
    /// [`read_file`] kept of each epoch.
    pub(in crate::store) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.epochs
            .iter()
            .flat_map(|e| Entries::new(&e.bytes, e.epoch).filter(|x| *x != Entry::Begin))
    }

    #[cfg(test)]
    pub(in crate::store) fn collected(&self) -> Vec<Entry> {
        self.entries().collect()
    }

    /// The bytes read from the files and held for replay.
    #[cfg(test)]
    pub(in crate::store) fn bytes_held(&self) -> usize {
        self.epochs.iter().map(|e| e.bytes.len()).sum()
    }
}
