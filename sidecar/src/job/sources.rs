//! Stages before the script: getting sources with the git CLI and downloading the
//! artifacts of dependencies (runner-protocol.md §7.2).

use super::BuildResult;
use super::build::{Build, StageResult};
use crate::artifacts::{self, archive, transfer};
use crate::executor::Interrupt;
use crate::executor::script::bash_quote;
use crate::protocol::FailureReason;

impl Build<'_> {
    pub(super) async fn get_sources(&self) -> StageResult {
        self.trace
            .section_start("get_sources", "Getting source from Git repository");
        let result = self.get_sources_inner().await;
        self.trace.section_end("get_sources");
        result
    }

    async fn get_sources_inner(&self) -> StageResult {
        let git = &self.job.git_info;
        let default_strategy = if self.job.allow_git_fetch {
            "fetch"
        } else {
            "clone"
        };
        let strategy = self.env_var("GIT_STRATEGY").unwrap_or(default_strategy);
        match strategy {
            "none" | "empty" => {
                self.trace.line("Skipping Git repository setup");
                return Ok(());
            }
            "fetch" | "clone" => {}
            other => {
                self.trace
                    .warning(&format!("Unknown GIT_STRATEGY {other:?}, using \"fetch\""));
            }
        }
        if git.repo_url.is_empty() {
            self.trace
                .warning("No repository URL in the job; skipping Git repository setup");
            return Ok(());
        }
        let depth = self
            .env_var("GIT_DEPTH")
            .and_then(|d| d.trim().parse::<i64>().ok())
            .unwrap_or(git.depth);
        let mut refspecs: Vec<String> = git.refspecs.clone();
        if refspecs.is_empty() {
            refspecs = vec![
                "+refs/heads/*:refs/remotes/origin/*".to_owned(),
                "+refs/tags/*:refs/tags/*".to_owned(),
            ];
        }
        let mut commands = Vec::new();
        let say = |text: &str| format!("printf '%s\\n' {}", bash_quote(text));
        if depth > 0 {
            commands.push(say(&format!(
                "Fetching changes with git depth set to {depth}..."
            )));
        } else {
            commands.push(say("Fetching changes..."));
        }
        commands.push("git -c init.defaultBranch=main init".to_owned());
        if let Some(ca) = self.tls_ca_file() {
            // Clones trust the same bundle as the runner's own calls (runner-protocol.md §8.1).
            commands.push(format!("git config http.sslCAInfo {}", bash_quote(ca)));
        }
        commands.push(say("Created fresh repository."));
        commands.push(format!(
            "git remote add origin {}",
            bash_quote(&git.repo_url)
        ));
        let mut fetch = String::from("git fetch origin --prune --quiet");
        if depth > 0 {
            fetch.push_str(&format!(" --depth {depth}"));
        }
        for r in &refspecs {
            fetch.push(' ');
            fetch.push_str(&bash_quote(r));
        }
        commands.push(fetch);
        if self.env_var("GIT_CHECKOUT") == Some("false") {
            commands.push(say("Skipping Git checkout"));
        } else if !git.sha.is_empty() {
            let short: String = git.sha.chars().take(8).collect();
            commands.push(say(&format!(
                "Checking out {short} as detached HEAD (ref is {})...",
                git.git_ref
            )));
            commands.push(format!("git checkout -f -q {}", bash_quote(&git.sha)));
            match self.env_var("GIT_CLEAN_FLAGS").unwrap_or("-ffdx") {
                "none" => {}
                flags => commands.push(format!("git clean {flags}")),
            }
        }
        commands.push(say("Skipping Git submodules setup"));
        let extra = [
            ("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()),
            ("GIT_ASKPASS".to_owned(), "true".to_owned()),
        ];
        let end = self
            .run_script("get_sources", &commands, false, &extra, self.job_limits())
            .await;
        self.stage_result(end)
    }

    /// `CI_SERVER_TLS_CA_FILE` when the runner has a `--tls-ca-file` (not a job's own variable).
    fn tls_ca_file(&self) -> Option<&str> {
        self.ctx.settings.tls_ca.as_ref()?;
        self.env_var("CI_SERVER_TLS_CA_FILE")
    }

    pub(super) async fn download_dependencies(&self) -> StageResult {
        let deps: Vec<_> = self
            .job
            .dependencies
            .iter()
            .filter(|d| {
                d.artifacts_file
                    .as_ref()
                    .is_some_and(|f| !f.filename.is_empty())
            })
            .collect();
        if deps.is_empty() {
            return Ok(());
        }
        self.trace
            .section_start("download_artifacts", "Downloading artifacts");
        let mut result = Ok(());
        for dep in deps {
            self.trace.line(&format!(
                "Downloading artifacts for {} ({})...",
                dep.name, dep.id
            ));
            let work = async {
                let job_user = self.ctx.settings.job_user.clone();
                // With a job user the download is the sidecar's own file, in the sidecar's own
                // temporary directory (which the job user may not be able to enter: a private
                // `TMPDIR`, or a VM whose /tmp is not world-writable). The sidecar opens it and
                // unpacks it from that open file with the job's rights only: an entry written
                // through a link the job planted lands where the job itself could write.
                let tmp = match &job_user {
                    Some(_) => tempfile::NamedTempFile::new()?,
                    None => tempfile::NamedTempFile::new_in(&self.tmp_dir)?,
                };
                transfer::download(&self.ctx.client, dep.id, &dep.token, tmp.path()).await?;
                let path = tmp.path().to_path_buf();
                let dest = self.project_dir.clone();
                let extracted = tokio::task::spawn_blocking(move || {
                    if !artifacts::is_zip(&path)? {
                        return Err(artifacts::ArtifactError::NotZip);
                    }
                    let file = std::fs::File::open(&path)?;
                    match &job_user {
                        Some(user) => {
                            user.with_fs_identity(|| archive::extract_zip_from(file, &dest))
                        }
                        None => archive::extract_zip_from(file, &dest),
                    }
                })
                .await
                .map_err(|e| artifacts::ArtifactError::Archive(e.to_string()))?;
                drop(tmp);
                extracted
            };
            let outcome = tokio::select! {
                r = work => Some(r),
                _ = self.interrupts.reached(Interrupt::Cancel) => None,
                _ = tokio::time::sleep_until(self.deadline) => {
                    result = Err(self.timed_out());
                    break;
                }
            };
            match outcome {
                None => {
                    result = Err(self.result_after(BuildResult::Canceled));
                    break;
                }
                Some(Ok(n)) => self.trace.line(&format!(
                    "Downloading artifacts from coordinator... ok  ({n} entries)"
                )),
                Some(Err(e)) => {
                    self.trace
                        .error(&format!("Downloading artifacts from coordinator... {e}"));
                    result = Err(BuildResult::Failed {
                        reason: FailureReason::ScriptFailure,
                        exit_code: None,
                        message: "downloading artifacts failed".to_owned(),
                    });
                    break;
                }
            }
        }
        self.trace.section_end("download_artifacts");
        result
    }
}
