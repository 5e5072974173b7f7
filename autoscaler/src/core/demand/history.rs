//! The slots in use at each pass, and the rise each recent job met ([`super::rise`]); the
//! slots needed at each pass, for what the grace keeps.

use std::collections::VecDeque;

use super::{MAX_WINDOW, Rises};
use crate::core::Millis;

/// Slots in use (running and waiting) at each pass, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct InUseHistory {
    passes: VecDeque<(Millis, u32)>,
}

impl InUseHistory {
    /// A pass at `now` saw `slots` in use. Passes older than twice the longest window are
    /// dropped: a rise looks one lead time further back than the window's oldest job.
    pub(super) fn record(&mut self, now: Millis, slots: u32) {
        self.passes.push_back((now, slots));
        while self.passes.len() > 1 && self.passes[1].0 + 2 * MAX_WINDOW < now {
            self.passes.pop_front();
        }
    }

    /// The slots in use at `t` (the last pass at or before it; none before the first pass).
    fn at(&self, t: Millis) -> u32 {
        let after = self.passes.partition_point(|&(p, _)| p <= t);
        after.checked_sub(1).map_or(0, |i| self.passes[i].1)
    }

    /// The last pass strictly before `t`, if any.
    fn before(&self, t: Millis) -> Option<(Millis, u32)> {
        let at = self.passes.partition_point(|&(p, _)| p < t);
        at.checked_sub(1).map(|i| self.passes[i])
    }

    /// The rise each of `arrivals` (sorted, those of the window) met within `lead_time` before
    /// it, less the `foreseen` jobs of that span (the pipeline forecast holds slots for those):
    /// the slots in use at the last pass before it less those in use a lead time before it,
    /// plus the jobs that came after that pass and before it (or with it, ahead of it).
    pub(super) fn rises(
        &self,
        arrivals: &[Millis],
        foreseen: &VecDeque<Millis>,
        lead_time: Millis,
    ) -> Vec<u32> {
        arrivals
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let from = s.saturating_sub(lead_time);
                let last = self.before(s);
                let (pass, in_use) = last.unwrap_or((0, 0));
                let foreseen_in = foreseen.iter().filter(|&&t| t > from && t <= pass).count();
                let foreseen_in = u32::try_from(foreseen_in).unwrap_or(u32::MAX);
                let net = in_use
                    .saturating_sub(self.at(from))
                    .saturating_sub(foreseen_in);
                // Before the first pass, every earlier job came ahead of it.
                let seen = last.map_or(0, |_| arrivals.partition_point(|&t| t <= pass));
                let ahead = i.saturating_sub(seen);
                net.saturating_add(u32::try_from(ahead).unwrap_or(u32::MAX))
            })
            .collect()
    }
}

/// The slots needed (in use plus the buffer, at every share of the grid) from each pass on,
/// recorded when they change.
#[derive(Debug, Clone, Default)]
pub(super) struct NeedHistory {
    changes: VecDeque<(Millis, Rises)>,
}

impl NeedHistory {
    /// A pass at `now` needed `slots`. Changes older than the longest window are dropped, but
    /// the last one before it, which still holds then.
    pub(super) fn record(&mut self, now: Millis, slots: Rises) {
        if self.changes.back().is_none_or(|(_, last)| *last != slots) {
            self.changes.push_back((now, slots));
        }
        while self.changes.len() > 1 && self.changes[1].0 + MAX_WINDOW < now {
            self.changes.pop_front();
        }
    }

    /// The most slots needed at each share from `since` on (the change in force at `since`
    /// included).
    pub(super) fn peak_since(&self, since: Millis) -> Rises {
        let first = self
            .changes
            .partition_point(|&(t, _)| t <= since)
            .saturating_sub(1);
        self.changes
            .range(first..)
            .fold(Rises::default(), |peak, (_, slots)| peak.max(slots))
    }
}
