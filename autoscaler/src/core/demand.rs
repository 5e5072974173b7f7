//! The demand-aware policy: how many free job slots to hold, judged from the jobs that came
//! recently, the queue GitLab reports, and how long this pool takes to make a machine.
//!
//! A job that finds no free slot waits for a machine to be made, so the slots worth holding are
//! those that jobs will ask for before a new machine could be ready. The tracker remembers
//! recent arrivals, the slots in use at each pass and the pool's measured create-to-ready
//! times (the lead time). For each recent job it works out the *rise* it met: the slots taken,
//! net of those freed, within one lead time before it (the `rise` module); the forecast hands
//! the planner, for every share of jobs a wait target may let wait, the fewest free slots that
//! leave no more than that share of those jobs without one. Jobs are weighed down linearly
//! with their age until they count for nothing after the window (the pool's `idle_time`), so
//! as demand falls the buffer falls with it, and with no demand it is zero. GitLab's reported
//! queue comes on top.
//!
//! Pure: time comes in as an argument.

use std::collections::{BTreeSet, VecDeque};

use super::Millis;
use super::pipelines::{BOOTS_KEPT, BootTimes};
pub use by_class::{ClassDemand, ClassPass};
pub use forecast::{Forecast, near_period_end, surplus_grace, wanted_free_slots};
pub use rise::{Rises, allowed_waiting_share};
pub use waits::{WaitHistory, Waits};

mod by_class;
mod forecast;
mod history;
mod rise;
mod waits;

/// Arrivals kept, at most: the window is the pool's `idle_time`, bounded by this.
pub const MAX_WINDOW: Millis = 60 * 60_000;
/// How long a queue size GitLab reported is believed: later payloads replace it, and jobs it
/// counted are taken by then.
pub const QUEUE_REPORT_FRESH: Millis = 30_000;
/// How long a job released to GitLab for want of a machine is expected back as a retry:
/// GitLab fails it once its acknowledgement key expires, 2 minutes after the last keep-alive,
/// at the next run of its stuck-job worker (every 30 s), and then queues the retry its retry
/// rules allow (`api-spec/runner-protocol.md`, two-phase commit).
pub const RETRY_EXPECTED_WITHIN: Millis = 150_000;
/// Hand-outs whose waits say whether the pool meets its target: the last 100, the fewest in
/// which a 95th percentile has five jobs above it, so that one slow job does not decide it.
const HANDOUTS_JUDGED: usize = 100;
/// Create-to-ready times kept.
const LEAD_SAMPLES: usize = BOOTS_KEPT;
/// Assumed until the pool has made a machine: a cloud VM's boot, on the slow side.
pub const DEFAULT_LEAD_TIME: Millis = 90_000;

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
    /// The buffer alone at each share, from each pass on: what the grace keeps while jobs
    /// are rare ([`Forecast::jobs_rare`]).
    buffers: history::NeedHistory,
    /// The waits of the last [`HANDOUTS_JUDGED`] jobs handed out, each from its intake.
    handed_out: VecDeque<Millis>,
    /// How long the recent jobs that found no free slot waited, per regime.
    waits: waits::WaitHistory,
    /// When jobs were released to GitLab for want of a machine, within the last
    /// [`RETRY_EXPECTED_WITHIN`].
    released: VecDeque<Millis>,
}

/// A machine a pass sees on its way to taking jobs: its id, when it was asked for (its
/// create, or its start from stopped), and since when it takes jobs (`None`: not yet).
pub type OnItsWay<'a> = (&'a str, Millis, Option<Millis>);

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

    /// A job was released to GitLab at `at` because no machine took it within
    /// `acquire_timeout`. GitLab fails it and may queue a retry, which comes back as a new job;
    /// until a job has come since, or [`RETRY_EXPECTED_WITHIN`] has passed, it is counted as
    /// in GitLab's queue ([`Self::retries_due`]), so that the machine made for it is not
    /// released as unneeded moments before its retry comes.
    pub fn job_released(&mut self, at: Millis) {
        self.released.push_back(at);
    }

    /// Released jobs whose retries may still come: those of the last
    /// [`RETRY_EXPECTED_WITHIN`], less the jobs that came since the first of them (a retry
    /// comes as any new job: which job it is, is not known).
    fn retries_due(&mut self, now: Millis) -> u32 {
        while self
            .released
            .front()
            .is_some_and(|&at| at.saturating_add(RETRY_EXPECTED_WITHIN) < now)
        {
            self.released.pop_front();
        }
        let Some(&first) = self.released.front() else {
            return 0;
        };
        let since_first =
            |times: &VecDeque<Millis>| times.len() - times.partition_point(|&t| t <= first);
        let came = since_first(&self.arrivals) + since_first(&self.foreseen);
        u32::try_from(self.released.len().saturating_sub(came)).unwrap_or(u32::MAX)
    }

    /// A job was handed to a sidecar `wait` after it came to the pool; a pass comes every
    /// `pass_interval` ([`Forecast::waits`]).
    pub fn job_handed_out(&mut self, wait: Millis, pass_interval: Millis) {
        if self.handed_out.len() == HANDOUTS_JUDGED {
            self.handed_out.pop_front();
        }
        self.handed_out.push_back(wait);
        self.waits.handed_out(wait, pass_interval);
    }

    /// A machine took jobs for the first time; `lead_time` from its create request to then.
    pub fn machine_ready(&mut self, lead_time: Millis) {
        push_sample(&mut self.lead_times, lead_time);
    }

    /// Takes the start-to-ready time of each machine started from stopped that now takes jobs
    /// (`machines`: id, started at, since when it takes jobs), as [`Self::observe_machines`]
    /// does boots.
    pub fn observe_starts<'a>(&mut self, machines: impl Iterator<Item = OnItsWay<'a>>) {
        let (restarting, took) = newly_ready(&self.restarting, machines);
        self.restarting = restarting;
        for start_time in took {
            push_sample(&mut self.start_times, start_time);
        }
    }

    /// Takes the create-to-ready time of each machine seen starting that now takes jobs
    /// (`machines`: id, created at, since when it takes jobs). The time is to the moment it
    /// began to take jobs, not to the pass that sees it: a pass comes up to a pass interval
    /// later, and that delay held no job back. A machine first seen ready (adopted after a
    /// restart) is not measured: its creation is too far back to say anything.
    pub fn observe_machines<'a>(&mut self, machines: impl Iterator<Item = OnItsWay<'a>>) {
        let (starting, took) = newly_ready(&self.starting, machines);
        self.starting = starting;
        for lead_time in took {
            self.machine_ready(lead_time);
        }
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

    /// Whether the last jobs handed out meet `target_wait`: no more than 5 % of them waited
    /// longer (none handed out yet: yes).
    fn meets(&self, target_wait: Millis) -> bool {
        let late = self.handed_out.iter().filter(|&&w| w > target_wait).count();
        late * 20 <= self.handed_out.len()
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
        self.waits.set_regime(recent.len());
        let lead_time = slow_end(&self.lead_times).unwrap_or(DEFAULT_LEAD_TIME);
        let lead_spread =
            percentile(&self.lead_times, 95).map_or(0, |slowest| slowest.saturating_sub(lead_time));
        let reported = match self.queue_report {
            Some((jobs, at)) if now.saturating_sub(at) <= QUEUE_REPORT_FRESH => jobs,
            _ => 0,
        };
        // Both are GitLab's queue: a released job's retry is in it once GitLab queues it.
        let gitlab_backlog = reported.max(self.retries_due(now));
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
        let starts: Vec<Millis> = self.start_times.iter().copied().collect();
        let stop_grace = start_time
            .filter(|&start| start < lead_time)
            .map(|_| self::surplus_grace(&starts, target_wait, window));
        let start_cost = if starts.is_empty() {
            0
        } else {
            self::surplus_grace(&starts, target_wait, Millis::MAX)
        };
        let start_saving =
            self::surplus_grace(&boots, target_wait, Millis::MAX).saturating_sub(start_cost);
        self.needed.record(now, rises.plus(self.in_use));
        self.buffers.record(now, rises);
        // The rate is (n + 1) / window: the mean rate given n arrivals under a flat prior. With
        // n / window a stream coming once per grace would count as rare whenever the window
        // held one arrival fewer than its mean (18 of 18.75), and churn a machine per job.
        let arrivals = recent.len() as u64 + 1;
        let jobs_rare = self.meets(target_wait) && arrivals.saturating_mul(surplus_grace) < window;
        let need_peak = if jobs_rare {
            // A slot freed by a job's end is not kept for the next job, which is not expected
            // within the grace; the buffer's own dips are still smoothed over it.
            self.buffers
                .peak_since(now.saturating_sub(surplus_grace))
                .plus(self.in_use)
        } else {
            self.needed.peak_since(now.saturating_sub(surplus_grace))
        };
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
            boots: BootTimes::new(boots.iter().copied(), DEFAULT_LEAD_TIME),
            surplus_grace,
            stop_grace,
            stop_need_peak: self
                .needed
                .peak_since(now.saturating_sub(stop_grace.unwrap_or(surplus_grace))),
            need_peak,
            jobs_rare,
            pipeline_keep: 0,
            window_peak: self.need_peak(now.saturating_sub(window)),
            start_time,
            stopped_slots: 0,
            start_saving,
            waits: self.waits.current(),
        }
    }
}

/// Of `machines`, the ones still on their way (for the next pass), and how long each that was
/// on its way at the last pass (`was_on_its_way`) took to take jobs since it was asked for.
fn newly_ready<'a>(
    was_on_its_way: &BTreeSet<String>,
    machines: impl Iterator<Item = OnItsWay<'a>>,
) -> (BTreeSet<String>, Vec<Millis>) {
    let mut on_its_way = BTreeSet::new();
    let mut took = Vec::new();
    for (id, asked_at, ready_at) in machines {
        match ready_at {
            None => {
                on_its_way.insert(id.to_string());
            }
            Some(ready_at) if was_on_its_way.contains(id) => {
                took.push(ready_at.saturating_sub(asked_at));
            }
            Some(_) => {}
        }
    }
    (on_its_way, took)
}

/// Keeps the last [`LEAD_SAMPLES`] of a kind of time.
fn push_sample(samples: &mut VecDeque<Millis>, sample: Millis) {
    if samples.len() == LEAD_SAMPLES {
        samples.pop_front();
    }
    samples.push_back(sample);
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

#[cfg(test)]
mod tests;
