//! Pipelines as GitLab runs them by stages: every job exists from the pipeline's creation
//! (ids and tokens given at once), the first stage's jobs pending and the others `created`;
//! when every job of a stage has ended, the next stage's jobs become pending if all of them
//! succeeded, and every later job is `skipped` if one did not (GitLab's `when: on_success`,
//! the default; `Ci::PipelineProcessing::AtomicProcessingService` moves a stage's jobs on from
//! the statuses of the stages before it). A job retried after a failure counts by its retry.

use std::time::Instant;

use crate::control::{EnqueuedJob, JobSpec, JobStatus};

use super::State;
use super::queue::EnqueueError;

/// A pipeline still moving: its jobs by stage, and the stage whose jobs may run now.
#[derive(Debug)]
pub(crate) struct Pipeline {
    stages: Vec<Vec<u64>>,
    current: usize,
}

/// How a stage stands.
#[derive(Debug, PartialEq, Eq)]
enum StageState {
    Running,
    Succeeded,
    Failed,
}

impl State {
    /// Creates a pipeline of `stages` (each a list of jobs; their `pipeline_id` is set here):
    /// the first stage's jobs pending, the rest `created`.
    pub fn create_pipeline(
        &mut self,
        stages: Vec<Vec<JobSpec>>,
        now: Instant,
    ) -> Result<(u64, Vec<Vec<EnqueuedJob>>), EnqueueError> {
        if stages.is_empty() || stages.iter().any(Vec::is_empty) {
            return Err(EnqueueError::EmptyStage);
        }
        for spec in stages.iter().flatten() {
            self.check_spec(spec)?;
        }
        let pipeline_id = self.next_pipeline_id;
        self.next_pipeline_id += 1;
        let mut created = Vec::new();
        for (n, stage) in stages.into_iter().enumerate() {
            let mut jobs = Vec::new();
            for mut spec in stage {
                spec.pipeline_id = Some(pipeline_id);
                let job = self.insert_created_job(spec, now);
                if n == 0 {
                    self.make_pending(job.id, now);
                }
                jobs.push(job);
            }
            created.push(jobs);
        }
        let ids = created
            .iter()
            .map(|stage| stage.iter().map(|job| job.id).collect())
            .collect();
        self.pipelines.insert(
            pipeline_id,
            Pipeline {
                stages: ids,
                current: 0,
            },
        );
        Ok((pipeline_id, created))
    }

    /// Moves every pipeline whose current stage has ended on to its next stage (or skips the
    /// rest); finished pipelines are forgotten.
    pub fn advance_pipelines(&mut self, now: Instant) {
        let open: Vec<u64> = self.pipelines.keys().copied().collect();
        for id in open {
            while self.advance(id, now) {}
        }
    }

    /// One step of pipeline `id`; whether it moved on to a stage that may already be over.
    fn advance(&mut self, id: u64, now: Instant) -> bool {
        let Some(pipeline) = self.pipelines.get(&id) else {
            return false;
        };
        let state = self.stage_state(&pipeline.stages[pipeline.current]);
        let next = pipeline.current + 1;
        match state {
            StageState::Running => false,
            StageState::Succeeded if next < pipeline.stages.len() => {
                let ids = pipeline.stages[next].clone();
                for job in ids {
                    self.make_pending(job, now);
                }
                if let Some(p) = self.pipelines.get_mut(&id) {
                    p.current = next;
                }
                true
            }
            StageState::Succeeded => {
                self.pipelines.remove(&id);
                false
            }
            StageState::Failed => {
                let later: Vec<u64> = pipeline.stages[next..].iter().flatten().copied().collect();
                for job in later {
                    if let Some(job) = self.jobs.get_mut(&job)
                        && job.status == JobStatus::Created
                    {
                        job.status = JobStatus::Skipped;
                    }
                }
                self.pipelines.remove(&id);
                false
            }
        }
    }

    fn stage_state(&self, jobs: &[u64]) -> StageState {
        let mut state = StageState::Succeeded;
        for &id in jobs {
            match self.latest_retry(id) {
                Some(JobStatus::Success) => {}
                Some(status) if !status.is_final() => return StageState::Running,
                _ => state = StageState::Failed,
            }
        }
        state
    }

    /// The status of the job's last retry (the job itself when it was not retried).
    fn latest_retry(&self, mut id: u64) -> Option<JobStatus> {
        loop {
            let job = self.jobs.get(&id)?;
            match job.retried_as {
                Some(next) => id = next,
                None => return Some(job.status),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{JobRequest, JobUpdate, UpdateReply};

    fn state() -> State {
        crate::state::test_state("glrt-r")
    }

    fn spec(stage: &str, name: &str) -> JobSpec {
        let mut spec = JobSpec::new("glrt-r", &["true"]);
        spec.stage = stage.into();
        spec.name = name.into();
        spec
    }

    /// The runner takes the oldest pending job, which must be `job`, and ends it in `state`.
    fn finish(s: &mut State, job: &EnqueuedJob, state: &str, now: Instant) {
        let request = JobRequest {
            token: "glrt-r".into(),
            ..JobRequest::default()
        };
        let taken = s.take_job(&request, now).expect("a pending job");
        assert_eq!(taken.payload.job_id, job.id);
        let end = JobUpdate {
            state: state.into(),
            ..JobUpdate::default()
        };
        let reply = s.update_job(job.id, &job.token, &end, now);
        assert!(matches!(reply, UpdateReply::Updated(_)), "{reply:?}");
        s.advance_pipelines(now);
    }

    fn status(s: &State, job: &EnqueuedJob) -> JobStatus {
        s.job_status(job.id).expect("a job")
    }

    #[test]
    fn the_next_stage_becomes_pending_when_every_job_of_this_one_succeeded() {
        let mut s = state();
        let now = Instant::now();
        let stages = vec![
            vec![spec("build", "compile")],
            vec![spec("test", "unit 1/2"), spec("test", "unit 2/2")],
        ];
        let (_, jobs) = s.create_pipeline(stages, now).expect("a pipeline");
        assert_eq!(status(&s, &jobs[0][0]), JobStatus::Pending);
        assert_eq!(status(&s, &jobs[1][0]), JobStatus::Created);
        finish(&mut s, &jobs[0][0], "success", now);
        assert_eq!(status(&s, &jobs[1][0]), JobStatus::Pending);
        assert_eq!(status(&s, &jobs[1][1]), JobStatus::Pending);
    }

    #[test]
    fn a_failed_stage_skips_every_later_job() {
        let mut s = state();
        let now = Instant::now();
        let stages = vec![
            vec![spec("build", "a"), spec("build", "b")],
            vec![spec("test", "t")],
            vec![spec("deploy", "d")],
        ];
        let (_, jobs) = s.create_pipeline(stages, now).expect("a pipeline");
        finish(&mut s, &jobs[0][0], "failed", now);
        assert_eq!(status(&s, &jobs[1][0]), JobStatus::Created, "b still runs");
        finish(&mut s, &jobs[0][1], "success", now);
        assert_eq!(status(&s, &jobs[1][0]), JobStatus::Skipped);
        assert_eq!(status(&s, &jobs[2][0]), JobStatus::Skipped);
    }
}
