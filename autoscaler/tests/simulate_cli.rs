#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
//! `autoscaler simulate` as a user runs it: JSON on stdout, and exit 64 for a bad file.

use std::process::Command;

fn autoscaler(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_autoscaler"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap()
}

#[test]
fn a_shipped_workload_prints_a_json_report() {
    let out = autoscaler(&[
        "simulate",
        "deploy/simulate/workloads/burst.toml",
        "--policy",
        "deploy/simulate/policies/demand.toml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
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
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
