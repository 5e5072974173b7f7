//! How many free slots a wait target asks for: the rise of demand within one lead time, as the
//! recent jobs met it, and the share of jobs the target lets wait.
//!
//! **The rise a job meets.** Free slots held at `t - L` (`L`: the lead time, create request to
//! ready) are all a job arriving at `t` can count on: a machine asked for after `t - L` is not
//! ready yet. The slots it competes for are those taken since then, net of those freed: the
//! jobs in use (running or waiting) just before it, less those in use at `t - L`, plus the jobs
//! that came with it ahead of it. Call that its *rise*. With `B` free slots held, the job finds
//! one when its rise is below `B`, and waits (for a machine asked for when the slots ran out,
//! so at most about `L`) when its rise is `B` or more. Counting in-use jobs, not arrivals,
//! counts the slots that running jobs freed within the lead time: a steady stream whose jobs
//! end as fast as new ones come rises by little, whatever its rate.
//!
//! **The share allowed to wait.** A job that waits waits for a machine asked for at some point
//! of the lead time before it, so its wait is between 0 and `L`: taken as uniform there, a
//! share `q` of jobs waiting puts `q * (1 - w / L)` of all jobs above a wait `w`. (Once the
//! pool has measured how long its jobs that found no slot waited, it reads the share beyond the
//! target from those waits instead: `demand::waits`, `Forecast::waiting_share`.) The p95 is at
//! most `T` (the target) when that is at most 5 % at `w = T`: `q <= 0.05 / (1 - T / L)`; any
//! share when `T >= L` (no job waits longer than a lead time; the pool then holds no buffer
//! beyond its floors). So the buffer is the smallest `B` for which the recent jobs whose rise
//! was `B` or more weigh at most `q` of all. Each weighs `1 - age / window`: a job seen a
//! moment ago describes what comes next, one a window old nothing, and in between it does with
//! that chance, the rest of its weight going to jobs that do not come (which need no slot), so
//! that once a burst ages with nothing after it, the slots held for its like fade with it.
//!
//! **The grid.** The shares are kept on a grid, so that the tracker, which does not know the
//! target, can hand the planner the buffer of every share ([`Rises`] is `Copy`, a fixed array):
//! 5 % times a quarter of an octave per step, up to 100 %. The planner takes the largest share
//! of the grid not above the target's, which holds as many slots as the exact share or (at most
//! 19 % less share) a few more, and keeps a smaller target from ever holding fewer slots.

use crate::core::Millis;
pub use crate::core::P95_SHARE;
/// Steps of the share grid: 5 % × 2^(k/4) for k = 0..17 reaches 95 %; the last entry is 100 %.
const GRID: usize = 19;

/// The share of the grid at `step` (`GRID - 1` is every job).
fn grid_share(step: usize) -> f64 {
    if step + 1 >= GRID {
        1.0
    } else {
        P95_SHARE * 2f64.powf(step as f64 / 4.0)
    }
}

/// The share of jobs that may wait, under a p95 target of `target_wait` when a job that finds
/// no free slot waits up to `lead_time` (derived in the module's comment).
pub fn allowed_waiting_share(target_wait: Millis, lead_time: Millis) -> f64 {
    if target_wait >= lead_time {
        return 1.0;
    }
    let spare = 1.0 - target_wait as f64 / lead_time as f64;
    (P95_SHARE / spare).min(1.0)
}

/// The free slots each share of the grid asks for, from the recent jobs' rises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rises {
    buffers: [u32; GRID],
}

impl Rises {
    /// From `(rise, weight)` of each recent job, each weight at most `full` (a job that just
    /// came). A job of weight `w` tells what the next jobs will meet with a chance of
    /// `w / full`, and otherwise nothing: the rest of its weight is of jobs that do not come.
    pub fn from_samples(samples: &[(u32, u64)], full: u64) -> Self {
        let mut sorted = samples.to_vec();
        // Highest rise first: the weight of rises at least `r` accumulates as `r` falls.
        sorted.sort_unstable_by_key(|&(rise, _)| std::cmp::Reverse(rise));
        let total = full.saturating_mul(sorted.len() as u64);
        let mut buffers = [0; GRID];
        if total == 0 {
            return Self { buffers };
        }
        for (step, buffer) in buffers.iter_mut().enumerate() {
            *buffer = smallest_buffer(&sorted, total, grid_share(step));
        }
        Self { buffers }
    }

    /// The same buffer at every share (tests, and demand known exactly).
    pub fn flat(buffer: u32) -> Self {
        Self {
            buffers: [buffer; GRID],
        }
    }

    /// The free slots that let at most `share` of the jobs wait: those of the largest share of
    /// the grid not above it.
    pub fn buffer_for(&self, share: f64) -> u32 {
        let step = (0..GRID)
            .rev()
            .find(|&s| grid_share(s) <= share + 1e-9)
            .unwrap_or(0);
        self.buffers[step]
    }

    /// The buffer at the strictest share (5 %), for the log.
    pub fn strictest(&self) -> u32 {
        self.buffers[0]
    }

    /// `slots` more at every share: the slots needed, those in use and the buffer held free.
    pub(super) fn plus(mut self, slots: u32) -> Self {
        for b in &mut self.buffers {
            *b = b.saturating_add(slots);
        }
        self
    }

    /// The larger of the two at every share.
    pub(super) fn max(mut self, other: &Self) -> Self {
        for (b, o) in self.buffers.iter_mut().zip(other.buffers) {
            *b = (*b).max(o);
        }
        self
    }
}

/// The smallest `B` such that the jobs whose rise is `B` or more weigh at most `share` of
/// `total`. `sorted`: highest rise first.
fn smallest_buffer(sorted: &[(u32, u64)], total: u64, share: f64) -> u32 {
    let allowed = share * total as f64;
    let mut at_least = 0u64;
    let mut i = 0;
    while i < sorted.len() {
        let rise = sorted[i].0;
        while i < sorted.len() && sorted[i].0 == rise {
            at_least += sorted[i].1;
            i += 1;
        }
        // The jobs with a rise of `rise` or more would wait with `rise` slots: too many.
        if at_least as f64 > allowed + 1e-9 {
            return rise.saturating_add(1);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_follows_from_the_target_and_the_lead_time() {
        assert!((allowed_waiting_share(0, 60_000) - 0.05).abs() < 1e-9);
        assert!((allowed_waiting_share(30_000, 60_000) - 0.10).abs() < 1e-9);
        assert!((allowed_waiting_share(60_000, 60_000) - 1.0).abs() < 1e-9);
        assert!((allowed_waiting_share(57_000, 60_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_buffer_covers_all_but_the_allowed_share() {
        // 100 jobs of equal weight: 90 met a rise of 0, 6 of 1, 4 of 5.
        let mut samples = vec![(0, 1); 90];
        samples.extend([(1, 1); 6]);
        samples.extend([(5, 1); 4]);
        let r = Rises::from_samples(&samples, 1);
        // 5 %: the four at 5 may wait, the six at 1 may not: 2 slots.
        assert_eq!(r.buffer_for(0.05), 2);
        // 10 %: all ten may wait: 1 slot (the ninety at 0 still need one).
        assert_eq!(r.buffer_for(0.1), 1);
        assert_eq!(r.buffer_for(1.0), 0);
        assert_eq!(Rises::from_samples(&[], 1).buffer_for(0.05), 0);
        // The same jobs at half their weight: half of each is of jobs that do not come, so
        // half the share waits at each buffer: 5 % now lets the six at 1 wait (5 %).
        let halved: Vec<(u32, u64)> = samples.iter().map(|&(r, _)| (r, 1)).collect();
        assert_eq!(Rises::from_samples(&halved, 2).buffer_for(0.05), 1);
    }

    #[test]
    fn a_share_between_grid_steps_takes_the_stricter_step() {
        let samples: Vec<(u32, u64)> = (0..100).map(|r| (r, 1)).collect();
        let r = Rises::from_samples(&samples, 1);
        // 7 % lies between 5 % × 2^(1/4) = 5.9 % and 5 % × 2^(2/4) = 7.1 %: 5.9 % is taken.
        assert_eq!(r.buffer_for(0.07), r.buffer_for(0.0595));
        assert!(r.buffer_for(0.07) >= r.buffer_for(0.0708));
    }
}
