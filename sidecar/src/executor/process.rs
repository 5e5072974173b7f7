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
mod tests {
    use super::*;
    use crate::executor::Interrupts;
    use crate::trace::buffer::TraceBuffer;
    use crate::trace::masker::Masker;

    fn trace() -> Trace {
        let m = Masker::new(Vec::<String>::new(), Vec::<String>::new());
        Trace::new(TraceBuffer::new(m, 1 << 20), false)
    }

    fn limits(deadline: Option<Instant>, stop_at: Interrupt) -> StageLimits {
        StageLimits {
            deadline,
            stop_at,
            kill_grace: Duration::from_secs(2),
        }
    }

    fn script(dir: &Path, body: &str) -> std::path::PathBuf {
        let path = dir.join("stage.sh");
        std::fs::write(&path, body).unwrap();
        path
    }

    /// Alive = exists and is not a zombie (a killed orphan waits for init to reap it).
    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => false,
            Ok(stat) => {
                let state = stat
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next());
                !matches!(state, Some("Z") | Some("X"))
            }
        }
    }

    /// A killed process may still be on its way out right after its pipe closed (files
    /// are closed before the exit completes); poll its state for a bounded time.
    async fn dies(pid: i32) -> bool {
        for _ in 0..500 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// Blocks until the script writes a line into the FIFO at `path`: an event, not a sleep.
    async fn wait_fifo(path: std::path::PathBuf) -> String {
        tokio::task::spawn_blocking(move || std::fs::read_to_string(path).unwrap())
            .await
            .unwrap()
    }

    fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    #[tokio::test]
    async fn output_order_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(dir.path(), "echo out1\necho err1 >&2\necho out2\nexit 3\n");
        let t = trace();
        let i = Interrupts::new();
        let end = run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(None, Interrupt::Cancel),
            None,
        )
        .await
        .unwrap();
        assert_eq!(end, StageEnd::Exited(3));
        assert_eq!(t.contents(), b"out1\nerr1\nout2\n");
    }

    #[tokio::test]
    async fn sidecar_token_is_not_inherited() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(dir.path(), "echo \"token=${SIDECAR_TOKEN:-unset}\"\n");
        let t = trace();
        let i = Interrupts::new();
        // The variable is removed from the child's environment whatever the parent has.
        run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(None, Interrupt::Cancel),
            None,
        )
        .await
        .unwrap();
        assert_eq!(t.contents(), b"token=unset\n");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg.pid");
        let s = script(
            dir.path(),
            &format!("sleep 60 &\necho $! > {}\nsleep 60\n", pidfile.display()),
        );
        let t = trace();
        let i = Interrupts::new();
        let deadline = Instant::now() + Duration::from_millis(500);
        let started = std::time::Instant::now();
        let end = run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(Some(deadline), Interrupt::Cancel),
            None,
        )
        .await
        .unwrap();
        assert_eq!(end, StageEnd::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(10));
        let bg: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(dies(bg).await, "background process {bg} survived");
    }

    #[tokio::test]
    async fn leftover_background_processes_do_not_block_the_stage() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg.pid");
        let s = script(
            dir.path(),
            &format!("sleep 60 &\necho $! > {}\necho done\n", pidfile.display()),
        );
        let t = trace();
        let i = Interrupts::new();
        let end = run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(None, Interrupt::Cancel),
            None,
        )
        .await
        .unwrap();
        assert_eq!(end, StageEnd::Exited(0));
        assert_eq!(t.contents(), b"done\n");
        let bg: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(dies(bg).await, "background process {bg} survived");
    }

    #[tokio::test]
    async fn cancel_stops_a_job_stage_but_not_after_script() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("ready");
        mkfifo(&fifo);
        let s = script(
            dir.path(),
            &format!("echo ready > {}\nsleep 60\n", fifo.display()),
        );
        let t = trace();
        let i = Interrupts::new();
        let run = run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(None, Interrupt::Cancel),
            None,
        );
        let (end, _) = tokio::join!(run, async {
            wait_fifo(fifo.clone()).await;
            i.raise(Interrupt::Cancel);
        });
        assert_eq!(end.unwrap(), StageEnd::Interrupted(Interrupt::Cancel));

        // The same cancel level does not stop a stage that only stops at Abort.
        let fifo2 = dir.path().join("ready2");
        mkfifo(&fifo2);
        let s = script(
            dir.path(),
            &format!("echo ready > {}\necho after\n", fifo2.display()),
        );
        let t = trace();
        let run = run_bash(
            &s,
            dir.path(),
            &t,
            i.subscribe(),
            limits(None, Interrupt::Abort),
            None,
        );
        let (end, _) = tokio::join!(run, wait_fifo(fifo2.clone()));
        assert_eq!(end.unwrap(), StageEnd::Exited(0));
        assert_eq!(t.contents(), b"after\n");
    }

    #[tokio::test]
    async fn abort_kills_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("ready");
        mkfifo(&fifo);
        // The script ignores SIGTERM: only SIGKILL ends it, so a fast end proves Abort
        // did not wait for the grace period.
        let s = script(
            dir.path(),
            &format!("trap '' TERM\necho ready > {}\nsleep 60\n", fifo.display()),
        );
        let t = trace();
        let i = Interrupts::new();
        let mut l = limits(None, Interrupt::Cancel);
        l.kill_grace = Duration::from_secs(60);
        let started = std::time::Instant::now();
        let run = run_bash(&s, dir.path(), &t, i.subscribe(), l, None);
        let (end, _) = tokio::join!(run, async {
            wait_fifo(fifo.clone()).await;
            i.raise(Interrupt::Abort);
        });
        assert_eq!(end.unwrap(), StageEnd::Interrupted(Interrupt::Abort));
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
