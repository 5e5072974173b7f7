//! The shell executor's build: stages in order, with interrupts and the job timeout
//! deciding what still runs (runner-protocol.md §6).

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    BuildResult, DEFAULT_JOB_TIMEOUT, JobContext, hostname, print_header, project_rel_path,
};
use crate::executor::process::{StageEnd, StageLimits, run_bash};
use crate::executor::script::{self, ScriptSpec};
use crate::executor::{ExecutorError, Interrupt, Interrupts};
use crate::protocol::{FailureReason, JobResponse, Step};
use crate::trace::Trace;

/// One job's build: directories, exported environment, deadline; stages are methods
/// spread over `build`, `sources` and `upload`.
pub(super) struct Build<'a> {
    pub(super) ctx: &'a JobContext,
    pub(super) job: &'a JobResponse,
    pub(super) trace: Trace,
    pub(super) interrupts: Interrupts,
    pub(super) job_root: PathBuf,
    pub(super) project_dir: PathBuf,
    pub(super) tmp_dir: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) timeout: Duration,
    pub(super) deadline: Instant,
}

pub(super) type StageResult = Result<(), BuildResult>;

impl<'a> Build<'a> {
    pub(super) fn new(
        ctx: &'a JobContext,
        job: &'a JobResponse,
        trace: Trace,
        interrupts: Interrupts,
    ) -> Self {
        let job_root = ctx.settings.builds_dir.join(job.id.to_string());
        let project_dir = job_root.join(project_rel_path(job));
        let mut tmp_name = project_dir.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".tmp");
        let tmp_dir = project_dir.with_file_name(tmp_name);
        let timeout = u64::try_from(job.runner_info.timeout)
            .ok()
            .filter(|t| *t > 0)
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_JOB_TIMEOUT);
        Self {
            ctx,
            job,
            trace,
            interrupts,
            job_root,
            project_dir,
            tmp_dir,
            env: Vec::new(),
            timeout,
            deadline: Instant::now() + timeout,
        }
    }

    pub(super) fn stopping(&self) -> bool {
        self.interrupts.current() >= Interrupt::Cancel
    }

    pub(super) fn timed_out(&self) -> BuildResult {
        BuildResult::Failed {
            reason: FailureReason::JobExecutionTimeout,
            exit_code: None,
            message: format!(
                "execution took longer than {}",
                humantime::format_duration(self.timeout)
            ),
        }
    }

    pub(super) async fn execute(&mut self) -> BuildResult {
        print_header(self.ctx, &self.trace);
        self.trace
            .section_start("prepare_executor", "Preparing the \"shell\" executor");
        self.trace.line("Using Shell (bash) executor...");
        self.trace.section_end("prepare_executor");
        self.trace
            .section_start("prepare_script", "Preparing environment");
        self.trace.line(&format!("Running on {}...", hostname()));
        let prepared = self.prepare();
        self.trace.section_end("prepare_script");
        if let Err(e) = prepared {
            let result = BuildResult::system(format!("preparing the build directory: {e}"));
            self.cleanup();
            return result;
        }

        tracing::debug!(job_id = self.job.id, "stage get_sources");
        let mut failure: Option<BuildResult> = self.get_sources().await.err();
        if failure.is_none() && !self.stopping() {
            failure = self.download_dependencies().await.err();
        }
        let steps: Vec<&Step> = self
            .job
            .steps
            .iter()
            .filter(|s| s.name != "after_script")
            .collect();
        for step in steps {
            if self.stopping() {
                break;
            }
            if !step.when.applies(failure.is_some()) {
                continue;
            }
            tracing::debug!(job_id = self.job.id, step = %step.name, "stage step");
            if let Err(r) = self.run_step(step).await
                && failure.is_none()
            {
                failure = Some(r);
            }
        }

        let mut result = self.result_after(failure.unwrap_or(BuildResult::Success));
        if !matches!(result, BuildResult::Aborted { .. }) {
            self.after_script(&result).await;
            result = self.result_after(result);
        }
        if !matches!(result, BuildResult::Aborted { .. }) {
            tracing::debug!(job_id = self.job.id, "stage upload_artifacts");
            if let Err(r) = self.upload_artifacts(&result).await
                && result == BuildResult::Success
            {
                result = r;
            }
            result = self.result_after(result);
        }
        self.cleanup();
        result
    }

    /// Interrupts override what the stages reported.
    pub(super) fn result_after(&self, result: BuildResult) -> BuildResult {
        match self.interrupts.current() {
            Interrupt::None => result,
            Interrupt::Cancel => match result {
                BuildResult::Aborted { .. } => result,
                _ => BuildResult::Canceled,
            },
            Interrupt::Abort => BuildResult::Aborted { by_runner: false },
            Interrupt::Shutdown => BuildResult::Aborted { by_runner: true },
        }
    }

    /// Create fresh directories and compute the exported environment (file variables
    /// written to files whose path becomes the value).
    pub(super) fn prepare(&mut self) -> std::io::Result<()> {
        if self.job_root.exists() {
            std::fs::remove_dir_all(&self.job_root)?;
        }
        std::fs::create_dir_all(&self.project_dir)?;
        std::fs::create_dir_all(&self.tmp_dir)?;

        let mut vars: Vec<(String, String, bool)> = self
            .job
            .variables
            .iter()
            .map(|v| (v.key.clone(), v.value.clone(), v.raw))
            .collect();
        if self.ctx.settings.job_user.is_some() {
            // The sidecar's own TMPDIR may be private to it (the local provisioner's sandbox,
            // or a VM whose /tmp is not world-writable): a job user gets the job's temporary
            // directory, which it owns and which goes with the job. First, so that a TMPDIR
            // the job sets itself wins.
            vars.insert(
                0,
                (
                    "TMPDIR".to_owned(),
                    self.tmp_dir.to_string_lossy().into_owned(),
                    true,
                ),
            );
        }
        let builtin = [
            (
                "CI_BUILDS_DIR",
                self.ctx.settings.builds_dir.to_string_lossy().into_owned(),
            ),
            (
                "CI_PROJECT_DIR",
                self.project_dir.to_string_lossy().into_owned(),
            ),
            ("CI_SERVER", "yes".to_owned()),
            ("CI_SHARED_ENVIRONMENT", "true".to_owned()),
            ("CI_JOB_TIMEOUT", self.timeout.as_secs().to_string()),
            (
                "CI_RUNNER_EXECUTABLE_ARCH",
                format!("{}/{}", self.ctx.info.platform, self.ctx.info.architecture),
            ),
        ];
        for (k, v) in builtin {
            vars.push((k.to_owned(), v, true));
        }
        let mut env = script::expand_all(&vars);
        let file_flags = self
            .job
            .variables
            .iter()
            .map(|v| v.file)
            .chain(std::iter::repeat(false));
        for ((name, value), is_file) in env.iter_mut().zip(file_flags) {
            if is_file && script::is_valid_name(name) {
                let path = self.tmp_dir.join(name.as_str());
                std::fs::write(&path, value.as_bytes())?;
                *value = path.to_string_lossy().into_owned();
            }
        }
        if let Some(ca) = &self.ctx.settings.tls_ca {
            // As the stock runner does with its `tls-ca-file` (runner-protocol.md §8.1).
            let path = self.tmp_dir.join("CI_SERVER_TLS_CA_FILE");
            std::fs::write(&path, ca.pem.as_slice())?;
            env.push((
                "CI_SERVER_TLS_CA_FILE".to_owned(),
                path.to_string_lossy().into_owned(),
            ));
        }
        self.env = env;
        self.hand_over_job_root()
    }

    /// With a job user, the job's directory (sources, file variables, downloaded artifacts) is
    /// that user's, so that its scripts can write there; nothing else of the sidecar's is.
    pub(super) fn hand_over_job_root(&self) -> std::io::Result<()> {
        match &self.ctx.settings.job_user {
            Some(user) => user
                .hand_over(&self.job_root)
                .map_err(std::io::Error::other),
            None => Ok(()),
        }
    }

    pub(super) fn env_var(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(super) async fn run_script(
        &self,
        name: &str,
        commands: &[String],
        echo: bool,
        extra_env: &[(String, String)],
        limits: StageLimits,
    ) -> Result<StageEnd, ExecutorError> {
        let mut env = self.env.clone();
        env.extend_from_slice(extra_env);
        let text = script::generate(&ScriptSpec {
            env: &env,
            workdir: &self.project_dir,
            commands,
            echo_commands: echo,
        });
        let path = self.tmp_dir.join(format!("{name}.sh"));
        std::fs::write(&path, text).map_err(ExecutorError::Script)?;
        let end = run_bash(
            &path,
            &self.project_dir,
            &self.trace,
            self.interrupts.subscribe(),
            limits,
            self.ctx.settings.job_user.as_ref(),
        )
        .await;
        let _ = std::fs::remove_file(&path);
        end
    }

    pub(super) fn job_limits(&self) -> StageLimits {
        StageLimits {
            deadline: Some(self.deadline),
            stop_at: Interrupt::Cancel,
            kill_grace: self.ctx.settings.kill_grace,
        }
    }

    /// Map a stage end to the build result of a failed stage.
    pub(super) fn stage_result(&self, end: Result<StageEnd, ExecutorError>) -> StageResult {
        match end {
            Ok(StageEnd::Exited(0)) => Ok(()),
            Ok(StageEnd::Exited(code)) => Err(BuildResult::script(code)),
            Ok(StageEnd::TimedOut) => Err(self.timed_out()),
            Ok(StageEnd::Interrupted(_)) => Err(self.result_after(BuildResult::Canceled)),
            Err(e) => Err(BuildResult::system(e.to_string())),
        }
    }

    pub(super) async fn run_step(&self, step: &Step) -> StageResult {
        let section = if step.name == "script" {
            "step_script".to_owned()
        } else {
            format!("step_{}", step.name)
        };
        if Instant::now() >= self.deadline {
            return Err(self.timed_out());
        }
        self.trace.section_start(
            &section,
            &format!("Executing \"{section}\" stage of the job script"),
        );
        let end = self
            .run_script(&section, &step.script, true, &[], self.job_limits())
            .await;
        self.trace.section_end(&section);
        match self.stage_result(end) {
            Err(BuildResult::Failed {
                reason: FailureReason::ScriptFailure,
                exit_code: Some(code),
                ..
            }) if step.allow_failure => {
                self.trace.warning(&format!(
                    "step {} failed with exit code {code}, allowed to fail",
                    step.name
                ));
                Ok(())
            }
            other => other,
        }
    }

    pub(super) async fn after_script(&self, result: &BuildResult) {
        let Some(step) = self.job.steps.iter().find(|s| s.name == "after_script") else {
            return;
        };
        if step.script.iter().all(|c| c.trim().is_empty()) {
            return;
        }
        let timeout = self
            .env_var("RUNNER_AFTER_SCRIPT_TIMEOUT")
            .and_then(|v| humantime::parse_duration(v).ok())
            .unwrap_or(self.ctx.settings.after_script_timeout);
        let status = match result {
            BuildResult::Success => "success",
            BuildResult::Canceled => "canceled",
            _ => "failed",
        };
        self.trace
            .section_start("after_script", "Running after_script");
        let extra = [("CI_JOB_STATUS".to_owned(), status.to_owned())];
        let limits = StageLimits {
            deadline: Some(Instant::now() + timeout),
            stop_at: Interrupt::Abort,
            kill_grace: self.ctx.settings.kill_grace,
        };
        let end = self
            .run_script("after_script", &step.script, true, &extra, limits)
            .await;
        match end {
            Ok(StageEnd::Exited(0)) | Ok(StageEnd::Interrupted(_)) => {}
            Ok(StageEnd::Exited(code)) => self.trace.warning(&format!(
                "after_script failed, but job will continue unaffected: exit code {code}"
            )),
            Ok(StageEnd::TimedOut) => self.trace.warning(&format!(
                "after_script timed out after {}, but job will continue unaffected",
                humantime::format_duration(timeout)
            )),
            Err(e) => self
                .trace
                .warning(&format!("after_script could not run: {e}")),
        }
        self.trace.section_end("after_script");
    }

    pub(super) fn cleanup(&self) {
        self.trace.section_start(
            "cleanup_file_variables",
            "Cleaning up project directory and file based variables",
        );
        if let Err(e) = std::fs::remove_dir_all(&self.job_root)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            self.trace
                .warning(&format!("cleaning up the build directory: {e}"));
        }
        self.trace.section_end("cleanup_file_variables");
    }
}
