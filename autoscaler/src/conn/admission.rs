//! Which new connections the mirrored API takes: at most so many from one source address and
//! so many overall. A connection over either cap is closed at once; each episode of refusals
//! (from the first refused connection until the address, or the server, is back under its cap)
//! is logged once when it starts and once when it ends, with the address and the count.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Addresses refused since they last went under their cap, with how many were refused.
    refusing: HashMap<IpAddr, u64>,
    /// Connections refused since the server last went under its overall cap.
    refusing_total: Option<u64>,
}

/// The open connections of one listener, by source address.
#[derive(Debug)]
pub struct Admission {
    max_total: usize,
    max_per_address: usize,
    counts: Mutex<Counts>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    address: IpAddr,
}

impl Admission {
    pub fn new(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_address,
            counts: Mutex::default(),
        })
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // The counts stay consistent under a panic elsewhere: every update is one statement.
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a connection from `address`, or `None` when it must be closed.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Ticket> {
        let address = address.to_canonical();
        let mut counts = self.counts();
        let from_address = counts.per_address.get(&address).copied().unwrap_or(0);
        if from_address >= self.max_per_address {
            let refused = counts.refusing.entry(address).or_insert(0);
            if *refused == 0 {
                tracing::warn!(%address, limit = self.max_per_address,
                    "closing new connections from an address over its connection limit");
            }
            *refused += 1;
            return None;
        }
        if counts.total >= self.max_total {
            let refused = counts.refusing_total.get_or_insert(0);
            if *refused == 0 {
                tracing::warn!(%address, limit = self.max_total,
                    "closing new connections: the mirrored API is at its connection limit");
            }
            *refused += 1;
            return None;
        }
        counts.total += 1;
        *counts.per_address.entry(address).or_insert(0) += 1;
        Some(Ticket {
            admission: self.clone(),
            address,
        })
    }

    /// Connections open now (from `address`, or from all when `None`).
    pub fn open(&self, address: Option<IpAddr>) -> usize {
        let counts = self.counts();
        match address {
            Some(a) => counts
                .per_address
                .get(&a.to_canonical())
                .copied()
                .unwrap_or(0),
            None => counts.total,
        }
    }

    fn release(&self, address: IpAddr) {
        let mut counts = self.counts();
        counts.total = counts.total.saturating_sub(1);
        let left = match counts.per_address.get_mut(&address) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if left == 0 {
            counts.per_address.remove(&address);
        }
        if left < self.max_per_address
            && let Some(refused) = counts.refusing.remove(&address)
        {
            tracing::info!(%address, refused, "address back under its connection limit");
        }
        if counts.total < self.max_total
            && let Some(refused) = counts.refusing_total.take()
        {
            tracing::info!(refused, "mirrored API back under its connection limit");
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.release(self.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_at_its_cap_is_refused_while_others_are_admitted_until_the_total() {
        let admission = Admission::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let a1 = admission.admit(a).unwrap();
        let _a2 = admission.admit(a).unwrap();
        assert!(admission.admit(a).is_none());
        let _b1 = admission.admit(b).unwrap();
        assert!(admission.admit(c).is_none(), "total cap of 3 reached");
        drop(a1);
        assert_eq!(admission.open(Some(a)), 1);
        assert!(admission.admit(c).is_some());
    }

    #[test]
    fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
        let admission = Admission::new(10, 1);
        let _v4 = admission.admit("10.0.0.1".parse().unwrap()).unwrap();
        assert!(
            admission
                .admit("::ffff:10.0.0.1".parse().unwrap())
                .is_none()
        );
    }
}
