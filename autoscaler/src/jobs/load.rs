//! Views of the held jobs for the metrics and the admin API: how many jobs each sidecar holds,
//! split by whether they started, and every record.

use std::collections::HashMap;

use super::Jobs;
use crate::core::SidecarId;
use crate::core::job::JobPhase;

/// The jobs one sidecar holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SidecarLoad {
    /// Handed out, not yet started.
    pub assigned: u32,
    /// Started (the sidecar made a call for them).
    pub running: u32,
}

impl Jobs {
    /// Every job held (finished ones until they are collected), oldest first.
    pub fn records(&self) -> Vec<crate::store::JobRecord> {
        let mut list: Vec<_> = self.lock().values().map(|j| j.record.clone()).collect();
        list.sort_by_key(|r| (r.accepted_at, r.id));
        list
    }

    pub fn load_by_sidecar(&self) -> HashMap<SidecarId, SidecarLoad> {
        let mut load: HashMap<SidecarId, SidecarLoad> = HashMap::new();
        for j in self.lock().values() {
            match &j.record.phase {
                JobPhase::Assigned { sidecar, .. } => {
                    load.entry(*sidecar).or_default().assigned += 1
                }
                JobPhase::Running {
                    sidecar: Some(sidecar),
                    ..
                } => load.entry(*sidecar).or_default().running += 1,
                _ => {}
            }
        }
        load
    }
}
