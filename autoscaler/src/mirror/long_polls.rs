//! How many job requests each sidecar token holds open: a stock runner holds at most its
//! `request_concurrency`, so a token holding far more is job code that found it, or a bug, and
//! is answered `429` (which runners retry after `Retry-After`) instead of tying up the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::SidecarId;

#[derive(Debug)]
pub struct LongPolls {
    max_per_sidecar: usize,
    open: Mutex<HashMap<SidecarId, usize>>,
}

/// One held job request; dropping it (the request answered or abandoned) frees its place.
#[derive(Debug)]
pub struct Held {
    polls: Arc<LongPolls>,
    sidecar: SidecarId,
}

impl LongPolls {
    pub fn new(max_per_sidecar: usize) -> Arc<Self> {
        Arc::new(Self {
            max_per_sidecar,
            open: Mutex::default(),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<SidecarId, usize>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for one more job request of `sidecar`, or `None` when it holds its maximum.
    pub fn hold(self: &Arc<Self>, sidecar: SidecarId) -> Option<Held> {
        let mut open = self.open();
        let n = open.entry(sidecar).or_insert(0);
        if *n >= self.max_per_sidecar {
            return None;
        }
        *n += 1;
        Some(Held {
            polls: self.clone(),
            sidecar,
        })
    }

    /// Job requests `sidecar` holds open now.
    #[cfg(test)]
    pub fn held(&self, sidecar: SidecarId) -> usize {
        self.open().get(&sidecar).copied().unwrap_or(0)
    }

    pub fn max_per_sidecar(&self) -> usize {
        self.max_per_sidecar
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.polls.open();
        if let Some(n) = open.get_mut(&self.sidecar) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.sidecar);
            }
        }
    }
}
