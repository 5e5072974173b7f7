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
use crate::stack::{Autoscaler, Gitlab, cpu_seconds, static_pool};

pub const RUNNERS: usize = 256;
const PATCHES: usize = 5;
const WARMUP: Duration = Duration::from_secs(2);

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub lifecycles_per_s: f64,
    /// CPU time per lifecycle of each process, in microseconds.
    pub cpu: Cpu,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub gitlab: f64,
    pub clients: f64,
    pub autoscaler: f64,
}

/// The processes whose CPU time is counted.
#[derive(Debug, Clone, Copy)]
struct Pids {
    gitlab: u32,
    autoscaler: Option<u32>,
}

impl Pids {
    fn sample(self) -> Result<Cpu> {
        Ok(Cpu {
            gitlab: cpu_seconds(Some(self.gitlab))?,
            clients: cpu_seconds(None)?,
            autoscaler: self
                .autoscaler
                .map(|p| cpu_seconds(Some(p)))
                .transpose()?
                .unwrap_or(0.0),
        })
    }
}

pub async fn run(dir: &Path, seconds: u64) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let http = client::http()?;
    let duration = Duration::from_secs(seconds);

    let direct_token = "glrt-bench-throughput-direct";
    gitlab.control.add_runner(direct_token).await?;
    fill(&gitlab, direct_token, 60_000).await?;
    let tokens = vec![direct_token.to_string(); RUNNERS];
    let pids = Pids {
        gitlab: gitlab.pid()?,
        autoscaler: None,
    };
    let direct = measure(&http, &gitlab.url, &tokens, duration, pids).await?;

    let upstream = "glrt-bench-throughput-upstream";
    gitlab.control.add_runner(upstream).await?;
    fill(&gitlab, upstream, 40_000).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &static_pool(&gitlab.url, upstream, "reg-throughput", RUNNERS as u32),
    )
    .await?;
    let tokens = client::register(&http, &autoscaler.url, "reg-throughput", RUNNERS).await?;
    let pids = Pids {
        autoscaler: Some(autoscaler.pid()?),
        ..pids
    };
    let through = measure(&http, &autoscaler.url, &tokens, duration, pids).await?;

    let ratio = through.lifecycles_per_s / direct.lifecycles_per_s;
    // Everything shares the same cores: when both runs keep them busy, each rate is the cores
    // divided by the CPU time a lifecycle costs all processes together, so the ratio can be
    // no more than the ratio of those costs.
    let (d, t) = (direct.cpu, through.cpu);
    let ceiling = (d.gitlab + d.clients) / (t.gitlab + t.clients + t.autoscaler);
    println!(
        "  (CPU per lifecycle: fake GitLab {:.0} µs direct, {:.0} µs through; clients {:.0} µs, {:.0} µs; \
         autoscaler {:.0} µs. On shared cores the ratio can be at most {ceiling:.2}.)",
        d.gitlab, t.gitlab, d.clients, t.clients, t.autoscaler
    );
    Ok(vec![
        Row {
            figure: "relay throughput",
            measure: format!("job lifecycles/s, {RUNNERS} runners, {PATCHES} patches each"),
            direct: Some(direct.lifecycles_per_s),
            through: through.lifecycles_per_s,
            unit: "/s",
            target: "≥ 1500/s and ≥ 0.6 of direct".into(),
            met: through.lifecycles_per_s >= 1500.0 && ratio >= 0.6,
        },
        Row {
            figure: "relay throughput",
            measure: "CPU time per lifecycle: fake GitLab and clients (baseline), autoscaler"
                .into(),
            direct: Some(d.gitlab + d.clients),
            through: t.autoscaler,
            unit: "µs",
            target: format!("ratio ≤ 1.0 (lifecycle ratio at most {ceiling:.2} on shared cores)"),
            met: t.autoscaler <= d.gitlab + d.clients,
        },
    ])
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
    pids: Pids,
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
    let (start, before, cpu_before) =
        (Instant::now(), done.load(Ordering::Relaxed), pids.sample()?);
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        Some(failed) = runners.join_next() => {
            failed??;
            anyhow::bail!("a runner stopped");
        }
    }
    let (elapsed, after, cpu_after) = (
        start.elapsed(),
        done.load(Ordering::Relaxed),
        pids.sample()?,
    );
    runners.abort_all();
    let count = (after - before).max(1) as f64;
    let per = |a: f64, b: f64| (b - a) * 1e6 / count;
    Ok(Rate {
        lifecycles_per_s: (after - before) as f64 / elapsed.as_secs_f64(),
        cpu: Cpu {
            gitlab: per(cpu_before.gitlab, cpu_after.gitlab),
            clients: per(cpu_before.clients, cpu_after.clients),
            autoscaler: per(cpu_before.autoscaler, cpu_after.autoscaler),
        },
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
