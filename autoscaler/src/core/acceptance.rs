//! When a job handed to a sidecar counts as accepted by it.
//!
//! A stock `gitlab-runner` accepts a job with `PUT state=running` before anything else, but
//! other runners do not: some never send `running` and start with a trace patch, an artifact
//! upload or their final state. Whatever the call, it carries the job's token, which only the
//! sidecar the job was handed to received; so the first relayed call of any kind is that
//! sidecar's acceptance (`JobEvent::Accepted`), and from then on the acknowledgement window can
//! no longer send the job back to the queue, where another sidecar would run it a second time.
//! Calls with a token that does not open the job are refused before they get here
//! (`jobs/access.rs`).

use super::job::JobEvent;

/// A job-token call the relay passes to GitLab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayedCall {
    /// `PUT /jobs/:id`, whatever its `state` (`running`, `pending`, a final state, or none).
    Update,
    /// `PATCH /jobs/:id/trace`, empty patches included.
    Trace,
    /// `POST /jobs/:id/artifacts`.
    ArtifactUpload,
}

impl RelayedCall {
    /// The job event this call means: always an acceptance by the sidecar that holds the job.
    pub fn event(self) -> JobEvent {
        match self {
            RelayedCall::Update | RelayedCall::Trace | RelayedCall::ArtifactUpload => {
                JobEvent::Accepted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::job::{JobPhase, transition};
    use crate::core::{Millis, SidecarId};
    use proptest::prelude::*;

    const WINDOW: Millis = 120_000;

    /// What can happen to one job: sidecars polling, the holder calling, time passing.
    #[derive(Clone, Debug)]
    enum Step {
        /// Sidecar `n` asks for a job.
        Poll(u64),
        /// The sidecar holding the job makes a relayed call.
        Call(RelayedCall),
        /// Time passes; the acknowledgement window is checked as the pool's loop does.
        Wait(Millis),
        /// The request the job was handed to vanished before the payload went out.
        RequestVanished,
        /// GitLab took the final state.
        Ended,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..4).prop_map(Step::Poll),
            prop_oneof![
                Just(RelayedCall::Update),
                Just(RelayedCall::Trace),
                Just(RelayedCall::ArtifactUpload)
            ]
            .prop_map(Step::Call),
            (0..2 * WINDOW).prop_map(Step::Wait),
            Just(Step::RequestVanished),
            Just(Step::Ended),
        ]
    }

    proptest! {
        /// Once the sidecar a job was handed to made any relayed call for it, the job is never
        /// queued or handed out again, however long it outlives the acknowledgement window and
        /// however many other sidecars poll.
        #[test]
        fn a_sign_of_life_keeps_the_job_with_its_sidecar(steps in proptest::collection::vec(step(), 0..60)) {
            let mut phase = JobPhase::Queued;
            let mut now: Millis = 0;
            // The sidecar that received the payload (and so the token), if any.
            let mut holder: Option<SidecarId> = None;
            let mut delivered = false;
            let mut signed_by: Option<SidecarId> = None;
            for s in steps {
                let event = match s {
                    Step::Poll(n) if phase.is_queued() => {
                        holder = Some(SidecarId(n));
                        delivered = true;
                        JobEvent::HandedOut { sidecar: SidecarId(n) }
                    }
                    Step::Poll(_) => continue,
                    Step::Call(call) if delivered => {
                        signed_by = signed_by.or(holder);
                        call.event()
                    }
                    Step::Call(_) => continue,
                    Step::Wait(dt) => {
                        now += dt;
                        if !phase.ack_expired(now, WINDOW) {
                            continue;
                        }
                        JobEvent::AckTimedOut
                    }
                    Step::RequestVanished if matches!(phase, JobPhase::Assigned { .. }) && signed_by.is_none() => {
                        delivered = false;
                        JobEvent::HandOutFailed
                    }
                    Step::RequestVanished => continue,
                    Step::Ended => JobEvent::Ended,
                };
                let next = transition(&phase, &event, now).expect("every step here is defined");
                if signed_by.is_some() {
                    prop_assert!(
                        !next.is_queued() && !matches!(next, JobPhase::Assigned { .. }),
                        "job went back to the queue after a sign of life: {:?} -> {:?} on {:?}",
                        phase, next, event
                    );
                    if let JobPhase::Running { sidecar: Some(s), .. } = &next {
                        prop_assert_eq!(Some(*s), signed_by);
                    }
                }
                phase = next;
            }
        }
    }

    #[test]
    fn every_relayed_call_is_an_acceptance() {
        for call in [
            RelayedCall::Update,
            RelayedCall::Trace,
            RelayedCall::ArtifactUpload,
        ] {
            let assigned = JobPhase::Assigned {
                sidecar: SidecarId(3),
                at: 0,
            };
            let after = transition(&assigned, &call.event(), 10).unwrap();
            assert_eq!(
                after,
                JobPhase::Running {
                    sidecar: Some(SidecarId(3)),
                    since: 10
                }
            );
            // The window running out later changes nothing.
            assert_eq!(
                transition(&after, &JobEvent::AckTimedOut, WINDOW * 3).unwrap(),
                after
            );
        }
    }
}
