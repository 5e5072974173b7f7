//! What the simulator-against-the-service checks share: the service they run on, the figures
//! compared, the agreement they must reach, `autoscaler simulate` run on a policy file, and
//! the boots the service's machines took, written for the simulator to replay.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};

use crate::process::binary;
use crate::replay::ReadyMachine;
use crate::stack::{Autoscaler, FakeGitLab, PoolSpec};

/// The service a check runs on: a fake GitLab and an autoscaler with one local pool, `local`,
/// whose machines report `creating` for `boot_delay_s` after each create request and run the
/// built-in sidecar. Drop the autoscaler before the machines' guard.
#[derive(Debug)]
pub struct BootingStack {
    pub gitlab: FakeGitLab,
    pub pool: PoolSpec,
    pub autoscaler: Autoscaler,
}

/// Starts a [`BootingStack`] under `dir`, its machines under `machines_root`, the pool's
/// `[pools.scaling]` being `scaling` and its creation throttle `create_limits`.
pub async fn booting_stack(
    dir: &Path,
    machines_root: &Path,
    boot_delay_s: f64,
    create_limits: &str,
    scaling: &str,
) -> Result<BootingStack> {
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::local_booting(
        "local",
        machines_root,
        boot_delay_s,
        create_limits,
        scaling,
        "mode = \"builtin\"\nready_timeout = \"60s\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"10s\"",
    )
    .await?;
    Ok(BootingStack {
        gitlab,
        pool,
        autoscaler,
    })
}

/// What is compared: the jobs' waits and the machines that became ready.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub p50: f64,
    pub p95: f64,
    pub machines: f64,
}

/// Agreement: within 20 % of the simulated figure or `floor`, whichever is larger.
pub fn close_enough(real: f64, simulated: f64, floor: f64) -> bool {
    (real - simulated).abs() <= (0.2 * simulated).max(floor)
}

/// p50 and p95 within 20 % or 2 s, machines within 20 % or 1 machine.
pub fn agree(real: &Figures, simulated: &Figures) -> bool {
    close_enough(real.p50, simulated.p50, 2.0)
        && close_enough(real.p95, simulated.p95, 2.0)
        && close_enough(real.machines, simulated.machines, 1.0)
}

/// `boot_times = [...]`: the n-th machine the simulator makes boots as long as the n-th the
/// service made (create request to its sidecar asking for jobs).
pub fn replayed_boots(ready: &[ReadyMachine]) -> String {
    let boots = ready
        .iter()
        .map(|m| format!("\"{}ms\"", (m.create_to_ready_s * 1000.0).round()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("boot_times = [{boots}]")
}

/// `boot_time = [low, high]`: boots drawn uniformly.
pub fn boot_range(low: f64, high: f64) -> String {
    format!(
        "boot_time = [\"{}ms\", \"{}ms\"]",
        (low * 1000.0).round(),
        (high * 1000.0).round()
    )
}

/// Simulates `workload` on a policy file in `dir` of one pool with the service's `scaling`
/// (`[pools.scaling]` lines), its creation limits and the `boot` line.
pub fn simulate_pool(
    dir: &Path,
    workload: &Path,
    scaling: &str,
    create_limits: &str,
    boot: &str,
) -> Result<Figures> {
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[pools]]\nname = \"default\"\n\n[pools.scaling]\n{scaling}\n\n\
             [pools.provisioner]\n{boot}\n{create_limits}\n"
        ),
    )?;
    simulate(workload, &policy)
}

/// `autoscaler simulate WORKLOAD --policy FILE`: its report's totals.
pub fn simulate(workload: &Path, policy: &Path) -> Result<Figures> {
    let output = std::process::Command::new(binary("autoscaler")?)
        .arg("simulate")
        .arg(workload)
        .arg("--policy")
        .arg(policy)
        .output()?;
    ensure!(
        output.status.success(),
        "autoscaler simulate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Empty unless RUST_LOG asks for the simulated planner's decisions.
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    // The report's top level is the total over pools.
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let number = |v: &serde_json::Value| v.as_f64().context("not a number in the report");
    Ok(Figures {
        p50: number(&report["wait_seconds"]["p50"])?,
        p95: number(&report["wait_seconds"]["p95"])?,
        machines: number(&report["machines_created"])?,
    })
}

/// Prints real and simulated figures side by side, with any comparison columns.
pub fn print_table(real: &Figures, simulated: &Figures, others: &[(&str, Figures)]) {
    let heads: String = others
        .iter()
        .map(|(name, _)| format!(" | {name:>17}"))
        .collect();
    eprintln!("                   real  simulated{heads}");
    let row = |what: &str, f: fn(&Figures) -> f64| {
        let cells: String = others
            .iter()
            .map(|(_, o)| format!(" | {:>17.1}", f(o)))
            .collect();
        eprintln!("{what:<16} {:>6.1} {:>10.1}{cells}", f(real), f(simulated));
    };
    row("wait p50 (s)", |f| f.p50);
    row("wait p95 (s)", |f| f.p95);
    row("machines created", |f| f.machines);
}

/// Where the machines' create-to-ready went, state by state (fastest and slowest machine).
pub fn print_boot_parts(ready: &[ReadyMachine]) {
    let mut parts: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for m in ready {
        for (state, seconds) in &m.parts {
            parts.entry(state).or_default().push(*seconds);
        }
    }
    for (state, seconds) in parts {
        eprintln!(
            "  in {state:<10} {:.1}-{:.1} s",
            min(&seconds),
            max(&seconds)
        );
    }
}

pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// To a tenth, sorted.
pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut s = rounded(values);
    s.sort_by(f64::total_cmp);
    s
}

/// To a tenth.
pub fn rounded(values: &[f64]) -> Vec<f64> {
    values.iter().map(|v| (v * 10.0).round() / 10.0).collect()
}
