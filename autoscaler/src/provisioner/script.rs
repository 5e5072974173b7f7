//! Running a provisioner script: the one place the autoscaler starts processes.
//!
//! Each call gets explicit argv (verb, id), a clean environment, its own process group, a
//! timeout after which the whole group is killed, a bounded stdout, and its stderr copied line
//! by line into our log with the pool, verb and machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::Semaphore;

use super::protocol::{ErrorResponse, PROTOCOL};
use super::{ProvisionerError, Result, Timeouts};

/// Most a provisioner may print on stdout (the protocol's limit).
pub const STDOUT_LIMIT: usize = 1 << 20;
/// Longest stderr line kept; longer lines are cut.
const STDERR_LINE_LIMIT: usize = 4096;
/// How long a process gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Variables of our own environment a provisioner may see.
const PASSED_THROUGH: &[&str] = &["PATH", "HOME", "USER", "LANG", "TMPDIR"];

#[derive(Debug)]
pub struct ScriptProvisioner {
    command: PathBuf,
    pool: String,
    autoscaler_id: String,
    env: BTreeMap<String, String>,
    timeouts: Timeouts,
    limit: Arc<Semaphore>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// Everything a call produced, before interpretation (the conformance kit looks at this).
#[derive(Debug)]
pub struct RawCall {
    pub status: Option<ExitStatus>,
    pub stdout: Vec<u8>,
    pub stdout_overflow: bool,
    pub timed_out: bool,
    pub elapsed: Duration,
    /// The last few stderr lines, for error messages.
    pub stderr_tail: Vec<String>,
}

impl ScriptProvisioner {
    pub fn new(
        command: PathBuf,
        pool: &str,
        autoscaler_id: &str,
        env: BTreeMap<String, String>,
        timeouts: Timeouts,
        max_concurrency: usize,
    ) -> Self {
        // The script runs in its own directory, so a relative path must not stay relative.
        let command = std::path::absolute(&command).unwrap_or(command);
        Self {
            command,
            pool: pool.to_string(),
            autoscaler_id: autoscaler_id.to_string(),
            env,
            timeouts,
            limit: Arc::new(Semaphore::new(max_concurrency.max(1))),
            metrics: None,
        }
    }

    /// Records every call's verb, exit class and duration in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn command(&self) -> &Path {
        &self.command
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    fn environment(&self) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = PASSED_THROUGH
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_string(), v)))
            .collect();
        env.insert("AUTOSCALER_PROTOCOL".into(), PROTOCOL.to_string());
        env.insert("AUTOSCALER_POOL".into(), self.pool.clone());
        env.insert("AUTOSCALER_ID".into(), self.autoscaler_id.clone());
        env.extend(self.env.clone());
        env
    }

    /// A request object with the fields every request carries.
    pub fn request(&self, fields: serde_json::Value) -> serde_json::Value {
        let mut request = json!({"protocol": PROTOCOL, "pool": self.pool});
        if let (Some(r), Some(f)) = (request.as_object_mut(), fields.as_object()) {
            r.extend(f.clone());
        }
        request
    }

    /// Runs the provisioner once with `args` and `stdin`, within `timeout`.
    pub async fn call_raw(
        &self,
        args: &[&str],
        stdin: &[u8],
        timeout: Duration,
        machine: Option<&str>,
    ) -> Result<RawCall> {
        let _permit = self.limit.acquire().await.map_err(|_| {
            ProvisionerError::Spawn("the provisioner's concurrency limit was closed".into())
        })?;
        let started = crate::clock::monotonic();
        let dir = self
            .command
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut child = Command::new(&self.command)
            .args(args)
            .env_clear()
            .envs(self.environment())
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ProvisionerError::Spawn(format!("{}: {e}", self.command.display())))?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let tail = Arc::new(Mutex::new(Vec::new()));
        let verb = args.first().copied().unwrap_or("").to_string();
        // The lines belong to the call's span (pool, verb, machine) when it has one.
        let mut stderr_task = child.stderr.take().map(|stderr| {
            tokio::spawn(tracing::Instrument::in_current_span(log_stderr(
                stderr,
                self.pool.clone(),
                verb,
                machine.map(str::to_string),
                tail.clone(),
            )))
        });
        if let Some(mut input) = child.stdin.take() {
            // A script may exit without reading its input; a broken pipe is not our failure.
            let _ = input.write_all(stdin).await;
        }
        let mut stdout = child.stdout.take();
        let work = async {
            let (out, overflow) = match stdout.as_mut() {
                Some(s) => read_bounded(s, STDOUT_LIMIT).await,
                None => (Vec::new(), false),
            };
            if overflow {
                return (None, out, true);
            }
            (child.wait().await.ok(), out, false)
        };
        let (status, stdout_bytes, overflow, timed_out) =
            match tokio::time::timeout(timeout, work).await {
                Ok((status, out, overflow)) => (status, out, overflow, false),
                Err(_) => (None, Vec::new(), false, true),
            };
        if timed_out || overflow || status.is_none() {
            kill_group(group, &mut child).await;
        } else if let Some(g) = group {
            // The script is done; anything it left running in its group must not outlive it.
            let _ = killpg(g, Signal::SIGKILL);
        }
        // Let the stderr task log the last lines before we quote them (briefly: a process the
        // script detached may hold stderr open forever).
        if let Some(task) = stderr_task.as_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(200), task).await;
        }
        let stderr_tail = tail.lock().map(|t| t.clone()).unwrap_or_default();
        Ok(RawCall {
            status,
            stdout: stdout_bytes,
            stdout_overflow: overflow,
            timed_out,
            elapsed: started.elapsed(),
            stderr_tail,
        })
    }

    /// Runs a verb and reads its answer with `parse`, or returns the error its exit code
    /// stands for; the outcome is counted by exit class.
    async fn call<T>(
        &self,
        verb: &str,
        id: Option<&str>,
        fields: serde_json::Value,
        timeout: Duration,
        parse: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        let request = serde_json::to_vec(&self.request(fields))
            .map_err(|e| ProvisionerError::Spawn(e.to_string()))?;
        let mut args = vec![verb];
        args.extend(id);
        let started = crate::clock::monotonic();
        let span = tracing::info_span!("provisioner", pool = %self.pool, verb, machine.id = id.unwrap_or(""));
        let result =
            tracing::Instrument::instrument(self.call_raw(&args, &request, timeout, id), span)
                .await
                .and_then(|raw| interpret(raw, timeout))
                .and_then(|out| parse(&out));
        if let Some(metrics) = &self.metrics {
            metrics.provisioner_call(&self.pool, verb, exit_class(&result), started.elapsed());
        }
        result
    }
}

/// The `exit` label of a call's outcome.
fn exit_class<T>(result: &Result<T>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(ProvisionerError::RetryLater { .. }) => "retry_later",
        Err(ProvisionerError::Permanent { .. }) => "permanent",
        Err(ProvisionerError::Failed { .. }) => "failed",
        Err(ProvisionerError::TimedOut(_)) => "timeout",
        Err(ProvisionerError::InvalidResponse(_)) => "invalid_response",
        Err(ProvisionerError::OutputTooLarge(_)) => "output_too_large",
        Err(ProvisionerError::Spawn(_)) => "spawn_error",
    }
}

/// Turns a finished call into its stdout or an error, by the protocol's exit codes.
pub fn interpret(raw: RawCall, timeout: Duration) -> Result<Vec<u8>> {
    if raw.timed_out {
        return Err(ProvisionerError::TimedOut(timeout));
    }
    if raw.stdout_overflow {
        return Err(ProvisionerError::OutputTooLarge(STDOUT_LIMIT));
    }
    let Some(status) = raw.status else {
        return Err(ProvisionerError::Failed {
            exit: "unknown".into(),
            message: "the process could not be waited for".into(),
        });
    };
    if status.success() {
        return Ok(raw.stdout);
    }
    let body: ErrorResponse = serde_json::from_slice(&raw.stdout).unwrap_or_default();
    let message = body
        .error
        .or_else(|| (!raw.stderr_tail.is_empty()).then(|| raw.stderr_tail.join(" | ")))
        .unwrap_or_else(|| "no error message".into());
    Err(match status.code() {
        Some(75) => ProvisionerError::RetryLater {
            message,
            retry_after: body.retry_after.map(Duration::from_secs),
        },
        Some(78) => ProvisionerError::Permanent { message },
        Some(code) => ProvisionerError::Failed {
            exit: format!("exit {code}"),
            message,
        },
        None => ProvisionerError::Failed {
            exit: format!(
                "killed by signal {}",
                std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
            ),
            message,
        },
    })
}

async fn kill_group(group: Option<Pid>, child: &mut tokio::process::Child) {
    if let Some(g) = group {
        let _ = killpg(g, Signal::SIGTERM);
        if tokio::time::timeout(KILL_GRACE, child.wait())
            .await
            .is_err()
        {
            let _ = killpg(g, Signal::SIGKILL);
        } else {
            // The leader is gone; children it left in the group get no grace.
            let _ = killpg(g, Signal::SIGKILL);
        }
    }
    let _ = child.kill().await;
}

/// Reads until end of file or until more than `limit` bytes arrived (then `overflow`).
async fn read_bounded(reader: &mut (impl AsyncReadExt + Unpin), limit: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return (out, false),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > limit {
                    out.truncate(limit);
                    return (out, true);
                }
            }
        }
    }
}

async fn log_stderr(
    stderr: tokio::process::ChildStderr,
    pool: String,
    verb: String,
    machine: Option<String>,
    tail: Arc<Mutex<Vec<String>>>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(STDERR_LINE_LIMIT as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        if text.is_empty() {
            continue;
        }
        tracing::info!(target: "provisioner", pool = %pool, verb = %verb, machine.id = machine.as_deref().unwrap_or(""), "{text}");
        if let Ok(mut t) = tail.lock() {
            t.push(text);
            let excess = t.len().saturating_sub(5);
            t.drain(..excess);
        }
    }
}

mod verbs;

#[cfg(test)]
mod tests;
