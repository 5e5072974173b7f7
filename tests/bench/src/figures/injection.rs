//! Sidecar delivery: from the provider saying a machine runs (`booting` in its timeline) to its
//! sidecar's first job request (`ready`), on the local provisioner over loopback, once with the
//! sidecar injected over SSH (upload skipped when the checksum matches, else compressed) and
//! once started from user-data (the machine fetches the binary from the autoscaler). A pool
//! that keeps `MACHINES` idle slots makes its machines without any job.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use autoscaler::core::machine::MachineState;
use autoscaler::store::MachineRecord;

use crate::report::{Row, ms, percentile};
use crate::stack::{Autoscaler, Gitlab};

/// Machines made at once, per way of starting sidecars.
const MACHINES: usize = 3;
/// The target, per machine, on loopback.
const TARGET: Duration = Duration::from_secs(1);
const WITHIN: Duration = Duration::from_secs(120);

pub async fn run(dir: &Path) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let mut rows = Vec::new();
    for (start, label) in [("ssh", "over SSH"), ("user_data", "from user-data")] {
        let upstream = format!("glrt-bench-injection-{start}");
        gitlab.control.add_runner(&upstream).await?;
        let here = dir.join(start);
        let autoscaler = Autoscaler::start(
            &here.join("autoscaler"),
            &config(&gitlab.url, &upstream, start, &here.join("machines")),
        )
        .await?;
        let machines = wait_ready(&autoscaler).await?;
        let mut samples: Vec<Duration> = machines.iter().filter_map(injection).collect();
        let p50 = ms(percentile(&mut samples, 50.0));
        let max = ms(percentile(&mut samples, 100.0));
        let limit = ms(TARGET);
        rows.push(Row {
            figure: "sidecar delivery",
            measure: format!(
                "provider running → first job request, {label}, slowest of {MACHINES} (p50 {p50:.0} ms)"
            ),
            direct: None,
            through: max,
            unit: "ms",
            target: format!("≤ {limit:.0} ms"),
            met: max <= limit,
        });
        drop(autoscaler);
        cleanup(&here.join("machines"));
    }
    Ok(rows)
}

fn config(gitlab_url: &str, upstream: &str, start: &str, machines: &Path) -> String {
    let provisioner = e2e::stack::repo_root().join("provisioners/local/provisioner");
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [state]\ndir = \"state\"\n\n[upstream]\nurl = \"{gitlab_url}\"\n\n\
         [[pools]]\nname = \"bench\"\nupstream_token = \"{upstream}\"\n\n\
         [pools.provisioner]\ncommand = \"{}\"\nenv = {{ LOCAL_ROOT = \"{}\" }}\n\n\
         [pools.scaling]\nmax_machines = {MACHINES}\nidle_count = {MACHINES}\ncapacity_per_machine = 1\n\n\
         [pools.sidecar]\nmode = \"builtin\"\nstart = \"{start}\"\nready_timeout = \"60s\"\n",
        provisioner.display(),
        machines.display(),
    )
}

/// When the provider said running, to when the sidecar first asked for a job.
fn injection(m: &MachineRecord) -> Option<Duration> {
    let at = |state: MachineState| m.timeline.iter().find(|t| t.state == state).map(|t| t.at);
    let running = at(MachineState::Booting)?;
    let polled = at(MachineState::Ready)?;
    Some(Duration::from_millis(polled.saturating_sub(running)))
}

async fn wait_ready(autoscaler: &Autoscaler) -> Result<Vec<MachineRecord>> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let machines: Vec<MachineRecord> =
            reqwest::get(format!("{}/machines", autoscaler.admin_url))
                .await?
                .error_for_status()?
                .json()
                .await
                .context("the admin API's machine list")?;
        let ready = machines.iter().filter(|m| injection(m).is_some()).count();
        if ready >= MACHINES {
            return Ok(machines);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("only {ready} of {MACHINES} machines became ready: {machines:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The local sandboxes outlive the autoscaler (it keeps machines on shutdown): end them.
fn cleanup(root: &Path) {
    drop(e2e::LocalMachinesGuard {
        root: root.to_path_buf(),
    });
}
