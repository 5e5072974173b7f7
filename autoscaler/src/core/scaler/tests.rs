use super::Strategy;
use super::*;
use crate::core::demand::Forecast;
use MachineState as S;
use proptest::prelude::*;
use proptest::strategy::Strategy as PropStrategy;

const P: ScalePolicy = ScalePolicy {
    max_machines: 5,
    capacity_per_machine: 2,
    idle_count: 0,
    idle_time: 60_000,
    max_use_count: 0,
    max_age: 0,
    scale_factor: 0.0,
    scale_factor_limit: 0,
    scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
    strategy: Strategy::Idle,
    billing_period: 0,
    target_wait: 30_000,
    stopped_count: 0,
    max_stopped: 0,
    stopped_price_share: None,
};

fn m(id: &str, state: MachineState, running: u32, uses: u32, idle_since: Millis) -> MachineView {
    MachineView {
        id: id.into(),
        state,
        running_jobs: running,
        use_count: uses,
        idle_since,
        created_at: 0,
    }
}

fn run(
    machines: &[MachineView],
    waiting_jobs: u32,
    now: Millis,
    policy: &ScalePolicy,
) -> ScalePlan {
    plan(&PlanInput {
        machines,
        waiting_jobs,
        policy,
        provisioner_paused: false,
        forecast: Forecast::default(),
        now,
    })
}

fn ids(list: &[Retire]) -> Vec<&str> {
    list.iter().map(|r| r.id.as_str()).collect()
}

#[test]
fn waiting_jobs_get_machines_up_to_the_maximum() {
    let plan = run(&[], 3, 0, &P);
    assert_eq!((plan.create, plan.reason), (2, Reason::WaitingJobs));
    assert_eq!(run(&[], 30, 0, &P).create, 5);
    let busy = [m("a", S::Busy, 2, 2, 0), m("b", S::Creating, 0, 0, 0)];
    // b will bring 2 slots: 3 waiting need one more machine.
    assert_eq!(run(&busy, 3, 0, &P).create, 1);
    let full: Vec<_> = (0..5)
        .map(|i| m(&i.to_string(), S::Busy, 2, 2, 0))
        .collect();
    assert_eq!(run(&full, 10, 0, &P).create, 0);
}

#[test]
fn idle_count_is_kept_in_slots() {
    let p = ScalePolicy { idle_count: 3, ..P };
    let plan = run(&[], 0, 0, &p);
    assert_eq!((plan.create, plan.reason), (2, Reason::IdleTarget));
    let ready = [m("a", S::Ready, 0, 0, 0), m("b", S::Ready, 1, 1, 0)];
    assert_eq!(run(&ready, 0, 0, &p).create, 0);
    // An idle machine that is needed for idle_count is kept however long it idles.
    assert!(run(&ready, 0, 1_000_000, &p).destroy.is_empty());
}

#[test]
fn scale_factor_raises_the_idle_target_within_its_limit() {
    let p = ScalePolicy {
        idle_count: 1,
        scale_factor: 0.5,
        scale_factor_limit: 3,
        max_machines: 100,
        ..P
    };
    assert_eq!(p.idle_target(0), 1, "idle_count is the floor");
    assert_eq!(p.idle_target(4), 2);
    assert_eq!(p.idle_target(40), 3, "scale_factor_limit is the ceiling");
    // 8 busy slots (4 machines full): 3 idle slots wanted, 2 machines more.
    let busy: Vec<_> = (0..4)
        .map(|i| m(&i.to_string(), S::Busy, 2, 2, 0))
        .collect();
    let plan = run(&busy, 0, 0, &p);
    assert_eq!((plan.create, plan.reason), (2, Reason::IdleTarget));
}

/// Taskscaler's two readings of "in-use capacity": with jobs waiting for a machine, the factor
/// over running and waiting jobs asks for more idle slots than the factor over running ones.
#[test]
fn scale_factor_counts_waiting_jobs_only_when_told_to() {
    let p = ScalePolicy {
        scale_factor: 1.0,
        max_machines: 100,
        capacity_per_machine: 1,
        ..P
    };
    // Two machines run a job each; four jobs wait for a machine.
    let busy = [m("a", S::Busy, 1, 1, 0), m("b", S::Busy, 1, 1, 0)];
    let all = run(&busy, 4, 0, &p);
    assert_eq!(
        (all.create, all.reason),
        (10, Reason::IdleTarget),
        "4 waiting + 6 idle"
    );
    let running = ScalePolicy {
        scale_factor_counts: ScaleFactorCounts::Running,
        ..p
    };
    let plan = run(&busy, 4, 0, &running);
    assert_eq!(
        (plan.create, plan.reason),
        (6, Reason::WaitingJobs),
        "4 waiting + 2 idle"
    );
}

#[test]
fn idle_machines_go_after_idle_time_and_busy_ones_never() {
    let ms = [
        m("a", S::Ready, 0, 1, 0),
        m("b", S::Ready, 0, 1, 50_000),
        m("c", S::Busy, 1, 1, 0),
    ];
    assert!(run(&ms, 0, 59_999, &P).destroy.is_empty());
    let at_60 = run(&ms, 0, 60_000, &P);
    assert_eq!(ids(&at_60.destroy), ["a"]);
    assert_eq!(at_60.destroy[0].reason, Reason::IdleTimeout);
    assert_eq!(ids(&run(&ms, 0, 200_000, &P).destroy), ["a", "b"]);
    // c's free slot takes one waiting job; a second keeps one idle machine.
    assert_eq!(run(&ms, 1, 200_000, &P).destroy.len(), 2);
    assert_eq!(run(&ms, 2, 200_000, &P).destroy.len(), 1);
}

#[test]
fn used_up_machines_are_retired_when_idle_and_drained_when_busy() {
    let p = ScalePolicy {
        max_use_count: 2,
        ..P
    };
    let ms = [
        m("a", S::Ready, 0, 2, 0),
        m("b", S::Busy, 1, 2, 0),
        m("c", S::Draining, 0, 2, 0),
    ];
    let plan = run(&ms, 0, 0, &p);
    assert_eq!(ids(&plan.destroy), ["a", "c"]);
    assert_eq!(plan.destroy[0].reason, Reason::MaxUse);
    assert_eq!(plan.destroy[1].reason, Reason::Drained);
    assert_eq!(ids(&plan.drain), ["b"]);
}

#[test]
fn old_machines_are_replaced_and_drained_when_busy() {
    let p = ScalePolicy {
        max_age: 3_600_000,
        idle_count: 2,
        ..P
    };
    let mut old_idle = m("old-idle", S::Ready, 0, 3, 0);
    let mut old_busy = m("old-busy", S::Busy, 1, 3, 0);
    old_idle.created_at = 0;
    old_busy.created_at = 0;
    let plan = run(&[old_idle, old_busy], 0, 3_600_000, &p);
    assert_eq!(ids(&plan.destroy), ["old-idle"]);
    assert_eq!(ids(&plan.drain), ["old-busy"]);
    assert!(
        plan.destroy
            .iter()
            .chain(&plan.drain)
            .all(|r| r.reason == Reason::MaxAge)
    );
    assert_eq!(plan.create, 1, "replacement for the idle target");
}

#[test]
fn used_up_machines_do_not_count_as_capacity() {
    let p = ScalePolicy {
        max_use_count: 1,
        capacity_per_machine: 3,
        ..P
    };
    let ms = [m("a", S::Ready, 0, 1, 0)];
    // 2 waiting jobs, max one job per machine: two new machines.
    assert_eq!(run(&ms, 2, 0, &p).create, 2);
}

#[test]
fn machines_being_destroyed_count_toward_the_maximum() {
    let ms: Vec<_> = (0..5)
        .map(|i| m(&i.to_string(), S::Destroying, 0, 0, 0))
        .collect();
    assert_eq!(run(&ms, 4, 0, &P).create, 0);
}

#[test]
fn nothing_is_created_while_the_provisioner_is_paused() {
    let plan = plan(&PlanInput {
        machines: &[],
        waiting_jobs: 4,
        policy: &P,
        provisioner_paused: true,
        forecast: Forecast::default(),
        now: 0,
    });
    assert_eq!((plan.create, plan.reason), (0, Reason::ProvisionerPaused));
}

#[test]
fn with_no_demand_a_multi_slot_pool_reaches_zero_after_idle_time() {
    let p = ScalePolicy {
        capacity_per_machine: 4,
        ..P
    };
    let ms = [m("a", S::Ready, 0, 7, 0), m("b", S::Ready, 0, 2, 10_000)];
    let plan = run(&ms, 0, 70_000, &p);
    assert_eq!(plan.create, 0);
    assert_eq!(ids(&plan.destroy), ["a", "b"]);
}

fn state() -> impl PropStrategy<Value = MachineState> {
    prop_oneof![
        Just(S::Requested),
        Just(S::Creating),
        Just(S::Booting),
        Just(S::Injecting),
        Just(S::Ready),
        Just(S::Busy),
        Just(S::Draining),
        Just(S::Destroying),
    ]
}

fn fleet() -> impl PropStrategy<Value = Vec<MachineView>> {
    proptest::collection::vec(
        (state(), 0u32..4, 0u32..6, 0u64..200_000, 0u64..200_000),
        0..12,
    )
    .prop_map(|machines| {
        machines
            .into_iter()
            .enumerate()
            .map(
                |(i, (state, running, uses, idle_since, created_at))| MachineView {
                    id: format!("m{i}"),
                    state,
                    running_jobs: if state.takes_jobs() || state == S::Draining {
                        running
                    } else {
                        0
                    },
                    use_count: uses,
                    idle_since,
                    created_at,
                },
            )
            .collect()
    })
}

fn policy() -> impl PropStrategy<Value = ScalePolicy> {
    (
        1u32..8,
        1u32..4,
        0u32..6,
        0u32..4,
        0u64..2,
        0u32..3,
        0u32..8,
    )
        .prop_map(
            |(max_machines, capacity, idle_count, max_use, aged, factor, limit)| ScalePolicy {
                max_machines,
                capacity_per_machine: capacity,
                idle_count,
                idle_time: 60_000,
                max_use_count: max_use,
                max_age: aged * 150_000,
                scale_factor: f64::from(factor) * 0.5,
                scale_factor_limit: limit,
                scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
                strategy: Strategy::Idle,
                billing_period: 0,
                target_wait: 30_000,
                stopped_count: 0,
                max_stopped: 0,
                stopped_price_share: None,
            },
        )
}

proptest! {
    /// Whatever the fleet and the policy: no busy machine is destroyed, the maximum is never
    /// exceeded, and nothing is created while the provisioner is paused.
    #[test]
    fn the_plan_keeps_the_invariants(
        machines in fleet(), policy in policy(), waiting in 0u32..20,
        paused in any::<bool>(), now in 0u64..400_000,
    ) {
        let plan = plan(&PlanInput { machines: &machines, waiting_jobs: waiting, policy: &policy, provisioner_paused: paused, forecast: Forecast::default(), now });
        for retired in &plan.destroy {
            let m = machines.iter().find(|m| m.id == retired.id).unwrap();
            prop_assert_eq!(m.running_jobs, 0, "destroyed a busy machine: {:?}", m);
        }
        let counted = machines.iter().filter(|m| m.state.counts_toward_max()).count() as u32;
        prop_assert!(counted + plan.create <= policy.max_machines.max(counted));
        if paused {
            prop_assert_eq!(plan.create, 0);
        }
    }

    /// Under steady demand the fleet settles: once the machines it asked for are ready and
    /// the jobs run, the next pass neither creates nor destroys (no churn).
    #[test]
    fn steady_demand_settles_without_churn(policy in policy(), running in 0u32..10) {
        let policy = ScalePolicy { max_use_count: 0, max_age: 0, ..policy };
        let mut machines: Vec<MachineView> = Vec::new();
        let mut waiting = running;
        for pass in 0..6u64 {
            let now = pass * 1_000;
            let plan = plan(&PlanInput { machines: &machines, waiting_jobs: waiting, policy: &policy, provisioner_paused: false, forecast: Forecast::default(), now });
            if pass == 5 {
                prop_assert_eq!(plan.create, 0);
                prop_assert!(plan.destroy.is_empty() && plan.drain.is_empty());
            }
            for i in 0..plan.create {
                machines.push(MachineView {
                    id: format!("p{pass}-{i}"), state: S::Ready, running_jobs: 0,
                    use_count: 0, idle_since: now, created_at: now,
                });
            }
            // Waiting jobs take free slots.
            for m in machines.iter_mut() {
                while waiting > 0 && m.running_jobs < policy.capacity_per_machine {
                    m.running_jobs += 1;
                    m.use_count += 1;
                    m.state = S::Busy;
                    waiting -= 1;
                }
            }
        }
    }
}
