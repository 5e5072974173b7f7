//! The few facts the autoscaler reads from a job payload. The payload itself is handed to the
//! sidecar byte for byte, less one member no machine here can honour ([`without_suspend_options`]);
//! this parse only feeds routing and the token checks of relayed calls.

use serde::Deserialize;

use super::JobId;
use super::pipelines::PipelinePlace;

mod suspend;
pub use suspend::without_suspend_options;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    pub id: JobId,
    pub token: String,
    pub project_id: Option<u64>,
    /// `job_info.queue_size`: the jobs GitLab's queue query found for the runner, this one
    /// included (newer GitLab only; runner-protocol.md).
    pub queue_size: Option<u32>,
    /// `job_info.time_in_queue_seconds`: how long the job was pending at GitLab before it was
    /// handed to the runner, in milliseconds (GitLab sends whole seconds).
    pub queued_at_gitlab_ms: Option<u64>,
    /// `(job id, token)` of every predecessor whose artifacts this job may download.
    pub dependencies: Vec<(JobId, Option<String>)>,
    /// Its pipeline, stage and name, for the pipeline forecast (`core::pipelines`): absent
    /// when the payload does not say all three.
    pub place: Option<PipelinePlace>,
    /// Whether `features.failure_reasons` lists `runner_interrupted` (GitLab turns a reason it
    /// does not list for the job into `unknown_failure`).
    pub runner_interrupted_listed: bool,
}

#[derive(Deserialize)]
struct Payload {
    id: u64,
    token: String,
    #[serde(default)]
    job_info: Option<JobInfo>,
    #[serde(default)]
    dependencies: Option<Vec<Dependency>>,
    #[serde(default)]
    variables: Option<Vec<Variable>>,
    #[serde(default)]
    features: Option<JobFeatures>,
}

/// The payload's `features`: of them, the failure reasons GitLab takes for this job
/// (runner-protocol.md §9).
#[derive(Deserialize)]
struct JobFeatures {
    #[serde(default)]
    failure_reasons: Option<Vec<String>>,
}

/// GitLab's `job_info` (the runner reads the same fields: `common/spec/spec.go`, `JobInfo`, in
/// gitlab-runner v19.3.0). `pipeline_id` is there in recent GitLab; older GitLab says the
/// pipeline only in the `CI_PIPELINE_ID` variable.
#[derive(Deserialize)]
struct JobInfo {
    #[serde(default)]
    project_id: Option<u64>,
    #[serde(default)]
    pipeline_id: Option<u64>,
    #[serde(default)]
    stage: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    queue_size: Option<u64>,
    #[serde(default)]
    time_in_queue_seconds: Option<f64>,
}

#[derive(Deserialize)]
struct Variable {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Deserialize)]
struct Dependency {
    id: u64,
    #[serde(default)]
    token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("the job payload lacks what every job has (id and token): {0}")]
pub struct PayloadError(String);

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // finite, non-negative, and any real wait fits
fn seconds_to_ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round() as u64
}

pub fn parse(payload: &[u8]) -> Result<JobFacts, PayloadError> {
    let p: Payload = serde_json::from_slice(payload).map_err(|e| PayloadError(e.to_string()))?;
    if p.token.is_empty() {
        return Err(PayloadError("empty job token".into()));
    }
    let place = place(&p);
    let runner_interrupted_listed = p
        .features
        .as_ref()
        .and_then(|f| f.failure_reasons.as_ref())
        .is_some_and(|reasons| reasons.iter().any(|r| r == "runner_interrupted"));
    Ok(JobFacts {
        runner_interrupted_listed,
        id: JobId(p.id),
        token: p.token,
        place,
        project_id: p.job_info.as_ref().and_then(|i| i.project_id),
        queued_at_gitlab_ms: p
            .job_info
            .as_ref()
            .and_then(|i| i.time_in_queue_seconds)
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(seconds_to_ms),
        queue_size: p
            .job_info
            .and_then(|i| i.queue_size)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        dependencies: p
            .dependencies
            .unwrap_or_default()
            .into_iter()
            .map(|d| (JobId(d.id), d.token))
            .collect(),
    })
}

/// The job's pipeline, stage and name, when the payload says all three, and whether a
/// pipeline schedule made it (`CI_PIPELINE_SOURCE` is `schedule`).
fn place(p: &Payload) -> Option<PipelinePlace> {
    let info = p.job_info.as_ref()?;
    let variable = |key: &str| {
        p.variables
            .iter()
            .flatten()
            .find(|v| v.key == key)
            .and_then(|v| v.value.as_deref())
    };
    let from_variables = || variable("CI_PIPELINE_ID").and_then(|v| v.parse().ok());
    let pipeline = info
        .pipeline_id
        .filter(|&id| id > 0)
        .or_else(from_variables)?;
    let stage = info.stage.clone().filter(|s| !s.is_empty())?;
    let name = info.name.clone().filter(|n| !n.is_empty())?;
    Some(PipelinePlace {
        pipeline,
        stage,
        name,
        scheduled: variable("CI_PIPELINE_SOURCE") == Some("schedule"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_facts_and_ignores_the_rest() {
        let facts = parse(
            br#"{"id": 12, "token": "glcbt-x", "job_info": {"project_id": 4, "name": "b"},
                 "dependencies": [{"id": 11, "name": "a", "token": "glcbt-x", "artifacts_file": {"filename": "a.zip", "size": 3}}],
                 "variables": [], "unknown": {"deep": [1, 2]}}"#,
        )
        .unwrap();
        assert_eq!(facts.id, JobId(12));
        assert_eq!(facts.project_id, Some(4));
        assert_eq!(facts.queue_size, None, "older GitLab sends no queue_size");
        let with_queue =
            parse(br#"{"id": 1, "token": "t", "job_info": {"queue_size": 7, "queue_depth": 2}}"#);
        assert_eq!(with_queue.unwrap().queue_size, Some(7));
        assert_eq!(
            facts.dependencies,
            vec![(JobId(11), Some("glcbt-x".to_string()))]
        );
    }

    #[test]
    fn reads_where_the_job_sits_in_its_pipeline() {
        let recent = parse(
            br#"{"id": 1, "token": "t", "job_info": {"pipeline_id": 40, "stage": "test", "name": "rspec 1/8"}}"#,
        );
        let place = |pipeline: u64, stage: &str, name: &str| PipelinePlace {
            pipeline,
            stage: stage.into(),
            name: name.into(),
            scheduled: false,
        };
        assert_eq!(recent.unwrap().place, Some(place(40, "test", "rspec 1/8")));
        let older = parse(
            br#"{"id": 1, "token": "t", "job_info": {"stage": "build", "name": "b"},
                 "variables": [{"key": "CI_JOB_ID", "value": "1"}, {"key": "CI_PIPELINE_ID", "value": "41", "public": true}]}"#,
        );
        assert_eq!(older.unwrap().place, Some(place(41, "build", "b")));
        let nameless =
            parse(br#"{"id": 1, "token": "t", "job_info": {"pipeline_id": 40, "stage": "test"}}"#);
        assert_eq!(
            nameless.unwrap().place,
            None,
            "a job without a name is not placed"
        );
        let bare = parse(br#"{"id": 1, "token": "t"}"#);
        assert_eq!(bare.unwrap().place, None);
        let scheduled = parse(
            br#"{"id": 1, "token": "t", "job_info": {"pipeline_id": 42, "stage": "extract", "name": "e"},
                 "variables": [{"key": "CI_PIPELINE_SOURCE", "value": "schedule", "public": true}]}"#,
        );
        let scheduled_place = scheduled.unwrap().place.expect("placed");
        assert!(
            scheduled_place.scheduled,
            "a schedule's pipeline is told apart"
        );
    }

    #[test]
    fn gitlabs_time_in_queue_is_read_in_milliseconds() {
        let facts = parse(br#"{"id": 1, "token": "t", "job_info": {"time_in_queue_seconds": 12}}"#);
        assert_eq!(facts.unwrap().queued_at_gitlab_ms, Some(12_000));
        let absent = parse(br#"{"id": 1, "token": "t", "job_info": {}}"#).unwrap();
        assert_eq!(absent.queued_at_gitlab_ms, None, "older GitLab sends none");
        let negative =
            parse(br#"{"id": 1, "token": "t", "job_info": {"time_in_queue_seconds": -3}}"#);
        assert_eq!(negative.unwrap().queued_at_gitlab_ms, None);
    }

    #[test]
    fn null_dependencies_and_missing_job_info_are_fine() {
        let facts = parse(br#"{"id": 1, "token": "t", "dependencies": null}"#).unwrap();
        assert!(facts.dependencies.is_empty());
        assert_eq!(facts.project_id, None);
    }

    #[test]
    fn a_payload_without_id_or_token_is_refused() {
        assert!(parse(br#"{"token": "t"}"#).is_err());
        assert!(parse(br#"{"id": 1, "token": ""}"#).is_err());
        assert!(parse(b"not json").is_err());
    }
}
