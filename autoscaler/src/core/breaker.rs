//! A circuit breaker per pool: after `threshold` provisioner failures in a row the pool stops
//! calling the provisioner for creations for a while, doubling the pause each time it opens
//! again, so that a broken cloud account or script does not turn into a storm of calls.
//! One trial call is let through when the pause ends (half-open); success closes it.

use std::time::Duration;

use super::Millis;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Calls are refused until `until`.
    Open {
        until: Millis,
        reason: String,
    },
    /// The pause is over; the next call is a trial.
    HalfOpen {
        reason: String,
    },
}

#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u32,
    base: Duration,
    cap: Duration,
    failures: u32,
    opened: u32,
    open_until: Option<Millis>,
    reason: Option<String>,
}

impl Breaker {
    pub fn new(threshold: u32, base: Duration, cap: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            base,
            cap,
            failures: 0,
            opened: 0,
            open_until: None,
            reason: None,
        }
    }

    pub fn state(&self, now: Millis) -> BreakerState {
        match (self.open_until, &self.reason) {
            (Some(until), Some(reason)) if now < until => BreakerState::Open {
                until,
                reason: reason.clone(),
            },
            (Some(_), Some(reason)) => BreakerState::HalfOpen {
                reason: reason.clone(),
            },
            _ => BreakerState::Closed,
        }
    }

    pub fn allows(&self, now: Millis) -> bool {
        !matches!(self.state(now), BreakerState::Open { .. })
    }

    pub fn success(&mut self) {
        self.failures = 0;
        self.opened = 0;
        self.open_until = None;
        self.reason = None;
    }

    /// Records a failure; returns `true` when this failure opened the breaker.
    pub fn failure(&mut self, now: Millis, reason: &str) -> bool {
        self.failures += 1;
        let half_open = matches!(self.state(now), BreakerState::HalfOpen { .. });
        if half_open || self.failures >= self.threshold {
            self.open(now, reason);
            return true;
        }
        false
    }

    /// Opens at once (a permanent failure: repeating the call cannot help).
    pub fn open(&mut self, now: Millis, reason: &str) {
        let factor = 1u32 << self.opened.min(16);
        let pause = self.base.saturating_mul(factor).min(self.cap);
        self.opened += 1;
        self.failures = 0;
        self.open_until = Some(now + u64::try_from(pause.as_millis()).unwrap_or(u64::MAX));
        self.reason = Some(reason.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(3, Duration::from_secs(30), Duration::from_secs(600))
    }

    #[test]
    fn opens_after_threshold_and_closes_on_success() {
        let mut b = breaker();
        assert!(!b.failure(0, "exit 1"));
        assert!(!b.failure(0, "exit 1"));
        assert!(b.failure(0, "exit 1"));
        assert!(!b.allows(29_999));
        assert!(matches!(
            b.state(10),
            BreakerState::Open { until: 30_000, .. }
        ));
        assert!(b.allows(30_000));
        assert!(matches!(b.state(30_000), BreakerState::HalfOpen { .. }));
        b.success();
        assert_eq!(b.state(30_000), BreakerState::Closed);
    }

    #[test]
    fn a_failed_trial_reopens_for_twice_as_long_up_to_the_cap() {
        let mut b = breaker();
        for _ in 0..3 {
            b.failure(0, "quota");
        }
        assert!(b.failure(30_000, "quota"), "the trial failed");
        assert!(matches!(
            b.state(30_000),
            BreakerState::Open { until: 90_000, .. }
        ));
        let mut now = 90_000;
        for _ in 0..10 {
            b.failure(now, "quota");
            let BreakerState::Open { until, .. } = b.state(now) else {
                panic!()
            };
            assert!(until - now <= 600_000);
            now = until;
        }
    }

    #[test]
    fn success_between_failures_resets_the_count() {
        let mut b = breaker();
        b.failure(0, "x");
        b.failure(0, "x");
        b.success();
        assert!(!b.failure(0, "x"));
        assert!(b.allows(0));
    }
}
