//! A journal entry's encoding and decoding (the layout is described in `journal.rs`).

pub(super) const HEADER: usize = 16;

/// One store write, as journalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) enum Entry {
    Begin,
    Put {
        tree: u8,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Remove {
        tree: u8,
        key: Vec<u8>,
    },
}

const BEGIN: u8 = 0;
const PUT: u8 = 1;
const REMOVE: u8 = 2;

pub(super) fn encode(epoch: u64, entry: &Entry) -> Vec<u8> {
    let mut body = Vec::new();
    match entry {
        Entry::Begin => body.push(BEGIN),
        Entry::Put { tree, key, value } => {
            body.extend_from_slice(&[PUT, *tree]);
            body.extend_from_slice(&(key.len() as u32).to_le_bytes());
            body.extend_from_slice(key);
            body.extend_from_slice(value);
        }
        Entry::Remove { tree, key } => {
            body.extend_from_slice(&[REMOVE, *tree]);
            body.extend_from_slice(&(key.len() as u32).to_le_bytes());
            body.extend_from_slice(key);
        }
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&checksum(epoch, &body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn checksum(epoch: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&epoch.to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// The epoch a file holds, or `None` for a file that does not start with a whole `begin`
/// entry.
pub(super) fn read_epoch(bytes: &[u8]) -> Option<u64> {
    let epoch = u64::from_le_bytes(bytes.get(4..12)?.try_into().ok()?);
    (Entries::new(bytes, epoch).next()? == Entry::Begin).then_some(epoch)
}

/// The whole entries of `epoch` at the start of `bytes`.
pub(super) struct Entries<'a> {
    bytes: &'a [u8],
    epoch: u64,
}

impl<'a> Entries<'a> {
    pub(super) fn new(bytes: &'a [u8], epoch: u64) -> Self {
        Self { bytes, epoch }
    }
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let len = u32::from_le_bytes(self.bytes.get(0..4)?.try_into().ok()?) as usize;
        let epoch = u64::from_le_bytes(self.bytes.get(4..12)?.try_into().ok()?);
        let crc = u32::from_le_bytes(self.bytes.get(12..16)?.try_into().ok()?);
        let body = self.bytes.get(HEADER..HEADER + len)?;
        if epoch != self.epoch || len == 0 || checksum(epoch, body) != crc {
            return None;
        }
        self.bytes = &self.bytes[HEADER + len..];
        decode(body)
    }
}

fn decode(body: &[u8]) -> Option<Entry> {
    match *body.first()? {
        BEGIN => Some(Entry::Begin),
        op @ (PUT | REMOVE) => {
            let tree = *body.get(1)?;
            let len = u32::from_le_bytes(body.get(2..6)?.try_into().ok()?) as usize;
            let key = body.get(6..6 + len)?.to_vec();
            let rest = body.get(6 + len..)?;
            Some(if op == PUT {
                Entry::Put {
                    tree,
                    key,
                    value: rest.to_vec(),
                }
            } else {
                Entry::Remove { tree, key }
            })
        }
        _ => None,
    }
}
