//! The scaling policy a pool's controller plans with: the pool's own settings, with the idle
//! settings of the `[[pools.policy]]` entry in force (see `core::schedule`).

use super::controller::PoolController;
use crate::core::scaler::{Reason, ScalePolicy};
use crate::core::schedule;

impl PoolController {
    /// The pool's policy with the `[[pools.policy]]` entry in force now; a change of entry is
    /// logged once (`period_change`) and the intake is told the idle target.
    pub(super) fn policy_in_force(&self, now: u64) -> ScalePolicy {
        // One load: the pool's settings and its entries always come from the same reload.
        let current = self.policy.load();
        let base = current.scaling.scale_policy();
        let (policy, entry) = schedule::policy_in_force(base, &current.policies, now);
        let previous = self
            .period
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(entry);
        if previous.is_some_and(|p| p != entry) {
            tracing::info!(pool = %self.pool(), reason = "period_change", policy = ?entry,
                idle_count = policy.idle_count, idle_time_s = policy.idle_time / 1000,
                "scaling policy changed with its period; busy machines are kept");
        }
        self.queue.set_idle_target(policy.idle_target(0));
        policy
    }
}

/// The reason code as logs and metrics spell it (`waiting_jobs`, `idle_timeout`, ...).
pub(super) fn reason_code(reason: Reason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
