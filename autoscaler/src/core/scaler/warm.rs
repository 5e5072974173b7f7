//! The warm pool: stopped machines that keep their disk, cost only it, and take jobs a start
//! time after they are asked to (a fraction of a boot). Off unless the pool's policy sets
//! `stopped_count` or `max_stopped`; then:
//!
//! - **Target, priced.** With both prices given (`stopped_price_share`), a stopped machine is
//!   kept for as long as it pays, the rent-or-buy rule one tier down: each time it serves in
//!   place of a new machine it saves `Forecast::start_saving` of machine time, and stopped it
//!   costs its share of a running machine's time. So every idle machine the forecast does not
//!   need is stopped (up to `max_stopped`), and a stopped machine unused for the saving over
//!   the share is destroyed (down to `stopped_count`): never more than twice what knowing
//!   when it would be needed again would cost.
//! - **Target, unpriced.** A stopped machine costs a fraction of an idle one, so it is worth
//!   keeping for the whole window the forecast remembers, not only the grace an idle one gets:
//!   the pool keeps stopped the machines that the window's peak of needed slots
//!   (`window_peak`) asked for beyond what the machines that run now give, at least
//!   `stopped_count`, at most `max_stopped` (or `stopped_count` when that is more).
//! - **Start before create.** Free slots short: stopped machines are started first, and only
//!   the rest are made.
//! - **A smaller running buffer.** The stopped machines' slots stand in for part of the
//!   demand-aware buffer, down to what the target asks for a wait of a start time
//!   (`Forecast::buffer`).
//! - **Stop instead of destroy.** An idle machine the policy would release is stopped while the
//!   stopped pool is below its target (one past `max_age` or `max_use_count` never reaches the
//!   idle reclaim: it is retired). Demand-aware, with a start time measured, it is stopped
//!   after the stop grace (`Forecast::stop_grace`, the surplus grace's rule priced with a start
//!   in place of a boot), long before it would be destroyed.
//! - **Replace.** A stopped machine older than `max_age` (counted from its creation) or past
//!   `max_use_count` is destroyed, as is the excess above the target, oldest first.

use super::{MachineView, PlanInput, Reason, Retire, ScalePlan, ScalePolicy};
use crate::core::Millis;
use crate::core::demand::Forecast;
use crate::core::machine::MachineState;

impl ScalePolicy {
    /// Whether the pool keeps stopped machines at all.
    pub fn has_warm_pool(&self) -> bool {
        self.stopped_count > 0 || self.max_stopped > 0
    }

    fn stopped_cap(&self) -> u32 {
        self.max_stopped.max(self.stopped_count)
    }

    /// Stopped machines to keep when the machines that run give `running_slots` job slots.
    /// Priced, as many as `max_stopped` allows: each goes once it no longer pays
    /// ([`Self::stopped_keep`]).
    pub fn stopped_target(&self, forecast: &Forecast, running_slots: u32) -> u32 {
        if !self.has_warm_pool() {
            return 0;
        }
        if self.stopped_price_share.is_some() {
            return self.stopped_cap();
        }
        let beyond = forecast.window_peak.saturating_sub(running_slots);
        beyond
            .div_ceil(self.slots_per_new_machine())
            .max(self.stopped_count)
            .min(self.stopped_cap())
    }

    /// Priced: how long a stopped machine is kept unused (since its last job) before keeping
    /// it costs more than it may save: the saving of one start over a boot, over the stopped
    /// share of a running machine's price (for ever when the disk is free). `None` unpriced.
    pub fn stopped_keep(&self, forecast: &Forecast) -> Option<Millis> {
        let share = self.stopped_price_share?;
        if share <= 0.0 {
            return Some(Millis::MAX);
        }
        Some((forecast.start_saving as f64 / share).min(Millis::MAX as f64) as Millis)
    }
}

/// Stopped machines past `max_age` or `max_use_count`: destroyed, to be replaced.
pub(super) fn expired(machines: &[MachineView], p: &ScalePolicy, now: Millis) -> Vec<Retire> {
    machines
        .iter()
        .filter(|m| m.state == MachineState::Stopped)
        .filter_map(|m| {
            let (_, detail) = p.retirement(m, now)?;
            Some(Retire {
                id: m.id.clone(),
                reason: Reason::StoppedExpired,
                detail,
            })
        })
        .collect()
}

/// Stopped machines that may be started: stopped, and not being destroyed, oldest first (the
/// nearest `max_age` is used while it can be).
fn startable<'a>(machines: &'a [MachineView], plan: &ScalePlan) -> Vec<&'a MachineView> {
    let mut stopped: Vec<&MachineView> = machines
        .iter()
        .filter(|m| m.state == MachineState::Stopped)
        .filter(|m| !plan.destroy.iter().any(|r| r.id == m.id))
        .collect();
    stopped.sort_by_key(|m| m.created_at);
    stopped
}

/// Starts up to `wanted` stopped machines for a shortfall; returns how many.
pub(super) fn start_stopped(plan: &mut ScalePlan, machines: &[MachineView], wanted: u32) -> u32 {
    let chosen: Vec<Retire> = startable(machines, plan)
        .into_iter()
        .take(wanted as usize)
        .map(|m| Retire {
            id: m.id.clone(),
            reason: Reason::StartStopped,
            detail: "stopped: starts in a fraction of a boot".into(),
        })
        .collect();
    let started = u32::try_from(chosen.len()).unwrap_or(u32::MAX);
    plan.start.extend(chosen);
    started
}

/// Stopped machines kept now (stopping or stopped, not being destroyed or started).
fn stopped_pool(machines: &[&MachineView], plan: &ScalePlan) -> u32 {
    let acted = |id: &str| plan.destroy.iter().chain(&plan.start).any(|r| r.id == id);
    let kept = machines
        .iter()
        .filter(|m| m.state.is_stopped() && !acted(&m.id))
        .count();
    u32::try_from(kept).unwrap_or(u32::MAX)
}

/// The stopped pool's room as idle machines are released this pass: each released machine's
/// slots leave the running fleet, which raises the target by as much.
pub(super) struct StopRoom<'a> {
    policy: &'a ScalePolicy,
    forecast: &'a Forecast,
    /// Slots of the machines that run, less those released so far this pass.
    running_slots: u32,
    /// Stopped machines kept, with those stopped so far this pass.
    pool: u32,
}

impl<'a> StopRoom<'a> {
    pub(super) fn new(
        input: &'a PlanInput<'_>,
        serving: &[&MachineView],
        plan: &ScalePlan,
    ) -> Self {
        let p = input.policy;
        let running_slots = serving
            .iter()
            .map(|m| p.free_slots(m) + m.running_jobs)
            .sum();
        let all: Vec<&MachineView> = input.machines.iter().collect();
        Self {
            policy: p,
            forecast: &input.forecast,
            running_slots,
            pool: stopped_pool(&all, plan),
        }
    }

    /// Whether an idle machine with `slots`, were it released, would go to the stopped pool.
    pub(super) fn would_stop(&self, slots: u32) -> bool {
        let running = self.running_slots.saturating_sub(slots);
        self.pool < self.policy.stopped_target(self.forecast, running)
    }

    /// An idle machine with `slots` is released: whether it goes to the stopped pool.
    pub(super) fn stops(&mut self, slots: u32) -> bool {
        let stops = self.would_stop(slots);
        self.running_slots = self.running_slots.saturating_sub(slots);
        self.pool += u32::from(stops);
        stops
    }
}

/// The decision to stop idle `m`.
pub(super) fn stop(m: &MachineView, now: Millis) -> Retire {
    Retire {
        id: m.id.clone(),
        reason: Reason::StopIdle,
        detail: format!(
            "idle for {} s; the stopped pool is below its target",
            now.saturating_sub(m.idle_since) / 1000
        ),
    }
}

/// Destroys stopped machines above the target, oldest first; priced, then those kept unused
/// for longer than they pay, oldest first, down to `stopped_count`.
pub(super) fn trim_to_target(
    plan: &mut ScalePlan,
    (machines, p, forecast): (&[MachineView], &ScalePolicy, &Forecast),
    running_slots: u32,
    now: Millis,
) {
    let all: Vec<&MachineView> = machines.iter().collect();
    let kept = stopped_pool(&all, plan) + u32::try_from(plan.stop.len()).unwrap_or(u32::MAX);
    let target = p.stopped_target(forecast, running_slots);
    let excess = kept.saturating_sub(target);
    let chosen: Vec<Retire> = startable(machines, plan)
        .into_iter()
        .take(excess as usize)
        .map(|m| Retire {
            id: m.id.clone(),
            reason: Reason::StoppedTarget,
            detail: format!("{kept} stopped, target {target}"),
        })
        .collect();
    plan.destroy.extend(chosen);
    let Some(keep) = p.stopped_keep(forecast) else {
        return;
    };
    let above_floor = kept.saturating_sub(excess).saturating_sub(p.stopped_count);
    let unused: Vec<Retire> = startable(machines, plan)
        .into_iter()
        .filter(|m| now.saturating_sub(m.idle_since) >= keep)
        .take(above_floor as usize)
        .map(|m| Retire {
            id: m.id.clone(),
            reason: Reason::StoppedUnused,
            detail: format!(
                "unused for {} s; kept longer, its disk would cost more than a start saves \
                 (after {} s)",
                now.saturating_sub(m.idle_since) / 1000,
                keep / 1000
            ),
        })
        .collect();
    plan.destroy.extend(unused);
}
