//! One job's lifecycle, from the 201 payload to the final update:
//! acceptance PUT (runner-protocol.md §3.5), stages of the shell executor (`build`,
//! `sources`, `upload`) with the trace updater running alongside (§5, §6), then the
//! final phase (§6).

mod build;
mod result;
mod sources;
pub mod updater;
mod upload;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::client::classify::UpdateResult;
use crate::executor::{Interrupt, Interrupts};
use crate::protocol::{JobOutput, JobResponse, JobState, RunnerInfo};
use crate::trace::Trace;
use crate::trace::buffer::TraceBuffer;
use crate::trace::masker::Masker;
use build::Build;
use updater::{Updater, UpdaterTiming};

pub use result::{BuildResult, JobSummary};

/// Job timeout when the payload gives none (§3.4, §10).
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(7200);
/// after_script's own timeout (§10, `AfterScriptTimeout`).
pub const AFTER_SCRIPT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Per-runner settings every job needs.
#[derive(Debug, Clone)]
pub struct JobSettings {
    pub builds_dir: PathBuf,
    /// Trace cap in bytes.
    pub output_limit: usize,
    pub runner_name: String,
    pub system_id: String,
    pub timing: UpdaterTiming,
    pub after_script_timeout: Duration,
    /// SIGTERM → SIGKILL grace on timeout and graceful cancel.
    pub kill_grace: Duration,
    /// The CA bundle of `--tls-ca-file`, given to jobs as `CI_SERVER_TLS_CA_FILE` and to git.
    pub tls_ca: Option<crate::client::ca::CaBundle>,
    /// The user job scripts run as (`--job-user`); `None`: the sidecar's own.
    pub job_user: Option<crate::executor::user::JobUser>,
}

impl JobSettings {
    pub fn new(builds_dir: PathBuf, system_id: String) -> Self {
        Self {
            builds_dir,
            output_limit: 4096 * 1024,
            runner_name: crate::NAME.to_owned(),
            system_id,
            timing: UpdaterTiming::default(),
            after_script_timeout: AFTER_SCRIPT_TIMEOUT,
            kill_grace: Duration::from_secs(10),
            tls_ca: None,
            job_user: None,
        }
    }
}

/// What a job needs from the runner.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub client: Arc<Client>,
    pub info: Arc<RunnerInfo>,
    pub settings: Arc<JobSettings>,
}

/// Values that must never appear in the trace: masked variables (also URL-encoded, as
/// they appear in URLs) and the job's tokens.
fn masker_for(job: &JobResponse) -> Masker {
    let mut secrets: Vec<String> = Vec::new();
    for v in job
        .variables
        .iter()
        .filter(|v| v.masked && !v.value.is_empty())
    {
        secrets.push(v.value.clone());
        let encoded: String = url::form_urlencoded::byte_serialize(v.value.as_bytes()).collect();
        if encoded != v.value {
            secrets.push(encoded);
        }
    }
    secrets.push(job.token.expose().to_owned());
    secrets.extend(job.dependencies.iter().map(|d| d.token.expose().to_owned()));
    Masker::new(secrets, &job.features.token_mask_prefixes)
}

fn variable<'a>(job: &'a JobResponse, key: &str) -> Option<&'a str> {
    job.variables
        .iter()
        .rev()
        .find(|v| v.key == key)
        .map(|v| v.value.as_str())
}

/// Project directory below the job's build dir: the project path, kept inside.
fn project_rel_path(job: &JobResponse) -> PathBuf {
    let raw = if job.job_info.project_full_path.is_empty() {
        variable(job, "CI_PROJECT_PATH").unwrap_or("")
    } else {
        job.job_info.project_full_path.as_str()
    };
    let rel: PathBuf = Path::new(raw)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    if rel.as_os_str().is_empty() {
        PathBuf::from("project")
    } else {
        rel
    }
}

/// Run one job to the end. `force_abort` is the runner's second-signal token.
pub async fn run_job(
    ctx: &JobContext,
    job: JobResponse,
    force_abort: CancellationToken,
) -> JobSummary {
    let id = job.id;
    let trace = Trace::new(
        TraceBuffer::new(masker_for(&job), ctx.settings.output_limit),
        job.features.trace_sections,
    );
    let interrupts = Interrupts::new();
    let debug_trace = variable(&job, "CI_DEBUG_TRACE") == Some("true");
    let mut updater = Updater::new(
        ctx.client.clone(),
        ctx.info.clone(),
        id,
        job.token.clone(),
        trace.clone(),
        debug_trace,
        interrupts.clone(),
        ctx.settings.timing,
    );
    let supported = job.features.failure_reasons.clone();

    // §3.5 step 4: a payload the runner cannot run goes straight to a final failed PUT.
    if job.run.as_deref().is_some_and(|r| !r.trim().is_empty()) {
        print_header(ctx, &trace);
        let result = BuildResult::system("native steps (run:) are not supported by this runner");
        return finish(id, &trace, &mut updater, result, &supported).await;
    }

    // §3.5: acceptance PUT (two-phase commit). Abort ⇒ drop silently; canceling ⇒ the job
    // fails as canceled at once; anything else ⇒ the job runs anyway.
    let accept = ctx
        .client
        .update_job(
            id,
            &job.token,
            &ctx.info,
            JobState::Running,
            None,
            &JobOutput::default(),
            None,
        )
        .await;
    if accept.result == UpdateResult::Abort {
        tracing::warn!(
            job_id = id,
            "job dropped: GitLab refused the acceptance update"
        );
        return JobSummary {
            id,
            result: None,
            final_result: None,
        };
    }
    if accept.cancel_requested() {
        print_header(ctx, &trace);
        return finish(id, &trace, &mut updater, BuildResult::Canceled, &supported).await;
    }
    tracing::info!(job_id = id, name = %job.job_info.name, "job started");

    let forward = {
        let interrupts = interrupts.clone();
        let force_abort = force_abort.clone();
        tokio::spawn(async move {
            force_abort.cancelled().await;
            interrupts.raise(Interrupt::Shutdown);
        })
    };
    let stop_updates = CancellationToken::new();
    let mut build = Build::new(ctx, &job, trace.clone(), interrupts.clone());
    let (result, ()) = tokio::join!(
        async {
            let r = build.execute().await;
            stop_updates.cancel();
            r
        },
        updater.run_incremental(stop_updates.clone()),
    );
    forward.abort();
    tracing::debug!(
        job_id = id,
        ?result,
        "build ended; sending the rest of the trace and the final update"
    );
    finish(id, &trace, &mut updater, result, &supported).await
}

async fn finish(
    id: i64,
    trace: &Trace,
    updater: &mut Updater,
    result: BuildResult,
    supported: &[String],
) -> JobSummary {
    result.write_final_line(trace);
    trace.finish();
    let fin = result.final_state(supported);
    let final_result = updater.finish(&fin).await;
    tracing::info!(job_id = id, state = ?fin.state, reason = ?fin.failure_reason, ?final_result, "job finished");
    JobSummary {
        id,
        result: Some(result),
        final_result: Some(final_result),
    }
}

fn print_header(ctx: &JobContext, trace: &Trace) {
    trace.line(&format!(
        "Running with {} {} ({})",
        crate::NAME,
        crate::VERSION,
        crate::REVISION
    ));
    trace.line(&format!(
        "  on {} system ID: {}",
        ctx.settings.runner_name, ctx.settings.system_id
    ));
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(json: serde_json::Value) -> JobResponse {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn project_paths_stay_inside() {
        let j = job(
            serde_json::json!({"id": 1, "token": "t", "job_info": {"project_full_path": "g/p"}}),
        );
        assert_eq!(project_rel_path(&j), PathBuf::from("g/p"));
        let j = job(
            serde_json::json!({"id": 1, "token": "t", "job_info": {"project_full_path": "../../etc"}}),
        );
        assert_eq!(project_rel_path(&j), PathBuf::from("etc"));
        let j = job(serde_json::json!({"id": 1, "token": "t"}));
        assert_eq!(project_rel_path(&j), PathBuf::from("project"));
    }

    #[test]
    fn masker_covers_masked_values_tokens_and_prefixes() {
        let j = job(serde_json::json!({
            "id": 1, "token": "glcbt-jobtoken",
            "variables": [
                {"key": "S", "value": "a b&c", "masked": true},
                {"key": "P", "value": "public", "masked": false}
            ],
            "dependencies": [{"id": 2, "name": "d", "token": "deptoken"}],
            "features": {"token_mask_prefixes": ["glpat-"]}
        }));
        let mut m = masker_for(&j);
        let mut out = Vec::new();
        m.write(
            b"a b&c a+b%26c glcbt-jobtoken deptoken public glpat-xyz",
            &mut out,
        );
        m.flush(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[MASKED] [MASKED] [MASKED] [MASKED] public glpat-[MASKED]"
        );
    }
}
