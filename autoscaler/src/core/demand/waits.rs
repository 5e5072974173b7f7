//! How long the jobs that found no free slot waited, kept apart by how busy the pool was: what
//! the share of jobs a wait target lets wait is judged by, once enough were measured.
//!
//! The buffer's rule (`demand::rise`) lets a share of jobs find no free slot, and must know how
//! many of those then wait longer than the target. Until it has measured that, it takes a
//! waiting job's wait as a uniform part of a lead time. Measured, it is often not: a lone job
//! after a quiet spell waits a whole boot, while in a busy stream a machine asked for a moment
//! before is soon ready. So the pool keeps the waits of its recent jobs that found no free
//! slot, and reads from them the share that waited longer than the target. A job that finds a
//! free slot is handed out at once (a sidecar's job request is held open for it), so a job
//! handed out later than a pass after it came is one that found none.
//!
//! Busy and quiet spells wait differently, and a busy hour's short waits must not loosen the
//! quiet hour after it. The waits are therefore kept apart by *regime*: how many jobs nothing
//! foresaw came within the forecast's window, in powers of two (0, 1–2, 3–6, 7–14, …). A pass
//! reads its own regime's waits only.

use std::collections::{BTreeMap, VecDeque};

use crate::core::Millis;

/// Waits kept per regime: the most recent.
const WAITS_KEPT: usize = 32;
/// Fewest waits of a regime that are believed over the uniform rule: with fewer, each one moves
/// the share beyond the target by more than an eighth.
const WAITS_BELIEVED: usize = 8;

/// The waits of each regime, and the regime of the latest forecast.
#[derive(Debug, Clone, Default)]
pub struct WaitHistory {
    by_regime: BTreeMap<u32, VecDeque<Millis>>,
    regime: u32,
}

impl WaitHistory {
    /// The regime of a forecast whose window saw `arrivals` jobs nothing foresaw.
    pub fn set_regime(&mut self, arrivals: usize) {
        let arrivals = u32::try_from(arrivals).unwrap_or(u32::MAX);
        self.regime = arrivals.saturating_add(1).ilog2();
    }

    /// A job was handed out `wait` after it came. One that waited longer than `pass_interval`
    /// found no free slot: its wait is kept, under the latest forecast's regime.
    pub fn handed_out(&mut self, wait: Millis, pass_interval: Millis) {
        if wait <= pass_interval {
            return;
        }
        let waits = self.by_regime.entry(self.regime).or_default();
        if waits.len() == WAITS_KEPT {
            waits.pop_front();
        }
        waits.push_back(wait);
    }

    /// The latest forecast's regime's waits, as the forecast hands them to the planner.
    pub fn current(&self) -> Waits {
        let mut current = Waits::default();
        if let Some(waits) = self.by_regime.get(&self.regime) {
            for (slot, &wait) in current.waits.iter_mut().zip(waits) {
                *slot = wait;
            }
            current.len = waits.len().min(WAITS_KEPT) as u8;
        }
        current
    }
}

/// The waits of the recent jobs that found no free slot, in the pool's current regime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waits {
    waits: [Millis; WAITS_KEPT],
    len: u8,
}

impl Waits {
    /// Of the jobs that found no free slot, the share whose wait was longer than `target_wait`;
    /// `None` while too few were measured to say.
    pub fn share_beyond(&self, target_wait: Millis) -> Option<f64> {
        let waits = &self.waits[..usize::from(self.len)];
        if waits.len() < WAITS_BELIEVED {
            return None;
        }
        let beyond = waits.iter().filter(|&&wait| wait > target_wait).count();
        Some(beyond as f64 / waits.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASS: Millis = 1_000;

    fn history(arrivals: usize, waits: &[Millis]) -> WaitHistory {
        let mut h = WaitHistory::default();
        h.set_regime(arrivals);
        for &wait in waits {
            h.handed_out(wait, PASS);
        }
        h
    }

    #[test]
    fn too_few_waits_say_nothing() {
        let h = history(3, &[60_000; WAITS_BELIEVED - 1]);
        assert_eq!(h.current().share_beyond(30_000), None);
        assert_eq!(WaitHistory::default().current().share_beyond(30_000), None);
    }

    #[test]
    fn the_share_beyond_the_target_is_read_from_the_waits() {
        let waits = [
            5_000, 10_000, 20_000, 40_000, 50_000, 60_000, 70_000, 80_000,
        ];
        let h = history(3, &waits);
        assert_eq!(h.current().share_beyond(30_000), Some(5.0 / 8.0));
        assert_eq!(h.current().share_beyond(80_000), Some(0.0));
        assert_eq!(h.current().share_beyond(0), Some(1.0));
    }

    #[test]
    fn a_job_handed_out_within_a_pass_found_a_free_slot() {
        let mut h = history(3, &[60_000; WAITS_BELIEVED]);
        for _ in 0..WAITS_KEPT {
            h.handed_out(PASS, PASS);
        }
        assert_eq!(h.current().share_beyond(30_000), Some(1.0));
    }

    #[test]
    fn only_the_latest_waits_are_kept() {
        let mut h = history(3, &[60_000; WAITS_KEPT]);
        for _ in 0..WAITS_KEPT / 2 {
            h.handed_out(10_000, PASS);
        }
        assert_eq!(h.current().share_beyond(30_000), Some(0.5));
    }

    #[test]
    fn a_quiet_regime_does_not_read_a_busy_ones_waits() {
        // A busy spell (20 jobs in the window) whose jobs waited little for machines already
        // on their way, then a quiet one (a job or two) whose lone jobs waited whole boots.
        let mut h = history(20, &[5_000; WAITS_BELIEVED]);
        h.set_regime(1);
        for _ in 0..WAITS_BELIEVED {
            h.handed_out(60_000, PASS);
        }
        assert_eq!(h.current().share_beyond(30_000), Some(1.0));
        // 15 to 30 arrivals: the busy regime again, and its own waits.
        h.set_regime(16);
        assert_eq!(h.current().share_beyond(30_000), Some(0.0));
        h.set_regime(31);
        assert_eq!(h.current().share_beyond(30_000), None);
    }
}
