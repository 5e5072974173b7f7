//! The planner under the demand-aware strategy: table-driven cases with their reason codes,
//! and vanishing demand (the properties over random fleets and steady demand are in
//! `demand_props`).

use super::{
    MachineView, PlanInput, Reason, ScaleFactorCounts, ScalePlan, ScalePolicy, Strategy, plan,
};
use crate::core::Millis;
use crate::core::demand::{DemandTracker, Forecast};
use crate::core::machine::MachineState as S;

pub(super) const DEMAND: ScalePolicy = ScalePolicy {
    max_machines: 20,
    capacity_per_machine: 1,
    idle_count: 0,
    idle_time: 600_000,
    max_use_count: 0,
    max_age: 0,
    scale_factor: 0.0,
    scale_factor_limit: 0,
    scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
    strategy: Strategy::Demand,
    billing_period: 0,
    target_wait: 30_000,
    stopped_count: 0,
    max_stopped: 0,
    stopped_price_share: None,
};

pub(super) fn forecast(peak: u32, backlog: u32) -> Forecast {
    Forecast {
        rises: crate::core::demand::Rises::flat(peak),
        gitlab_backlog: backlog,
        pipeline_jobs: 0,
        pipeline_released: 0,
        jobs_rare: false,
        pipeline_keep: 0,
        lead_time: 60_000,
        lead_spread: 0,
        boots: crate::core::pipelines::BootTimes::flat(60_000),
        surplus_grace: 60_000,
        need_peak: crate::core::demand::Rises::default(),
        stop_grace: None,
        stop_need_peak: crate::core::demand::Rises::default(),
        window_peak: 0,
        start_time: None,
        stopped_slots: 0,
        start_saving: 0,
        waits: crate::core::demand::Waits::default(),
    }
}

pub(super) fn ready(id: &str, running: u32, idle_since: Millis) -> MachineView {
    MachineView {
        id: id.into(),
        state: if running > 0 { S::Busy } else { S::Ready },
        running_jobs: running,
        use_count: 1,
        idle_since,
        created_at: 0,
    }
}

pub(super) fn run(
    machines: &[MachineView],
    waiting: u32,
    p: &ScalePolicy,
    f: Forecast,
    now: Millis,
) -> ScalePlan {
    plan(&PlanInput {
        machines,
        waiting_jobs: waiting,
        policy: p,
        provisioner_paused: false,
        forecast: f,
        now,
    })
}

#[test]
fn machines_are_made_ahead_of_demand_with_the_reason() {
    let busy = [ready("a", 1, 0), ready("b", 0, 0)];
    let floor = ScalePolicy {
        idle_count: 3,
        ..DEMAND
    };
    let capped = ScalePolicy {
        max_machines: 4,
        ..DEMAND
    };
    // (policy, waiting jobs, forecast, machines created, reason)
    let cases = [
        (DEMAND, 0, forecast(0, 0), 0, Reason::Steady),
        (DEMAND, 0, forecast(1, 0), 0, Reason::Steady),
        (DEMAND, 3, forecast(0, 0), 2, Reason::WaitingJobs),
        (DEMAND, 0, forecast(4, 0), 3, Reason::DemandForecast),
        (DEMAND, 0, forecast(1, 5), 5, Reason::GitlabQueue),
        (floor, 0, forecast(1, 0), 2, Reason::IdleTarget),
        // GitLab's queue asks for 9 of the 17 slots short, the buffer for 8.
        (capped, 0, forecast(9, 9), 2, Reason::GitlabQueue),
    ];
    for (i, (p, waiting, f, create, reason)) in cases.into_iter().enumerate() {
        let plan = run(&busy, waiting, &p, f, 0);
        assert_eq!(
            (plan.create, plan.reason),
            (create, reason),
            "case {i}: {plan:?}"
        );
    }
}

#[test]
fn the_idle_strategy_ignores_the_forecast() {
    let idle = ScalePolicy {
        strategy: Strategy::Idle,
        ..DEMAND
    };
    assert_eq!(run(&[], 0, &idle, forecast(5, 5), 0).create, 0);
}

/// While jobs are rare an idle machine nothing needs goes at the first pass rather than after
/// the grace; one that a next stage due within the grace needs is kept, and one that the
/// buffer needs stays as ever.
#[test]
fn while_jobs_are_rare_an_idle_machine_goes_at_once_unless_a_stage_due_keeps_it() {
    let fleet = [
        ready("a", 0, 100_000),
        ready("b", 0, 100_001),
        ready("busy", 1, 0),
    ];
    let within_grace = 101_000;
    let usual = run(&fleet, 0, &DEMAND, forecast(0, 0), within_grace);
    assert!(usual.destroy.is_empty(), "within the grace");
    let rare = Forecast {
        jobs_rare: true,
        ..forecast(0, 0)
    };
    let gone = run(&fleet, 0, &DEMAND, rare, within_grace).destroy;
    assert_eq!(gone.len(), 2);
    assert!(gone.iter().all(|r| r.reason == Reason::DemandFell));
    let stage_due = Forecast {
        pipeline_keep: 1,
        ..rare
    };
    let gone = run(&fleet, 0, &DEMAND, stage_due, within_grace).destroy;
    assert_eq!(gone.len(), 1, "one kept for the stage due");
    assert_eq!(gone[0].id, "a", "the longer idle goes");
    let buffered = Forecast {
        jobs_rare: true,
        ..forecast(1, 0)
    };
    assert_eq!(
        run(&fleet, 0, &DEMAND, buffered, within_grace)
            .destroy
            .len(),
        1,
        "the buffer's slot stays"
    );
}

#[test]
fn an_idle_machine_the_forecast_does_not_need_goes_after_the_lead_time() {
    let fleet = [
        ready("old", 0, 0),
        ready("new", 0, 30_000),
        ready("busy", 1, 0),
    ];
    // One free slot is forecast: the longest idle machine goes first, the other is kept.
    let early = run(&fleet, 0, &DEMAND, forecast(1, 0), 59_999);
    assert!(early.destroy.is_empty(), "not before the lead time");
    let later = run(&fleet, 0, &DEMAND, forecast(1, 0), 200_000);
    let gone: Vec<(&str, Reason)> = later
        .destroy
        .iter()
        .map(|r| (r.id.as_str(), r.reason))
        .collect();
    assert_eq!(gone, [("old", Reason::DemandFell)]);
    // No demand: both idle machines go, never the busy one.
    let quiet = run(&fleet, 0, &DEMAND, forecast(0, 0), 200_000);
    assert_eq!(quiet.destroy.len(), 2);
    assert!(quiet.destroy.iter().all(|r| r.id != "busy"));
    // Slots needed a moment ago are kept (the busy machine and one more were needed).
    let recent = Forecast {
        need_peak: crate::core::demand::Rises::flat(2),
        ..forecast(0, 0)
    };
    assert_eq!(run(&fleet, 0, &DEMAND, recent, 200_000).destroy.len(), 1);
}

/// A stage whose jobs ended has released the next one in GitLab: until its jobs reach the
/// pool, the idle machines they need stay. They are in GitLab's queue, so a queue report that
/// counts them too adds nothing.
#[test]
fn idle_machines_stay_for_a_released_stage_on_its_way() {
    let fleet = [ready("a", 0, 0), ready("b", 0, 0), ready("busy", 1, 0)];
    let released = |jobs, backlog| Forecast {
        pipeline_released: jobs,
        ..forecast(0, backlog)
    };
    assert_eq!(
        run(&fleet, 0, &DEMAND, released(0, 0), 200_000)
            .destroy
            .len(),
        2
    );
    let held = run(&fleet, 0, &DEMAND, released(2, 0), 200_000);
    assert!(held.destroy.is_empty() && held.create == 0, "{held:?}");
    let one = run(&fleet, 0, &DEMAND, released(1, 0), 200_000);
    assert_eq!(one.destroy.len(), 1, "{one:?}");
    // GitLab reported the same two jobs queued: the larger counts, not the sum.
    let both = run(&fleet, 0, &DEMAND, released(2, 2), 200_000);
    assert!(both.destroy.is_empty() && both.create == 0, "{both:?}");
    let more = run(&fleet, 0, &DEMAND, released(2, 3), 200_000);
    assert_eq!((more.create, more.reason), (1, Reason::GitlabQueue));
}

#[test]
fn with_a_billing_period_an_idle_machine_goes_at_the_end_of_what_is_paid() {
    let hourly = ScalePolicy {
        billing_period: 3_600_000,
        ..DEMAND
    };
    let fleet = [ready("a", 0, 60_000)];
    assert!(
        run(&fleet, 0, &hourly, forecast(0, 0), 30 * 60_000)
            .destroy
            .is_empty()
    );
    let end = run(&fleet, 0, &hourly, forecast(0, 0), 58 * 60_000);
    assert_eq!(end.destroy.len(), 1);
    assert_eq!(end.destroy[0].reason, Reason::BillingPeriodEnd);
    assert!(
        run(&fleet, 0, &hourly, forecast(0, 0), 61 * 60_000)
            .destroy
            .is_empty()
    );
}

/// No demand: a pool with several slots per machine, left with idle machines (say by a
/// period's `idle_count`), reaches zero machines within `idle_time` and creates nothing on the
/// way (so nothing it then destroys unused).
#[test]
fn with_demand_at_zero_a_multi_slot_pool_reaches_zero_and_creates_nothing() {
    let p = ScalePolicy {
        capacity_per_machine: 4,
        ..DEMAND
    };
    let mut tracker = DemandTracker::default();
    let mut fleet: Vec<MachineView> = (0..5)
        .map(|i| ready(&format!("m{i}"), 0, 120_000))
        .collect();
    let mut now = 120_000;
    while now <= 120_000 + p.idle_time {
        let plan = run(
            &fleet,
            0,
            &p,
            tracker.forecast(now, p.idle_time, p.target_wait),
            now,
        );
        assert_eq!(plan.create, 0, "created with no demand at {now}: {plan:?}");
        fleet.retain(|m| plan.destroy.iter().all(|r| r.id != m.id));
        now += 1_000;
    }
    assert!(fleet.is_empty(), "left: {fleet:?}");
    // And a pool that starts empty never makes a machine.
    assert_eq!(
        run(
            &[],
            0,
            &p,
            tracker.forecast(now, p.idle_time, p.target_wait),
            now
        )
        .create,
        0
    );
}
