//! Releasing pipeline jobs during a run: a pipeline's first jobs become pending when it is
//! created, and each later job when the last job it waits for ends. Because those ends depend
//! on how long jobs waited for machines, this happens in the engine's virtual time, not when
//! the workload is drawn.

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
        }
    }

    /// When the next pipeline is created, if one is still to come.
    pub fn next_creation(&self) -> Option<Millis> {
        self.pipelines.get(self.created).map(|p| p.created)
    }

    pub fn all_created(&self) -> bool {
        self.created == self.pipelines.len()
    }

    /// The jobs of pipelines created by `now` that wait for nothing, pending at creation.
    pub fn create_due(&mut self, now: Millis) -> Vec<Released> {
        let mut out = Vec::new();
        while let Some(p) = self.pipelines.get(self.created)
            && p.created <= now
        {
            for (j, job) in p.jobs.iter().enumerate() {
                if job.after.is_empty() {
                    out.push(self.released((self.created, j), p.created));
                }
            }
            self.created += 1;
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
                    out.push(self.released((p, j), at));
                }
            }
        }
        out
    }

    fn released(&self, key: JobKey, at: Millis) -> Released {
        Released {
            at,
            runs_for: self.pipelines[key.0].jobs[key.1].runs_for,
            key,
        }
    }
}
