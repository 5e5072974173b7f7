//! What the demand-aware policy hands the planner at an instant ([`Forecast`]), and the rules
//! the planner reads from it: the free slots wanted, how far ahead pipelines' next stages are
//! held, and how long a machine beyond them is kept.

use super::rise::P95_SHARE;
use super::{DEFAULT_LEAD_TIME, Rises, Waits, allowed_waiting_share};
use crate::core::Millis;
use crate::core::pipelines::{BootTimes, ClassScope, Horizon, PipelineTracker};

/// What the demand-aware policy knows about a pool's demand at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Forecast {
    /// The free slots each share of jobs allowed to wait asks for, from the rises recent jobs
    /// met within one `lead_time` (`demand::rise`); the planner picks the share its `target_wait`
    /// allows.
    pub rises: Rises,
    /// Jobs GitLab still queued for this runner when it last handed one out (`queue_size`
    /// of the payload minus the job handed out), while that report is fresh; or, if more, the
    /// jobs the pool released to GitLab whose retries may still come
    /// (`DemandTracker::job_released`).
    pub gitlab_backlog: u32,
    /// Jobs of pipelines' next stages expected pending within `lead_time`, less the slots the
    /// stages before them hold, which are free by then (`PipelineForecast::to_hold`; 0 where no
    /// pipeline is known). Set by the caller, who feeds the pipeline tracker: this tracker does
    /// not know pipelines.
    pub pipeline_jobs: u32,
    /// Jobs of pipelines' next stages GitLab made pending that have not reached the pool yet
    /// (`core::pipelines`, `PipelineForecast::released`): part of GitLab's queue, like
    /// `gitlab_backlog`, which may count them too. Set by the caller.
    pub pipeline_released: u32,
    /// Fewer jobs that nothing foresaw came in the window than one per `surplus_grace`
    /// (`(n + 1) · grace < window`, the rate read as its mean under a flat prior), and the last
    /// jobs handed out meet the target (at most 5 % of the last 100 waited longer): the next
    /// such job is not expected within the grace, so an
    /// idle machine that nothing needs goes at once rather than after the grace
    /// ([`Forecast::release_grace`]). While the target is missed, the grace keeps machines
    /// that may serve jobs beyond the buffer.
    pub jobs_rare: bool,
    /// While jobs are rare: the pipelines' next-stage jobs due within `surplus_grace`
    /// ([`Forecast::keep_horizon`]), for which idle machines are kept, not made. Set by the
    /// caller, as `pipeline_jobs` is.
    pub pipeline_keep: u32,
    /// How long this pool takes from the create request to a machine that takes jobs (the
    /// 90th percentile of the recent ones, so that a slow boot is planned for): the span within
    /// which a job can count only on the slots already held.
    pub lead_time: Millis,
    /// How much longer the slowest twentieth of recent machines took than `lead_time` (the
    /// 95th percentile of create-to-ready less the 90th; 0 until one was measured): what a
    /// machine timed by `lead_time` may still be late by, 19 times in 20
    /// ([`Forecast::pipeline_horizon`]).
    pub lead_spread: Millis,
    /// The recent create-to-ready times themselves (the default lead time alone until one was
    /// measured): a next stage's machines are timed from them and the stage's durations
    /// together (`core::pipelines::ask_after`).
    pub boots: BootTimes,
    /// How long an idle machine the forecast does not need is kept ([`surplus_grace`]).
    pub surplus_grace: Millis,
    /// Warm pool: how long such a machine is kept idle before it is stopped, once a start was
    /// measured: [`surplus_grace`] priced with the start times in place of the boots, since a
    /// stopped machine comes back in a start time (`None` until one was measured; stopping
    /// then waits `surplus_grace` too).
    pub stop_grace: Option<Millis>,
    /// As `need_peak`, over the last `stop_grace`: what a machine stopped at its grace keeps.
    pub stop_need_peak: Rises,
    /// The most job slots needed (in use, running or waiting, plus the buffer) during the last
    /// `surplus_grace`, at each share of the grid ([`Forecast::recent_need`]): capacity goes
    /// only once it has not been needed for that long, so that demand that rises and falls
    /// within the grace does not release a machine only to make one again (churn). The buffer
    /// counts too: as recent jobs age, their weights cross the target's share and back (once per
    /// gap between jobs under steady demand), and a buffer that dips for a pass must not release
    /// the machine it asks for again at the next.
    pub need_peak: Rises,
    /// The most job slots needed (in use, plus the strictest buffer and GitLab's queue) over the
    /// whole window (the pool's `idle_time`, at most [`super::MAX_WINDOW`]): the peak a warm
    /// pool's stopped machines are kept for, since a stopped machine costs only its disk and can
    /// wait out a longer quiet spell than an idle one.
    pub window_peak: u32,
    /// How long a stopped machine of this pool takes from its start to taking jobs (the 90th
    /// percentile of the recent ones; `None` until one was measured).
    pub start_time: Option<Millis>,
    /// Job slots the pool's stopped machines would give once started: set by the planner
    /// ([`Forecast::buffer`] counts them).
    pub stopped_slots: u32,
    /// Warm pool: what a stopped machine saves each time it serves in place of a new one, in
    /// machine time: a replacement's expected cost (a boot, and the wait beyond the target of
    /// the job that waits for it, as [`surplus_grace`] prices it) less a start's (0 until a
    /// start was measured).
    pub start_saving: Millis,
    /// How long the recent jobs that found no free slot waited, in the pool's current regime
    /// (`demand::waits`): what the share of jobs a target lets wait is judged by, once enough
    /// were measured ([`Forecast::waiting_share`]).
    pub waits: Waits,
}

/// Free slots the forecast asks for under a p95 target of `target_wait`, beyond the jobs
/// already waiting in the pool: the buffer the target's share of waiting jobs asks for, or the
/// jobs the pipelines' next stages bring, whichever is more (the arrivals' rises and the next
/// stages are the same bursts seen two ways: the larger is held, not their sum), plus
/// GitLab's queue ([`Forecast::queued`]).
pub fn wanted_free_slots(forecast: &Forecast, target_wait: Millis) -> u32 {
    forecast
        .buffer(target_wait)
        .max(forecast.foreseen_jobs(target_wait))
        .saturating_add(forecast.queued())
}

impl Forecast {
    /// How far the pipeline forecast looks under `target_wait`, with a pass at least every
    /// `pass_interval`. A next stage's machines are asked for at the latest moment that keeps
    /// 19 in 20 of its jobs within the target (`core::pipelines::ask_after`, from the stage's
    /// recent durations and the pool's `boots`); a machine is asked for at a pass, up to a
    /// pass interval late, so the wait allowed for is the target less that. A scheduled run's
    /// first job is held from the lead time before its time, less what the target lets it
    /// wait beyond the slowest twentieth of boots (`lead_spread`).
    pub fn pipeline_horizon(&self, target_wait: Millis, pass_interval: Millis) -> Horizon {
        let late = target_wait.saturating_sub(pass_interval);
        Horizon {
            lead_time: self.lead_time,
            ahead: self
                .lead_time
                .saturating_sub(late.saturating_sub(self.lead_spread)),
            late,
            boots: self.boots,
            early: 0,
        }
    }

    /// How long an idle machine that nothing needs is kept: the grace, or nothing while jobs are
    /// rare. The grace is what releasing a machine costs if a job then needs it (a boot and the
    /// wait beyond the target, `surplus_grace`), `C`. If jobs nothing foresaw come at random at
    /// a rate `r`, keeping the machine a time `g` saves on average
    /// `(1 − e^(−r·g)) · (C − 1/r)`: whatever `g`, worth it only when `r · C > 1`, at least one
    /// job expected within the grace. The rate is read from the window as `(n + 1) / window`
    /// ([`Self::jobs_rare`]).
    pub fn release_grace(&self) -> Millis {
        if self.jobs_rare {
            0
        } else {
            self.surplus_grace
        }
    }

    /// While jobs are rare, the next stages whose jobs keep idle machines from going (`None`:
    /// jobs are not rare, and the grace keeps machines anyway). Released now, an idle machine
    /// is replaced by one asked for when the stage's machines are due (`a`), ready a boot `X`
    /// later; kept, it idles from now until then. So keeping it costs `a + X − now` of machine
    /// time, releasing it the replacement's boot `X` and the wait beyond the target it may
    /// cause, which together the grace prices (`surplus_grace`: `E[X] + E[(X − T)⁺]`): it is
    /// kept for a stage whose machines are due within the grace less the mean boot
    /// (`Horizon::early`). A scheduled run is held from the grace ahead of its time.
    pub fn keep_horizon(&self, horizon: Horizon) -> Option<Horizon> {
        self.jobs_rare.then_some(Horizon {
            ahead: horizon.ahead.max(self.surplus_grace),
            early: self.surplus_grace.saturating_sub(self.boots.mean()),
            ..horizon
        })
    }

    /// The forecast with the pipelines' part set from `tracker`'s jobs in `scope` at `now`: the
    /// next stages' jobs due within `horizon` ([`Self::pipeline_horizon`]), the released ones
    /// on their way, and while jobs are rare those due within the grace
    /// ([`Self::keep_horizon`]). The simulator and the service both take it from here.
    pub fn with_pipelines(
        self,
        tracker: &PipelineTracker,
        (now, horizon): (Millis, Horizon),
        scope: ClassScope<'_>,
    ) -> Self {
        let pipelines = tracker.forecast_for(now, horizon, scope);
        let pipeline_keep = self
            .keep_horizon(horizon)
            .map_or(0, |keep| tracker.forecast_for(now, keep, scope).to_hold());
        Self {
            pipeline_jobs: pipelines.to_hold(),
            pipeline_released: pipelines.released,
            pipeline_keep,
            ..self
        }
    }

    /// Jobs pending in GitLab that have not reached the pool: the queue GitLab last reported,
    /// or the released next stages' jobs if more (GitLab's report may predate them; they are
    /// in that queue, so the larger counts, not the sum).
    pub fn queued(&self) -> u32 {
        self.gitlab_backlog.max(self.pipeline_released)
    }

    /// The pipelines' next-stage jobs held for as free slots under `target_wait`: all of them,
    /// unless the target lets every job wait (it is a lead time or more: a job that finds no
    /// slot waits no longer than that), in which case none, as no buffer is held then either.
    /// Warm pool: a foreseen job that a stopped machine serves needs no machine ready ahead
    /// of it: the machine is started when the job is pending, and the job waits a start. The
    /// target lets a share of the foreseen jobs wait a start (the share the buffer's rule
    /// allows for a wait of a start time, all of them when the start fits in the target), so
    /// that share, up to the stopped machines' slots, is left to them and the rest is held.
    pub fn foreseen_jobs(&self, target_wait: Millis) -> u32 {
        if allowed_waiting_share(target_wait, self.lead_time) >= 1.0 {
            return 0;
        }
        let Some(start) = self.start_time.filter(|&start| start < self.lead_time) else {
            return self.pipeline_jobs;
        };
        let may_wait = allowed_waiting_share(target_wait, start) * f64::from(self.pipeline_jobs);
        // Rounded down: never more left to a start than the share allows.
        let left_to_starts = (may_wait.floor() as u32).min(self.stopped_slots);
        self.pipeline_jobs - left_to_starts
    }

    /// The free slots that keep the p95 wait within `target_wait` (`demand::rise`), counting the
    /// stopped machines' slots (lowered where they stand in for running ones, as `warm` says).
    pub fn buffer(&self, target_wait: Millis) -> u32 {
        self.warm(&self.rises, target_wait)
    }

    /// The most slots needed during the grace under `target_wait`: in use plus its buffer.
    pub fn recent_need(&self, target_wait: Millis) -> u32 {
        self.warm(&self.need_peak, target_wait)
    }

    /// The share of jobs `target_wait` lets find no free slot, when such a job waits for a new
    /// machine: 5 % of all jobs may wait longer than the target, so the share is 5 % over the
    /// share of those jobs whose wait passes the target. That share is read from the waits
    /// measured in the pool's current regime where there are enough, and is otherwise that of
    /// a wait taken as uniform over the lead time ([`allowed_waiting_share`]). Every job may
    /// wait when none of those measured waited longer than the target.
    pub fn waiting_share(&self, target_wait: Millis) -> f64 {
        match self.waits.share_beyond(target_wait) {
            Some(beyond) if beyond > 0.0 => (P95_SHARE / beyond).min(1.0),
            Some(_) => 1.0,
            None => allowed_waiting_share(target_wait, self.lead_time),
        }
    }

    /// What `grid` asks for under `target_wait` when a job that finds no free slot waits for a
    /// new machine ([`Self::waiting_share`]), lowered where stopped machines stand in for
    /// running ones. A job beyond the free slots is served by a stopped machine in a start time
    /// while one is left: of the slots held for a wait of a new machine, the last
    /// `stopped_slots` may be stopped ones, as long as the slots held still keep the target for
    /// a wait of a start time.
    fn warm(&self, grid: &Rises, target_wait: Millis) -> u32 {
        let cold = grid.buffer_for(self.waiting_share(target_wait));
        match self.start_time {
            Some(start) if self.stopped_slots > 0 && start < self.lead_time => {
                let warm = grid.buffer_for(allowed_waiting_share(target_wait, start));
                warm.max(cold.saturating_sub(self.stopped_slots))
            }
            _ => cold,
        }
    }
}

/// How long an idle machine the forecast does not need is kept, from the measured times a
/// replacement takes to get ready (`times`: create-to-ready, or start-to-ready for a machine
/// stopped rather than destroyed). Releasing it costs, if it turns out to be needed, the
/// replacement's time of machine time and the wait of the job that finds it missing beyond
/// `target_wait` (a job's wait beyond the target is priced as machine time, the one exchange
/// rate the model assumes; the operator accepted the rest): in expectation over the measured
/// times, their mean plus the mean of their excess over the target. Keeping it idle costs its
/// idle time. Not knowing when it will be needed, keeping it until the idle time equals what
/// releasing it would cost, then releasing it, never pays more than twice the cost of knowing
/// the future (the break-even rule of renting against buying). The buffer keeps the slots the
/// target asks for whatever their idle time; this is only for machines beyond it. At most
/// `idle_time`; with no time measured yet, [`DEFAULT_LEAD_TIME`].
pub fn surplus_grace(times: &[Millis], target_wait: Millis, idle_time: Millis) -> Millis {
    let times = if times.is_empty() {
        &[DEFAULT_LEAD_TIME][..]
    } else {
        times
    };
    let n = times.len() as u64;
    let mean = times.iter().sum::<Millis>() / n;
    let excess = times
        .iter()
        .map(|t| t.saturating_sub(target_wait))
        .sum::<Millis>()
        / n;
    mean.saturating_add(excess).min(idle_time)
}

/// Whether a machine created at `created_at` is in the last part of a paid period, where
/// giving it up loses nothing already paid for. The last part is 3 minutes (a tenth of a
/// shorter period), enough for a few passes and the provider's destroy.
pub fn near_period_end(created_at: Millis, billing_period: Millis, now: Millis) -> bool {
    if billing_period == 0 {
        return true;
    }
    let margin = (billing_period / 10).min(180_000);
    let into_period = now.saturating_sub(created_at) % billing_period;
    billing_period - into_period <= margin
}
