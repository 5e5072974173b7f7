//! The sizing rule of `target_wait` (`core::demand`'s rises) through the planner: a stricter
//! target never holds fewer free slots, and the planner's bounds hold whatever the target.

use proptest::prelude::*;

use super::demand_props::fleet;
use super::demand_tests::DEMAND;
use super::{PlanInput, ScalePlan, ScalePolicy, plan};
use crate::core::Millis;
use crate::core::demand::{Forecast, Rises, WaitHistory, wanted_free_slots};
use crate::core::machine::MachineState as S;

/// A forecast whose buffer comes from the rises `samples` met, as the tracker makes it, and
/// whose share of waiting jobs from the hand-outs `waited` after their jobs came (the uniform
/// rule while too few found no free slot).
fn forecast(
    samples: &[(u32, u64)],
    lead_time: Millis,
    pipeline_jobs: u32,
    waited: &[Millis],
) -> Forecast {
    let mut waits = WaitHistory::default();
    for &wait in waited {
        waits.handed_out(wait, 1_000);
    }
    Forecast {
        rises: Rises::from_samples(samples, 600_000),
        gitlab_backlog: 0,
        pipeline_jobs,
        pipeline_released: 0,
        jobs_rare: false,
        pipeline_keep: 0,
        lead_time,
        lead_spread: 0,
        boots: crate::core::pipelines::BootTimes::flat(lead_time),
        surplus_grace: 2 * lead_time,
        need_peak: Rises::default(),
        stop_grace: None,
        stop_need_peak: Rises::default(),
        window_peak: 0,
        start_time: None,
        stopped_slots: 0,
        start_saving: 0,
        waits: waits.current(),
    }
}

fn samples() -> impl Strategy<Value = Vec<(u32, u64)>> {
    proptest::collection::vec((0u32..40, 1u64..600_000), 0..200)
}

/// Hand-outs' waits: none, too few, or enough to be believed, within a pass or up to a boot.
fn waited() -> impl Strategy<Value = Vec<Millis>> {
    proptest::collection::vec(0u64..150_000, 0..40)
}

fn planned(input: (&[super::MachineView], u32, &ScalePolicy, Forecast, bool)) -> ScalePlan {
    let (machines, waiting, policy, forecast, paused) = input;
    plan(&PlanInput {
        machines,
        waiting_jobs: waiting,
        policy,
        provisioner_paused: paused,
        forecast,
        now: 1_000_000,
    })
}

/// Free slots the plan leaves the pool with, counting those it makes and those it starts.
fn slots_after(machines: &[super::MachineView], plan: &ScalePlan, p: &ScalePolicy) -> u32 {
    let released = |id: &str| plan.destroy.iter().chain(&plan.stop).any(|r| r.id == id);
    let kept: u32 = machines
        .iter()
        .filter(|m| m.state.is_starting() || m.state.takes_jobs())
        .filter(|m| !released(&m.id))
        .map(|m| p.capacity_per_machine.saturating_sub(m.running_jobs))
        .sum();
    kept + plan.create * p.capacity_per_machine
}

proptest! {
    /// A smaller target never asks for fewer free slots, in the forecast and in the plan.
    #[test]
    fn a_stricter_target_never_holds_fewer_slots(
        samples in samples(), lead_s in 10u64..120, pipeline_jobs in 0u32..20,
        strict_s in 0u64..150, loose_extra_s in 0u64..150,
        machines in fleet(), waiting in 0u32..10, waited in waited(),
    ) {
        let f = forecast(&samples, lead_s * 1_000, pipeline_jobs, &waited);
        let (strict, loose) = (strict_s * 1_000, (strict_s + loose_extra_s) * 1_000);
        prop_assert!(wanted_free_slots(&f, strict) >= wanted_free_slots(&f, loose));
        let p_strict = ScalePolicy { target_wait: strict, max_machines: 1_000, ..DEMAND };
        let p_loose = ScalePolicy { target_wait: loose, ..p_strict };
        let a = planned((&machines, waiting, &p_strict, f, false));
        let b = planned((&machines, waiting, &p_loose, f, false));
        prop_assert!(
            slots_after(&machines, &a, &p_strict) >= slots_after(&machines, &b, &p_loose),
            "strict {:?} loose {:?}", a, b
        );
    }

    /// Whatever the target and the rises: never beyond `max_machines`, nothing made while the
    /// provisioner is paused, never a busy machine destroyed.
    #[test]
    fn the_target_keeps_the_planner_bounds(
        samples in samples(), lead_s in 10u64..120, target_s in 0u64..150,
        machines in fleet(), waiting in 0u32..10, max_machines in 1u32..12,
        capacity in 1u32..4, paused in any::<bool>(), waited in waited(),
    ) {
        let p = ScalePolicy {
            target_wait: target_s * 1_000, max_machines, capacity_per_machine: capacity, ..DEMAND
        };
        let plan = planned((&machines, waiting, &p, forecast(&samples, lead_s * 1_000, 0, &waited), paused));
        let counted = machines.iter().filter(|m| m.state.counts_toward_max()).count() as u32;
        prop_assert!(counted + plan.create <= max_machines.max(counted));
        if paused {
            prop_assert_eq!(plan.create, 0);
            prop_assert!(plan.start.is_empty());
        }
        for r in &plan.destroy {
            let m = machines.iter().find(|m| m.id == r.id).unwrap();
            prop_assert!(m.running_jobs == 0 || m.state == S::Draining, "{:?}", m);
        }
    }
}
