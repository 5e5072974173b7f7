//! `[pools.sidecar]`: which runner serves a pool's jobs on its machines, and how it gets there
//! and is started.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::reader::Section;
use super::resolve;
use super::values::duration_or;

/// How the sidecar is started on a machine.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    pub mode: SidecarMode,
    /// How the sidecar gets onto a machine.
    pub start: SidecarStart,
    /// A local file uploaded to the machine when it lacks it (checksum verified).
    pub binary: Option<PathBuf>,
    /// The sidecar's directory on the machine, relative to the login user's home.
    pub remote_dir: String,
    /// Run on the machine before the sidecar starts; a non-zero exit fails the machine.
    pub ready_command: Option<String>,
    /// From `running` at the provider to the sidecar's first poll: SSH, ready command,
    /// upload, start.
    pub ready_timeout: Duration,
    /// After a ready machine's sidecar has been silent this long, the machine is lost.
    pub silence_timeout: Duration,
    /// From where the machine's sidecar token is accepted.
    pub token_binding: super::TokenBinding,
    /// The user the built-in sidecar runs job scripts as (`None`: its own user).
    pub job_user: Option<String>,
}

/// How a pool's machines get their sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarStart {
    /// The autoscaler connects over SSH, uploads the binary and starts the sidecar.
    Ssh,
    /// The provisioner hands the machine a bootstrap script as its user-data; the machine
    /// starts its sidecar itself (no SSH from the autoscaler to the machine).
    UserData,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarMode {
    /// The project's own sidecar (`sidecar run`).
    Builtin,
    /// Stock `gitlab-runner run` with a generated `config.toml`.
    GitlabRunner {
        executor: String,
        /// TOML lines added to the generated `[[runners]]` entry (executor options).
        extra_config: String,
    },
    /// Any runner: a command template with `{url}`, `{token}`, `{concurrency}`, `{name}`,
    /// `{binary}` and `{dir}`.
    Command { template: String },
}

pub(super) fn read_sidecar(s: Section<'_>, base_dir: &Path) -> Option<SidecarConfig> {
    let mode_name: String = s.or("mode", "builtin".to_string());
    let executor: Option<String> = s.optional("executor");
    let extra_config: Option<String> = s.optional("executor_config");
    let template: Option<String> = s.optional("command");
    let mode = match mode_name.as_str() {
        "builtin" => Some(SidecarMode::Builtin),
        "gitlab-runner" => Some(SidecarMode::GitlabRunner {
            executor: executor.clone().unwrap_or_else(|| "shell".into()),
            extra_config: extra_config.clone().unwrap_or_default(),
        }),
        "command" => match &template {
            Some(t) if t.contains("{url}") && t.contains("{token}") => Some(SidecarMode::Command {
                template: t.clone(),
            }),
            Some(_) => {
                s.problem("command", "must contain {url} and {token}");
                None
            }
            None => {
                s.problem("command", "is required with mode = \"command\"");
                None
            }
        },
        other => {
            s.problem(
                "mode",
                format!("{other:?} is not one of builtin, gitlab-runner, command"),
            );
            None
        }
    };
    if mode_name != "gitlab-runner" && (executor.is_some() || extra_config.is_some()) {
        s.problem("executor", "only applies to mode = \"gitlab-runner\"");
    }
    if mode_name != "command" && template.is_some() {
        s.problem("command", "only applies to mode = \"command\"");
    }
    let binary: Option<PathBuf> = s
        .optional::<PathBuf>("binary")
        .map(|b| resolve(base_dir, b));
    if let Some(b) = &binary
        && !b.is_file()
    {
        s.problem("binary", format!("{} is not a file", b.display()));
    }
    let remote_dir: String = s.or("remote_dir", "autoscaler-sidecar".to_string());
    if remote_dir.is_empty() || remote_dir.contains(['\'', '"', '`', '$', '\\', '\n', ' ']) {
        s.problem(
            "remote_dir",
            "must be a plain path without spaces, quotes or shell characters",
        );
    }
    let start_name: String = s.or("start", "ssh".to_string());
    let start = match start_name.as_str() {
        "ssh" => Some(SidecarStart::Ssh),
        "user_data" => Some(SidecarStart::UserData),
        other => {
            s.problem("start", format!("{other:?} is not one of ssh, user_data"));
            None
        }
    };
    // Every key is read before a bad mode or start ends the table, so that one run of
    // check-config names every problem of it.
    let ready_command = s.optional("ready_command");
    let ready_timeout = duration_or(&s, "ready_timeout", Duration::from_secs(300));
    let silence_timeout = duration_or(&s, "silence_timeout", Duration::from_secs(45));
    let token_binding = super::token_binding::read_token_binding(&s);
    let job_user = super::job_user::read_job_user(&s, mode_name == "builtin");
    s.finish();
    Some(SidecarConfig {
        mode: mode?,
        start: start?,
        binary,
        remote_dir,
        ready_command,
        ready_timeout,
        silence_timeout,
        token_binding,
        job_user,
    })
}
