//! Where "now" comes from: the only place the autoscaler reads a clock (clippy's
//! `disallowed-methods`, in `autoscaler/clippy.toml`, forbids it elsewhere).
//!
//! Two kinds of time: [`Clock::now`] is wall time in milliseconds, what decisions and records
//! use (the pure core takes it as an argument; tests move a [`ManualClock`] by hand);
//! [`monotonic`] measures how long a real call takes and when its timeout falls (tokio's clock,
//! which a test can pause and advance).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::Millis;

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> Millis;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// Wall time as a `SystemTime`, for what speaks HTTP dates (`Retry-After`, certificates).
pub fn wall(clock: &dyn Clock) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::from_millis(clock.now())
}

/// The monotonic instant now, for timeouts and durations of real calls.
#[allow(clippy::disallowed_methods)]
pub fn monotonic() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        Self(AtomicU64::new(start))
    }

    pub fn advance(&self, by: std::time::Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}
