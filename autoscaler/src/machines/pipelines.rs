//! The pool's forecasts fed with what happened to its jobs (`jobs::JobNews`): the demand
//! forecast's arrivals and hand-outs' waits, and the pipeline forecast (`learning.rs`), saved
//! when due.

use super::controller::PoolController;
use super::learning::PipelineLearning;
use crate::core::demand::ClassDemand;
use crate::core::scaler::PASS_INTERVAL;
use crate::jobs::JobNews;

impl PoolController {
    /// Feeds this pass's job news to the demand forecast and the pipeline forecast: a job the
    /// pipeline forecast foresaw, or one a scheduled run held for, is no news to the arrivals'
    /// peak (slots were held for it).
    /// Each arrival, and each first hand-out's wait, goes to the demand of the class the job
    /// routes to, and to no other.
    pub(super) fn learn_from_jobs(&self, demand: &mut ClassDemand) {
        let mut learning = self.pipeline_learning();
        let lookahead = self.lookahead.get();
        if let Some(lookahead) = lookahead {
            let now = self.machines.now();
            for a in lookahead.take_answers(self.pool()) {
                learning.announce(&a.project.to_string(), a.pipeline, a.stages, now);
            }
            for l in lookahead.take_schedules(self.pool()) {
                learning.schedules_listed(&l.project.to_string(), l.next_runs, now);
            }
        }
        for news in self.jobs.take_news(self.pool()) {
            match news {
                JobNews::Arrived {
                    arrival,
                    class,
                    pipeline,
                } => {
                    let mut foreseen = pipeline
                        .as_ref()
                        .is_some_and(|p| learning.tracker.foresees(p.staged()));
                    if let Some(p) = pipeline.as_ref().filter(|p| p.place.scheduled) {
                        foreseen |= learning.tracker.scheduled_job_arrived(
                            &p.project,
                            p.place.pipeline,
                            arrival.at,
                        );
                    }
                    demand.job_arrived(class.as_deref(), arrival, foreseen);
                    if let Some(p) = &pipeline {
                        learning.job_arrived(p.staged(), arrival.at);
                    }
                    if let (Some(lookahead), Some(p)) = (lookahead, &pipeline)
                        && let Ok(project) = p.project.parse()
                    {
                        lookahead.ask(self.pool(), project, p.place.pipeline);
                    }
                }
                JobNews::HandedOut { waited, class } => {
                    demand.job_handed_out(class.as_deref(), waited, PASS_INTERVAL);
                }
                JobNews::Started { at, pipeline } => learning.job_started(pipeline.staged(), at),
                JobNews::Ended {
                    at,
                    pipeline,
                    failed,
                } if failed => learning.job_failed(pipeline.staged(), at),
                JobNews::Ended { at, pipeline, .. } => learning.job_ended(pipeline.staged(), at),
                JobNews::Released { at, class } => demand.job_released(class.as_deref(), at),
            }
        }
    }

    /// Saves what the pipeline forecast learned, when due (or now, with `force`).
    pub(super) fn save_pipeline_shapes(&self, force: bool) {
        let now = self.machines.now();
        self.pipeline_learning()
            .save(self.machines.store().as_ref(), self.pool(), now, force);
    }

    pub(super) fn pipeline_learning(&self) -> std::sync::MutexGuard<'_, PipelineLearning> {
        self.pipelines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
