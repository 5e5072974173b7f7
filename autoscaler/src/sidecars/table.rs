//! The sidecars' in-memory index.

use std::collections::HashMap;
use std::sync::Arc;

use super::Sidecar;
use crate::core::SidecarId;
use crate::secret::TokenDigest;

/// The registered sidecars, by token digest (authentication), by id (everything else) and by
/// machine (the health pass looks each machine's sidecar up: a scan per machine made that pass
/// quadratic, a quarter of start-up with 10,000 machines).
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) by_digest: HashMap<TokenDigest, Arc<Sidecar>>,
    pub(super) by_id: HashMap<SidecarId, Arc<Sidecar>>,
    /// The newest sidecar of each machine.
    by_machine: HashMap<String, SidecarId>,
}

impl Table {
    pub(super) fn insert(&mut self, sidecar: Arc<Sidecar>) {
        if let Some(machine) = &sidecar.record.machine {
            let newest = self
                .by_machine
                .get(machine)
                .is_none_or(|known| *known <= sidecar.id());
            if newest {
                self.by_machine.insert(machine.clone(), sidecar.id());
            }
        }
        self.by_id.insert(sidecar.id(), sidecar.clone());
        self.by_digest
            .insert(sidecar.record.token_digest.clone(), sidecar);
    }

    pub(super) fn remove(&mut self, sidecar: &Sidecar) {
        self.by_digest.remove(&sidecar.record.token_digest);
        if self
            .by_id
            .get(&sidecar.id())
            .is_some_and(|s| s.record.token_digest == sidecar.record.token_digest)
        {
            self.by_id.remove(&sidecar.id());
        }
        if let Some(machine) = &sidecar.record.machine
            && self.by_machine.get(machine) == Some(&sidecar.id())
        {
            // Another sidecar of the same machine (rare: a re-injection) takes its place.
            match self
                .by_id
                .values()
                .filter(|s| s.record.machine.as_ref() == Some(machine))
                .map(|s| s.id())
                .max()
            {
                Some(next) => self.by_machine.insert(machine.clone(), next),
                None => self.by_machine.remove(machine),
            };
        }
    }

    pub(super) fn for_machine(&self, machine: &str) -> Option<&Arc<Sidecar>> {
        self.by_id.get(self.by_machine.get(machine)?)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<Sidecar>> {
        self.by_id.values()
    }
}
