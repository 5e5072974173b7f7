//! The shipped provisioners, for real: the conformance kit passes on each (as root and as an
//! ordinary user), and the local provisioner's machines are reachable over SSH with their
//! pinned host keys and leave nothing behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use autoscaler::core::reconcile::ProviderState;
use autoscaler::provisioner::{
    CreateItem, CreateRequest, Destroyed, Provisioner, ScriptProvisioner, Timeouts,
};
use e2e::process::binary;

/// The user the ordinary-user checks run as when the tests run as root (`cargo xtask test`
/// creates it).
const TEST_USER: &str = "autoscaler-test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The provisioners that make machines on this host. The cloud ones (`aws`, `gcp`, `hetzner`,
/// `docker-machine`) pass the same kit against their emulators and stubs in `tests/cloud/`.
fn shipped() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join("provisioners"))
        .expect("provisioners/ exists")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with("local"))
        .map(|e| e.path().join("provisioner"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
}

/// The kit's summary for a provisioner that passes every clause it declares: `local` declares
/// `stop_start` (clauses 13 to 17), `python-local` and the guide's examples do not.
const WITH_STOP_START: &str = "17 clauses: 17 passed, 0 failed, 0 skipped";
const WITHOUT_STOP_START: &str = "17 clauses: 12 passed, 0 failed, 5 skipped";

fn full_pass(provisioner: &Path) -> &'static str {
    // Whole components: `python-local/provisioner` does not end with `local/provisioner`.
    if provisioner.ends_with("local/provisioner") {
        WITH_STOP_START
    } else {
        WITHOUT_STOP_START
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs the kit on a local provisioner keeping its sandboxes under `root`, optionally as
/// another user, and returns its report.
fn run_kit(provisioner: &Path, root: &Path, as_user: Option<&str>) -> Result<(bool, String)> {
    let env = [format!("LOCAL_ROOT={}", root.display())];
    run_kit_with(provisioner, &env, as_user)
}

/// Runs the kit on `provisioner` with `env` (`KEY=VALUE`), optionally as another user.
fn run_kit_with(
    provisioner: &Path,
    env: &[String],
    as_user: Option<&str>,
) -> Result<(bool, String)> {
    let autoscaler = binary("autoscaler")?;
    let mut command = match as_user {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(&autoscaler);
            c
        }
        None => Command::new(&autoscaler),
    };
    command.args(["provisioner", "check"]).arg(provisioner);
    for variable in env {
        command.arg("--env").arg(variable);
    }
    let output = command.output().context("cannot run the conformance kit")?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    Ok((output.status.success(), report))
}

#[test]
fn every_shipped_provisioner_passes_the_conformance_kit() -> Result<()> {
    let provisioners = shipped();
    ensure!(
        provisioners.len() >= 2,
        "expected the bash and the Python provisioner, found {provisioners:?}"
    );
    for p in provisioners {
        let root = tempfile::tempdir()?;
        let (ok, report) = run_kit(&p, root.path(), None)?;
        ensure!(
            ok && report.contains(full_pass(&p)),
            "{}:\n{report}",
            p.display()
        );
    }
    Ok(())
}

/// The two examples of the provisioner guide (`provisioners/README.md`) do what it says.
#[test]
fn the_guide_example_provisioners_pass_the_conformance_kit() -> Result<()> {
    for name in ["static-hosts-bash", "static-hosts-python"] {
        let p = repo()
            .join("provisioners/examples")
            .join(name)
            .join("provisioner");
        let dir = tempfile::tempdir()?;
        let hosts = dir.path().join("hosts");
        std::fs::write(
            &hosts,
            "# name address port user\nbuild-1 192.0.2.10 22 runner\nbuild-2 192.0.2.11 2222 ci\n",
        )?;
        let env = [
            format!("STATIC_HOSTS_FILE={}", hosts.display()),
            format!("STATIC_HOSTS_STATE={}", dir.path().join("claims").display()),
        ];
        let (ok, report) = run_kit_with(&p, &env, None)?;
        ensure!(
            ok && report.contains(WITHOUT_STOP_START),
            "{}:\n{report}",
            p.display()
        );
    }
    Ok(())
}

#[test]
fn every_shipped_provisioner_works_as_an_ordinary_user() -> Result<()> {
    if !is_root() {
        // The whole suite already runs as an ordinary user: the test above is this test.
        return every_shipped_provisioner_passes_the_conformance_kit();
    }
    let has_user = Command::new("id")
        .arg(TEST_USER)
        .output()
        .is_ok_and(|o| o.status.success());
    ensure!(
        has_user,
        "user {TEST_USER} is missing; `cargo xtask test` creates it (useradd -m {TEST_USER})"
    );
    for p in shipped() {
        let root = tempfile::tempdir()?;
        let chown = Command::new("chown")
            .arg(TEST_USER)
            .arg(root.path())
            .status()?;
        ensure!(
            chown.success(),
            "cannot hand {} to {TEST_USER}",
            root.path().display()
        );
        let (ok, report) = run_kit(&p, root.path(), Some(TEST_USER))?;
        ensure!(
            ok && report.contains(full_pass(&p)),
            "{} as {TEST_USER}:\n{report}",
            p.display()
        );
    }
    Ok(())
}

/// Processes whose environment carries `AUTOSCALER_LOCAL_MACHINE=<id>` or whose command line
/// names the machine's directory.
fn processes_of(id: &str, dir: &Path) -> Vec<String> {
    let marker = format!("AUTOSCALER_LOCAL_MACHINE={id}");
    let dir = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
        else {
            continue;
        };
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        if stat.split_whitespace().nth(2) == Some("Z") {
            continue; // Exited, waiting to be reaped by init: nothing runs.
        }
        let environ = std::fs::read(path.join("environ")).unwrap_or_default();
        let cmdline =
            String::from_utf8_lossy(&std::fs::read(path.join("cmdline")).unwrap_or_default())
                .replace('\0', " ");
        if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) || cmdline.contains(&dir) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

fn ssh(
    key: &Path,
    known_hosts: &Path,
    user: &str,
    port: u16,
    command: &str,
) -> std::process::Output {
    Command::new("ssh")
        .arg("-i")
        .arg(key)
        .args(["-p", &port.to_string()])
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg(format!("{user}@127.0.0.1"))
        .arg(command)
        .output()
        .expect("ssh runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_local_machines_are_reachable_with_pinned_host_keys_and_leave_nothing_behind()
-> Result<()> {
    let root = tempfile::tempdir()?;
    let keys = tempfile::tempdir()?;
    let key = keys.path().join("id_ed25519");
    let keygen = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(&key)
        .status()?;
    ensure!(keygen.success(), "ssh-keygen failed");
    let public_key = std::fs::read_to_string(key.with_extension("pub"))?
        .trim()
        .to_string();
    let env = BTreeMap::from([("LOCAL_ROOT".to_string(), root.path().display().to_string())]);
    let p = Arc::new(ScriptProvisioner::new(
        repo().join("provisioners/local/provisioner"),
        "twenty",
        "as-e2e",
        env,
        Timeouts::default(),
        8,
    ));

    let creates = (0..20).map(|i| {
        let p = p.clone();
        let public_key = public_key.clone();
        async move {
            let key = format!("m-{i}");
            let labels = BTreeMap::from([
                ("autoscaler-id".to_string(), "as-e2e".to_string()),
                ("autoscaler-pool".to_string(), "twenty".to_string()),
                ("autoscaler-key".to_string(), key.clone()),
            ]);
            let created = p
                .create(CreateRequest {
                    machines: vec![CreateItem {
                        key,
                        labels,
                        user_data: None,
                    }],
                    ssh_public_key: public_key,
                    user_data: None,
                })
                .await?;
            Ok::<_, anyhow::Error>(created[0].id.clone())
        }
    });
    let ids: Vec<String> = futures::future::try_join_all(creates).await?;
    let mut ports = std::collections::BTreeSet::new();

    for id in &ids {
        let status = p.status(id).await?;
        ensure!(status.state == ProviderState::Running, "{id}: {status:?}");
        let host_key = status
            .host_key
            .clone()
            .context("the local provisioner pins host keys")?;
        ensure!(
            ports.insert(status.port),
            "two machines on port {}",
            status.port
        );
        let known_hosts = keys.path().join(format!("known_hosts-{id}"));
        std::fs::write(
            &known_hosts,
            format!("[127.0.0.1]:{} {host_key}\n", status.port),
        )?;
        let out = ssh(
            &key,
            &known_hosts,
            &status.user,
            status.port,
            &format!("echo reached-{id}; setsid sleep 600 </dev/null >/dev/null 2>&1 &"),
        );
        ensure!(
            out.status.success(),
            "{id}: ssh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(String::from_utf8_lossy(&out.stdout).contains(&format!("reached-{id}")));
    }

    // A machine presenting another host key than the pinned one is refused.
    let (first, second) = (p.status(&ids[0]).await?, p.status(&ids[1]).await?);
    let wrong = keys.path().join("known_hosts-wrong");
    std::fs::write(
        &wrong,
        format!(
            "[127.0.0.1]:{} {}\n",
            first.port,
            second.host_key.clone().unwrap_or_default()
        ),
    )?;
    let out = ssh(&key, &wrong, &first.user, first.port, "echo should-not-run");
    ensure!(!out.status.success(), "a wrong host key was accepted");
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for id in &ids {
        ensure!(
            !processes_of(id, &root.path().join(id)).is_empty(),
            "{id}: nothing runs for the machine before destroy?"
        );
    }
    let destroys = ids.iter().map(|id| {
        let p = p.clone();
        async move { p.destroy(id).await }
    });
    for (id, result) in ids.iter().zip(futures::future::join_all(destroys).await) {
        ensure!(result? == Destroyed::Gone, "{id} not gone");
    }
    for id in &ids {
        let left = processes_of(id, &root.path().join(id));
        if !left.is_empty() {
            bail!("{id} left processes behind: {left:?}");
        }
        ensure!(
            !root.path().join(id).exists(),
            "{id} left its directory behind"
        );
        ensure!(p.status(id).await?.state == ProviderState::Gone);
    }
    ensure!(
        p.list(BTreeMap::new()).await?.is_empty(),
        "machines still listed"
    );
    Ok(())
}
