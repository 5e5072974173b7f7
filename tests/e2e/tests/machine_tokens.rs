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
    let token = e2e::local_machine_token(&r.machines_root)?;
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

/// A job that hunts for the sidecar's token (its file, every process's environment and command
/// line, the files it can reach: its home, its own temporary directory and the machine's, which
/// is `/tmp` on a cloud machine and the sandbox's `tmp/` here) and asks for the pool's jobs with
/// whatever it found. Prints `uid=`, `file:` and one `request:` line per candidate.
const THIEF: &[&str] = &[
    "echo \"uid=$(id -u)\"",
    "if cat \"$TOKEN_FILE\" 2>/dev/null; then echo 'file: read'; else echo 'file: refused'; fi",
    "candidates=$( { cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sed -n 's/^SIDECAR_TOKEN=//p'; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; cat \"$TOKEN_FILE\" 2>/dev/null; grep -rhoa 'glrt-[A-Za-z0-9_-]*' \"$HOME\" \"$TMPDIR\" \"$MACHINE_TMP\" 2>/dev/null; } | grep -o 'glrt-[A-Za-z0-9_-]*' | sort -u) || true",
    "for t in $candidates nothing-found; do echo \"request: $(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d \"{\\\"token\\\":\\\"$t\\\"}\" \"$AUTOSCALER_URL/api/v4/jobs/request\")\"; done",
];

/// Lets other users pass through the directories above the machine's home, as a cloud machine's
/// `/home` does, so that only the sidecar's own protections stand between a job and its token.
fn open_path_to(home: &Path, up_to: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut dir = Some(home);
    while let Some(d) = dir {
        let mode = std::fs::metadata(d)?.permissions().mode();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o011))?;
        if d == up_to {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// Runs [`THIEF`] on the rig's machine and returns its trace and the machine's token.
async fn run_thief(r: &Rig) -> Result<(String, String)> {
    let token_file = std::fs::read_dir(&r.machines_root)?
        .flatten()
        .map(|e| e.path().join("home/autoscaler-sidecar/token"))
        .find(|p| p.exists())
        .context("no token file on the machine")?;
    let home = token_file.parent().and_then(Path::parent).context("home")?;
    open_path_to(home, r.machines_root.parent().context("root")?)?;
    // The machine's temporary directory, open to every user as a cloud machine's `/tmp` is (the
    // host's own `/tmp` is not the machine's, and searching it would time the test by the host).
    let machine_tmp = home.parent().context("machine")?.join("tmp");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&machine_tmp, std::fs::Permissions::from_mode(0o1777))?;
    }
    let token = std::fs::read_to_string(&token_file)?.trim().to_string();
    let mut spec = fake_gitlab::control::JobSpec::new(&r.pool.upstream_token, THIEF);
    spec.variables.push(fake_gitlab::control::JobVariable::new(
        "TOKEN_FILE",
        token_file.to_string_lossy(),
    ));
    spec.variables.push(fake_gitlab::control::JobVariable::new(
        "MACHINE_TMP",
        machine_tmp.to_string_lossy(),
    ));
    spec.variables.push(fake_gitlab::control::JobVariable::new(
        "AUTOSCALER_URL",
        r.autoscaler.url.clone(),
    ));
    let id = r.gitlab.control.enqueue(&spec).await?.id;
    r.gitlab.control.wait_final(id, WITHIN).await?;
    let trace = String::from_utf8_lossy(&r.gitlab.control.trace(id).await?).into_owned();
    Ok((trace, token))
}

/// The statuses of the thief's job requests.
fn request_statuses(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter_map(|l| l.trim().strip_prefix("request: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_can_neither_read_the_sidecar_token_nor_use_anything_it_finds() -> Result<()> {
    let r = rig("mode = \"builtin\"").await?;
    let (trace, token) = run_thief(&r).await?;
    ensure!(!trace.contains(&token), "the job saw the token:\n{trace}");
    ensure!(trace.contains("file: refused"), "{trace}");
    ensure!(!trace.contains("uid=0"), "the job ran as root:\n{trace}");
    let statuses = request_statuses(&trace);
    ensure!(!statuses.is_empty(), "the job made no request:\n{trace}");
    ensure!(
        statuses.iter().all(|s| s == "403" || s == "400"),
        "a job request from the job got {statuses:?}:\n{trace}"
    );
    Ok(())
}

/// The control: with `job_user = ""` the same job runs as the sidecar's user, and the same
/// hunt finds the token and is given the pool's job requests, which is what the default stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_the_sidecars_user_the_same_job_finds_the_token_and_polls_with_it() -> Result<()> {
    let r = rig("mode = \"builtin\"\njob_user = \"\"").await?;
    let (trace, token) = run_thief(&r).await?;
    ensure!(trace.contains("file: read"), "{trace}");
    ensure!(
        trace.contains(&token) || trace.contains("[MASKED]"),
        "{trace}"
    );
    ensure!(
        request_statuses(&trace).iter().any(|s| s == "204"),
        "the stolen token was refused:\n{trace}"
    );
    Ok(())
}
