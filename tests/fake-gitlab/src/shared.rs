//! What every handler shares: the state behind a mutex, a change signal that wakes waiters, the
//! fault rules, the counters, and the server's lifetime.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::faults::FaultRules;
use crate::state::{AckCheck, Rules, State};
use crate::stats::StatsRecorder;

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited<T> {
    Ready(T),
    TimedOut,
    ShuttingDown,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub config: Config,
    /// What jobs see as `CI_SERVER_URL` and where redirects point.
    pub server_url: String,
    pub artifacts_dir: PathBuf,
    pub uploads_dir: PathBuf,
    pub faults: FaultRules,
    pub stats: StatsRecorder,
    /// Cancelled when the server shuts down; long polls and waits then answer at once.
    pub shutdown: CancellationToken,
    /// Background tasks (connections, ack timers) to wait for at shutdown.
    pub tasks: TaskTracker,
    state: Mutex<State>,
    /// Bumped after every state change; waiters re-check their condition when it moves.
    changed: watch::Sender<u64>,
}

impl Shared {
    pub fn new(config: Config, server_url: String, data_dir: PathBuf) -> Self {
        let state = State::new(Rules {
            ack_window: config.two_phase_commit.then_some(config.ack_window),
            trace_limit: config.trace_limit,
            provisioning_retries: config.provisioning_retries,
        });
        Shared {
            server_url,
            artifacts_dir: data_dir.join("artifacts"),
            uploads_dir: data_dir.join("uploads"),
            faults: FaultRules::default(),
            stats: StatsRecorder::default(),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            state: Mutex::new(state),
            changed: watch::Sender::new(0),
            config,
        }
    }

    /// Reads the state. Keep `f` short: it runs under the lock.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        // A panic under the lock leaves the state as consistent as each method makes it; a test
        // double should keep answering rather than poison every later request.
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f(&state)
    }

    /// Changes the state and wakes every waiter (they re-check their own condition).
    pub fn mutate<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let result = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let result = f(&mut state);
            // A change may end a pipeline's stage: its next stage's jobs become pending now.
            state.advance_pipelines(std::time::Instant::now());
            state.stamp_times(std::time::SystemTime::now());
            result
        };
        self.changed
            .send_modify(|generation| *generation = generation.wrapping_add(1));
        result
    }

    /// Waits until `check` returns `Some`, re-evaluating it after each state change (never by
    /// polling on a timer), for at most `timeout`.
    pub async fn wait_for<R>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&State) -> Option<R>,
    ) -> Waited<R> {
        // Subscribe before the first check so that a change between check and await is seen.
        let mut changes = self.changed.subscribe();
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            if let Some(ready) = self.read(&mut check) {
                return Waited::Ready(ready);
            }
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Waited::ShuttingDown;
                    }
                }
                () = &mut deadline => return Waited::TimedOut,
                () = self.shutdown.cancelled() => return Waited::ShuttingDown,
            }
        }
    }

    /// Schedules GitLab's retry worker for a job handed out under two-phase commit: it first
    /// runs when the window ends, then every quarter-window while keep-alives renew the key,
    /// until the job is acknowledged or failed.
    pub fn schedule_ack_check(self: &std::sync::Arc<Self>, job_id: u64, deadline: Instant) {
        let shared = std::sync::Arc::clone(self);
        self.tasks.spawn(async move {
            let mut deadline = deadline;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
                    () = shared.shutdown.cancelled() => return,
                }
                match shared.mutate(|state| state.check_ack(job_id, Instant::now())) {
                    AckCheck::NotYet(next) => deadline = next,
                    AckCheck::Dropped { .. } | AckCheck::Settled => return,
                }
            }
        });
    }

    /// GitLab's `DropRunningWorker`, a periodic sweep: fails jobs still running
    /// `running_timeout_margin` after their timeout. Runs every second, or every tenth of the
    /// margin when a test shrinks it.
    pub fn spawn_timeout_sweeper(self: &std::sync::Arc<Self>) {
        let shared = std::sync::Arc::clone(self);
        let margin = self.config.running_timeout_margin;
        let period = (margin / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        self.tasks.spawn(async move {
            let mut ticks = tokio::time::interval(period);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = shared.shutdown.cancelled() => return,
                }
                let now = Instant::now();
                let stale = shared.read(|state| state.has_timed_out(now, margin));
                if stale {
                    for id in shared.mutate(|state| state.drop_timed_out(now, margin)) {
                        tracing::info!(job.id = id, "job failed: server_timeout_running");
                    }
                }
            }
        });
    }
}
