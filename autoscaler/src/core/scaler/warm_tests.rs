//! The warm pool's decisions: start before create, stop instead of destroy below the target,
//! replacement of expired stopped machines, the bounds, and nothing of it by default.

use proptest::prelude::*;

use super::demand_tests::{DEMAND, forecast, ready, run};
use super::{MachineView, Reason, Retire, ScalePolicy, Strategy};
use crate::core::Millis;
use crate::core::demand::Forecast;
use crate::core::machine::MachineState as S;

const WARM: ScalePolicy = ScalePolicy {
    max_stopped: 5,
    ..DEMAND
};

fn stopped(id: &str, created_at: Millis) -> MachineView {
    MachineView {
        id: id.into(),
        state: S::Stopped,
        running_jobs: 0,
        use_count: 1,
        idle_since: created_at,
        created_at,
    }
}

fn with_window_peak(window_peak: u32) -> Forecast {
    Forecast {
        window_peak,
        ..forecast(0, 0)
    }
}

fn ids(list: &[Retire]) -> Vec<&str> {
    list.iter().map(|r| r.id.as_str()).collect()
}

#[test]
fn stopped_machines_start_before_new_ones_are_made() {
    let fleet = [stopped("s1", 0), stopped("s2", 10)];
    let plan = run(&fleet, 3, &WARM, with_window_peak(3), 1_000);
    assert_eq!(ids(&plan.start), ["s1", "s2"]);
    assert!(plan.start.iter().all(|r| r.reason == Reason::StartStopped));
    assert_eq!((plan.create, plan.reason), (1, Reason::WaitingJobs));
}

#[test]
fn starting_respects_max_machines() {
    let p = ScalePolicy {
        max_machines: 1,
        ..WARM
    };
    let fleet = [stopped("s1", 0), stopped("s2", 0)];
    let plan = run(&fleet, 3, &p, with_window_peak(3), 1_000);
    assert_eq!((plan.start.len(), plan.create), (1, 0));
}

#[test]
fn an_idle_machine_is_stopped_while_the_stopped_pool_is_below_its_target() {
    // The window saw 3 slots needed; nothing runs now: the target is 3 stopped machines.
    let fleet = [ready("a", 0, 0), ready("b", 0, 0), stopped("s", 0)];
    let plan = run(&fleet, 0, &WARM, with_window_peak(3), 120_000);
    assert_eq!(ids(&plan.stop), ["a", "b"]);
    assert!(plan.stop.iter().all(|r| r.reason == Reason::StopIdle));
    assert!(plan.destroy.is_empty());
}

#[test]
fn at_its_target_the_stopped_pool_takes_no_more_and_the_rest_are_destroyed() {
    let fleet = [ready("a", 0, 0), ready("b", 0, 0), stopped("s", 0)];
    let plan = run(&fleet, 0, &WARM, with_window_peak(2), 120_000);
    assert_eq!((plan.stop.len(), plan.destroy.len()), (1, 1));
    assert_eq!(plan.destroy[0].reason, Reason::DemandFell);
}

#[test]
fn the_excess_above_the_target_goes_oldest_first() {
    let fleet = [stopped("new", 50), stopped("old", 10), stopped("mid", 20)];
    let plan = run(&fleet, 0, &WARM, with_window_peak(1), 120_000);
    assert_eq!(ids(&plan.destroy), ["old", "mid"]);
    assert!(
        plan.destroy
            .iter()
            .all(|r| r.reason == Reason::StoppedTarget)
    );
}

#[test]
fn stopped_count_is_a_floor_and_max_stopped_a_ceiling() {
    let floor = ScalePolicy {
        stopped_count: 2,
        max_stopped: 2,
        ..DEMAND
    };
    assert_eq!(floor.stopped_target(&with_window_peak(0), 0), 2);
    assert_eq!(floor.stopped_target(&with_window_peak(50), 0), 2);
    assert_eq!(WARM.stopped_target(&with_window_peak(4), 1), 3);
    assert_eq!(WARM.stopped_target(&with_window_peak(4), 9), 0);
}

#[test]
fn expired_stopped_machines_are_replaced() {
    let p = ScalePolicy {
        max_age: 60_000,
        max_use_count: 3,
        ..WARM
    };
    let mut used_up = stopped("used", 100_000);
    used_up.use_count = 3;
    let fleet = [stopped("old", 0), used_up, stopped("fresh", 100_000)];
    let plan = run(&fleet, 1, &p, with_window_peak(3), 120_000);
    let expired: Vec<&str> = plan
        .destroy
        .iter()
        .filter(|r| r.reason == Reason::StoppedExpired)
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(expired, ["old", "used"]);
    // The waiting job starts the one stopped machine left, not an expired one.
    assert_eq!(ids(&plan.start), ["fresh"]);
}

/// With a start time measured, an idle machine the forecast does not need is stopped after
/// the stop grace, long before the surplus grace would let it go; without one, it idles on.
#[test]
fn an_idle_machine_is_stopped_after_the_stop_grace() {
    let fleet = [ready("a", 0, 0), ready("b", 1, 0)];
    let measured = Forecast {
        start_time: Some(15_000),
        stop_grace: Some(15_000),
        surplus_grace: 120_000,
        ..with_window_peak(2)
    };
    let plan = run(&fleet, 0, &WARM, measured, 20_000);
    assert_eq!(ids(&plan.stop), ["a"]);
    assert!(plan.destroy.is_empty());
    // Before the stop grace, or with no start measured, it stays.
    assert!(run(&fleet, 0, &WARM, measured, 10_000).stop.is_empty());
    let unmeasured = Forecast {
        surplus_grace: 120_000,
        ..with_window_peak(2)
    };
    assert!(run(&fleet, 0, &WARM, unmeasured, 20_000).stop.is_empty());
    // Without room in the stopped pool it is not destroyed before the surplus grace either.
    let full = Forecast {
        window_peak: 1,
        ..measured
    };
    let plan = run(&fleet, 0, &WARM, full, 20_000);
    assert!(plan.stop.is_empty() && plan.destroy.is_empty());
}

#[test]
fn no_start_while_the_provisioner_is_paused() {
    let fleet = [stopped("s", 0)];
    let plan = super::plan(&super::PlanInput {
        machines: &fleet,
        waiting_jobs: 1,
        policy: &WARM,
        provisioner_paused: true,
        forecast: with_window_peak(1),
        now: 1_000,
    });
    assert!(plan.start.is_empty());
    assert_eq!(plan.reason, Reason::ProvisionerPaused);
}

proptest! {
    /// Without a warm pool (the default) the planner never stops a machine, whatever the fleet
    /// and the demand, and starts one only if stopped ones are left over (from a warm pool
    /// since switched off); with one, it never stops a busy machine nor keeps more stopped
    /// than `max_stopped`.
    #[test]
    fn the_warm_pool_stays_within_its_settings(
        fleet in proptest::collection::vec((0u32..3, 0u64..600_000, any::<bool>()), 0..12),
        waiting in 0u32..6,
        window_peak in 0u32..20,
        max_stopped in 0u32..4,
        idle in any::<bool>(),
    ) {
        let machines: Vec<MachineView> = fleet
            .iter()
            .enumerate()
            .map(|(i, &(running, idle_since, is_stopped))| {
                if is_stopped {
                    stopped(&format!("m{i}"), idle_since)
                } else {
                    ready(&format!("m{i}"), running, idle_since)
                }
            })
            .collect();
        let strategy = if idle { Strategy::Idle } else { Strategy::Demand };
        let p = ScalePolicy { max_stopped, strategy, ..DEMAND };
        let plan = run(&machines, waiting, &p, with_window_peak(window_peak), 900_000);
        if max_stopped == 0 {
            prop_assert!(plan.stop.is_empty());
        }
        if !fleet.iter().any(|&(_, _, is_stopped)| is_stopped) {
            prop_assert!(plan.start.is_empty());
        }
        for r in &plan.stop {
            let m = machines.iter().find(|m| m.id == r.id).unwrap();
            prop_assert!(m.state == S::Ready && m.running_jobs == 0);
        }
        let gone = |id: &str| plan.destroy.iter().chain(&plan.start).any(|r| r.id == id);
        let kept = machines.iter().filter(|m| m.state.is_stopped() && !gone(&m.id)).count()
            + plan.stop.len();
        let before = machines.iter().filter(|m| m.state.is_stopped()).count();
        prop_assert!(kept <= (max_stopped as usize).max(before));
    }
}

/// The buffer on its own: an idle pool with `stopped` stopped machines and a measured start
/// time of `start` (lead time 60 s; a 10 s target).
fn buffer_with(stopped: u32, start: Option<Millis>) -> u32 {
    let samples: Vec<(u32, u64)> = (1..=20).map(|rise| (rise, 600_000)).collect();
    let f = Forecast {
        rises: crate::core::demand::Rises::from_samples(&samples, 600_000),
        start_time: start,
        stopped_slots: stopped,
        ..forecast(0, 0)
    };
    f.buffer(10_000)
}

#[test]
fn stopped_machines_stand_in_for_part_of_the_buffer() {
    let cold = buffer_with(0, Some(15_000));
    // Under a 15 s start a 10 s target lets a third of the jobs wait: far fewer slots held.
    let warm_floor = buffer_with(1_000, Some(15_000));
    assert!(warm_floor < cold, "{warm_floor} < {cold}");
    // Each stopped slot replaces a running one, down to that floor.
    assert_eq!(buffer_with(2, Some(15_000)), (cold - 2).max(warm_floor));
    // No start measured yet, or none stopped: the cold buffer.
    assert_eq!(buffer_with(5, None), cold);
    assert_eq!(buffer_with(0, Some(15_000)), cold);
}

/// A pool with `stopped` stopped machines, five jobs of a pipeline's next stage foreseen, and a
/// stopped machine's start measured at 15 s (lead time 60 s).
fn foreseen_five(stopped_machines: &[MachineView]) -> Forecast {
    Forecast {
        pipeline_jobs: 5,
        start_time: Some(15_000),
        window_peak: 5,
        ..forecast(0, 0)
    }
    .with_stopped(stopped_machines.len())
}

trait WithStopped {
    fn with_stopped(self, n: usize) -> Self;
}

impl WithStopped for Forecast {
    fn with_stopped(self, n: usize) -> Self {
        Forecast {
            stopped_slots: u32::try_from(n).unwrap(),
            ..self
        }
    }
}

#[test]
fn foreseen_jobs_that_stopped_machines_serve_within_the_target_hold_no_machine_ahead() {
    let f = foreseen_five(&[]).with_stopped(3);
    // A 30 s target lets a foreseen job wait a 15 s start: the 3 stopped machines serve 3.
    assert_eq!(f.foreseen_jobs(30_000), 2);
    assert_eq!(f.with_stopped(8).foreseen_jobs(30_000), 0);
    // A 10 s target under the 15 s start lets 15 % of the foreseen jobs wait a start
    // (0.05 / (1 - 10/15)): of 20, 3 are left to stopped machines, none of 5.
    let twenty = Forecast {
        pipeline_jobs: 20,
        ..f.with_stopped(20)
    };
    assert_eq!(twenty.foreseen_jobs(10_000), 17);
    assert_eq!(f.foreseen_jobs(10_000), 5);
    // No start measured yet: the same.
    let unmeasured = Forecast {
        start_time: None,
        ..f
    };
    assert_eq!(unmeasured.foreseen_jobs(30_000), 5);
    // A target of a lead time or more holds none, warm pool or not.
    assert_eq!(f.foreseen_jobs(60_000), 0);
}

#[test]
fn a_stage_the_stopped_pool_covers_starts_nothing_before_its_jobs_are_pending() {
    let fleet: Vec<MachineView> = (0..5).map(|i| stopped(&format!("s{i}"), i)).collect();
    let plan = run(&fleet, 0, &WARM, foreseen_five(&fleet), 1_000);
    assert!(plan.start.is_empty() && plan.create == 0, "{plan:?}");
    // The stage's five jobs are pending: five stopped machines start, none is made.
    let plan = run(&fleet, 5, &WARM, foreseen_five(&fleet), 2_000);
    assert_eq!((plan.start.len(), plan.create), (5, 0));
}

#[test]
fn a_stage_the_stopped_pool_does_not_cover_is_held_ready_stopped_machines_first() {
    // Two stopped machines for five foreseen jobs: the stage is held running, as without a
    // warm pool, the stopped machines started first (a start is cheaper than a boot).
    let fleet = [stopped("s1", 0), stopped("s2", 10)];
    let plan = run(&fleet, 0, &WARM, foreseen_five(&fleet), 1_000);
    assert_eq!(ids(&plan.start), ["s1", "s2"]);
    assert_eq!(plan.create, 1);
    // The next pass: three on their way, none stopped: two more are made for the five.
    let coming = |id: &str, state| MachineView {
        state,
        ..stopped(id, 0)
    };
    let fleet = [
        coming("s1", S::Starting),
        coming("s2", S::Starting),
        coming("n1", S::Creating),
    ];
    let plan = run(&fleet, 0, &WARM, foreseen_five(&[]), 2_000);
    assert_eq!((plan.start.len(), plan.create), (0, 2));
}

/// A warm pool with prices: a stopped machine's disk an eighth of the machine's price, and a
/// start that saves 75 s of machine time over a boot, so a stopped machine pays for itself
/// over 600 s unused.
const PRICED: ScalePolicy = ScalePolicy {
    stopped_price_share: Some(0.125),
    ..WARM
};

fn saving_75s() -> Forecast {
    Forecast {
        start_saving: 75_000,
        ..forecast(0, 0)
    }
}

#[test]
fn priced_a_stopped_machine_is_kept_while_it_pays_whatever_the_window_saw() {
    assert_eq!(PRICED.stopped_keep(&saving_75s()), Some(600_000));
    assert_eq!(WARM.stopped_keep(&saving_75s()), None);
    // Nothing was needed in the window, yet the idle machine is stopped, not destroyed.
    let plan = run(&[ready("a", 0, 0)], 0, &PRICED, saving_75s(), 120_000);
    assert_eq!(ids(&plan.stop), ["a"]);
    // Stopped since 0: kept until it has been unused for 600 s, then destroyed.
    let fleet = [stopped("s", 0)];
    assert!(
        run(&fleet, 0, &PRICED, saving_75s(), 599_000)
            .destroy
            .is_empty()
    );
    let plan = run(&fleet, 0, &PRICED, saving_75s(), 600_000);
    assert_eq!(ids(&plan.destroy), ["s"]);
    assert_eq!(plan.destroy[0].reason, Reason::StoppedUnused);
}

#[test]
fn priced_unused_machines_go_oldest_first_down_to_stopped_count() {
    let p = ScalePolicy {
        stopped_count: 1,
        ..PRICED
    };
    let fleet = [stopped("new", 30), stopped("old", 10), stopped("mid", 20)];
    let plan = run(&fleet, 0, &p, saving_75s(), 3_600_000);
    assert_eq!(ids(&plan.destroy), ["old", "mid"]);
}

#[test]
fn a_free_disk_is_kept_however_long_unused_and_a_costly_one_briefly() {
    let free = ScalePolicy {
        stopped_price_share: Some(0.0),
        ..PRICED
    };
    let plan = run(&[stopped("s", 0)], 0, &free, saving_75s(), 86_400_000);
    assert!(plan.destroy.is_empty());
    let full = ScalePolicy {
        stopped_price_share: Some(1.0),
        ..PRICED
    };
    assert_eq!(full.stopped_keep(&saving_75s()), Some(75_000));
}
