//! The slot gate: which sidecars may be given a job now, what routing knows of their machines,
//! and counting each hand-out on its machine.

use super::controller::PoolController;
use crate::core::machine::MachineEvent;
use crate::core::routing::Placement;
use crate::core::{JobId, SidecarId};
use crate::dispatch::SlotGate;

impl SlotGate for PoolController {
    fn placements(&self, sidecars: &[SidecarId]) -> Vec<Placement> {
        let running = self.jobs.with_each_sidecar();
        let last = self
            .last_project
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let classes = self
            .classes
            .as_ref()
            .map(|_| self.machines.classes_by_sidecar());
        sidecars
            .iter()
            .map(|s| Placement {
                last_project: last.get(s).copied(),
                running: running.get(s).copied().unwrap_or(0),
                class: classes
                    .as_ref()
                    .and_then(|by_sidecar| by_sidecar.get(s))
                    .and_then(|recorded| self.class_named(recorded.as_deref())),
            })
            .collect()
    }

    fn may_take(&self, sidecar: SidecarId) -> bool {
        let Some(m) = self.machines.by_sidecar(sidecar) else {
            // A sidecar that registered itself: no machine of ours to protect.
            return true;
        };
        if !m.state.takes_jobs() {
            return false;
        }
        let max_use_count = self.policy.load().scaling.max_use_count;
        if max_use_count > 0 && m.use_count >= max_use_count {
            return false;
        }
        let running = self
            .jobs
            .with_each_sidecar()
            .get(&sidecar)
            .copied()
            .unwrap_or(0);
        running < self.capacity_of(&m)
    }

    fn taken(&self, sidecar: SidecarId, job: JobId) {
        if let Some(project) = self.jobs.project_of(job) {
            self.last_project
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(sidecar, project);
        }
        let Some(m) = self.machines.by_sidecar(sidecar) else {
            return;
        };
        let result = self
            .machines
            .update(&m.id, |r| r.use_count += 1)
            .and_then(|()| {
                self.machines
                    .apply(&m.id, MachineEvent::JobStarted, &format!("job {job}"))
            });
        if let Err(e) = result {
            tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot count the job on its machine");
        }
    }
}
