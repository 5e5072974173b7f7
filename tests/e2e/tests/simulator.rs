//! The simulator checked against the real service: one bursty workload runs through the real
//! processes (fake GitLab, autoscaler, local provisioner with an injected boot delay, built-in
//! sidecars running `sleep`) and through `autoscaler simulate` with the same pool settings and
//! boot model; job waits (p50, p95) and machines created must agree.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::replay::{MachineWatch, percentile, replay};
use e2e::simcheck::{
    BootingStack, Figures, agree, boot_range, booting_stack, max, min, print_boot_parts,
    print_table, replayed_boots, rounded, simulate_pool, sorted,
};

/// A burst of 24 jobs (more than the pool's 16 slots at once), a trickle of 6 while its
/// machines go (idle_time 10 s), and a second burst of 12 spread over 15 s: 42 jobs.
const WORKLOAD: &str = "description = \"a burst, a trickle, a spread burst\"
start = \"2026-11-24T09:00:00Z\"
length = \"100s\"
seed = 7

[[arrivals]]
from = \"0s\"
to = \"3s\"
jobs = 24
duration = [\"4s\", \"12s\"]

[[arrivals]]
from = \"30s\"
to = \"60s\"
jobs = 6
duration = [\"4s\", \"8s\"]

[[arrivals]]
from = \"70s\"
to = \"85s\"
jobs = 12
duration = [\"4s\", \"12s\"]
";

/// The pool's `[pools.scaling]`, the same in the service's configuration and the policy file.
const SCALING: &str = "max_machines = 8\ncapacity_per_machine = 2\nidle_time = \"10s\"";

/// The creation throttle, written out in both (these are also the service's defaults).
const CREATE_LIMITS: &str = "create_rate = 1.0\ncreate_burst = 5";

/// The local provisioner reports a machine `creating` this long after its create request, as
/// a cloud's machine boots.
const BOOT_DELAY_S: f64 = 4.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_simulator_agrees_with_the_real_service_on_a_bursty_workload() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let workload = dir.path().join("workload.toml");
    std::fs::write(&workload, WORKLOAD)?;
    let jobs = autoscaler::simulate::workload_jobs(&workload)?;
    ensure!(jobs.len() >= 40, "the workload has {} jobs", jobs.len());

    let machines_root = dir.path().join("machines");
    // Dropped after the autoscaler: whatever machines remain then go.
    let _cleanup = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let BootingStack {
        gitlab,
        pool,
        autoscaler,
    } = booting_stack(
        dir.path(),
        &machines_root,
        BOOT_DELAY_S,
        CREATE_LIMITS,
        SCALING,
    )
    .await?;
    let watch = MachineWatch::default();
    let following = watch.follow(&autoscaler);
    let started_ms = e2e::replay::wall_ms();
    let replayed = replay(
        &gitlab,
        &pool.upstream_token,
        &jobs,
        Duration::from_secs(120),
    )
    .await?;
    following.abort();

    let waits: Vec<f64> = replayed.iter().map(|j| j.wait_s()).collect();
    let ready = watch.ready_machines();
    let real = Figures {
        p50: percentile(&waits, 0.50),
        p95: percentile(&waits, 0.95),
        machines: ready.len() as f64,
    };
    eprintln!(
        "jobs: {}, waits (s) sorted: {:?}",
        waits.len(),
        sorted(&waits)
    );

    // The simulator's boot time is create request to a sidecar asking for jobs: the injected
    // delay plus what the service adds (the create call, noticing the machine at a reconcile
    // pass, SSH, injecting the sidecar, its first poll). That part depends on the host and on
    // how many machines boot at once, so it is measured on this run's machines (never on the
    // jobs' waits) and replayed: the n-th machine the simulator makes boots as long as the
    // n-th the service made.
    ensure!(!ready.is_empty(), "no machine became ready");
    let boots: Vec<f64> = ready.iter().map(|m| m.create_to_ready_s).collect();
    let (low, high) = (min(&boots), max(&boots));
    ensure!(
        low >= BOOT_DELAY_S,
        "a machine was ready {low:.1} s after its create request, before its {BOOT_DELAY_S} s boot delay"
    );
    let asked: Vec<f64> = ready
        .iter()
        .map(|m| m.created_at.saturating_sub(started_ms) as f64 / 1000.0)
        .collect();
    eprintln!("machines asked for at (s): {:?}", rounded(&asked));
    eprintln!(
        "create to ready (s), in creation order: {:?}",
        rounded(&boots)
    );
    print_boot_parts(&ready);
    let simulated = simulate_with(dir.path(), &workload, &replayed_boots(&ready))?;
    // For comparison only: boots drawn uniformly from the measured range, and from the delay
    // plus a guessed 3-5 s.
    let uniform = simulate_with(dir.path(), &workload, &boot_range(low, high))?;
    let guessed = simulate_with(
        dir.path(),
        &workload,
        &boot_range(BOOT_DELAY_S + 3.0, BOOT_DELAY_S + 5.0),
    )?;
    print_table(
        &real,
        &simulated,
        &[
            (&format!("uniform {low:.1}-{high:.1} s"), uniform),
            ("delay + 3-5 s", guessed),
        ],
    );
    ensure!(
        agree(&real, &simulated),
        "the simulator disagrees with the real service: real {real:?}, simulated {simulated:?}"
    );
    Ok(())
}

/// Simulates `workload` with the service's pool settings and the `boot` line.
fn simulate_with(dir: &Path, workload: &Path, boot: &str) -> Result<Figures> {
    simulate_pool(dir, workload, SCALING, CREATE_LIMITS, boot)
}
