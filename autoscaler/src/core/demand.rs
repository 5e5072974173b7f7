//! The demand-aware policy: how many free job slots to hold, judged from the jobs that came
//! recently, the queue GitLab reports, and how long this pool takes to make a machine.
//!
//! A job that finds no free slot waits for a machine to be made, so the slots worth holding are
//! those that jobs will ask for before a new machine could be ready. The tracker remembers
//! recent arrivals, the slots in use at each pass and the pool's measured create-to-ready
//! times (the lead time). For each recent job it works out the *rise* it met: the slots taken,
//! net of those freed, within one lead time before it ([`rise`]); the forecast hands the
//! planner, for every share of jobs a wait target may let wait, the fewest free slots that
//! leave no more than that share of those jobs without one. Jobs are weighed down linearly
//! with their age until they count for nothing after the window (the pool's `idle_time`), so
//! as demand falls the buffer falls with it, and with no demand it is zero. GitLab's reported
//! queue comes on top.
//!
//! Pure: time comes in as an argument.

use std::collections::{BTreeSet, VecDeque};

use super::Millis;
use super::pipelines::Horizon;
pub use by_class::{ClassDemand, ClassPass};
pub use rise::{Rises, allowed_waiting_share};

mod by_class;
mod history;
mod rise;

/// Arrivals kept, at most: the window is the pool's `idle_time`, bounded by this.
pub const MAX_WINDOW: Millis = 60 * 60_000;
/// How long a queue size GitLab reported is believed: later payloads replace it, and jobs it
/// counted are taken by then.
pub const QUEUE_REPORT_FRESH: Millis = 30_000;
/// Create-to-ready times kept.
const LEAD_SAMPLES: usize = 32;
/// Assumed until the pool has made a machine: a cloud VM's boot, on the slow side.
pub const DEFAULT_LEAD_TIME: Millis = 90_000;

/// What the demand-aware policy knows about a pool's demand at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Forecast {
    /// The free slots each share of jobs allowed to wait asks for, from the rises recent jobs
    /// met within one `lead_time` ([`rise`]); the planner picks the share its `target_wait`
    /// allows.
    pub rises: Rises,
    /// Jobs GitLab still queued for this runner when it last handed one out (`queue_size`
    /// of the payload minus the job handed out), while that report is fresh.
    pub gitlab_backlog: u32,
    /// Jobs of pipelines' next stages expected pending within `lead_time`
    /// (`core::pipelines`; 0 where no pipeline is known). Set by the caller, who feeds the
    /// pipeline tracker: this tracker does not know pipelines.
    pub pipeline_jobs: u32,
    /// Jobs of pipelines' next stages GitLab made pending that have not reached the pool yet
    /// (`core::pipelines`, `PipelineForecast::released`): part of GitLab's queue, like
    /// `gitlab_backlog`, which may count them too. Set by the caller.
    pub pipeline_released: u32,
    /// How long this pool takes from the create request to a machine that takes jobs (the
    /// 90th percentile of the recent ones, so that a slow boot is planned for): the span within
    /// which a job can count only on the slots already held.
    pub lead_time: Millis,
    /// How much longer the slowest twentieth of recent machines took than `lead_time` (the
    /// 95th percentile of create-to-ready less the 90th; 0 until one was measured): what a
    /// machine timed by `lead_time` may still be late by, 19 times in 20
    /// ([`Forecast::pipeline_horizon`]).
    pub lead_spread: Millis,
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
    /// whole window (the pool's `idle_time`, at most [`MAX_WINDOW`]): the peak a warm pool's
    /// stopped machines are kept for, since a stopped machine costs only its disk and can wait
    /// out a longer quiet spell than an idle one.
    pub window_peak: u32,
    /// How long a stopped machine of this pool takes from its start to taking jobs (the 90th
    /// percentile of the recent ones; `None` until one was measured).
    pub start_time: Option<Millis>,
    /// Job slots the pool's stopped machines would give once started: set by the planner
    /// ([`Forecast::buffer`] counts them).
    pub stopped_slots: u32,
}

/// Recent arrivals and create-to-ready times of one pool.
#[derive(Debug, Clone, Default)]
pub struct DemandTracker {
    arrivals: VecDeque<Millis>,
    /// Arrivals of jobs the pipeline forecast foresaw: they lengthen the grace as any job
    /// does, but are no news to the peak.
    foreseen: VecDeque<Millis>,
    queue_report: Option<(u32, Millis)>,
    lead_times: VecDeque<Millis>,
    /// Machines seen on their way to ready, whose create-to-ready time is still to be taken.
    starting: BTreeSet<String>,
    /// Start-to-ready times of machines started from stopped, and those still on their way.
    start_times: VecDeque<Millis>,
    restarting: BTreeSet<String>,
    /// Slots in use now (running and waiting), as last observed.
    in_use: u32,
    /// Slots needed (in use and forecast) from each instant on, recorded when they change.
    needs: VecDeque<(Millis, u32)>,
    /// Slots in use at each forecast (each pass): the rises are read from it.
    in_use_at: history::InUseHistory,
    /// Slots in use plus the buffer at each share, from each pass on: what the grace keeps.
    needed: history::NeedHistory,
}

/// A job that came to a pool: when, and the `job_info.queue_size` of its payload (the candidate
/// jobs GitLab's queue query returned, this one included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub at: Millis,
    pub queue_size: Option<u32>,
}

impl DemandTracker {
    /// A job came to the pool at `at`; `queue_size` is `job_info.queue_size` of its payload.
    pub fn job_arrived(&mut self, at: Millis, queue_size: Option<u32>) {
        // Arrivals are recorded in order but may come from passes a moment apart.
        let position = self.arrivals.partition_point(|&t| t <= at);
        self.arrivals.insert(position, at);
        self.report_queue(queue_size, at);
    }

    /// A job came whose coming was foreseen (a pipeline's next stage, `core::pipelines`): its
    /// payload's queue size is news, its arrival is not, so it does not count as one.
    pub fn foreseen_job_arrived(&mut self, at: Millis, queue_size: Option<u32>) {
        let position = self.foreseen.partition_point(|&t| t <= at);
        self.foreseen.insert(position, at);
        self.report_queue(queue_size, at);
    }

    /// GitLab's queue after handing out a job at `at` whose payload said `queue_size`: the
    /// latest report stands. Jobs taken in the same instant come in no set order, and the
    /// queue only shrinks as the pool takes from it, so of those the smallest is the latest
    /// (a larger one kept would count jobs already taken as still queued).
    fn report_queue(&mut self, queue_size: Option<u32>, at: Millis) {
        let Some(size) = queue_size else { return };
        let queued = size.saturating_sub(1);
        let newer = match self.queue_report {
            Some((jobs, reported_at)) => at > reported_at || (at == reported_at && queued < jobs),
            None => true,
        };
        if newer {
            self.queue_report = Some((queued, at));
        }
    }

    /// A machine took jobs for the first time; `lead_time` from its create request to then.
    pub fn machine_ready(&mut self, lead_time: Millis) {
        if self.lead_times.len() == LEAD_SAMPLES {
            self.lead_times.pop_front();
        }
        self.lead_times.push_back(lead_time);
    }

    /// Takes the start-to-ready time of each machine started from stopped that now takes jobs
    /// (`machines`: id, started at, takes jobs), as [`Self::observe_machines`] does boots.
    pub fn observe_starts<'a>(
        &mut self,
        machines: impl Iterator<Item = (&'a str, Millis, bool)>,
        now: Millis,
    ) {
        let mut restarting = BTreeSet::new();
        for (id, started_at, ready) in machines {
            if !ready {
                restarting.insert(id.to_string());
            } else if self.restarting.contains(id) {
                if self.start_times.len() == LEAD_SAMPLES {
                    self.start_times.pop_front();
                }
                self.start_times.push_back(now.saturating_sub(started_at));
            }
        }
        self.restarting = restarting;
    }

    /// Takes the create-to-ready time of each machine seen starting that now takes jobs
    /// (`machines`: id, created at, takes jobs). A machine first seen ready (adopted after a
    /// restart) is not measured: its creation is too far back to say anything.
    pub fn observe_machines<'a>(
        &mut self,
        machines: impl Iterator<Item = (&'a str, Millis, bool)>,
        now: Millis,
    ) {
        let mut starting = BTreeSet::new();
        for (id, created_at, ready) in machines {
            if !ready {
                starting.insert(id.to_string());
            } else if self.starting.contains(id) {
                self.machine_ready(now.saturating_sub(created_at));
            }
        }
        self.starting = starting;
    }

    /// The job slots in use (running and waiting) now.
    pub fn observe_in_use(&mut self, slots: u32) {
        self.in_use = slots;
    }

    fn record_need(&mut self, now: Millis, slots: u32) {
        if self.needs.back().is_none_or(|&(_, last)| last != slots) {
            self.needs.push_back((now, slots));
        }
        // Keep the last change before the oldest instant asked about: it still holds then.
        while self.needs.len() > 1 && self.needs[1].0 + MAX_WINDOW < now {
            self.needs.pop_front();
        }
    }

    /// The most slots needed from `since` on.
    fn need_peak(&self, since: Millis) -> u32 {
        let first = self
            .needs
            .partition_point(|&(t, _)| t <= since)
            .saturating_sub(1);
        self.needs
            .range(first..)
            .map(|&(_, n)| n)
            .max()
            .unwrap_or(0)
    }

    /// The forecast at `now` from the arrivals of the last `window` (older ones are dropped
    /// once older than [`MAX_WINDOW`]), for a pool whose target is `target_wait` (it sets the
    /// grace, [`surplus_grace`]). Records the slots in use and needed now, for the rises and
    /// `need_peak`.
    pub fn forecast(&mut self, now: Millis, window: Millis, target_wait: Millis) -> Forecast {
        let window = window.clamp(1, MAX_WINDOW);
        while self.arrivals.front().is_some_and(|&t| t + MAX_WINDOW < now) {
            self.arrivals.pop_front();
        }
        while self.foreseen.front().is_some_and(|&t| t + MAX_WINDOW < now) {
            self.foreseen.pop_front();
        }
        let start = self.arrivals.partition_point(|&t| t + window <= now);
        let recent: Vec<Millis> = self.arrivals.range(start..).copied().collect();
        let lead_time = slow_end(&self.lead_times).unwrap_or(DEFAULT_LEAD_TIME);
        let lead_spread =
            percentile(&self.lead_times, 95).map_or(0, |slowest| slowest.saturating_sub(lead_time));
        let gitlab_backlog = match self.queue_report {
            Some((jobs, at)) if now.saturating_sub(at) <= QUEUE_REPORT_FRESH => jobs,
            _ => 0,
        };
        self.in_use_at.record(now, self.in_use);
        let rises = self.in_use_at.rises(&recent, &self.foreseen, lead_time);
        let weighed: Vec<(u32, u64)> = rises
            .into_iter()
            .zip(&recent)
            .map(|(rise, &t)| (rise, window.saturating_sub(now.saturating_sub(t))))
            .collect();
        let rises = Rises::from_samples(&weighed, window);
        let boots: Vec<Millis> = self.lead_times.iter().copied().collect();
        let surplus_grace = surplus_grace(&boots, target_wait, window);
        let start_time = slow_end(&self.start_times);
        let stop_grace = start_time.filter(|&start| start < lead_time).map(|_| {
            let starts: Vec<Millis> = self.start_times.iter().copied().collect();
            self::surplus_grace(&starts, target_wait, window)
        });
        self.needed.record(now, rises.plus(self.in_use));
        let need = self
            .in_use
            .saturating_add(rises.strictest())
            .saturating_add(gitlab_backlog);
        self.record_need(now, need);
        Forecast {
            rises,
            gitlab_backlog,
            pipeline_jobs: 0,
            pipeline_released: 0,
            lead_time,
            lead_spread,
            surplus_grace,
            stop_grace,
            stop_need_peak: self
                .needed
                .peak_since(now.saturating_sub(stop_grace.unwrap_or(surplus_grace))),
            need_peak: self.needed.peak_since(now.saturating_sub(surplus_grace)),
            window_peak: self.need_peak(now.saturating_sub(window)),
            start_time,
            stopped_slots: 0,
        }
    }
}

/// The 90th percentile (nearest rank): plan for a slow machine, not for the one outlier.
fn slow_end(samples: &VecDeque<Millis>) -> Option<Millis> {
    percentile(samples, 90)
}

/// The `pct`th percentile of `samples` (nearest rank).
fn percentile(samples: &VecDeque<Millis>, pct: usize) -> Option<Millis> {
    let mut sorted: Vec<Millis> = samples.iter().copied().collect();
    sorted.sort_unstable();
    let rank = (sorted.len() * pct).div_ceil(100);
    sorted.get(rank.checked_sub(1)?).copied()
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
    /// How far the pipeline forecast looks under `target_wait` (the lead time, and how far
    /// ahead the pipelines' next-stage jobs are held), with a pass
    /// at least every `pass_interval`. A machine asked for a lead time before its job is due is
    /// ready by then 9 times in 10, and 19 times in 20 by `lead_spread` later; it is asked at a
    /// pass, up to a pass interval late. A job may wait `target_wait`, so its machine can be
    /// asked for that much later, less the spread and the pass interval: then 19 jobs in 20 so
    /// foreseen wait no longer than the target, and each machine idles that much less before
    /// its job comes. A target under those two holds them the whole lead time.
    pub fn pipeline_horizon(&self, target_wait: Millis, pass_interval: Millis) -> Horizon {
        let late = target_wait
            .saturating_sub(self.lead_spread)
            .saturating_sub(pass_interval);
        Horizon {
            lead_time: self.lead_time,
            ahead: self.lead_time.saturating_sub(late),
        }
    }

    /// Jobs pending in GitLab that have not reached the pool: the queue GitLab last reported,
    /// or the released next stages' jobs if more (GitLab's report may predate them; they are
    /// in that queue, so the larger counts, not the sum).
    pub fn queued(&self) -> u32 {
        self.gitlab_backlog.max(self.pipeline_released)
    }

    /// The pipelines' next-stage jobs held for under `target_wait`: all of them, unless the
    /// target lets every job wait (it is a lead time or more: a job that finds no slot waits
    /// no longer than that), in which case none, as no buffer is held then either.
    pub fn foreseen_jobs(&self, target_wait: Millis) -> u32 {
        if allowed_waiting_share(target_wait, self.lead_time) >= 1.0 {
            0
        } else {
            self.pipeline_jobs
        }
    }

    /// The free slots that keep the p95 wait within `target_wait` ([`rise`]), counting the
    /// stopped machines' slots ([`Self::warm`]).
    pub fn buffer(&self, target_wait: Millis) -> u32 {
        self.warm(&self.rises, target_wait)
    }

    /// The most slots needed during the grace under `target_wait`: in use plus its buffer.
    pub fn recent_need(&self, target_wait: Millis) -> u32 {
        self.warm(&self.need_peak, target_wait)
    }

    /// What `grid` asks for under `target_wait` when a job that finds no free slot waits a
    /// lead time, lowered where stopped machines stand in for running ones. A job beyond the
    /// free slots is served by a stopped machine in a start time while one is left: of the
    /// slots held for a wait of a lead time, the last `stopped_slots` may be stopped ones, as
    /// long as the slots held still keep the target for a wait of a start time.
    fn warm(&self, grid: &Rises, target_wait: Millis) -> u32 {
        let cold = grid.buffer_for(allowed_waiting_share(target_wait, self.lead_time));
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

#[cfg(test)]
mod tests;
