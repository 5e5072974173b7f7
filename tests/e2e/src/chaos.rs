//! The chaos suite: real processes driven through failures, with figures.
//!
//! Each scenario runs a fake GitLab, the autoscaler and a pool of local machines, queues jobs
//! whose output is known in advance, breaks something while they run, and then counts: jobs
//! submitted and how each ended, trace bytes the scripts produced versus what GitLab stored,
//! machines left behind at the provider. Any lost job, missing byte or leaked machine fails it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use autoscaler::core::machine::MachineState;
use fake_gitlab::control::{FaultAction, FaultRule, JobStatus};
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::stack::repo_root;

mod world;
use world::{Setup, world};

/// What a scenario measured.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub scenario: String,
    pub jobs_submitted: usize,
    pub by_state: BTreeMap<String, usize>,
    /// Jobs that never reached a final state at GitLab.
    pub jobs_lost: usize,
    /// Jobs that failed, and why, where the scenario expects none.
    pub unexpected_failures: Vec<String>,
    /// Trace bytes the scripts printed (jobs that ran to the end) and how many of them GitLab has.
    pub bytes_produced: u64,
    pub bytes_received: u64,
    /// Artifacts uploaded versus found intact at GitLab.
    pub artifacts_expected: usize,
    pub artifacts_intact: usize,
    pub machines_created: usize,
    pub machines_leaked: usize,
    /// Free-form facts of the scenario (kills, detection latency, ...).
    pub notes: Vec<String>,
    pub seconds: f64,
}

impl Figures {
    pub fn bytes_lost(&self) -> u64 {
        self.bytes_produced.saturating_sub(self.bytes_received)
    }

    /// Why the scenario failed, if it did.
    pub fn verdict(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.jobs_lost > 0 {
            problems.push(format!("{} jobs lost", self.jobs_lost));
        }
        if !self.unexpected_failures.is_empty() {
            problems.push(format!(
                "unexpected failures: {}",
                self.unexpected_failures.join("; ")
            ));
        }
        if self.bytes_lost() > 0 {
            problems.push(format!("{} trace bytes lost", self.bytes_lost()));
        }
        if self.artifacts_intact < self.artifacts_expected {
            problems.push(format!(
                "{} artifacts missing",
                self.artifacts_expected - self.artifacts_intact
            ));
        }
        if self.machines_leaked > 0 {
            problems.push(format!("{} machines leaked", self.machines_leaked));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join(", "))
        }
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let states: Vec<String> = self
            .by_state
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        writeln!(f, "{} ({:.0} s)", self.scenario, self.seconds)?;
        writeln!(f, "  jobs submitted      {}", self.jobs_submitted)?;
        writeln!(f, "  finished upstream   {}", states.join(", "))?;
        writeln!(f, "  jobs lost           {}", self.jobs_lost)?;
        writeln!(
            f,
            "  trace bytes         {} produced, {} received, {} lost",
            self.bytes_produced,
            self.bytes_received,
            self.bytes_lost()
        )?;
        if self.artifacts_expected > 0 {
            writeln!(
                f,
                "  artifacts           {} uploaded, {} intact at GitLab",
                self.artifacts_expected, self.artifacts_intact
            )?;
        }
        writeln!(
            f,
            "  machines            {} created, {} leaked",
            self.machines_created, self.machines_leaked
        )?;
        for note in &self.notes {
            writeln!(f, "  {note}")?;
        }
        match self.verdict() {
            Ok(()) => write!(f, "  verdict             PASS"),
            Err(why) => write!(f, "  verdict             FAIL: {why}"),
        }
    }
}

/// Kill -9 of the autoscaler at random moments of a 100-job run, restarting it each time.
pub async fn crash_restarts(
    seed: u64,
    jobs: usize,
    kills: usize,
    two_phase: bool,
) -> Result<Figures> {
    let started = Instant::now();
    let mut w = world(Setup {
        two_phase,
        ..Setup::default()
    })
    .await?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut planned = Vec::new();
    for n in 0..jobs {
        planned.push(w.enqueue(n, 30, 1.5, n % 10 == 0).await?);
    }
    for k in 0..kills {
        let wait = rng.random_range(1_500..6_000);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        w.autoscaler.proc.signal(Signal::SIGKILL)?;
        w.autoscaler.proc.wait(Duration::from_secs(30)).await?;
        let down = rng.random_range(0..1_500);
        tokio::time::sleep(Duration::from_millis(down)).await;
        w.autoscaler
            .restart()
            .await
            .with_context(|| format!("restart {k}"))?;
    }
    let mut f = w
        .settle(
            &format!(
                "kill -9 of the autoscaler x{kills} during {jobs} jobs, GitLab {} (seed {seed})",
                if two_phase {
                    "with two-phase commit"
                } else {
                    "as by default (jobs run from hand-out)"
                }
            ),
            started,
            &planned,
            &BTreeSet::new(),
        )
        .await?;
    f.notes.push(format!(
        "kills               {kills} (SIGKILL, restart after 0-1.5 s)"
    ));
    Ok(f)
}

/// GitLab answering 502 to everything for 60 s in the middle of a run.
pub async fn gitlab_outage(jobs: usize, outage: Duration) -> Result<Figures> {
    let started = Instant::now();
    let w = world(Setup::default()).await?;
    let mut planned = Vec::new();
    for n in 0..jobs {
        planned.push(w.enqueue(n, 40, 4.0, n % 3 == 0).await?);
    }
    w.gitlab
        .control
        .wait_running(planned[0].id, Duration::from_secs(120))
        .await?;
    w.gitlab
        .control
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 502,
                retry_after: None,
            })
            .path_prefix("/api/v4/")
            .duration(outage),
        )
        .await?;
    let mut f = w
        .settle(
            &format!("GitLab down (502) for {} s mid-run", outage.as_secs()),
            started,
            &planned,
            &BTreeSet::new(),
        )
        .await?;
    let stats = w.gitlab.control.stats().await?;
    let refused: u64 = stats.requests.values().filter_map(|by| by.get("502")).sum();
    f.notes.push(format!(
        "calls refused       {refused} answered 502 during the outage"
    ));
    Ok(f)
}

/// Machines dying under running jobs: one destroyed at the provider (as a spot reclaim would),
/// one whose sidecar is killed (the machine stays but goes silent).
pub async fn machines_killed(jobs: usize) -> Result<Figures> {
    let started = Instant::now();
    let w = world(Setup::default()).await?;
    let mut planned = Vec::new();
    for n in 0..jobs {
        planned.push(w.enqueue(n, 40, 8.0, false).await?);
    }
    // Wait until two machines run jobs.
    let busy = w
        .autoscaler
        .wait_machines(Duration::from_secs(120), "two busy machines", |l| {
            l.iter().filter(|m| m.state == MachineState::Busy).count() >= 2
        })
        .await?;
    let mut victims: Vec<_> = busy
        .into_iter()
        .filter(|m| m.state == MachineState::Busy)
        .collect();
    victims.truncate(2);
    let running_before: BTreeSet<u64> = {
        let mut ids = BTreeSet::new();
        for p in &planned {
            if w.gitlab.control.job(p.id).await?.status == JobStatus::Running {
                ids.insert(p.id);
            }
        }
        ids
    };
    let killed_at = Instant::now();
    // The first: gone at the provider. The provider's log of machines (the counting wrapper's,
    // which sees only the autoscaler's calls) records this destroy too: the autoscaler, told by
    // the provider that the machine is gone, has nothing left to destroy.
    let reclaimed = victims[0].provider_id.clone().context("no provider id")?;
    destroy_at_provider(&w.machines_root, &reclaimed)?;
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&w.count_log)?;
    std::io::Write::write_all(&mut log, format!("destroy {reclaimed}\n").as_bytes())?;
    // The second: its sidecar dies, the machine stays up.
    let silent = victims[1].provider_id.clone().context("no provider id")?;
    kill_sidecar_of(&w.machines_root, &silent)?;
    let lost = w
        .autoscaler
        .wait_machines(Duration::from_secs(120), "both victims detected", |l| {
            victims.iter().all(|v| {
                l.iter().any(|m| {
                    m.id == v.id
                        && matches!(
                            m.state,
                            MachineState::Failed | MachineState::Destroying | MachineState::Gone
                        )
                })
            })
        })
        .await;
    let detection = killed_at.elapsed();
    // The jobs that were running may have been on the victims: those are allowed to fail.
    let mut f = w
        .settle(
            &format!(
                "{} machines killed under {jobs} running jobs",
                victims.len()
            ),
            started,
            &planned,
            &running_before,
        )
        .await?;
    if lost.is_err() {
        f.notes.push("the lost machines were not detected".into());
        f.jobs_lost += 1;
    }
    if detection > Duration::from_secs(60) {
        f.unexpected_failures.push(format!(
            "detection took {} s (bound 60 s)",
            detection.as_secs()
        ));
    }
    let system_failures = f.by_state.get("failed").copied().unwrap_or(0);
    f.notes.push(format!(
        "killed              {reclaimed} (destroyed at the provider), {silent} (sidecar killed)"
    ));
    f.notes.push(format!(
        "detected within     {:.1} s",
        detection.as_secs_f64()
    ));
    f.notes.push(format!("failed (expected)   {system_failures} running jobs failed as interrupted; the rest ran elsewhere"));
    Ok(f)
}

/// A provisioner that loses the answer of about half of its calls (failing or hanging after
/// doing the work).
pub async fn flaky_provisioner(jobs: usize) -> Result<Figures> {
    let started = Instant::now();
    let w = world(Setup {
        provisioner: "tests/e2e/fixtures/flaky-provisioner",
        provisioner_timeouts: "[pools.provisioner.timeouts]\ncreate = \"4s\"\nlist = \"4s\"\nstatus = \"4s\"\ndestroy = \"4s\"\nboot = \"20s\"",
        ..Setup::default()
    })
    .await?;
    let mut planned = Vec::new();
    for n in 0..jobs {
        planned.push(w.enqueue(n, 20, 1.0, false).await?);
    }
    let mut f = w
        .settle(
            &format!("provisioner failing or hanging on half of its calls, {jobs} jobs"),
            started,
            &planned,
            &BTreeSet::new(),
        )
        .await?;
    f.notes.push(
        "provisioner         about 50 % of calls exit 1 or hang after doing their work".into(),
    );
    Ok(f)
}

/// Destroys a machine behind the autoscaler's back, with the local provisioner itself.
pub fn destroy_at_provider(root: &Path, id: &str) -> Result<()> {
    let output = std::process::Command::new(repo_root().join("provisioners/local/provisioner"))
        .args(["destroy", id])
        .env("LOCAL_ROOT", root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            if let Some(mut stdin) = child.stdin.take() {
                std::io::Write::write_all(
                    &mut stdin,
                    format!(r#"{{"protocol":1,"pool":"chaos","id":"{id}"}}"#).as_bytes(),
                )?;
            }
            child.wait_with_output()
        })?;
    if !output.status.success() {
        bail!(
            "destroying {id} failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    Ok(())
}

/// Kills (SIGKILL) the sidecar process running on a local machine, leaving the machine up.
fn kill_sidecar_of(root: &Path, id: &str) -> Result<()> {
    let pid_file = root.join(id).join("home/autoscaler-sidecar/sidecar.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?
        .trim()
        .parse()?;
    // The recorded pid is the `sh` that execs the sidecar: the same process.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL)?;
    Ok(())
}
