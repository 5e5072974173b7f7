use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use super::queue::EnqueueError;
use super::*;
use crate::control::JobSpec;

const RUNNER: &str = "glrt-test";

const WINDOW: Duration = Duration::from_secs(120);

fn state_with(two_phase: bool, provisioning_retries: u32) -> State {
    let mut state = State::new(Rules {
        ack_window: two_phase.then_some(WINDOW),
        trace_limit: 1 << 20,
        provisioning_retries,
    });
    state.add_runner(RUNNER);
    state
}

/// GitLab as self-managed installs have it: two-phase commit off.
fn state() -> State {
    state_with(false, 1)
}

fn request(features: serde_json::Value) -> JobRequest {
    JobRequest {
        token: RUNNER.into(),
        system_id: Some("s_000000000001".into()),
        info: Some(json!({ "name": "gitlab-runner", "features": features })),
    }
}

fn artifact(job_id: u64, sha: u8) -> StoredArtifact {
    StoredArtifact {
        artifact_type: "archive".into(),
        artifact_format: "zip".into(),
        filename: "out.zip".into(),
        size: 10,
        expire_in: None,
        path: PathBuf::from(format!("/nowhere/{job_id}")),
        sha256: [sha; 32],
        storage_key: new_storage_key(),
    }
}

#[test]
fn enqueue_validates_the_spec() {
    let mut state = state();
    let now = Instant::now();
    assert_eq!(
        state.enqueue(JobSpec::new("", &["true"]), now),
        Err(EnqueueError::MissingRunnerToken)
    );
    assert_eq!(
        state.enqueue(JobSpec::new("glrt-other", &["true"]), now),
        Err(EnqueueError::UnknownRunner)
    );
    assert_eq!(
        state.enqueue(JobSpec::new(RUNNER, &[]), now),
        Err(EnqueueError::MissingScript)
    );
    let spec = JobSpec {
        dependencies: vec![99],
        ..JobSpec::new(RUNNER, &["true"])
    };
    assert_eq!(
        state.enqueue(spec, now),
        Err(EnqueueError::UnknownDependency(99))
    );
}

#[test]
fn enqueue_ticks_the_queue_value_and_jobs_come_out_oldest_first() {
    let mut state = state();
    let now = Instant::now();
    let before = state.queue_value(RUNNER).unwrap().to_owned();
    let first = state.enqueue(JobSpec::new(RUNNER, &["one"]), now).unwrap();
    let second = state.enqueue(JobSpec::new(RUNNER, &["two"]), now).unwrap();
    assert_ne!(state.queue_value(RUNNER).unwrap(), before);
    assert!(first.token.starts_with("glcbt-"));

    let req = request(json!({}));
    assert_eq!(
        state.record_request(&req),
        state.queue_value(RUNNER).map(str::to_owned)
    );
    let handout = state.take_job(&req, now).unwrap();
    assert_eq!(handout.payload.job_id, first.id);
    assert_eq!(handout.payload.queue_size, 2, "both jobs were candidates");
    assert_eq!(handout.payload.queue_depth, 1, "the first one was taken");
    assert_eq!(handout.ack_deadline, None);
    assert_eq!(state.job_status(first.id), Some(JobStatus::Running));
    assert_eq!(state.take_job(&req, now).unwrap().payload.job_id, second.id);
    assert!(state.take_job(&req, now).is_none());

    let runner = &state.runner_views()[0];
    assert_eq!(runner.requests, 1);
    assert_eq!(runner.system_ids, vec!["s_000000000001".to_owned()]);
    assert!(runner.last_info.is_some());
    let view = state.job_view(first.id).unwrap();
    assert_eq!(view.system_id.as_deref(), Some("s_000000000001"));
    assert_eq!(view.handouts, 1);
}

#[test]
fn unsupported_jobs_are_dropped_and_the_next_one_is_handed_out() {
    let mut state = state();
    let now = Instant::now();
    let needy = JobSpec {
        required_features: vec!["multi_build_steps".into()],
        ..JobSpec::new(RUNNER, &["true"])
    };
    let dropped = state.enqueue(needy, now).unwrap();
    let plain = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let handout = state
        .take_job(&request(json!({"multi_build_steps": false})), now)
        .unwrap();
    assert_eq!(handout.payload.job_id, plain.id);
    let view = state.job_view(dropped.id).unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("runner_unsupported"));
}

#[test]
fn legacy_gitlab_runs_the_job_at_hand_out_even_for_a_two_phase_runner() {
    let mut state = state();
    let now = Instant::now();
    let job = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let handout = state
        .take_job(&request(json!({"two_phase_job_commit": true})), now)
        .unwrap();
    assert_eq!(handout.ack_deadline, None);
    assert_eq!(state.job_status(job.id), Some(JobStatus::Running));
    let keep_alive = JobUpdate {
        state: "pending".into(),
        ..JobUpdate::default()
    };
    assert_eq!(
        state.update_job(job.id, &job.token, &keep_alive, now),
        UpdateReply::Invalid(JobStatus::Running),
        "GitLab answers 400 to a keep-alive for a job that is not waiting"
    );
}

#[test]
fn two_phase_needs_a_runner_manager() {
    let mut state = state_with(true, 1);
    let now = Instant::now();
    state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let anonymous = JobRequest {
        system_id: None,
        ..request(json!({"two_phase_job_commit": true}))
    };
    assert_eq!(state.take_job(&anonymous, now).unwrap().ack_deadline, None);
}

#[test]
fn unacknowledged_job_fails_and_is_retried_as_a_new_job() {
    let mut state = state_with(true, 1);
    let now = Instant::now();
    let job = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let req = request(json!({"two_phase_job_commit": true}));
    let deadline = state.take_job(&req, now).unwrap().ack_deadline.unwrap();
    assert_eq!(state.job_status(job.id), Some(JobStatus::WaitingForAck));

    let early = deadline - Duration::from_secs(1);
    assert_eq!(
        state.check_ack(job.id, early),
        AckCheck::NotYet(early + WINDOW / 4),
        "the worker comes back a quarter-window later while the key lives"
    );
    let accept = JobUpdate {
        state: "running".into(),
        ..JobUpdate::default()
    };
    assert_eq!(
        state.update_job(job.id, &job.token, &accept, deadline),
        UpdateReply::NotProcessing(JobStatus::WaitingForAck),
        "after expiry, before the worker: 403 with Job-Status pending"
    );
    let value = state.queue_value(RUNNER).unwrap().to_owned();
    let AckCheck::Dropped {
        retried_as: Some(retry),
    } = state.check_ack(job.id, deadline)
    else {
        panic!("the job should have been dropped and retried");
    };
    let view = state.job_view(job.id).unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(
        view.failure_reason.as_deref(),
        Some("runner_provisioning_timeout")
    );
    assert_eq!(view.retried_as, Some(retry));
    assert_ne!(
        state.queue_value(RUNNER).unwrap(),
        value,
        "the retry wakes long polls"
    );

    let again = state.take_job(&req, deadline).unwrap();
    assert_eq!(again.payload.job_id, retry, "a new id, never the old one");
    assert_ne!(again.payload.job_token, job.token);
    assert_eq!(state.job_view(retry).unwrap().retry_of, Some(job.id));
    assert_eq!(view.handouts, 1);

    // The retry is the last one allowed: its own timeout fails it for good.
    let later = deadline + WINDOW;
    assert_eq!(
        state.check_ack(retry, later),
        AckCheck::Dropped { retried_as: None }
    );
}

#[test]
fn keep_alives_hold_a_job_past_the_window() {
    let mut state = state_with(true, 0);
    let now = Instant::now();
    let job = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let req = request(json!({"two_phase_job_commit": true}));
    state.take_job(&req, now).unwrap();
    let keep_alive = JobUpdate {
        state: "pending".into(),
        ..JobUpdate::default()
    };
    let mut at = now;
    for _ in 0..4 {
        at += WINDOW / 2;
        assert_eq!(
            state.update_job(job.id, &job.token, &keep_alive, at),
            UpdateReply::Updated(JobStatus::WaitingForAck)
        );
        assert!(matches!(state.check_ack(job.id, at), AckCheck::NotYet(_)));
    }
    let accept = JobUpdate {
        state: "running".into(),
        ..JobUpdate::default()
    };
    assert_eq!(
        state.update_job(job.id, &job.token, &accept, at),
        UpdateReply::Updated(JobStatus::Running)
    );
    assert_eq!(state.check_ack(job.id, at + WINDOW), AckCheck::Settled);
}

#[test]
fn update_and_trace_check_id_and_token() {
    let mut state = state();
    let now = Instant::now();
    let job = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let running = JobUpdate {
        state: "running".into(),
        ..JobUpdate::default()
    };
    assert_eq!(
        state.update_job(99, &job.token, &running, now),
        UpdateReply::NotFound
    );
    assert_eq!(
        state.update_job(job.id, "glcbt-wrong", &running, now),
        UpdateReply::Forbidden
    );
    assert_eq!(
        state.update_job(job.id, &job.token, &running, now),
        UpdateReply::NotProcessing(JobStatus::Pending)
    );
    assert_eq!(
        state.append_trace(99, &job.token, Some(0), Some(&b"x"[..])),
        TraceReply::NotFound
    );
    assert_eq!(
        state.append_trace(job.id, "nope", Some(0), Some(&b"x"[..])),
        TraceReply::Forbidden
    );
}

#[test]
fn artifact_download_needs_own_token_or_a_running_dependent() {
    let mut state = state();
    let now = Instant::now();
    let producer = state.enqueue(JobSpec::new(RUNNER, &["make"]), now).unwrap();
    let consumer_spec = JobSpec {
        dependencies: vec![producer.id],
        ..JobSpec::new(RUNNER, &["use"])
    };
    let consumer = state.enqueue(consumer_spec, now).unwrap();
    let stranger = state
        .enqueue(JobSpec::new(RUNNER, &["other"]), now)
        .unwrap();

    assert_eq!(
        state.authorize_download(producer.id, &producer.token).err(),
        Some(ArtifactAccess::NotFound),
        "no archive yet"
    );
    state.record_artifact(producer.id, artifact(producer.id, 1));
    assert!(
        state
            .authorize_download(producer.id, &producer.token)
            .is_ok()
    );
    assert_eq!(
        state.authorize_download(producer.id, &consumer.token).err(),
        Some(ArtifactAccess::Forbidden),
        "the consumer is not running yet"
    );
    let req = request(json!({}));
    state.take_job(&req, now).unwrap();
    state.take_job(&req, now).unwrap();
    assert!(
        state
            .authorize_download(producer.id, &consumer.token)
            .is_ok()
    );
    assert_eq!(
        state.authorize_download(producer.id, &stranger.token).err(),
        Some(ArtifactAccess::Forbidden)
    );
    assert_eq!(
        state.authorize_download(producer.id, "glcbt-unknown").err(),
        Some(ArtifactAccess::Forbidden)
    );
}

#[test]
fn second_upload_of_a_type_must_be_identical() {
    let mut state = state();
    let job = state
        .enqueue(JobSpec::new(RUNNER, &["true"]), Instant::now())
        .unwrap();
    assert_eq!(
        state.upload_decision(job.id, "archive", &[1; 32]),
        UploadDecision::Store
    );
    let stored = artifact(job.id, 1);
    let key = stored.storage_key.clone();
    state.record_artifact(job.id, stored);
    assert_eq!(
        state.upload_decision(job.id, "archive", &[1; 32]),
        UploadDecision::Identical
    );
    assert_eq!(
        state.upload_decision(job.id, "archive", &[2; 32]),
        UploadDecision::Conflict
    );
    assert_eq!(state.artifact_by_storage_key(&key).unwrap().size, 10);
    assert!(state.artifact_by_storage_key("nope").is_none());
}

#[test]
fn runners_and_managers() {
    let mut state = state();
    assert_eq!(state.verify_runner(RUNNER, Some("s_1"), None), Some(1));
    assert_eq!(state.verify_runner("glrt-nope", None, None), None);
    assert_eq!(
        state.remove_manager(RUNNER, "s_2"),
        ManagerRemoval::UnknownManager
    );
    assert_eq!(state.remove_manager(RUNNER, "s_1"), ManagerRemoval::Removed);
    assert_eq!(
        state.remove_manager("glrt-nope", "s_1"),
        ManagerRemoval::UnknownRunner
    );
    assert!(state.remove_runner(RUNNER));
    assert!(state.queue_value(RUNNER).is_none());
}

#[test]
fn pipeline_is_inherited_from_the_first_dependency() {
    let mut state = state();
    let now = Instant::now();
    let first = state.enqueue(JobSpec::new(RUNNER, &["a"]), now).unwrap();
    let second = state
        .enqueue(
            JobSpec {
                dependencies: vec![first.id],
                ..JobSpec::new(RUNNER, &["b"])
            },
            now,
        )
        .unwrap();
    let third = state.enqueue(JobSpec::new(RUNNER, &["c"]), now).unwrap();
    let req = request(json!({}));
    let pipelines: Vec<u64> = (0..3)
        .map(|_| state.take_job(&req, now).unwrap().payload.pipeline_id)
        .collect();
    assert_eq!(pipelines[0], pipelines[1]);
    assert_ne!(pipelines[0], pipelines[2]);
    let _ = (second, third);
}
