//! Pickup latency: from a job enqueued at GitLab to the `201` at a waiting runner, with idle
//! runners long-polling. Jobs arrive one at a time, far enough apart that every one finds the
//! runners waiting again; the enqueue call itself is inside both figures alike.
//!
//! The autoscaler makes each job durable before it hands it out, so the figure also times the
//! disk alone at the same pace (one journal-sized write and `fdatasync` per job): the part of
//! the added time no relay can remove on this machine.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fake_gitlab::control::JobSpec;
use tokio::sync::mpsc;

use crate::client::{self, Job, Runner};
use crate::report::{Row, ms, percentile};
use crate::stack::{Autoscaler, Gitlab, static_pool};

/// Runners waiting at once (idle slots).
const IDLE: usize = 4;
/// Time between two jobs: long enough for the previous one to be done and the slots idle.
const SPACING: Duration = Duration::from_millis(25);
/// Jobs not counted while the runners and the autoscaler's intake settle into long polls.
const WARMUP: usize = 20;

pub async fn run(dir: &Path, samples: usize) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let http = client::http()?;

    let direct_token = "glrt-bench-pickup-direct";
    gitlab.control.add_runner(direct_token).await?;
    let tokens = vec![direct_token.to_string(); IDLE];
    let mut direct = measure(&gitlab, &http, &gitlab.url, direct_token, &tokens, samples).await?;

    let upstream = "glrt-bench-pickup-upstream";
    gitlab.control.add_runner(upstream).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &static_pool(&gitlab.url, upstream, "reg-pickup", IDLE as u32),
    )
    .await?;
    let tokens = client::register(&http, &autoscaler.url, "reg-pickup", IDLE).await?;
    let mut through = measure(&gitlab, &http, &autoscaler.url, upstream, &tokens, samples).await?;

    let mut disk = disk_alone(&dir.join("autoscaler"), samples).await?;

    let mut rows = Vec::new();
    for (p, limit) in [(50.0, 0.5), (99.0, 2.0)] {
        let d = ms(percentile(&mut direct, p));
        let t = ms(percentile(&mut through, p));
        rows.push(Row {
            figure: "pickup latency",
            measure: format!("p{p:.0}, {IDLE} idle runners"),
            direct: Some(d),
            through: t,
            unit: "ms",
            target: format!("added ≤ {limit} ms (added {:.2} ms)", t - d),
            met: t - d <= limit,
        });
    }
    rows.push(Row {
        figure: "pickup latency",
        measure: format!(
            "the disk alone: {} KiB written and `fdatasync`ed every {} ms, p50",
            JOURNAL_ENTRY / 1024,
            SPACING.as_millis()
        ),
        direct: None,
        through: ms(percentile(&mut disk, 50.0)),
        unit: "ms",
        target: "(reported: the floor under the added time)".into(),
        met: true,
    });
    Ok(rows)
}

/// About what the journal writes for one of these jobs: its payload and its record.
const JOURNAL_ENTRY: usize = 10 * 1024;

/// `samples` timings of one `JOURNAL_ENTRY` write and `fdatasync`, `SPACING` apart, in a
/// preallocated file next to the autoscaler's store (the same disk). Spaced like the jobs
/// because a disk that has been idle answers a sync more slowly than one kept busy.
async fn disk_alone(dir: &Path, samples: usize) -> Result<Vec<Duration>> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("disk-alone.bin");
    let file = std::fs::File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let size = (WARMUP + samples) * JOURNAL_ENTRY;
    file.write_all_at(&vec![0u8; size], 0)?;
    file.sync_all()?;
    let entry = vec![b'x'; JOURNAL_ENTRY];
    let mut timings = Vec::with_capacity(samples);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        tokio::task::block_in_place(|| {
            file.write_all_at(&entry, (i * JOURNAL_ENTRY) as u64)?;
            file.sync_data()
        })?;
        if i >= WARMUP {
            timings.push(start.elapsed());
        }
        tokio::time::sleep_until((start + SPACING).into()).await;
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(timings)
}

/// Pickup latencies of `samples` jobs queued for `queue_token`, taken by runners with
/// `tokens` polling `base`.
async fn measure(
    gitlab: &Gitlab,
    http: &reqwest::Client,
    base: &str,
    queue_token: &str,
    tokens: &[String],
    samples: usize,
) -> Result<Vec<Duration>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Job, Instant)>();
    let mut runners = tokio::task::JoinSet::new();
    for token in tokens {
        let runner = Runner::new(http.clone(), base, token);
        let tx = tx.clone();
        runners.spawn(async move {
            loop {
                let job = runner.next_job().await?;
                let at = Instant::now();
                runner.accept(&job).await?;
                runner.succeed(&job, b"").await?;
                if tx.send((job, at)).is_err() {
                    return Ok::<(), anyhow::Error>(());
                }
            }
        });
    }
    let spec = JobSpec::new(queue_token, &["true"]);
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        let queued = gitlab.control.enqueue(&spec).await?;
        let (job, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .context("no runner picked the job up within 30 s")?
            .context("every runner stopped")?;
        anyhow::ensure!(
            job.id == queued.id,
            "picked up job {} instead of {}",
            job.id,
            queued.id
        );
        if i >= WARMUP {
            latencies.push(at - start);
        }
        tokio::time::sleep_until((start + SPACING).into()).await;
    }
    runners.abort_all();
    Ok(latencies)
}
