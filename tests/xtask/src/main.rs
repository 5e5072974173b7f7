//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `test`: a check that no file points outside the repository, formatting, a build of every
//!   binary and test linted as it is built (`lints`), the check of `deploy/` (`deploy/check`),
//!   then every test binary, the cloud
//!   tests (`tests/cloud/run`), the API fuzz run (`tests/api-fuzz/run`) and each chaos scenario,
//!   side by side (`XTASK_TEST_JOBS` at a time; with cargo-nextest installed, one after the
//!   other through nextest), then a check that no process of a local machine outlived them (the
//!   command CI runs);
//! - `demo`: a release build, then the demo (fake GitLab, autoscaler, sidecars, jobs, summary);
//! - `chaos`: the chaos suite alone (kill -9, GitLab outage, dying machines, flaky provisioner);
//! - `bench`: a release build, then the benchmarks, written to `BENCHMARKS.md`;
//! - `docs`: the book under `docs/`, built with mdBook (installed into `target/tools/`) into
//!   `target/book/`;
//! - `references`: the check that no file points outside the repository, alone;
//! - `simulate`: every shipped workload under the demand-aware policy and the taskscaler
//!   baseline, side by side, with the target checked (`--write`: into the book's
//!   `docs/src/design/comparisons.md`; `--sweep`: the baselines over a grid of their settings).
//!
//! Each task installs what it needs and says what it runs, so a fresh machine needs only cargo.

mod docs;
mod leftovers;
mod lints;
mod parallel;
mod references;
mod simulate;
mod suite;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let rest: Vec<String> = std::env::args().skip(2).collect();
    let result = match task.as_str() {
        "test" => test(&rest),
        "demo" => demo(&rest),
        "chaos" => chaos(&rest),
        "bench" => bench(&rest),
        "docs" => workspace_root().and_then(|root| docs::build(&root)),
        "references" => workspace_root().and_then(|root| references::check(&root)),
        // Optimised: the simulator passes every second of a simulated week, per policy.
        "simulate" => run(
            "cargo",
            &[
                "build",
                "--release",
                "-p",
                "autoscaler",
                "--bin",
                "autoscaler",
            ],
        )
        .and_then(|()| workspace_root())
        .and_then(|root| simulate::simulate(&root, &rest)),
        _ => {
            eprintln!(
                "usage: cargo xtask <test|demo|chaos|bench|docs|references|simulate> [args]\n  test   run formatting, lints, every test and the chaos suite\n  demo   run the demo\n  chaos  run the chaos suite alone ([SCENARIO...] [--seed N] [--gitlab legacy|two-phase])\n  bench  run the benchmarks and write BENCHMARKS.md ([FIGURE...] [--quick] [--no-write] [--pin-check])\n  docs   build the book into target/book/\n  references  check that no file points outside the repository\n  simulate  the workloads under both policies, side by side ([--write] [--sweep] [--frontier [--plot]] [--seeds N])"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command in the workspace root, echoing it first; fails on a non-zero exit.
fn run(program: &str, args: &[&str]) -> Result<()> {
    run_with(program, args, &[])
}

/// [`run`] with `envs` added to the environment.
fn run_with(program: &str, args: &[&str], envs: &[(String, String)]) -> Result<()> {
    eprintln!("+ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace_root()?)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn workspace_root() -> Result<std::path::PathBuf> {
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    Ok(manifest
        .parent()
        .and_then(|p| p.parent())
        .context("xtask is not inside the workspace")?
        .to_path_buf())
}

fn has_cargo_subcommand(name: &str) -> bool {
    Command::new("cargo")
        .args([name, "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Debian packages the tests and the demo use: `sshd` for the local provisioner's sandboxes,
/// `jq` for the bash provisioner, `ssh`/`ssh-keygen` for checks, `git` for the repositories the
/// independent python runner clones (`e2e/tests/independent.rs`), `strace` to show which
/// system calls make a job durable (`e2e/tests/durability.rs`), `chromium` for the status page
/// in a headless browser (`e2e/tests/status_page.rs`), with a font of its own (packages are
/// installed without their recommendations, which is where Chromium's fonts come from).
const SYSTEM_PACKAGES: &[(&str, &str)] = &[
    ("/usr/sbin/sshd", "openssh-server"),
    ("/usr/bin/ssh", "openssh-client"),
    ("/usr/bin/jq", "jq"),
    ("/usr/bin/git", "git"),
    ("/usr/bin/strace", "strace"),
    ("/usr/bin/chromium", "chromium"),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "fonts-liberation",
    ),
];

/// Debian's `python3` makes virtual environments only with `python3-venv` (its `ensurepip`).
fn python_venv_missing() -> bool {
    !Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs the missing system packages with apt-get (as root, or through sudo).
fn ensure_system_packages() -> Result<()> {
    let mut missing: Vec<&str> = SYSTEM_PACKAGES
        .iter()
        .filter(|(path, _)| !std::path::Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    if python_venv_missing() {
        missing.push("python3-venv");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let (program, prefix): (&str, Vec<&str>) = if is_root() {
        ("apt-get", vec![])
    } else {
        ("sudo", vec!["apt-get"])
    };
    let mut update = prefix.clone();
    update.extend(["update", "-qq"]);
    run(program, &update)?;
    let mut install = prefix;
    install.extend(["install", "-y", "-qq", "--no-install-recommends"]);
    install.extend(&missing);
    run(program, &install).context("installing system packages (needs root or sudo)")
}

/// The ordinary user the provisioner tests run as when the suite runs as root.
const TEST_USER: &str = "autoscaler-test";

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// As root, makes sure the unprivileged test user exists (the provisioners must work for both).
fn ensure_test_user() -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    let exists = Command::new("id")
        .arg(TEST_USER)
        .output()
        .is_ok_and(|o| o.status.success());
    if exists {
        return Ok(());
    }
    run(
        "useradd",
        &["--create-home", "--shell", "/bin/bash", TEST_USER],
    )
}

fn test(extra: &[String]) -> Result<()> {
    ensure_system_packages()?;
    ensure_test_user()?;
    let root = workspace_root()?;
    references::check(&root)?;
    run("cargo", &["fmt", "--all", "--", "--check"])?;
    // Every binary (the end-to-end tests start them as processes) and every test, in one
    // build, with the features the tests need; clippy lints each crate of the workspace as it
    // is built, and any warning fails the build (`lints`).
    let lint_env = lints::Lints::find(&root)?.env();
    run_with(
        "cargo",
        &["build", "--workspace", "--bins", "--tests"],
        &lint_env,
    )?;
    // The unit, the user data and the sample configurations in deploy/, against the binary.
    run("bash", &["deploy/check"])?;
    // The book builds, and mdBook has nothing to warn about.
    docs::build_without_warnings(&root)?;
    let before = leftovers::before();
    if has_cargo_subcommand("nextest") {
        let mut args = vec!["nextest", "run", "--workspace", "--no-fail-fast"];
        args.extend(extra.iter().map(String::as_str));
        run_with("cargo", &args, &lint_env)?;
        run("bash", &["tests/cloud/run"])?;
        run("bash", &["tests/api-fuzz/run"])?;
        run_chaos(&[])?;
    } else {
        // Test binaries, chaos scenarios and the Python suites, side by side: most of them
        // wait on real processes and timers, so one at a time left the cores idle.
        let jobs = suite::jobs(&root, extra, &lint_env)?;
        parallel::run_all(jobs, suite_slots(), &root.join("target/xtask-suite"))?;
    }
    leftovers::check(&before)
}

/// How many of the suite's commands run at once: `XTASK_TEST_JOBS`, else one more than the
/// cores (the commands mostly wait, and the end-to-end binaries run two tests each).
fn suite_slots() -> usize {
    std::env::var("XTASK_TEST_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, std::num::NonZero::get) + 1
        })
}

fn chaos(extra: &[String]) -> Result<()> {
    ensure_system_packages()?;
    run("cargo", &["build", "--workspace", "--bins"])?;
    run_chaos(extra)
}

/// The chaos suite, from the debug build (the end-to-end tests' binaries).
fn run_chaos(extra: &[String]) -> Result<()> {
    run_built("debug", "chaos", extra)
}

fn bench(extra: &[String]) -> Result<()> {
    run("cargo", &["build", "--release", "--workspace", "--bins"])?;
    run_built("release", "bench", extra)
}

fn demo(extra: &[String]) -> Result<()> {
    ensure_system_packages()?;
    run("cargo", &["build", "--release", "--workspace", "--bins"])?;
    run_built("release", "demo", extra)
}

/// Runs `target/<profile>/<name>` (already built) with `extra` arguments.
fn run_built(profile: &str, name: &str, extra: &[String]) -> Result<()> {
    let binary = workspace_root()?.join("target").join(profile).join(name);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    run(binary.to_str().context("non-UTF-8 path")?, &extra)
}
