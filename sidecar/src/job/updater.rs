//! Ships the log and job state to GitLab (runner-protocol.md §4–§6).
//!
//! During the job ([`Updater::run_incremental`]): one tick after 3 s, then at the server's
//! `X-GitLab-Trace-Update-Interval`; each tick sends at most one ≤1 MiB patch from the
//! acknowledged offset and, when nothing was sent successfully for more than 30 s, a
//! keep-alive `PUT state=running`. Answers that announce cancellation are forwarded to the
//! executor through [`Interrupts`].
//!
//! At the end ([`Updater::finish`]): all remaining trace, then the final PUT, repeated on
//! 202; on failure the whole sequence is retried up to 10 times with a doubling backoff.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::client::classify::{PatchOutcome, PatchResult, RemoteStatus, UpdateResult};
use crate::executor::{Interrupt, Interrupts};
use crate::protocol::{JobOutput, JobState, RunnerInfo};
use crate::secret::Secret;
use crate::trace::Trace;
use crate::trace::offsets::MAX_PATCH_SIZE;

/// Timing constants (§10); public so that tests can document what they rely on.
#[derive(Debug, Clone, Copy)]
pub struct UpdaterTiming {
    /// First tick after job start, and the interval reset at the final update.
    pub initial_interval: Duration,
    /// Keep-alive PUT after this long without a successful send.
    pub force_send_interval: Duration,
    /// Tries of the final trace+update sequence.
    pub final_retry_limit: u32,
    /// Backoff between those tries: starts here, doubles.
    pub final_backoff_start: Duration,
    pub final_backoff_max: Duration,
}

impl Default for UpdaterTiming {
    fn default() -> Self {
        Self {
            initial_interval: Duration::from_secs(3),
            force_send_interval: Duration::from_secs(30),
            final_retry_limit: 10,
            final_backoff_start: Duration::from_secs(1),
            final_backoff_max: Duration::from_secs(60 * 60),
        }
    }
}

/// The final state to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalState {
    pub state: JobState,
    /// Already mapped with the job's `features.failure_reasons` (§9).
    pub failure_reason: Option<String>,
    pub exit_code: Option<i32>,
}

/// How the final update ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalResult {
    /// 200 on the final PUT.
    Accepted,
    /// GitLab said the job is over / gone (403, 404, `Job-Status` canceled|failed).
    Aborted,
    /// All tries failed; the job stays running in GitLab until its stuck-job handling.
    GaveUp,
}

pub struct Updater {
    client: Arc<Client>,
    info: Arc<RunnerInfo>,
    job_id: i64,
    token: Secret,
    trace: Trace,
    debug_trace: bool,
    interrupts: Interrupts,
    timing: UpdaterTiming,
    acknowledged: u64,
    interval: Duration,
    last_sent: Instant,
}

impl std::fmt::Debug for Updater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Updater")
            .field("job_id", &self.job_id)
            .field("acknowledged", &self.acknowledged)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Updater {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Arc<Client>,
        info: Arc<RunnerInfo>,
        job_id: i64,
        token: Secret,
        trace: Trace,
        debug_trace: bool,
        interrupts: Interrupts,
        timing: UpdaterTiming,
    ) -> Self {
        Self {
            client,
            info,
            job_id,
            token,
            trace,
            debug_trace,
            interrupts,
            timing,
            acknowledged: 0,
            interval: timing.initial_interval,
            last_sent: Instant::now(),
        }
    }

    /// Bytes GitLab has acknowledged.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    fn adopt_interval(&mut self, interval: Option<Duration>) {
        if let Some(i) = interval {
            self.interval = i;
        }
    }

    fn forward_remote(&self, remote: RemoteStatus) {
        match remote {
            RemoteStatus::Canceling => self.interrupts.raise(Interrupt::Cancel),
            RemoteStatus::Finished => self.interrupts.raise(Interrupt::Abort),
            RemoteStatus::Unremarkable => {}
        }
    }

    async fn patch(&mut self, start: u64, data: bytes::Bytes) -> PatchOutcome {
        let out = self
            .client
            .patch_trace(self.job_id, &self.token, start, data, self.debug_trace)
            .await;
        self.adopt_interval(out.interval);
        out
    }

    /// Run ticks until `stop` is cancelled. A tick in flight is completed first so the
    /// acknowledged offset stays exact.
    pub async fn run_incremental(&mut self, stop: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
            self.tick().await;
        }
    }

    async fn tick(&mut self) {
        if let Some((start, data)) = self.trace.next_chunk(self.acknowledged, MAX_PATCH_SIZE) {
            let out = self.patch(start, data).await;
            match out.result {
                PatchResult::Accepted { next_offset } => {
                    self.acknowledged = next_offset;
                    self.last_sent = Instant::now();
                }
                PatchResult::RangeMismatch { offset } => {
                    tracing::debug!(job_id = self.job_id, offset, "trace offset re-synchronised");
                    self.acknowledged = offset;
                }
                PatchResult::Abort => self.interrupts.raise(Interrupt::Abort),
                // 404: "not found", keep going; failures are repeated at the next tick.
                PatchResult::NotFound | PatchResult::Failed => {}
            }
            self.forward_remote(out.remote);
        }
        if self.last_sent.elapsed() > self.timing.force_send_interval {
            self.keep_alive().await;
        }
    }

    /// `PUT state=running` with the current checksum and size (§4 b).
    async fn keep_alive(&mut self) {
        let (len, crc) = self.trace.summary();
        let out = self
            .client
            .update_job(
                self.job_id,
                &self.token,
                &self.info,
                JobState::Running,
                None,
                &JobOutput::of(crc, len),
                None,
            )
            .await;
        self.adopt_interval(out.interval);
        match out.result {
            UpdateResult::Succeeded | UpdateResult::Accepted => self.last_sent = Instant::now(),
            UpdateResult::Abort => self.interrupts.raise(Interrupt::Abort),
            // Keep-alive failures are ignored (§4).
            UpdateResult::TraceValidationFailed | UpdateResult::Failed => {}
        }
        if out.cancel_requested() {
            self.interrupts.raise(Interrupt::Cancel);
        }
    }

    /// Final phase (§6): the log must be complete (`Trace::finish`) before this is called.
    pub async fn finish(&mut self, fin: &FinalState) -> FinalResult {
        self.interval = self.timing.initial_interval;
        let mut backoff = self.timing.final_backoff_start;
        let limit = self.timing.final_retry_limit.max(1);
        for attempt in 1..=limit {
            match self.final_sequence(fin).await {
                Ok(result) => return result,
                Err(why) => {
                    tracing::warn!(job_id = self.job_id, attempt, limit, %why, "final job update failed");
                    if attempt < limit {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.timing.final_backoff_max);
                    }
                }
            }
        }
        tracing::error!(job_id = self.job_id, "giving up on the final job update");
        FinalResult::GaveUp
    }

    async fn final_sequence(&mut self, fin: &FinalState) -> Result<FinalResult, &'static str> {
        loop {
            self.send_remaining().await?;
            let (len, crc) = self.trace.summary();
            let out = self
                .client
                .update_job(
                    self.job_id,
                    &self.token,
                    &self.info,
                    fin.state,
                    fin.failure_reason.as_deref(),
                    &JobOutput::of(crc, len),
                    fin.exit_code,
                )
                .await;
            self.adopt_interval(out.interval);
            match out.result {
                UpdateResult::Succeeded => return Ok(FinalResult::Accepted),
                UpdateResult::Abort => return Ok(FinalResult::Aborted),
                UpdateResult::Accepted => {
                    // 202: the header is the wait; no limit on this loop (§4).
                    tokio::time::sleep(self.interval).await;
                }
                UpdateResult::TraceValidationFailed => {
                    self.acknowledged = 0;
                    tokio::time::sleep(self.interval).await;
                }
                UpdateResult::Failed => {
                    tokio::time::sleep(self.interval).await;
                    return Err("final PUT was not accepted");
                }
            }
        }
    }

    /// Send everything after the acknowledged offset. `Ok` also when GitLab says to stop
    /// sending trace (404 or abort): the PUT comes next either way.
    async fn send_remaining(&mut self) -> Result<(), &'static str> {
        let mut stalled = 0;
        while let Some((start, data)) = self.trace.next_chunk(self.acknowledged, MAX_PATCH_SIZE) {
            let out = self.patch(start, data).await;
            if out.remote == RemoteStatus::Finished {
                return Ok(());
            }
            match out.result {
                PatchResult::Accepted { next_offset } => {
                    self.acknowledged = next_offset;
                    stalled = 0;
                }
                PatchResult::RangeMismatch { offset } => {
                    // A server that keeps answering 416 with the same offset would loop
                    // forever; treat that as a failed attempt instead.
                    stalled = if offset == self.acknowledged {
                        stalled + 1
                    } else {
                        0
                    };
                    if stalled >= 3 {
                        return Err("trace offset does not converge");
                    }
                    self.acknowledged = offset;
                }
                PatchResult::NotFound | PatchResult::Abort => return Ok(()),
                PatchResult::Failed => return Err("trace patch failed"),
            }
        }
        Ok(())
    }
}
