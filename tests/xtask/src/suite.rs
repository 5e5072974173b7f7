//! The commands `cargo xtask test` runs after the build: the workspace's test binaries (as
//! cargo builds them), the cloud tests, the API fuzz run and the chaos scenarios, handed to
//! [`crate::parallel`] to run side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::parallel::Job;

/// Commands that run with nothing beside them, because what they check holds only on a host
/// that is not busy with other tests:
/// - the simulator's checks (a bursty workload, overlapping pipelines) replay the boot times
///   this host's machines took and compare the waits: on a busy host the local provisioner
///   and the injections slow down together, which the replayed times do not carry;
/// - the flaky-provisioner scenario gives each provisioner call 4 s, and makes half of them
///   fail on purpose: on a busy host the provisioner's own work (bash and jq) takes longer, so
///   that nearly every call fails, and its `list` cannot find the orphans it must clean up
///   before the scenario's deadline.
const ALONE: &[&str] = &[
    "e2e/test:simulator",
    "e2e/test:simulator_pipelines",
    "chaos:provisioner",
];

/// Test binaries that are not end-to-end tests but take minutes all the same, started ahead
/// of those: the autoscaler's unit tests (one property test plans four hours of demand, a pass
/// a second, for each of its cases: 220 s alone, 250 to 500 s beside two other commands) and
/// the book's checks (100 to 125 s). Started after the end-to-end tests, they ran on alone at the
/// end of the suite for about two minutes while the other slots stood empty.
const LONG_BINARIES: &[&str] = &["autoscaler/lib:autoscaler", "docs/test:book"];

/// Lists the test binaries (`cargo test --no-run`, which finds them built) and the suite's
/// commands, the long ones first (the chaos scenarios and the Python suites, then
/// `LONG_BINARIES`, then the end-to-end tests), so that a first run, with no times kept from
/// an earlier one, does not start its longest last. The cargo commands carry `lint_env`, under
/// which the workspace was built (`crate::lints`).
pub fn jobs(root: &Path, filters: &[String], lint_env: &[(String, String)]) -> Result<Vec<Job>> {
    let mut jobs = chaos_scenarios(root);
    // The cloud provisioners against their emulators and recording stubs (pytest in a venv).
    jobs.push(script(root, "cloud", "tests/cloud/run"));
    // schemathesis against a live autoscaler, held to api-spec/ (in a venv).
    jobs.push(script(root, "api-fuzz", "tests/api-fuzz/run"));
    let mut binaries = test_binaries(root, filters, lint_env)?;
    // The long ones among the binaries: the few named in `LONG_BINARIES`, then the end-to-end
    // tests. (A stable sort: each group keeps cargo's order.)
    binaries.sort_by_key(|job| {
        if LONG_BINARIES.contains(&job.name.as_str()) {
            0
        } else if job.name.starts_with("e2e/") {
            1
        } else {
            2
        }
    });
    jobs.extend(binaries);
    jobs.push(Job {
        name: "doc-tests".into(),
        program: "cargo".into(),
        args: ["test", "--workspace", "--doc"]
            .into_iter()
            .chain(filters.iter().map(String::as_str))
            .map(String::from)
            .collect(),
        cwd: root.to_path_buf(),
        envs: lint_env.to_vec(),
        alone: false,
    });
    Ok(jobs)
}

/// Each chaos scenario as its own process of the debug build's `chaos` binary; the crash
/// scenario's two rounds (two seeds, GitLab's default then two-phase commit, as `cargo xtask
/// chaos` runs them) as two.
fn chaos_scenarios(root: &Path) -> Vec<Job> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let crash = |round: u64| {
        let seed = (seed + round).to_string();
        let gitlab = if round % 2 == 1 {
            "two-phase"
        } else {
            "legacy"
        };
        (
            format!("chaos:crash-{round}"),
            vec![
                "crash",
                "--crash-rounds",
                "1",
                "--seed",
                &seed,
                "--gitlab",
                gitlab,
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>(),
        )
    };
    let mut runs = vec![crash(0), crash(1)];
    for scenario in ["outage", "provisioner", "machines"] {
        runs.push((format!("chaos:{scenario}"), vec![scenario.to_string()]));
    }
    runs.into_iter()
        .map(|(name, args)| Job {
            alone: ALONE.contains(&name.as_str()),
            name,
            program: root.join("target/debug/chaos"),
            args,
            cwd: root.to_path_buf(),
            envs: vec![],
        })
        .collect()
}

fn script(root: &Path, name: &str, path: &str) -> Job {
    Job {
        name: name.into(),
        program: "bash".into(),
        args: vec![path.into()],
        cwd: root.to_path_buf(),
        envs: vec![],
        alone: false,
    }
}

/// Builds every test target of the workspace (if not built yet) and returns one command per
/// binary, run as cargo runs it: from its package's directory, with `CARGO_MANIFEST_DIR` set.
fn test_binaries(
    root: &Path,
    filters: &[String],
    lint_env: &[(String, String)],
) -> Result<Vec<Job>> {
    eprintln!("+ cargo test --workspace --no-run --message-format=json-render-diagnostics");
    let output = Command::new("cargo")
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .envs(lint_env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test --no-run")?;
    if !output.status.success() {
        // A linker that dies with a bus error is most often a full disk: say how full it is.
        bail!(
            "`cargo test --no-run` failed ({}); {}",
            output.status,
            free_disk(root)
        );
    }
    let mut jobs = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(job) = test_binary(line, filters) {
            jobs.push(job);
        }
    }
    if jobs.is_empty() {
        bail!("`cargo test --no-run` listed no test binary");
    }
    Ok(jobs)
}

/// The free space where the build writes, as `df` reports it, for error messages.
fn free_disk(root: &Path) -> String {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let free_kib = Command::new("df")
        .args(["-Pk"])
        .arg(&target)
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.lines()
                .nth(1)?
                .split_whitespace()
                .nth(3)?
                .parse::<u64>()
                .ok()
        });
    match free_kib {
        Some(kib) => format!(
            "{:.1} GiB free under {} (a clean test build takes about 4 GiB)",
            kib as f64 / 1024.0 / 1024.0,
            target.display()
        ),
        None => format!("the free space under {} is unknown", target.display()),
    }
}

/// The command for one of cargo's JSON messages, if it is a built test binary.
fn test_binary(line: &str, filters: &[String]) -> Option<Job> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = PathBuf::from(message["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let package = package_dir.file_name()?.to_string_lossy().into_owned();
    let kind = message["target"]["kind"][0].as_str()?;
    let target = message["target"]["name"].as_str()?;
    let name = format!("{package}/{kind}:{target}");
    Some(Job {
        alone: ALONE.contains(&name.as_str()),
        name,
        program: executable,
        args: filters.to_vec(),
        envs: vec![(
            "CARGO_MANIFEST_DIR".into(),
            package_dir.to_string_lossy().into_owned(),
        )],
        cwd: package_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_binary_runs_from_its_package_directory() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests/e2e#0.1.0","manifest_path":"/w/tests/e2e/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"relay","src_path":"/w/tests/e2e/tests/relay.rs"},"profile":{"test":true},"executable":"/w/target/debug/deps/relay-0a1b","fresh":true}"#;
        let job = test_binary(line, &["some_filter".into()]).expect("a test binary");
        assert_eq!(job.name, "e2e/test:relay");
        assert_eq!(
            job.program,
            PathBuf::from("/w/target/debug/deps/relay-0a1b")
        );
        assert_eq!(job.cwd, PathBuf::from("/w/tests/e2e"));
        assert_eq!(job.args, ["some_filter"]);
    }

    #[test]
    fn libraries_and_build_scripts_are_not_test_binaries() {
        let lib = r#"{"reason":"compiler-artifact","manifest_path":"/w/a/Cargo.toml","target":{"kind":["lib"],"name":"a"},"profile":{"test":false},"executable":null}"#;
        assert!(test_binary(lib, &[]).is_none());
        assert!(test_binary(r#"{"reason":"build-finished","success":true}"#, &[]).is_none());
    }
}
