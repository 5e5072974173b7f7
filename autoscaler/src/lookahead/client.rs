//! The three calls of GitLab's REST API the look-ahead makes, with an operator's access token:
//!
//! - `GET /api/v4/personal_access_tokens/self` (GitLab's
//!   `lib/api/personal_access_tokens/self_information.rb`), at start: the token's scopes. It
//!   answers for a personal, project or group access token of any scope.
//! - `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs?scope[]=created` (GitLab's
//!   `lib/api/ci/jobs.rb`, "List pipeline jobs"), for each pipeline first seen: the jobs
//!   still waiting for an earlier stage, a page of 100 at a time (`X-Next-Page`). It needs
//!   `read_api` (or `api`) and a user who may read the project's pipelines (Reporter, or any
//!   member of a public project whose pipelines are public).
//! - `GET /api/v4/projects/:id/pipeline_schedules?scope=active` (GitLab's
//!   `lib/api/ci/pipeline_schedules.rb`, "Get all pipeline schedules"), every few minutes for
//!   each project seen: each active schedule's `next_run_at`. The same token and role read
//!   it (`read_pipeline_schedule`, which GitLab's project policy gives with `read_pipeline`).

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::gitlab_api::{self, error_message, next_page, rate_limit_wait};
use crate::secret::Secret;

/// Jobs per page: GitLab's maximum.
const PER_PAGE: u32 = 100;
/// Pages read of one list: 2,000 jobs, beyond GitLab's own limits of a pipeline's size (and
/// 2,000 schedules of a project).
const MAX_PAGES: u32 = 20;

/// Why a call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A 401 or 403 (or another 4xx no retry mends): the token, its scope or its user.
    #[error("GitLab refused the API token ({status}): {message}")]
    Refused { status: StatusCode, message: String },
    /// A 404: no such project or pipeline, or one the token's user may not see.
    #[error("GitLab knows no such project or pipeline for this token (404): {message}")]
    NotFound { message: String },
    /// A 429: GitLab asks to wait this long.
    #[error("GitLab's API is rate-limiting this token (429); it asks for a wait of {} s", wait.as_secs())]
    RateLimited { wait: Duration },
    /// A 5xx or a failed connection: worth a retry later.
    #[error("GitLab's API did not answer: {0}")]
    Unavailable(String),
    /// A 2xx whose body is not what GitLab's API documents.
    #[error("GitLab's answer is not what its API documents: {0}")]
    BadAnswer(String),
}

/// One job of a pipeline, as far as the look-ahead reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PipelineJob {
    pub id: u64,
    pub stage: String,
}

/// One pipeline schedule, as far as the look-ahead reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PipelineSchedule {
    /// When GitLab creates its next pipeline (at or after it); ISO 8601, UTC.
    pub next_run_at: Option<String>,
    #[serde(default)]
    pub active: bool,
}

impl PipelineSchedule {
    /// `next_run_at` in milliseconds since the epoch, when the schedule is active and the time
    /// reads as GitLab writes it.
    pub fn next_run_ms(&self) -> Option<u64> {
        let at = chrono::DateTime::parse_from_rfc3339(self.next_run_at.as_deref()?).ok()?;
        self.active
            .then(|| u64::try_from(at.timestamp_millis()).ok())
            .flatten()
    }
}

#[derive(Debug, Deserialize)]
struct TokenInfo {
    #[serde(default)]
    scopes: Vec<String>,
}

/// GitLab's REST API at `base`, read with `token`.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: Secret,
}

impl ApiClient {
    pub fn new(base: &url::Url, token: Secret, timeout: Duration) -> reqwest::Result<Self> {
        Ok(Self {
            http: gitlab_api::client(timeout)?,
            base: base.as_str().trim_end_matches('/').to_string(),
            token,
        })
    }

    /// The token's scopes.
    pub async fn token_scopes(&self, now_s: u64) -> Result<Vec<String>, ApiError> {
        let (body, _) = self
            .get("/api/v4/personal_access_tokens/self", now_s)
            .await?;
        let info: TokenInfo =
            serde_json::from_str(&body).map_err(|e| ApiError::BadAnswer(e.to_string()))?;
        Ok(info.scopes)
    }

    /// The jobs of `project`'s `pipeline` that are still `created`, every page of them.
    pub async fn created_jobs(
        &self,
        project: u64,
        pipeline: u64,
        now_s: u64,
    ) -> Result<Vec<PipelineJob>, ApiError> {
        let path = format!("/api/v4/projects/{project}/pipelines/{pipeline}/jobs?scope[]=created");
        self.every_page(&path, now_s).await
    }

    /// `project`'s active pipeline schedules, every page of them.
    pub async fn active_schedules(
        &self,
        project: u64,
        now_s: u64,
    ) -> Result<Vec<PipelineSchedule>, ApiError> {
        let path = format!("/api/v4/projects/{project}/pipeline_schedules?scope=active");
        self.every_page(&path, now_s).await
    }

    /// Every page (up to [`MAX_PAGES`]) of the list at `path`, which has a query already.
    async fn every_page<T: DeserializeOwned>(
        &self,
        path: &str,
        now_s: u64,
    ) -> Result<Vec<T>, ApiError> {
        let mut items = Vec::new();
        let mut page = Some(1);
        while let Some(number) = page.filter(|&n| n <= MAX_PAGES) {
            let path = format!("{path}&per_page={PER_PAGE}&page={number}");
            let (body, next) = self.get(&path, now_s).await?;
            let mut these: Vec<T> =
                serde_json::from_str(&body).map_err(|e| ApiError::BadAnswer(e.to_string()))?;
            items.append(&mut these);
            page = next;
        }
        Ok(items)
    }

    /// One GET: its body and the next page's number.
    async fn get(&self, path: &str, now_s: u64) -> Result<(String, Option<u32>), ApiError> {
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
            .header("PRIVATE-TOKEN", self.token.expose())
            .send()
            .await
            .map_err(|e| ApiError::Unavailable(format!("request failed: {e}")))?;
        let status = answer.status();
        let headers = answer.headers().clone();
        let body = answer
            .text()
            .await
            .map_err(|e| ApiError::Unavailable(format!("the answer was cut: {e}")))?;
        match status {
            s if s.is_success() => Ok((body, next_page(&headers))),
            StatusCode::TOO_MANY_REQUESTS => Err(ApiError::RateLimited {
                wait: rate_limit_wait(&headers, now_s),
            }),
            s if s.is_server_error() => Err(ApiError::Unavailable(s.to_string())),
            StatusCode::NOT_FOUND => Err(ApiError::NotFound {
                message: error_message(&body),
            }),
            status => Err(ApiError::Refused {
                status,
                message: error_message(&body),
            }),
        }
    }
}

/// The stages still to come and their job counts, in pipeline order: a stage's jobs are made
/// when the pipeline is, stage after stage, so the order of their smallest ids is the order
/// of the stages.
pub fn stages_to_come(jobs: &[PipelineJob]) -> Vec<(String, u32)> {
    let mut stages: Vec<(u64, String, u32)> = Vec::new();
    for job in jobs {
        match stages.iter_mut().find(|(_, name, _)| *name == job.stage) {
            Some(stage) => {
                stage.0 = stage.0.min(job.id);
                stage.2 += 1;
            }
            None => stages.push((job.id, job.stage.clone(), 1)),
        }
    }
    stages.sort_by_key(|(first, _, _)| *first);
    stages
        .into_iter()
        .map(|(_, name, jobs)| (name, jobs))
        .collect()
}

/// Whether `scopes` let the token read pipelines' jobs.
pub fn reads_the_api(scopes: &[String]) -> bool {
    scopes.iter().any(|s| s == "read_api" || s == "api")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_come_in_the_order_of_their_first_jobs() {
        let job = |id, stage: &str| PipelineJob {
            id,
            stage: stage.into(),
        };
        let jobs = [
            job(9, "deploy"),
            job(4, "test"),
            job(5, "test"),
            job(8, "deploy"),
        ];
        assert_eq!(
            stages_to_come(&jobs),
            [("test".to_string(), 2), ("deploy".to_string(), 2)]
        );
    }

    #[test]
    fn an_active_schedule_s_next_run_reads_as_gitlab_writes_it() {
        let schedule = |at: &str, active| PipelineSchedule {
            next_run_at: Some(at.into()),
            active,
        };
        assert_eq!(
            schedule("2026-11-28T02:03:00.000Z", true).next_run_ms(),
            Some(1_795_831_380_000)
        );
        assert_eq!(
            schedule("2026-11-28T02:03:00.000Z", false).next_run_ms(),
            None
        );
        assert_eq!(schedule("tomorrow", true).next_run_ms(), None);
    }

    #[test]
    fn read_api_or_api_reads_pipelines() {
        let scopes = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(reads_the_api(&scopes(&["read_api"])));
        assert!(reads_the_api(&scopes(&["read_user", "api"])));
        assert!(!reads_the_api(&scopes(&[
            "read_repository",
            "read_registry"
        ])));
    }
}
