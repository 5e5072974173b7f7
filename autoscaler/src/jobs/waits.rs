//! How long recent jobs waited for a sidecar, for the status page's chart (`GET /waits`).
//!
//! Finished jobs are dropped ten minutes after they end and the metrics keep only a histogram,
//! so the waits of the last hour are kept here, in memory: a page opened now can still draw
//! the hour before it. A restart starts the hour afresh.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::core::{JobId, Millis};

/// How far back waits are kept.
const KEPT_FOR: Millis = 60 * 60 * 1000;
/// At most this many waits are kept, the newest ones: an hour of a busy service stays within
/// a few megabytes.
const KEPT_AT_MOST: usize = 20_000;

/// One job's wait, from its pending at GitLab to its start on a machine, and its two parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    pub pool: String,
    pub job: u64,
    /// When the job started (ms since the epoch).
    pub started_at: Millis,
    /// The whole wait a user sees: `waited_in_gitlab_ms` (when GitLab said) plus
    /// `waited_here_ms`.
    pub waited_ms: u64,
    /// Pending at GitLab before it was handed to the autoscaler (`time_in_queue_seconds`).
    pub waited_in_gitlab_ms: Option<u64>,
    /// From GitLab's hand-over to the autoscaler to the sidecar's first call for it.
    pub waited_here_ms: u64,
}

/// The waits of the last hour, with the hour's bounds (ms since the epoch): a chart's axis.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecentWaits {
    pub since: Millis,
    pub now: Millis,
    /// Oldest first.
    pub waits: Vec<Wait>,
}

#[derive(Debug, Default)]
pub(super) struct WaitRing {
    waits: Mutex<VecDeque<Wait>>,
}

impl WaitRing {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Wait>> {
        // Every critical section below leaves the ring consistent before it can panic.
        self.waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn record(
        &self,
        pool: &str,
        job: JobId,
        started_at: Millis,
        in_gitlab_ms: Option<u64>,
        here_ms: u64,
    ) {
        let mut waits = self.lock();
        while waits.len() >= KEPT_AT_MOST {
            waits.pop_front();
        }
        waits.push_back(Wait {
            pool: pool.to_string(),
            job: job.0,
            started_at,
            waited_ms: here_ms.saturating_add(in_gitlab_ms.unwrap_or(0)),
            waited_in_gitlab_ms: in_gitlab_ms,
            waited_here_ms: here_ms,
        });
        drop_older(&mut waits, started_at.saturating_sub(KEPT_FOR));
    }

    /// The waits of jobs started since `since` (of `pool` only, when given), oldest first.
    pub(super) fn since(&self, since: Millis, pool: Option<&str>) -> Vec<Wait> {
        self.lock()
            .iter()
            .filter(|w| w.started_at >= since && pool.is_none_or(|p| p == w.pool))
            .cloned()
            .collect()
    }
}

/// Drops waits that started before `before` (the ring is in start order, as jobs start in
/// the order `record` is called; a clock stepping back only keeps a few waits longer).
fn drop_older(waits: &mut VecDeque<Wait>, before: Millis) {
    while waits.front().is_some_and(|w| w.started_at < before) {
        waits.pop_front();
    }
}

impl super::Jobs {
    /// The waits of jobs started in the last hour (of `pool` only, when given), oldest first.
    pub fn recent_waits(&self, pool: Option<&str>) -> RecentWaits {
        let now = self.clock.now();
        let since = now.saturating_sub(KEPT_FOR);
        RecentWaits {
            since,
            now,
            waits: self.waits.since(since, pool),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_older_than_an_hour_are_dropped_and_pools_filtered() {
        let ring = WaitRing::default();
        ring.record("linux", JobId(1), 1_000, None, 500);
        ring.record("arm", JobId(2), 2_000, None, 700);
        ring.record("linux", JobId(3), KEPT_FOR + 1_500, Some(10_000), 900);
        // Job 1 started more than an hour before job 3: gone once job 3 is recorded.
        let all = ring.since(0, None);
        assert_eq!(
            all.iter().map(|w| w.job).collect::<Vec<_>>(),
            vec![2, 3],
            "{all:?}"
        );
        let linux = ring.since(0, Some("linux"));
        assert_eq!(linux.len(), 1);
        assert_eq!(
            (
                linux[0].waited_ms,
                linux[0].waited_in_gitlab_ms,
                linux[0].waited_here_ms
            ),
            (10_900, Some(10_000), 900),
            "the whole wait is GitLab's part and ours"
        );
        assert!(ring.since(KEPT_FOR + 2_000, None).is_empty());
    }

    #[test]
    fn a_busy_hour_keeps_only_the_newest_waits() {
        let ring = WaitRing::default();
        for n in 0..(KEPT_AT_MOST as u64 + 10) {
            ring.record("linux", JobId(n), 10_000 + n, None, 1);
        }
        let kept = ring.since(0, None);
        assert_eq!(kept.len(), KEPT_AT_MOST);
        assert_eq!(kept[0].job, 10);
    }
}
