use super::*;

const POLICY: Policy = Policy {
    boot_timeout: 600_000,
    ready_timeout: 300_000,
    list_grace: 60_000,
    orphans: OrphanPolicy::Destroy,
};

fn known(
    id: &str,
    state: MachineState,
    provider_id: Option<&str>,
    created_at: Millis,
    since: Millis,
) -> Known {
    Known {
        id: id.into(),
        state,
        provider_id: provider_id.map(str::to_string),
        created_at,
        since,
        next_attempt: 0,
        changed_after_list: false,
        create_interrupted: false,
    }
}

fn listed(provider_id: &str, state: ProviderState, key: Option<&str>) -> Listed {
    Listed {
        provider_id: provider_id.into(),
        state,
        key: key.map(str::to_string),
    }
}

fn event(machine: &str, e: MachineEvent) -> impl Fn(&Action) -> bool + '_ {
    move |a| matches!(a, Action::Event { machine: m, event, .. } if m == machine && *event == e)
}

#[test]
fn machines_in_order_need_nothing() {
    let k = [known("m1", MachineState::Ready, Some("p1"), 0, 0)];
    let l = [listed("p1", ProviderState::Running, Some("m1"))];
    assert!(plan(&k, &l, 1_000_000, &POLICY).is_empty());
}

#[test]
fn a_machine_the_provider_lost_is_gone_after_the_grace() {
    let k = [known("m1", MachineState::Busy, Some("p1"), 0, 0)];
    assert!(
        plan(&k, &[], 30_000, &POLICY).is_empty(),
        "within the list grace"
    );
    let actions = plan(&k, &[], 60_000, &POLICY);
    assert!(
        actions.iter().any(event("m1", MachineEvent::ProviderGone)),
        "{actions:?}"
    );
    let gone = [listed("p1", ProviderState::Gone, None)];
    assert!(
        plan(&k, &gone, 1, &POLICY)
            .iter()
            .any(event("m1", MachineEvent::ProviderGone))
    );
}

#[test]
fn a_lost_create_is_found_again_by_its_key() {
    let k = [known("m1", MachineState::Requested, None, 0, 0)];
    let l = [listed("p9", ProviderState::Creating, Some("m1"))];
    assert_eq!(
        plan(&k, &l, 700_000, &POLICY),
        vec![Action::Bind {
            machine: "m1".into(),
            provider_id: "p9".into()
        }]
    );
}

#[test]
fn a_create_that_never_produced_anything_is_given_up() {
    let k = [known("m1", MachineState::Requested, None, 0, 0)];
    assert!(plan(&k, &[], 599_999, &POLICY).is_empty());
    assert!(
        plan(&k, &[], 600_000, &POLICY)
            .iter()
            .any(event("m1", MachineEvent::ProviderGone))
    );
}

#[test]
fn a_create_cut_short_by_a_restart_is_settled_by_the_first_list() {
    let mut interrupted = known("m1", MachineState::Requested, None, 0, 0);
    interrupted.create_interrupted = true;
    // Listed by its key: the create did its work; the machine is bound as any other.
    let found = plan(
        std::slice::from_ref(&interrupted),
        &[listed("p1", ProviderState::Running, Some("m1"))],
        1_000,
        &POLICY,
    );
    assert!(
        found
            .iter()
            .any(|a| matches!(a, Action::Bind { machine, .. } if machine == "m1")),
        "{found:?}"
    );
    // Not listed: gone at once, long before `boot_timeout`, so that its room is free again.
    let lost = plan(std::slice::from_ref(&interrupted), &[], 1_000, &POLICY);
    assert!(
        lost.iter().any(event("m1", MachineEvent::ProviderGone)),
        "{lost:?}"
    );
}

#[test]
fn orphans_are_destroyed_or_adopted_by_policy() {
    let l = [
        listed("p1", ProviderState::Running, Some("old-key")),
        listed("p2", ProviderState::Stopping, None),
        listed("p3", ProviderState::Gone, None),
    ];
    let destroy = plan(&[], &l, 0, &POLICY);
    assert_eq!(
        destroy,
        vec![
            Action::DestroyOrphan {
                provider_id: "p1".into()
            },
            Action::DestroyOrphan {
                provider_id: "p2".into()
            },
        ]
    );
    let adopt = Policy {
        orphans: OrphanPolicy::Adopt,
        ..POLICY
    };
    assert_eq!(
        plan(&[], &l, 0, &adopt),
        vec![
            Action::Adopt {
                provider_id: "p1".into(),
                key: Some("old-key".into())
            },
            Action::DestroyOrphan {
                provider_id: "p2".into()
            },
        ]
    );
}

#[test]
fn stuck_creation_is_destroyed_and_slow_readiness_fails() {
    let k = [
        known("m1", MachineState::Creating, Some("p1"), 0, 0),
        known("m2", MachineState::Injecting, Some("p2"), 0, 100_000),
    ];
    let l = [
        listed("p1", ProviderState::Creating, Some("m1")),
        listed("p2", ProviderState::Running, Some("m2")),
    ];
    assert!(plan(&k, &l, 399_999, &POLICY).is_empty());
    let actions = plan(&k, &l, 600_000, &POLICY);
    assert!(
        actions.iter().any(event("m1", MachineEvent::Destroy)),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(event("m2", MachineEvent::Fail)),
        "{actions:?}"
    );
}

#[test]
fn provider_state_changes_become_events() {
    let k = [
        known("m1", MachineState::Creating, Some("p1"), 0, 0),
        known("m2", MachineState::Ready, Some("p2"), 0, 0),
    ];
    let l = [
        listed("p1", ProviderState::Running, Some("m1")),
        listed("p2", ProviderState::Failed, Some("m2")),
    ];
    let actions = plan(&k, &l, 10, &POLICY);
    assert!(
        actions
            .iter()
            .any(event("m1", MachineEvent::ProviderRunning))
    );
    assert!(actions.iter().any(event("m2", MachineEvent::Fail)));
}

#[test]
fn destroys_are_retried_when_due_and_not_before() {
    let mut k = known("m1", MachineState::Destroying, Some("p1"), 0, 0);
    k.next_attempt = 5_000;
    let l = [listed("p1", ProviderState::Stopping, Some("m1"))];
    assert!(plan(std::slice::from_ref(&k), &l, 4_999, &POLICY).is_empty());
    assert_eq!(
        plan(std::slice::from_ref(&k), &l, 5_000, &POLICY),
        vec![Action::Destroy {
            machine: "m1".into()
        }]
    );
    // Once the provider says gone, there is nothing left to destroy.
    let gone = [listed("p1", ProviderState::Gone, None)];
    assert_eq!(plan(&[k], &gone, 5_000, &POLICY).len(), 1);
}

#[test]
fn a_machine_stopped_behind_the_autoscalers_back_is_failed_not_counted() {
    let k = [
        known("m1", MachineState::Ready, Some("p1"), 0, 0),
        known("m2", MachineState::Busy, Some("p2"), 0, 0),
    ];
    let l = [
        listed("p1", ProviderState::Stopped, Some("m1")),
        listed("p2", ProviderState::Starting, Some("m2")),
    ];
    let actions = plan(&k, &l, 10, &POLICY);
    assert!(
        actions.iter().any(event("m1", MachineEvent::Fail)),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(event("m2", MachineEvent::Fail)),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Event { reason, .. }
            if reason == "the provider reports it stopped, and the autoscaler did not stop it")),
        "{actions:?}"
    );
}

#[test]
fn a_stopped_machine_being_destroyed_is_destroyed_again_not_failed() {
    let k = known("m1", MachineState::Destroying, Some("p1"), 0, 0);
    let l = [listed("p1", ProviderState::Stopped, Some("m1"))];
    assert_eq!(
        plan(&[k], &l, 10, &POLICY),
        vec![Action::Destroy {
            machine: "m1".into()
        }]
    );
}

#[test]
fn a_stopped_orphan_is_destroyed_even_when_orphans_are_adopted() {
    let adopt = Policy {
        orphans: OrphanPolicy::Adopt,
        ..POLICY
    };
    let l = [listed("p7", ProviderState::Stopped, Some("old"))];
    assert_eq!(
        plan(&[], &l, 10, &adopt),
        vec![Action::DestroyOrphan {
            provider_id: "p7".into()
        }]
    );
}

#[test]
fn the_warm_pools_own_stops_and_starts_complete_as_the_provider_reports_them() {
    let k = [
        known("stopping", MachineState::Stopping, Some("p1"), 0, 0),
        known("starting", MachineState::Starting, Some("p2"), 0, 0),
        known("stopped", MachineState::Stopped, Some("p3"), 0, 0),
        known("slow", MachineState::Starting, Some("p4"), 0, 0),
    ];
    let l = [
        listed("p1", ProviderState::Stopped, Some("stopping")),
        listed("p2", ProviderState::Running, Some("starting")),
        listed("p3", ProviderState::Stopped, Some("stopped")),
        listed("p4", ProviderState::Starting, Some("slow")),
    ];
    let actions = plan(&k, &l, 10, &POLICY);
    assert!(
        actions
            .iter()
            .any(event("stopping", MachineEvent::ProviderStopped)),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(event("starting", MachineEvent::ProviderRunning)),
        "{actions:?}"
    );
    assert_eq!(actions.len(), 2, "{actions:?}");
}

#[test]
fn a_stop_or_start_the_provider_never_finishes_fails_the_machine_at_the_boot_timeout() {
    let k = [
        known("stopping", MachineState::Stopping, Some("p1"), 0, 0),
        known("starting", MachineState::Starting, Some("p2"), 0, 0),
    ];
    let l = [
        listed("p1", ProviderState::Running, Some("stopping")),
        listed("p2", ProviderState::Stopped, Some("starting")),
    ];
    assert!(plan(&k, &l, POLICY.boot_timeout - 1, &POLICY).is_empty());
    let actions = plan(&k, &l, POLICY.boot_timeout, &POLICY);
    assert!(
        actions.iter().any(event("stopping", MachineEvent::Fail))
            && actions.iter().any(event("starting", MachineEvent::Fail)),
        "{actions:?}"
    );
}

#[test]
fn a_machine_we_stopped_that_runs_again_was_started_by_someone_else_and_is_failed() {
    let k = [known("m1", MachineState::Stopped, Some("p1"), 0, 0)];
    let l = [listed("p1", ProviderState::Running, Some("m1"))];
    let actions = plan(&k, &l, 10, &POLICY);
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::Event { event: MachineEvent::Fail, reason, .. }
            if reason == "the provider reports it running, and the autoscaler did not start it")
        ),
        "{actions:?}"
    );
}

#[test]
fn a_list_older_than_the_machines_last_change_says_nothing_of_its_state() {
    // Started and back in service since the list was taken, which still says stopped.
    let mut k = known("m1", MachineState::Booting, Some("p1"), 0, 0);
    k.changed_after_list = true;
    let l = [listed("p1", ProviderState::Stopped, Some("m1"))];
    assert!(plan(&[k], &l, 10, &POLICY).is_empty());
}
