//! The pipeline look-ahead: with an operator's read-only API token, the autoscaler asks
//! GitLab, when it first sees a pipeline, for that pipeline's jobs still `created` (waiting
//! for an earlier stage): exact future demand, where the learned pipeline shape is a median
//! of earlier pipelines (`core::pipelines`).
//!
//! It is off the hand-out path: a pool's controller asks ([`LookAhead::ask`], which never
//! waits), one worker calls GitLab one pipeline at a time at most [`PER_SECOND`] a second,
//! and each answer waits for the asking pool's next pass ([`LookAhead::take_answers`]). A
//! `429` is waited out as GitLab asks; a `5xx` or a failed connection is retried with a
//! doubling backoff a few times, then that pipeline goes without (the learned forecast
//! stands). The token is checked once at start: one it refuses, or one without `read_api`,
//! is one clear error and the look-ahead stays off; the pools run on without it.
//!
//! The same worker reads, every [`SCHEDULES_EVERY`], each seen project's active pipeline
//! schedules (`schedules`): when GitLab will create their next pipelines.

mod client;
mod schedules;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::client::{
    ApiClient, ApiError, PipelineJob, PipelineSchedule, reads_the_api, stages_to_come,
};
pub use self::schedules::{SCHEDULES_EVERY, ScheduleListing};
use crate::clock::Clock;
use crate::gitlab_api::{FIRST_BACKOFF, next_backoff};

/// Calls a second at most: a few a second is well inside GitLab's default API limits
/// (GitLab.com allows 2,000 a minute to a user), and a pipeline is asked about once.
pub const PER_SECOND: u64 = 2;
/// Pipelines waiting to be asked about; beyond it a pipeline goes without (said at debug).
const QUEUE: usize = 1_024;
/// Pipelines remembered as asked about, so that each is asked once.
const REMEMBERED: usize = 10_000;
/// Tries of one pipeline through outages before it goes without.
const TRIES: u32 = 4;
/// Each call's limit.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What GitLab said is still to come in a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub project: u64,
    pub pipeline: u64,
    /// (stage, jobs `created` in it), in pipeline order.
    pub stages: Vec<(String, u32)>,
}

#[derive(Debug)]
struct Ask {
    pool: String,
    project: u64,
    pipeline: u64,
}

/// The look-ahead of one autoscaler, shared by its pools.
#[derive(Debug)]
pub struct LookAhead {
    client: ApiClient,
    clock: Arc<dyn Clock>,
    sender: mpsc::Sender<Work>,
    receiver: Mutex<Option<mpsc::Receiver<Work>>>,
    asked: Mutex<Asked>,
    answers: Mutex<HashMap<String, Vec<Announcement>>>,
    /// Projects seen, and the pools that saw them: whose schedules are read.
    projects: Mutex<BTreeMap<u64, BTreeSet<String>>>,
    /// Schedules read, for each pool, since it last took them.
    listings: Mutex<HashMap<String, Vec<ScheduleListing>>>,
    /// Projects whose pipelines the token may not read, said once each.
    refused_projects: Mutex<HashSet<u64>>,
}

/// How a call through rate limits and outages ended.
#[derive(Debug)]
enum Called<T> {
    Answered(T),
    /// A 403 or 404 (or an answer not as documented): this project or pipeline goes without.
    Refused(ApiError),
    /// Still rate-limited or unavailable after [`TRIES`].
    NoAnswer,
    /// A 401: GitLab no longer takes the token.
    TokenGone,
}

/// What the worker does next.
#[derive(Debug)]
enum Work {
    /// Read a pipeline's stages to come.
    Ask(Ask),
    /// Read a project first seen's schedules.
    Schedules(u64),
    /// Read every seen project's schedules (every [`SCHEDULES_EVERY`]).
    AllSchedules,
}

/// Pipelines asked about, oldest first, bounded.
#[derive(Debug, Default)]
struct Asked {
    order: VecDeque<(u64, u64)>,
    set: HashSet<(u64, u64)>,
}

impl Asked {
    /// Records `key`; false when it was asked about already.
    fn first_time(&mut self, key: (u64, u64)) -> bool {
        if !self.set.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

impl LookAhead {
    pub fn new(
        gitlab: &url::Url,
        token: crate::secret::Secret,
        clock: Arc<dyn Clock>,
    ) -> reqwest::Result<Arc<Self>> {
        let (sender, receiver) = mpsc::channel(QUEUE);
        Ok(Arc::new(Self {
            client: ApiClient::new(gitlab, token, CALL_TIMEOUT)?,
            clock,
            sender,
            receiver: Mutex::new(Some(receiver)),
            asked: Mutex::default(),
            answers: Mutex::default(),
            projects: Mutex::default(),
            listings: Mutex::default(),
            refused_projects: Mutex::default(),
        }))
    }

    /// Asks, off the caller's path, what is still to come in `project`'s `pipeline`, for
    /// `pool`. Each pipeline is asked about once.
    pub fn ask(&self, pool: &str, project: u64, pipeline: u64) {
        self.saw(pool, project);
        if !lock(&self.asked).first_time((project, pipeline)) {
            return;
        }
        let ask = Ask {
            pool: pool.to_string(),
            project,
            pipeline,
        };
        if self.sender.try_send(Work::Ask(ask)).is_err() {
            tracing::debug!(
                pool,
                project,
                pipeline,
                "look-ahead queue full or stopped; the pipeline goes without"
            );
        }
    }

    /// The answers for `pool` since it last took them.
    pub fn take_answers(&self, pool: &str) -> Vec<Announcement> {
        lock(&self.answers).remove(pool).unwrap_or_default()
    }

    /// Checks the token, then answers the asks until `stop`. A token GitLab refuses, or one
    /// without `read_api`, is said once and the look-ahead ends; GitLab unreachable at start
    /// is retried with a backoff.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let Some(mut receiver) = lock(&self.receiver).take() else {
            return;
        };
        tokio::select! {
            usable = self.check_token() => if !usable { return },
            () = stop.cancelled() => return,
        }
        let gap = Duration::from_millis(1_000 / PER_SECOND);
        let mut schedules = tokio::time::interval(SCHEDULES_EVERY);
        schedules.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let work = tokio::select! {
                work = receiver.recv() => match work { Some(work) => work, None => return },
                _ = schedules.tick() => Work::AllSchedules,
                () = stop.cancelled() => return,
            };
            let done = async {
                match work {
                    Work::Ask(ask) => self.answer(ask).await,
                    Work::Schedules(project) => self.read_schedules(Some(project), gap).await,
                    Work::AllSchedules => self.read_schedules(None, gap).await,
                }
            };
            tokio::select! {
                usable = done => if !usable { return },
                () = stop.cancelled() => return,
            }
            tokio::select! {
                () = tokio::time::sleep(gap) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Whether the token may read pipelines; retried while GitLab does not answer.
    async fn check_token(&self) -> bool {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let wait = match self.client.token_scopes(self.now_s()).await {
                Ok(scopes) if reads_the_api(&scopes) => {
                    tracing::info!(scopes = ?scopes, "pipeline look-ahead on: GitLab's created jobs are read with the API token");
                    return true;
                }
                Ok(scopes) => {
                    tracing::error!(scopes = ?scopes, "the look-ahead API token lacks the read_api scope (or api); the look-ahead is off and the pools run on the learned pipeline forecast");
                    return false;
                }
                Err(ApiError::RateLimited { wait }) => wait,
                Err(ApiError::Unavailable(reason)) => {
                    let wait = next_backoff(&mut backoff);
                    tracing::warn!(%reason, wait_s = wait.as_secs(), "cannot check the look-ahead API token yet; retrying");
                    wait
                }
                Err(e) => {
                    tracing::error!(error = %e, "the look-ahead is off and the pools run on the learned pipeline forecast");
                    return false;
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Asks GitLab about one pipeline, through rate limits and a few outages. False when
    /// GitLab no longer takes the token (revoked or expired since the start: a 401).
    async fn answer(&self, ask: Ask) -> bool {
        let call = || {
            self.client
                .created_jobs(ask.project, ask.pipeline, self.now_s())
        };
        match self.through_faults(call).await {
            Called::Answered(jobs) => {
                let announcement = Announcement {
                    project: ask.project,
                    pipeline: ask.pipeline,
                    stages: stages_to_come(&jobs),
                };
                tracing::debug!(pool = %ask.pool, project = ask.project, pipeline = ask.pipeline, stages = ?announcement.stages, "GitLab announced the pipeline's stages to come");
                lock(&self.answers)
                    .entry(ask.pool)
                    .or_default()
                    .push(announcement);
            }
            Called::Refused(e) => self.refused_project(&ask.pool, ask.project, &e),
            Called::NoAnswer => {
                tracing::debug!(pool = %ask.pool, project = ask.project, pipeline = ask.pipeline, "GitLab's API did not answer about the pipeline; it goes on the learned forecast");
            }
            Called::TokenGone => return false,
        }
        true
    }

    /// Makes `call` through rate limits (waited out as GitLab asks) and a few outages (retried
    /// with a doubling backoff). A 401 means GitLab no longer takes the token (revoked or
    /// expired since the start): said here, once.
    async fn through_faults<T, F, Fut>(&self, call: F) -> Called<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let mut backoff = FIRST_BACKOFF;
        for _ in 0..TRIES {
            let wait = match call().await {
                Ok(answer) => return Called::Answered(answer),
                Err(ApiError::RateLimited { wait }) => wait,
                Err(ApiError::Unavailable(_)) => next_backoff(&mut backoff),
                Err(e @ ApiError::Refused { status, .. }) if status.as_u16() == 401 => {
                    tracing::error!(error = %e, "GitLab no longer takes the look-ahead API token; the look-ahead is off and the pools run on the learned pipeline forecast");
                    return Called::TokenGone;
                }
                Err(e) => return Called::Refused(e),
            };
            tokio::time::sleep(wait).await;
        }
        Called::NoAnswer
    }

    /// `project`, asked about for `pool`, may not be read with the token (403, 404): said
    /// once per project.
    fn refused_project(&self, pool: &str, project: u64, e: &ApiError) {
        let mut refused = lock(&self.refused_projects);
        if refused.len() >= REMEMBERED {
            refused.clear();
        }
        if refused.insert(project) {
            tracing::warn!(pool, project, error = %e, "the look-ahead cannot read this project's pipelines or schedules; its pipelines go on the learned forecast");
        }
    }

    fn now_s(&self) -> u64 {
        self.clock.now() / 1000
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pipeline_is_asked_about_once_within_the_memory_bound() {
        let mut asked = Asked::default();
        assert!(asked.first_time((1, 10)));
        assert!(!asked.first_time((1, 10)));
        for pipeline in 0..REMEMBERED as u64 {
            asked.first_time((2, pipeline));
        }
        assert_eq!(asked.set.len(), REMEMBERED);
        assert!(asked.first_time((1, 10)), "the oldest was forgotten");
    }
}
