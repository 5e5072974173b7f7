//! Artifacts: one 1 GiB archive uploaded and downloaded by a running job, directly and through
//! the autoscaler, while the autoscaler's resident memory is sampled. The fake GitLab keeps
//! artifacts on disk, so both figures include the same disk.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use super::throughput::fill;
use crate::client::{self, Runner};
use crate::report::Row;
use crate::stack::{Autoscaler, Gitlab, memory, reset_peak, static_pool};

const MIB: f64 = 1024.0 * 1024.0;

pub async fn run(dir: &Path, size: u64) -> Result<Vec<Row>> {
    let data = dir.join("gitlab-data");
    std::fs::create_dir_all(&data)?;
    let data_arg = data.display().to_string();
    let gitlab = Gitlab::start(
        &dir.join("gitlab"),
        &["--data-dir", &data_arg, "--max-artifact-size", "4GiB"],
    )
    .await?;
    let http = client::http()?;

    let direct_token = "glrt-bench-artifacts-direct";
    gitlab.control.add_runner(direct_token).await?;
    fill(&gitlab, direct_token, 1).await?;
    let runner = Runner::new(http.clone(), &gitlab.url, direct_token);
    let job = runner.next_job().await?;
    runner.accept(&job).await?;
    let (direct_up, direct_down) = transfer(&runner, &job, size).await?;

    let upstream = "glrt-bench-artifacts-upstream";
    gitlab.control.add_runner(upstream).await?;
    fill(&gitlab, upstream, 1).await?;
    let autoscaler = Autoscaler::start(
        &dir.join("autoscaler"),
        &static_pool(&gitlab.url, upstream, "reg-artifacts", 1),
    )
    .await?;
    let token = client::register(&http, &autoscaler.url, "reg-artifacts", 1)
        .await?
        .remove(0);
    let runner = Runner::new(http.clone(), &autoscaler.url, &token);
    let job = runner.next_job().await?;
    runner.accept(&job).await?;
    let pid = autoscaler.pid()?;
    let (idle, _) = memory(pid)?;
    reset_peak(pid)?;
    let (through_up, through_down) = transfer(&runner, &job, size).await?;
    let (_, peak) = memory(pid)?;
    let growth = peak.saturating_sub(idle) as f64 / MIB;

    let gib = size as f64 / (1024.0 * MIB);
    let rate = |d: Duration| size as f64 / MIB / d.as_secs_f64();
    let row = |measure: &str, direct: Duration, through: Duration| {
        let (d, t) = (rate(direct), rate(through));
        Row {
            figure: "artifacts",
            measure: format!("{measure} of {gib:.0} GiB"),
            direct: Some(d),
            through: t,
            unit: "MiB/s",
            target: "≥ 0.8 of direct".into(),
            met: t / d >= 0.8,
        }
    };
    Ok(vec![
        row("upload", direct_up, through_up),
        row("download", direct_down, through_down),
        Row {
            figure: "artifacts",
            measure: format!(
                "autoscaler peak memory above idle ({:.0} MiB idle)",
                idle as f64 / MIB
            ),
            direct: None,
            through: growth,
            unit: "MiB",
            target: "≤ 64 MiB".into(),
            met: growth <= 64.0,
        },
    ])
}

/// Upload then download of `size` bytes; how long each took.
async fn transfer(runner: &Runner, job: &client::Job, size: u64) -> Result<(Duration, Duration)> {
    let start = Instant::now();
    runner.upload(job, size).await?;
    let up = start.elapsed();
    let start = Instant::now();
    let got = runner.download(job).await?;
    let down = start.elapsed();
    // The archive is the multipart file part only; GitLab stores exactly what was sent.
    ensure!(got == size, "downloaded {got} bytes of {size}");
    Ok((up, down))
}
