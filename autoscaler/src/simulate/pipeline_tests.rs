//! Pipelines and replays: stages released in virtual time, `needs` releasing early, replays
//! read line by line, and the same seed giving the same report.

use std::path::{Path, PathBuf};

use super::engine::{self, PoolLoad};
use super::input::Input;
use super::load::Load;
use super::report::Start;
use super::{SimulateError, oracle, policy, replay, simulate};
use crate::core::Millis;

pub(super) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// One pipeline, created at the start: build (one 10-minute job), test (two 5-minute jobs),
/// deploy (`package` needs only `compile`; `publish` waits for the whole test stage).
const ONE_PIPELINE: &str = "start = \"2026-11-23T08:00:00Z\"\nlength = \"1m\"\n\
    [[pipelines]]\nproject = \"app\"\n\
    [[pipelines.windows]]\nfrom = \"0s\"\nto = \"1ms\"\npipelines = 1\n\
    [[pipelines.stages]]\nname = \"build\"\njobs = [\"compile\"]\nduration = \"10m\"\n\
    [[pipelines.stages]]\nname = \"test\"\njobs = 2\nduration = \"5m\"\n\
    [[pipelines.stages]]\nname = \"deploy\"\njobs = [\"package\", \"publish\"]\nduration = \"1m\"\n\
    needs = { package = [\"compile\"] }\n";

/// Boots take exactly a minute, one job a machine.
pub(super) const POLICY: &str = "[[pools]]\nname = \"default\"\n[pools.scaling]\nmax_machines = 10\n\
    [pools.provisioner]\nboot_times = [\"60s\"]\nprice_per_hour = 0.5\n";

pub(super) const MINUTE: Millis = 60_000;

/// The starts of `workload`'s jobs under [`POLICY`], by (pipeline index, job index).
fn starts(workload: &str) -> (Load, Vec<Start>) {
    starts_of(workload, "w.toml")
}

/// [`starts`] of a workload file named `name` (a `*.tsv` is a replay).
pub(super) fn starts_of(workload: &str, name: &str) -> (Load, Vec<Start>) {
    let dir = tempfile::tempdir().unwrap();
    let load = Load::read(&write(dir.path(), name, workload)).unwrap();
    let pools = policy::read(&Input::read(&write(dir.path(), "p.toml", POLICY)).unwrap()).unwrap();
    let own = PoolLoad {
        jobs: &load.jobs,
        pipelines: &load.pipelines,
    };
    let tally = engine::run(&pools[0], &own, load.start, load.start + load.length, 1);
    let starts = tally.starts.clone();
    (load, starts)
}

pub(super) fn start_of(starts: &[Start], job: usize) -> Start {
    *starts
        .iter()
        .find(|s| s.key == Some((0, job)))
        .unwrap_or_else(|| panic!("job {job} never started: {starts:?}"))
}

#[test]
fn a_stage_is_pending_when_the_previous_one_ends_and_needs_release_early() {
    let (load, starts) = starts(ONE_PIPELINE);
    let p = &load.pipelines[0];
    let names: Vec<&str> = p.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        ["compile", "test 1/2", "test 2/2", "package", "publish"]
    );
    assert_eq!(starts.len(), 5, "{starts:?}");
    let [compile, test1, test2, package, publish] = [0, 1, 2, 3, 4].map(|j| start_of(&starts, j));
    // The first job is pending at creation and waits one boot.
    assert_eq!(compile.arrived, load.start);
    assert_eq!(compile.at, load.start + MINUTE);
    // The test stage, and `package` (which needs only `compile`), when `compile` ends.
    let compiled = compile.at + 10 * MINUTE;
    for job in [test1, test2, package] {
        assert_eq!(job.arrived, compiled, "{job:?}");
    }
    // `publish` waits for the whole test stage, whenever its jobs got machines.
    let tested = test1.at.max(test2.at) + 5 * MINUTE;
    assert_eq!(publish.arrived, tested, "{starts:?}");
    assert!(publish.arrived > package.arrived);
}

#[test]
fn zero_wait_ready_times_follow_the_critical_path() {
    let (load, _) = starts(ONE_PIPELINE);
    let ready: Vec<Millis> = load.pipelines[0]
        .zero_wait_ready()
        .iter()
        .map(|t| (t - load.start) / MINUTE)
        .collect();
    assert_eq!(ready, [0, 10, 10, 10, 15]);
}

#[test]
fn pipelines_are_drawn_the_same_for_a_seed_and_differently_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let text = ONE_PIPELINE.replace("to = \"1ms\"\npipelines = 1", "to = \"8h\"\npipelines = 40");
    let text = text.replace("duration = \"5m\"", "duration = [\"2m\", \"9m\"]");
    let p = write(dir.path(), "p.toml", POLICY);
    let w = write(dir.path(), "w.toml", &text);
    let report = || serde_json::to_string(&simulate(&w, &p).unwrap()).unwrap();
    assert_eq!(report(), report());
    let a = Load::read(&w).unwrap().pipelines;
    let other = write(dir.path(), "o.toml", &format!("seed = 2\n{text}"));
    let b = Load::read(&other).unwrap().pipelines;
    assert_eq!(a.len(), 40);
    assert_ne!(a, b);
    assert!(
        a.windows(2)
            .all(|w| w[0].created <= w[1].created && w[0].id + 1 == w[1].id)
    );
}

#[test]
fn the_shipped_pipeline_workloads_give_the_same_report_twice() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/simulate");
    for (w, p) in [
        ("fanout", "fanout-taskscaler"),
        ("projects", "projects-taskscaler"),
    ] {
        let w = dir.join(format!("workloads/{w}.toml"));
        let p = dir.join(format!("policies/{p}.toml"));
        let a = serde_json::to_string(&simulate(&w, &p).unwrap()).unwrap();
        let b = serde_json::to_string(&simulate(&w, &p).unwrap()).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn bad_pipeline_shapes_name_the_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.toml", POLICY);
    let bad = ONE_PIPELINE
        .replace("[\"compile\"] }", "[\"publish\"], lint = [\"compile\"] }")
        .replace("jobs = 2", "jobs = 0");
    let w = write(dir.path(), "w.toml", &bad);
    let problems = match simulate(&w, &p).unwrap_err() {
        SimulateError::Invalid { problems, .. } => problems,
        other => panic!("{other}"),
    };
    for e in [
        "line 15: pipelines[0].stages[1].jobs: must be job names or a number of jobs",
        "line 21: pipelines[0].stages[2].needs: \"lint\" is not a job of this stage",
        "line 21: pipelines[0].stages[2].needs: \"publish\" is not a job of an earlier stage",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "{e:?} not in {problems:#?}"
        );
    }
}

pub(super) const REPLAY: &str = "# recorded on 2026-11-23\n\
    ready\tduration\tproject\tpipeline\tstage\tname\tclass\n\
    2026-11-23T08:05:00Z\t4m\tweb\t7\ttest\trspec 1/2\tdefault\n\
    \n\
    2026-11-23T08:00:00Z\t300\tweb\t7\tbuild\tcompile\tdefault\n\
    2026-11-23T08:05:00Z\t2m30s\tweb\t7\ttest\trspec 2/2\tdefault\n";

#[test]
fn a_replay_is_read_in_order_of_ready_time_with_its_labels() {
    let r = replay::parse(REPLAY).unwrap();
    let lines: Vec<usize> = r.jobs.iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, [5, 3, 6]);
    let (_, first) = &r.jobs[0];
    assert_eq!(first.runs_for, 5 * MINUTE);
    let label = first.label.as_ref().unwrap();
    assert_eq!(
        (label.project.as_str(), label.pipeline, label.stage.as_str()),
        ("web", 7, "build")
    );
    assert_eq!(r.end - r.start, 5 * MINUTE);
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "day.tsv", REPLAY);
    let report = simulate(&w, &write(dir.path(), "p.toml", POLICY)).unwrap();
    assert_eq!(report.total.jobs, 3);
}

#[test]
fn a_bad_replay_line_is_named_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.toml", POLICY);
    let text = format!(
        "{REPLAY}yesterday\t4m\tweb\t7\ttest\tx\tdefault\n\
         2026-11-23T08:05:00Z\tlong\tweb\t7\ttest\tx\tdefault\n\
         2026-11-23T08:05:00Z\t4m\tweb\tseven\ttest\tx\tdefault\n\
         2026-11-23T08:05:00Z\t4m\tweb\n"
    );
    let w = write(dir.path(), "bad.tsv", &text);
    let err = simulate(&w, &p).unwrap_err().to_string();
    for e in [
        "bad.tsv: line 7: ready: \"yesterday\" is not an RFC 3339 time",
        "bad.tsv: line 8: duration: \"long\" is not a duration",
        "bad.tsv: line 9: pipeline: \"seven\" is not a number",
        "bad.tsv: line 10: has 3 tab-separated fields, not 7",
    ] {
        assert!(err.contains(e), "{e:?} not in {err}");
    }
    // The header, and a class the policy has no pool for.
    let w = write(dir.path(), "h.tsv", &REPLAY.replace("\tclass\n", "\n"));
    let err = simulate(&w, &p).unwrap_err().to_string();
    assert!(err.contains("h.tsv: line 2: the header must be"), "{err}");
    let w = write(
        dir.path(),
        "c.tsv",
        &REPLAY.replace("compile\tdefault", "compile\tgpu"),
    );
    let err = simulate(&w, &p).unwrap_err().to_string();
    assert!(
        err.contains("c.tsv: line 5: class: \"gpu\" has no [[pools]] entry"),
        "{err}"
    );
}

/// Four jobs by hand, boots of a minute: A (0–5 min) and B (0–2 min) need two machines; C at
/// 3 min takes B's, idle a minute; D at 10 min finds both freed longer than a boot ago, so a
/// third machine is made for it. Overhead: three boots and one idle minute.
#[test]
fn the_oracle_reuses_a_machine_only_when_idling_is_cheaper_than_a_boot() {
    let job = |at: &str, runs: &str| {
        format!(
            "[[arrivals]]\nfrom = \"{at}\"\nto = \"{at} 1ms\"\njobs = 1\nduration = \"{runs}\"\n"
        )
    };
    let text = format!(
        "start = \"2026-11-23T08:00:00Z\"\nlength = \"1h\"\n{}{}{}{}",
        job("0m", "5m"),
        job("0m", "2m"),
        job("3m", "1m"),
        job("10m", "1m")
    );
    let dir = tempfile::tempdir().unwrap();
    let r = oracle(&write(dir.path(), "w.toml", &text), MINUTE_D).unwrap();
    assert_eq!(r.total.jobs, 4);
    assert_eq!(r.total.machines_made, 3);
    let m = &r.total.machine_minutes;
    assert_eq!((m.busy, m.booting, m.idle, m.total), (9.0, 3.0, 1.0, 13.0));
    assert_eq!(r.total.overhead_minutes, 4.0);
    assert_eq!(r.pools["default"], r.total);
}

/// The pipeline at its zero-wait pending times: compile's machine goes to a test job, two more
/// are made for the other test job and `package`; `publish` (at 15 min) takes a test job's
/// machine as it is freed, and `package`'s, freed at 11 min, is gone by then.
#[test]
fn the_oracle_sees_a_pipeline_at_its_zero_wait_pending_times() {
    let dir = tempfile::tempdir().unwrap();
    let r = oracle(&write(dir.path(), "w.toml", ONE_PIPELINE), MINUTE_D).unwrap();
    assert_eq!((r.total.jobs, r.total.machines_made), (5, 3));
    let m = &r.total.machine_minutes;
    assert_eq!((m.busy, m.booting, m.idle), (22.0, 3.0, 0.0));
}

const MINUTE_D: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn a_replay_wrong_throughout_names_twenty_lines_and_counts_the_rest() {
    let bad = "2026-11-23T08:00:00Z\t4m\tweb\t7\n".repeat(25);
    let problems = replay::parse(&format!("{}{bad}", REPLAY)).unwrap_err();
    assert_eq!(problems.len(), 21, "{problems:#?}");
    assert_eq!(problems[20], "and 5 more bad lines");
}

/// A lone build, then eight tests: twelve pipelines over ten hours, mostly far enough apart
/// that nothing is left of the one before.
const FANOUT: &str = "start = \"2026-11-23T08:00:00Z\"\nlength = \"10h\"\n\
    [[pipelines]]\nproject = \"mono\"\n\
    [[pipelines.windows]]\nfrom = \"0s\"\nto = \"10h\"\npipelines = 12\n\
    [[pipelines.stages]]\nname = \"build\"\njobs = [\"compile\"]\nduration = \"5m\"\n\
    [[pipelines.stages]]\nname = \"test\"\njobs = 8\nduration = \"6m\"\n";

/// [`POLICY`] with a target under a pass: foreseen jobs may not wait.
const STRICT: &str = "[[pools]]\nname = \"default\"\n[pools.scaling]\nmax_machines = 10\n\
    target_wait = \"1s\"\n[pools.provisioner]\nboot_times = [\"60s\"]\nprice_per_hour = 0.5\n";

/// The test jobs' waits under `policy`, pipeline by pipeline, with or without the pipeline
/// forecast.
fn test_stage_waits(policy: &str, pipelines: engine::Pipelines) -> Vec<Vec<Millis>> {
    let dir = tempfile::tempdir().unwrap();
    let load = Load::read(&write(dir.path(), "w.toml", FANOUT)).unwrap();
    let pools = policy::read(&Input::read(&write(dir.path(), "p.toml", policy)).unwrap()).unwrap();
    let own = PoolLoad {
        jobs: &load.jobs,
        pipelines: &load.pipelines,
    };
    let span = (load.start, load.start + load.length);
    let tally = engine::run_with(&pools[0], &own, span, 1, pipelines);
    let mut waits = vec![Vec::new(); load.pipelines.len()];
    for s in &tally.starts {
        let (pipeline, job) = s.key.unwrap();
        if job > 0 {
            waits[pipeline].push(s.at - s.arrived);
        }
    }
    waits
}

#[test]
fn the_pipeline_forecast_has_machines_ready_for_the_second_stage() {
    let without = test_stage_waits(STRICT, engine::Pipelines::Ignored);
    let with = test_stage_waits(STRICT, engine::Pipelines::Learned);
    assert!(with.iter().chain(&without).all(|w| w.len() == 8));
    let total = |w: &[Vec<Millis>]| w.iter().flatten().sum::<Millis>();
    // Without it, the tests of a pipeline on its own wait for boots (a minute).
    assert!(total(&without) >= 12 * 8 * MINUTE / 2, "{without:?}");
    // With it, once the first pipeline has shown the shape, machines are ready when the build
    // ends: a pass comes at least every tick, so a machine is asked for at most that late.
    assert!(
        with[1..].iter().flatten().all(|&w| w <= engine::TICK),
        "{with:?}"
    );
    assert!(
        total(&with) < total(&without) / 4,
        "{with:?} vs {without:?}"
    );
}

/// Under the default target (30 s) the machines for the next stage are asked for later, so
/// that its jobs wait up to the target (boots here are all alike: no spread), not longer; a
/// pass comes at least every tick, so a machine is asked for at most that late.
#[test]
fn under_a_target_the_next_stage_waits_no_longer_than_it() {
    let with = test_stage_waits(POLICY, engine::Pipelines::Learned);
    let waits: Vec<Millis> = with[1..].iter().flatten().copied().collect();
    assert!(
        waits.iter().all(|&w| w <= 30_000 + engine::TICK),
        "{with:?}"
    );
    assert!(waits.iter().any(|&w| w > engine::TICK), "{with:?}");
}
