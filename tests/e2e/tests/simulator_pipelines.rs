//! The simulator checked against the real service on pipelines: one project's pipelines (a
//! build job, then three test jobs) are created in the fake GitLab at the workload's times, and
//! the fake releases each test stage when its build succeeds, as GitLab does. They run through
//! the real processes (autoscaler, local provisioner with an injected boot delay, built-in
//! sidecars running `sleep`) and through `autoscaler simulate` with the same pool settings and
//! the boots the service's machines took; job waits (p50, p95, from the moment GitLab made each
//! job pending) and machines created must agree as on the bursty workload (`simulator.rs`).
//! Run alone by `cargo xtask test`, as that one is: both measure waits of seconds.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::replay::{MachineWatch, percentile};
use e2e::replay_pipelines::replay_pipelines;
use e2e::simcheck::{
    BootingStack, Figures, agree, booting_stack, print_table, replayed_boots, rounded,
    simulate_pool, sorted,
};

/// Ten pipelines over 150 s, so that they overlap; each a 15-20 s build, then three 4-8 s test
/// jobs: 40 jobs. (With six pipelines, 24 jobs, the p95 was the second-longest wait, and one
/// job more or less waiting for a boot moved it by more than the agreement allows.) The seed
/// draws no pipeline created within a boot after another's build can end: with seed 11 two
/// pipelines were created within 40 ms of the first build's end in one run in about ten, and
/// which of the two GitLab handed the pool first decided whether the first tests waited a boot
/// (the simulator orders such a tie by its millisecond, the service by its intake's latency).
const WORKLOAD: &str = "description = \"a project's pipelines: a build, then three tests\"
start = \"2026-11-24T09:00:00Z\"
length = \"200s\"
seed = 19

[[pipelines]]
project = \"app\"

[[pipelines.windows]]
from = \"0s\"
to = \"150s\"
pipelines = 10

[[pipelines.stages]]
name = \"build\"
jobs = [\"compile\"]
duration = [\"15s\", \"20s\"]

[[pipelines.stages]]
name = \"test\"
jobs = 3
duration = [\"4s\", \"8s\"]
";

/// The pool's `[pools.scaling]`, the same in the service's configuration and the policy file.
/// The target asks for waits under the boot, so that the pipeline forecast makes machines.
const SCALING: &str =
    "max_machines = 10\ncapacity_per_machine = 1\nidle_time = \"10s\"\ntarget_wait = \"1s\"";

const CREATE_LIMITS: &str = "create_rate = 1.0\ncreate_burst = 5";

/// The local provisioner reports a machine `creating` this long after its create request.
const BOOT_DELAY_S: f64 = 4.0;

/// The fake GitLab's access token the test reads the jobs' pending times with (the
/// autoscaler has none: the simulator does not model the look-ahead).
const API_TOKEN: &str = "glpat-simulator-check";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_simulator_agrees_with_the_real_service_on_overlapping_pipelines() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let workload = dir.path().join("workload.toml");
    std::fs::write(&workload, WORKLOAD)?;
    let pipelines = autoscaler::simulate::workload_pipelines(&workload)?;
    ensure!(
        pipelines.len() == 10,
        "the workload has {} pipelines",
        pipelines.len()
    );

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
    gitlab
        .control
        .add_api_token(API_TOKEN, &["read_api"])
        .await?;
    let watch = MachineWatch::default();
    let following = watch.follow(&autoscaler);
    let runs = replay_pipelines(
        &gitlab,
        &pool.upstream_token,
        API_TOKEN,
        &pipelines,
        Duration::from_secs(120),
    )
    .await?;
    following.abort();

    let waits: Vec<f64> = runs.iter().map(|j| j.wait_s()).collect();
    let tests: Vec<f64> = runs
        .iter()
        .filter(|j| j.stage == "test")
        .map(|j| j.wait_s())
        .collect();
    let ready = watch.ready_machines();
    ensure!(!ready.is_empty(), "no machine became ready");
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
    eprintln!("test jobs' waits (s), in order: {:?}", rounded(&tests));
    let boots: Vec<f64> = ready.iter().map(|m| m.create_to_ready_s).collect();
    eprintln!(
        "create to ready (s), in creation order: {:?}",
        rounded(&boots)
    );

    // The boots the service's machines took, replayed (see simulator.rs).
    let simulated = simulate_with(dir.path(), &workload, &replayed_boots(&ready))?;
    print_table(&real, &simulated, &[]);
    ensure!(
        agree(&real, &simulated),
        "the simulator disagrees with the real service on pipelines: real {real:?}, simulated \
         {simulated:?}"
    );
    Ok(())
}

/// Simulates `workload` with the service's pool settings and the `boot` line.
fn simulate_with(dir: &Path, workload: &Path, boot: &str) -> Result<Figures> {
    simulate_pool(dir, workload, SCALING, CREATE_LIMITS, boot)
}
