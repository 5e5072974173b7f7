//! Runs the suite's commands side by side: every test binary, each chaos scenario, the cloud
//! tests and the API fuzz run, a few at a time.
//!
//! Most of the suite waits (on real processes, on timers a scenario must outlast, on a GitLab
//! outage of 60 s), so on two cores one command after another left the machine idle for most
//! of half an hour. cargo-nextest would run the test binaries concurrently, but it is not on
//! every machine and building it costs minutes on each clean CI clone; the chaos scenarios and
//! the Python suites are not Rust tests anyway. Each command's output (its children's
//! included) goes to its own file and is printed whole when the command ends, so the log reads
//! as if they had run one by one.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One command of the suite.
#[derive(Debug, Clone)]
pub struct Job {
    /// What the log and the summary call it, e.g. `e2e/test:relay`.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub envs: Vec<(String, String)>,
    /// Runs with nothing beside it: it measures this host's timings against a model.
    pub alone: bool,
}

/// How a command ended.
#[derive(Debug)]
struct Outcome {
    name: String,
    elapsed: Duration,
    failure: Option<String>,
}

/// A command still running past this is stuck: it is killed and reported, so that a hang
/// shows up in the log with its output rather than as a CI run that never ends. The longest
/// command takes under three minutes on two cores.
const STUCK_AFTER: Duration = Duration::from_secs(15 * 60);

/// Runs `jobs`, `slots` at a time, longest first as far as the last run's times (kept in
/// `log_dir`) tell; fails if any failed, after all have run.
pub fn run_all(jobs: Vec<Job>, slots: usize, log_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let times_file = log_dir.join("durations.tsv");
    let (alone, shared): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.alone);
    let started = Instant::now();
    eprintln!(
        "xtask: {} commands, {} of them alone first, then {slots} at a time",
        alone.len() + shared.len(),
        alone.len()
    );
    let mut outcomes: Vec<Outcome> = alone.iter().map(|job| run_one(job, log_dir)).collect();
    let queue = Mutex::new(longest_first(shared, &read_times(&times_file)));
    let shared_outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..slots.max(1) {
            scope.spawn(|| {
                while let Some(job) = queue.lock().ok().and_then(|mut q| q.pop_front()) {
                    let outcome = run_one(&job, log_dir);
                    if let Ok(mut all) = shared_outcomes.lock() {
                        all.push(outcome);
                    }
                }
            });
        }
    });
    outcomes.extend(shared_outcomes.into_inner().unwrap_or_default());
    write_times(&times_file, &outcomes);
    summarise(&outcomes, started.elapsed())
}

/// Known times first, longest first; commands never timed keep their given order, ahead of
/// the ones known to be quick.
fn longest_first(jobs: Vec<Job>, times: &BTreeMap<String, f64>) -> VecDeque<Job> {
    let mut jobs = jobs;
    // A stable sort: unknown commands count as long, in the order they were given.
    jobs.sort_by(|a, b| {
        let ta = times.get(&a.name).copied().unwrap_or(f64::MAX);
        let tb = times.get(&b.name).copied().unwrap_or(f64::MAX);
        tb.total_cmp(&ta)
    });
    jobs.into()
}

fn run_one(job: &Job, log_dir: &Path) -> Outcome {
    let log_path = log_dir.join(format!("{}.log", job.name.replace(['/', ':'], "-")));
    let started = Instant::now();
    eprintln!("xtask: started {}", job.name);
    let failure = match spawn_and_wait(job, &log_path) {
        Ok(None) => None,
        Ok(Some(why)) => Some(why),
        Err(e) => Some(format!("{e:#}")),
    };
    let elapsed = started.elapsed();
    print_log(job, &log_path, elapsed, failure.as_deref());
    Outcome {
        name: job.name.clone(),
        elapsed,
        failure,
    }
}

/// Runs the command with its output in `log_path`; `Some(reason)` when it failed.
fn spawn_and_wait(job: &Job, log_path: &Path) -> Result<Option<String>> {
    let log =
        File::create(log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new(&job.program)
        .args(&job.args)
        .current_dir(&job.cwd)
        .envs(job.envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot run {}", job.program.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((!status.success()).then(|| format!("exited with {status}")));
        }
        if started.elapsed() > STUCK_AFTER {
            // Best effort: the report below is what matters.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Some(format!(
                "still running after {} s: killed",
                STUCK_AFTER.as_secs()
            )));
        }
        // A supervisor's poll, not a test's wait: it only bounds how late an end is noticed.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Prints the command's whole output between two rules, under one lock so that outputs of
/// commands ending together do not interleave.
fn print_log(job: &Job, log_path: &Path, elapsed: Duration, failure: Option<&str>) {
    static PRINTING: Mutex<()> = Mutex::new(());
    let mut text = Vec::new();
    let _ = File::open(log_path).and_then(|mut f| f.read_to_end(&mut text));
    let verdict = failure.map_or_else(|| "ok".to_string(), |why| format!("FAILED: {why}"));
    let _guard = PRINTING.lock();
    eprintln!(
        "──── {} ({} {}) ────",
        job.name,
        job.program.display(),
        job.args.join(" ")
    );
    eprint!("{}", String::from_utf8_lossy(&text));
    eprintln!(
        "──── {}: {verdict} in {:.1} s ────\n",
        job.name,
        elapsed.as_secs_f64()
    );
}

fn summarise(outcomes: &[Outcome], wall: Duration) -> Result<()> {
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| std::cmp::Reverse(o.elapsed));
    let total: f64 = outcomes.iter().map(|o| o.elapsed.as_secs_f64()).sum();
    eprintln!(
        "xtask: {} commands took {total:.0} s of run time in {:.0} s; the slowest:",
        outcomes.len(),
        wall.as_secs_f64()
    );
    for o in sorted.iter().take(10) {
        eprintln!("  {:>6.1} s  {}", o.elapsed.as_secs_f64(), o.name);
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.failure.as_ref().map(|why| format!("{} ({why})", o.name)))
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    bail!("{} failed: {}", failed.len(), failed.join(", "))
}

fn read_times(path: &Path) -> BTreeMap<String, f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (name, secs) = line.split_once('\t')?;
            Some((name.to_string(), secs.parse().ok()?))
        })
        .collect()
}

fn write_times(path: &Path, outcomes: &[Outcome]) {
    let mut times = read_times(path);
    for o in outcomes {
        times.insert(o.name.clone(), o.elapsed.as_secs_f64());
    }
    let text: String = times
        .iter()
        .map(|(name, secs)| format!("{name}\t{secs:.1}\n"))
        .collect();
    // Only an ordering hint for the next run: losing it costs nothing.
    let _ = std::fs::write(path, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> Job {
        Job {
            name: name.into(),
            program: "true".into(),
            args: vec![],
            cwd: ".".into(),
            envs: vec![],
            alone: false,
        }
    }

    #[test]
    fn known_long_commands_go_first_and_unknown_ones_before_quick_ones() {
        let times = BTreeMap::from([("quick".to_string(), 1.0), ("slow".to_string(), 90.0)]);
        let order: Vec<String> = longest_first(
            vec![job("quick"), job("new-a"), job("slow"), job("new-b")],
            &times,
        )
        .into_iter()
        .map(|j| j.name)
        .collect();
        assert_eq!(order, ["new-a", "new-b", "slow", "quick"]);
    }

    #[test]
    fn a_failing_command_fails_the_run_after_the_others_ran() {
        let dir = std::env::temp_dir().join(format!("xtask-parallel-{}", std::process::id()));
        let mut failing = job("fails");
        failing.program = "false".into();
        let mut alone = job("alone");
        alone.alone = true;
        let err = run_all(vec![job("a"), failing, alone, job("b")], 2, &dir)
            .expect_err("a failed command fails the run");
        assert!(err.to_string().contains("1 failed: fails"), "{err}");
        let times = read_times(&dir.join("durations.tsv"));
        assert_eq!(times.len(), 4, "every command was run and timed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
