//! What the rest of the service reads of a pool's machines: copies of their records, counts,
//! and how long the controller's passes took (for the admin API and the status page).

use std::collections::HashMap;

use super::{PassTimings, PoolMachines};
use crate::core::SidecarId;
use crate::core::machine::MachineState;
use crate::store::MachineRecord;

impl PoolMachines {
    /// How long the last reconcile and machine pass took, and how many there were.
    pub fn timings(&self) -> PassTimings {
        *self
            .timings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records how long a reconcile (`reconcile == true`) or a machine pass took.
    pub fn record_timing(&self, reconcile: bool, took: std::time::Duration) {
        let mut t = self
            .timings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ms = took.as_secs_f64() * 1000.0;
        if reconcile {
            t.reconcile_ms = ms;
            t.reconciles += 1;
        } else {
            t.pass_ms = ms;
            t.passes += 1;
        }
    }

    /// Every machine, gone ones included until they are collected.
    pub fn snapshot(&self) -> Vec<MachineRecord> {
        self.lock().values().cloned().collect()
    }

    pub fn get(&self, id: &str) -> Option<MachineRecord> {
        self.lock().get(id).cloned()
    }

    /// The machine a sidecar was injected into.
    pub fn by_sidecar(&self, sidecar: SidecarId) -> Option<MachineRecord> {
        self.lock()
            .values()
            .find(|m| m.sidecar == Some(sidecar))
            .cloned()
    }

    /// The class of every machine with a sidecar, by its sidecar (`None`: no class recorded).
    pub fn classes_by_sidecar(&self) -> HashMap<SidecarId, Option<String>> {
        self.lock()
            .values()
            .filter_map(|m| Some((m.sidecar?, m.class.clone())))
            .collect()
    }

    /// How many machines are in `state`.
    pub fn count(&self, state: MachineState) -> usize {
        self.lock().values().filter(|m| m.state == state).count()
    }
}
