//! What a pass gives up: machines retired (used up or too old) and idle machines the pool no
//! longer needs, each with its reason.

use super::{MachineView, Reason, Retire, ScalePlan, ScalePolicy, Strategy, warm};
use crate::core::Millis;
use crate::core::demand::{self, Forecast};
use crate::core::machine::MachineState;

/// Machines used up or too old: destroyed when idle (or drained and idle), drained when busy.
pub(super) fn retirements(
    machines: &[MachineView],
    p: &ScalePolicy,
    now: Millis,
) -> (Vec<Retire>, Vec<Retire>) {
    let (mut drain, mut destroy) = (Vec::new(), Vec::new());
    for m in machines {
        let idle = m.running_jobs == 0;
        if m.state.takes_jobs()
            && let Some((reason, detail)) = p.retirement(m, now)
        {
            let retire = Retire {
                id: m.id.clone(),
                reason,
                detail,
            };
            if idle {
                destroy.push(retire);
            } else {
                drain.push(retire);
            }
        } else if m.state == MachineState::Draining && idle {
            destroy.push(Retire {
                id: m.id.clone(),
                reason: Reason::Drained,
                detail: "drained".into(),
            });
        }
    }
    (drain, destroy)
}

/// Which grace an idle machine's release is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grace {
    /// The surplus grace (or `idle_time`): the machine may be destroyed.
    Surplus,
    /// The warm pool's shorter stop grace (`Forecast::stop_grace`): it may only be stopped.
    Stop,
}

/// Idle reclaim: the longest-idle first, while the rest still covers what is wanted
/// (`keeps`: the free slots to keep with that many slots stopped this pass, judged over
/// which grace). An idle machine is surplus after `idle_time` (idle strategy) or after the
/// demand-aware grace; with a billing period it then waits for the end of the period it is
/// paid for. While the warm pool has room (`room`), such a machine is stopped instead of
/// destroyed, and it may be stopped already after the stop grace: a stopped machine is back
/// in a start time, so keeping it idle pays off for a start time's worth, not a boot's.
pub(super) fn reclaim_idle(
    plan: &mut ScalePlan,
    serving: &[&MachineView],
    p: &ScalePolicy,
    forecast: &Forecast,
    now: Millis,
    (free, keeps, room): (u32, &dyn Fn(u32, Grace) -> u32, &mut warm::StopRoom<'_>),
) {
    let (grace, reason) = match p.strategy {
        Strategy::Idle => (p.idle_time, Reason::IdleTimeout),
        Strategy::Demand => (forecast.release_grace(), Reason::DemandFell),
    };
    let stop_grace = match (p.strategy, forecast.stop_grace) {
        (Strategy::Demand, Some(stop)) => stop.min(grace),
        _ => grace,
    };
    let reason = if p.billing_period > 0 {
        Reason::BillingPeriodEnd
    } else {
        reason
    };
    let mut idle: Vec<&&MachineView> = serving
        .iter()
        .filter(|m| m.state == MachineState::Ready && m.running_jobs == 0)
        .filter(|m| now.saturating_sub(m.idle_since) >= stop_grace)
        .filter(|m| demand::near_period_end(m.created_at, p.billing_period, now))
        .collect();
    idle.sort_by_key(|m| m.idle_since);
    let (mut released, mut stopped) = (0u32, 0u32);
    for m in idle {
        let slots = p.free_slots(m);
        let Some(left) = free.checked_sub(released.saturating_add(slots)) else {
            break;
        };
        let stoppable = room.would_stop(slots);
        let fits = |stop: bool, grace: Grace| {
            left >= keeps(stopped.saturating_add(if stop { slots } else { 0 }), grace)
        };
        let past_grace = now.saturating_sub(m.idle_since) >= grace;
        let release = (past_grace && fits(stoppable, Grace::Surplus))
            || (stoppable && fits(true, Grace::Stop));
        if !release {
            continue;
        }
        released += slots;
        if room.stops(slots) {
            plan.stop.push(warm::stop(m, now));
            stopped += slots;
            continue;
        }
        plan.destroy.push(Retire {
            id: m.id.clone(),
            reason,
            detail: format!(
                "idle for {} s (after {} s an idle machine not needed goes)",
                now.saturating_sub(m.idle_since) / 1000,
                grace / 1000
            ),
        });
    }
}
