use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

const RUNNER: &str = "glrt-test";

fn state() -> State {
    let mut state = State::new(Duration::from_secs(120), 1 << 20);
    state.add_runner(RUNNER);
    state
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
    assert_eq!(handout.payload.queue_size, 1);
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
fn unacknowledged_two_phase_job_is_requeued_after_the_window() {
    let mut state = state();
    let now = Instant::now();
    let job = state.enqueue(JobSpec::new(RUNNER, &["true"]), now).unwrap();
    let req = request(json!({"two_phase_job_commit": true}));
    let deadline = state.take_job(&req, now).unwrap().ack_deadline.unwrap();
    assert_eq!(state.job_status(job.id), Some(JobStatus::WaitingForAck));
    let value = state.queue_value(RUNNER).unwrap().to_owned();

    assert_eq!(
        state.check_ack(job.id, deadline - Duration::from_secs(1)),
        AckCheck::NotYet(deadline)
    );
    assert_eq!(state.check_ack(job.id, deadline), AckCheck::Requeued);
    assert_eq!(state.job_status(job.id), Some(JobStatus::Pending));
    assert_ne!(
        state.queue_value(RUNNER).unwrap(),
        value,
        "requeue wakes long polls"
    );

    let again = state.take_job(&req, deadline).unwrap();
    assert_eq!(again.payload.job_id, job.id);
    let accept = JobUpdate {
        state: "running".into(),
        ..JobUpdate::default()
    };
    assert_eq!(
        state.update_job(job.id, &job.token, &accept, deadline),
        UpdateReply::Updated(JobStatus::Running)
    );
    assert_eq!(
        state.check_ack(job.id, deadline + Duration::from_secs(500)),
        AckCheck::Settled
    );
    assert_eq!(state.job_view(job.id).unwrap().handouts, 2);
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
    assert_eq!(state.verify_runner(RUNNER, Some("s_1")), Some(1));
    assert_eq!(state.verify_runner("glrt-nope", None), None);
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
