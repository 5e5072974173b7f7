//! The simulator: deterministic, and precise about bad input.

use std::path::{Path, PathBuf};

use super::{SimulateError, simulate};

fn shipped(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/simulate")
        .join(rel)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const WORKLOAD: &str = "start = \"2026-11-23T08:00:00Z\"\nlength = \"2h\"\n\
    [[arrivals]]\nfrom = \"0h\"\nto = \"1h\"\njobs_per_hour = 120\nbatch = 2\nduration = [\"1m\", \"5m\"]\n";

const POLICY: &str = "[[pools]]\nname = \"default\"\n[pools.scaling]\nmax_machines = 40\n\
    capacity_per_machine = 2\n[pools.provisioner]\nboot_time = [\"30s\", \"90s\"]\nprice_per_hour = 0.5\n\
    billing_period = \"1h\"\n";

#[test]
fn the_same_files_give_the_same_report() {
    let (w, p) = (
        shipped("workloads/weekday.toml"),
        shipped("policies/demand.toml"),
    );
    let a = serde_json::to_string(&simulate(&w, &p).unwrap()).unwrap();
    let b = serde_json::to_string(&simulate(&w, &p).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn the_report_accounts_for_every_job_and_the_billed_cost() {
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "w.toml", WORKLOAD);
    let p = write(dir.path(), "p.toml", POLICY);
    let r = simulate(&w, &p).unwrap();
    let pool = &r.pools["default"];
    assert!(r.total.jobs > 80 && r.total.jobs == pool.jobs, "{r:?}");
    assert_eq!(r.total.acquire_timeouts, 0);
    assert!(r.total.machine_minutes.idle < r.total.machine_minutes.total);
    assert!(r.total.peak_machines <= 40);
    // Billed by the started hour: at least a whole hour per machine made.
    let made = f64::from(r.total.machines_created + r.total.machines_failed);
    assert!(r.total.cost.unwrap() >= made * 0.5 - 1e-9, "{r:?}");
    assert!(r.total.wait_seconds.p50 <= r.total.wait_seconds.p95);
}

/// Every problem of a file at once, each with the file, its line and its key path.
#[test]
fn bad_policy_files_name_the_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "w.toml", WORKLOAD);
    let p = write(
        dir.path(),
        "bad.toml",
        "[[pools]]\nname = \"default\"\n[pools.scaling]\nidle_count = 5\nscale_factor_limit = 2\n\
         [[pools.policy]]\nperiods = [\"* 25 * * *\"]\ntimezone = \"Mars/Olympus\"\n\
         [pools.provisioner]\nboot_time = \"30s\"\nfailure_rate = 2\ncolour = \"red\"\n",
    );
    let err = simulate(&w, &p).unwrap_err();
    let SimulateError::Invalid { file, problems } = &err else {
        panic!("{err}");
    };
    assert_eq!(file, &p);
    let expect = [
        "line 5: pools[0].scaling.scale_factor_limit: ",
        "line 7: pools[0].policy[0].periods[0]: ",
        "line 8: pools[0].policy[0].timezone: ",
        "line 11: pools[0].provisioner.failure_rate: ",
        "line 12: pools[0].provisioner.colour: unknown key",
    ];
    for e in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "{e:?} not in {problems:#?}"
        );
    }
    assert!(
        err.to_string()
            .starts_with(&format!("{}: line", p.display()))
    );
}

#[test]
fn bad_workload_files_name_the_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.toml", POLICY);
    let w = write(
        dir.path(),
        "w.toml",
        "start = \"monday\"\nlength = \"2h\"\n[[arrivals]]\nfrom = \"1h\"\nto = \"30m\"\njobs = 3\n\
         duration = \"1m\"\n[[arrivals]]\nto = \"1h\"\njobs = 3\nduration = [\"5m\", \"1m\"]\n",
    );
    let problems = match simulate(&w, &p).unwrap_err() {
        SimulateError::Invalid { problems, .. } => problems,
        other => panic!("{other}"),
    };
    for e in [
        "line 1: start: ",
        "line 5: arrivals[0].to: must be after from",
        "line 11: arrivals[1].duration: ",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "{e:?} not in {problems:#?}"
        );
    }
    // A class the policy has no pool for.
    let w = write(
        dir.path(),
        "c.toml",
        &WORKLOAD.replace("[[arrivals]]\n", "[[arrivals]]\nclass = \"gpu\"\n"),
    );
    let err = simulate(&w, &p).unwrap_err().to_string();
    assert!(
        err.contains("line 4: arrivals[0].class: \"gpu\" has no [[pools]] entry"),
        "{err}"
    );
    // Not TOML at all: the parser's line.
    let w = write(dir.path(), "t.toml", "start = \n");
    let err = simulate(&w, &p).unwrap_err().to_string();
    assert!(err.contains("t.toml") && err.contains("line 1"), "{err}");
}

/// Measured boot times are replayed in order: one job on an empty pool waits exactly the first.
#[test]
fn boot_times_are_replayed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let w = write(
        dir.path(),
        "one.toml",
        "start = \"2026-11-23T08:00:00Z\"\nlength = \"1m\"\n\
         [[arrivals]]\nfrom = \"0s\"\nto = \"1s\"\njobs = 1\nduration = \"5s\"\n",
    );
    let policy = "[[pools]]\nname = \"default\"\n[pools.scaling]\nmax_machines = 1\n\
                  [pools.provisioner]\nboot_times = [\"7250ms\", \"1s\"]\n";
    let p = write(dir.path(), "p.toml", policy);
    let r = simulate(&w, &p).unwrap();
    assert_eq!(r.total.wait_seconds.max, 7.3, "{r:?}");
    let both = write(
        dir.path(),
        "both.toml",
        &policy.replace("boot_times", "boot_time = \"1s\"\nboot_times"),
    );
    let err = simulate(&w, &both).unwrap_err().to_string();
    assert!(err.contains("give either boot_time or boot_times"), "{err}");
}
