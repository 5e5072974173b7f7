//! The edge towards machines: SSH with russh.
//!
//! Host keys are checked on every connection: a key pinned by the provisioner, or the key seen
//! on the first connection, must be presented again; anything else is refused. The client key is
//! the configured key file (refused if others can read it) or a key pair generated once into the
//! state directory.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKey};
use russh::{ChannelMsg, client};

/// Most bytes of stdout or stderr kept from one remote command.
const OUTPUT_LIMIT: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("cannot reach {target}: {detail}")]
    Connect { target: String, detail: String },
    #[error(
        "{target} presented host key {presented}, but {expected} is pinned: refusing to connect"
    )]
    HostKeyMismatch {
        target: String,
        expected: String,
        presented: String,
    },
    #[error("{target} refused our key for user {user}")]
    AuthRefused { target: String, user: String },
    #[error("SSH to {target} failed: {detail}")]
    Protocol { target: String, detail: String },
    #[error("{what} on {target} did not finish within {after:?}")]
    Timeout {
        target: String,
        what: String,
        after: Duration,
    },
    #[error("the SSH key {path} cannot be used: {detail}")]
    Key { path: String, detail: String },
}

/// The autoscaler's SSH identity.
#[derive(Clone)]
pub struct ClientKey {
    key: Arc<PrivateKey>,
    public: String,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl ClientKey {
    /// Loads `key_file`, or the generated key in `state_dir` (creating it on first use).
    pub fn load_or_generate(key_file: Option<&Path>, state_dir: &Path) -> Result<Self, SshError> {
        let path = key_file.map_or_else(
            || state_dir.join("ssh").join("id_ed25519"),
            Path::to_path_buf,
        );
        let err = |detail: String| SshError::Key {
            path: path.display().to_string(),
            detail,
        };
        if !path.exists() {
            if key_file.is_some() {
                return Err(err("does not exist".into()));
            }
            Self::generate(&path).map_err(err)?;
        }
        let mode = std::fs::metadata(&path)
            .map_err(|e| err(e.to_string()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "its mode is {:o}: group or others can read it; chmod 600 it",
                mode & 0o777
            )));
        }
        let key = russh::keys::load_secret_key(&path, None).map_err(|e| err(e.to_string()))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            key: Arc::new(key),
            public,
        })
    }

    fn generate(path: &PathBuf) -> Result<(), String> {
        let key = PrivateKey::random(&mut rand::rng(), russh::keys::Algorithm::Ed25519)
            .map_err(|e| e.to_string())?;
        let text = key
            .to_openssh(russh::keys::ssh_key::LineEnding::LF)
            .map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| e.to_string())?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(|e| e.to_string())?;
        tracing::info!(path = %path.display(), "generated the autoscaler's SSH key");
        Ok(())
    }

    /// `ssh-ed25519 AAAA...`, handed to provisioners to authorise.
    pub fn public_openssh(&self) -> &str {
        &self.public
    }
}

/// Where to connect and which host key to require.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// `type base64` of the host key that must be presented; `None` accepts the first key seen
    /// (which the caller then records and pins).
    pub host_key: Option<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}:{}", self.user, self.host, self.port)
    }
}

struct HostKeyCheck {
    expected: Option<PublicKey>,
    /// The key the server presented, whatever the verdict.
    presented: Arc<Mutex<Option<String>>>,
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = server else {
            return Ok(false);
        };
        let mut presented = key.clone();
        presented.set_comment("");
        if let Ok(text) = presented.to_openssh()
            && let Ok(mut slot) = self.presented.lock()
        {
            *slot = Some(text.trim().to_string());
        }
        Ok(match &self.expected {
            Some(expected) => expected.key_data() == key.key_data(),
            None => true,
        })
    }
}

/// An open SSH connection.
pub struct Connection {
    handle: client::Handle<HostKeyCheck>,
    target: Target,
    /// The host key the machine presented (`type base64`).
    pub host_key: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// What a remote command did.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// The end of stderr (or stdout), for error messages.
    /// Keeps what one channel message says about the command.
    fn take(&mut self, msg: ChannelMsg) {
        match msg {
            ChannelMsg::Data { data } if self.stdout.len() < OUTPUT_LIMIT => {
                self.stdout.extend_from_slice(&data);
            }
            ChannelMsg::ExtendedData { data, .. } if self.stderr.len() < OUTPUT_LIMIT => {
                self.stderr.extend_from_slice(&data);
            }
            ChannelMsg::ExitStatus { exit_status } => self.status = Some(exit_status),
            _ => {}
        }
    }

    pub fn complaint(&self) -> String {
        let text = if self.stderr.is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        let text = String::from_utf8_lossy(text);
        let tail: Vec<&str> = text.lines().rev().take(3).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

fn parse_host_key(text: &str) -> Option<PublicKey> {
    PublicKey::from_openssh(text.trim()).ok()
}

impl Connection {
    /// Connects and authenticates, within `timeout`.
    #[tracing::instrument(name = "ssh", skip_all, fields(target = %target))]
    pub async fn open(
        target: &Target,
        key: &ClientKey,
        timeout: Duration,
    ) -> Result<Self, SshError> {
        let name = target.to_string();
        let expected = match &target.host_key {
            Some(text) => Some(parse_host_key(text).ok_or_else(|| SshError::Protocol {
                target: name.clone(),
                detail: format!("the pinned host key {text:?} is not an OpenSSH public key"),
            })?),
            None => None,
        };
        let presented = Arc::new(Mutex::new(None));
        let check = HostKeyCheck {
            expected,
            presented: presented.clone(),
        };
        let config = Arc::new(client::Config {
            inactivity_timeout: Some(Duration::from_secs(120)),
            keepalive_interval: Some(Duration::from_secs(30)),
            // Injection is a few small request-and-answer exchanges: without this, Nagle's
            // algorithm holds each small packet until the previous one is acknowledged.
            nodelay: true,
            ..Default::default()
        });
        let connect = async {
            let mut handle =
                client::connect(config, (target.host.as_str(), target.port), check).await?;
            let hash = handle.best_supported_rsa_hash().await?.flatten();
            let auth = handle
                .authenticate_publickey(
                    &target.user,
                    PrivateKeyWithHashAlg::new(key.key.clone(), hash),
                )
                .await?;
            Ok::<_, russh::Error>((handle, auth.success()))
        };
        let result =
            tokio::time::timeout(timeout, connect)
                .await
                .map_err(|_| SshError::Timeout {
                    target: name.clone(),
                    what: "connecting".into(),
                    after: timeout,
                })?;
        let seen = presented.lock().ok().and_then(|s| s.clone());
        let (handle, authenticated) = match result {
            Ok(ok) => ok,
            Err(russh::Error::UnknownKey) => {
                return Err(SshError::HostKeyMismatch {
                    target: name,
                    expected: target.host_key.clone().unwrap_or_default(),
                    presented: seen.unwrap_or_else(|| "(none)".into()),
                });
            }
            Err(russh::Error::IO(e)) => {
                return Err(SshError::Connect {
                    target: name,
                    detail: e.to_string(),
                });
            }
            Err(e) => {
                return Err(SshError::Protocol {
                    target: name,
                    detail: e.to_string(),
                });
            }
        };
        if !authenticated {
            return Err(SshError::AuthRefused {
                target: name,
                user: target.user.clone(),
            });
        }
        Ok(Self {
            handle,
            target: target.clone(),
            host_key: seen.unwrap_or_default(),
        })
    }

    fn protocol(&self, e: impl std::fmt::Display) -> SshError {
        SshError::Protocol {
            target: self.target.to_string(),
            detail: e.to_string(),
        }
    }

    /// Runs `command` (through the remote user's shell), feeding it `stdin`, within `timeout`.
    ///
    /// Input is written while output is read, and a command may end without reading all its
    /// input: the rest is then not sent. That lets one command decide on the machine whether
    /// it needs what is being streamed to it (the sidecar binary it may already have).
    pub async fn exec(
        &self,
        command: &str,
        stdin: Option<Bytes>,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let run = async {
            let channel = self
                .handle
                .channel_open_session()
                .await
                .map_err(|e| self.protocol(e))?;
            channel
                .exec(true, command)
                .await
                .map_err(|e| self.protocol(e))?;
            let (mut reader, writer) = channel.split();
            let writing = async {
                if let Some(input) = stdin {
                    // Owned bytes go out in packets as large as the peer allows, uncopied.
                    writer.data_bytes(input).await?;
                }
                writer.eof().await
            };
            let reading = async {
                let mut out = Output {
                    status: None,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                };
                while let Some(msg) = reader.wait().await {
                    out.take(msg);
                }
                out
            };
            tokio::pin!(writing, reading);
            let mut written = false;
            loop {
                tokio::select! {
                    done = &mut writing, if !written => {
                        written = true;
                        if let Err(e) = done {
                            // The command's exit status (read below) tells whether that mattered.
                            tracing::debug!(target = %self.target, error = %e, "input not fully sent");
                        }
                    }
                    out = &mut reading => break Ok(out),
                }
            }
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| SshError::Timeout {
                target: self.target.to_string(),
                what: format!("`{}`", command.chars().take(60).collect::<String>()),
                after: timeout,
            })?
    }

    pub async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}
