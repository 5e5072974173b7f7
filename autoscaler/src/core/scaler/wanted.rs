//! The free slots a pass wants, built up in steps, each with the reason a shortfall up to it
//! gives: the decision's reason code is the first step the free slots fall short of.

use super::{Reason, ScalePolicy, Strategy};
use crate::core::demand::Forecast;

/// Free slots wanted beyond the waiting jobs, and the reason each step of it gives.
pub(super) struct Wanted {
    /// (free slots wanted in all, the reason a shortfall up to it gives), in rising order.
    steps: [(u32, Reason); 5],
}

impl Wanted {
    pub(super) fn new(
        p: &ScalePolicy,
        forecast: &Forecast,
        waiting_jobs: u32,
        in_use: u32,
    ) -> Self {
        let floor = waiting_jobs.saturating_add(p.idle_target(in_use));
        let (peak, pipelines, backlog) = match p.strategy {
            Strategy::Idle => (0, 0, 0),
            Strategy::Demand => (
                forecast.peak_in_lead_time,
                forecast.pipeline_jobs,
                forecast.gitlab_backlog,
            ),
        };
        let forecast_total = waiting_jobs.saturating_add(p.idle_target(in_use).max(peak));
        // The next stages' jobs are known to come, on top of what recent arrivals suggest:
        // those arrivals are earlier stages' jobs, which do not come again.
        let with_pipelines = forecast_total.saturating_add(pipelines);
        Self {
            steps: [
                (waiting_jobs, Reason::WaitingJobs),
                (floor, Reason::IdleTarget),
                (forecast_total, Reason::DemandForecast),
                (with_pipelines, Reason::PipelineForecast),
                (with_pipelines.saturating_add(backlog), Reason::GitlabQueue),
            ],
        }
    }

    pub(super) fn total(&self) -> u32 {
        self.steps[4].0
    }

    /// Why `free` slots are not enough: the first step they fall short of.
    pub(super) fn shortfall_reason(&self, free: u32) -> Reason {
        self.steps
            .iter()
            .find(|(wanted, _)| free < *wanted)
            .map_or(Reason::Steady, |(_, reason)| *reason)
    }
}
