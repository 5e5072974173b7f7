//! Where a pool's machines come from: an ordered list of sources, each a provisioner with its
//! own circuit breaker, creation throttle and maximum. A new machine comes from the first source
//! that has room, is not paused and is not throttled; the others take the overflow
//! (on-premises first, a cloud for bursts; spot first, on-demand after).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::core::Millis;
use crate::core::breaker::{Breaker, BreakerState};
use crate::core::throttle::TokenBucket;
use crate::provisioner::Provisioner;

/// The label that tells which source made a machine.
pub const SOURCE_LABEL: &str = "autoscaler-source";

/// How a source is set up.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub name: String,
    pub provisioner: Arc<dyn Provisioner>,
    /// Most live machines from it (`None`: only the pool's `max_machines`).
    pub max_machines: Option<u32>,
    pub create_rate: f64,
    pub create_burst: u32,
    pub user_data: Option<String>,
    /// After a reclaim of one of its machines, no creation is asked of it for this long.
    pub reclaim_cooldown: Option<Duration>,
}

impl SourceSpec {
    /// The only source of a pool, unbounded, as `[pools.provisioner]` makes it.
    pub fn single(provisioner: Arc<dyn Provisioner>, create_rate: f64, create_burst: u32) -> Self {
        Self {
            name: "default".into(),
            provisioner,
            max_machines: None,
            create_rate,
            create_burst,
            user_data: None,
            reclaim_cooldown: None,
        }
    }
}

#[derive(Debug)]
pub(super) struct Source {
    pub spec: SourceSpec,
    guards: Mutex<Guards>,
    /// Most machines per `create` call (the provisioner's `max_batch`).
    batch: AtomicU32,
    /// The provisioner asked to retry later (exit 75: rate limited, no capacity): no creation
    /// is asked of it before this time, so that the next source takes the demand meanwhile.
    retry_at: AtomicU64,
    /// Why its provisioner cannot make this pool's machines (its `info` lacks a capability the
    /// pool needs): no creation is asked of it until an `info` shows the capability.
    unfit: Mutex<Option<String>>,
    /// Its provisioner declares `stop_start` (the warm pool needs it).
    stop_start: AtomicBool,
}

/// How long a source that said "retry later" without a time is left alone.
pub(super) const RETRY_LATER_MS: Millis = 30_000;

#[derive(Debug)]
pub(super) struct Guards {
    pub breaker: Breaker,
    pub throttle: TokenBucket,
}

impl Source {
    pub fn new(spec: SourceSpec, now: Millis) -> Self {
        let guards = Guards {
            breaker: Breaker::new(5, Duration::from_secs(30), Duration::from_secs(600)),
            throttle: TokenBucket::new(spec.create_rate, spec.create_burst, now),
        };
        Self {
            spec,
            guards: Mutex::new(guards),
            batch: AtomicU32::new(1),
            retry_at: AtomicU64::new(0),
            unfit: Mutex::new(None),
            stop_start: AtomicBool::new(false),
        }
    }

    /// The provisioner asked to be left alone until `at`.
    pub fn retry_later(&self, at: Millis) {
        self.retry_at.fetch_max(at, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn provisioner(&self) -> &dyn Provisioner {
        self.spec.provisioner.as_ref()
    }

    pub fn guards(&self) -> MutexGuard<'_, Guards> {
        self.guards.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn breaker(&self, now: Millis) -> BreakerState {
        self.guards().breaker.state(now)
    }

    /// Records why the provisioner cannot make the pool's machines (`None`: it can); true when
    /// that changed, so that the change is logged once.
    pub fn set_unfit(&self, why: Option<String>) -> bool {
        let mut unfit = self.unfit.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = *unfit != why;
        *unfit = why;
        changed
    }

    fn is_unfit(&self) -> bool {
        self.unfit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Records whether the provisioner declares `stop_start` (from its `info`).
    pub fn set_stop_start(&self, declared: bool) {
        self.stop_start.store(declared, Ordering::Relaxed);
    }

    /// Whether the provisioner can stop and start its machines (unknown until its first
    /// `info`: no).
    pub fn can_stop_start(&self) -> bool {
        self.stop_start.load(Ordering::Relaxed)
    }

    pub fn set_batch(&self, n: u32) {
        self.batch.store(n.max(1), Ordering::Relaxed);
    }

    pub fn batch(&self) -> usize {
        self.batch.load(Ordering::Relaxed) as usize
    }

    /// Machines this source may make now, of `wanted`, given `live` machines of it: bounded by
    /// its maximum, its breaker and its throttle (whose tokens are taken).
    pub fn grant(&self, wanted: u32, live: u32, now: Millis) -> Grant {
        let room = self
            .spec
            .max_machines
            .map_or(wanted, |max| max.saturating_sub(live).min(wanted));
        if room == 0 {
            return Grant::Full;
        }
        if self.is_unfit() {
            return Grant::Unfit;
        }
        if now < self.retry_at.load(Ordering::Relaxed) {
            return Grant::Throttled;
        }
        let mut g = self.guards();
        if !g.breaker.allows(now) {
            return Grant::Paused;
        }
        match g.throttle.take(room, now) {
            0 => Grant::Throttled,
            n => Grant::Machines(n),
        }
    }
}

/// What a source answered to a request for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grant {
    Machines(u32),
    /// At its `max_machines`.
    Full,
    /// Its breaker is open.
    Paused,
    /// Its creation rate is used up for now.
    Throttled,
    /// Its provisioner lacks a capability the pool needs.
    Unfit,
}

impl Grant {
    pub fn why_not(self) -> &'static str {
        match self {
            Grant::Machines(_) => "",
            Grant::Full => "at its max_machines",
            Grant::Paused => "paused (its provisioner keeps failing)",
            Grant::Throttled => "at its create_rate, or it asked to retry later",
            Grant::Unfit => "its provisioner lacks a capability the pool needs",
        }
    }
}
