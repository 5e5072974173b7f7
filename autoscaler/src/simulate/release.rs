//! Releasing pipeline jobs during a run: a pipeline's first jobs become pending when it is
//! created, and each later job when the last job it waits for ends. Because those ends depend
//! on how long jobs waited for machines, this happens in the engine's virtual time, not when
//! the workload is drawn. A job with a `not_before` (a replayed job's recorded ready time) is
//! pending at the later of the two.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::pipeline::Pipeline;
use crate::core::Millis;

/// A job of one of the run's pipelines: (pipeline index, job index).
pub type JobKey = (usize, usize);

/// A job that became pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub at: Millis,
    pub runs_for: Millis,
    pub key: JobKey,
}

/// The pipelines of one pool's run and how far each has got.
#[derive(Debug)]
pub struct Releases<'a> {
    pipelines: &'a [Pipeline],
    /// Pipelines created so far (they are sorted by creation).
    created: usize,
    /// Per pipeline, per job: how many of the jobs it waits for have not ended.
    waiting_on: Vec<Vec<usize>>,
    /// Jobs whose wait is over, pending at their `not_before`, soonest first.
    later: BinaryHeap<Reverse<(Millis, JobKey)>>,
}

impl<'a> Releases<'a> {
    pub fn new(pipelines: &'a [Pipeline]) -> Self {
        Self {
            pipelines,
            created: 0,
            waiting_on: pipelines
                .iter()
                .map(|p| p.jobs.iter().map(|j| j.after.len()).collect())
                .collect(),
            later: BinaryHeap::new(),
        }
    }

    /// When the next pipeline is created or a job's `not_before` comes, if one is still to.
    pub fn next_creation(&self) -> Option<Millis> {
        let created = self.pipelines.get(self.created).map(|p| p.created);
        let later = self.later.peek().map(|Reverse((at, _))| *at);
        created.into_iter().chain(later).min()
    }

    /// Every pipeline created and every job whose wait is over pending.
    pub fn all_created(&self) -> bool {
        self.created == self.pipelines.len() && self.later.is_empty()
    }

    /// The jobs of pipelines created by `now` that wait for nothing, pending at creation (or
    /// at their `not_before`), and the jobs whose `not_before` came by `now`.
    pub fn create_due(&mut self, now: Millis) -> Vec<Released> {
        let mut out = Vec::new();
        while let Some(p) = self.pipelines.get(self.created)
            && p.created <= now
        {
            for (j, job) in p.jobs.iter().enumerate() {
                if job.after.is_empty() {
                    self.pending_from((self.created, j), p.created, &mut out);
                }
            }
            self.created += 1;
        }
        while let Some(&Reverse((at, key))) = self.later.peek()
            && at <= now
        {
            self.later.pop();
            out.push(self.released(key, at));
        }
        out
    }

    /// `key` ended at `at`: the jobs for which it was the last one waited for, pending then.
    /// (A job given up at `acquire_timeout` fails and never ends, so, as GitLab skips the
    /// jobs after a failed one, those never become pending.)
    pub fn ended(&mut self, key: JobKey, at: Millis) -> Vec<Released> {
        let (p, ended) = key;
        let mut out = Vec::new();
        for (j, job) in self.pipelines[p].jobs.iter().enumerate() {
            if job.after.contains(&ended) {
                let left = &mut self.waiting_on[p][j];
                *left -= 1;
                if *left == 0 {
                    self.pending_from((p, j), at, &mut out);
                }
            }
        }
        out
    }

    /// `key` waits for nothing more from `at`: pending then, or at its `not_before` if later.
    fn pending_from(&mut self, key: JobKey, at: Millis, out: &mut Vec<Released>) {
        let not_before = self.pipelines[key.0].jobs[key.1].not_before;
        if not_before > at {
            self.later.push(Reverse((not_before, key)));
        } else {
            out.push(self.released(key, at));
        }
    }

    fn released(&self, key: JobKey, at: Millis) -> Released {
        Released {
            at,
            runs_for: self.pipelines[key.0].jobs[key.1].runs_for,
            key,
        }
    }
}
