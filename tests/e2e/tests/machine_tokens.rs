//! A machine's sidecar token in the hands of job code: it opens nothing from another address,
//! and on the machine itself the job cannot read it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use reqwest::StatusCode;
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(120);

/// A fake GitLab and an autoscaler whose pool keeps one idle local machine.
struct Rig {
    gitlab: FakeGitLab,
    autoscaler: Autoscaler,
    pool: PoolSpec,
    machines_root: PathBuf,
    _guard: LocalMachinesGuard,
    _dir: tempfile::TempDir,
}

async fn rig(sidecar: &str) -> Result<Rig> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let guard = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--long-poll", "5s"]).await?;
    let pool = PoolSpec::local(
        "tokens",
        &machines_root,
        "max_machines = 1\nidle_count = 1\nidle_time = \"60s\"",
        sidecar,
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"2s\"",
    )
    .await?;
    autoscaler
        .wait_machines(WITHIN, "an idle machine ready", |l| {
            l.iter().any(|m| m.state == MachineState::Ready)
        })
        .await?;
    Ok(Rig {
        gitlab,
        autoscaler,
        pool,
        machines_root,
        _guard: guard,
        _dir: dir,
    })
}

/// The sidecar token the autoscaler wrote onto the (only) local machine.
fn machine_token(machines_root: &Path) -> Result<String> {
    let path = std::fs::read_dir(machines_root)?
        .flatten()
        .map(|e| e.path().join("home/autoscaler-sidecar/token"))
        .find(|p| p.exists())
        .context("no token file on the machine")?;
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}

fn client_from(address: &str) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(address.parse::<IpAddr>()?)
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// The local provisioner reports its machines at 127.0.0.1; 127.0.0.2 is loopback too on Linux,
/// so a client bound to it is "another machine" to the autoscaler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_token_from_another_address_is_refused_with_403_and_works_from_its_machine()
-> Result<()> {
    let r = rig("mode = \"builtin\"").await?;
    let token = machine_token(&r.machines_root)?;
    let elsewhere = client_from("127.0.0.2")?;
    for path in ["/api/v4/runners/verify", "/api/v4/jobs/request"] {
        let answer = elsewhere
            .post(format!("{}{path}", r.autoscaler.url))
            .json(&json!({"token": token, "info": {}}))
            .send()
            .await?;
        ensure!(
            answer.status() == StatusCode::FORBIDDEN,
            "{path} from 127.0.0.2: {}",
            answer.status()
        );
    }
    let reset = elsewhere
        .post(format!(
            "{}/api/v4/runners/reset_authentication_token",
            r.autoscaler.url
        ))
        .header("RUNNER-TOKEN", &token)
        .send()
        .await?;
    ensure!(
        reset.status() == StatusCode::FORBIDDEN,
        "{}",
        reset.status()
    );

    // From the machine's own address the same token works.
    let home = client_from("127.0.0.1")?;
    let verify = home
        .post(format!("{}/api/v4/runners/verify", r.autoscaler.url))
        .json(&json!({"token": token}))
        .send()
        .await?;
    ensure!(verify.status() == StatusCode::OK, "{}", verify.status());
    // A job queued now goes to the machine's own sidecar, not to the refused requests.
    let job = r
        .gitlab
        .control
        .enqueue(&fake_gitlab::control::JobSpec::new(
            &r.pool.upstream_token,
            &["echo ran on its machine"],
        ))
        .await?;
    let view = r.gitlab.control.wait_final(job.id, WITHIN).await?;
    ensure!(
        view.status == fake_gitlab::control::JobStatus::Success,
        "{view:?}"
    );
    Ok(())
}
