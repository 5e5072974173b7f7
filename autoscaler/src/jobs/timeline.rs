//! The steps a job's record keeps of its life here: taken from GitLab, held by GitLab for our
//! acknowledgement, handed to a sidecar (and given back), started, failing, finished. The admin
//! API joins them with the machine's timeline and the planner's decisions (`admin/timeline.rs`).

use crate::core::Millis;
use crate::core::job::{JobEvent, JobPhase};
use crate::store::{JobRecord, JobStep};

/// The step of a hand-out to a sidecar.
pub(super) const HANDED_OVER: &str = "handed_over";

/// Most steps kept per job (a job handed out and given back again and again stays bounded).
const STEP_LIMIT: usize = 32;

pub(super) fn push(record: &mut JobRecord, step: JobStep) {
    record.timeline.push(step);
    let excess = record.timeline.len().saturating_sub(STEP_LIMIT);
    record.timeline.drain(..excess);
}

pub(super) fn step(at: Millis, step: &str, detail: Option<String>) -> JobStep {
    JobStep {
        at,
        step: step.to_string(),
        sidecar: None,
        detail,
    }
}

/// The step a change of phase from `before` to `after` by `event` adds.
pub(super) fn phase_step(
    before: &JobPhase,
    after: &JobPhase,
    event: &JobEvent,
    at: Millis,
) -> Option<JobStep> {
    Some(match after {
        JobPhase::Assigned { sidecar, .. } => JobStep {
            sidecar: Some(*sidecar),
            ..step(at, HANDED_OVER, None)
        },
        JobPhase::Queued if matches!(before, JobPhase::Assigned { .. }) => {
            let why = match event {
                JobEvent::HandOutFailed => "the job request it was given to went away".to_string(),
                JobEvent::AckTimedOut => {
                    "the sidecar did not start it within assign_ack_timeout".to_string()
                }
                JobEvent::Lost { reason } => {
                    format!("its machine was lost before it started ({reason})")
                }
                other => format!("{other:?}"),
            };
            step(at, "returned", Some(why))
        }
        JobPhase::Running { .. } => step(at, "started", None),
        JobPhase::Failing { reason, .. } => step(at, "failing", Some(reason.clone())),
        JobPhase::Finished { .. } => step(at, "finished", None),
        JobPhase::Queued => return None,
    })
}
