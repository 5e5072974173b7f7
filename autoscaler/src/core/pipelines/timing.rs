//! When to ask for a next stage's machines: late enough that they idle little before its jobs
//! come, early enough that at most one foreseen job in twenty waits longer than the target.
//!
//! A machine asked for at `τ` after the current stage started takes jobs at `τ + X`, `X` its
//! create-to-ready time; the next stage's jobs are pending at `D`, the stage's duration (its
//! start to the end that released the next one). A job that gets that machine waits
//! `τ + X − D` when that is positive, and longer than the target `T` when `D − X < τ − T`.
//! So the latest `τ` that keeps the share of such jobs within 5 % is `T` plus the 5 % quantile
//! of `D − X`, over the stage's recent durations and the pool's recent create-to-ready times
//! taken as independent (every pair of one of each). The two spreads are read together: a
//! stage that may end early and a boot that may be slow are each rare, both at once rarer
//! still, and taking a tail of each apart would hold machines longer than the target needs.
//! The request comes at a pass, up to a pass interval after `τ`, which is taken from `T`.

use super::stage_shape::DURATIONS_KEPT;
use crate::core::Millis;
use crate::core::P95_SHARE;

/// Create-to-ready times kept, at most: the demand tracker's samples.
pub const BOOTS_KEPT: usize = 32;

/// The pool's recent create-to-ready times, sorted (a fixed array, so that the forecast that
/// carries it stays `Copy`). The default holds none, and times no stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BootTimes {
    sorted: [Millis; BOOTS_KEPT],
    len: usize,
}

impl BootTimes {
    /// From the measured times (the last [`BOOTS_KEPT`] if more); with none measured, `fallback`
    /// alone (the default lead time), so that a pool that has made no machine yet still times
    /// its stages by one boot.
    pub fn new(times: impl IntoIterator<Item = Millis>, fallback: Millis) -> Self {
        let mut all: Vec<Millis> = times.into_iter().collect();
        let skip = all.len().saturating_sub(BOOTS_KEPT);
        let mut kept: Vec<Millis> = all.drain(skip..).collect();
        if kept.is_empty() {
            kept.push(fallback);
        }
        kept.sort_unstable();
        let mut sorted = [0; BOOTS_KEPT];
        sorted[..kept.len()].copy_from_slice(&kept);
        Self {
            sorted,
            len: kept.len(),
        }
    }

    /// Every sample the same time (tests, and a pool timed by one lead time).
    pub fn flat(time: Millis) -> Self {
        Self::new([time], time)
    }

    /// Their mean (0 with none).
    pub fn mean(&self) -> Millis {
        self.times().iter().sum::<Millis>() / (self.len.max(1) as Millis)
    }

    fn times(&self) -> &[Millis] {
        &self.sorted[..self.len]
    }
}

/// How long after its stage started to ask for the machines of the stage that follows it, from
/// the stage's recent `durations` (at most [`DURATIONS_KEPT`] are read), the pool's `boots`,
/// and `late`, how long a foreseen job may wait (the target less a pass interval): the
/// module's rule. `None` without a duration.
pub fn ask_after(
    durations: impl IntoIterator<Item = Millis>,
    boots: &BootTimes,
    late: Millis,
) -> Option<Millis> {
    let mut kept = [0; DURATIONS_KEPT];
    let mut len = 0;
    for (slot, d) in kept.iter_mut().zip(durations) {
        *slot = d;
        len += 1;
    }
    let durations = &mut kept[..len];
    durations.sort_unstable();
    let pairs = durations.len() * boots.times().len();
    if pairs == 0 {
        return None;
    }
    // At most this many pairs (5 %, rounded down) may leave the job waiting past `late`: those
    // whose slack is below the one at this rank.
    let rank = ((pairs as f64) * P95_SHARE).floor() as usize;
    let quantile = nth_smallest_slack(durations, boots.times(), rank);
    let ask = (quantile + i128::from(late)).max(0);
    Some(Millis::try_from(ask).unwrap_or(Millis::MAX))
}

/// The `rank`-th smallest (from 0) of `d − x` over every pair of one of `durations` and one of
/// `boots`, both sorted, `rank` below the number of pairs. Called for every stage in flight at
/// every pass, so it walks the pairs in order from the smallest rather than listing all of
/// them (up to 32 × 32): each duration's slacks rise as its boot falls, and a duration's first
/// slack is taken only after the shorter durations' first ones, so the next smallest is among
/// the durations already begun and the first one not begun.
fn nth_smallest_slack(durations: &[Millis], boots: &[Millis], rank: usize) -> i128 {
    // For each duration begun, how many of its slacks (slowest boot first) were taken.
    let mut taken = [0usize; DURATIONS_KEPT];
    let mut begun = 0;
    let slack = |i: usize, taken: usize| {
        i128::from(durations[i]) - i128::from(boots[boots.len() - 1 - taken])
    };
    for popped in 0.. {
        let candidates = (begun + 1).min(durations.len());
        let (next, value) = (0..candidates)
            .filter(|&i| taken[i] < boots.len())
            .map(|i| (i, slack(i, taken[i])))
            .min_by_key(|&(i, value)| (value, i))
            .expect("rank is below the number of pairs");
        if popped == rank {
            return value;
        }
        if taken[next] == 0 {
            begun += 1;
        }
        taken[next] += 1;
    }
    unreachable!("the pairs are finite and rank is below their number")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Millis = 1000;

    #[test]
    fn one_duration_and_one_boot_ask_a_boot_before_the_end_plus_the_wait_allowed() {
        let boots = BootTimes::flat(60 * S);
        assert_eq!(ask_after([300 * S], &boots, 0), Some(240 * S));
        assert_eq!(ask_after([300 * S], &boots, 29 * S), Some(269 * S));
        // A boot longer than the stage: ask at its start.
        assert_eq!(ask_after([30 * S], &boots, 0), Some(0));
        assert_eq!(ask_after(std::iter::empty(), &boots, 0), None);
    }

    /// Durations 180..=370 s and boots 30..=87 s, uniform: the slack `D − X` of the 400 pairs
    /// has its 5 % quantile (122 s) well above the shortest duration less the slowest boot
    /// (93 s), which is what reading a tail of each apart would ask for.
    #[test]
    fn the_two_spreads_are_read_together() {
        let durations: Vec<Millis> = (0..20).map(|i| (180 + 10 * i) * S).collect();
        let boots = BootTimes::new((0..20).map(|i| (30 + 3 * i) * S), 0);
        let ask = ask_after(durations.clone(), &boots, 0).unwrap();
        let apart = 180 * S - 87 * S;
        assert!(ask >= apart + 20 * S, "{ask} against {apart} read apart");
        // Exactly 5 % of the pairs leave their job waiting: those whose slack is below it.
        let below = durations
            .iter()
            .flat_map(|&d| boots.times().iter().map(move |&x| d as i128 - x as i128))
            .filter(|&s| s < ask as i128)
            .count();
        assert!(below <= 20, "{below} of 400 pairs wait");
        // A longer wait allowed asks later by as much.
        assert_eq!(ask_after(durations, &boots, 20 * S), Some(ask + 20 * S));
    }

    /// The walk in order finds the same pair as sorting every pair would.
    #[test]
    fn the_walk_finds_the_rank_that_listing_every_pair_finds() {
        use proptest::prelude::*;
        let case = (
            proptest::collection::vec(0..600 * S, 1..=DURATIONS_KEPT),
            proptest::collection::vec(0..120 * S, 1..=BOOTS_KEPT),
        );
        proptest!(|((mut durations, boots) in case)| {
            durations.sort_unstable();
            let boots = BootTimes::new(boots, 0);
            let mut all: Vec<i128> = durations
                .iter()
                .flat_map(|&d| boots.times().iter().map(move |&x| d as i128 - x as i128))
                .collect();
            all.sort_unstable();
            for rank in [0, all.len() / 20, all.len() / 2, all.len() - 1] {
                prop_assert_eq!(nth_smallest_slack(&durations, boots.times(), rank), all[rank]);
            }
        });
    }

    #[test]
    fn only_the_last_boots_are_kept_and_none_falls_back() {
        let boots = BootTimes::new((1..=40).map(|i| i * S), 0);
        assert_eq!(boots.times().first(), Some(&(9 * S)));
        assert_eq!(BootTimes::new([], 90 * S).times(), &[90 * S]);
    }
}
