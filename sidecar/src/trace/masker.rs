//! Streaming masking of the job log: values of `masked: true` variables become `[MASKED]`,
//! and tokens starting with one of `features.token_mask_prefixes` keep their prefix and have
//! their body replaced (`glpat-[MASKED]`, the runner's long-standing rendering).
//!
//! Output arrives in arbitrary chunks, so a secret can be split across two writes. The
//! masker holds back the shortest tail that could still turn into a match and emits it
//! with the next write, or unmasked-if-harmless at [`Masker::flush`].

/// Replacement text.
pub const MASK: &[u8] = b"[MASKED]";

/// A token body longer than this is masked without waiting for its end, so a stream of
/// token characters cannot make the masker hold back unbounded output.
const MAX_TOKEN_BODY: usize = 1024;

/// Characters that may continue a prefixed token (the runner's "sane" token alphabet).
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=')
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    /// Replace `len` bytes; keep the first `keep` of them (a token prefix).
    Full {
        len: usize,
        keep: usize,
    },
    /// The rest of the buffer could still become a match: wait for more input.
    Partial,
    None,
}

#[derive(Clone, Default)]
pub struct Masker {
    /// Longest first, so that the longest secret wins.
    secrets: Vec<Vec<u8>>,
    prefixes: Vec<Vec<u8>>,
    /// Bytes that can start a secret or prefix: everything else is passed straight through.
    starts: Vec<bool>,
    pending: Vec<u8>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("secrets", &self.secrets.len())
            .field("prefixes", &self.prefixes.len())
            .finish_non_exhaustive()
    }
}

impl Masker {
    pub fn new<S, P>(secrets: S, prefixes: P) -> Self
    where
        S: IntoIterator,
        S::Item: AsRef<[u8]>,
        P: IntoIterator,
        P::Item: AsRef<[u8]>,
    {
        let mut secrets: Vec<Vec<u8>> = secrets
            .into_iter()
            .map(|s| s.as_ref().to_vec())
            .filter(|s| !s.is_empty())
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        let mut prefixes: Vec<Vec<u8>> = prefixes
            .into_iter()
            .map(|p| p.as_ref().to_vec())
            .filter(|p| !p.is_empty())
            .collect();
        prefixes.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        prefixes.dedup();
        let mut starts = vec![false; 256];
        for s in secrets.iter().chain(prefixes.iter()) {
            starts[usize::from(s[0])] = true;
        }
        Self {
            secrets,
            prefixes,
            starts,
            pending: Vec::new(),
        }
    }

    /// Mask `input` (continuing earlier writes) and append what is safe to emit to `out`.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.secrets.is_empty() && self.prefixes.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        self.pending.extend_from_slice(input);
        self.process(out, false);
    }

    /// End of the stream: emit everything still held back.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        self.process(out, true);
    }

    fn process(&mut self, out: &mut Vec<u8>, eof: bool) {
        let buf = std::mem::take(&mut self.pending);
        let mut i = 0;
        let mut emitted = 0;
        while i < buf.len() {
            if !self.starts[usize::from(buf[i])] {
                i += 1;
                continue;
            }
            match self.match_at(&buf[i..], eof) {
                Match::Full { len, keep } => {
                    out.extend_from_slice(&buf[emitted..i + keep]);
                    out.extend_from_slice(MASK);
                    i += len;
                    emitted = i;
                }
                Match::Partial => {
                    out.extend_from_slice(&buf[emitted..i]);
                    self.pending = buf[i..].to_vec();
                    return;
                }
                Match::None => i += 1,
            }
        }
        out.extend_from_slice(&buf[emitted..]);
    }

    fn match_at(&self, s: &[u8], eof: bool) -> Match {
        // A longer secret that may still complete takes precedence over a shorter full
        // match, otherwise the result would depend on how output was chunked.
        let mut partial = false;
        for secret in &self.secrets {
            if s.starts_with(secret) {
                return if partial {
                    Match::Partial
                } else {
                    Match::Full {
                        len: secret.len(),
                        keep: 0,
                    }
                };
            }
            if !eof && s.len() < secret.len() && secret.starts_with(s) {
                partial = true;
            }
        }
        if partial {
            return Match::Partial;
        }
        for prefix in &self.prefixes {
            if s.starts_with(prefix) {
                let body = s[prefix.len()..]
                    .iter()
                    .take(MAX_TOKEN_BODY)
                    .take_while(|b| is_token_char(**b))
                    .count();
                let end = prefix.len() + body;
                if !eof && end == s.len() && body < MAX_TOKEN_BODY {
                    // The token may continue in the next write.
                    return Match::Partial;
                }
                if body > 0 {
                    return Match::Full {
                        len: end,
                        keep: prefix.len(),
                    };
                }
            } else if !eof && s.len() < prefix.len() && prefix.starts_with(s) {
                partial = true;
            }
        }
        if partial { Match::Partial } else { Match::None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask_chunks(m: &mut Masker, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            m.write(c, &mut out);
        }
        m.flush(&mut out);
        out
    }

    fn all_splits(secrets: &[&str], prefixes: &[&str], input: &str, expected: &str) {
        for cut in 0..=input.len() {
            let mut m = Masker::new(secrets, prefixes);
            let (a, b) = input.as_bytes().split_at(cut);
            let out = mask_chunks(&mut m, &[a, b]);
            assert_eq!(String::from_utf8_lossy(&out), expected, "cut at {cut}");
        }
        // Byte by byte.
        let mut m = Masker::new(secrets, prefixes);
        let chunks: Vec<&[u8]> = input.as_bytes().chunks(1).collect();
        let out = mask_chunks(&mut m, &chunks);
        assert_eq!(String::from_utf8_lossy(&out), expected, "byte by byte");
    }

    #[test]
    fn masks_values_across_every_boundary() {
        all_splits(
            &["s3cr3tvalue"],
            &[],
            "the value is s3cr3tvalue, again s3cr3tvalue!",
            "the value is [MASKED], again [MASKED]!",
        );
    }

    #[test]
    fn near_misses_are_emitted_untouched() {
        all_splits(&["s3cr3tvalue"], &[], "s3cr3tvalu", "s3cr3tvalu");
        all_splits(&["s3cr3tvalue"], &[], "s3cr3s3cr3tvalue", "s3cr3[MASKED]");
    }

    #[test]
    fn longest_secret_wins() {
        all_splits(
            &["abc", "abcdef"],
            &[],
            "xabcdefx abcx",
            "x[MASKED]x [MASKED]x",
        );
    }

    #[test]
    fn token_prefixes_keep_the_prefix() {
        all_splits(
            &[],
            &["glpat-"],
            "token glpat-AbC_12.3=x and glpat- alone",
            "token glpat-[MASKED] and glpat- alone",
        );
        all_splits(&[], &["glpat-"], "glpat-abc", "glpat-[MASKED]");
    }

    #[test]
    fn held_back_tail_is_released_by_more_output() {
        let mut m = Masker::new(["secret"], ["glpat-"]);
        let mut out = Vec::new();
        m.write(b"hello sec", &mut out);
        assert_eq!(out, b"hello ");
        m.write(b"ond line\n", &mut out);
        assert_eq!(out, b"hello second line\n");
        m.write(b"glpat-abc", &mut out);
        assert_eq!(out, b"hello second line\n");
        m.write(b" end", &mut out);
        assert_eq!(out, b"hello second line\nglpat-[MASKED] end");
    }

    #[test]
    fn no_secrets_is_a_passthrough() {
        let mut m = Masker::new(Vec::<String>::new(), Vec::<String>::new());
        let mut out = Vec::new();
        m.write(b"abc", &mut out);
        m.flush(&mut out);
        assert_eq!(out, b"abc");
    }

    #[test]
    fn overlong_token_is_masked_without_waiting() {
        let mut m = Masker::new(Vec::<String>::new(), ["glpat-"]);
        let mut out = Vec::new();
        let long = format!("glpat-{}", "a".repeat(MAX_TOKEN_BODY + 10));
        m.write(long.as_bytes(), &mut out);
        assert!(out.starts_with(b"glpat-[MASKED]"));
    }
}
