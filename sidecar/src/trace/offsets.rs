//! Trace offsets (runner-protocol.md §5): which bytes the next PATCH carries, its
//! `Content-Range`, and how a 416 re-synchronises the offset.

use std::ops::Range;

/// At most 1 MiB per PATCH (§5, `DefaultTracePatchLimit`).
pub const MAX_PATCH_SIZE: u64 = 1024 * 1024;

/// `Content-Range` of a patch: `<start>-<end>` with an inclusive end (start + len − 1).
/// Empty patches are never sent, so `len` ≥ 1.
pub fn content_range(start: u64, len: u64) -> String {
    debug_assert!(len > 0, "empty patches are never sent");
    format!("{}-{}", start, start + len.saturating_sub(1))
}

/// The offset a 416 answer's `Range: 0-<size>` tells us: the number after `-`.
pub fn parse_range_offset(range: &str) -> Option<u64> {
    let (_, end) = range.trim().split_once('-')?;
    end.trim().parse().ok()
}

/// The byte range of the next patch, or `None` when there is nothing to send.
/// `acknowledged` may exceed `total` after a 416 from a server that claims more than we
/// have; then there is nothing left to send, as with the runner.
pub fn next_patch(acknowledged: u64, total: u64, max: u64) -> Option<Range<u64>> {
    if acknowledged >= total || max == 0 {
        return None;
    }
    let end = total.min(acknowledged.saturating_add(max));
    Some(acknowledged..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_is_inclusive() {
        assert_eq!(content_range(0, 1), "0-0");
        assert_eq!(content_range(0, 10), "0-9");
        assert_eq!(content_range(10, 5), "10-14");
        assert_eq!(content_range(1_048_576, 1_048_576), "1048576-2097151");
    }

    #[test]
    fn range_header_parsing() {
        assert_eq!(parse_range_offset("0-42"), Some(42));
        assert_eq!(parse_range_offset(" 0-0 "), Some(0));
        assert_eq!(parse_range_offset("bytes"), None);
        assert_eq!(parse_range_offset("0-x"), None);
    }

    #[test]
    fn patches_are_bounded_and_never_empty() {
        assert_eq!(next_patch(0, 0, MAX_PATCH_SIZE), None);
        assert_eq!(next_patch(5, 5, MAX_PATCH_SIZE), None);
        assert_eq!(next_patch(7, 5, MAX_PATCH_SIZE), None);
        assert_eq!(next_patch(0, 10, MAX_PATCH_SIZE), Some(0..10));
        let total = 2 * MAX_PATCH_SIZE + 3;
        assert_eq!(
            next_patch(0, total, MAX_PATCH_SIZE),
            Some(0..MAX_PATCH_SIZE)
        );
        assert_eq!(
            next_patch(2 * MAX_PATCH_SIZE, total, MAX_PATCH_SIZE),
            Some(2 * MAX_PATCH_SIZE..total)
        );
    }
}
