//! The processes a benchmark runs: the fake GitLab and the autoscaler (release builds), with
//! their logs in files so that the terminal shows only figures.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result};
use e2e::process::{Proc, binary};
use fake_gitlab::control::Client;
use tokio::process::Command;

#[derive(Debug)]
pub struct Gitlab {
    /// Kept so that the process lives as long as this (it is killed when dropped).
    proc: Proc,
    pub url: String,
    pub control: Client,
}

impl Gitlab {
    /// `fake-gitlab` with `args`, logging warnings only to `dir/fake-gitlab.log`.
    pub async fn start(dir: &Path, args: &[&str]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut command = pinned(binary("fake-gitlab")?, crate::cores::for_gitlab());
        command.args(["--listen", "127.0.0.1:0"]).args(args).env(
            "RUST_LOG",
            std::env::var("BENCH_GITLAB_LOG").unwrap_or_else(|_| "warn".into()),
        );
        let log = File::create(dir.join("fake-gitlab.log"))?;
        let (proc, mut urls) =
            Proc::spawn_announcing_logging("fake-gitlab", command, 1, Stdio::from(log)).await?;
        let url = urls.remove(0);
        Ok(Self {
            proc,
            control: Client::new(url.clone()),
            url,
        })
    }

    pub fn pid(&self) -> Result<u32> {
        self.proc.pid().context("the fake GitLab has exited")
    }
}

#[derive(Debug)]
pub struct Autoscaler {
    pub proc: Proc,
    pub url: String,
    pub admin_url: String,
}

impl Autoscaler {
    /// `autoscaler run` on `config` (TOML, with `[admin]`), state and logs in `dir`. Logs at
    /// the configured level (info by default), as in production, into `dir/autoscaler.log`.
    pub async fn start(dir: &Path, config: &str) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("autoscaler.toml");
        std::fs::write(&path, config)?;
        let mut command = pinned(binary("autoscaler")?, crate::cores::for_autoscaler());
        command
            .arg("run")
            .arg("--config")
            .arg(&path)
            .env_remove("RUST_LOG");
        let log = File::create(dir.join("autoscaler.log"))?;
        let (proc, mut urls) =
            Proc::spawn_announcing_logging("autoscaler", command, 2, Stdio::from(log)).await?;
        let admin_url = urls.remove(1);
        let url = urls.remove(0);
        Ok(Self {
            proc,
            url,
            admin_url,
        })
    }

    pub fn pid(&self) -> Result<u32> {
        self.proc.pid().context("the autoscaler has exited")
    }
}

/// `program`, under `taskset -c cpus` when the processes have cores of their own.
fn pinned(program: std::path::PathBuf, cpus: Option<String>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.args(["-c", &cpus]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A static pool's configuration: sidecars register with `registration`, the autoscaler asks
/// GitLab with `upstream` and at most `concurrency` job requests in flight.
///
/// The bench's runners stand for many machines but all come from 127.0.0.1, so the
/// per-address connection cap (256, sized for one machine) is raised: at 256 runners, each with
/// a long poll and a connection for its other calls, it closed connections mid-figure.
pub fn static_pool(
    gitlab_url: &str,
    upstream: &str,
    registration: &str,
    concurrency: u32,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nlong_poll_timeout = \"50s\"\n\
         max_connections_per_address = 4096\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n[state]\ndir = \"state\"\n\n\
         [upstream]\nurl = \"{gitlab_url}\"\n\n\
         [[pools]]\nname = \"bench\"\nupstream_token = \"{upstream}\"\n\
         registration_token = \"{registration}\"\nrequest_concurrency = {concurrency}\n"
    )
}

/// Resident memory now and at its peak (`VmRSS`, `VmHWM`), in bytes.
pub fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed status line")?
            .parse()?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Resets the peak resident memory (`VmHWM`) to the current size (Linux `clear_refs` 5).
pub fn reset_peak(pid: u32) -> Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .context("cannot reset the peak memory figure")
}

/// CPU time (user and system) a process has used so far, in seconds; `None` is this process.
pub fn cpu_seconds(pid: Option<u32>) -> Result<f64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_string(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the command name (which may hold spaces) in parentheses; utime and stime
    // are the 14th and 15th fields, in clock ticks of 1/100 s (Linux's USER_HZ).
    let after = stat.rsplit_once(')').context("malformed stat line")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks =
        |i: usize| -> Result<f64> { Ok(fields.get(i).context("short stat line")?.parse::<f64>()?) };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
