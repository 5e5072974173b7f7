//! `gitlab-python-runner` (PyPI, MIT), a runner written without this project in mind, driven
//! as a process: registration with a registration token, one job per `--start --once`, and
//! unregistration. It is installed pinned into a virtual environment under the target
//! directory by `fixtures/python-runner/install` (see `tests/README.md` for how it differs from
//! stock `gitlab-runner`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::stack::repo_root;

/// How long one job may take, clone included.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// The virtual environment, installed on first use (Python 3 and PyPI access needed).
pub fn install() -> Result<PathBuf> {
    install_venv("python-runner")
}

/// The virtual environment of `tests/e2e/fixtures/<fixture>/install`, made by that script in
/// `<target>/<fixture>-venv` on first use.
pub fn install_venv(fixture: &str) -> Result<PathBuf> {
    let venv = target_dir()?.join(format!("{fixture}-venv"));
    let script = repo_root().join(format!("tests/e2e/fixtures/{fixture}/install"));
    let status = std::process::Command::new(&script)
        .arg(&venv)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(venv)
}

/// The directory cargo builds into (the test binary lives in `<target>/<profile>/deps`).
pub fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .context("no target directory above the test binary")
}

/// One registered python runner, with its working directory (`gitlab-runner.yml`, builds).
#[derive(Debug)]
pub struct PythonRunner {
    venv: PathBuf,
    dir: PathBuf,
    pub token: String,
}

impl PythonRunner {
    /// `--register URL --regtoken TOKEN`: a form-encoded `POST /api/v4/runners` with the tags
    /// `a` and `b` as repeated fields; the answer's token is saved in `dir/gitlab-runner.yml`.
    pub async fn register(
        venv: &Path,
        url: &str,
        registration_token: &str,
        dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let output = python(venv, dir)
            .args(["--register", url, "--regtoken", registration_token])
            .args(["--desc", "python-runner", "--tag", "a", "--tag", "b"])
            .args(["--shell", "/bin/bash"])
            .output()
            .await?;
        if !output.status.success() {
            bail!(
                "registration failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let config = std::fs::read_to_string(dir.join("gitlab-runner.yml"))?;
        let token = config
            .lines()
            .find_map(|l| l.trim().strip_prefix("token:"))
            .map(|t| t.trim().trim_matches(['\'', '"']).to_string())
            .context("no token in gitlab-runner.yml")?;
        Ok(Self {
            venv: venv.to_path_buf(),
            dir: dir.to_path_buf(),
            token,
        })
    }

    /// `--start gitlab-runner.yml --once`: takes one job, runs it, reports it and exits. Enqueue
    /// the job first: after a `204` the runner sleeps 40 s before asking again.
    pub async fn run_once(&self) -> Result<String> {
        let mut command = python(&self.venv, &self.dir);
        command.args(["--start", "gitlab-runner.yml", "--once"]);
        let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
            .await
            .context("the python runner did not finish its job in time")??;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }

    /// `--unregister`: a form-encoded `DELETE /api/v4/runners`.
    pub async fn unregister(&self) -> Result<()> {
        let output = python(&self.venv, &self.dir)
            .arg("--unregister")
            .output()
            .await?;
        if !output.status.success() {
            bail!(
                "unregistration failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

fn python(venv: &Path, dir: &Path) -> Command {
    let mut command = Command::new(venv.join("bin/python"));
    command
        .args(["-m", "GitlabPyRunner"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true);
    command
}

/// A trace with what differs from run to run made fixed: the Unix times of section markers and
/// the names of the temporary build directories.
pub fn normalize_trace(trace: &str) -> String {
    let mut out = String::with_capacity(trace.len());
    let mut rest = trace;
    while !rest.is_empty() {
        let marker = ["section_start:", "section_end:"]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, m.len())))
            .chain(rest.find("/tmp").map(|i| (i, 0)))
            .min();
        let Some((at, len)) = marker else {
            out.push_str(rest);
            break;
        };
        if len > 0 {
            out.push_str(&rest[..at + len]);
            rest = rest[at + len..].trim_start_matches(|c: char| c.is_ascii_digit());
            out.push('T');
        } else {
            // `/tmpXXXXXXXX` directories made by Python's tempfile: keep the prefix only.
            out.push_str(&rest[..at + 4]);
            let tail = &rest[at + 4..];
            let name_len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push_str(if name_len == 8 {
                "XXXXXXXX"
            } else {
                &tail[..name_len]
            });
            rest = &tail[name_len..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize_trace;

    #[test]
    fn run_specific_parts_are_fixed() {
        assert_eq!(
            normalize_trace("a section_start:1795453148:git b /x/tmpab_cd123/group c"),
            "a section_start:T:git b /x/tmpXXXXXXXX/group c"
        );
    }
}
