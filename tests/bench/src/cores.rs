//! Where the benchmark's processes run. On two cores they share them (the figures as a user
//! measures them on a small VM). With 8 cores or more, figures are taken a second time with the
//! fake GitLab, the clients (this process) and the autoscaler each on CPUs of their own, so that
//! the relay's own limit shows: the autoscaler gets a quarter, GitLab a quarter, the clients
//! half (they stand in for many runners).

use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, ensure};

/// Disjoint CPU lists (`taskset -c` syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sets {
    pub gitlab: String,
    pub autoscaler: String,
    pub clients: String,
}

/// The sets in force for processes started now; `None` while they share every core.
static PINNED: Mutex<Option<Sets>> = Mutex::new(None);

/// Cores this process may use.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Disjoint sets for `cores` CPUs, when there are enough to separate the processes.
pub fn split(cores: usize) -> Option<Sets> {
    if cores < 8 {
        return None;
    }
    let quarter = cores / 4;
    let list = |from: usize, to: usize| format!("{from}-{}", to - 1);
    Some(Sets {
        gitlab: list(0, quarter),
        autoscaler: list(quarter, 2 * quarter),
        clients: list(2 * quarter, cores),
    })
}

/// Sets for `--pin-check` on any machine: GitLab on the first CPU, the autoscaler on the last,
/// the clients on all of them. The clients share CPUs with both (and on one CPU all three
/// share it), so the figures say nothing about the relay's own limit; what runs is the pinning
/// itself.
pub fn overlapping(cores: usize) -> Sets {
    let last = cores.saturating_sub(1);
    Sets {
        gitlab: "0".into(),
        autoscaler: last.to_string(),
        clients: format!("0-{last}"),
    }
}

/// Pins this process (all its threads) to `sets.clients` and processes started from now on to
/// theirs; `None` lets everything share every core again.
pub fn pin(sets: Option<&Sets>) -> Result<()> {
    let all = format!("0-{}", available() - 1);
    let mine = sets.map_or(all.as_str(), |s| s.clients.as_str());
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", mine, &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("running taskset")?;
    ensure!(status.success(), "taskset failed: {status}");
    *PINNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = sets.cloned();
    Ok(())
}

/// The CPU list a process of `role` must run on now, if pinned.
pub fn for_gitlab() -> Option<String> {
    current().map(|s| s.gitlab)
}

pub fn for_autoscaler() -> Option<String> {
    current().map(|s| s.autoscaler)
}

fn current() -> Option<Sets> {
    PINNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_machines_share_and_large_ones_split_into_disjoint_sets() {
        assert_eq!(split(2), None);
        assert_eq!(split(7), None);
        assert_eq!(
            split(16),
            Some(Sets {
                gitlab: "0-3".into(),
                autoscaler: "4-7".into(),
                clients: "8-15".into(),
            })
        );
        assert_eq!(
            overlapping(2),
            Sets {
                gitlab: "0".into(),
                autoscaler: "1".into(),
                clients: "0-1".into(),
            },
            "--pin-check on two cores"
        );
    }
}
