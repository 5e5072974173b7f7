//! Runner tokens and their managers (`system_id`s): adding, verifying, orphaning and removing
//! them, and what the control API shows of each (runner-protocol.md §2).

use std::collections::BTreeSet;

use crate::control::RunnerView;

use super::{Runner, State, random_hex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagerRemoval {
    UnknownRunner,
    UnknownManager,
    Removed,
}

impl State {
    /// Adds a runner token (idempotent).
    pub fn add_runner(&mut self, token: &str) -> RunnerView {
        let next_id = &mut self.next_runner_id;
        self.runners
            .entry(token.to_owned())
            .or_insert_with(|| {
                let id = *next_id;
                *next_id += 1;
                Runner {
                    id,
                    uuid: random_hex(32),
                    queue_value: random_hex(32),
                    requests: 0,
                    system_ids: Vec::new(),
                    last_info: None,
                    pending: BTreeSet::new(),
                    orphaned: None,
                    description: None,
                    tags: Vec::new(),
                }
            })
            .view(token)
    }

    /// `POST /runners/verify`: the runner id, remembering the manager and, as GitLab's
    /// `authenticate_runner!` does for the manager it finds or creates, its `info` (GitLab reads
    /// `features` from it, `cancel_gracefully` among them).
    pub fn verify_runner(
        &mut self,
        token: &str,
        system_id: Option<&str>,
        info: Option<serde_json::Value>,
    ) -> Option<u64> {
        let runner = self.runners.get_mut(token)?;
        runner.remember_system_id(system_id);
        if info.is_some() {
            runner.last_info = info;
        }
        Some(runner.id)
    }

    /// Makes a runner orphaned (`Some(403 | 422)`) or heals it (`None`). `false` if unknown.
    pub fn set_orphaned(&mut self, token: &str, status: Option<u16>) -> bool {
        self.runners
            .get_mut(token)
            .map(|runner| runner.orphaned = status)
            .is_some()
    }

    /// The status GitLab answers an orphaned runner with, if this one is.
    pub fn orphaned(&self, token: &str) -> Option<u16> {
        self.runners.get(token).and_then(|runner| runner.orphaned)
    }

    /// `DELETE /runners`: the runner is gone, its token refused from now on.
    pub fn remove_runner(&mut self, token: &str) -> bool {
        self.runners.remove(token).is_some()
    }

    /// `DELETE /runners/managers`: forgets one `system_id`; the token stays valid.
    pub fn remove_manager(&mut self, token: &str, system_id: &str) -> ManagerRemoval {
        let Some(runner) = self.runners.get_mut(token) else {
            return ManagerRemoval::UnknownRunner;
        };
        let before = runner.system_ids.len();
        runner.system_ids.retain(|known| known != system_id);
        if runner.system_ids.len() == before {
            ManagerRemoval::UnknownManager
        } else {
            ManagerRemoval::Removed
        }
    }

    pub fn runner_view(&self, token: &str) -> Option<RunnerView> {
        self.runners.get(token).map(|runner| runner.view(token))
    }

    pub fn runner_views(&self) -> Vec<RunnerView> {
        self.runners
            .iter()
            .map(|(token, runner)| runner.view(token))
            .collect()
    }
}
