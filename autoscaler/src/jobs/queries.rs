//! Questions about the jobs a pool holds: what waits, what each sidecar runs, what is left.

use std::collections::HashMap;

use super::Jobs;
use crate::core::job::JobPhase;
use crate::core::{JobId, Millis};

impl Jobs {
    /// Jobs of `pool` handed out longer than `window` ago without acceptance.
    pub fn unacknowledged(&self, pool: &str, window: Millis) -> Vec<JobId> {
        let now = self.clock.now();
        self.lock()
            .values()
            .filter(|j| j.record.pool == pool && j.record.phase.ack_expired(now, window))
            .map(|j| j.record.id)
            .collect()
    }

    /// Jobs of `pool` waiting for a sidecar, oldest first (used at start-up).
    pub fn queued(&self, pool: &str) -> Vec<JobId> {
        let mut list: Vec<_> = self
            .lock()
            .values()
            .filter(|j| j.record.pool == pool && j.record.phase.is_queued())
            .map(|j| (j.record.accepted_at, j.record.id))
            .collect();
        list.sort();
        list.into_iter().map(|(_, id)| id).collect()
    }

    /// Jobs with each sidecar (handed out or running), by sidecar.
    pub fn with_each_sidecar(&self) -> std::collections::HashMap<crate::core::SidecarId, u32> {
        let mut counts = std::collections::HashMap::new();
        for j in self.lock().values() {
            let sidecar = match &j.record.phase {
                JobPhase::Assigned { sidecar, .. } => Some(*sidecar),
                JobPhase::Running { sidecar, .. } => *sidecar,
                _ => None,
            };
            if let Some(s) = sidecar {
                *counts.entry(s).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Jobs of `pool` queued, handed out or running: what the pool has to find room for.
    pub fn active_in_pool(&self, pool: &str) -> usize {
        self.lock()
            .values()
            .filter(|j| {
                j.record.pool == pool
                    && matches!(
                        j.record.phase,
                        JobPhase::Queued | JobPhase::Assigned { .. } | JobPhase::Running { .. }
                    )
            })
            .count()
    }

    /// Jobs of `pool` waiting for a sidecar, with when GitLab gave them to us.
    pub fn waiting_in_pool(&self, pool: &str) -> Vec<(JobId, Millis)> {
        self.lock()
            .values()
            .filter(|j| j.record.pool == pool && j.record.phase.is_queued())
            .map(|j| (j.record.id, j.record.accepted_at))
            .collect()
    }

    /// Jobs by pool and phase name, for the admin view.
    pub fn phases_by_pool(&self) -> HashMap<String, std::collections::BTreeMap<String, usize>> {
        let mut out: HashMap<String, std::collections::BTreeMap<String, usize>> = HashMap::new();
        for j in self.lock().values() {
            *out.entry(j.record.pool.clone())
                .or_default()
                .entry(j.record.phase.name().to_string())
                .or_insert(0) += 1;
        }
        out
    }

    /// How many jobs are not finished (all pools).
    pub fn unfinished(&self) -> usize {
        self.lock()
            .values()
            .filter(|j| !j.record.phase.is_finished())
            .count()
    }

    /// How many jobs are with a sidecar (handed out or running): what a graceful shutdown waits
    /// for. Queued jobs stay in the store for the next start.
    pub fn with_sidecars(&self) -> usize {
        self.lock()
            .values()
            .filter(|j| {
                matches!(
                    j.record.phase,
                    JobPhase::Assigned { .. } | JobPhase::Running { .. }
                )
            })
            .count()
    }
}
