//! A pool at run time: its configuration, its hand-out queue, and its identity towards GitLab.

use std::sync::{Arc, Mutex};

use rand::RngExt;

use crate::config::{Intake, PolicyCell, PoolConfig, PoolPolicy};
use crate::core::scaler::Strategy;
use crate::dispatch::PoolQueue;
use crate::jobs::Jobs;
use crate::store::{Store, StoreError};

#[derive(Debug)]
pub struct Pool {
    /// The configuration the pool started with. Its scaling policy may since have been
    /// replaced by a reload: read that through [`Pool::policy`].
    pub config: PoolConfig,
    /// The scaling policy in force, shared with the pool's controller.
    policy: Arc<PolicyCell>,
    pub queue: Arc<PoolQueue>,
    /// The `system_id` this pool presents to GitLab. Kept in the store so that GitLab sees one
    /// runner manager per pool across restarts (it keys `runtime_features` by it).
    pub system_id: String,
    /// GitLab's last `X-GitLab-Last-Update` for this pool's token, sent back as `last_update`
    /// so that Workhorse can long-poll our job requests.
    pub last_update: Mutex<Option<String>>,
    /// Why GitLab refuses this pool's job requests (`403`, `422 Runner is orphaned`), while it
    /// does: the pool takes no jobs, and status and log say why.
    upstream_refusal: Mutex<Option<String>>,
    /// An operator paused the pool (admin API): it takes no jobs from GitLab until resumed.
    /// Kept in memory only: a restart resumes every pool.
    operator_pause: std::sync::atomic::AtomicBool,
}

impl Pool {
    pub fn open(
        config: PoolConfig,
        jobs: Arc<Jobs>,
        store: &dyn Store,
    ) -> Result<Arc<Self>, StoreError> {
        let key = format!("pool/{}/system_id", config.name);
        let system_id = match store.meta(&key)? {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => {
                let id = new_system_id();
                store.put_meta(&key, id.as_bytes())?;
                id
            }
        };
        Ok(Arc::new(Self {
            queue: PoolQueue::new(&config.name, jobs),
            policy: Arc::new(PolicyCell::from_pointee(config.policy())),
            config,
            system_id,
            last_update: Mutex::new(None),
            upstream_refusal: Mutex::new(None),
            operator_pause: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The scaling policy in force now.
    pub fn policy(&self) -> Arc<PoolPolicy> {
        self.policy.load_full()
    }

    /// The cell the policy lives in, for the parts that read it at every pass.
    pub fn policy_cell(&self) -> Arc<PolicyCell> {
        self.policy.clone()
    }

    /// Puts `policy` in force at once; the intake is woken so that a new mode or bound
    /// applies without waiting for its next round.
    pub fn replace_policy(&self, policy: PoolPolicy) {
        self.policy.store(Arc::new(policy));
        self.queue.poke();
    }

    /// When the pool asks GitLab for jobs (see [`Intake`]), under the policy in force.
    pub fn intake(&self) -> Intake {
        self.policy().intake(self.config.provisioner.is_none())
    }

    /// The p95 wait the planner aims at under the policy in force: the demand-aware
    /// strategy's `target_wait`; `None` for a pool under the idle strategy, which aims at no
    /// wait, and for a static pool, which makes no machine.
    pub fn target_wait(&self) -> Option<std::time::Duration> {
        let policy = self.policy();
        (self.config.provisioner.is_some() && policy.scaling.strategy == Strategy::Demand)
            .then_some(policy.scaling.target_wait)
    }

    pub fn last_update(&self) -> Option<String> {
        self.last_update
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn upstream_refusal(&self) -> Option<String> {
        self.upstream_refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records GitLab's refusal (or its end); `true` when it changed.
    pub fn set_upstream_refusal(&self, refusal: Option<String>) -> bool {
        let mut current = self
            .upstream_refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = *current != refusal;
        *current = refusal;
        changed
    }

    pub fn paused_by_operator(&self) -> bool {
        self.operator_pause
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Pauses or resumes the pool's intake; `true` when it changed. The intake is woken so that
    /// a resume takes effect at once.
    pub fn set_paused_by_operator(&self, paused: bool) -> bool {
        let before = self
            .operator_pause
            .swap(paused, std::sync::atomic::Ordering::SeqCst);
        self.queue.poke();
        before != paused
    }

    pub fn set_last_update(&self, value: String) {
        *self
            .last_update
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
    }
}

/// `r_` and 12 random alphanumerics: the form gitlab-runner uses when it has no machine id.
fn new_system_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..12)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("r_{tail}")
}
