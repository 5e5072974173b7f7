//! The job log: masking ([`masker`]), limit and checksum ([`buffer`]) and offsets
//! ([`offsets`]). The PATCH/PUT loop that ships it to GitLab is `job::updater`, above the
//! client and the executor it drives.

pub mod buffer;
pub mod masker;
pub mod offsets;

use std::sync::{Arc, Mutex, MutexGuard};

use buffer::TraceBuffer;

pub const ANSI_RESET: &str = "\x1b[0;m";
pub const ANSI_BOLD_GREEN: &str = "\x1b[32;1m";
pub const ANSI_BOLD_RED: &str = "\x1b[31;1m";
pub const ANSI_BOLD_CYAN: &str = "\x1b[36;1m";
pub const ANSI_YELLOW: &str = "\x1b[0;33m";
pub const ANSI_CLEAR_LINE: &str = "\x1b[0K";

/// `crc32:%08x`, the format of `output.checksum` (§4).
pub fn format_checksum(crc: u32) -> String {
    format!("crc32:{crc:08x}")
}

/// Shared handle on one job's log, written by the executor and read by the updater.
#[derive(Clone, Debug)]
pub struct Trace {
    inner: Arc<Mutex<TraceBuffer>>,
    sections: bool,
}

impl Trace {
    /// `sections`: emit GitLab's collapsible section markers (`features.trace_sections`).
    pub fn new(buffer: TraceBuffer, sections: bool) -> Self {
        Self {
            inner: Arc::new(Mutex::new(buffer)),
            sections,
        }
    }

    fn lock(&self) -> MutexGuard<'_, TraceBuffer> {
        // A panic while holding the lock cannot leave the buffer inconsistent in a way
        // that matters more than losing the log.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self, bytes: &[u8]) {
        self.lock().write(bytes);
    }

    pub fn line(&self, text: &str) {
        self.write(format!("{text}\n").as_bytes());
    }

    pub fn success(&self, text: &str) {
        self.line(&format!("{ANSI_BOLD_GREEN}{text}{ANSI_RESET}"));
    }

    pub fn warning(&self, text: &str) {
        self.line(&format!("{ANSI_YELLOW}WARNING: {text}{ANSI_RESET}"));
    }

    pub fn error(&self, text: &str) {
        self.line(&format!("{ANSI_BOLD_RED}ERROR: {text}{ANSI_RESET}"));
    }

    /// Start of a stage: a cyan header line, wrapped in a section marker when enabled.
    pub fn section_start(&self, name: &str, header: &str) {
        let mut text = String::new();
        if self.sections {
            text.push_str(&format!(
                "section_start:{}:{name}\r{ANSI_CLEAR_LINE}",
                unix_now()
            ));
        }
        text.push_str(&format!(
            "{ANSI_CLEAR_LINE}{ANSI_BOLD_CYAN}{header}{ANSI_RESET}\n"
        ));
        self.write(text.as_bytes());
    }

    pub fn section_end(&self, name: &str) {
        if self.sections {
            let text = format!("section_end:{}:{name}\r{ANSI_CLEAR_LINE}", unix_now());
            self.write(text.as_bytes());
        }
    }

    /// End of the log (flushes the masker).
    pub fn finish(&self) {
        self.lock().finish();
    }

    /// (bytesize, crc32) of the log so far.
    pub fn summary(&self) -> (u64, u32) {
        let guard = self.lock();
        (guard.len(), guard.crc32())
    }

    pub fn len(&self) -> u64 {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The next patch after `acknowledged`, at most `max` bytes; `None` if nothing is new.
    pub fn next_chunk(&self, acknowledged: u64, max: u64) -> Option<(u64, bytes::Bytes)> {
        let guard = self.lock();
        let range = offsets::next_patch(acknowledged, guard.len(), max)?;
        let data = bytes::Bytes::copy_from_slice(guard.slice(range.start, range.end));
        Some((range.start, data))
    }

    /// The whole log (tests and diagnostics).
    pub fn contents(&self) -> Vec<u8> {
        let guard = self.lock();
        guard.slice(0, guard.len()).to_vec()
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use masker::Masker;

    fn trace(sections: bool) -> Trace {
        let m = Masker::new(Vec::<String>::new(), Vec::<String>::new());
        Trace::new(TraceBuffer::new(m, 1 << 20), sections)
    }

    #[test]
    fn chunks_follow_offsets() {
        let t = trace(false);
        assert!(t.next_chunk(0, 4).is_none());
        t.write(b"0123456789");
        let (start, data) = t.next_chunk(0, 4).unwrap();
        assert_eq!((start, &data[..]), (0, &b"0123"[..]));
        let (start, data) = t.next_chunk(8, 4).unwrap();
        assert_eq!((start, &data[..]), (8, &b"89"[..]));
        assert!(t.next_chunk(10, 4).is_none());
    }

    #[test]
    fn sections_are_optional() {
        let t = trace(false);
        t.section_start("get_sources", "Getting source");
        t.section_end("get_sources");
        let text = String::from_utf8(t.contents()).unwrap();
        assert_eq!(text, "\x1b[0K\x1b[36;1mGetting source\x1b[0;m\n");
        let t = trace(true);
        t.section_start("get_sources", "Getting source");
        t.section_end("get_sources");
        let text = String::from_utf8(t.contents()).unwrap();
        assert!(text.starts_with("section_start:"), "{text}");
        assert!(text.contains(":get_sources\r\x1b[0K"));
        assert!(text.contains("section_end:"));
    }
}
