//! Reading the seen projects' pipeline schedules: when GitLab will create their next
//! pipelines (`core::pipelines::Schedules` holds a machine ready for each).

use std::time::Duration;

use super::{Called, LookAhead, Work, lock};

/// How often each seen project's schedules are read. A schedule's `next_run_at` moves only
/// when GitLab creates its pipeline or someone edits it, and GitLab's own schedule worker
/// creates scheduled pipelines every ten minutes on a self-managed instance by default: a
/// run is known at least that long ahead unless it was set within the last ten minutes.
pub const SCHEDULES_EVERY: Duration = Duration::from_secs(600);
/// Projects whose schedules are read: as many as the pipeline forecast remembers.
const MAX_PROJECTS: usize = crate::core::pipelines::MAX_PROJECTS;

/// What GitLab listed of one project's active schedules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleListing {
    pub project: u64,
    /// Each active schedule's `next_run_at`, milliseconds since the epoch.
    pub next_runs: Vec<u64>,
}

impl LookAhead {
    /// `pool` saw a job of `project`: its schedules are read now, if it is new to `pool`, and
    /// from then on every [`SCHEDULES_EVERY`] (while fewer than [`MAX_PROJECTS`] are).
    pub(super) fn saw(&self, pool: &str, project: u64) {
        let mut projects = lock(&self.projects);
        if projects.len() >= MAX_PROJECTS && !projects.contains_key(&project) {
            return;
        }
        let pools = projects.entry(project).or_default();
        if pools.contains(pool) {
            return;
        }
        pools.insert(pool.to_string());
        drop(projects);
        if self.sender.try_send(Work::Schedules(project)).is_err() {
            tracing::debug!(
                pool,
                project,
                "look-ahead queue full or stopped; the project's schedules are read at the next round"
            );
        }
    }

    /// The schedules read for `pool` since it last took them.
    pub fn take_schedules(&self, pool: &str) -> Vec<ScheduleListing> {
        lock(&self.listings).remove(pool).unwrap_or_default()
    }

    /// Reads `only` that project's schedules, or every seen project's, `gap` apart. False
    /// when GitLab no longer takes the token.
    pub(super) async fn read_schedules(&self, only: Option<u64>, gap: Duration) -> bool {
        let projects: Vec<(u64, Vec<String>)> = lock(&self.projects)
            .iter()
            .filter(|&(&project, _)| only.is_none_or(|only| only == project))
            .map(|(&project, pools)| (project, pools.iter().cloned().collect()))
            .collect();
        for (project, pools) in projects {
            if !self.read_project_schedules(project, &pools).await {
                return false;
            }
            tokio::time::sleep(gap).await;
        }
        true
    }

    /// One project's schedules, through rate limits and a few outages (else the next round
    /// tries again); a project the token may not read is said once and skipped.
    async fn read_project_schedules(&self, project: u64, pools: &[String]) -> bool {
        let call = || self.client.active_schedules(project, self.now_s());
        match self.through_faults(call).await {
            Called::Answered(schedules) => {
                let next_runs: Vec<u64> =
                    schedules.iter().filter_map(|s| s.next_run_ms()).collect();
                tracing::debug!(
                    project,
                    runs = next_runs.len(),
                    "GitLab listed the project's pipeline schedules"
                );
                let mut listings = lock(&self.listings);
                for pool in pools {
                    listings
                        .entry(pool.clone())
                        .or_default()
                        .push(ScheduleListing {
                            project,
                            next_runs: next_runs.clone(),
                        });
                }
            }
            Called::Refused(e) => {
                let pool = pools.first().map_or("", String::as_str);
                self.refused_project(pool, project, &e);
            }
            Called::NoAnswer => {
                tracing::debug!(
                    project,
                    "GitLab's API did not answer about the project's schedules; read again at the next round"
                );
            }
            Called::TokenGone => return false,
        }
        true
    }
}
