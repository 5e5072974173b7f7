//! Uploading artifacts after the script (runner-protocol.md §7.1).

use std::path::{Path, PathBuf};

use super::BuildResult;
use super::build::{Build, StageResult};
use crate::artifacts::{self, Format, archive, transfer};
use crate::executor::Interrupt;
use crate::executor::script;
use crate::executor::user::JobUser;
use crate::protocol::{ArtifactSpec, FailureReason};
use crate::trace::{ANSI_BOLD_GREEN, ANSI_RESET, Trace};

impl Build<'_> {
    pub(super) async fn upload_artifacts(&self, result: &BuildResult) -> StageResult {
        let failed = result.is_failure();
        let specs: Vec<&ArtifactSpec> = self
            .job
            .artifacts
            .iter()
            .filter(|a| a.when.applies(failed))
            .collect();
        if specs.is_empty() {
            return Ok(());
        }
        let (section, header) = if failed {
            (
                "upload_artifacts_on_failure",
                "Uploading artifacts for failed job",
            )
        } else {
            (
                "upload_artifacts_on_success",
                "Uploading artifacts for successful job",
            )
        };
        self.trace.section_start(section, header);
        let mut outcome = Ok(());
        for spec in specs {
            let upload = self.upload_one(spec);
            let r = tokio::select! {
                r = upload => r,
                _ = self.interrupts.reached(Interrupt::Abort) => {
                    Err(self.result_after(BuildResult::Canceled))
                }
            };
            if r.is_err() {
                outcome = r;
                break;
            }
        }
        self.trace.section_end(section);
        outcome
    }

    async fn upload_one(&self, spec: &ArtifactSpec) -> StageResult {
        let fail = |trace: &Trace, msg: String| {
            trace.error(&msg);
            Err(BuildResult::Failed {
                reason: FailureReason::ScriptFailure,
                exit_code: None,
                message: "uploading artifacts failed".to_owned(),
            })
        };
        self.trace.line("Uploading artifacts...");
        let format = match Format::parse(&spec.artifact_format) {
            Ok(f) => f,
            Err(e) => return fail(&self.trace, e.to_string()),
        };
        let lookup = |name: &str| self.env_var(name).map(str::to_owned);
        let paths: Vec<String> = spec
            .paths
            .iter()
            .map(|p| script::expand(p, &lookup))
            .collect();
        let exclude: Vec<String> = spec
            .exclude
            .iter()
            .map(|p| script::expand(p, &lookup))
            .collect();
        let name = script::expand(&spec.name, &lookup);
        let project = self.project_dir.clone();
        let tmp_dir = self.tmp_dir.clone();
        let untracked = spec.untracked;
        let job_user = self.ctx.settings.job_user.clone();
        let built = tokio::task::spawn_blocking(move || {
            // With a job user, the archive is a file of the sidecar's own (outside the job's
            // reach, so that a job process left behind cannot swap it before the upload), and
            // the project is read with the job's rights only.
            let out = match &job_user {
                Some(_) => tempfile::NamedTempFile::new(),
                None => tempfile::NamedTempFile::new_in(&tmp_dir),
            };
            let collect = || {
                let untracked_files = if untracked {
                    untracked_files(&project, job_user.as_ref())
                } else {
                    Ok(Vec::new())
                };
                let sel = archive::select(
                    &project,
                    &paths,
                    &exclude,
                    untracked_files.as_deref().unwrap_or(&[]),
                );
                let archive = if sel.entries.is_empty() {
                    None
                } else {
                    Some(out.map_err(artifacts::ArtifactError::from).and_then(|out| {
                        artifacts::build_archive_into(format, &project, &sel.entries, out)
                    }))
                };
                (sel, untracked_files.err(), archive)
            };
            match &job_user {
                Some(user) => user.with_fs_identity(collect),
                None => collect(),
            }
        })
        .await;
        let (sel, untracked_err, archive) = match built {
            Ok(v) => v,
            Err(e) => return fail(&self.trace, format!("archiving artifacts: {e}")),
        };
        if let Some(e) = untracked_err {
            self.trace.warning(&format!("untracked: {e}"));
        }
        for m in &sel.messages {
            self.trace.line(m);
        }
        for w in &sel.warnings {
            self.trace.warning(w);
        }
        let file = match archive {
            None => {
                self.trace.error("No files to upload");
                return Ok(());
            }
            Some(Err(e)) => return fail(&self.trace, format!("archiving artifacts: {e}")),
            Some(Ok(file)) => file,
        };
        let artifact_type = if spec.artifact_type.is_empty() {
            "archive"
        } else {
            spec.artifact_type.as_str()
        };
        let params = transfer::UploadParams {
            artifact_format: spec.artifact_format.clone(),
            artifact_type: spec.artifact_type.clone(),
            expire_in: spec.expire_in.clone(),
        };
        let filename = format.filename(&name);
        let r = transfer::upload(
            &self.ctx.client,
            self.job.id,
            &self.job.token,
            file.path(),
            &filename,
            &params,
        )
        .await;
        match r {
            Ok(()) => {
                self.trace.line(&format!(
                    "Uploading artifacts as \"{artifact_type}\" to coordinator... {ANSI_BOLD_GREEN}201 Created{ANSI_RESET}  id={}",
                    self.job.id
                ));
                Ok(())
            }
            Err(e) => fail(
                &self.trace,
                format!("Uploading artifacts as \"{artifact_type}\" to coordinator... {e}"),
            ),
        }
    }
}

/// `git ls-files -o` in the project directory: files git does not track (ignored ones
/// included, as GitLab documents for `artifacts:untracked`).
/// With a job user, git runs as that user: the repository is the job's, and its configuration
/// (hooks, `core.fsmonitor`) must never run with the sidecar's rights.
fn untracked_files(project: &Path, job_user: Option<&JobUser>) -> Result<Vec<PathBuf>, String> {
    if !project.join(".git").exists() {
        return Err("not a git repository, no untracked files collected".to_owned());
    }
    let mut git = std::process::Command::new("git");
    git.args(["ls-files", "-o", "-z"]).current_dir(project);
    if let Some(user) = job_user {
        use std::os::unix::process::CommandExt;
        git.uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .env("HOME", &user.home);
    }
    let out = git.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
        .collect())
}
