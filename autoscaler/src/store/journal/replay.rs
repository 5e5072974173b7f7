//! What `open` replays into sled: the epochs found in the journal files, from the point the
//! last recorded checkpoint covered on.
//!
//! The manifest records, with each checkpoint it witnesses, the journal position taken before
//! sled was flushed and synced: every entry before it is in sled on stable storage, so replaying
//! it again would only cost time and memory (a store whose journal held its whole history, 100
//! MB, took most of the start-up and twice its size in memory to replay). Entries after it, and
//! whole epochs after its epoch, are replayed; replaying one sled already has changes nothing.

use super::{Entries, Entry, Position};

/// The epochs found at open, oldest first, as the files' bytes: entries are decoded one at a
/// time while they are replayed, so that a long journal is never held twice in memory.
#[derive(Debug)]
pub(in crate::store) struct Replay {
    epochs: Vec<(u64, Vec<u8>)>,
    covered: Option<Position>,
}

impl Replay {
    pub(super) fn new(epochs: Vec<(u64, Vec<u8>)>, covered: Option<Position>) -> Self {
        Self { epochs, covered }
    }

    /// Every entry not yet covered, oldest first (the `begin` entries left out).
    pub(in crate::store) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        let covered = self.covered;
        self.epochs
            .iter()
            .filter(move |(epoch, _)| covered.is_none_or(|c| *epoch >= c.epoch))
            .flat_map(move |(epoch, bytes)| {
                // Within the covered epoch, start at the covered end: an entry boundary, or
                // past what was ever written there (zeros or an older epoch's entries follow,
                // where reading stops).
                let from = match covered {
                    Some(c) if c.epoch == *epoch => usize::try_from(c.end)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len()),
                    _ => 0,
                };
                Entries::new(&bytes[from..], *epoch).filter(|e| *e != Entry::Begin)
            })
    }

    #[cfg(test)]
    pub(in crate::store) fn collected(&self) -> Vec<Entry> {
        self.entries().collect()
    }
}
