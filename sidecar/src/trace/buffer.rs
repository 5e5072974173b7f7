//! The job log as it will be sent: masked, capped at the output limit, with a running
//! CRC32 (IEEE) over exactly these bytes (runner-protocol.md §5: `output.checksum` and
//! `output.bytesize` of the final PUT describe the whole log).

use super::masker::Masker;

#[derive(Debug)]
pub struct TraceBuffer {
    masker: Masker,
    data: Vec<u8>,
    limit: usize,
    truncated: bool,
    finished: bool,
    hasher: crc32fast::Hasher,
    scratch: Vec<u8>,
}

impl TraceBuffer {
    /// `limit` in bytes (`--output-limit` KiB × 1024).
    pub fn new(masker: Masker, limit: usize) -> Self {
        Self {
            masker,
            data: Vec::new(),
            limit,
            truncated: false,
            finished: false,
            hasher: crc32fast::Hasher::new(),
            scratch: Vec::new(),
        }
    }

    /// Append output (masked before it is stored).
    pub fn write(&mut self, input: &[u8]) {
        if self.finished {
            return;
        }
        let mut masked = std::mem::take(&mut self.scratch);
        masked.clear();
        self.masker.write(input, &mut masked);
        self.append(&masked);
        self.scratch = masked;
    }

    /// End of the log: release what the masker still holds. Later writes are ignored.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        let mut rest = Vec::new();
        self.masker.flush(&mut rest);
        self.append(&rest);
        self.finished = true;
    }

    fn append(&mut self, bytes: &[u8]) {
        if self.truncated || bytes.is_empty() {
            return;
        }
        let room = self.limit.saturating_sub(self.data.len());
        if bytes.len() <= room {
            self.push(bytes);
            return;
        }
        self.push(&bytes[..room]);
        let notice = format!(
            "\n\x1b[33;1mJob's log exceeded limit of {} bytes.\n\
             Job execution will continue but no more output will be collected.\x1b[0;m\n",
            self.limit
        );
        self.push(notice.as_bytes());
        self.truncated = true;
    }

    fn push(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.data.extend_from_slice(bytes);
    }

    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes `[start, end)`, clamped to what exists.
    pub fn slice(&self, start: u64, end: u64) -> &[u8] {
        let len = self.data.len();
        let start = usize::try_from(start).unwrap_or(len).min(len);
        let end = usize::try_from(end).unwrap_or(len).clamp(start, len);
        &self.data[start..end]
    }

    /// CRC32 (IEEE) of everything stored so far.
    pub fn crc32(&self) -> u32 {
        self.hasher.clone().finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(limit: usize) -> TraceBuffer {
        TraceBuffer::new(
            Masker::new(Vec::<String>::new(), Vec::<String>::new()),
            limit,
        )
    }

    #[test]
    fn crc_matches_stored_bytes() {
        let mut b = plain(1024);
        b.write(b"hello ");
        b.write(b"world\n");
        b.finish();
        assert_eq!(b.slice(0, b.len()), b"hello world\n");
        assert_eq!(b.crc32(), crc32fast::hash(b"hello world\n"));
        // Known value of CRC32/IEEE("123456789").
        let mut c = plain(1024);
        c.write(b"123456789");
        assert_eq!(c.crc32(), 0xcbf4_3926);
        assert_eq!(super::super::format_checksum(c.crc32()), "crc32:cbf43926");
    }

    #[test]
    fn limit_appends_notice_once_and_drops_the_rest() {
        let mut b = plain(10);
        b.write(b"0123456");
        b.write(b"789abc");
        b.write(b"qqq");
        b.finish();
        let all = b.slice(0, b.len()).to_vec();
        assert!(all.starts_with(b"0123456789\n"));
        let text = String::from_utf8_lossy(&all);
        assert!(
            text.contains("Job's log exceeded limit of 10 bytes."),
            "{text}"
        );
        assert!(!text.contains("abc") && !text.contains("qqq"));
        assert!(b.is_truncated());
        assert_eq!(b.crc32(), crc32fast::hash(&all));
    }

    #[test]
    fn masking_applies_before_storage() {
        let mut b = TraceBuffer::new(Masker::new(["topsecret"], Vec::<String>::new()), 1 << 20);
        b.write(b"a topsec");
        b.write(b"ret b");
        b.finish();
        assert_eq!(b.slice(0, b.len()), b"a [MASKED] b");
    }

    #[test]
    fn slice_is_clamped() {
        let mut b = plain(100);
        b.write(b"abcdef");
        assert_eq!(b.slice(2, 4), b"cd");
        assert_eq!(b.slice(4, 100), b"ef");
        assert_eq!(b.slice(10, 20), b"");
        assert_eq!(b.slice(5, 2), b"");
    }

    #[test]
    fn writes_after_finish_are_ignored() {
        let mut b = plain(100);
        b.write(b"x");
        b.finish();
        b.write(b"y");
        assert_eq!(b.slice(0, 10), b"x");
    }
}
