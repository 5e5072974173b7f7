//! After the tests: no process a local machine started may outlive the run.
//!
//! The local provisioner marks every process of a machine with `AUTOSCALER_LOCAL_MACHINE=<id>`
//! in its environment, and `destroy` ends them all. A process still carrying the marker once
//! the tests are over is a machine that was never destroyed: a leak the job counts cannot see.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

const MARKER: &[u8] = b"AUTOSCALER_LOCAL_MACHINE=";
/// Destroys run in the background when a test ends; give them this long to finish.
const GRACE: Duration = Duration::from_secs(15);

/// Marked processes now: pid → (machine id, command line).
fn marked() -> Vec<(u32, String, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes may end while we look; unreadable ones are not ours to judge.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let Some(machine) = environ
            .split(|b| *b == 0)
            .find_map(|var| var.strip_prefix(MARKER))
        else {
            continue;
        };
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        found.push((pid, String::from_utf8_lossy(machine).into_owned(), command));
    }
    found
}

/// The marked processes that exist before the tests (left by an earlier, interrupted run).
pub fn before() -> BTreeSet<u32> {
    let pids: BTreeSet<u32> = marked().into_iter().map(|(pid, _, _)| pid).collect();
    if !pids.is_empty() {
        eprintln!(
            "xtask: {} process(es) of local machines from an earlier run are still alive; they are not counted",
            pids.len()
        );
    }
    pids
}

/// Fails if a process of a local machine started during the run is still alive after the grace.
pub fn check(before: &BTreeSet<u32>) -> Result<()> {
    let deadline = Instant::now() + GRACE;
    loop {
        let left: Vec<_> = marked()
            .into_iter()
            .filter(|(pid, _, _)| !before.contains(pid))
            .collect();
        if left.is_empty() {
            eprintln!("xtask: no process of a local machine outlived the tests");
            return Ok(());
        }
        if Instant::now() >= deadline {
            for (pid, machine, command) in &left {
                eprintln!("xtask: leaked: pid {pid} of machine {machine}: {command}");
            }
            bail!(
                "{} process(es) of local machines outlived the tests: a machine was not destroyed",
                left.len()
            );
        }
        // Polling /proc: there is no event for "a process elsewhere ended".
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_process_is_found_with_its_machine_and_an_unmarked_one_is_not() {
        let mut marked_child = std::process::Command::new("sleep")
            .arg("30")
            .env("AUTOSCALER_LOCAL_MACHINE", "local-test-1")
            .spawn()
            .unwrap();
        let mut plain_child = std::process::Command::new("sleep")
            .arg("30")
            .env_remove("AUTOSCALER_LOCAL_MACHINE")
            .spawn()
            .unwrap();
        // The kernel may show a just-spawned child before its new environment is readable
        // (seen once in CI): look again for a while, as `check` does, before judging.
        let deadline = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let found = marked();
            let seen = found.iter().any(|(pid, _, _)| *pid == marked_child.id());
            if seen || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = marked_child.kill();
        let _ = plain_child.kill();
        let _ = marked_child.wait();
        let _ = plain_child.wait();
        assert!(
            found
                .iter()
                .any(|(pid, machine, command)| *pid == marked_child.id()
                    && machine == "local-test-1"
                    && command == "sleep 30"),
            "marked child {} not among {found:?}",
            marked_child.id()
        );
        assert!(!found.iter().any(|(pid, _, _)| *pid == plain_child.id()));
    }
}
