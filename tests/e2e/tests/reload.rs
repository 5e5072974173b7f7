//! `SIGHUP` reads the configuration again: a new idle target applies to a running pool without
//! touching its running job; a broken file and a change that needs a restart change nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use autoscaler::core::machine::MachineState;
use autoscaler::reload::ConfigStatus;
use autoscaler::store::MachineRecord;
use e2e::counting::{CountingRig, WITHIN, rig_logging};
use e2e::process::binary;
use e2e::stack::repo_root;
use fake_gitlab::control::JobStatus;

/// Taskscaler's idle strategy, so that the pool holds exactly `idle_count` free slots.
const SCALING: &str = "max_machines = 4\ncapacity_per_machine = 1\nidle_count = 1\nidle_time = \"60s\"\nstrategy = \"idle\"";

/// Rewrites the running autoscaler's file with `edit` applied, and sends `SIGHUP`.
fn reload(r: &CountingRig, edit: impl Fn(String) -> String) -> Result<()> {
    let path = r.autoscaler.config_path();
    let text = std::fs::read_to_string(path)?;
    let edited = edit(text.clone());
    ensure!(edited != text, "the edit changed nothing");
    std::fs::write(path, edited)?;
    r.autoscaler.proc.signal(nix::sys::signal::Signal::SIGHUP)?;
    Ok(())
}

/// Waits until the admin API's `/status` reports reload outcome number `n` (counted over all
/// outcomes through `autoscaler_config_reloads_total`, which counts each once).
async fn reloaded(r: &CountingRig, n: u64) -> Result<ConfigStatus> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let metrics = r
            .autoscaler
            .admin_get("/metrics")
            .send()
            .await?
            .text()
            .await?;
        let counted: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("autoscaler_config_reloads_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if counted >= n as f64 {
            let status: serde_json::Value = r
                .autoscaler
                .admin_get("/status")
                .send()
                .await?
                .json()
                .await?;
            return Ok(serde_json::from_value(status["config"].clone())?);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("reload {n} not reported within {WITHIN:?}:\n{metrics}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the autoscaler's log holds a line with every one of `needles`.
async fn logged(log: &Path, needles: &[&str]) -> Result<String> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let text = std::fs::read_to_string(log)?;
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return Ok(line.to_string());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no log line with {needles:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count(list: &[MachineRecord], state: MachineState) -> usize {
    list.iter().filter(|m| m.state == state).count()
}

fn outcome(status: &ConfigStatus) -> (&str, &[String]) {
    let last = status.last_reload.as_ref();
    (
        last.map_or("", |l| l.outcome.as_str()),
        last.map_or(&[], |l| l.details.as_slice()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_idle_count_applies_on_sighup_while_the_running_job_finishes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("autoscaler.log");
    let r = rig_logging(&[], SCALING, "", &[], Some(&log)).await?;
    // The job waits for this file; the job user is not the test's, so the directory is open.
    let gate = dir.path().join("gate");
    std::fs::create_dir(&gate)?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o777))?;
    let release = gate.join("release");

    r.autoscaler
        .wait_machines(WITHIN, "one idle machine", |l| {
            count(l, MachineState::Ready) == 1
        })
        .await?;
    let wait = format!(
        "until [ -e {} ]; do sleep 0.1; done; echo released",
        release.display()
    );
    let job = r.enqueue(r.job(&[&wait])).await?;
    r.gitlab.wait_started(job, WITHIN).await?;
    r.autoscaler
        .wait_machines(WITHIN, "the busy machine and one idle", |l| {
            count(l, MachineState::Busy) == 1 && count(l, MachineState::Ready) == 1
        })
        .await?;

    reload(&r, |t| t.replace("idle_count = 1", "idle_count = 2"))?;
    let status = reloaded(&r, 1).await?;
    ensure!(
        status.generation == 2
            && outcome(&status)
                == (
                    "applied",
                    &["pools[0].scaling.idle_count: 1 -> 2".to_string()][..]
                ),
        "{status:?}"
    );
    logged(
        &log,
        &[
            "configuration reloaded",
            "pools[0].scaling.idle_count: 1 -> 2",
        ],
    )
    .await?;
    let cli = tokio::process::Command::new(binary("autoscaler")?)
        .args(["status", "--url", &r.autoscaler.admin_url, "--token-file"])
        .arg(r.autoscaler.dir.join("admin.token"))
        .output()
        .await?;
    let shown = String::from_utf8_lossy(&cli.stdout);
    ensure!(
        cli.status.success()
            && shown.contains("configuration: generation 2, last reload")
            && shown.contains("applied (pools[0].scaling.idle_count: 1 -> 2)"),
        "{shown}"
    );
    let list = r
        .autoscaler
        .wait_machines(WITHIN, "the busy machine and two idle", |l| {
            count(l, MachineState::Busy) == 1 && count(l, MachineState::Ready) == 2
        })
        .await?;
    ensure!(
        !list.iter().any(|m| m.state.is_gone()),
        "no machine went for the new policy: {list:?}"
    );

    std::fs::write(&release, "")?;
    let view = r.gitlab.control.wait_final(job, WITHIN).await?;
    let trace = String::from_utf8_lossy(&r.gitlab.control.trace(job).await?).into_owned();
    ensure!(
        view.status == JobStatus::Success && trace.contains("released"),
        "{view:?}\n{trace}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_or_a_change_needing_a_restart_keeps_the_old_configuration() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("autoscaler.log");
    let r = rig_logging(&[], SCALING, "", &[], Some(&log)).await?;
    r.autoscaler
        .wait_machines(WITHIN, "one idle machine", |l| {
            count(l, MachineState::Ready) == 1
        })
        .await?;
    let original = std::fs::read_to_string(r.autoscaler.config_path())?;

    // A value of the wrong type: the problem is logged with its key path, nothing changes.
    reload(&r, |t| t.replace("idle_count = 1", "idle_count = \"two\""))?;
    let status = reloaded(&r, 1).await?;
    ensure!(
        status.generation == 1 && outcome(&status).0 == "invalid",
        "{status:?}"
    );
    ensure!(
        outcome(&status)
            .1
            .iter()
            .any(|d| d.starts_with("pools[0].scaling.idle_count:")),
        "{status:?}"
    );
    logged(
        &log,
        &["configuration problem", "pools[0].scaling.idle_count"],
    )
    .await?;

    // A new provisioner command needs a restart: the whole file is refused, its new idle_count
    // included, with the key named once.
    let counting = repo_root().join("tests/e2e/fixtures/counting-provisioner");
    let plain = repo_root().join("provisioners/local/provisioner");
    let moved = original
        .replace(
            &counting.display().to_string(),
            &plain.display().to_string(),
        )
        .replace("idle_count = 1", "idle_count = 2");
    reload(&r, |_| moved.clone())?;
    let status = reloaded(&r, 2).await?;
    ensure!(
        status.generation == 1
            && outcome(&status)
                == (
                    "refused",
                    &["pools[0].provisioner.command: needs a restart".to_string()][..]
                ),
        "{status:?}"
    );
    logged(&log, &["need a restart", "pools[0].provisioner.command"]).await?;

    // The policy in force was still the first one: the same idle_count change now applies
    // from 1, and the pool converges to it.
    reload(&r, |_| original.replace("idle_count = 1", "idle_count = 2"))?;
    let status = reloaded(&r, 3).await?;
    ensure!(
        status.generation == 2
            && outcome(&status)
                == (
                    "applied",
                    &["pools[0].scaling.idle_count: 1 -> 2".to_string()][..]
                ),
        "{status:?}"
    );
    r.autoscaler
        .wait_machines(WITHIN, "two idle machines", |l| {
            count(l, MachineState::Ready) == 2
        })
        .await
        .context("the applied idle_count")?;
    Ok(())
}
