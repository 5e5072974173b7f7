//! The machine class of a job, from the pool's classes and the job's CI variable.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::Jobs;
use crate::core::classes::{self, Classes};

/// Each pool's classes (pools without classes are absent).
#[derive(Debug, Default)]
pub(super) struct PoolClasses(Mutex<HashMap<String, Classes>>);

impl Jobs {
    /// The classes of `pool`'s machines: its jobs get one each from now on.
    pub fn set_classes(&self, pool: &str, classes: Classes) {
        self.classes
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pool.to_string(), classes);
    }

    /// The class a job of `pool` needs (`None`: the pool has no classes), or why it cannot run.
    pub(super) fn class_for(&self, pool: &str, payload: &[u8]) -> Result<Option<String>, String> {
        let all = self
            .classes
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(pool_classes) = all.get(pool) else {
            return Ok(None);
        };
        let asked = classes::variable(payload, &pool_classes.variable);
        pool_classes.choose(asked.as_deref()).map(Some)
    }

    /// The class of a job (`None`: its pool has no classes, or it is not held).
    pub fn class_of(&self, id: crate::core::JobId) -> Option<String> {
        self.lock().get(&id).and_then(|j| j.record.class.clone())
    }

    /// Jobs of `pool` waiting for a sidecar, by class.
    pub fn waiting_by_class(&self, pool: &str) -> HashMap<Option<String>, u32> {
        let mut counts = HashMap::new();
        for j in self.lock().values() {
            if j.record.pool == pool && j.record.phase.is_queued() {
                *counts.entry(j.record.class.clone()).or_insert(0) += 1;
            }
        }
        counts
    }
}
