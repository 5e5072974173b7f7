//! How many machines a pool needs, decided, with a reason code for every decision.
//!
//! Keep enough free job slots for the jobs that wait plus the idle target, up to
//! `max_machines`. The idle target is taskscaler's: `idle_count` free slots, raised to
//! `scale_factor` times the slots in use (or the running jobs only, `scale_factor_counts`) when
//! that is more, but never above `scale_factor_limit`. Remove machines idle past `idle_time`
//! that the target does not need; retire machines that ran `max_use_count` jobs or are older
//! than `max_age` (drained first when busy, so that their jobs finish; their slots no longer
//! count, so replacements are made).
//! A machine running a job is never destroyed, and nothing is created while the pool's
//! provisioner is paused.
//!
//! Under the demand-aware strategy (`core::demand`) the free slots held are the fewest that keep
//! the recent jobs' p95 wait within `target_wait` (never fewer than the idle target above), or
//! the jobs pipelines in flight will soon make pending (`core::pipelines`) when more, plus
//! GitLab's reported queue; an idle machine the forecast does not need goes once it has idled
//! as long as a new machine takes to make (at most `idle_time`). With a `billing_period`, such
//! a machine is kept until the end of the period already paid for.
//!
//! A warm pool (`stopped_count`, `max_stopped`; off by default) keeps stopped machines, which
//! cost only their disk and start in a fraction of a boot: see [`warm`] for its rules.

use serde::{Deserialize, Serialize};

pub use self::reason::Reason;
use self::release::{Grace, reclaim_idle, retirements};
use self::wanted::Wanted;
use super::Millis;
use super::demand::{self, Forecast};
use super::machine::MachineState;

/// The longest time between two planner passes, in the service's pool controller and in the
/// simulator alike: a machine the planner would ask for now may be asked for up to this much
/// later, and an idle machine goes up to this much after it may.
pub const PASS_INTERVAL: Millis = 1_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineView {
    pub id: String,
    pub state: MachineState,
    /// Jobs handed to it and not finished.
    pub running_jobs: u32,
    /// Jobs handed to it so far.
    pub use_count: u32,
    /// Since when it has had no job (or since it became ready).
    pub idle_since: Millis,
    /// When it was requested.
    pub created_at: Millis,
}

/// The scaling settings in force (the pool's, or a `[[pools.policy]]` entry's idle settings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalePolicy {
    pub max_machines: u32,
    pub capacity_per_machine: u32,
    pub idle_count: u32,
    pub idle_time: Millis,
    /// 0 is unlimited.
    pub max_use_count: u32,
    /// 0 is unlimited.
    pub max_age: Millis,
    pub scale_factor: f64,
    /// 0 is no limit.
    pub scale_factor_limit: u32,
    /// Which jobs `scale_factor` multiplies.
    pub scale_factor_counts: ScaleFactorCounts,
    pub strategy: Strategy,
    /// Machines are paid for by this period from their creation (0: by the second).
    pub billing_period: Millis,
    /// Demand-aware: the p95 wait asked for; the free slots held are the fewest that keep the
    /// recent jobs' waits within it (`core::demand`).
    pub target_wait: Millis,
    /// Warm pool: stopped machines to keep at least, whatever the demand (0: as demand says).
    pub stopped_count: u32,
    /// Warm pool: stopped machines to keep at most. With `stopped_count` also 0, no machine is
    /// ever stopped (the default).
    pub max_stopped: u32,
    /// Warm pool: what a stopped machine costs per hour as a share of a running one (its
    /// disk's price over the machine's), when the operator gave both prices: the planner then
    /// keeps each stopped machine for as long as it pays (`warm`); `None`: for the window.
    pub stopped_price_share: Option<f64>,
}

/// How the free capacity a pool holds is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Taskscaler's: the idle target (`idle_count`, `scale_factor`), kept for `idle_time`.
    #[default]
    Idle,
    /// Ahead of demand, from recent arrivals, GitLab's queue and the measured lead time.
    Demand,
}

/// Which jobs `scale_factor` multiplies. Taskscaler's documentation says "in-use capacity"
/// and leaves open whether a job still waiting for a machine is in use; both readings are
/// offered, so that a migrated pool (and the simulator's taskscaler baseline) can take either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleFactorCounts {
    /// Jobs running and jobs the pool holds waiting for a machine (every slot in use).
    #[default]
    RunningAndWaiting,
    /// Jobs running on machines only.
    Running,
}

impl ScaleFactorCounts {
    /// The slots `scale_factor` multiplies, of `in_use` slots of which `waiting` wait.
    pub fn slots(self, in_use: u32, waiting: u32) -> u32 {
        match self {
            ScaleFactorCounts::RunningAndWaiting => in_use,
            ScaleFactorCounts::Running => in_use.saturating_sub(waiting),
        }
    }
}

/// A machine to drain, destroy, stop or start, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retire {
    pub id: String,
    pub reason: Reason,
    /// The figures behind the reason, for the log.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePlan {
    pub create: u32,
    /// Why `create` is what it is.
    pub reason: Reason,
    /// Stop giving these jobs; destroy them once their jobs end.
    pub drain: Vec<Retire>,
    /// Destroy these now (they run nothing).
    pub destroy: Vec<Retire>,
    /// Warm pool: start these stopped machines (before any is created).
    pub start: Vec<Retire>,
    /// Warm pool: stop these idle machines instead of destroying them.
    pub stop: Vec<Retire>,
    /// The figures behind the decision, for logs and the admin view.
    pub summary: String,
}

/// What the planner looks at.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    pub machines: &'a [MachineView],
    /// Jobs the pool holds that no machine has taken yet.
    pub waiting_jobs: u32,
    pub policy: &'a ScalePolicy,
    /// The provisioner's circuit breaker is open: no creation can succeed now.
    pub provisioner_paused: bool,
    /// The pool's demand, for the demand-aware strategy (ignored by the idle one).
    pub forecast: Forecast,
    pub now: Millis,
}

impl ScalePolicy {
    /// Jobs `m` can still take.
    fn free_slots(&self, m: &MachineView) -> u32 {
        let by_capacity = self.capacity_per_machine.saturating_sub(m.running_jobs);
        if self.max_use_count == 0 {
            by_capacity
        } else {
            by_capacity.min(self.max_use_count.saturating_sub(m.use_count))
        }
    }

    /// Jobs a new machine will take.
    fn slots_per_new_machine(&self) -> u32 {
        let per = if self.max_use_count == 0 {
            self.capacity_per_machine
        } else {
            self.capacity_per_machine.min(self.max_use_count)
        };
        per.max(1)
    }

    /// Why `m` should leave service, if it should.
    fn retirement(&self, m: &MachineView, now: Millis) -> Option<(Reason, String)> {
        if self.max_use_count > 0 && m.use_count >= self.max_use_count {
            let detail = format!(
                "ran {} jobs (max_use_count {})",
                m.use_count, self.max_use_count
            );
            return Some((Reason::MaxUse, detail));
        }
        let age = now.saturating_sub(m.created_at);
        if self.max_age > 0 && age >= self.max_age {
            let detail = format!("{} s old (max_age {} s)", age / 1000, self.max_age / 1000);
            return Some((Reason::MaxAge, detail));
        }
        None
    }

    /// Free slots to keep beyond the waiting jobs, given the slots in use.
    pub fn idle_target(&self, in_use: u32) -> u32 {
        if self.scale_factor <= 0.0 {
            return self.idle_count;
        }
        let scaled = (self.scale_factor * f64::from(in_use)).ceil();
        let limit = if self.scale_factor_limit == 0 {
            f64::from(u32::MAX)
        } else {
            f64::from(self.scale_factor_limit)
        };
        // Bounded to [0, u32::MAX] before the conversion.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let scaled = scaled.min(limit).max(0.0) as u32;
        scaled.max(self.idle_count)
    }
}

/// The pool's next moves.
pub fn plan(input: &PlanInput<'_>) -> ScalePlan {
    let PlanInput {
        machines,
        waiting_jobs,
        policy: p,
        provisioner_paused,
        forecast,
        now,
    } = *input;
    let (drain, mut destroy) = retirements(machines, p, now);
    destroy.extend(warm::expired(machines, p, now));
    let retiring = |id: &str| destroy.iter().chain(&drain).any(|r| r.id == id);
    let counted = machines
        .iter()
        .filter(|m| m.state.counts_toward_max())
        .count() as u32;
    let serving: Vec<&MachineView> = machines
        .iter()
        .filter(|m| (m.state.is_starting() || m.state.takes_jobs()) && !retiring(&m.id))
        .collect();
    let free: u32 = serving
        .iter()
        .map(|m| {
            if m.state.is_starting() {
                p.slots_per_new_machine()
            } else {
                p.free_slots(m)
            }
        })
        .sum();
    let in_use: u32 = machines.iter().map(|m| m.running_jobs).sum::<u32>() + waiting_jobs;
    // The stopped machines stand in for part of the buffer (`Forecast::buffer`).
    let stopped = machines
        .iter()
        .filter(|m| m.state == MachineState::Stopped && !retiring(&m.id))
        .count() as u32;
    let forecast = Forecast {
        stopped_slots: stopped.saturating_mul(p.slots_per_new_machine()),
        ..forecast
    };
    let wanted = Wanted::new(p, &forecast, waiting_jobs, in_use);
    let wanted_free = wanted.total();
    let mut plan = ScalePlan {
        create: 0,
        reason: Reason::Steady,
        drain,
        destroy,
        start: Vec::new(),
        stop: Vec::new(),
        summary: format!(
            "{waiting_jobs} jobs waiting, {in_use} slots in use, {} free slots wanted, {free} free",
            wanted_free.saturating_sub(waiting_jobs)
        ),
    };
    if p.strategy == Strategy::Demand {
        plan.summary.push_str(&format!(
            " (buffer {} for a p95 of {} s in a lead time of {} s, pipelines {}, GitLab queue {})",
            forecast.buffer(p.target_wait),
            p.target_wait / 1000,
            forecast.lead_time / 1000,
            forecast.pipeline_jobs,
            forecast.queued()
        ));
    }
    if free < wanted_free {
        let machines_needed = (wanted_free - free).div_ceil(p.slots_per_new_machine());
        let room = p.max_machines.saturating_sub(counted);
        plan.reason = wanted.shortfall_reason(free);
        if provisioner_paused {
            plan.reason = Reason::ProvisionerPaused;
        } else {
            let started = warm::start_stopped(&mut plan, machines, machines_needed.min(room));
            plan.create = (machines_needed - started).min(room - started);
        }
        plan.summary.push_str(&format!(
            ": {machines_needed} machines needed, room for {room}"
        ));
        return plan;
    }
    // The free slots to keep once `stopped` more slots are stopped this pass (a stopped
    // machine stands in for part of the buffer, `Forecast::buffer`). Demand-aware: slots needed
    // (in use plus the buffer) at any time during the grace are kept too, so that demand or a
    // buffer that rises and falls within it releases no machine to remake. (Demand that swings
    // by a slot more slowly than that is followed: a machine per swing.) The grace is the
    // surplus one, or the shorter one of a machine stopped rather than destroyed.
    let keeps = |stopped: u32, grace: Grace| -> u32 {
        let f = Forecast {
            stopped_slots: forecast.stopped_slots.saturating_add(stopped),
            need_peak: match grace {
                Grace::Surplus => forecast.need_peak,
                Grace::Stop => forecast.stop_need_peak,
            },
            ..forecast
        };
        let wanted = Wanted::new(p, &f, waiting_jobs, in_use).total();
        let recently_needed = match p.strategy {
            Strategy::Idle => 0,
            Strategy::Demand => f.recent_need(p.target_wait).saturating_sub(
                in_use.saturating_add(demand::wanted_free_slots(&f, p.target_wait)),
            ),
        };
        // While jobs are rare, the next stages due within the grace keep their machines.
        let kept_for_pipelines = waiting_jobs.saturating_add(f.pipeline_keep);
        wanted
            .saturating_add(recently_needed)
            .max(kept_for_pipelines)
    };
    let mut room = warm::StopRoom::new(input, &serving, &plan);
    reclaim_idle(
        &mut plan,
        &serving,
        p,
        &forecast,
        now,
        (free, &keeps, &mut room),
    );
    let released = |id: &str| plan.stop.iter().chain(&plan.destroy).any(|r| r.id == id);
    let running_slots: u32 = serving
        .iter()
        .filter(|m| !released(&m.id))
        .map(|m| p.free_slots(m) + m.running_jobs)
        .sum();
    warm::trim_to_target(&mut plan, (machines, p, &forecast), running_slots, now);
    plan
}

mod reason;
mod release;
mod wanted;
pub mod warm;

#[cfg(test)]
mod demand_props;
#[cfg(test)]
mod demand_tests;
#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod target_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod warm_tests;
