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

/// One journal file as replay needs it: its epoch, and its bytes from byte `from` on.
#[derive(Debug)]
pub(super) struct EpochBytes {
    pub(super) epoch: u64,
    from: u64,
    bytes: Vec<u8>,
}

/// Reads what replay needs of one journal file: the epoch its `begin` entry names, then
/// nothing of an epoch the checkpoint covered whole, the part past the covered end of the
/// covered epoch, and the whole of a later one. (Reading the files whole held a journal of the
/// store's history, 180 MB, in memory at start-up, only to skip it.) `None` for a file that
/// does not start with a whole `begin` entry.
pub(super) fn read_file(
    file: &File,
    covered: Option<Position>,
) -> std::io::Result<Option<EpochBytes>> {
    let mut begin = [0u8; HEADER + 1];
    if file.read_at(&mut begin, 0)? < begin.len() {
        return Ok(None);
    }
    let Some(epoch) = read_epoch(&begin) else {
        return Ok(None);
    };
    let size = file.metadata()?.len();
    let from = match covered {
        Some(c) if c.epoch > epoch => size,
        Some(c) if c.epoch == epoch => c.end.min(size),
        _ => 0,
    };
    let mut bytes = vec![0; usize::try_from(size - from).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut bytes, from)?;
    Ok(Some(EpochBytes { epoch, from, bytes }))
}

/// The epochs found at open, oldest first: entries are decoded one at a time while they are
/// replayed, so that a long journal is never held twice in memory.
#[derive(Debug)]
pub(in crate::store) struct Replay {
    epochs: Vec<EpochBytes>,
    covered: Option<Position>,
}

impl Replay {
    pub(super) fn new(epochs: Vec<EpochBytes>, covered: Option<Position>) -> Self {
        Self { epochs, covered }
    }

    /// Every entry not yet covered, oldest first (the `begin` entries left out).
    pub(in crate::store) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        let covered = self.covered;
        self.epochs
            .iter()
            .filter(move |e| covered.is_none_or(|c| e.epoch >= c.epoch))
            .flat_map(move |e| {
                // Within the covered epoch, start at the covered end: an entry boundary, or
                // past what was ever written there (zeros or an older epoch's entries follow,
                // where reading stops). The bytes were read from `from` on.
                let start = match covered {
                    Some(c) if c.epoch == e.epoch => c.end.max(e.from) - e.from,
                    _ => 0,
                };
                let start = usize::try_from(start)
                    .unwrap_or(usize::MAX)
                    .min(e.bytes.len());
                Entries::new(&e.bytes[start..], e.epoch).filter(|x| *x != Entry::Begin)
            })
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
