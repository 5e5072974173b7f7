//! One reconcile pass, decided: what the provisioner's `list` says against what we know.
//!
//! The provider's list is the truth about what exists. A machine we know that it no longer lists
//! is gone; a machine it lists with our labels that we do not know is an orphan; a machine whose
//! create we lost track of is found again by its idempotency key. Nothing here calls anything:
//! the pass returns actions, the caller executes them.

use super::Millis;
use super::machine::{MachineEvent, MachineState};

/// What we know of one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Our id, also the machine's idempotency key at the provider.
    pub id: String,
    pub state: MachineState,
    pub provider_id: Option<String>,
    pub created_at: Millis,
    /// When it entered its current state.
    pub since: Millis,
    /// For `destroying` and `failed`: when the next destroy attempt is due.
    pub next_attempt: Millis,
    /// It changed state after the provider's list was taken: what the list says of it may be
    /// older than what we did to it since (a start that has already brought it back, say), so
    /// the list's word on its state waits for the next pass.
    pub changed_after_list: bool,
    /// Its create was asked by an earlier run of the autoscaler, which stopped before the
    /// answer (a crash, a `kill -9`): nothing in this run waits for that call, so a list that
    /// does not show a machine with its key settles it. A machine the call still makes later
    /// is an orphan, handled as any other.
    pub create_interrupted: bool,
}

/// The provider's view of one machine carrying our owner labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub provider_id: String,
    pub state: ProviderState,
    /// The `autoscaler-key` label.
    pub key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderState {
    Creating,
    Running,
    /// Being destroyed, or (for a provisioner with `stop_start`) being stopped: not usable,
    /// not gone.
    Stopping,
    /// Exists but does not run; keeps its id, labels and disk (provisioners with `stop_start`).
    Stopped,
    /// Coming back from `stopped`; not usable yet.
    Starting,
    Gone,
    Failed,
}

/// The protocol's word for a state, for reasons shown to people.
fn provider_state_name(state: ProviderState) -> &'static str {
    match state {
        ProviderState::Creating => "creating",
        ProviderState::Running => "running",
        ProviderState::Stopping => "stopping",
        ProviderState::Stopped => "stopped",
        ProviderState::Starting => "starting",
        ProviderState::Gone => "gone",
        ProviderState::Failed => "failed",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanPolicy {
    /// Take it over: it becomes one of the pool's machines (booting, then injected).
    Adopt,
    /// Destroy it.
    Destroy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Longest a machine may take from the create request to `running` at the provider.
    pub boot_timeout: Millis,
    /// Longest from `running` at the provider to its sidecar's first poll.
    pub ready_timeout: Millis,
    /// How long a new machine may be missing from `list` (cloud lists are eventually
    /// consistent) before its absence means it is gone.
    pub list_grace: Millis,
    pub orphans: OrphanPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A machine whose create answer we never recorded exists: record its provider id.
    Bind {
        machine: String,
        provider_id: String,
    },
    /// Apply an event to a known machine.
    Event {
        machine: String,
        event: MachineEvent,
        reason: String,
    },
    /// Call destroy (again) for a machine that is being destroyed.
    Destroy {
        machine: String,
    },
    Adopt {
        provider_id: String,
        key: Option<String>,
    },
    DestroyOrphan {
        provider_id: String,
    },
}

pub fn plan(known: &[Known], listed: &[Listed], now: Millis, policy: &Policy) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut bound = Vec::new();

    for l in listed {
        if known
            .iter()
            .any(|k| k.provider_id.as_deref() == Some(l.provider_id.as_str()))
        {
            continue;
        }
        let by_key = l.key.as_deref().and_then(|key| {
            known
                .iter()
                .find(|k| k.id == key && k.provider_id.is_none() && !k.state.is_gone())
        });
        match by_key {
            Some(k) => {
                bound.push(k.id.clone());
                actions.push(Action::Bind {
                    machine: k.id.clone(),
                    provider_id: l.provider_id.clone(),
                });
            }
            None if l.state == ProviderState::Gone => {}
            None => actions.push(match policy.orphans {
                // Only a machine that is (or will be) running can be adopted: a stopped one
                // would have to be started, which the autoscaler does not do yet, so it is
                // destroyed like any other orphan it cannot use.
                OrphanPolicy::Adopt
                    if matches!(l.state, ProviderState::Creating | ProviderState::Running) =>
                {
                    Action::Adopt {
                        provider_id: l.provider_id.clone(),
                        key: l.key.clone(),
                    }
                }
                _ => Action::DestroyOrphan {
                    provider_id: l.provider_id.clone(),
                },
            }),
        }
    }

    for k in known.iter().filter(|k| !k.state.is_gone()) {
        if let Some(action) = decide(k, listed, &bound, now, policy) {
            actions.push(action);
        }
    }
    actions
}

/// At most one action per known machine: the provider's word first, then our own timeouts.
fn decide(
    k: &Known,
    listed: &[Listed],
    bound: &[String],
    now: Millis,
    policy: &Policy,
) -> Option<Action> {
    let age = now.saturating_sub(k.created_at);
    let in_state = now.saturating_sub(k.since);
    let event = |event, reason: String| {
        Some(Action::Event {
            machine: k.id.clone(),
            event,
            reason,
        })
    };
    let Some(provider_id) = k.provider_id.as_deref() else {
        if bound.contains(&k.id) {
            return None;
        }
        if k.create_interrupted {
            // Waiting out `boot_timeout` here would hold the pool's room for machines that
            // will never come: after a crash at `max_machines`, the pool made nothing for it.
            return event(
                MachineEvent::ProviderGone,
                "its create was cut short by a restart of the autoscaler and the provider \
                 lists no machine for it"
                    .into(),
            );
        }
        if age < policy.boot_timeout {
            return None;
        }
        return event(
            MachineEvent::ProviderGone,
            format!(
                "its create produced no machine within {} s",
                policy.boot_timeout / 1000
            ),
        );
    };
    match listed.iter().find(|l| l.provider_id == provider_id) {
        None if age >= policy.list_grace => {
            return event(
                MachineEvent::ProviderGone,
                format!("{}the provider no longer lists it", vanished(k.state)),
            );
        }
        None => {}
        Some(_) if k.changed_after_list => {}
        Some(l) => {
            if let Some((what, reason)) = judge_listed_state(k.state, l.state) {
                return event(what, reason);
            }
        }
    }
    match k.state {
        MachineState::Requested | MachineState::Creating if in_state >= policy.boot_timeout => {
            event(
                MachineEvent::Destroy,
                format!("stuck in {} for {} s", k.state, in_state / 1000),
            )
        }
        MachineState::Booting | MachineState::Injecting if in_state >= policy.ready_timeout => {
            event(
                MachineEvent::Fail,
                format!(
                    "not ready {} s after it started ({})",
                    in_state / 1000,
                    k.state
                ),
            )
        }
        // A power operation the provider never finished: a machine neither stopped nor back
        // is no capacity and no warm spare; it is replaced.
        MachineState::Stopping | MachineState::Starting if in_state >= policy.boot_timeout => {
            event(
                MachineEvent::Fail,
                format!("still {} after {} s", k.state, in_state / 1000),
            )
        }
        MachineState::Destroying | MachineState::Failed if now >= k.next_attempt => {
            Some(Action::Destroy {
                machine: k.id.clone(),
            })
        }
        _ => None,
    }
}

/// What the provider's listed state says of a machine in `ours`, if it calls for an event.
fn judge_listed_state(ours: MachineState, listed: ProviderState) -> Option<(MachineEvent, String)> {
    use MachineState as S;
    use ProviderState as P;
    let ending = matches!(ours, S::Failed | S::Destroying);
    match (listed, ours) {
        (P::Gone, _) => Some((MachineEvent::ProviderGone, gone_reason(ours))),
        (P::Failed, _) if !ending => {
            Some((MachineEvent::Fail, "the provider reports it failed".into()))
        }
        // The warm pool's own steps, as the provider completes them.
        (P::Stopped, S::Stopping) => Some((
            MachineEvent::ProviderStopped,
            "the provider reports it stopped".into(),
        )),
        (P::Running, S::Requested | S::Creating | S::Starting) => Some((
            MachineEvent::ProviderRunning,
            "the provider reports it running".into(),
        )),
        // On its way: a stop or a start the provider has not finished (or not begun: a start
        // is judged by its timeout).
        (P::Stopping | P::Stopped | P::Starting, S::Stopping | S::Stopped | S::Starting) => None,
        // Stopped, or coming back, without the autoscaler asking: stopped behind its back (an
        // operator, a provider's maintenance). Its sidecar is gone (a restart does not rerun
        // user-data) and a stopped machine keeps no live token, so it can take no job; it is
        // failed, which destroys and replaces it, rather than kept as capacity that is not there.
        // Likewise a machine we stopped that runs again: nobody gave it a sidecar.
        (P::Stopped | P::Starting, _) | (P::Running, S::Stopped) if !ending => Some((
            MachineEvent::Fail,
            format!(
                "the provider reports it {}, and the autoscaler did not {} it",
                provider_state_name(listed),
                if listed == P::Running {
                    "start"
                } else {
                    "stop"
                }
            ),
        )),
        _ => None,
    }
}

fn gone_reason(ours: MachineState) -> String {
    format!("{}the provider reports it gone", vanished(ours))
}

/// Gone without a destroy from us: the provider lost it (or someone deleted it) behind the
/// autoscaler's back, which the record and the failure metric must say.
fn vanished(ours: MachineState) -> &'static str {
    if ours == MachineState::Destroying {
        ""
    } else {
        "vanished at the provider: "
    }
}

#[cfg(test)]
mod tests;
