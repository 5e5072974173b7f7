//! Artifacts: a 1 GiB archive uploaded and downloaded by a running job, directly and through
//! the autoscaler (five times each, alternating), while the autoscaler's peak resident memory
//! is tracked. On a shared VM one transfer's rate varies by a factor of two from one round to
//! the next on either path, so the medians are reported with the spread of the ratio of each
//! round's pair. The fake GitLab keeps artifacts in memory (tmpfs) where it can, so that the
//! figures are the relay's, not the disk's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use super::throughput::fill;
use crate::client::{self, Runner};
use crate::report::{Row, percentile};
use crate::stack::{Autoscaler, Gitlab, memory, reset_peak, static_pool};

const MIB: f64 = 1024.0 * 1024.0;
/// Transfers each way on each path; the median is reported.
const ROUNDS: usize = 5;
/// Issue 14's target: artifacts relayed at wire speed, give or take the extra socket pair.
const TARGET_RATIO: f64 = 0.95;

pub async fn run(dir: &Path, size: u64) -> Result<Vec<Row>> {
    // GitLab's artifact storage lives in memory when the machine has a tmpfs: 10 GiB written to
    // disk would measure the page cache's write-back, which lands on either side at random.
    let in_memory = tempfile::Builder::new()
        .prefix("autoscaler-bench-artifacts-")
        .tempdir_in("/dev/shm")
        .ok();
    let data = in_memory
        .as_ref()
        .map_or_else(|| dir.join("gitlab-data"), |t| t.path().to_path_buf());
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
    let direct = Runner::new(http.clone(), &gitlab.url, direct_token);
    let direct_job = direct.next_job().await?;
    direct.accept(&direct_job).await?;

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
    let through = Runner::new(http.clone(), &autoscaler.url, &token);
    let through_job = through.next_job().await?;
    through.accept(&through_job).await?;
    let pid = autoscaler.pid()?;
    let (idle, _) = memory(pid)?;
    reset_peak(pid)?;

    // Rounds alternate between the two paths so that a disturbance on the machine (the page
    // cache writing back, a neighbour) does not fall on one side only; the median is kept.
    let (mut direct_up, mut direct_down, mut through_up, mut through_down) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (up, down) = transfer(&direct, &direct_job, size).await?;
        direct_up.push(up);
        direct_down.push(down);
        let (up, down) = transfer(&through, &through_job, size).await?;
        through_up.push(up);
        through_down.push(down);
    }
    let (_, peak) = memory(pid)?;
    let growth = peak.saturating_sub(idle) as f64 / MIB;
    let up_spread = spread(&direct_up, &through_up);
    let down_spread = spread(&direct_down, &through_down);
    let [direct_up, direct_down, through_up, through_down] =
        [direct_up, direct_down, through_up, through_down].map(|mut v| percentile(&mut v, 50.0));

    let gib = size as f64 / (1024.0 * MIB);
    let rate = |d: Duration| size as f64 / MIB / d.as_secs_f64();
    let row = |measure: &str, direct: Duration, through: Duration, spread: String| {
        let (d, t) = (rate(direct), rate(through));
        Row {
            figure: "artifacts",
            measure: format!(
                "{measure} of {gib:.0} GiB, median of {ROUNDS} (ratio per round {spread})"
            ),
            direct: Some(d),
            through: t,
            unit: "MiB/s",
            target: format!("≥ {TARGET_RATIO} of direct"),
            met: t / d >= TARGET_RATIO,
        }
    };
    Ok(vec![
        row("upload", direct_up, through_up, up_spread),
        row("download", direct_down, through_down, down_spread),
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

/// The lowest and highest ratio of a round's rate through the autoscaler to the same round's
/// direct rate.
fn spread(direct: &[Duration], through: &[Duration]) -> String {
    let ratios = direct
        .iter()
        .zip(through)
        .map(|(d, t)| d.as_secs_f64() / t.as_secs_f64());
    let (low, high) = ratios.fold((f64::INFINITY, 0.0_f64), |(l, h), r| (l.min(r), h.max(r)));
    format!("{low:.2}–{high:.2}")
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
