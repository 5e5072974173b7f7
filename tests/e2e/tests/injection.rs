//! Injection over SSH, for real, on a machine of the local provisioner: the binary is uploaded
//! when the machine lacks it, left alone when it has the right checksum, and replaced when the
//! copy on the machine is damaged; each time the sidecar is (re)started and runs detached.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use autoscaler::config::{SidecarConfig, SidecarMode, SidecarStart};
use autoscaler::inject::Injector;
use autoscaler::provisioner::{
    CreateItem, CreateRequest, Provisioner, ScriptProvisioner, Timeouts,
};
use autoscaler::secret::Secret;
use autoscaler::ssh::{ClientKey, Target};

const REMOTE_DIR: &str = "autoscaler-sidecar";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An injector whose "sidecar" is a copy of `sleep`, started as `sleeper 600`.
fn injector(state: &Path, binary: &Path) -> Result<Injector> {
    let config = SidecarConfig {
        mode: SidecarMode::Command {
            template: "{binary} 600".into(),
        },
        start: SidecarStart::Ssh,
        binary: Some(binary.to_path_buf()),
        remote_dir: REMOTE_DIR.into(),
        ready_command: None,
        ready_timeout: Duration::from_secs(60),
        silence_timeout: Duration::from_secs(45),
        token_binding: Default::default(),
        job_user: None,
    };
    let key = ClientKey::load_or_generate(None, state)?;
    Ok(Injector::new(key, config, "http://127.0.0.1:9".into(), 1)?)
}

/// Connects and starts the sidecar; returns its pid.
async fn inject(injector: &Injector, target: &Target) -> Result<u32> {
    let conn = injector.connect(target, Duration::from_secs(30)).await?;
    let pid = injector
        .start(
            &conn,
            "m-1",
            &Secret::new(String::from("glrt-injection-test")),
        )
        .await?;
    conn.close().await;
    Ok(pid.trim().parse()?)
}

/// Whether process `pid` runs (a zombie, which exited and waits to be reaped, does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z')
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_is_uploaded_once_kept_when_intact_and_replaced_when_damaged() -> Result<()> {
    let root = tempfile::tempdir()?;
    let state = tempfile::tempdir()?;
    let _machines = e2e::LocalMachinesGuard {
        root: root.path().to_path_buf(),
    };
    let binary = state.path().join("sleeper");
    std::fs::copy(which_sleep()?, &binary)?;
    let injector = injector(state.path(), &binary)?;

    let env = BTreeMap::from([("LOCAL_ROOT".to_string(), root.path().display().to_string())]);
    let provisioner = ScriptProvisioner::new(
        repo().join("provisioners/local/provisioner"),
        "inject",
        "as-e2e",
        env,
        Timeouts::default(),
        1,
    );
    let labels = BTreeMap::from([
        ("autoscaler-id".to_string(), "as-e2e".to_string()),
        ("autoscaler-pool".to_string(), "inject".to_string()),
        ("autoscaler-key".to_string(), "m-1".to_string()),
    ]);
    let created = provisioner
        .create(CreateRequest {
            machines: vec![CreateItem {
                key: "m-1".into(),
                labels,
                user_data: None,
            }],
            ssh_public_key: injector.key.public_openssh().to_string(),
            user_data: None,
        })
        .await?;
    let id = created[0].id.clone();
    let status = provisioner.status(&id).await?;
    let target = Target {
        host: status
            .address
            .clone()
            .context("the machine has no address")?,
        port: status.port,
        user: status.user.clone(),
        host_key: status.host_key.clone(),
    };
    let remote = root
        .path()
        .join(&id)
        .join("home")
        .join(REMOTE_DIR)
        .join("bin/sleeper");

    // A fresh machine gets the binary, byte for byte, and a running sidecar.
    let first = inject(&injector, &target).await?;
    ensure!(
        std::fs::read(&remote)? == std::fs::read(&binary)?,
        "the upload differs"
    );
    ensure!(running(first), "the first sidecar does not run");
    let inode = std::fs::metadata(&remote)?.ino();

    // Injected again: the binary is intact, so it is not sent again (the file is the same
    // one); the earlier sidecar is stopped and a new one runs.
    let second = inject(&injector, &target).await?;
    ensure!(
        std::fs::metadata(&remote)?.ino() == inode,
        "an intact binary was uploaded again"
    );
    ensure!(running(second), "the second sidecar does not run");
    ensure!(
        second != first && !running(first),
        "the earlier sidecar was not replaced"
    );

    // A damaged copy is replaced. (Damaged by renaming another file over it: the running
    // sidecar's own file cannot be written.)
    let damaged = remote.with_extension("damaged");
    std::fs::write(&damaged, b"not the sidecar")?;
    std::fs::rename(&damaged, &remote)?;
    let third = inject(&injector, &target).await?;
    ensure!(
        std::fs::read(&remote)? == std::fs::read(&binary)?,
        "a damaged binary was kept"
    );
    ensure!(running(third), "the third sidecar does not run");

    provisioner.destroy(&id).await?;
    Ok(())
}

fn which_sleep() -> Result<PathBuf> {
    ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("no sleep binary on this machine")
}
