//! A scenario's running system: the fake GitLab, the autoscaler and a pool of local machines,
//! the jobs queued with their expected output, and the count at the end.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use autoscaler::core::machine::MachineState;
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus};

use crate::LocalMachinesGuard;
use crate::counting::MachineLog;
use crate::stack::{Autoscaler, FakeGitLab, PoolSpec, repo_root};

use super::Figures;

/// How long any job may take to reach its final state once the chaos has stopped.
const SETTLE: Duration = Duration::from_secs(300);
/// How long the provider may take to lose its last machine once every record is gone: several
/// reconcile passes (10 s apart) even when half of the provisioner's `list` calls fail.
const PROVIDER_CLEAN_UP: Duration = Duration::from_secs(90);

/// One job of a scenario: what it prints, so that the bytes can be counted at GitLab.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) id: u64,
    pub(super) lines: Vec<String>,
    pub(super) artifact: Option<Vec<u8>>,
}

/// A running system for one scenario.
pub(super) struct World {
    pub(super) gitlab: FakeGitLab,
    pub(super) autoscaler: Autoscaler,
    pub(super) pool: PoolSpec,
    pub(super) machines_root: PathBuf,
    pub(super) count_log: PathBuf,
    pub(super) _guard: LocalMachinesGuard,
    pub(super) _dir: tempfile::TempDir,
}

pub(super) struct Setup<'a> {
    /// GitLab with two-phase job commit on (its feature flag); off is GitLab's default, where a
    /// job runs from the moment it is handed out.
    pub(super) two_phase: bool,
    pub(super) provisioner: &'a str,
    pub(super) scaling: &'a str,
    pub(super) sidecar: &'a str,
    pub(super) provisioner_timeouts: &'a str,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Self {
            two_phase: false,
            provisioner: "tests/e2e/fixtures/counting-provisioner",
            scaling: "max_machines = 4\ncapacity_per_machine = 2\nidle_time = \"5s\"",
            sidecar: "mode = \"builtin\"\nready_timeout = \"60s\"\nsilence_timeout = \"15s\"",
            provisioner_timeouts: "",
        }
    }
}

pub(super) async fn world(setup: Setup<'_>) -> Result<World> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let count_log = dir.path().join("machines.log");
    std::fs::write(&count_log, "")?;
    let mut args = vec!["--trace-update-interval", "1", "--long-poll", "10s"];
    if setup.two_phase {
        // GitLab's two-minute acknowledgement window, shortened: a job taken but lost in a
        // crash is failed and retried by GitLab sooner.
        args.extend(["--two-phase-commit", "--ack-window", "20s"]);
    }
    let gitlab = FakeGitLab::start(&args).await?;
    let mut pool = PoolSpec::new("chaos");
    pool.tail = format!(
        "assign_ack_timeout = \"20s\"\n\
         [pools.provisioner]\ncommand = \"{}\"\nenv = {{ LOCAL_ROOT = \"{}\", COUNT_LOG = \"{}\" }}\nreconcile_interval = \"1s\"\ncreate_rate = 5.0\n{}\n\n\
         [pools.scaling]\n{}\n\n[pools.sidecar]\n{}\n",
        repo_root().join(setup.provisioner).display(),
        machines_root.display(),
        count_log.display(),
        setup.provisioner_timeouts,
        setup.scaling,
        setup.sidecar,
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"10s\"\nshutdown_grace = \"5s\"",
    )
    .await?;
    Ok(World {
        gitlab,
        autoscaler,
        pool,
        _guard: LocalMachinesGuard {
            root: machines_root.clone(),
        },
        machines_root,
        count_log,
        _dir: dir,
    })
}

impl World {
    /// Queues a job printing `lines` numbered lines (`seconds` apart in total), with a 64 KiB
    /// artifact if asked.
    pub(super) async fn enqueue(
        &self,
        n: usize,
        lines: usize,
        seconds: f64,
        artifact: bool,
    ) -> Result<Planned> {
        let marker = format!("chaos-{n:04}");
        let expected: Vec<String> = (1..=lines)
            .map(|i| format!("{marker} line {i:03} {}", "x".repeat(40)))
            .collect();
        let pause = seconds / lines.max(1) as f64;
        let mut script = vec![format!(
            "for i in $(seq 1 {lines}); do printf '{marker} line %03d {}\\n' $i; sleep {pause:.3}; done",
            "x".repeat(40)
        )];
        let mut spec = JobSpec::new(&self.pool.upstream_token, &[]);
        let content = artifact.then(|| {
            let block: String = (0..1024)
                .map(|i| format!("{marker} {i:05} {}\n", "y".repeat(50)))
                .collect();
            block.into_bytes()
        });
        if content.is_some() {
            script.push(format!(
                "mkdir -p out && for i in $(seq 0 1023); do printf '{marker} %05d {}\\n' $i; done > out/data.txt",
                "y".repeat(50)
            ));
            spec.artifacts = vec![ArtifactSpec {
                paths: vec!["out/".into()],
                ..ArtifactSpec::default()
            }];
        }
        spec.script = script;
        spec.name = marker;
        let id = self.gitlab.control.enqueue(&spec).await?.id;
        Ok(Planned {
            id,
            lines: expected,
            artifact: content,
        })
    }

    /// Machines created and still alive, from the provisioner's own log.
    fn machine_log(&self) -> Result<(usize, BTreeSet<String>)> {
        let log = MachineLog::read(&self.count_log)?;
        Ok((log.created.len(), log.alive))
    }

    /// Machines made so far, and those the provider still has (by the counting log and by the
    /// sandboxes left on disk).
    fn provider_machines(&self) -> Result<(usize, usize)> {
        let (created, alive) = self.machine_log()?;
        let left_dirs = std::fs::read_dir(&self.machines_root)
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0);
        Ok((created, alive.len().max(left_dirs)))
    }

    /// Once every record is gone, the provider may still hold a machine the autoscaler has no
    /// record of: one whose create did its work and then failed, after the pool gave up on it.
    /// The next reconcile pass that lists it destroys it as an orphan, so the provider is
    /// watched until it is empty or `within` passes (what is left then is leaked). There is no
    /// event to wait on: the provider is a directory and a log, read every half second.
    async fn provider_emptied(&self, within: Duration) -> Result<(usize, usize)> {
        let deadline = Instant::now() + within;
        loop {
            let (created, left) = self.provider_machines()?;
            if left == 0 || Instant::now() >= deadline {
                return Ok((created, left));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The final view of the job that ran in `id`'s place: `id` itself, or, where GitLab failed
    /// it for a missed acknowledgement (two-phase commit) and retried it, the retry, followed
    /// to its end. On timeout, the job that never ended and the wait's error.
    async fn ran_in_place_of(
        &self,
        mut id: u64,
    ) -> Result<fake_gitlab::control::JobView, (u64, fake_gitlab::control::ClientError)> {
        loop {
            let view = self
                .gitlab
                .control
                .wait_final(id, SETTLE)
                .await
                .map_err(|e| (id, e))?;
            let missed_ack = view.failure_reason.as_deref() == Some("runner_provisioning_timeout");
            match view.retried_as {
                Some(retry) if missed_ack => id = retry,
                _ => return Ok(view),
            }
        }
    }

    /// What GitLab and the autoscaler each knew of a job that never ended: the evidence a
    /// lost job leaves, printed with the figures so that a failed run can be diagnosed.
    async fn lost_job_report(&self, id: u64, waited: &fake_gitlab::control::ClientError) -> String {
        let held = match self
            .autoscaler
            .admin_get(&format!("/jobs/{id}"))
            .send()
            .await
        {
            Ok(response) => {
                let status = response.status();
                let body = response.text().await.unwrap_or_default();
                format!("{status} {body}")
            }
            Err(e) => format!("admin API unreachable: {e}"),
        };
        format!("lost job {id}: at GitLab: {waited}; at the autoscaler: {held}")
    }

    /// Waits for every job to end, then for every machine to go idle and be destroyed, and
    /// counts. `may_fail`: jobs expected to fail (their machine was killed), by id.
    pub(super) async fn settle(
        &self,
        scenario: &str,
        started: Instant,
        planned: &[Planned],
        may_fail: &BTreeSet<u64>,
    ) -> Result<Figures> {
        let mut f = Figures {
            scenario: scenario.to_string(),
            jobs_submitted: planned.len(),
            ..Figures::default()
        };
        let mut retried = 0;
        for p in planned {
            let view = match self.ran_in_place_of(p.id).await {
                Ok(v) => v,
                Err((id, e)) => {
                    f.jobs_lost += 1;
                    f.notes.push(self.lost_job_report(id, &e).await);
                    continue;
                }
            };
            if view.id != p.id {
                retried += 1;
            }
            *f.by_state
                .entry(view.status.as_str().to_string())
                .or_default() += 1;
            if view.status != JobStatus::Success {
                if !may_fail.contains(&p.id) {
                    f.unexpected_failures.push(format!(
                        "job {} {} ({:?})",
                        p.id,
                        view.status.as_str(),
                        view.failure_reason
                    ));
                }
                continue;
            }
            let trace =
                String::from_utf8_lossy(&self.gitlab.control.trace(view.id).await?).into_owned();
            for line in &p.lines {
                let bytes = line.len() as u64 + 1;
                f.bytes_produced += bytes;
                if trace.contains(&format!("{line}\n")) {
                    f.bytes_received += bytes;
                }
            }
            if let Some(content) = &p.artifact {
                f.artifacts_expected += 1;
                let archive = self.gitlab.control.artifact(view.id, "archive").await?;
                let intact = archive
                    .and_then(|a| crate::unzip(&a).ok())
                    .and_then(|files| files.get("out/data.txt").cloned())
                    .is_some_and(|got| &got == content);
                if intact {
                    f.artifacts_intact += 1;
                }
            }
        }
        if retried > 0 {
            f.notes.push(format!(
                "retried by GitLab  {retried} (acknowledgement missed in a crash: failed as runner_provisioning_timeout, run again as a new job)"
            ));
        }
        // Idle machines go after idle_time; then nothing may be left at the provider.
        let all_gone = |l: &[autoscaler::store::MachineRecord]| {
            l.iter().all(|m| m.state == MachineState::Gone)
        };
        if let Err(e) = self
            .autoscaler
            .wait_machines(Duration::from_secs(120), "every machine gone", all_gone)
            .await
        {
            f.notes.push(format!("not every machine went: {e}"));
        }
        let (created, leaked) = self.provider_emptied(PROVIDER_CLEAN_UP).await?;
        f.machines_created = created;
        f.machines_leaked = leaked;
        f.seconds = started.elapsed().as_secs_f64();
        Ok(f)
    }
}
