//! One `[[pools]]` entry of the autoscaler's configuration, as the end-to-end tests write it:
//! a static pool, or one whose machines the local provisioner (or another) makes.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::process::repo_root;

/// One `[[pools]]` entry of the autoscaler's configuration.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub name: String,
    pub upstream_token: String,
    pub registration_token: String,
    pub request_concurrency: u32,
    /// TOML appended after the pool's keys: its `[pools.provisioner]`, `[pools.scaling]` and
    /// `[pools.sidecar]` tables, for a pool with machines.
    pub tail: String,
}

impl PoolSpec {
    /// Whether the local provisioner (or the counting wrapper around it) makes its machines:
    /// its environment names their root.
    pub fn makes_local_machines(&self) -> bool {
        self.tail.contains("LOCAL_ROOT")
    }

    /// A static pool (sidecars register themselves), with tokens derived from its name.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            upstream_token: format!("glrt-upstream-{name}-{:08x}", rand_u32()),
            registration_token: format!("reg-{name}-{:08x}", rand_u32()),
            request_concurrency: 4,
            tail: String::new(),
        }
    }

    /// A pool whose machines are local sandboxes under `machines_root`, made by
    /// `provisioners/local/provisioner`, with the given `[pools.scaling]` and `[pools.sidecar]`
    /// keys (TOML lines).
    pub fn local(name: &str, machines_root: &Path, scaling: &str, sidecar: &str) -> Self {
        let provisioner = repo_root().join("provisioners/local/provisioner");
        Self::with_provisioner(name, &provisioner, machines_root, scaling, sidecar)
    }

    /// Like [`PoolSpec::local`], its machines reported `creating` for `boot_delay_s` after
    /// their create request (as a cloud's boot), with `provisioner` added to its
    /// `[pools.provisioner]` table (TOML lines, such as a creation throttle).
    pub fn local_booting(
        name: &str,
        machines_root: &Path,
        boot_delay_s: f64,
        provisioner: &str,
        scaling: &str,
        sidecar: &str,
    ) -> Self {
        let mut pool = Self::new(name);
        pool.tail = format!(
            "[pools.provisioner]\ncommand = \"{}\"\n{provisioner}\nreconcile_interval = \"1s\"\n\
             env = {{ LOCAL_ROOT = \"{}\", LOCAL_BOOT_DELAY = \"{boot_delay_s}\" }}\n\n\
             [pools.scaling]\n{scaling}\n\n[pools.sidecar]\n{sidecar}\n",
            repo_root().join("provisioners/local/provisioner").display(),
            machines_root.display(),
        );
        pool
    }

    /// Like [`PoolSpec::local`] with another provisioner executable.
    pub fn with_provisioner(
        name: &str,
        provisioner: &Path,
        machines_root: &Path,
        scaling: &str,
        sidecar: &str,
    ) -> Self {
        let mut pool = Self::new(name);
        pool.tail = format!(
            "[pools.provisioner]\ncommand = \"{}\"\nenv = {{ LOCAL_ROOT = \"{}\" }}\nreconcile_interval = \"1s\"\n\n\
             [pools.scaling]\n{scaling}\n\n[pools.sidecar]\n{sidecar}\n",
            provisioner.display(),
            machines_root.display(),
        );
        pool
    }
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

/// Each local machine runs its own `sshd`, found where the local provisioner looks for it
/// (`LOCAL_SSHD`, then `PATH`, then the usual places). Without one every create fails, which a
/// test would see only as jobs that never end: this says why before it starts.
pub fn require_sshd() -> Result<()> {
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("sshd"))
                .collect()
        })
        .unwrap_or_default();
    let fixed = ["/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"].map(PathBuf::from);
    let found = std::env::var_os("LOCAL_SSHD")
        .map(PathBuf::from)
        .into_iter()
        .chain(on_path)
        .chain(fixed)
        .any(|candidate| candidate.is_file());
    if !found {
        bail!(
            "local machines need OpenSSH's sshd, and none is installed (apt-get install \
             openssh-server; `cargo xtask test` installs it)"
        );
    }
    Ok(())
}
