//! How long to wait before asking GitLab again after a failure.

use std::time::Duration;

/// Exponential backoff from `base` doubling to `cap`, with the caller's jitter in `[0, 1)`
/// spreading each delay over 75–125 % of its nominal value. A server-given `Retry-After` is a
/// floor: we never come back earlier than GitLab asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    failures: u32,
}

impl Backoff {
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: 0,
        }
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Records a failure and returns the wait before the next attempt.
    pub fn fail(&mut self, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let exp = self.failures.min(20);
        self.failures = self.failures.saturating_add(1);
        let nominal = self.base.saturating_mul(1 << exp).min(self.cap);
        let spread = nominal.mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0));
        match retry_after {
            Some(asked) => spread.max(asked),
            None => spread,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (0..8).map(|_| b.fail(None, 0.5).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        b.reset();
        assert_eq!(b.fail(None, 0.5), Duration::from_secs(1));
    }

    #[test]
    fn jitter_spreads_and_retry_after_is_a_floor() {
        let mut b = Backoff::new(Duration::from_secs(4), Duration::from_secs(60));
        assert_eq!(b.fail(None, 0.0), Duration::from_secs(3));
        b.reset();
        assert_eq!(b.fail(None, 1.0), Duration::from_secs(5));
        b.reset();
        assert_eq!(
            b.fail(Some(Duration::from_secs(30)), 0.5),
            Duration::from_secs(30)
        );
        b.reset();
        assert_eq!(
            b.fail(Some(Duration::from_secs(1)), 0.5),
            Duration::from_secs(4)
        );
    }
}
