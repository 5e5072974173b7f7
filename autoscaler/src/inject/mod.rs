//! Putting a sidecar on a machine over SSH: connect (retrying while it boots, host key checked),
//! run the ready command, upload the runner binary when the machine lacks it (checksum
//! verified), write its token and configuration, start it detached so it outlives the session,
//! and check it did not die on start.

pub mod bootstrap;
mod install;
pub mod recipe;
mod upload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::{SidecarConfig, SidecarMode};
use crate::secret::Secret;
use crate::ssh::{ClientKey, Connection, SshError, Target};
use install::Outcome;
use recipe::Launch;

/// One SSH connection attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One remote command (uploads get their own, longer limit).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(transparent)]
    Ssh(#[from] SshError),
    #[error("the ready command exited {status:?}: {output}")]
    ReadyCommand { status: Option<u32>, output: String },
    #[error("{step} failed on the machine (exit {status:?}): {output}")]
    Remote {
        step: &'static str,
        status: Option<u32>,
        output: String,
    },
    #[error("the uploaded binary's checksum is {got}, expected {expected}")]
    Corrupted { expected: String, got: String },
    #[error("the sidecar exited right after it started; its log ends: {log}")]
    SidecarExited { log: String },
    #[error("cannot read the local binary {path}: {detail}")]
    LocalBinary { path: String, detail: String },
    #[error("the machine has no address to connect to")]
    NoEndpoint,
    #[error("cannot read the CA certificates for the sidecar: {0}")]
    Ca(#[from] crate::tls::TlsError),
}

/// The CA bundle a sidecar is given when the autoscaler serves TLS. Read at each injection, so
/// that machines made after a certificate reload get the current CA.
#[derive(Debug, Clone)]
pub struct SidecarCa {
    /// The listener's certificate chain (its last certificate is the CA when no bundle is set).
    pub certificate: PathBuf,
    /// `server.tls.ca_bundle`.
    pub ca_bundle: Option<PathBuf>,
    /// Where machines keep their system CA certificates, tried in order.
    pub system_ca_files: Vec<String>,
}

/// What an injection learnt about the machine.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The host key the machine presented (to pin when the provider gave none).
    pub host_key: String,
    pub pid: String,
}

/// Puts sidecars of one pool on its machines.
#[derive(Debug, Clone)]
pub struct Injector {
    pub key: ClientKey,
    pub config: SidecarConfig,
    pub public_url: String,
    pub concurrency: u32,
    /// The local file uploaded as the sidecar binary, and its SHA-256.
    binary: Option<(PathBuf, String)>,
    /// The binary gzip-compressed, made once and shared by every machine.
    compressed: std::sync::Arc<tokio::sync::OnceCell<bytes::Bytes>>,
    /// With TLS on: the CA bundle to write on each machine.
    ca: Option<SidecarCa>,
}

fn sha256_file(path: &Path) -> Result<String, InjectError> {
    let bytes = std::fs::read(path).map_err(|e| InjectError::LocalBinary {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

impl Injector {
    /// `binary`: the local file to upload (for `builtin`, the `sidecar` next to this executable
    /// when the configuration names none).
    pub fn new(
        key: ClientKey,
        config: SidecarConfig,
        public_url: String,
        concurrency: u32,
    ) -> Result<Self, InjectError> {
        let local = config.binary.clone().or_else(|| match config.mode {
            SidecarMode::Builtin => std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.join("sidecar"))),
            _ => None,
        });
        let binary = match local {
            Some(path) => {
                let sum = sha256_file(&path)?;
                Some((path, sum))
            }
            None => None,
        };
        Ok(Self {
            key,
            config,
            public_url,
            concurrency,
            binary,
            compressed: std::sync::Arc::default(),
            ca: None,
        })
    }

    /// Gives every sidecar this injector starts a CA bundle (the autoscaler serves TLS).
    pub fn with_ca(mut self, ca: Option<SidecarCa>) -> Self {
        self.ca = ca;
        self
    }

    /// With TLS: the relay's CA certificates (read at each injection, so that machines made
    /// after a certificate reload get the current CA) and the system CA files to append.
    fn relay_ca(&self) -> Result<Option<(String, &[String])>, InjectError> {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let pem = crate::tls::relay_ca_pem(&ca.certificate, ca.ca_bundle.as_deref())?;
        Ok(Some((pem, ca.system_ca_files.as_slice())))
    }

    /// The local binary machines are given, and its SHA-256.
    pub fn binary(&self) -> Option<(&Path, &str)> {
        self.binary
            .as_ref()
            .map(|(path, sum)| (path.as_path(), sum.as_str()))
    }

    fn binary_sha256(&self) -> Option<&str> {
        self.binary.as_ref().map(|(_, sum)| sum.as_str())
    }

    /// How the sidecar named `name` is started with this pool's settings, over SSH or from a
    /// boot script alike.
    fn launch<'a>(
        &'a self,
        name: &'a str,
        binary: Option<&'a str>,
        ca_file: Option<&'a str>,
    ) -> Launch<'a> {
        Launch {
            mode: &self.config.mode,
            url: &self.public_url,
            name,
            concurrency: self.concurrency,
            dir: &self.config.remote_dir,
            binary,
            ca_file,
            job_user: self.config.job_user.as_deref(),
        }
    }

    fn remote_binary(&self) -> Option<String> {
        let (path, _) = self.binary.as_ref()?;
        let name = path.file_name()?.to_string_lossy().into_owned();
        Some(format!("{}/bin/{name}", self.config.remote_dir))
    }

    /// Connects to `target`, retrying refused or timed-out connections (the machine may still
    /// be booting) for at most `within`. A wrong host key is never retried.
    pub async fn connect(
        &self,
        target: &Target,
        within: Duration,
    ) -> Result<Connection, InjectError> {
        let deadline = crate::clock::monotonic() + within;
        let mut wait = Duration::from_millis(250);
        loop {
            match Connection::open(target, &self.key, CONNECT_TIMEOUT).await {
                Ok(c) => return Ok(c),
                Err(e @ (SshError::HostKeyMismatch { .. } | SshError::Key { .. })) => {
                    return Err(e.into());
                }
                Err(e) if crate::clock::monotonic() + wait >= deadline => return Err(e.into()),
                Err(e) => {
                    tracing::debug!(target = %target, error = %e, "machine not reachable yet");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Runs the configured ready command, if any.
    pub async fn ready(&self, conn: &Connection) -> Result<(), InjectError> {
        let Some(command) = &self.config.ready_command else {
            return Ok(());
        };
        let out = conn.exec(command, None, COMMAND_TIMEOUT).await?;
        if out.success() {
            Ok(())
        } else {
            Err(InjectError::ReadyCommand {
                status: out.status,
                output: out.complaint(),
            })
        }
    }

    async fn run(
        &self,
        conn: &Connection,
        step: &'static str,
        command: &str,
        stdin: Option<&[u8]>,
    ) -> Result<String, InjectError> {
        let input = stdin.map(bytes::Bytes::copy_from_slice);
        let out = conn.exec(command, input, COMMAND_TIMEOUT).await?;
        if !out.success() {
            return Err(InjectError::Remote {
                step,
                status: out.status,
                output: out.complaint(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Installs and starts the sidecar named `name` with `token` on an open connection, in two
    /// remote commands: the directory and the binary (`upload.rs`), then one script for the
    /// rest (`install.rs`).
    pub async fn start(
        &self,
        conn: &Connection,
        name: &str,
        token: &Secret,
    ) -> Result<String, InjectError> {
        self.install_binary(conn).await?;
        let ca = self.relay_ca()?;
        let ca_file = ca
            .as_ref()
            .map(|_| recipe::ca_file(&self.config.remote_dir));
        let remote_binary = self.remote_binary();
        let launch = self.launch(name, remote_binary.as_deref(), ca_file.as_deref());
        let files = recipe::files(&launch, token.expose());
        let ca_parts = ca.as_ref().map(|(pem, system)| (pem.as_str(), *system));
        // The script holds the token: it goes on stdin, never on a command line.
        let script = bytes::Bytes::from(install::script(&launch, &files, ca_parts));
        let out = conn.exec("sh -s", Some(script), COMMAND_TIMEOUT).await?;
        match install::parse(out.status, &String::from_utf8_lossy(&out.stdout)) {
            Outcome::Started { pid, ca_system } => {
                self.note_ca_system(ca_system.as_deref());
                Ok(pid)
            }
            Outcome::StepFailed { step, output } => Err(InjectError::Remote {
                step,
                status: out.status,
                output,
            }),
            Outcome::Exited { log } => Err(InjectError::SidecarExited { log }),
            Outcome::Broken { status, output } => Err(InjectError::Remote {
                step: "installing and starting the sidecar",
                status,
                output: if output.is_empty() {
                    out.complaint()
                } else {
                    output
                },
            }),
        }
    }

    /// Logs which system CA certificates joined the relay's in the sidecar's bundle.
    fn note_ca_system(&self, system: Option<&str>) {
        let Some(ca) = &self.ca else { return };
        match system {
            Some("none") | None => {
                tracing::warn!(tried = ?ca.system_ca_files, "no system CA certificates on the machine: the sidecar trusts only the relay's CA, and HTTPS clones from GitLab may fail")
            }
            Some(file) => {
                tracing::debug!(system_ca_file = %file, "CA bundle written: the relay's CA and the machine's system CAs")
            }
        }
    }

    /// The last lines of the sidecar's log on the machine, for troubleshooting.
    pub async fn log_tail(&self, conn: &Connection, lines: u32) -> String {
        let command = format!(
            "tail -n {lines} {}/sidecar.log 2>/dev/null",
            self.config.remote_dir
        );
        match conn.exec(&command, None, COMMAND_TIMEOUT).await {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(e) => format!("(cannot read the log: {e})"),
        }
    }

    /// Whether the sidecar process still runs on the machine (a zombie does not count).
    pub async fn sidecar_alive(&self, conn: &Connection) -> Result<bool, InjectError> {
        let dir = &self.config.remote_dir;
        let command = format!(
            "pid=$(cat {dir}/sidecar.pid 2>/dev/null) && kill -0 \"$pid\" 2>/dev/null && [ \"$(ps -o stat= -p \"$pid\" 2>/dev/null | cut -c1)\" != Z ]"
        );
        Ok(conn.exec(&command, None, COMMAND_TIMEOUT).await?.success())
    }

    /// Asks the sidecar to stop (SIGTERM: it finishes nothing new and exits).
    pub async fn stop(&self, conn: &Connection) -> Result<(), InjectError> {
        let dir = &self.config.remote_dir;
        let command = format!(
            "test -f {dir}/sidecar.pid && kill -TERM $(cat {dir}/sidecar.pid) 2>/dev/null; true"
        );
        self.run(conn, "stopping the sidecar", &command, None)
            .await
            .map(|_| ())
    }
}
