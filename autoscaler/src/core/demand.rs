//! The demand-aware policy: how many free job slots to hold, judged from the jobs that came
//! recently, the queue GitLab reports, and how long this pool takes to make a machine.
//!
//! A job that finds no free slot waits for a machine to be made, so the slots worth holding are
//! those that jobs will ask for before a new machine could be ready. The tracker remembers
//! recent arrivals and the pool's measured create-to-ready times; the forecast is the most jobs
//! that arrived within one create-to-ready time (bursts and pipelines that fan out count as
//! they came), each such peak weighed down linearly with its age until it counts for nothing
//! after the window (the pool's `idle_time`: as long as taskscaler keeps an idle machine after
//! its last job), plus the jobs GitLab said it still queues for this runner. As demand falls,
//! the forecast falls with it, and with no demand it is zero.
//!
//! Pure: time comes in as an argument.

use std::collections::{BTreeSet, VecDeque};

use super::Millis;

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
    /// The most jobs that arrived within twice `lead_time` of another, weighed by age over
    /// the window ([`weighed_peak`]).
    pub peak_in_lead_time: u32,
    /// Jobs GitLab still queued for this runner when it last handed one out (`queue_size`
    /// of the payload minus the job handed out), while that report is fresh.
    pub gitlab_backlog: u32,
    /// Jobs of pipelines' next stages expected pending within `lead_time`
    /// (`core::pipelines`; 0 where no pipeline is known). Set by the caller, who feeds the
    /// pipeline tracker: this tracker does not know pipelines.
    pub pipeline_jobs: u32,
    /// How long this pool takes from the create request to a machine that takes jobs (the
    /// 90th percentile of the recent ones, so that a slow boot is planned for). The forecast
    /// looks at arrivals within twice this: a job arriving while a machine is being made for
    /// an earlier one needs its own.
    pub lead_time: Millis,
    /// How long an idle machine the forecast does not need is kept ([`surplus_grace`]): longer
    /// while jobs keep arriving.
    pub surplus_grace: Millis,
    /// The most job slots needed (in use, running or waiting, plus the free slots forecast)
    /// during the last `surplus_grace`: capacity goes only once it has not been needed for that
    /// long, so that demand that rises and falls with each job or burst does not release a
    /// machine only to make one again (churn).
    pub need_peak: u32,
    /// The most job slots needed over the whole window (the pool's `idle_time`, at most
    /// [`MAX_WINDOW`]): the peak a warm pool's stopped machines are kept for, since a stopped
    /// machine costs only its disk and can wait out a longer quiet spell than an idle one.
    pub window_peak: u32,
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
    /// Slots in use now (running and waiting), as last observed.
    in_use: u32,
    /// Slots needed (in use and forecast) from each instant on, recorded when they change.
    needs: VecDeque<(Millis, u32)>,
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
        if let Some(size) = queue_size {
            self.queue_report = Some((size.saturating_sub(1), at));
        }
    }

    /// A job came whose coming was foreseen (a pipeline's next stage, `core::pipelines`): its
    /// payload's queue size is news, its arrival is not, so it does not count as one.
    pub fn foreseen_job_arrived(&mut self, at: Millis, queue_size: Option<u32>) {
        let position = self.foreseen.partition_point(|&t| t <= at);
        self.foreseen.insert(position, at);
        if let Some(size) = queue_size {
            self.queue_report = Some((size.saturating_sub(1), at));
        }
    }

    /// A machine took jobs for the first time; `lead_time` from its create request to then.
    pub fn machine_ready(&mut self, lead_time: Millis) {
        if self.lead_times.len() == LEAD_SAMPLES {
            self.lead_times.pop_front();
        }
        self.lead_times.push_back(lead_time);
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
    /// once older than [`MAX_WINDOW`]). Records the slots needed now, for `need_peak`.
    pub fn forecast(&mut self, now: Millis, window: Millis) -> Forecast {
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
        let gitlab_backlog = match self.queue_report {
            Some((jobs, at)) if now.saturating_sub(at) <= QUEUE_REPORT_FRESH => jobs,
            _ => 0,
        };
        let peak_in_lead_time = weighed_peak(&recent, lead_time * 2, now, window);
        let still_coming = recent
            .iter()
            .chain(&self.foreseen)
            .filter(|&&t| t + lead_time * 2 > now)
            .count();
        let surplus_grace = surplus_grace(lead_time, window, still_coming);
        let need = self
            .in_use
            .saturating_add(peak_in_lead_time)
            .saturating_add(gitlab_backlog);
        self.record_need(now, need);
        Forecast {
            peak_in_lead_time,
            gitlab_backlog,
            pipeline_jobs: 0,
            lead_time,
            surplus_grace,
            need_peak: self.need_peak(now.saturating_sub(surplus_grace)),
            window_peak: self.need_peak(now.saturating_sub(window)),
        }
    }
}

/// The 90th percentile (nearest rank): plan for a slow machine, not for the one outlier.
fn slow_end(samples: &VecDeque<Millis>) -> Option<Millis> {
    let mut sorted: Vec<Millis> = samples.iter().copied().collect();
    sorted.sort_unstable();
    let rank = (sorted.len() * 9).div_ceil(10);
    sorted.get(rank.checked_sub(1)?).copied()
}

/// The most arrivals within one `span` ending at an arrival, less that arrival (a lone job
/// predicts no other), weighed by `1 - age / window` (age of that arrival) and rounded.
/// `times` is sorted, all within `window`.
fn weighed_peak(times: &[Millis], span: Millis, now: Millis, window: Millis) -> u32 {
    let mut most: u64 = 0;
    let mut start = 0;
    for (end, &t) in times.iter().enumerate() {
        // `start < end`: with a zero span (machines ready the instant they were made, as under
        // a clock that does not move) every earlier arrival falls out, never the current one.
        while start < end && times[start] + span <= t {
            start += 1;
        }
        let count = (end - start) as u64;
        let remaining = window.saturating_sub(now.saturating_sub(t));
        most = most.max((count * remaining + window / 2) / window);
    }
    u32::try_from(most).unwrap_or(u32::MAX)
}

/// Free slots the forecast asks for, beyond the jobs already waiting in the pool.
/// The arrivals' peak and the pipelines' next stages are the same bursts seen two ways: the
/// larger of the two is held, not their sum.
pub fn wanted_free_slots(forecast: &Forecast) -> u32 {
    forecast
        .peak_in_lead_time
        .max(forecast.pipeline_jobs)
        .saturating_add(forecast.gitlab_backlog)
}

/// Jobs that arrived within two lead times that lengthen the grace by one more base grace.
const GRACE_JOBS: u64 = 8;

/// How long an idle machine the forecast does not need is kept. The base is twice the time a
/// new one takes to make, at least 3 minutes (holding it longer costs more machine time than
/// making it again; holding it shorter lets demand that comes in waves release a machine
/// between waves). While jobs keep coming a released machine is soon made again, so the base
/// grows by an eighth for each job that arrived within the last two lead times
/// (`still_coming`); once arrivals stop (the tail of a burst, a quiet night) it is the base
/// again. At most `idle_time`. While a machine is kept the slots needed meanwhile
/// (`need_peak`) stay too.
pub fn surplus_grace(lead_time: Millis, idle_time: Millis, still_coming: usize) -> Millis {
    let base = lead_time.saturating_mul(2).max(180_000);
    let coming = u64::try_from(still_coming).unwrap_or(u64::MAX);
    base.saturating_add(base.saturating_mul(coming) / GRACE_JOBS)
        .min(idle_time)
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
