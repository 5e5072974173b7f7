//! Relay throughput: full job lifecycles per second (job request, acceptance, five trace
//! patches, final update) with 256 runners at once, each starting its next job as soon as the
//! last one ended. Jobs are queued at GitLab beforehand so that the figure is the relay's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use fake_gitlab::control::JobSpec;

use crate::client::{self, Runner};
use crate::report::Row;
use crate::stack::{Autoscaler, Gitlab, static_pool};

pub const RUNNERS: usize = 256;
const PATCHES: usize = 5;
const WARMUP: Duration = Duration::from_secs(2);

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub lifecycles_per_s: f64,
}

pub async fn run(dir: &Path, seconds: u64) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let http = client::http()?;
    let duration = Duration::from_secs(seconds);

    let direct_token = "glrt-bench-throughput-direct";
    gitlab.control.add_runner(direct_token).await?;
    fill(&gitlab, direct_token, 60_000).await?;
    let tokens = vec![direct_token.to_string(); RUNNERS];
    let direct = measure(&http, &gitlab.url, &tokens, duration).await?;

    let upstream = "glrt-bench-throughput-upstream";
    gitlab.control.add_runner(upstream).await?;
    fill(&gitlab, upstream, 40_000).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &static_pool(&gitlab.url, upstream, "reg-throughput", RUNNERS as u32),
    )
    .await?;
    let tokens = client::register(&http, &autoscaler.url, "reg-throughput", RUNNERS).await?;
    let through = measure(&http, &autoscaler.url, &tokens, duration).await?;

    let ratio = through.lifecycles_per_s / direct.lifecycles_per_s;
    Ok(vec![Row {
        figure: "relay throughput",
        measure: format!("job lifecycles/s, {RUNNERS} runners, {PATCHES} patches each"),
        direct: Some(direct.lifecycles_per_s),
        through: through.lifecycles_per_s,
        unit: "/s",
        target: "≥ 1500/s and ≥ 0.6 of direct".into(),
        met: through.lifecycles_per_s >= 1500.0 && ratio >= 0.6,
    }])
}

/// Queues `count` jobs for `token` at GitLab.
pub async fn fill(gitlab: &Gitlab, token: &str, count: u32) -> Result<()> {
    let spec = JobSpec::new(token, &["true"]);
    let mut left = count;
    while left > 0 {
        let n = left.min(10_000);
        gitlab.control.enqueue_batch(&spec, n).await?;
        left -= n;
    }
    Ok(())
}

/// Lifecycles per second completed in `duration` after a warm-up.
async fn measure(
    http: &reqwest::Client,
    base: &str,
    tokens: &[String],
    duration: Duration,
) -> Result<Rate> {
    let done = Arc::new(AtomicU64::new(0));
    let chunk = Bytes::from(format!("{}\n", "x".repeat(199)));
    let mut runners = tokio::task::JoinSet::new();
    for token in tokens {
        let runner = Runner::new(http.clone(), base, token);
        let done = done.clone();
        let chunk = chunk.clone();
        runners.spawn(async move { lifecycles(&runner, &chunk, &done).await });
    }
    tokio::time::sleep(WARMUP).await;
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        Some(failed) = runners.join_next() => {
            failed??;
            anyhow::bail!("a runner stopped");
        }
    }
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    runners.abort_all();
    Ok(Rate {
        lifecycles_per_s: (after - before) as f64 / elapsed.as_secs_f64(),
    })
}

/// One runner taking and running jobs until it is stopped.
async fn lifecycles(runner: &Runner, chunk: &Bytes, done: &AtomicU64) -> Result<()> {
    loop {
        let job = runner.next_job().await?;
        runner.run(&job, PATCHES, chunk).await?;
        done.fetch_add(1, Ordering::Relaxed);
    }
}
