//! Graceful shutdown with real processes: the first SIGTERM stops intake and lets running jobs
//! finish; a second exits at once, and the next start carries the job on. A pool's machines
//! outlive a stop and a restart, unless `delete_on_shutdown` asks for them to go.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::counting;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, Sidecar, register_sidecar};
use fake_gitlab::control::{JobSpec, JobStatus};
use nix::sys::signal::Signal;
use tempfile::TempDir;

const WITHIN: Duration = Duration::from_secs(60);

struct Rig {
    gitlab: FakeGitLab,
    autoscaler: Autoscaler,
    pool: PoolSpec,
    /// A job blocked on `gate` goes on once the test creates the file.
    gate: PathBuf,
    _sidecar: Sidecar,
    _dir: TempDir,
}

/// One static pool with one built-in sidecar running one job at a time.
async fn rig() -> Result<Rig> {
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::new("default");
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"5s\"\nshutdown_grace = \"60s\"",
    )
    .await?;
    let token = register_sidecar(&autoscaler.url, &pool.registration_token, "sidecar").await?;
    let sidecar = Sidecar::start(
        "sidecar",
        &autoscaler.url,
        &token,
        1,
        &dir.path().join("builds"),
    )?;
    Ok(Rig {
        gitlab,
        autoscaler,
        pool,
        gate: dir.path().join("gate"),
        _sidecar: sidecar,
        _dir: dir,
    })
}

impl Rig {
    /// A job that prints a line, waits for the gate, then prints another.
    async fn gated_job(&self) -> Result<u64> {
        let gate = self.gate.display();
        let spec = JobSpec::new(
            &self.pool.upstream_token,
            &[
                "echo before the gate",
                &format!("while [ ! -e {gate} ]; do sleep 0.05; done"),
                "echo after the gate",
            ],
        );
        Ok(self.gitlab.control.enqueue(&spec).await?.id)
    }

    fn open_gate(&self) -> Result<()> {
        std::fs::write(&self.gate, b"")?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_intake_and_lets_the_running_job_finish_before_exiting() -> Result<()> {
    let mut r = rig().await?;
    let running = r.gated_job().await?;
    // On its sidecar: GitLab shows a job running as soon as the autoscaler took it.
    r.gitlab.wait_started(running, WITHIN).await?;
    let waiting = r
        .gitlab
        .control
        .enqueue(&JobSpec::new(&r.pool.upstream_token, &["echo never"]))
        .await?
        .id;

    r.autoscaler.proc.signal(Signal::SIGTERM)?;
    r.autoscaler.wait_draining(WITHIN).await?;
    ensure!(
        r.autoscaler.proc.try_status().is_none(),
        "the autoscaler must wait for the running job"
    );
    r.open_gate()?;

    let status = r.autoscaler.proc.wait(WITHIN).await?;
    ensure!(status.success(), "graceful shutdown exits 0, got {status}");
    let view = r.gitlab.control.job(running).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    let trace = String::from_utf8_lossy(&r.gitlab.control.trace(running).await?).into_owned();
    ensure!(
        trace.contains("before the gate") && trace.contains("after the gate"),
        "the whole trace reached GitLab:\n{trace}"
    );
    let view = r.gitlab.control.job(waiting).await?;
    ensure!(
        view.status == JobStatus::Pending,
        "a draining autoscaler takes no new job from GitLab: {view:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_and_the_next_start_carries_the_job_on() -> Result<()> {
    let mut r = rig().await?;
    let job = r.gated_job().await?;
    r.gitlab.wait_started(job, WITHIN).await?;

    r.autoscaler.proc.signal(Signal::SIGTERM)?;
    r.autoscaler.wait_draining(WITHIN).await?;
    r.autoscaler.proc.signal(Signal::SIGTERM)?;
    // The grace period is 60 s; a second signal must not wait for it.
    let status = r.autoscaler.proc.wait(Duration::from_secs(10)).await?;
    ensure!(status.success(), "{status}");
    ensure!(
        r.gitlab.control.job(job).await?.status == JobStatus::Running,
        "the job is still running on its sidecar"
    );

    // The job ends while the autoscaler is down; its sidecar keeps retrying until it is back.
    r.open_gate()?;
    r.autoscaler.restart().await?;
    let view = r.gitlab.control.wait_final(job, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    let trace = String::from_utf8_lossy(&r.gitlab.control.trace(job).await?).into_owned();
    ensure!(
        trace.contains("before the gate") && trace.contains("after the gate"),
        "{trace}"
    );
    ensure!(
        view.reported_bytesize == Some(view.trace_bytes),
        "no trace byte lost across the restart: {view:?}"
    );
    Ok(())
}

/// The systemd side of the protocol (`Type=notify` in `deploy/autoscaler.service`): `READY=1`
/// only once the APIs answer, `STOPPING=1` with a draining status on the first SIGTERM, and a
/// clean exit, all sent to the socket named by `NOTIFY_SOCKET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_once_bound_and_stopping_when_the_drain_begins() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // A short long poll: the drain waits for job requests in flight to GitLab.
    let gitlab = FakeGitLab::start(&["--long-poll", "2s"]).await?;
    let pool = PoolSpec::new("default");
    gitlab.add_runner(&pool.upstream_token).await?;
    let config = dir.path().join("autoscaler.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [state]\ndir = \"state\"\n[upstream]\nurl = \"{}\"\n\
             [[pools]]\nname = \"default\"\nupstream_token = \"{}\"\n",
            gitlab.url, pool.upstream_token
        ),
    )?;
    let socket_path = dir.path().join("notify");
    let socket = tokio::net::UnixDatagram::bind(&socket_path)?;
    let mut command = tokio::process::Command::new(e2e::process::binary("autoscaler")?);
    command
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path);
    let (mut proc, urls) = e2e::process::Proc::spawn_announcing("autoscaler", command, 2).await?;

    let ready = receive_until(&socket, "READY=1").await?;
    ensure!(ready.contains("STATUS=ready: serving 1 pool"), "{ready:?}");
    let health = reqwest::get(format!("{}/healthz", urls[1])).await?.status();
    ensure!(health.is_success(), "ready, yet /healthz answers {health}");

    proc.signal(Signal::SIGTERM)?;
    let stopping = receive_until(&socket, "STOPPING=1").await?;
    ensure!(stopping.contains("STATUS=draining"), "{stopping:?}");
    let status = proc.wait(WITHIN).await?;
    ensure!(status.success(), "graceful shutdown exits 0, got {status}");
    let last = receive_until(&socket, "STATUS=stopping").await?;
    ensure!(last.contains("writing the store"), "{last:?}");
    Ok(())
}

/// Datagrams from the notification socket until one contains `wanted`; returns that one.
async fn receive_until(socket: &tokio::net::UnixDatagram, wanted: &str) -> Result<String> {
    let mut buffer = vec![0u8; 4096];
    let mut seen = Vec::new();
    loop {
        let n = tokio::time::timeout(WITHIN, socket.recv(&mut buffer))
            .await
            .map_err(|_| anyhow::anyhow!("no {wanted:?} within {WITHIN:?}; got {seen:?}"))??;
        let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
        if message.contains(wanted) {
            return Ok(message);
        }
        seen.push(message);
    }
}

// What becomes of a pool's machines when the autoscaler stops: kept by default (a restart
// carries on with them), destroyed with `delete_on_shutdown`.

/// A shutdown waits for the requests in flight to GitLab (a dropped one could strand a job GitLab
/// already assigned), so these tests hold GitLab's long polls for 5 s instead of 50 s.
const SHORT_LONG_POLL: &[&str] = &["--long-poll", "5s"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_outlive_a_restart_and_their_sidecars_carry_on() -> Result<()> {
    let mut r = counting::rig_with_sidecar(
        SHORT_LONG_POLL,
        (
            "max_machines = 1\nidle_count = 1\nidle_time = \"60s\"",
            "",
            "mode = \"builtin\"",
        ),
        &[],
        None,
    )
    .await?;
    let before = r.one_ready_machine().await?;
    let status = r.autoscaler.proc.stop(counting::WITHIN).await?;
    ensure!(status.success(), "{status}");
    ensure!(
        r.provider_list()?.len() == 1,
        "a stopped autoscaler keeps its machines by default"
    );

    r.autoscaler.restart().await?;
    let id = r.enqueue_script(&["echo on the kept machine"]).await?;
    r.finish(id).await?;
    let (created, _, alive) = r.machine_counts()?;
    ensure!(
        created == 1 && alive == 1,
        "the job ran on the kept machine: {created} created, {alive} alive"
    );
    let after = r.one_ready_machine().await?;
    ensure!(after.id == before.id, "{} became {}", before.id, after.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_on_shutdown_destroys_the_pools_machines() -> Result<()> {
    let mut r = counting::rig_with_sidecar(
        SHORT_LONG_POLL,
        (
            "max_machines = 2\nidle_count = 2\nidle_time = \"60s\"\ndelete_on_shutdown = true",
            "",
            "mode = \"builtin\"",
        ),
        &[],
        None,
    )
    .await?;
    r.autoscaler
        .wait_machines(counting::WITHIN, "two idle machines ready", |l| {
            l.iter().filter(|m| m.state == MachineState::Ready).count() == 2
        })
        .await?;
    let status = r.autoscaler.proc.stop(counting::WITHIN).await?;
    ensure!(status.success(), "{status}");
    let (created, _, alive) = r.machine_counts()?;
    ensure!(
        created == 2 && alive == 0,
        "{created} created, {alive} still alive"
    );
    ensure!(
        r.provider_list()?.is_empty(),
        "the provider still lists machines"
    );
    Ok(())
}
