//! Harness shared by the end-to-end tests and the demo: the project's real binaries as
//! processes on loopback ports, and the fake GitLab they talk to (see `tests/fake-gitlab`).

pub mod browser;
pub mod chaos;
pub mod counting;
pub mod openapi;
pub mod pool_spec;
pub mod ports;
pub mod process;
pub mod python_runner;
pub mod recording;
pub mod replay;
pub mod replay_pipelines;
pub mod scrape;
pub mod simcheck;
pub mod stack;

/// The sidecar token the autoscaler wrote onto the (only) local machine under `machines_root`.
pub fn local_machine_token(machines_root: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let path = std::fs::read_dir(machines_root)?
        .flatten()
        .map(|e| e.path().join("home/autoscaler-sidecar/token"))
        .find(|p| p.exists())
        .context("no token file on the machine")?;
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}

/// Destroys, when dropped, every local sandbox machine left under a root directory, through the
/// local provisioner itself: a test that fails half-way must not leave `sshd` processes behind.
#[derive(Debug)]
pub struct LocalMachinesGuard {
    pub root: std::path::PathBuf,
}

impl Drop for LocalMachinesGuard {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let provisioner = stack::repo_root().join("provisioners/local/provisioner");
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if id.starts_with('.') {
                continue;
            }
            let request = format!(r#"{{"protocol":1,"pool":"cleanup","id":"{id}"}}"#);
            let _ = std::process::Command::new(&provisioner)
                .args(["destroy", &id])
                .env("LOCAL_ROOT", &self.root)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .and_then(|mut child| {
                    if let Some(mut stdin) = child.stdin.take() {
                        std::io::Write::write_all(&mut stdin, request.as_bytes())?;
                    }
                    child.wait()
                });
        }
    }
}

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::{Context, Result};

/// The trace checksum in the form runners report it (`crc32:%08x`, runner-protocol.md §5).
pub fn crc32_tag(bytes: &[u8]) -> String {
    format!("crc32:{:08x}", crc32fast::hash(bytes))
}

/// The files of a zip archive, by name.
pub fn unzip(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes)).context("not a zip archive")?;
    let mut files = BTreeMap::new();
    for i in 0..archive.len() {
        let mut file = archive.by_index(i)?;
        if file.is_dir() {
            continue;
        }
        let mut content = Vec::new();
        file.read_to_end(&mut content)?;
        files.insert(file.name().to_string(), content);
    }
    Ok(files)
}
