//! One job of GitLab's REST API (`GET /runners/:id/jobs`, GitLab's `JobBasicWithProject`
//! entity, `lib/api/entities/ci/job_basic.rb`) as a line of the simulator's replay format
//! (`simulate::replay`). Pure.
//!
//! GitLab gives `created_at` (the job exists, perhaps waiting for earlier stages),
//! `started_at` (a runner took it), `finished_at`, `duration` (seconds running) and
//! `queued_duration` (seconds it was pending). The replay wants when the job became pending,
//! which is `started_at - queued_duration`; `created_at` would count the wait for earlier
//! stages as queueing.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::Value;

use crate::simulate::replay::{COLUMNS, STATUS};

/// A finished job, ready to be written as a replay line.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayJob {
    pub id: u64,
    pub ready: DateTime<Utc>,
    pub duration_s: f64,
    pub project: String,
    pub pipeline: u64,
    pub stage: String,
    pub name: String,
    /// How it ended, as GitLab names it: `success`, `failed` or `canceled`.
    pub status: &'static str,
}

/// Why a job from the API is left out of the replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// Not finished (running, canceling): its duration is not known yet.
    Unfinished,
    /// Never ran on a runner (canceled or failed while pending).
    NeverStarted,
}

/// The replay job of `job`, or why it is left out; `Err` when GitLab's answer lacks a field
/// the format needs.
pub fn from_api(job: &Value) -> Result<Result<ReplayJob, Skipped>, String> {
    let id = job["id"].as_u64().ok_or("a job without an id")?;
    let field = |name: &str| format!("job {id}: {name}");
    let Some(started) = job["started_at"].as_str() else {
        return Ok(Err(Skipped::NeverStarted));
    };
    let started = parse_time(started).map_err(|e| format!("{}: {e}", field("started_at")))?;
    let Some(duration_s) = job["duration"].as_f64() else {
        return Ok(Err(Skipped::Unfinished));
    };
    if job["finished_at"].is_null() {
        return Ok(Err(Skipped::Unfinished));
    }
    let queued_s = job["queued_duration"].as_f64().unwrap_or(0.0).max(0.0);
    let queued = TimeDelta::milliseconds((queued_s * 1000.0).round() as i64);
    Ok(Ok(ReplayJob {
        id,
        ready: started - queued,
        duration_s: duration_s.max(0.0),
        project: job["project"]["path_with_namespace"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                job["pipeline"]["project_id"]
                    .as_u64()
                    .map(|p| p.to_string())
            })
            .ok_or_else(|| field("project"))?,
        pipeline: job["pipeline"]["id"]
            .as_u64()
            .ok_or_else(|| field("pipeline.id"))?,
        stage: clean(job["stage"].as_str().unwrap_or_default()),
        name: clean(job["name"].as_str().unwrap_or_default()),
        status: ended_as(job["status"].as_str()),
    }))
}

/// A finished job's status as the replay writes it: GitLab's `failed` and `canceled` stop the
/// stages after the job (unless it may fail); any other finished status passed.
fn ended_as(status: Option<&str>) -> &'static str {
    match status {
        Some("failed") => "failed",
        Some("canceled") => "canceled",
        _ => "success",
    }
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{s:?} is not an ISO 8601 time ({e})"))
}

/// A free-text field made safe for a tab-separated line.
fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// The replay file: its header, then the jobs in order of ready time, all of class `class`.
pub fn write(jobs: &mut [ReplayJob], class: &str) -> String {
    jobs.sort_by(|a, b| a.ready.cmp(&b.ready).then(a.id.cmp(&b.id)));
    let mut out = String::from(
        "# exported by `autoscaler history` from GitLab's runner jobs API; ready = started_at - queued_duration\n",
    );
    out.push_str(&COLUMNS.join("\t"));
    out.push('\t');
    out.push_str(STATUS);
    out.push('\n');
    for j in jobs.iter() {
        out.push_str(&format!(
            "{}\t{:.3}\t{}\t{}\t{}\t{}\t{class}\t{}\n",
            j.ready.to_rfc3339_opts(SecondsFormat::Millis, true),
            j.duration_s,
            clean(&j.project),
            j.pipeline,
            clean(&j.stage),
            clean(&j.name),
            j.status,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::simulate::replay;

    fn finished(id: u64, started: &str, queued: f64, duration: f64) -> Value {
        json!({
            "id": id, "status": "success", "stage": "test", "name": format!("rspec {id}/2"),
            "created_at": "2026-11-23T07:59:00.000Z", "started_at": started,
            "finished_at": "2026-11-23T09:00:00.000Z", "duration": duration,
            "queued_duration": queued,
            "pipeline": {"id": 1017, "project_id": 4}, "project": {"path_with_namespace": "web/shop"},
        })
    }

    #[test]
    fn a_job_is_ready_when_it_became_pending_not_when_it_was_created() {
        let job = from_api(&finished(7, "2026-11-23T08:01:30.000Z", 12.5, 270.0))
            .unwrap()
            .unwrap();
        assert_eq!(
            job.ready.to_rfc3339_opts(SecondsFormat::Millis, true),
            "2026-11-23T08:01:17.500Z"
        );
        assert_eq!((job.project.as_str(), job.pipeline), ("web/shop", 1017));
    }

    #[test]
    fn running_and_never_started_jobs_are_left_out() {
        let mut running = finished(1, "2026-11-23T08:00:00Z", 1.0, 1.0);
        running["duration"] = Value::Null;
        running["finished_at"] = Value::Null;
        assert_eq!(from_api(&running).unwrap(), Err(Skipped::Unfinished));
        let mut canceled = finished(2, "2026-11-23T08:00:00Z", 1.0, 1.0);
        canceled["started_at"] = Value::Null;
        assert_eq!(from_api(&canceled).unwrap(), Err(Skipped::NeverStarted));
        assert!(from_api(&json!({"started_at": "x"})).is_err(), "no id");
    }

    #[test]
    fn what_is_written_is_read_back_by_the_simulator_in_order() {
        let mut jobs = vec![
            from_api(&finished(9, "2026-11-23T08:05:00Z", 0.0, 60.0))
                .unwrap()
                .unwrap(),
            from_api(&finished(8, "2026-11-23T08:00:00Z", 30.0, 90.5))
                .unwrap()
                .unwrap(),
        ];
        jobs[0].name = "a\tname".into();
        let mut failed = finished(10, "2026-11-23T08:10:00Z", 0.0, 5.0);
        failed["status"] = json!("failed");
        jobs.push(from_api(&failed).unwrap().unwrap());
        let text = write(&mut jobs, "default");
        let read = replay::parse(&text).unwrap();
        assert_eq!(read.jobs.len(), 3);
        assert_eq!(read.jobs[0].1.runs_for, 90_500);
        assert_eq!(read.jobs[1].1.at - read.jobs[0].1.at, 330_000);
        let failed: Vec<bool> = read
            .jobs
            .iter()
            .map(|(_, j)| j.label.as_ref().unwrap().failed)
            .collect();
        assert_eq!(
            failed,
            [false, false, true],
            "the status is written and read back"
        );
    }
}
