//! The life of a job inside the autoscaler, as pure data and one transition function.
//!
//! ```text
//!   Queued --HandedOut--> Assigned --Accepted--> Running --Ended--> Finished
//!     ^  \                   |                     |                 ^
//!     |   +--Abandon------+  |                     +--Lost--+        |
//!     +---HandOutFailed---|--+                              v        |
//!     +---AckTimedOut-----|--+                           Failing --Ended
//!     +---Lost (assigned) +--------------------------------^
//! ```
//!
//! A job is `Queued` from the moment GitLab's answer is in the store. Every state but
//! `Finished` means "the autoscaler owns this job until GitLab has its final state"; `Failing`
//! is a job whose machine was lost while it ran (or that waited too long for one): we owe GitLab
//! its failure, delivered as soon as GitLab answers.

use serde::{Deserialize, Serialize};

use super::{Millis, SidecarId};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum JobPhase {
    /// Accepted from GitLab and durable; waiting for a sidecar's job request.
    Queued,
    /// Handed to a sidecar's job request; no call from that sidecar for it seen yet.
    Assigned { sidecar: SidecarId, at: Millis },
    /// A sidecar accepted it. `sidecar` is unknown when the acceptance arrived for a job we had
    /// not recorded as handed out (e.g. the hand-out was not yet persisted when we restarted).
    Running {
        sidecar: Option<SidecarId>,
        since: Millis,
    },
    /// Its machine was lost while it ran (`interrupted`), or no machine took it in time: GitLab
    /// must be told it failed (`runner_system_failure`, which CI `retry:` can rerun, or
    /// `runner_interrupted` for an interrupted job whose payload lists that reason, as a stock
    /// runner reports a machine reclaimed under it).
    Failing {
        reason: String,
        since: Millis,
        #[serde(default)]
        interrupted: bool,
    },
    /// GitLab has the job's final state, or told us the job is over.
    Finished { at: Millis },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobEvent {
    /// Given to a waiting job request of `sidecar`.
    HandedOut { sidecar: SidecarId },
    /// The waiting request vanished before the job could be delivered.
    HandOutFailed,
    /// No acceptance arrived within the pool's acknowledgement window.
    AckTimedOut,
    /// A sidecar made a relayed call for the job: any update, a trace patch or an artifact
    /// upload (`core::acceptance`), not only `PUT state=running`.
    Accepted,
    /// GitLab answered the final update with `200`, or refused further calls for the job.
    Ended,
    /// The sidecar that held the job is gone (its machine was lost). Not yet accepted: hand it
    /// to another; running: it failed.
    Lost { reason: String },
    /// No sidecar will run it (it waited past the pool's acquire timeout).
    Abandon { reason: String },
}

/// A transition the machine does not define. Seeing one means a caller is confused about the
/// job's state; it is reported and the job keeps its state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job event {event:?} is not valid in phase {phase:?}")]
pub struct InvalidTransition {
    pub phase: JobPhase,
    pub event: JobEvent,
}

/// The next phase after `event` at `now`.
///
/// Late events are absorbed: a keep-alive after the end, or an acceptance for a job already
/// running, leave the phase as it is. Only events that would require rewinding history are
/// invalid.
pub fn transition(
    phase: &JobPhase,
    event: &JobEvent,
    now: Millis,
) -> Result<JobPhase, InvalidTransition> {
    use JobEvent as E;
    use JobPhase as P;
    let next = match (phase, event) {
        (P::Queued, E::HandedOut { sidecar }) => P::Assigned {
            sidecar: *sidecar,
            at: now,
        },
        (P::Assigned { .. }, E::HandOutFailed | E::AckTimedOut) => P::Queued,
        (P::Queued, E::Accepted) => P::Running {
            sidecar: None,
            since: now,
        },
        (P::Assigned { sidecar, .. }, E::Accepted) => P::Running {
            sidecar: Some(*sidecar),
            since: now,
        },
        (P::Running { .. }, E::Accepted) => phase.clone(),
        (P::Queued | P::Assigned { .. } | P::Running { .. }, E::Ended) => P::Finished { at: now },
        (P::Finished { .. }, E::Accepted | E::Ended) => phase.clone(),
        (P::Assigned { .. }, E::Lost { .. }) => P::Queued,
        (P::Running { .. }, E::Lost { reason }) => P::Failing {
            reason: reason.clone(),
            since: now,
            interrupted: true,
        },
        (P::Queued | P::Assigned { .. }, E::Abandon { reason }) => P::Failing {
            reason: reason.clone(),
            since: now,
            interrupted: false,
        },
        (P::Failing { .. }, E::Ended) => P::Finished { at: now },
        // Nothing held by a sidecar to lose, or nothing left to give up; late calls change nothing.
        (P::Queued | P::Failing { .. } | P::Finished { .. }, E::Lost { .. })
        | (P::Running { .. } | P::Failing { .. } | P::Finished { .. }, E::Abandon { .. })
        | (P::Failing { .. }, E::Accepted | E::AckTimedOut | E::HandOutFailed) => phase.clone(),
        // A timeout or failed hand-out racing with the acceptance: the acceptance won.
        (P::Running { .. } | P::Finished { .. }, E::AckTimedOut | E::HandOutFailed) => {
            phase.clone()
        }
        (P::Queued, E::AckTimedOut | E::HandOutFailed)
        | (
            P::Assigned { .. } | P::Running { .. } | P::Failing { .. } | P::Finished { .. },
            E::HandedOut { .. },
        ) => {
            return Err(InvalidTransition {
                phase: phase.clone(),
                event: event.clone(),
            });
        }
    };
    Ok(next)
}

impl JobPhase {
    /// Every phase's [`JobPhase::name`], in the order of a job's life.
    pub const NAMES: [&'static str; 5] = ["queued", "assigned", "running", "failing", "finished"];

    pub fn is_finished(&self) -> bool {
        matches!(self, JobPhase::Finished { .. })
    }

    /// Waiting for a sidecar (and therefore to be offered to the next job request).
    pub fn is_queued(&self) -> bool {
        matches!(self, JobPhase::Queued)
    }

    /// Handed out at least `window` ago without an acceptance.
    pub fn ack_expired(&self, now: Millis, window: Millis) -> bool {
        matches!(self, JobPhase::Assigned { at, .. } if now.saturating_sub(*at) >= window)
    }

    pub fn name(&self) -> &'static str {
        match self {
            JobPhase::Queued => "queued",
            JobPhase::Assigned { .. } => "assigned",
            JobPhase::Running { .. } => "running",
            JobPhase::Failing { .. } => "failing",
            JobPhase::Finished { .. } => "finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: SidecarId = SidecarId(7);

    #[test]
    fn the_table() {
        use JobEvent as E;
        use JobPhase as P;
        let assigned = P::Assigned { sidecar: S, at: 5 };
        let running = P::Running {
            sidecar: Some(S),
            since: 10,
        };
        let finished = P::Finished { at: 3 };
        let cases: Vec<(JobPhase, JobEvent, Option<JobPhase>)> = vec![
            (
                P::Queued,
                E::HandedOut { sidecar: S },
                Some(P::Assigned {
                    sidecar: S,
                    at: 100,
                }),
            ),
            (
                P::Queued,
                E::Accepted,
                Some(P::Running {
                    sidecar: None,
                    since: 100,
                }),
            ),
            (P::Queued, E::Ended, Some(P::Finished { at: 100 })),
            (P::Queued, E::AckTimedOut, None),
            (P::Queued, E::HandOutFailed, None),
            (assigned.clone(), E::HandOutFailed, Some(P::Queued)),
            (assigned.clone(), E::AckTimedOut, Some(P::Queued)),
            (
                assigned.clone(),
                E::Accepted,
                Some(P::Running {
                    sidecar: Some(S),
                    since: 100,
                }),
            ),
            (assigned.clone(), E::Ended, Some(P::Finished { at: 100 })),
            (assigned.clone(), E::HandedOut { sidecar: S }, None),
            (running.clone(), E::Accepted, Some(running.clone())),
            (running.clone(), E::AckTimedOut, Some(running.clone())),
            (running.clone(), E::Ended, Some(P::Finished { at: 100 })),
            (running.clone(), E::HandedOut { sidecar: S }, None),
            (finished.clone(), E::Accepted, Some(finished.clone())),
            (finished.clone(), E::Ended, Some(finished.clone())),
            (finished.clone(), E::HandedOut { sidecar: S }, None),
            (
                assigned.clone(),
                E::Lost { reason: "x".into() },
                Some(P::Queued),
            ),
            (
                running.clone(),
                E::Lost { reason: "x".into() },
                Some(P::Failing {
                    reason: "x".into(),
                    since: 100,
                    interrupted: true,
                }),
            ),
            (
                P::Queued,
                E::Abandon { reason: "y".into() },
                Some(P::Failing {
                    reason: "y".into(),
                    since: 100,
                    interrupted: false,
                }),
            ),
            (
                P::Failing {
                    reason: "x".into(),
                    since: 1,
                    interrupted: true,
                },
                E::Ended,
                Some(P::Finished { at: 100 }),
            ),
            (
                P::Failing {
                    reason: "x".into(),
                    since: 1,
                    interrupted: true,
                },
                E::Accepted,
                Some(P::Failing {
                    reason: "x".into(),
                    since: 1,
                    interrupted: true,
                }),
            ),
            (
                P::Failing {
                    reason: "x".into(),
                    since: 1,
                    interrupted: true,
                },
                E::HandedOut { sidecar: S },
                None,
            ),
        ];
        for (phase, event, expected) in cases {
            let got = transition(&phase, &event, 100).ok();
            assert_eq!(got, expected, "{phase:?} + {event:?}");
        }
    }

    #[test]
    fn ack_expiry() {
        let p = JobPhase::Assigned {
            sidecar: S,
            at: 1_000,
        };
        assert!(!p.ack_expired(1_500, 1_000));
        assert!(p.ack_expired(2_000, 1_000));
        assert!(!JobPhase::Queued.ack_expired(10_000, 1));
    }

    fn event() -> impl Strategy<Value = JobEvent> {
        prop_oneof![
            (0u64..3).prop_map(|s| JobEvent::HandedOut {
                sidecar: SidecarId(s)
            }),
            Just(JobEvent::HandOutFailed),
            Just(JobEvent::AckTimedOut),
            Just(JobEvent::Accepted),
            Just(JobEvent::Ended),
            Just(JobEvent::Lost {
                reason: "lost".into()
            }),
            Just(JobEvent::Abandon {
                reason: "late".into()
            }),
        ]
    }

    proptest! {
        /// Whatever happens, a finished job stays finished (GitLab never hands the same job out
        /// twice, runner-protocol.md §3.5), and a job never goes back to the queue once a
        /// sidecar accepted it (that would run it twice).
        #[test]
        fn finished_is_terminal_and_running_never_requeues(events in proptest::collection::vec(event(), 0..40)) {
            let mut phase = JobPhase::Queued;
            let mut was_running = false;
            for (now, e) in events.iter().enumerate() {
                if let Ok(next) = transition(&phase, e, now as Millis) {
                    if phase.is_finished() {
                        prop_assert_eq!(&next, &phase);
                    }
                    if was_running {
                        let requeued = next.is_queued() || matches!(next, JobPhase::Assigned { .. });
                        prop_assert!(!requeued, "a running job went back to the queue");
                    }
                    was_running |= matches!(next, JobPhase::Running { .. });
                    phase = next;
                }
            }
        }
    }
}
