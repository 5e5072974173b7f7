//! `run` / `run-single`: N workers polling `POST /jobs/request` and running one job at a
//! time each (runner-protocol.md §2.1, §3.2), and shutdown handling. The system id is
//! `system_id.rs`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{Client, ClientError, JobRequestOutcome};
use crate::job::{JobContext, JobSettings, JobSummary, run_job};
use crate::protocol::RunnerInfo;
use crate::secret::Secret;
pub use crate::system_id::{generate_system_id, is_valid_system_id, load_or_create_system_id};

/// Sleep after an "unhealthy" (403) job request, as run-single does (§2.1, §10).
pub const UNHEALTHY_INTERVAL: Duration = Duration::from_secs(300);
/// After a forced shutdown, how long running jobs get for their best-effort final update.
pub const FORCED_EXIT_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub url: String,
    pub token: Secret,
    /// Worker count = max parallel jobs.
    pub concurrent: usize,
    /// Absolute directory under which `<job id>/` build dirs are created.
    pub builds_dir: PathBuf,
    /// Stop after this many jobs (0 = unlimited).
    pub max_builds: u64,
    /// Stop when no job arrived for this long while idle.
    pub wait_timeout: Option<Duration>,
    /// Wait after an empty answer or an error.
    pub check_interval: Duration,
    pub name: String,
    pub system_id_file: PathBuf,
    /// Trace cap in bytes.
    pub output_limit: usize,
    /// `--tls-ca-file`: CA certificates trusted for the server, handed to jobs and git too.
    pub tls_ca_file: Option<PathBuf>,
    /// The user job scripts run as; `None`: the sidecar's own.
    pub job_user: Option<crate::executor::user::JobUser>,
}

/// Termination requests: the first cancels `graceful` (stop polling, let jobs finish),
/// the second `force` (abort running jobs).
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    pub graceful: CancellationToken,
    pub force: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("system id file {path}: {source}")]
    SystemId {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("builds directory {path}: {source}")]
    BuildsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Default)]
pub struct RunSummary {
    pub jobs: Vec<JobSummary>,
}

struct Shared {
    client: Arc<Client>,
    ctx: JobContext,
    token: Secret,
    system_id: String,
    info: Arc<RunnerInfo>,
    check_interval: Duration,
    /// Cancelled on the first signal, after max builds, or when the wait timeout passes.
    stop: CancellationToken,
    force: CancellationToken,
    /// One permit per job still allowed (`None` = unlimited).
    budget: Option<Semaphore>,
    max_builds: u64,
    completed: AtomicU64,
    running: AtomicUsize,
    last_activity: Mutex<Instant>,
    job_ended: Notify,
    results: Mutex<Vec<JobSummary>>,
}

impl Shared {
    fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    async fn pause(&self, wait: Duration) {
        tokio::select! {
            _ = self.stop.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn worker(shared: Arc<Shared>, index: usize) {
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        let permit = match &shared.budget {
            Some(budget) => tokio::select! {
                p = budget.acquire() => match p {
                    Ok(p) => Some(p),
                    Err(_) => break,
                },
                _ = shared.stop.cancelled() => break,
            },
            None => None,
        };
        // Dropping an in-flight job request on shutdown closes its connection, like the
        // runner does (§3.3).
        let outcome = tokio::select! {
            o = shared.client.request_job(&shared.token, &shared.system_id, &shared.info) => o,
            _ = shared.stop.cancelled() => break,
        };
        match outcome {
            JobRequestOutcome::Job(job) => {
                if let Some(p) = permit {
                    p.forget();
                }
                shared.running.fetch_add(1, Ordering::SeqCst);
                shared.touch();
                tracing::info!(worker = index, job_id = job.id, "received job");
                let summary = run_job(&shared.ctx, *job, shared.force.clone()).await;
                shared.running.fetch_sub(1, Ordering::SeqCst);
                shared.touch();
                shared.job_ended.notify_one();
                if let Ok(mut results) = shared.results.lock() {
                    results.push(summary);
                }
                let done = shared.completed.fetch_add(1, Ordering::SeqCst) + 1;
                if shared.max_builds > 0 && done >= shared.max_builds {
                    tracing::info!(done, "maximum number of builds reached");
                    shared.stop.cancel();
                }
                // No wait after a job (§2.1).
            }
            JobRequestOutcome::NoJob => {
                drop(permit);
                tracing::debug!(worker = index, "no job");
                shared.pause(shared.check_interval).await;
            }
            JobRequestOutcome::Failed(why) => {
                drop(permit);
                tracing::warn!(worker = index, %why, "job request failed");
                shared.pause(shared.check_interval).await;
            }
            JobRequestOutcome::Unhealthy => {
                drop(permit);
                tracing::warn!(
                    worker = index,
                    wait_s = UNHEALTHY_INTERVAL.as_secs(),
                    "runner is not healthy (403 on job request)"
                );
                shared.pause(UNHEALTHY_INTERVAL).await;
            }
        }
    }
}

async fn wait_timeout_watchdog(shared: Arc<Shared>, timeout: Duration) {
    loop {
        let idle_for = shared
            .last_activity
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let running = shared.running.load(Ordering::SeqCst) > 0;
        if !running && idle_for >= timeout {
            tracing::info!(wait_timeout = ?timeout, "no job received within the wait timeout");
            shared.stop.cancel();
            return;
        }
        // While a job runs, wait for it to end (`job_ended` is notified then).
        let wait = if running { timeout } else { timeout - idle_for };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.job_ended.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Run the runner loop until shutdown, `max_builds` or the wait timeout.
pub async fn run(config: RunnerConfig, shutdown: Shutdown) -> Result<RunSummary, RunnerError> {
    let ca = config
        .tls_ca_file
        .as_deref()
        .map(crate::client::ca::CaBundle::read)
        .transpose()?;
    let client = Arc::new(Client::with_ca(&config.url, ca.as_ref())?);
    let system_id = load_or_create_system_id(&config.system_id_file).map_err(|source| {
        RunnerError::SystemId {
            path: config.system_id_file.clone(),
            source,
        }
    })?;
    std::fs::create_dir_all(&config.builds_dir).map_err(|source| RunnerError::BuildsDir {
        path: config.builds_dir.clone(),
        source,
    })?;
    if let Some(user) = &config.job_user {
        // Files the sidecar writes for a job (its scripts) are read by the job user: they must
        // not inherit a boot script's `umask 077`. The sidecar's own files (its token) are in a
        // directory of mode 700.
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        open_to_job_user(&config.builds_dir, &user.home).map_err(|source| {
            RunnerError::BuildsDir {
                path: config.builds_dir.clone(),
                source,
            }
        })?;
    }
    let info = Arc::new(RunnerInfo::sidecar());
    let mut settings = JobSettings::new(config.builds_dir.clone(), system_id.clone());
    settings.output_limit = config.output_limit;
    settings.runner_name = config.name.clone();
    settings.tls_ca = ca;
    settings.job_user = config.job_user.clone();
    let ctx = JobContext {
        client: client.clone(),
        info: info.clone(),
        settings: Arc::new(settings),
    };
    let max_builds = config.max_builds;
    let budget = (max_builds > 0).then(|| {
        Semaphore::new(
            usize::try_from(max_builds)
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS),
        )
    });
    let shared = Arc::new(Shared {
        client,
        ctx,
        token: config.token.clone(),
        system_id,
        info,
        check_interval: config.check_interval,
        stop: shutdown.graceful.child_token(),
        force: shutdown.force.clone(),
        budget,
        max_builds,
        completed: AtomicU64::new(0),
        running: AtomicUsize::new(0),
        last_activity: Mutex::new(Instant::now()),
        job_ended: Notify::new(),
        results: Mutex::new(Vec::new()),
    });
    tracing::info!(
        url = %shared.client.base(),
        concurrent = config.concurrent,
        max_builds,
        system_id = %shared.system_id,
        "sidecar runner started"
    );

    let watchdog = config
        .wait_timeout
        .map(|t| tokio::spawn(wait_timeout_watchdog(shared.clone(), t)));
    let workers: Vec<_> = (0..config.concurrent.max(1))
        .map(|i| tokio::spawn(worker(shared.clone(), i)))
        .collect();
    let all = futures::future::join_all(workers);
    tokio::select! {
        results = all => {
            for r in results {
                if let Err(e) = r {
                    tracing::error!(error = %e, "worker task failed");
                }
            }
        }
        _ = async {
            shutdown.force.cancelled().await;
            tokio::time::sleep(FORCED_EXIT_GRACE).await;
        } => {
            tracing::warn!("forced shutdown: not waiting any longer for running jobs");
        }
    }
    shared.stop.cancel();
    if let Some(w) = watchdog {
        w.abort();
    }
    let jobs = shared
        .results
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    tracing::info!(jobs = jobs.len(), "sidecar runner stopped");
    Ok(RunSummary { jobs })
}

/// The job user must pass through the builds directory (and the ones above it, below its home)
/// to reach the job directories handed to it, whatever the umask the sidecar was started with
/// (a boot script's `umask 077` would make them root's alone). Listing them shows only job
/// directory names.
fn open_to_job_user(builds_dir: &std::path::Path, home: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut dir = Some(builds_dir);
    while let Some(d) = dir.filter(|d| d.starts_with(home) && *d != home) {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
        dir = d.parent();
    }
    Ok(())
}
