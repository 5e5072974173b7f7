//! Child processes of a test or the demo: the project's real binaries, started with explicit
//! arguments, their stderr passed through (the test runner captures it), killed when dropped.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the workspace's binaries are: next to the running executable (a binary of this crate)
/// or one level up (an integration test in `deps/`).
pub fn binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    let mut dir = exe
        .parent()
        .context("executable has no directory")?
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} is not built; run `cargo build --workspace --bins` (or `cargo xtask test`) first",
            path.display()
        );
    }
    Ok(path)
}

/// A running child process.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `command` with stderr passed through and stdout drained into stderr, each line
    /// prefixed with `name`.
    pub fn spawn(name: &str, mut command: Command) -> Result<Self> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        if let Some(stdout) = child.stdout.take() {
            forward_lines(name.to_string(), stdout);
        }
        Ok(Self {
            name: name.to_string(),
            child,
        })
    }

    /// Starts a server that prints `listening on http://ADDR` once bound, and returns its URL.
    pub async fn spawn_listening(name: &str, command: Command) -> Result<(Self, String)> {
        let (proc, mut urls) = Self::spawn_announcing(name, command, 1).await?;
        Ok((proc, urls.remove(0)))
    }

    /// Starts a server that prints `lines` lines `... listening on http://ADDR` once bound (the
    /// autoscaler with an admin API prints two), and returns the URLs in order.
    pub async fn spawn_announcing(
        name: &str,
        command: Command,
        lines: usize,
    ) -> Result<(Self, Vec<String>)> {
        Self::spawn_announcing_logging(name, command, lines, Stdio::inherit()).await
    }

    /// [`Proc::spawn_announcing`] with stderr (the logs) going to `stderr`, e.g. a file.
    pub async fn spawn_announcing_logging(
        name: &str,
        mut command: Command,
        lines: usize,
        stderr: Stdio,
    ) -> Result<(Self, Vec<String>)> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut reader = BufReader::new(stdout).lines();
        let mut urls = Vec::new();
        while urls.len() < lines {
            let line = tokio::time::timeout(Duration::from_secs(60), reader.next_line())
                .await
                .with_context(|| format!("{name} did not report its address within 60 s"))?
                .with_context(|| format!("reading {name}'s stdout"))?;
            let Some(url) = line
                .as_deref()
                .and_then(|l| l.split_once("listening on "))
                .map(|(_, u)| u)
            else {
                let status = child.try_wait().ok().flatten();
                bail!("{name} did not start (line {line:?}, exit status {status:?})");
            };
            urls.push(url.trim().to_string());
        }
        let name_owned = name.to_string();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                eprintln!("[{name_owned}] {line}");
            }
        });
        Ok((
            Self {
                name: name.to_string(),
                child,
            },
            urls,
        ))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends a signal (SIGTERM for a graceful stop, SIGKILL to crash it).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self.pid().context("process already reaped")?;
        let pid = Pid::from_raw(i32::try_from(pid).context("pid out of range")?);
        kill(pid, signal).with_context(|| format!("cannot send {signal} to {}", self.name))
    }

    /// Waits for the process to exit, at most `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .with_context(|| format!("{} did not exit within {timeout:?}", self.name))?
            .with_context(|| format!("waiting for {}", self.name))
    }

    /// SIGTERM, then wait.
    pub async fn stop(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.signal(Signal::SIGTERM)?;
        self.wait(timeout).await
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

fn forward_lines(name: String, stdout: tokio::process::ChildStdout) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[{name}] {line}");
        }
    });
}
