//! The store's disk fills while jobs arrive: the autoscaler's state directory is a small tmpfs
//! (mounted by the test; it runs as root, as CI does), filled up after a first job started.
//! Jobs that can no longer be made durable are not handed out, GitLab gets them back
//! unacknowledged (with two-phase commit it fails them as `runner_provisioning_timeout`), the
//! error is logged once, and the job already running keeps being relayed to its end.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, register_sidecar};
use fake_gitlab::control::{JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(60);
/// The log line the autoscaler writes when the store first fails in an episode.
const STORE_ERROR: &str = "the store cannot write";

/// A tmpfs of `size` mounted on `dir`, unmounted on drop.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()?;
        ensure!(
            status.success(),
            "mount tmpfs on {} failed (root needed)",
            dir.display()
        );
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// Writes a file until the filesystem is full.
    fn fill(&self) -> Result<()> {
        let mut file = std::fs::File::create(self.dir.join("filler"))?;
        let chunk = vec![0xa5u8; 16 * 1024];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily, in case a process of a failed test still holds a file open there.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

struct Runner {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Runner {
    /// One long-polled job request: the job, or `None` for `204`.
    async fn request_job(&self) -> Result<Option<Value>> {
        let answer = self
            .http
            .post(format!("{}/api/v4/jobs/request", self.url))
            .json(&json!({"token": self.token, "info": {"name": "disk-full"}}))
            .send()
            .await?;
        match answer.status() {
            StatusCode::CREATED => Ok(Some(answer.json().await?)),
            StatusCode::NO_CONTENT => Ok(None),
            other => bail!("job request answered {other}"),
        }
    }

    async fn update(&self, job: &Value, state: &str) -> Result<StatusCode> {
        let id = job["id"].as_u64().context("job without id")?;
        Ok(self
            .http
            .put(format!("{}/api/v4/jobs/{id}", self.url))
            .json(&json!({"token": job["token"], "state": state}))
            .send()
            .await?
            .status())
    }

    async fn patch_trace(&self, job: &Value, text: &str) -> Result<StatusCode> {
        let id = job["id"].as_u64().context("job without id")?;
        Ok(self
            .http
            .patch(format!("{}/api/v4/jobs/{id}/trace", self.url))
            .header("Job-Token", job["token"].as_str().context("no token")?)
            .header("Content-Range", format!("0-{}", text.len() - 1))
            .body(text.to_string())
            .send()
            .await?
            .status())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gives_new_jobs_back_and_keeps_relaying_running_ones() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("autoscaler");
    let disk = SmallDisk::mount(&home.join("state"), "4m")?;
    let gitlab = FakeGitLab::start(&["--two-phase-commit", "--ack-window", "3s"]).await?;
    let pool = PoolSpec::new("full");
    gitlab.add_runner(&pool.upstream_token).await?;
    let log = dir.path().join("autoscaler.log");
    let script = format!("exec \"$0\" \"$@\" 2>>{}", log.display());
    let wrap = ["sh", "-c", script.as_str()];
    let mut autoscaler = Autoscaler::start_with(
        &home,
        &gitlab.url,
        std::slice::from_ref(&pool),
        &Extra {
            server: "long_poll_timeout = \"3s\"",
            upstream: "keepalive_interval = \"1s\"",
            wrap: &wrap,
            ..Extra::default()
        },
    )
    .await?;
    let runner = Runner {
        http: reqwest::Client::new(),
        url: autoscaler.url.clone(),
        token: register_sidecar(&autoscaler.url, &pool.registration_token, "full").await?,
    };

    // A job starts while there is room.
    let spec = JobSpec::new(&pool.upstream_token, &["true"]);
    let enqueue = || gitlab.control.enqueue(&spec);
    let running_id = enqueue().await?.id;
    let running = runner
        .request_job()
        .await?
        .context("the first job was not handed out")?;
    assert_eq!(running["id"].as_u64(), Some(running_id));
    assert_eq!(runner.update(&running, "running").await?, StatusCode::OK);

    disk.fill()?;
    // Jobs keep coming. The first few may still fit in the space the store's journal holds
    // ahead (those are durable, run and finish); then one cannot be made durable.
    let mut refused = None;
    for _ in 0..100 {
        let id = enqueue().await?.id;
        match runner.request_job().await? {
            Some(job) => {
                assert_eq!(job["id"].as_u64(), Some(id));
                assert_eq!(runner.update(&job, "running").await?, StatusCode::OK);
                assert_eq!(runner.update(&job, "success").await?, StatusCode::OK);
            }
            None => {
                refused = Some(id);
                break;
            }
        }
    }
    let refused = refused.context("every job was handed out although the disk is full")?;
    // Either the autoscaler took the job and gave it back, or it noticed the full disk first
    // (a relayed call's write failed) and did not take the job at all: GitLab keeps it.
    let taken = gitlab.control.job(refused).await?.handouts == 1;
    // More jobs while the disk stays full: none is handed out.
    let waiting = enqueue().await?.id;
    for _ in 0..2 {
        ensure!(
            runner.request_job().await?.is_none(),
            "a job was handed out from a full disk"
        );
    }
    if taken {
        let back = gitlab.control.wait_final(refused, WITHIN).await?;
        ensure!(
            back.status == JobStatus::Failed
                && back.failure_reason.as_deref() == Some("runner_provisioning_timeout")
                && back.trace_bytes == 0,
            "GitLab got the job back unacknowledged and it never ran: {back:?}"
        );
    } else {
        let view = gitlab.control.job(refused).await?;
        ensure!(
            view.status == JobStatus::Pending && view.handouts == 0,
            "GitLab still holds the job nobody took: {view:?}"
        );
    }
    let later = gitlab.control.job(waiting).await?;
    ensure!(
        later.status != JobStatus::Running && later.trace_bytes == 0,
        "a job that came later did not run: {later:?}"
    );

    // The job that was running goes on through the relay to its end.
    assert_eq!(
        runner.patch_trace(&running, "still relayed\n").await?,
        StatusCode::ACCEPTED
    );
    assert_eq!(runner.update(&running, "success").await?, StatusCode::OK);
    let done = gitlab.control.job(running_id).await?;
    ensure!(done.status == JobStatus::Success, "{done:?}");
    assert_eq!(gitlab.control.trace(running_id).await?, b"still relayed\n");

    autoscaler.proc.signal(nix::sys::signal::Signal::SIGKILL)?;
    autoscaler.proc.wait(WITHIN).await?;
    let text = std::fs::read_to_string(&log)?;
    let errors = text.lines().filter(|l| l.contains(STORE_ERROR)).count();
    ensure!(
        errors == 1,
        "the store error should be logged once for the episode, found {errors}:\n{text}"
    );
    Ok(())
}
