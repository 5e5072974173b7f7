//! One pool through a workload in virtual time. Each pass does what the service's pool
//! controller does (the same planner, demand tracker, schedule, throttle and breaker from
//! `core`), with the provider, GitLab's queue and the sidecars modelled:
//!
//! - Jobs reach GitLab at their workload time; a pipeline's jobs when it is created or when
//!   the jobs they wait for end ([`Releases`]). The pool takes them at once while it has room
//!   for them (`max_machines` × `capacity_per_machine` jobs active, as the service's on-demand
//!   intake); each taken job's payload reports GitLab's queue size then.
//! - A waiting job goes to the busiest machine with a free slot the moment there is one (the
//!   service's packing); it waits no longer than `acquire_timeout`.
//! - A created machine takes jobs after its boot time, or fails then (`failure_rate`); a
//!   destroyed machine is gone at once.
//! - A pass runs at every event (arrival, pipeline creation, boot end, job end) and at least
//!   every [`TICK`].
//! - A job's start and end, with its project, pipeline, stage and name (a pipeline's, or a
//!   replayed job's labels), teach the pool's pipeline tracker (`core::pipelines`) its projects'
//!   shapes, as the service would from the jobs' payloads; its forecast joins the demand's.

use std::collections::{BTreeMap, VecDeque};

use super::fleet::Fleet;
use super::pipeline::Pipeline;
use super::policy::SimPool;
use super::release::{JobKey, Released, Releases};
use super::report::Tally;
use super::workload::{Job, Label};
use crate::core::Millis;
use crate::core::breaker::Breaker;
use crate::core::demand::DemandTracker;
use crate::core::machine::MachineState;
use crate::core::pipelines::{PipelineTracker, StagedJob};
use crate::core::throttle::TokenBucket;

mod planning;

/// The longest time between two passes: the service's controller's (a coarser tick let idle
/// machines outlive their `idle_time` by up to a tick more than the service's, and jobs that
/// came meanwhile find them).
pub const TICK: Millis = crate::core::scaler::PASS_INTERVAL;

/// A job at GitLab, not yet taken by the pool.
#[derive(Debug)]
struct Pending {
    arrived: Millis,
    runs_for: Millis,
    /// Set for a pipeline's job: its end releases the jobs waiting for it.
    key: Option<JobKey>,
    /// Where GitLab places it (project, pipeline, stage, name), when known.
    label: Option<Label>,
}

impl Pending {
    fn released(r: Released, pipelines: &[Pipeline]) -> Self {
        let pipeline = &pipelines[r.key.0];
        let job = &pipeline.jobs[r.key.1];
        Self {
            arrived: r.at,
            runs_for: r.runs_for,
            key: Some(r.key),
            label: Some(Label {
                project: pipeline.project.clone(),
                pipeline: pipeline.id,
                stage: job.stage.clone(),
                name: job.name.clone(),
                failed: job.failed,
            }),
        }
    }
}

/// A job's labels as the pipeline tracker takes them.
fn staged(label: &Label) -> StagedJob<'_> {
    StagedJob {
        project: &label.project,
        pipeline: label.pipeline,
        stage: &label.stage,
        name: &label.name,
        class: None,
    }
}

#[derive(Debug)]
struct Waiting {
    arrived: Millis,
    taken: Millis,
    runs_for: Millis,
    key: Option<JobKey>,
    label: Option<Label>,
}

/// The jobs one pool serves: timed ones (sorted by arrival) and pipelines (sorted by
/// creation), whose jobs are released as the run goes.
pub struct PoolLoad<'a> {
    pub jobs: &'a [Job],
    pub pipelines: &'a [Pipeline],
}

/// Simulates `pool` serving `load` from `start`; `until` is the end of the workload (the run
/// goes on until every job is done).
pub fn run(pool: &SimPool, load: &PoolLoad<'_>, start: Millis, until: Millis, seed: u64) -> Tally {
    run_with(pool, load, (start, until), seed, Pipelines::Learned)
}

/// Whether the planner is told what pipelines in flight will bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipelines {
    /// The service's way: the pipeline tracker learns from the jobs and forecasts.
    Learned,
    /// As before the tracker: arrivals and GitLab's queue only (for comparisons in tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Ignored,
}

/// [`run`], over `(start, until)`, with or without the pipeline forecast.
pub fn run_with(
    pool: &SimPool,
    load: &PoolLoad<'_>,
    (start, until): (Millis, Millis),
    seed: u64,
    pipelines: Pipelines,
) -> Tally {
    let jobs = load.jobs;
    let mut sim = Sim::new(pool, start, seed, load.pipelines);
    sim.learn_pipelines = pipelines == Pipelines::Learned;
    if sim.learn_pipelines {
        sim.list_schedules(start);
    }
    let mut releases = Releases::new(load.pipelines);
    let mut next_job = 0;
    let mut now = start;
    loop {
        while next_job < jobs.len() && jobs[next_job].at <= now {
            sim.gitlab.push_back(Pending {
                arrived: jobs[next_job].at,
                runs_for: jobs[next_job].runs_for,
                key: None,
                label: jobs[next_job].label.clone(),
            });
            next_job += 1;
        }
        let created = releases.create_due(now);
        sim.gitlab.extend(
            created
                .into_iter()
                .map(|r| Pending::released(r, load.pipelines)),
        );
        sim.pass(now, &mut releases);
        let done = next_job == jobs.len() && releases.all_created() && sim.idle_of_jobs();
        if done && now >= until {
            break;
        }
        let mut next = now + TICK;
        for t in [
            jobs.get(next_job).map(|j| j.at),
            releases.next_creation(),
            sim.fleet.next_boot_end(),
            sim.running.iter().map(|r| r.end).min(),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(t);
        }
        if done {
            next = next.min(until);
        }
        now = next.max(now + 1);
    }
    sim.fleet.close(now);
    sim.tally.finish(&sim.fleet, now - start);
    sim.tally
}

#[derive(Debug)]
struct Running {
    end: Millis,
    machine: String,
    key: Option<JobKey>,
    label: Option<Label>,
}

struct Sim<'a> {
    pool: &'a SimPool,
    fleet: Fleet,
    gitlab: VecDeque<Pending>,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    demand: DemandTracker,
    pipelines: PipelineTracker,
    /// Whether `pipelines` is fed and its forecast used.
    learn_pipelines: bool,
    /// The run's pipelines, by index (a [`JobKey`]'s first half).
    drawn: &'a [Pipeline],
    throttle: TokenBucket,
    breaker: Breaker,
    tally: Tally,
    /// The run's first instant, for the trace's times.
    start: Millis,
}

impl<'a> Sim<'a> {
    fn new(pool: &'a SimPool, start: Millis, seed: u64, drawn: &'a [Pipeline]) -> Self {
        let cloud = &pool.cloud;
        Self {
            pool,
            fleet: Fleet::new(cloud.clone(), seed),
            gitlab: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            demand: DemandTracker::default(),
            pipelines: PipelineTracker::default(),
            learn_pipelines: true,
            drawn,
            throttle: TokenBucket::new(cloud.create_rate, cloud.create_burst, start),
            // As the service's provisioner breaker.
            breaker: Breaker::new(
                5,
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(600),
            ),
            tally: Tally::default(),
            start,
        }
    }

    fn idle_of_jobs(&self) -> bool {
        self.gitlab.is_empty() && self.waiting.is_empty() && self.running.is_empty()
    }

    fn pass(&mut self, now: Millis, releases: &mut Releases<'_>) {
        let (ready, failed) = self.fleet.finish_boots(now);
        for _ in 0..ready {
            self.breaker.success();
        }
        for _ in 0..failed {
            self.breaker.failure(now, "modelled creation failure");
        }
        self.end_jobs(now, releases);
        self.take_jobs(now);
        self.give_up_waiting(now);
        self.dispatch(now);
        self.scale(now);
    }

    /// Jobs that ended by `now` free their slots and release the pipeline jobs waiting for
    /// them, pending from the moment they ended.
    fn end_jobs(&mut self, now: Millis, releases: &mut Releases<'_>) {
        let (mut ended, running): (Vec<_>, Vec<_>) =
            self.running.drain(..).partition(|r| r.end <= now);
        self.running = running;
        ended.sort_by_key(|r| r.end);
        for r in ended {
            self.fleet.end_job(&r.machine, r.end);
            match r.label.as_ref().filter(|_| self.learn_pipelines) {
                Some(label) if label.failed => self.pipelines.job_failed(staged(label), r.end),
                Some(label) => self.pipelines.job_ended(staged(label), r.end),
                None => {}
            }
            let Some(key) = r.key else { continue };
            let released = releases.ended(key, r.end);
            let drawn = self.drawn;
            self.gitlab
                .extend(released.into_iter().map(|r| Pending::released(r, drawn)));
        }
    }

    /// The on-demand intake: jobs from GitLab while the pool has room for them.
    fn take_jobs(&mut self, now: Millis) {
        let s = &self.pool.scaling;
        let room = (s.max_machines * s.capacity_per_machine) as usize;
        while self.waiting.len() + self.running.len() < room {
            let queue_size = u32::try_from(self.gitlab.len()).unwrap_or(u32::MAX);
            let Some(job) = self.gitlab.pop_front() else {
                break;
            };
            self.record_arrival((job.label.as_ref(), job.key), now, queue_size);
            self.waiting.push_back(Waiting {
                arrived: job.arrived,
                taken: now,
                runs_for: job.runs_for,
                key: job.key,
                label: job.label,
            });
        }
    }

    /// What GitLab's pipeline schedules API would list at `now`: every scheduled pipeline's
    /// `next_run_at`, per project. (GitLab lists a schedule's next run only; the workloads'
    /// scheduled windows stand for one run of each of as many schedules.)
    fn list_schedules(&mut self, now: Millis) {
        let mut runs: BTreeMap<&str, Vec<Millis>> = BTreeMap::new();
        for p in self.drawn {
            if let Some(at) = p.scheduled_at {
                runs.entry(p.project.as_str()).or_default().push(at);
            }
        }
        for (project, runs) in runs {
            self.pipelines.schedules_listed(project, runs, now);
        }
    }

    /// A job taken from GitLab, for the demand tracker: one the pipeline forecast foresaw is
    /// no news to the arrivals' peak (the forecast already held slots for it), nor is a
    /// scheduled pipeline's job a scheduled run held for.
    fn record_arrival(
        &mut self,
        (label, key): (Option<&Label>, Option<JobKey>),
        now: Millis,
        queue_size: u32,
    ) {
        let mut foreseen =
            self.learn_pipelines && label.is_some_and(|l| self.pipelines.foresees(staged(l)));
        if let Some(label) = label.filter(|_| self.learn_pipelines) {
            let scheduled = key.is_some_and(|k| self.drawn[k.0].scheduled_at.is_some());
            if scheduled {
                let held =
                    self.pipelines
                        .scheduled_job_arrived(&label.project, label.pipeline, now);
                foreseen |= held;
            }
            self.pipelines.job_arrived(staged(label), now);
        }
        if foreseen {
            self.demand.foreseen_job_arrived(now, Some(queue_size));
        } else {
            self.demand.job_arrived(now, Some(queue_size));
        }
    }

    fn give_up_waiting(&mut self, now: Millis) {
        let limit =
            u64::try_from(self.pool.scaling.acquire_timeout.as_millis()).unwrap_or(u64::MAX);
        let before = self.waiting.len();
        let tally = &mut self.tally;
        self.waiting.retain(|w| {
            let expired = now - w.taken >= limit;
            if expired {
                tally.timed_out(now - w.arrived);
            }
            !expired
        });
        debug_assert!(self.waiting.len() <= before);
    }

    /// Waiting jobs, oldest first, to the busiest machine with a free slot.
    fn dispatch(&mut self, now: Millis) {
        let s = &self.pool.scaling;
        while !self.waiting.is_empty() {
            let free = self
                .fleet
                .machines
                .iter()
                .enumerate()
                .filter(|(_, m)| matches!(m.state, MachineState::Ready | MachineState::Busy))
                .filter(|(_, m)| m.running < s.capacity_per_machine)
                .filter(|(_, m)| s.max_use_count == 0 || m.use_count < s.max_use_count)
                .max_by_key(|(_, m)| m.running)
                .map(|(i, _)| i);
            let Some(index) = free else {
                break;
            };
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            self.fleet.start_job(index, now);
            self.tally.started(now - job.arrived);
            // As the service measures it: from the job's intake to its hand-out.
            self.demand.job_handed_out(now - job.taken, TICK);
            tracing::trace!(
                at_s = (now - self.start) as f64 / 1000.0,
                wait_s = (now - job.arrived) as f64 / 1000.0,
                machine.id = %self.fleet.machines[index].id,
                pipeline = job.label.as_ref().map(|l| l.pipeline),
                stage = job.label.as_ref().map(|l| l.stage.as_str()),
                "job started"
            );
            #[cfg(test)]
            self.tally.starts.push(super::report::Start {
                key: job.key,
                arrived: job.arrived,
                at: now,
            });
            if let Some(label) = job.label.as_ref().filter(|_| self.learn_pipelines) {
                self.pipelines.job_started(staged(label), now);
            }
            let id = self.fleet.machines[index].id.clone();
            self.running.push(Running {
                end: now + job.runs_for,
                machine: id,
                key: job.key,
                label: job.label,
            });
        }
    }
}
