#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
//! `autoscaler simulate` as a user runs it: JSON on stdout, and exit 64 for a bad file; with
//! `--target-waits`, as an operator runs it to choose a target: one run per target, each the run
//! the policy file with that target would give.

use std::process::Command;

fn autoscaler(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_autoscaler"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap()
}

/// A run's JSON report, once it has exited 0.
fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What a refused run printed on stderr, once it has exited with `code`.
fn refused(out: &std::process::Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

#[test]
fn a_shipped_workload_prints_a_json_report() {
    let out = autoscaler(&[
        "simulate",
        "deploy/simulate/workloads/burst.toml",
        "--policy",
        "deploy/simulate/policies/demand.toml",
    ]);
    let report = json(&out);
    for key in [
        "wait_seconds",
        "machine_minutes",
        "machines_created",
        "peak_machines",
        "acquire_timeouts",
        "cost",
    ] {
        assert!(report.get(key).is_some(), "{key} missing: {report}");
    }
    assert!(report["jobs"].as_u64().unwrap() >= 500);
}

#[test]
fn a_malformed_file_exits_64_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[pools]]\n[pools.scaling]\nmax_machines = \"many\"\n",
    )
    .unwrap();
    let out = autoscaler(&[
        "simulate",
        "deploy/simulate/workloads/burst.toml",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    let stderr = refused(&out, 64);
    assert!(
        stderr.contains("policy.toml: line 3: pools[0].scaling.max_machines"),
        "{stderr}"
    );
    assert!(stderr.contains("provisioner: is required"), "{stderr}");
}

#[test]
fn a_bad_replay_line_exits_64_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("day.tsv");
    std::fs::write(
        &replay,
        "ready\tduration\tproject\tpipeline\tstage\tname\tclass\n\
         2026-11-23T08:00:00Z\t4m\tweb\t7\tbuild\tcompile\tdefault\n\
         2026-11-23T08:04:00Z\tsoon\tweb\t7\ttest\trspec\tdefault\n",
    )
    .unwrap();
    let out = autoscaler(&[
        "simulate",
        replay.to_str().unwrap(),
        "--policy",
        "deploy/simulate/policies/demand.toml",
    ]);
    let stderr = refused(&out, 64);
    assert!(
        stderr.contains("day.tsv: line 3: duration: \"soon\" is not a duration"),
        "{stderr}"
    );
}

#[test]
fn the_oracle_needs_no_policy_and_reports_its_overhead() {
    let out = autoscaler(&[
        "simulate",
        "deploy/simulate/workloads/fanout.toml",
        "--oracle",
        "--boot-time",
        "90s",
    ]);
    let report = json(&out);
    assert_eq!(report["boot_seconds"].as_f64(), Some(90.0));
    assert!(report["machines_made"].as_u64().unwrap() > 0, "{report}");
    let overhead = report["overhead_minutes"].as_f64().unwrap();
    let minutes = &report["machine_minutes"];
    let parts = minutes["booting"].as_f64().unwrap() + minutes["idle"].as_f64().unwrap();
    assert!((overhead - parts).abs() < 0.2, "{report}");
    // A policy and the oracle are two different runs.
    let both = autoscaler(&[
        "simulate",
        "deploy/simulate/workloads/fanout.toml",
        "--oracle",
        "--policy",
        "deploy/simulate/policies/demand.toml",
    ]);
    assert_eq!(both.status.code(), Some(2));
}

const WORKLOAD: &str = "deploy/simulate/workloads/projects.toml";
const POLICY: &str = "deploy/simulate/policies/demand.toml";

/// `simulate WORKLOAD --policy POLICY --target-waits TARGETS`, its report.
fn sweep(targets: &str) -> serde_json::Value {
    json(&autoscaler(&[
        "simulate",
        WORKLOAD,
        "--policy",
        POLICY,
        "--target-waits",
        targets,
    ]))
}

#[test]
fn each_target_gives_the_run_its_policy_file_would() {
    let sweep = sweep("20s,45s,90s");
    let runs = sweep["runs"].as_array().unwrap();
    let targets: Vec<f64> = runs
        .iter()
        .map(|r| r["target_wait_seconds"].as_f64().unwrap())
        .collect();
    assert_eq!(targets, [20.0, 45.0, 90.0]);
    // The 45 s run is the run of the same policy with `target_wait = "45s"` written in it.
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("demand-45s.toml");
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(POLICY);
    let policy = std::fs::read_to_string(shipped).unwrap().replace(
        "[pools.scaling]\n",
        "[pools.scaling]\ntarget_wait = \"45s\"\n",
    );
    std::fs::write(&written, policy).unwrap();
    let single = json(&autoscaler(&[
        "simulate",
        WORKLOAD,
        "--policy",
        written.to_str().unwrap(),
    ]));
    let swept = &runs[1]["report"];
    for figure in [
        "wait_seconds",
        "machine_minutes",
        "machines_created",
        "cost",
    ] {
        assert_eq!(swept[figure], single[figure], "{figure}");
    }
    let minutes = &single["machine_minutes"];
    let overhead = minutes["idle"].as_f64().unwrap() + minutes["booting"].as_f64().unwrap();
    assert!((runs[1]["overhead_minutes"].as_f64().unwrap() - overhead).abs() < 0.11);
    assert_eq!(runs[1]["p95_wait_seconds"], single["wait_seconds"]["p95"]);
}

#[test]
fn every_run_off_the_frontier_is_beaten_by_one_on_it() {
    let sweep = sweep("10s,30s,30s,60s,120s");
    // The shipped policy prices its machines, so runs are judged by their cost.
    assert_eq!(sweep["frontier_by"], "cost");
    let runs = sweep["runs"].as_array().unwrap();
    let figures = |r: &serde_json::Value| {
        (
            r["cost"].as_f64().unwrap(),
            r["p95_wait_seconds"].as_f64().unwrap(),
        )
    };
    let on: Vec<_> = runs.iter().filter(|r| r["on_frontier"] == true).collect();
    assert!(!on.is_empty());
    // The same target twice gives the same run, on or off the frontier together.
    assert_eq!(runs[1]["report"], runs[2]["report"]);
    assert_eq!(runs[1]["on_frontier"], runs[2]["on_frontier"]);
    for run in runs.iter().filter(|r| r["on_frontier"] == false) {
        let (cost, p95) = figures(run);
        assert!(
            on.iter().any(|o| {
                let (c, w) = figures(o);
                c <= cost && w <= p95 && (c < cost || w < p95)
            }),
            "{run}"
        );
    }
    // And none on it is so beaten.
    for run in &on {
        let (cost, p95) = figures(run);
        assert!(runs.iter().all(|o| {
            let (c, w) = figures(o);
            !(c <= cost && w <= p95 && (c < cost || w < p95))
        }));
    }
}

#[test]
fn a_policy_without_a_demand_aware_pool_is_refused() {
    let out = autoscaler(&[
        "simulate",
        WORKLOAD,
        "--policy",
        "deploy/simulate/policies/projects-taskscaler.toml",
        "--target-waits",
        "30s",
    ]);
    let stderr = refused(&out, 64);
    assert!(
        stderr.contains("projects-taskscaler.toml: target_wait: no pool is demand-aware"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_target_over_an_hour_or_not_a_duration_is_a_usage_error() {
    for (list, says) in [
        ("30s,2h", "a target_wait must be at most 1h"),
        ("soon", "\"soon\""),
    ] {
        let out = autoscaler(&[
            "simulate",
            WORKLOAD,
            "--policy",
            POLICY,
            "--target-waits",
            list,
        ]);
        let stderr = refused(&out, 2);
        assert!(stderr.contains(says), "{list}: {stderr}");
    }
    let with_oracle = autoscaler(&["simulate", WORKLOAD, "--oracle", "--target-waits", "30s"]);
    assert_eq!(with_oracle.status.code(), Some(2));
}
