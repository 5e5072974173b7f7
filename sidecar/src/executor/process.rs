//! Running one stage script: `bash --noprofile --norc <script>` in its own process group,
//! stdout and stderr on one pipe (so their order is kept) streamed into the trace, with
//! a deadline and cancellation that signal the whole group.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::user::JobUser;
use super::{ExecutorError, Interrupt};
use crate::trace::Trace;

/// After the script's shell exited, how long to keep reading output of processes that
/// escaped the group kill before giving up on the pipe.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Environment variables of the sidecar that jobs must never see.
const HIDDEN_ENV: &[&str] = &["SIDECAR_TOKEN", "SIDECAR_REGISTRATION_TOKEN"];

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageEnd {
    /// The script exited by itself with this code (128 + signal if it was signalled).
    Exited(i32),
    /// The deadline passed; the group was terminated.
    TimedOut,
    /// An interrupt at or above the stage's `stop_at` level arrived.
    Interrupted(Interrupt),
}

/// Limits of one stage.
#[derive(Debug, Clone, Copy)]
pub struct StageLimits {
    pub deadline: Option<Instant>,
    /// Interrupt level that stops this stage (`Cancel` for the job script, `Abort` for
    /// after_script, which a graceful cancel must not stop).
    pub stop_at: Interrupt,
    /// SIGTERM → SIGKILL grace for timeouts and graceful cancel.
    pub kill_grace: Duration,
}

/// Kills the process group if the stage future is dropped before the group was reaped,
/// so that no job process outlives its job.
struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (group already gone) is expected and harmless.
            let _ = killpg(pgid, signal);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Run `script` with bash in `cwd` (as `run_as` when given), streaming its output into `trace`.
pub async fn run_bash(
    script: &Path,
    cwd: &Path,
    trace: &Trace,
    mut interrupts: watch::Receiver<Interrupt>,
    limits: StageLimits,
    run_as: Option<&JobUser>,
) -> Result<StageEnd, ExecutorError> {
    let current = *interrupts.borrow_and_update();
    if current >= limits.stop_at {
        return Ok(StageEnd::Interrupted(current));
    }

    let (reader, writer) = std::io::pipe().map_err(ExecutorError::Spawn)?;
    let writer_err = writer.try_clone().map_err(ExecutorError::Spawn)?;
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("--noprofile")
        .arg("--norc")
        .arg(script)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err))
        .process_group(0)
        .kill_on_drop(true);
    for name in HIDDEN_ENV {
        command.env_remove(name);
    }
    if let Some(user) = run_as {
        user.apply(&mut command);
    }
    let mut child = command.spawn().map_err(ExecutorError::Spawn)?;
    // Our copies of the pipe's write end live in `command`; drop them so EOF arrives
    // once the job's processes are gone.
    drop(command);
    let mut guard = GroupGuard {
        pgid: child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    };
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(ExecutorError::Spawn)?;

    let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
    let mut buf = vec![0u8; 64 * 1024];
    let mut exit: Option<ExitStatus> = None;
    let mut eof = false;
    let mut stopped: Option<StageEnd> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut drain_until: Option<Instant> = None;
    let mut watching = true;

    while !(eof && exit.is_some()) {
        tokio::select! {
            read = pipe.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => trace.write(&buf[..n]),
            },
            status = child.wait(), if exit.is_none() => {
                exit = Some(status.map_err(ExecutorError::Wait)?);
                // Background processes left behind by the script die with the stage.
                guard.signal(Signal::SIGKILL);
                guard.pgid = None;
                drain_until = Some(Instant::now() + DRAIN_TIMEOUT);
            },
            _ = tokio::time::sleep_until(limits.deadline.unwrap_or(far)),
                if stopped.is_none() && exit.is_none() && limits.deadline.is_some() => {
                stopped = Some(StageEnd::TimedOut);
                guard.signal(Signal::SIGTERM);
                kill_at = Some(Instant::now() + limits.kill_grace);
            },
            changed = interrupts.changed(), if watching && exit.is_none() => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let level = *interrupts.borrow_and_update();
                if level < limits.stop_at {
                    continue;
                }
                if stopped.is_none() {
                    stopped = Some(StageEnd::Interrupted(level));
                }
                if level >= Interrupt::Abort {
                    guard.signal(Signal::SIGKILL);
                    killed = true;
                } else if kill_at.is_none() {
                    guard.signal(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + limits.kill_grace);
                }
            },
            _ = tokio::time::sleep_until(kill_at.unwrap_or(far)),
                if kill_at.is_some() && !killed && exit.is_none() => {
                guard.signal(Signal::SIGKILL);
                killed = true;
            },
            _ = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() && !eof => {
                tracing::warn!("stage output pipe still open after the script exited; not reading further");
                eof = true;
            },
        }
    }
    match (stopped, exit) {
        (Some(end), _) => Ok(end),
        (None, Some(status)) => Ok(StageEnd::Exited(exit_code(status))),
        (None, None) => Err(ExecutorError::Wait(std::io::Error::other("no exit status"))),
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
