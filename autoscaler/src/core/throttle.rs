//! A token bucket for machine creations: `rate` tokens per second up to `burst` saved, one token
//! per machine. Like taskscaler's `scale_throttle`, it protects the provider's API quota when a
//! burst of jobs arrives.

use super::Millis;

#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    rate_per_sec: f64,
    burst: f64,
    tokens: f64,
    last: Millis,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate_per_sec: f64, burst: u32, now: Millis) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate_per_sec: rate_per_sec.max(0.0),
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Millis) {
        let elapsed = now.saturating_sub(self.last) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes up to `wanted` tokens and returns how many it got.
    pub fn take(&mut self, wanted: u32, now: Millis) -> u32 {
        self.refill(now);
        let got = (self.tokens.floor() as u32).min(wanted);
        self.tokens -= f64::from(got);
        got
    }

    /// Gives back tokens taken for creations that were not attempted.
    pub fn give_back(&mut self, n: u32) {
        self.tokens = (self.tokens + f64::from(n)).min(self.burst);
    }

    /// When the next token is available (now if one is).
    pub fn next_token_at(&mut self, now: Millis) -> Millis {
        self.refill(now);
        if self.tokens >= 1.0 || self.rate_per_sec <= 0.0 {
            return now;
        }
        let missing = 1.0 - self.tokens;
        now + (missing / self.rate_per_sec * 1000.0).ceil() as Millis
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let mut b = TokenBucket::new(2.0, 5, 0);
        assert_eq!(b.take(10, 0), 5);
        assert_eq!(b.take(1, 0), 0);
        assert_eq!(b.next_token_at(0), 500);
        assert_eq!(b.take(10, 500), 1);
        assert_eq!(b.take(10, 1500), 2);
        // Never more than the burst is saved up.
        assert_eq!(b.take(100, 100_000), 5);
    }

    #[test]
    fn creations_per_second_stay_bounded_over_a_long_run() {
        let mut b = TokenBucket::new(1.5, 3, 0);
        let mut made = 0;
        for t in (0..=60_000).step_by(10) {
            made += b.take(100, t);
        }
        // 3 at once, then 1.5 per second for 60 s.
        assert_eq!(made, 3 + 90);
    }

    #[test]
    fn tokens_can_be_given_back() {
        let mut b = TokenBucket::new(0.0, 2, 0);
        assert_eq!(b.take(2, 0), 2);
        b.give_back(1);
        assert_eq!(b.take(2, 0), 1);
    }
}
