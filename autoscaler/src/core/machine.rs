//! The life of a machine, as pure data and one transition function.
//!
//! ```text
//! requested -> creating -> booting -> injecting -> ready <-> busy -> draining -> destroying -> gone
//!     \___________\___________\___________\__________\________\________\----> failed -> destroying
//! ```
//!
//! `failed` is reachable from every live state and leads only to `destroying`: a broken machine
//! is still a machine we pay for until the provider confirms it is gone. `gone` is terminal.
//!
//! A warm pool (issue #29) adds a side loop: an idle machine may be stopped instead of
//! destroyed, and a stopped one started again when jobs need it, which takes a fraction of a
//! boot; a stopped machine costs only its disk.
//!
//! ```text
//! ready -> stopping -> stopped -> starting -> booting -> injecting -> ready
//! ```
//!
//! A started machine goes the way a new one does once the provider reports it running: its
//! sidecar token was revoked when it stopped (a stopped disk must not hold a live credential),
//! so it is reached again (its pinned host key required) and given a fresh sidecar.

use serde::{Deserialize, Serialize};

use super::Millis;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineState {
    /// We decided to create it and gave it an idempotency key; the provider has not answered.
    Requested,
    /// The provider accepted the create and is making the machine.
    Creating,
    /// The provider says it runs; we are waiting for SSH and the ready command.
    Booting,
    /// Reachable; the sidecar is being installed and started, and has not polled yet.
    Injecting,
    /// Its sidecar polls for jobs and runs none.
    Ready,
    /// Its sidecar runs at least one job.
    Busy,
    /// Gets no new jobs; waits for its running jobs to end.
    Draining,
    /// Destroy asked of the provider; waiting for it to be gone.
    Destroying,
    /// Does not exist any more. Terminal.
    Gone,
    /// Broken; must be destroyed.
    Failed,
    /// Stop asked of the provider (it was idle and the warm pool wanted it); no jobs.
    Stopping,
    /// Stopped at the provider: keeps its disk, costs only that, takes no jobs.
    Stopped,
    /// Start asked of a stopped machine; waiting for the provider to report it running (then
    /// `booting`, as a new machine).
    Starting,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineEvent {
    /// The provider took the create call (state `creating`).
    CreateAccepted,
    /// The provider reports the machine running.
    ProviderRunning,
    /// SSH answers with the right host key and the ready command passed.
    Reachable,
    /// Its sidecar asked for a job with its own token.
    SidecarPolled,
    /// A job started on it.
    JobStarted,
    /// Its last running job ended.
    JobsDone,
    /// Stop giving it jobs (idle too long, use count reached, shutdown, ...).
    Drain,
    /// Destroy it now (drained, never became ready, orphan, ...).
    Destroy,
    /// The provider reports it gone, or lists it no more.
    ProviderGone,
    /// Something broke (unreachable, wrong host key, sidecar silent, provider says failed).
    Fail,
    /// Stop an idle machine, keeping its disk (the warm pool).
    Stop,
    /// The provider reports it stopped.
    ProviderStopped,
    /// Start a stopped machine again.
    Start,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("machine event {event:?} is not valid in state {state:?}")]
pub struct InvalidTransition {
    pub state: MachineState,
    pub event: MachineEvent,
}

/// The next state after `event`. `now` is unused by the rules today but is part of the contract
/// so that time-dependent rules stay pure.
pub fn transition(
    state: MachineState,
    event: &MachineEvent,
    _now: Millis,
) -> Result<MachineState, InvalidTransition> {
    use MachineEvent as E;
    use MachineState as S;
    let next = match (state, event) {
        (S::Gone, _) => None,
        // Provider truth wins over everything but the end.
        (_, E::ProviderGone) => Some(S::Gone),
        (S::Destroying, E::Fail | E::Destroy) => Some(S::Destroying),
        (_, E::Fail) => Some(S::Failed),
        (S::Failed, E::Destroy) => Some(S::Destroying),
        (_, E::Destroy) => Some(S::Destroying),

        (S::Requested, E::CreateAccepted) => Some(S::Creating),
        (S::Requested | S::Creating, E::ProviderRunning) => Some(S::Booting),
        (S::Booting, E::Reachable) => Some(S::Injecting),
        (S::Injecting, E::SidecarPolled) => Some(S::Ready),
        (S::Starting, E::ProviderRunning) => Some(S::Booting),
        // The warm pool: only an idle machine stops; only a stopped one starts.
        (S::Ready, E::Stop) => Some(S::Stopping),
        (S::Stopping, E::ProviderStopped | E::Stop) | (S::Stopped, E::ProviderStopped) => {
            Some(S::Stopped)
        }
        (S::Stopped, E::Start) | (S::Starting, E::Start) => Some(S::Starting),
        (S::Ready | S::Busy, E::SidecarPolled) => Some(state),
        (S::Ready | S::Busy, E::JobStarted) => Some(S::Busy),
        (S::Busy, E::JobsDone) => Some(S::Ready),
        (S::Ready, E::JobsDone) => Some(S::Ready),
        // A draining machine may still see its jobs start (a hand-out racing the drain) and end.
        (S::Draining, E::JobStarted | E::JobsDone | E::SidecarPolled | E::Drain) => {
            Some(S::Draining)
        }
        (
            S::Requested
            | S::Creating
            | S::Booting
            | S::Injecting
            | S::Ready
            | S::Busy
            | S::Starting,
            E::Drain,
        ) => Some(S::Draining),
        // Repeated provider reports are harmless.
        (S::Creating, E::CreateAccepted) | (S::Booting, E::ProviderRunning) => Some(state),
        _ => None,
    };
    next.ok_or_else(|| InvalidTransition {
        state,
        event: event.clone(),
    })
}

impl MachineState {
    pub const ALL: [MachineState; 13] = [
        MachineState::Requested,
        MachineState::Creating,
        MachineState::Booting,
        MachineState::Injecting,
        MachineState::Ready,
        MachineState::Busy,
        MachineState::Draining,
        MachineState::Destroying,
        MachineState::Gone,
        MachineState::Failed,
        MachineState::Stopping,
        MachineState::Stopped,
        MachineState::Starting,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MachineState::Requested => "requested",
            MachineState::Creating => "creating",
            MachineState::Booting => "booting",
            MachineState::Injecting => "injecting",
            MachineState::Ready => "ready",
            MachineState::Busy => "busy",
            MachineState::Draining => "draining",
            MachineState::Destroying => "destroying",
            MachineState::Gone => "gone",
            MachineState::Failed => "failed",
            MachineState::Stopping => "stopping",
            MachineState::Stopped => "stopped",
            MachineState::Starting => "starting",
        }
    }

    pub fn is_gone(self) -> bool {
        self == MachineState::Gone
    }

    /// Counts against the pool's maximum: every state but `gone` (GitLab's taskscaler counts
    /// creating and deleting instances too) and the warm pool's stopped machines, which
    /// `max_stopped` bounds on their own (a machine started again counts once more).
    pub fn counts_toward_max(self) -> bool {
        !matches!(
            self,
            MachineState::Gone | MachineState::Stopping | MachineState::Stopped
        )
    }

    /// In the warm pool: stopping or stopped, costing only its disk once stopped.
    pub fn is_stopped(self) -> bool {
        matches!(self, MachineState::Stopping | MachineState::Stopped)
    }

    /// On its way to being usable: being made, or started again from the warm pool.
    pub fn is_starting(self) -> bool {
        matches!(
            self,
            MachineState::Requested
                | MachineState::Creating
                | MachineState::Booting
                | MachineState::Injecting
                | MachineState::Starting
        )
    }

    /// May be given jobs.
    pub fn takes_jobs(self) -> bool {
        matches!(self, MachineState::Ready | MachineState::Busy)
    }
}

impl std::fmt::Display for MachineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MachineEvent as E;
    use MachineState as S;
    use proptest::prelude::*;

    #[test]
    fn the_happy_path() {
        let path = [
            (E::CreateAccepted, S::Creating),
            (E::ProviderRunning, S::Booting),
            (E::Reachable, S::Injecting),
            (E::SidecarPolled, S::Ready),
            (E::JobStarted, S::Busy),
            (E::JobsDone, S::Ready),
            (E::Drain, S::Draining),
            (E::Destroy, S::Destroying),
            (E::ProviderGone, S::Gone),
        ];
        let mut s = S::Requested;
        for (event, expected) in path {
            s = transition(s, &event, 0).unwrap();
            assert_eq!(s, expected, "after {event:?}");
        }
    }

    #[test]
    fn the_warm_loop() {
        let path = [
            (E::Stop, S::Stopping),
            (E::ProviderStopped, S::Stopped),
            (E::Start, S::Starting),
            (E::ProviderRunning, S::Booting),
            (E::Reachable, S::Injecting),
            (E::SidecarPolled, S::Ready),
        ];
        let mut s = S::Ready;
        for (event, expected) in path {
            s = transition(s, &event, 0).unwrap();
            assert_eq!(s, expected, "after {event:?}");
        }
        assert!(!S::Stopped.counts_toward_max() && !S::Stopped.takes_jobs());
        assert!(S::Starting.counts_toward_max() && S::Starting.is_starting());
    }

    #[test]
    fn the_table() {
        let cases: &[(S, E, Option<S>)] = &[
            (S::Requested, E::ProviderRunning, Some(S::Booting)),
            (S::Requested, E::Reachable, None),
            (S::Creating, E::CreateAccepted, Some(S::Creating)),
            (S::Booting, E::SidecarPolled, None),
            (S::Injecting, E::JobStarted, None),
            (S::Ready, E::SidecarPolled, Some(S::Ready)),
            (S::Busy, E::JobStarted, Some(S::Busy)),
            (S::Busy, E::Drain, Some(S::Draining)),
            (S::Draining, E::JobsDone, Some(S::Draining)),
            (S::Draining, E::Reachable, None),
            (S::Busy, E::Fail, Some(S::Failed)),
            (S::Failed, E::Destroy, Some(S::Destroying)),
            (S::Failed, E::Drain, None),
            (S::Failed, E::Fail, Some(S::Failed)),
            (S::Destroying, E::Fail, Some(S::Destroying)),
            (S::Destroying, E::Destroy, Some(S::Destroying)),
            (S::Destroying, E::ProviderGone, Some(S::Gone)),
            (S::Busy, E::ProviderGone, Some(S::Gone)),
            (S::Gone, E::ProviderGone, None),
            (S::Gone, E::Destroy, None),
            (S::Ready, E::Stop, Some(S::Stopping)),
            (S::Busy, E::Stop, None),
            (S::Stopping, E::ProviderStopped, Some(S::Stopped)),
            (S::Stopped, E::JobStarted, None),
            (S::Stopped, E::Start, Some(S::Starting)),
            (S::Ready, E::Start, None),
            (S::Starting, E::SidecarPolled, None),
            (S::Starting, E::ProviderRunning, Some(S::Booting)),
            (S::Stopped, E::Destroy, Some(S::Destroying)),
            (S::Stopped, E::Fail, Some(S::Failed)),
            (S::Starting, E::Drain, Some(S::Draining)),
        ];
        for (state, event, expected) in cases {
            assert_eq!(
                transition(*state, event, 0).ok(),
                *expected,
                "{state:?} + {event:?}"
            );
        }
    }

    fn any_event() -> impl Strategy<Value = MachineEvent> {
        prop_oneof![
            Just(E::CreateAccepted),
            Just(E::ProviderRunning),
            Just(E::Reachable),
            Just(E::SidecarPolled),
            Just(E::JobStarted),
            Just(E::JobsDone),
            Just(E::Drain),
            Just(E::Destroy),
            Just(E::ProviderGone),
            Just(E::Fail),
            Just(E::Stop),
            Just(E::ProviderStopped),
            Just(E::Start),
        ]
    }

    proptest! {
        /// No sequence of events leads outside the defined states, `gone` is terminal, every
        /// live state can fail, and a failed machine can only move towards destruction.
        #[test]
        fn no_sequence_escapes_the_machine(events in proptest::collection::vec(any_event(), 0..60)) {
            let mut s = S::Requested;
            for e in &events {
                let was = s;
                match transition(s, e, 0) {
                    Ok(next) => {
                        prop_assert!(S::ALL.contains(&next));
                        prop_assert!(was != S::Gone, "left gone");
                        if was == S::Failed {
                            prop_assert!(matches!(next, S::Failed | S::Destroying | S::Gone));
                        }
                        if was == S::Destroying {
                            prop_assert!(matches!(next, S::Destroying | S::Gone));
                        }
                        s = next;
                    }
                    Err(_) => prop_assert!(was == S::Gone || !matches!(e, E::ProviderGone | E::Destroy)),
                }
            }
        }

        #[test]
        fn every_live_state_can_fail_and_be_destroyed(i in 0usize..13) {
            let s = S::ALL[i];
            if s != S::Gone {
                let failed = transition(s, &E::Fail, 0).unwrap();
                prop_assert!(matches!(failed, S::Failed | S::Destroying));
                prop_assert_eq!(transition(failed, &E::Destroy, 0).unwrap(), S::Destroying);
                prop_assert_eq!(transition(S::Destroying, &E::ProviderGone, 0).unwrap(), S::Gone);
            }
        }
    }
}
