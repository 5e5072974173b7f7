//! Replays run as the pipelines they recorded: later stages pending once the jobs they waited
//! for ended in the run, never before their recorded time, and failed jobs told to the
//! pipeline forecast.

use super::pipeline_tests::{MINUTE, POLICY, REPLAY, start_of, starts_of, write};
use super::simulate;

/// A recorded test stage is pending once the build it waited for has ended in the run: the
/// build waits a boot here, so its tests come a minute after their recorded time (08:05), as
/// GitLab would release them, and one takes the build's machine at once.
#[test]
fn a_replayed_stage_is_pending_when_the_stage_before_it_ends_in_the_run() {
    let (load, starts) = starts_of(REPLAY, "day.tsv");
    let p = &load.pipelines[0];
    let names: Vec<&str> = p.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["compile", "rspec 1/2", "rspec 2/2"]);
    assert_eq!(
        (p.jobs[1].after.as_slice(), p.jobs[2].after.as_slice()),
        (&[0][..], &[0][..])
    );
    let [compile, test1, test2] = [0, 1, 2].map(|j| start_of(&starts, j));
    assert_eq!(
        (compile.arrived, compile.at),
        (load.start, load.start + MINUTE)
    );
    let built = compile.at + 5 * MINUTE;
    assert_eq!((test1.arrived, test2.arrived), (built, built), "{starts:?}");
    assert_eq!(
        test1.at.min(test2.at),
        built,
        "one takes the build's machine"
    );
}

/// A recorded job is never pending before its recorded time (a manual deploy an hour after its
/// tests), and waits only for the earlier-stage jobs that had ended by then: `lint` (2 min)
/// had, `compile` (10 min) had not, so the job that `needs` only `lint` does not wait for it.
#[test]
fn a_replayed_job_keeps_its_recorded_time_and_waits_only_for_jobs_ended_by_then() {
    let replay = "ready\tduration\tproject\tpipeline\tstage\tname\tclass\n\
        2026-11-23T08:00:00Z\t10m\tweb\t7\tbuild\tcompile\tdefault\n\
        2026-11-23T08:00:00Z\t2m\tweb\t7\tbuild\tlint\tdefault\n\
        2026-11-23T08:02:00Z\t1m\tweb\t7\ttest\tstyle\tdefault\n\
        2026-11-23T09:30:00Z\t1m\tweb\t7\tdeploy\tproduction\tdefault\n";
    let (load, starts) = starts_of(replay, "day.tsv");
    let p = &load.pipelines[0];
    let after = |name: &str| {
        let job = p.jobs.iter().find(|j| j.name == name).unwrap();
        let mut names: Vec<&str> = job.after.iter().map(|&i| p.jobs[i].name.as_str()).collect();
        names.sort_unstable();
        names
    };
    assert_eq!(after("style"), ["lint"]);
    assert_eq!(after("production"), ["compile", "lint", "style"]);
    let index = |name: &str| p.jobs.iter().position(|j| j.name == name).unwrap();
    let lint = start_of(&starts, index("lint"));
    let style = start_of(&starts, index("style"));
    let production = start_of(&starts, index("production"));
    // Both builds wait a boot; `style` is pending when `lint` ends in the run (08:03), after
    // its recorded 08:02, long before `compile` ends (08:11).
    assert_eq!(style.arrived, lint.at + 2 * MINUTE, "{starts:?}");
    assert_eq!(production.arrived, load.start + 90 * MINUTE, "{starts:?}");
}

/// Three pipelines pass, then a fourth's build fails after a minute and its tests never come;
/// a fifth passes. Told of the failure (the `status` column), the pool makes no machine for
/// the fourth's tests; without the column the build passed early as far as it knows, and
/// machines are made for tests that never come.
#[test]
fn a_failed_job_in_a_replay_stops_its_pipelines_forecast() {
    let mut lines = Vec::new();
    for (p, hour) in [(1, "08"), (2, "09"), (3, "10"), (4, "11"), (5, "12")] {
        let build = if p == 4 { "1m" } else { "5m" };
        lines.push(format!(
            "2026-11-23T{hour}:00:00Z\t{build}\tweb\t{p}\tbuild\tcompile\tdefault"
        ));
        if p != 4 {
            for n in 1..=3 {
                lines.push(format!(
                    "2026-11-23T{hour}:06:00Z\t4m\tweb\t{p}\ttest\trspec {n}/3\tdefault"
                ));
            }
        }
    }
    let header = "ready\tduration\tproject\tpipeline\tstage\tname\tclass";
    let plain = format!("{header}\n{}\n", lines.join("\n"));
    let with_status = format!(
        "{header}\tstatus\n{}\n",
        lines
            .iter()
            .map(|l| {
                let status = if l.contains("\t4\tbuild") {
                    "failed"
                } else {
                    "success"
                };
                format!("{l}\t{status}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.toml", POLICY);
    let unaware = simulate(&write(dir.path(), "plain.tsv", &plain), &policy).unwrap();
    let told = simulate(&write(dir.path(), "status.tsv", &with_status), &policy).unwrap();
    assert_eq!((unaware.total.jobs, told.total.jobs), (17, 17));
    let never_used = |r: &super::report::Report| r.total.machines_never_used;
    assert_eq!(
        never_used(&unaware),
        never_used(&told) + 2,
        "two machines for the fourth's tests (one is the build's): told {told:?}\nunaware {unaware:?}"
    );
    assert!(told.total.machines_created < unaware.total.machines_created);
}

#[test]
fn a_replay_status_is_a_finished_jobs_status() {
    let dir = tempfile::tempdir().unwrap();
    let text = "ready\tduration\tproject\tpipeline\tstage\tname\tclass\tstatus\n\
        2026-11-23T08:00:00Z\t4m\tweb\t7\tbuild\tcompile\tdefault\trunning\n\
        2026-11-23T08:00:00Z\t4m\tweb\t7\tbuild\tlint\tdefault\n";
    let err = simulate(
        &write(dir.path(), "s.tsv", text),
        &write(dir.path(), "p.toml", POLICY),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("s.tsv: line 2: status: \"running\" is not a finished job's status"),
        "{err}"
    );
    assert!(
        err.contains("s.tsv: line 3: has 7 tab-separated fields, not 8"),
        "{err}"
    );
}
