//! The free slots a pass wants, built up in steps, each with the reason a shortfall up to it
//! gives: the decision's reason code is the step that asks for most of the shortfall.

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
        let idle_target = p.idle_target(p.scale_factor_counts.slots(in_use, waiting_jobs));
        let floor = waiting_jobs.saturating_add(idle_target);
        let (peak, pipelines, backlog) = match p.strategy {
            Strategy::Idle => (0, 0, 0),
            Strategy::Demand => (
                forecast.buffer(p.target_wait),
                forecast.foreseen_jobs(p.target_wait),
                forecast.queued(),
            ),
        };
        let forecast_total = waiting_jobs.saturating_add(idle_target.max(peak));
        // The slots held for recent rises and those for the next stages' jobs serve the same
        // bursts: the rises the buffer is sized from are the earlier stages' jobs, the very
        // bursts pipelines bring. Added, each burst would be held for twice; the larger covers
        // the stages foreseen and the arrivals alike.
        let with_pipelines = forecast_total.max(waiting_jobs.saturating_add(pipelines));
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

    /// Why `free` slots are not enough: the step that asks for most of the shortfall (the
    /// first such, on a tie). Jobs that wait come first on a tie, then the floors; a small
    /// buffer ahead of a stage's worth of pipeline jobs does not name the machines made for
    /// the stage.
    pub(super) fn shortfall_reason(&self, free: u32) -> Reason {
        let mut below = free;
        let mut most: Option<(u32, Reason)> = None;
        for &(wanted, reason) in &self.steps {
            let adds = wanted.saturating_sub(below);
            below = below.max(wanted);
            if adds > 0 && most.is_none_or(|(m, _)| adds > m) {
                most = Some((adds, reason));
            }
        }
        most.map_or(Reason::Steady, |(_, reason)| reason)
    }
}
