//! The whole loop from an empty pool: jobs queue at GitLab, the local provisioner makes
//! machines, sidecars are injected over real SSH, jobs run, idle machines go away.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::counting::{self, CountingRig, WITHIN, all_gone};
use e2e::process::binary;
use e2e::stack::repo_root;

/// A pool on the counting wrapper of the local provisioner, with the given scaling and sidecar
/// keys and extra provisioner environment.
async fn rig(scaling: &str, sidecar: &str, extra_env: &[(&str, &str)]) -> Result<CountingRig> {
    counting::rig_with_sidecar(&[], (scaling, "", sidecar), extra_env, None).await
}

/// Printed by a job: its builds directory, which is its sidecar's own (jobs run as a job user
/// whose home all local machines of a host share).
const PRINT_MACHINE: &str = "echo MACHINE=$CI_BUILDS_DIR";

/// The machine a job ran on, from the line [`PRINT_MACHINE`] printed.
fn machine_of(trace: &str) -> Option<String> {
    trace
        .lines()
        .find_map(|l| l.strip_prefix("MACHINE="))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_jobs_from_zero_machines_never_exceed_the_maximum_and_idle_machines_go() -> Result<()>
{
    let r = rig(
        "max_machines = 3\ncapacity_per_machine = 1\nidle_time = \"3s\"",
        "mode = \"builtin\"\nready_timeout = \"60s\"",
        &[],
    )
    .await?;
    assert!(r.provider_list()?.is_empty());
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(
            r.enqueue_script(&[
                &format!("echo job {i} on $(hostname)"),
                PRINT_MACHINE,
                "sleep 0.2",
            ])
            .await?,
        );
    }
    let mut homes = BTreeSet::new();
    for id in ids {
        let trace = r.finish(id).await?;
        homes.extend(machine_of(&trace));
    }
    let (created, most, _) = r.machine_counts()?;
    ensure!(
        most <= 3,
        "{most} machines existed at once, max_machines is 3"
    );
    ensure!(
        created >= 1 && homes.len() <= created,
        "jobs ran in {} machines, {created} created",
        homes.len()
    );

    // After idle_time, every machine is destroyed and the provider lists none.
    let list = r
        .autoscaler
        .wait_machines(WITHIN, "every machine gone", all_gone)
        .await?;
    for m in &list {
        let states: Vec<MachineState> = m.timeline.iter().map(|t| t.state).collect();
        ensure!(
            states.contains(&MachineState::Ready) && states.last() == Some(&MachineState::Gone),
            "{}: {states:?}",
            m.id
        );
    }
    ensure!(
        r.provider_list()?.is_empty(),
        "the provider still lists machines"
    );
    ensure!(
        r.machine_counts()?.2 == 0,
        "the provisioner's log shows machines alive:\n{}",
        std::fs::read_to_string(&r.count_log)?
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_per_machine_runs_three_jobs_at_once_on_one_machine() -> Result<()> {
    let r = rig(
        "max_machines = 1\ncapacity_per_machine = 3\nidle_time = \"60s\"",
        "mode = \"builtin\"",
        &[],
    )
    .await?;
    let barrier = tempfile::tempdir()?;
    // Jobs run as the unprivileged job user: the barrier must be theirs to write.
    std::fs::set_permissions(
        barrier.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )?;
    let b = barrier.path().display().to_string();
    let mut ids = Vec::new();
    for _ in 0..3 {
        // Each job waits until all three have started: they can only pass if they run together.
        ids.push(
            r.enqueue_script(&[
                &format!("touch {b}/$CI_JOB_ID"),
                &format!("for i in $(seq 1 600); do [ $(ls {b} | wc -l) -ge 3 ] && break; sleep 0.1; done"),
                &format!("[ $(ls {b} | wc -l) -ge 3 ]"),
                PRINT_MACHINE,
            ])
            .await?,
        );
    }
    let mut homes = BTreeSet::new();
    for id in ids {
        homes.extend(machine_of(&r.finish(id).await?));
    }
    ensure!(homes.len() == 1, "the three jobs ran on {homes:?}");
    let (created, most, _) = r.machine_counts()?;
    ensure!(
        (created, most) == (1, 1),
        "one machine expected, {created} created"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_use_count_recycles_a_machine_after_two_jobs() -> Result<()> {
    let r = rig(
        "max_machines = 1\ncapacity_per_machine = 1\nmax_use_count = 2\nidle_time = \"60s\"",
        "mode = \"builtin\"",
        &[],
    )
    .await?;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(r.enqueue_script(&[PRINT_MACHINE]).await?);
    }
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for id in ids {
        let home = machine_of(&r.finish(id).await?).context("no MACHINE line")?;
        *per_machine.entry(home).or_default() += 1;
    }
    ensure!(
        per_machine.len() == 2 && per_machine.values().all(|n| *n == 2),
        "jobs per machine: {per_machine:?}"
    );
    let list = r
        .autoscaler
        .wait_machines(WITHIN, "the used-up machines retired", |l| {
            l.iter()
                .filter(|m| m.state == MachineState::Gone && m.use_count == 2)
                .count()
                >= 1
        })
        .await?;
    let retired = list
        .iter()
        .find(|m| m.state == MachineState::Gone)
        .context("no retired machine")?;
    ensure!(
        retired
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("max_use_count")),
        "{retired:?}"
    );
    Ok(())
}

fn other_host_key(dir: &Path) -> Result<String> {
    let key = dir.join("other");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(&key)
        .status()?;
    ensure!(status.success());
    let public = std::fs::read_to_string(key.with_extension("pub"))?;
    Ok(public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_key_other_than_the_pinned_one_is_refused() -> Result<()> {
    let keys = tempfile::tempdir()?;
    let lie = other_host_key(keys.path())?;
    let r = rig(
        "max_machines = 1\nidle_time = \"60s\"",
        "mode = \"builtin\"",
        &[("LIE_HOST_KEY", &lie)],
    )
    .await?;
    let job = r.enqueue_script(&["echo should not run"]).await?;
    let list = r
        .autoscaler
        .wait_machines(WITHIN, "a machine refused for its host key", |l| {
            l.iter().any(|m| {
                m.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("is pinned: refusing"))
            })
        })
        .await?;
    let refused = list
        .iter()
        .find(|m| m.reason.as_deref().is_some_and(|r| r.contains("is pinned")))
        .context("no refused machine")?;
    ensure!(
        refused.sidecar.is_none(),
        "a sidecar token was given to a machine with the wrong host key"
    );
    let view = r.gitlab.control.job(job).await?;
    ensure!(
        view.trace_bytes == 0,
        "the job ran on a machine with the wrong host key: {view:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_never_polls_fails_its_machine_which_is_replaced() -> Result<()> {
    let r = rig(
        "max_machines = 1\nidle_time = \"60s\"",
        "mode = \"command\"\ncommand = \"sleep 600 # never polls {url} {token}\"\nready_timeout = \"4s\"",
        &[],
    )
    .await?;
    r.enqueue_script(&["echo waiting for a machine"]).await?;
    let list = r
        .autoscaler
        .wait_machines(
            WITHIN,
            "a silent machine failed and a replacement made",
            |l| {
                let failed = l
                    .iter()
                    .any(|m| m.timeline.iter().any(|t| t.state == MachineState::Failed));
                failed && l.len() >= 2
            },
        )
        .await?;
    let first = &list[0];
    ensure!(
        first
            .timeline
            .iter()
            .any(|t| t.reason.as_deref().is_some_and(|r| r.contains("not ready"))),
        "{first:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_mode_runs_another_runner_which_completes_jobs() -> Result<()> {
    let crate_runner = binary("crate-runner")?;
    let sidecar = format!(
        "mode = \"command\"\nbinary = \"{}\"\ncommand = \"{{binary}} {{url}} {{token}} {{concurrency}}\"",
        crate_runner.display()
    );
    let r = rig(
        "max_machines = 1\ncapacity_per_machine = 2\nidle_time = \"60s\"",
        &sidecar,
        &[],
    )
    .await?;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            r.enqueue_script(&[&format!("echo crate runner job {i}")])
                .await?,
        );
    }
    for (i, id) in ids.into_iter().enumerate() {
        let trace = r.finish(id).await?;
        ensure!(
            trace.contains(&format!("crate runner job {i}"))
                && trace.contains("gitlab-runner crate"),
            "{trace}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_runner_mode_writes_a_config_a_runner_can_use() -> Result<()> {
    let bin = tempfile::tempdir()?;
    let shim = bin.path().join("gitlab-runner");
    let text = std::fs::read_to_string(repo_root().join("tests/e2e/fixtures/gitlab-runner-shim"))?
        .replace("__SIDECAR__", &binary("sidecar")?.display().to_string());
    std::fs::write(&shim, text)?;
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&shim)?.permissions(),
        0o755,
    );
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let sidecar = format!(
        "mode = \"gitlab-runner\"\nexecutor = \"shell\"\nbinary = \"{}\"",
        shim.display()
    );
    let r = rig(
        "max_machines = 1\ncapacity_per_machine = 2\nidle_time = \"60s\"",
        &sidecar,
        &[],
    )
    .await?;
    let id = r
        .enqueue_script(&["echo through gitlab-runner mode"])
        .await?;
    ensure!(r.finish(id).await?.contains("through gitlab-runner mode"));
    // What the runner was given: an explicit URL (the autoscaler), its own token, not upstream's.
    let machine = &r.autoscaler.machines().await?[0];
    let config_path = std::fs::read_dir(&r.machines_root)?
        .flatten()
        .map(|e| e.path().join("home/autoscaler-sidecar/config.toml"))
        .find(|p| p.exists())
        .context("no config.toml on the machine")?;
    let config: toml::Value = toml::from_str(&std::fs::read_to_string(&config_path)?)?;
    let runner = &config["runners"][0];
    ensure!(
        runner["url"].as_str() == Some(r.autoscaler.url.as_str()),
        "{runner:?}"
    );
    let token = runner["token"].as_str().unwrap_or("");
    ensure!(
        token.starts_with("glrt-") && token != r.pool.upstream_token,
        "the machine got the wrong token"
    );
    ensure!(
        runner["limit"].as_integer() == Some(2) && config["concurrent"].as_integer() == Some(2)
    );
    ensure!(machine.sidecar.is_some());
    Ok(())
}
