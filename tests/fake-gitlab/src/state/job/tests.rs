use super::*;

fn features(names: &[&str]) -> BTreeMap<String, bool> {
    names.iter().map(|n| ((*n).to_owned(), true)).collect()
}

fn running_job(spec: JobSpec, runner_features: &[&str]) -> Job {
    let now = Instant::now();
    let mut job = Job::new(1, "glcbt-x".into(), spec, 1, "0".repeat(40), now);
    job.hand_out(None, features(runner_features), now, None);
    job
}

fn final_put(state: &str, reason: Option<&str>) -> JobUpdate {
    JobUpdate {
        state: state.into(),
        failure_reason: reason.map(str::to_owned),
        exit_code: Some(1),
        ..JobUpdate::default()
    }
}

#[test]
fn final_put_202_backoff_doubles_then_200() {
    let spec = JobSpec {
        final_put_202: 3,
        ..JobSpec::new("glrt-a", &["true"])
    };
    let mut job = running_job(spec, &[]);
    let now = Instant::now();
    let window = Duration::from_secs(1);
    let replies: Vec<_> = (0..4)
        .map(|_| job.update(&final_put("success", None), now, window))
        .collect();
    assert_eq!(
        replies,
        vec![
            UpdateReply::Accepted {
                status: JobStatus::Running,
                backoff_secs: 1
            },
            UpdateReply::Accepted {
                status: JobStatus::Running,
                backoff_secs: 2
            },
            UpdateReply::Accepted {
                status: JobStatus::Running,
                backoff_secs: 4
            },
            UpdateReply::Updated(JobStatus::Success),
        ]
    );
    assert_eq!(job.final_put_attempts, 4);
    assert_eq!(
        job.update(&final_put("success", None), now, window),
        UpdateReply::NotProcessing(JobStatus::Success)
    );
}

#[test]
fn unknown_failure_reason_is_stored_as_unknown_failure() {
    let mut job = running_job(JobSpec::new("glrt-a", &["false"]), &[]);
    let reply = job.update(
        &final_put("failed", Some("job_canceled")),
        Instant::now(),
        Duration::from_secs(1),
    );
    assert_eq!(reply, UpdateReply::Updated(JobStatus::Failed));
    assert_eq!(job.failure_reason.as_deref(), Some("unknown_failure"));
    assert_eq!(job.exit_code, Some(1));
}

#[test]
fn canceling_ends_canceled_whatever_is_reported() {
    let mut job = running_job(JobSpec::new("glrt-a", &["true"]), &["cancel_gracefully"]);
    assert_eq!(job.cancel(false), JobStatus::Canceling);
    let now = Instant::now();
    assert_eq!(
        job.update(&final_put("running", None), now, Duration::from_secs(1)),
        UpdateReply::Updated(JobStatus::Canceling)
    );
    assert_eq!(
        job.update(&final_put("success", None), now, Duration::from_secs(1)),
        UpdateReply::Updated(JobStatus::Canceled)
    );
    assert_eq!(job.failure_reason, None);
}

#[test]
fn cancel_without_graceful_support_is_immediate() {
    let mut job = running_job(JobSpec::new("glrt-a", &["true"]), &[]);
    assert_eq!(job.cancel(false), JobStatus::Canceled);
    let mut pending = Job::new(
        2,
        "t".into(),
        JobSpec::default(),
        1,
        String::new(),
        Instant::now(),
    );
    assert_eq!(pending.cancel(false), JobStatus::Canceled);
}

#[test]
fn two_phase_ack_states() {
    let now = Instant::now();
    let window = Duration::from_secs(120);
    let mut job = Job::new(1, "t".into(), JobSpec::default(), 1, String::new(), now);
    job.hand_out(
        Some("s_1".into()),
        features(&["two_phase_job_commit"]),
        now,
        Some(window),
    );
    assert_eq!(job.status, JobStatus::WaitingForAck);
    assert_eq!(job.ack_deadline, Some(now + window));

    let later = now + Duration::from_secs(60);
    assert_eq!(
        job.update(&final_put("pending", None), later, window),
        UpdateReply::Updated(JobStatus::WaitingForAck)
    );
    assert_eq!(
        job.ack_deadline,
        Some(later + window),
        "keep-alive extends the window"
    );
    assert_eq!(
        job.update(&final_put("success", None), later, window),
        UpdateReply::Invalid(JobStatus::WaitingForAck)
    );
    assert_eq!(
        job.update(&final_put("running", None), later, window),
        UpdateReply::Updated(JobStatus::Running)
    );
    assert_eq!(job.ack_deadline, None);
    assert_eq!(
        job.update(&final_put("pending", None), later, window),
        UpdateReply::Invalid(JobStatus::Running),
        "a keep-alive for a job that is not waiting is refused with 400"
    );
}

#[test]
fn acceptance_after_the_key_expired_is_refused_as_pending() {
    let now = Instant::now();
    let window = Duration::from_secs(120);
    let mut job = Job::new(1, "t".into(), JobSpec::default(), 1, String::new(), now);
    job.hand_out(Some("s_1".into()), features(&[]), now, Some(window));
    let late = now + window;
    assert_eq!(
        job.update(&final_put("running", None), late, window),
        UpdateReply::NotProcessing(JobStatus::WaitingForAck)
    );
    assert_eq!(JobStatus::WaitingForAck.as_gitlab_str(), "pending");
}

#[test]
fn running_job_is_dropped_after_its_timeout_plus_the_margin() {
    let spec = JobSpec {
        timeout: 10,
        ..JobSpec::default()
    };
    let mut job = running_job(spec, &[]);
    let since = job.running_since.unwrap();
    let margin = Duration::from_secs(5);
    assert!(!job.drop_if_timed_out(since + Duration::from_secs(14), margin));
    assert!(job.drop_if_timed_out(since + Duration::from_secs(15), margin));
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(
        job.failure_reason.as_deref(),
        Some("server_timeout_running")
    );
}

#[test]
fn trace_appends_only_at_the_stored_length() {
    let mut job = running_job(JobSpec::default(), &[]);
    assert_eq!(
        job.append_trace(Some(0), Some(&b"hello "[..]), 100),
        TraceReply::Appended {
            length: 6,
            status: JobStatus::Running
        }
    );
    assert_eq!(
        job.append_trace(Some(3), Some(&b"xx"[..]), 100),
        TraceReply::RangeMismatch {
            length: 6,
            status: JobStatus::Running
        }
    );
    assert_eq!(
        job.append_trace(None, Some(&b"xx"[..]), 100),
        TraceReply::MissingRange
    );
    assert_eq!(
        job.append_trace(Some(6), Some(&b"world"[..]), 100),
        TraceReply::Appended {
            length: 11,
            status: JobStatus::Running
        }
    );
    assert_eq!(job.trace, b"hello world");
    let expected = format!("crc32:{:08x}", crc32fast::hash(b"hello world"));
    assert_eq!(job.trace_checksum(), expected);
}

#[test]
fn trace_over_the_limit_fails_the_job() {
    let mut job = running_job(JobSpec::default(), &[]);
    assert_eq!(
        job.append_trace(Some(0), Some(&b"0123456789"[..]), 5),
        TraceReply::SizeExceeded
    );
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.failure_reason.as_deref(), Some("trace_size_exceeded"));
    assert_eq!(
        job.append_trace(Some(0), Some(&b"x"[..]), 5),
        TraceReply::NotProcessing(JobStatus::Failed)
    );
}

#[test]
fn missing_feature_is_reported() {
    let spec = JobSpec {
        required_features: vec!["refspecs".into(), "multi_build_steps".into()],
        ..JobSpec::default()
    };
    let job = Job::new(1, "t".into(), spec, 1, String::new(), Instant::now());
    assert_eq!(
        job.missing_feature(&features(&["refspecs"])),
        Some("multi_build_steps")
    );
    assert_eq!(
        job.missing_feature(&features(&["refspecs", "multi_build_steps"])),
        None
    );
}
