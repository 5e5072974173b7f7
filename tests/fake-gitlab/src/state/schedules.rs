//! Pipeline schedules as GitLab's REST API lists them (`Ci::PipelineSchedulesFinder`: a
//! project's schedules, `active` or `inactive` ones with `scope`, newest first, `id DESC`).
//! The fake keeps what a test set and never runs a schedule itself.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::entities::{rfc3339, user_json};
use super::pipeline_jobs::ProjectRef;
use super::{ApiRefusal, Render, State};
use crate::control::ScheduleSpec;

/// One schedule a test set.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    id: u64,
    spec: ScheduleSpec,
    created_at: SystemTime,
}

impl State {
    /// Keeps `spec` as a schedule of its project (which exists from now on); its id.
    pub fn add_schedule(&mut self, spec: ScheduleSpec, now: SystemTime) -> u64 {
        let id = self.schedules.last().map_or(1, |s| s.id + 1);
        self.projects
            .entry(spec.project_id)
            .or_insert_with(|| spec.project_path.clone());
        self.schedules.push(Schedule {
            id,
            spec,
            created_at: now,
        });
        id
    }

    /// `project`'s schedules in `scope` (`None`: all), newest first, as GitLab's
    /// `Entities::Ci::PipelineSchedule`. `404 Project Not Found` for an unknown project.
    pub fn schedule_entities(
        &self,
        project: &ProjectRef,
        scope: Option<&str>,
        render: &Render,
    ) -> Result<Vec<Value>, ApiRefusal> {
        let project_id = self
            .find_project(project)
            .ok_or(ApiRefusal::ProjectNotFound)?;
        Ok(self
            .schedules
            .iter()
            .rev()
            .filter(|s| s.spec.project_id == project_id)
            .filter(|s| match scope {
                Some("active") => s.spec.active,
                Some("inactive") => !s.spec.active,
                _ => true,
            })
            .map(|s| schedule_json(s, render))
            .collect())
    }
}

fn schedule_json(s: &Schedule, render: &Render) -> Value {
    let created_at = rfc3339(s.created_at);
    json!({
        "id": s.id,
        "description": s.spec.description,
        "ref": s.spec.git_ref,
        "cron": s.spec.cron,
        "cron_timezone": s.spec.cron_timezone,
        "next_run_at": s.spec.next_run_at,
        "active": s.spec.active,
        "created_at": created_at,
        "updated_at": created_at,
        "owner": user_json(render),
    })
}
