//! A simulator workload's pipelines replayed against the real service: each pipeline is created
//! in the fake GitLab at its time on the real clock, which releases its stages as GitLab does;
//! each job `sleep`s its run time. A job's wait is measured from the moment GitLab made it
//! pending (read back from GitLab's REST API: `started_at - queued_duration`) to its start on
//! a machine (its trace's first line), the simulator's wait.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use autoscaler::simulate::DrawnPipeline;
use fake_gitlab::control::{CreatedPipeline, JobSpec, JobStatus};
use serde_json::Value;

use crate::replay::{start_mark_line, started_at};
use crate::stack::FakeGitLab;

/// One replayed job of a pipeline: when GitLab made it pending and when it started (wall
/// clock, ms).
#[derive(Debug, Clone)]
pub struct PipelineJobRun {
    pub id: u64,
    pub stage: String,
    pub pending_ms: u64,
    pub started_ms: u64,
}

impl PipelineJobRun {
    pub fn wait_s(&self) -> f64 {
        self.started_ms.saturating_sub(self.pending_ms) as f64 / 1000.0
    }
}

/// Creates every pipeline for `runner_token` at its time after now, waits for each job to
/// succeed (within `within` of the last creation), and reads each job's pending time back
/// with `api_token` (which the fake GitLab must know, with `read_api`).
pub async fn replay_pipelines(
    gitlab: &FakeGitLab,
    runner_token: &str,
    api_token: &str,
    pipelines: &[DrawnPipeline],
    within: Duration,
) -> Result<Vec<PipelineJobRun>> {
    let start = tokio::time::Instant::now();
    let mut created: Vec<(u64, CreatedPipeline)> = Vec::new();
    for pipeline in pipelines {
        tokio::time::sleep_until(start + pipeline.after).await;
        let project = project_id(&pipeline.project);
        let stages = pipeline
            .stages
            .iter()
            .map(|(stage, jobs)| {
                jobs.iter()
                    .map(|(name, runs_for)| job_spec(runner_token, project, stage, name, *runs_for))
                    .collect()
            })
            .collect();
        created.push((project, gitlab.control.create_pipeline(stages).await?));
    }
    let mut runs = Vec::new();
    for (project, pipeline) in &created {
        let mut traces = Vec::new();
        for job in pipeline.stages.iter().flatten() {
            let view = gitlab.control.wait_final(job.id, within).await?;
            let trace = String::from_utf8_lossy(&gitlab.control.trace(job.id).await?).into_owned();
            ensure!(view.status == JobStatus::Success, "{view:?}\n{trace}");
            traces.push((job.id, started_at(&trace)?));
        }
        // Read once the pipeline ended: a job still running has no queued_duration yet.
        let times = pending_times(gitlab, api_token, *project, pipeline.id).await?;
        for (id, started_ms) in traces {
            let (stage, pending_ms) = times
                .iter()
                .find(|(listed, _, _)| *listed == id)
                .map(|(_, stage, at)| (stage.clone(), *at))
                .with_context(|| format!("GitLab's API does not list job {id}"))?;
            runs.push(PipelineJobRun {
                id,
                stage,
                pending_ms,
                started_ms,
            });
        }
    }
    Ok(runs)
}

fn job_spec(token: &str, project: u64, stage: &str, name: &str, runs_for: Duration) -> JobSpec {
    let script = [
        start_mark_line(),
        format!("sleep {:.3}", runs_for.as_secs_f64()),
    ];
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let mut spec = JobSpec::new(token, &script);
    spec.stage = stage.into();
    spec.name = name.into();
    spec.project_id = project;
    spec
}

/// A stable numeric project id for a workload's project name.
fn project_id(name: &str) -> u64 {
    name.bytes().fold(1_000u64, |id, b| {
        id.wrapping_mul(31).wrapping_add(u64::from(b))
    }) % 1_000_000
}

/// (job id, stage, when it became pending in ms) of every job of a finished pipeline, from
/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs`: `started_at - queued_duration`.
async fn pending_times(
    gitlab: &FakeGitLab,
    api_token: &str,
    project: u64,
    pipeline: u64,
) -> Result<Vec<(u64, String, u64)>> {
    let url = format!(
        "{}/api/v4/projects/{project}/pipelines/{pipeline}/jobs?per_page=100",
        gitlab.url
    );
    let jobs: Vec<Value> = reqwest::Client::new()
        .get(&url)
        .header("PRIVATE-TOKEN", api_token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    jobs.iter()
        .map(|job| {
            let id = job["id"].as_u64().context("a job without an id")?;
            let started = job["started_at"].as_str().context("not started")?;
            let started = chrono::DateTime::parse_from_rfc3339(started)?.timestamp_millis();
            let queued = job["queued_duration"]
                .as_f64()
                .context("no queued_duration")?;
            let pending = started - (queued * 1000.0).round() as i64;
            let stage = job["stage"].as_str().unwrap_or_default().to_string();
            Ok((id, stage, u64::try_from(pending)?))
        })
        .collect()
}
