//! One pool through a workload in virtual time. Each pass does what the service's pool
//! controller does (the same planner, demand tracker, schedule, throttle and breaker from
//! `core`), with the provider, GitLab's queue and the sidecars modelled:
//!
//! - Jobs reach GitLab at their workload time. The pool takes them at once while it has room
//!   for them (`max_machines` × `capacity_per_machine` jobs active, as the service's on-demand
//!   intake); each taken job's payload reports GitLab's queue size then.
//! - A waiting job goes to the busiest machine with a free slot the moment there is one (the
//!   service's packing); it waits no longer than `acquire_timeout`.
//! - A created machine takes jobs after its boot time, or fails then (`failure_rate`); a
//!   destroyed machine is gone at once.
//! - A pass runs at every event (arrival, boot end, job end) and at least every [`TICK`].

use std::collections::VecDeque;

use super::fleet::Fleet;
use super::policy::SimPool;
use super::report::Tally;
use super::workload::Job;
use crate::core::Millis;
use crate::core::breaker::Breaker;
use crate::core::demand::DemandTracker;
use crate::core::machine::MachineState;
use crate::core::scaler::{self, PlanInput};
use crate::core::schedule;
use crate::core::throttle::TokenBucket;

/// The longest time between two passes, as the service's controller ticks.
pub const TICK: Millis = 5_000;

#[derive(Debug)]
struct Waiting {
    arrived: Millis,
    taken: Millis,
    runs_for: Millis,
}

/// Simulates `pool` serving `jobs` (sorted by arrival) from `start`; `until` is the end of the
/// workload (the run goes on until every job is done).
pub fn run(pool: &SimPool, jobs: &[Job], start: Millis, until: Millis, seed: u64) -> Tally {
    let mut sim = Sim::new(pool, start, seed);
    let mut next_job = 0;
    let mut now = start;
    loop {
        while next_job < jobs.len() && jobs[next_job].at <= now {
            sim.gitlab
                .push_back((jobs[next_job].at, jobs[next_job].runs_for));
            next_job += 1;
        }
        sim.pass(now);
        let done = next_job == jobs.len() && sim.idle_of_jobs();
        if done && now >= until {
            break;
        }
        let mut next = now + TICK;
        if let Some(job) = jobs.get(next_job) {
            next = next.min(job.at);
        }
        for t in [
            sim.fleet.next_boot_end(),
            sim.running.iter().map(|r| r.0).min(),
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

struct Sim<'a> {
    pool: &'a SimPool,
    fleet: Fleet,
    /// Jobs at GitLab not yet taken: (arrived, runs for).
    gitlab: VecDeque<(Millis, Millis)>,
    waiting: VecDeque<Waiting>,
    /// (ends at, machine id).
    running: Vec<(Millis, String)>,
    demand: DemandTracker,
    throttle: TokenBucket,
    breaker: Breaker,
    tally: Tally,
}

impl<'a> Sim<'a> {
    fn new(pool: &'a SimPool, start: Millis, seed: u64) -> Self {
        let cloud = &pool.cloud;
        Self {
            pool,
            fleet: Fleet::new(cloud.clone(), seed),
            gitlab: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            demand: DemandTracker::default(),
            throttle: TokenBucket::new(cloud.create_rate, cloud.create_burst, start),
            // As the service's provisioner breaker.
            breaker: Breaker::new(
                5,
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(600),
            ),
            tally: Tally::default(),
        }
    }

    fn idle_of_jobs(&self) -> bool {
        self.gitlab.is_empty() && self.waiting.is_empty() && self.running.is_empty()
    }

    fn pass(&mut self, now: Millis) {
        let (ready, failed) = self.fleet.finish_boots(now);
        for _ in 0..ready {
            self.breaker.success();
        }
        for _ in 0..failed {
            self.breaker.failure(now, "modelled creation failure");
        }
        self.end_jobs(now);
        self.take_jobs(now);
        self.give_up_waiting(now);
        self.dispatch(now);
        self.scale(now);
    }

    fn end_jobs(&mut self, now: Millis) {
        let (ended, running): (Vec<_>, Vec<_>) =
            self.running.drain(..).partition(|(end, _)| *end <= now);
        self.running = running;
        for (end, id) in ended {
            self.fleet.end_job(&id, end);
        }
    }

    /// The on-demand intake: jobs from GitLab while the pool has room for them.
    fn take_jobs(&mut self, now: Millis) {
        let s = &self.pool.scaling;
        let room = (s.max_machines * s.capacity_per_machine) as usize;
        while self.waiting.len() + self.running.len() < room {
            let queue_size = u32::try_from(self.gitlab.len()).unwrap_or(u32::MAX);
            let Some((arrived, runs_for)) = self.gitlab.pop_front() else {
                break;
            };
            self.demand.job_arrived(now, Some(queue_size));
            self.waiting.push_back(Waiting {
                arrived,
                taken: now,
                runs_for,
            });
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
            let id = self.fleet.machines[index].id.clone();
            self.running.push((now + job.runs_for, id));
        }
    }

    /// The planner's pass, carried out as the service's controller does.
    fn scale(&mut self, now: Millis) {
        let base = self.pool.scaling.scale_policy();
        let (policy, _) = schedule::policy_in_force(base, &self.pool.policies, now);
        let views: Vec<_> = self.fleet.machines.iter().map(|m| m.view()).collect();
        let waiting = u32::try_from(self.waiting.len()).unwrap_or(u32::MAX);
        let states = views
            .iter()
            .map(|m| (m.id.as_str(), m.created_at, m.state.takes_jobs()));
        self.demand.observe_machines(states, now);
        let in_use = views.iter().map(|m| m.running_jobs).sum::<u32>() + waiting;
        self.demand.observe_in_use(in_use);
        let plan = scaler::plan(&PlanInput {
            machines: &views,
            waiting_jobs: waiting,
            policy: &policy,
            provisioner_paused: !self.breaker.allows(now),
            forecast: self.demand.forecast(now, policy.idle_time),
            now,
        });
        for r in &plan.drain {
            self.fleet.drain(&r.id);
        }
        for r in &plan.destroy {
            self.fleet.remove(&r.id, now);
        }
        if plan.create > 0 && self.breaker.allows(now) {
            for _ in 0..self.throttle.take(plan.create, now) {
                self.fleet.create(now);
            }
        }
    }
}
