//! The relay, end to end: fake GitLab → autoscaler → sidecars → back, all real processes on
//! loopback ports.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::stack::{System, register_sidecar};
use e2e::unzip;
use fake_gitlab::control::{ArtifactSpec, FaultAction, FaultRule, JobStatus, JobVariable, JobView};

/// What a user checks of a finished job: its state, and that GitLab holds exactly the trace the
/// runner produced (the runner's checksum and size of what it sent match what GitLab stored).
fn check_trace_integrity(view: &JobView) -> Result<()> {
    ensure!(
        view.reported_checksum.as_deref() == Some(view.trace_crc32.as_str()),
        "job {}: runner reported {:?}, GitLab stored {}",
        view.id,
        view.reported_checksum,
        view.trace_crc32
    );
    ensure!(
        view.reported_bytesize == Some(view.trace_bytes),
        "job {}: runner reported {:?} bytes, GitLab stored {}",
        view.id,
        view.reported_bytesize,
        view.trace_bytes
    );
    Ok(())
}

fn numbers(upto: u32) -> String {
    (1..=upto).map(|n| format!("{n}\n")).collect()
}

#[derive(Debug)]
enum Kind {
    Lines(u32),
    Bulk,
    Failing,
    Masked,
    AfterScript,
    SlowAccept,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_of_mixed_kinds_flow_through_four_sidecars() -> Result<()> {
    let sys = System::start(4, &["--trace-update-interval", "1"]).await?;

    // Ten producers with artifacts, and thirty jobs of other kinds, all at once.
    let mut producers = Vec::new();
    for i in 0..10 {
        let mut spec = sys.spec(&[
            "mkdir -p out",
            &format!("printf 'payload-{i}\\n' > out/data.txt"),
            &format!("seq 1 {} > out/numbers.txt", 20_000 + i),
            &format!("echo produced-{i}"),
        ]);
        spec.name = format!("produce-{i}");
        spec.artifacts = vec![ArtifactSpec {
            paths: vec!["out/".into()],
            ..ArtifactSpec::default()
        }];
        producers.push((i, sys.enqueue(&spec).await?));
    }
    let kinds = [
        Kind::Lines(200),
        Kind::Bulk,
        Kind::Failing,
        Kind::Masked,
        Kind::AfterScript,
        Kind::SlowAccept,
    ];
    let mut others = Vec::new();
    for i in 0..30 {
        let kind = &kinds[i % kinds.len()];
        let mut spec = match kind {
            Kind::Lines(n) => sys.spec(&[&format!(
                "for n in $(seq 1 {n}); do echo \"job-{i} line $n\"; done"
            )]),
            Kind::Bulk => {
                sys.spec(&["head -c 1500000 /dev/zero | tr '\\0' 'x' | fold -w 100; echo"])
            }
            Kind::Failing => sys.spec(&["echo about to fail", "exit 3", "echo not reached"]),
            Kind::Masked => {
                let mut s = sys.spec(&["echo \"the secret is $SECRET_VALUE\""]);
                s.variables = vec![JobVariable {
                    masked: true,
                    ..JobVariable::new("SECRET_VALUE", format!("s3cr3t-value-{i}-zz"))
                }];
                s
            }
            Kind::AfterScript => {
                let mut s = sys.spec(&[&format!("echo main-{i}")]);
                s.after_script = vec![format!("echo after-{i}")];
                s
            }
            Kind::SlowAccept => {
                let mut s = sys.spec(&[&format!("echo accepted-late-{i}")]);
                s.final_put_202 = 1;
                s
            }
        };
        spec.name = format!("{kind:?}-{i}").to_lowercase();
        others.push((i, sys.enqueue(&spec).await?));
    }

    // Producers finish; their artifacts are what the scripts wrote.
    let mut produced = BTreeMap::new();
    for (i, id) in &producers {
        let (view, trace) = sys.finish(*id).await?;
        ensure!(
            view.status == JobStatus::Success,
            "producer {i}: {view:?}\n{trace}"
        );
        check_trace_integrity(&view)?;
        ensure!(
            trace.contains(&format!("produced-{i}")),
            "producer {i} trace:\n{trace}"
        );
        let archive = sys
            .gitlab
            .control
            .artifact(*id, "archive")
            .await?
            .context("no archive")?;
        let files = unzip(&archive)?;
        ensure!(
            files.get("out/data.txt").map(Vec::as_slice)
                == Some(format!("payload-{i}\n").as_bytes()),
            "producer {i}: {:?}",
            files.keys()
        );
        ensure!(
            files.get("out/numbers.txt").map(Vec::as_slice) == Some(numbers(20_000 + i).as_bytes())
        );
        produced.insert(*i, *id);
    }

    // Ten consumers (GitLab creates them once their stage's predecessors are done) download the
    // producers' artifacts through the autoscaler.
    let mut consumers = Vec::new();
    for (i, producer) in &produced {
        let mut spec = sys.spec(&["cat out/data.txt", "wc -l < out/numbers.txt"]);
        spec.name = format!("consume-{i}");
        spec.dependencies = vec![*producer];
        consumers.push((*i, sys.enqueue(&spec).await?));
    }

    for (i, id) in &others {
        let kind = &kinds[i % kinds.len()];
        let (view, trace) = sys.finish(*id).await?;
        check_trace_integrity(&view)?;
        match kind {
            Kind::Lines(n) => {
                ensure!(view.status == JobStatus::Success, "{view:?}");
                let expected: String = (1..=*n).map(|k| format!("job-{i} line {k}\n")).collect();
                ensure!(
                    trace.contains(&expected),
                    "job {i}: output lines missing or out of order"
                );
            }
            Kind::Bulk => {
                ensure!(view.status == JobStatus::Success, "{view:?}");
                let line = format!("{}\n", "x".repeat(100));
                ensure!(
                    trace.contains(&line.repeat(15_000)),
                    "job {i}: bulk output incomplete"
                );
            }
            Kind::Failing => {
                ensure!(view.status == JobStatus::Failed, "{view:?}");
                ensure!(
                    view.failure_reason.as_deref() == Some("script_failure"),
                    "{view:?}"
                );
                ensure!(view.exit_code == Some(3), "{view:?}");
                ensure!(trace.contains("about to fail") && !trace.contains("not reached"));
            }
            Kind::Masked => {
                ensure!(view.status == JobStatus::Success, "{view:?}");
                ensure!(
                    trace.contains("the secret is [MASKED]"),
                    "job {i}:\n{trace}"
                );
                ensure!(
                    !trace.contains("s3cr3t-value"),
                    "job {i}: secret leaked into the trace"
                );
            }
            Kind::AfterScript => {
                ensure!(view.status == JobStatus::Success, "{view:?}");
                ensure!(
                    trace.contains(&format!("main-{i}")) && trace.contains(&format!("after-{i}"))
                );
            }
            Kind::SlowAccept => {
                ensure!(view.status == JobStatus::Success, "{view:?}");
                ensure!(
                    view.final_put_attempts >= 2,
                    "the 202 was not honoured: {view:?}"
                );
                ensure!(trace.contains(&format!("accepted-late-{i}")));
            }
        }
    }

    for (i, id) in &consumers {
        let (view, trace) = sys.finish(*id).await?;
        ensure!(
            view.status == JobStatus::Success,
            "consumer {i}: {view:?}\n{trace}"
        );
        check_trace_integrity(&view)?;
        ensure!(
            trace.contains(&format!("payload-{i}")),
            "consumer {i} did not get its artifacts:\n{trace}"
        );
        ensure!(
            trace.contains(&format!("{}", 20_000 + i)),
            "consumer {i}: numbers.txt incomplete:\n{trace}"
        );
    }
    let total = producers.len() + others.len() + consumers.len();
    assert_eq!(total, 50);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_canceled_while_running_ends_canceled_after_script_only_when_graceful() -> Result<()>
{
    let sys = System::start(2, &["--trace-update-interval", "1"]).await?;
    let mut spec = sys.spec(&[
        "for n in $(seq 1 240); do echo \"tick $n\"; sleep 0.25; done",
        "echo never",
    ]);
    spec.after_script = vec!["echo after-script-ran".into()];
    let graceful = sys.enqueue(&spec).await?;
    let forced = sys.enqueue(&spec).await?;
    // Started on their sidecars (running at GitLab alone means only that the autoscaler took
    // them: GitLab runs jobs from hand-out).
    sys.gitlab
        .wait_started(graceful, System::JOB_TIMEOUT)
        .await?;
    sys.gitlab.wait_started(forced, System::JOB_TIMEOUT).await?;

    // The autoscaler advertises the sidecars' `cancel_gracefully`, so GitLab cancels gracefully.
    assert_eq!(
        sys.gitlab.control.cancel(graceful).await?,
        JobStatus::Canceling
    );
    assert_eq!(
        sys.gitlab.control.force_cancel(forced).await?,
        JobStatus::Canceled
    );

    let (view, trace) = sys.finish(graceful).await?;
    assert_eq!(view.status, JobStatus::Canceled);
    assert!(
        trace.contains("after-script-ran"),
        "graceful cancel must run after_script:\n{trace}"
    );
    assert!(!trace.contains("never"));

    let (view, trace) = sys.finish(forced).await?;
    assert_eq!(view.status, JobStatus::Canceled);
    assert!(
        !trace.contains("after-script-ran"),
        "a forced cancel aborts without after_script:\n{trace}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_answering_502_for_20_seconds_loses_no_job_and_no_trace_byte() -> Result<()> {
    let sys = System::start(4, &["--trace-update-interval", "1"]).await?;
    let mut ids = Vec::new();
    for i in 0..8 {
        let spec = sys.spec(&[&format!(
            "for n in $(seq 1 40); do echo \"job-{i} tick $n\"; sleep 0.25; done"
        )]);
        ids.push((i, sys.enqueue(&spec).await?));
    }
    // In the middle of the run: the first wave is running, the second is still queued.
    sys.gitlab
        .control
        .wait_running(ids[0].1, System::JOB_TIMEOUT)
        .await?;
    sys.gitlab
        .control
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 502,
                retry_after: None,
            })
            .path_prefix("/api/v4/")
            .duration(Duration::from_secs(20)),
        )
        .await?;
    for (i, id) in ids {
        let (view, trace) = sys.finish(id).await?;
        assert_eq!(view.status, JobStatus::Success, "job {i}: {view:?}");
        check_trace_integrity(&view)?;
        let expected: String = (1..=40).map(|n| format!("job-{i} tick {n}\n")).collect();
        assert!(
            trace.contains(&expected),
            "job {i}: trace incomplete:\n{trace}"
        );
    }
    let stats = sys.gitlab.control.stats().await?;
    assert!(
        stats.count("PATCH /api/v4/jobs/:id/trace", "502")
            + stats.count("PUT /api/v4/jobs/:id", "502")
            > 0,
        "the outage never hit a running job"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gitlab_runner_crate_completes_jobs_through_the_autoscaler() -> Result<()> {
    let sys = System::start(0, &[]).await?;
    let token = register_sidecar(
        &sys.autoscaler.url,
        &sys.pool.registration_token,
        "crate-runner",
    )
    .await?;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_crate-runner"));
    command.args([&sys.autoscaler.url, &token, "2"]);
    let _runner = e2e::process::Proc::spawn("crate-runner", command)?;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push((
            i,
            sys.enqueue(&sys.spec(&[&format!("echo hello from crate job {i}"), "uname -s"]))
                .await?,
        ));
    }
    for (i, id) in ids {
        let (view, trace) = sys.finish(id).await?;
        assert_eq!(
            view.status,
            JobStatus::Success,
            "job {i}: {view:?}\n{trace}"
        );
        assert!(
            trace.contains(&format!("hello from crate job {i}")),
            "{trace}"
        );
    }
    Ok(())
}
