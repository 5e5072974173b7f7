//! Trace relay: the most trace patches per second that 64 running jobs get through, then the
//! latency of each patch at half of the autoscaler's maximum, offered at the same rate to
//! GitLab directly and through the autoscaler. Latency is measured from the moment a patch
//! was due, so a slow answer also counts against the patches queued behind it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;

use super::throughput::fill;
use crate::client::{self, Job, Runner};
use crate::report::{Row, ms, percentile};
use crate::stack::{Autoscaler, Gitlab, static_pool};

const JOBS: usize = 64;
const WARMUP: Duration = Duration::from_secs(1);

pub async fn run(dir: &Path, seconds: u64) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let http = client::http()?;
    let window = Duration::from_secs(seconds);

    let direct_token = "glrt-bench-trace-direct";
    gitlab.control.add_runner(direct_token).await?;
    fill(&gitlab, direct_token, JOBS as u32).await?;
    let direct_jobs =
        running_jobs(&http, &gitlab.url, &vec![direct_token.to_string(); JOBS]).await?;

    let upstream = "glrt-bench-trace-upstream";
    gitlab.control.add_runner(upstream).await?;
    fill(&gitlab, upstream, JOBS as u32).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &static_pool(&gitlab.url, upstream, "reg-trace", JOBS as u32),
    )
    .await?;
    let tokens = client::register(&http, &autoscaler.url, "reg-trace", JOBS).await?;
    let through_jobs = running_jobs(&http, &autoscaler.url, &tokens).await?;

    let chunk = Bytes::from(format!("{}\n", "t".repeat(255)));
    let mut direct = Streams::new(direct_jobs);
    let mut through = Streams::new(through_jobs);
    let direct_max = direct.flat_out(&chunk, window).await?;
    let through_max = through.flat_out(&chunk, window).await?;
    let half = through_max / 2.0;
    let mut direct_lat = direct.paced(&chunk, half, window).await?;
    let mut through_lat = through.paced(&chunk, half, window).await?;
    let (d99, t99) = (
        ms(percentile(&mut direct_lat, 99.0)),
        ms(percentile(&mut through_lat, 99.0)),
    );
    let (d50, t50) = (
        ms(percentile(&mut direct_lat, 50.0)),
        ms(percentile(&mut through_lat, 50.0)),
    );
    Ok(vec![
        Row {
            figure: "trace relay",
            measure: format!("patches/s at most, {JOBS} jobs, 256-byte patches"),
            direct: Some(direct_max),
            through: through_max,
            unit: "/s",
            target: "(reported)".into(),
            met: true,
        },
        Row {
            figure: "trace relay",
            measure: format!("p50 latency at {half:.0} patches/s (half the maximum)"),
            direct: Some(d50),
            through: t50,
            unit: "ms",
            target: format!("(added {:.2} ms)", t50 - d50),
            met: true,
        },
        Row {
            figure: "trace relay",
            measure: format!("p99 latency at {half:.0} patches/s (half the maximum)"),
            direct: Some(d99),
            through: t99,
            unit: "ms",
            target: format!("added ≤ 2 ms (added {:.2} ms)", t99 - d99),
            met: t99 - d99 <= 2.0,
        },
    ])
}

/// Takes and accepts one job per token: jobs that are running, ready for trace.
async fn running_jobs(
    http: &reqwest::Client,
    base: &str,
    tokens: &[String],
) -> Result<Vec<(Runner, Job)>> {
    let mut out = Vec::new();
    for token in tokens {
        let runner = Runner::new(http.clone(), base, token);
        let job = runner.next_job().await?;
        runner.accept(&job).await?;
        out.push((runner, job));
    }
    Ok(out)
}

/// The running jobs and how much trace each has sent.
struct Streams {
    jobs: Vec<(Runner, Job, Arc<AtomicU64>)>,
}

impl Streams {
    fn new(jobs: Vec<(Runner, Job)>) -> Self {
        Self {
            jobs: jobs
                .into_iter()
                .map(|(r, j)| (r, j, Arc::new(AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Every job sends patches back to back; patches per second over `window`.
    async fn flat_out(&mut self, chunk: &Bytes, window: Duration) -> Result<f64> {
        let count = Arc::new(AtomicU64::new(0));
        let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let deadline = Instant::now() + WARMUP + window;
        let mut tasks = tokio::task::JoinSet::new();
        for (runner, job, offset) in &self.jobs {
            let (runner, job, offset) = (runner.clone(), job.clone(), offset.clone());
            let (chunk, count, counting) = (chunk.clone(), count.clone(), counting.clone());
            tasks.spawn(async move {
                while Instant::now() < deadline {
                    let at = offset.load(Ordering::Relaxed);
                    let end = runner.patch(&job, at, chunk.clone()).await?;
                    offset.store(end, Ordering::Relaxed);
                    if counting.load(Ordering::Relaxed) {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok::<(), anyhow::Error>(())
            });
        }
        tokio::time::sleep(WARMUP).await;
        counting.store(true, Ordering::Relaxed);
        let start = Instant::now();
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
    }

    /// `rate` patches per second in all, spread evenly over the jobs, for `window`; the
    /// latency of each from when it was due.
    async fn paced(&mut self, chunk: &Bytes, rate: f64, window: Duration) -> Result<Vec<Duration>> {
        let interval = Duration::from_secs_f64(self.jobs.len() as f64 / rate);
        let start = Instant::now() + WARMUP;
        let end = start + window;
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (runner, job, offset)) in self.jobs.iter().enumerate() {
            let (runner, job, offset, chunk) =
                (runner.clone(), job.clone(), offset.clone(), chunk.clone());
            // Stagger the jobs so that the patches arrive evenly, not in bursts of 64.
            let first = Instant::now() + interval.mul_f64(i as f64 / self.jobs.len() as f64);
            tasks.spawn(async move {
                let mut due = first;
                let mut latencies = Vec::new();
                while due < end {
                    tokio::time::sleep_until(due.into()).await;
                    let at = offset.load(Ordering::Relaxed);
                    let next = runner.patch(&job, at, chunk.clone()).await?;
                    offset.store(next, Ordering::Relaxed);
                    if due >= start {
                        latencies.push(due.elapsed());
                    }
                    due += interval;
                }
                Ok::<_, anyhow::Error>(latencies)
            });
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r??);
        }
        Ok(all)
    }
}
