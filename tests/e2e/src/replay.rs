//! A simulator workload replayed against the real service: its jobs reach the fake GitLab at
//! their times on the real clock, each `sleep`s its run time, and what the simulator reports
//! (each job's wait, the machines that became ready) is measured the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use autoscaler::core::machine::MachineState;
use autoscaler::simulate::DrawnJob;
use autoscaler::store::MachineRecord;
use fake_gitlab::control::{JobSpec, JobStatus};

use crate::stack::{Autoscaler, FakeGitLab};

/// The line a replayed job prints first, with the wall time (ms) it started on its machine.
const START_MARK: &str = "replay-started-at-ms";

/// One replayed job: when it reached GitLab and when it started (wall clock, ms).
#[derive(Debug, Clone)]
pub struct Replayed {
    pub id: u64,
    pub arrived_ms: u64,
    pub started_ms: u64,
}

impl Replayed {
    pub fn wait_s(&self) -> f64 {
        self.started_ms.saturating_sub(self.arrived_ms) as f64 / 1000.0
    }
}

pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Enqueues every job for `runner_token` at its time after now, then waits for each to
/// succeed (within `within` of the last arrival) and reads its start from its trace.
pub async fn replay(
    gitlab: &FakeGitLab,
    runner_token: &str,
    jobs: &[DrawnJob],
    within: Duration,
) -> Result<Vec<Replayed>> {
    let start = tokio::time::Instant::now();
    let mut enqueued = Vec::new();
    for job in jobs {
        tokio::time::sleep_until(start + job.after).await;
        let script = [
            start_mark_line(),
            format!("sleep {:.3}", job.runs_for.as_secs_f64()),
        ];
        let script: Vec<&str> = script.iter().map(String::as_str).collect();
        let id = gitlab
            .control
            .enqueue(&JobSpec::new(runner_token, &script))
            .await?
            .id;
        enqueued.push((id, wall_ms()));
    }
    let mut replayed = Vec::new();
    for (id, arrived_ms) in enqueued {
        let view = gitlab.control.wait_final(id, within).await?;
        let trace = String::from_utf8_lossy(&gitlab.control.trace(id).await?).into_owned();
        ensure!(
            view.status == JobStatus::Success,
            "job {id}: {view:?}\n{trace}"
        );
        replayed.push(Replayed {
            id,
            arrived_ms,
            started_ms: started_at(&trace).with_context(|| format!("job {id}: {trace}"))?,
        });
    }
    Ok(replayed)
}

/// The script line that prints when the job started on its machine, for [`started_at`].
pub fn start_mark_line() -> String {
    format!("echo \"{START_MARK} $(date +%s%3N)\"")
}

/// The start time a job printed: its output line (not the echoed command) `START_MARK <ms>`.
pub fn started_at(trace: &str) -> Result<u64> {
    for line in trace.lines() {
        if let Some(rest) = line.trim_start().strip_prefix(START_MARK)
            && let Ok(ms) = rest.trim().parse()
        {
            return Ok(ms);
        }
    }
    bail!("no {START_MARK} line in the trace")
}

/// Nearest-rank percentile to the tenth of a second, as the simulator's report computes it.
pub fn percentile(waits: &[f64], q: f64) -> f64 {
    let mut sorted = waits.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted
        .get(rank - 1)
        .map_or(0.0, |w| (w * 10.0).round() / 10.0)
}

/// A machine that became ready during a run.
#[derive(Debug, Clone)]
pub struct ReadyMachine {
    pub id: String,
    /// When the autoscaler decided to create it (wall clock, ms).
    pub created_at: u64,
    /// From the decision to create it to its sidecar asking for jobs: the simulator's boot time.
    pub create_to_ready_s: f64,
    /// Seconds of that spent in each state on the way (`requested`, `creating`, ...).
    pub parts: BTreeMap<String, f64>,
}

/// Every machine the autoscaler showed during a run, as last seen: followed through the admin
/// API's long poll, so that machines already gone at the end are counted too.
#[derive(Debug, Clone, Default)]
pub struct MachineWatch {
    seen: Arc<Mutex<BTreeMap<String, MachineRecord>>>,
}

impl MachineWatch {
    /// Follows `autoscaler`'s machines until the returned task is aborted.
    pub fn follow(&self, autoscaler: &Autoscaler) -> tokio::task::JoinHandle<()> {
        let seen = Arc::clone(&self.seen);
        let admin_url = autoscaler.admin_url.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut after = 0u64;
            loop {
                let url = format!("{admin_url}/machines?after={after}&timeout_ms=5000");
                let Ok(response) = client.get(url).send().await else {
                    return;
                };
                after = response
                    .headers()
                    .get("x-version")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(after);
                let Ok(list) = response.json::<Vec<MachineRecord>>().await else {
                    return;
                };
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                for m in list {
                    seen.insert(m.id.clone(), m);
                }
            }
        })
    }

    /// The machines that became ready (took jobs), the simulator's "machines created", in the
    /// order they were asked for.
    pub fn ready_machines(&self) -> Vec<ReadyMachine> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut ready: Vec<ReadyMachine> = seen
            .values()
            .filter_map(|m| {
                let ready = m
                    .timeline
                    .iter()
                    .find(|t| t.state.takes_jobs())
                    .map(|t| t.at)?;
                let mut parts = BTreeMap::new();
                for pair in m.timeline.windows(2) {
                    if pair[0].at < ready && pair[0].state != MachineState::Ready {
                        *parts.entry(pair[0].state.to_string()).or_insert(0.0) +=
                            pair[1].at.saturating_sub(pair[0].at) as f64 / 1000.0;
                    }
                }
                Some(ReadyMachine {
                    id: m.id.clone(),
                    created_at: m.created_at,
                    create_to_ready_s: ready.saturating_sub(m.created_at) as f64 / 1000.0,
                    parts,
                })
            })
            .collect();
        ready.sort_by_key(|m| m.created_at);
        ready
    }
}
