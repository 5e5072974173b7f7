//! Values that must never reach a log line, an error message or `Debug` output.

use std::fmt;

use sha2::{Digest, Sha256};

/// A secret string (runner token, job token, registration token).
///
/// `Debug` and `Display` print a fixed placeholder, so a secret that ends up inside a struct that
/// is logged or formatted into an error stays hidden. The value is reachable only through
/// [`Secret::expose`], which makes every use greppable.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Constant-time comparison with a presented value, so that response timing does not reveal
    /// how much of a guessed token was right.
    pub fn matches(&self, presented: &str) -> bool {
        constant_time_eq(self.0.as_bytes(), presented.as_bytes())
    }

    /// The digest under which a token is stored and looked up: the store never holds a sidecar
    /// token in clear.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// SHA-256 of a token, hex encoded. Safe to store and to log.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TokenDigest(String);

impl TokenDigest {
    pub fn of(token: &str) -> Self {
        Self(hex::encode(Sha256::digest(token.as_bytes())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short prefix for log lines: enough to correlate, useless to an attacker.
    pub fn short(&self) -> &str {
        &self.0[..self.0.len().min(8)]
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let s = Secret::new("glrt-very-secret");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{s}"), "***");
        assert!(!format!("{:?}", Some(&s)).contains("very"));
    }

    #[test]
    fn matches_compares_whole_values() {
        let s = Secret::new("abc");
        assert!(s.matches("abc"));
        assert!(!s.matches("ab"));
        assert!(!s.matches("abd"));
        assert!(!s.matches(""));
    }

    #[test]
    fn digest_is_stable_and_hex() {
        let d = TokenDigest::of("token");
        assert_eq!(d, Secret::new("token").digest());
        assert_eq!(d.as_str().len(), 64);
        assert_eq!(d.short().len(), 8);
    }
}
