//! What an operator sees while a stack runs: the Prometheus metrics on the admin listener.

use anyhow::{Result, ensure};
use e2e::counting::{WITHIN, all_gone, rig};
use e2e::scrape::{Scrape, wait_for};
use fake_gitlab::control::JobStatus;

const POOL: (&str, &str) = ("pool", "local");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_machines_jobs_and_scaling_reasons_as_a_stack_runs() -> Result<()> {
    // Taskscaler's idle strategy, so that idle machines go after `idle_time` (idle_timeout).
    let r = rig(
        &[],
        "max_machines = 2\nidle_time = \"2s\"\nstrategy = \"idle\"",
        "",
        &[],
    )
    .await?;
    let admin = &r.autoscaler;

    let before = Scrape::get(admin).await?;
    ensure!(
        before.has("autoscaler_machines")
            && before.sum("autoscaler_machines", &[POOL]) == 0.0
            && before.sum("autoscaler_jobs", &[POOL]) == 0.0,
        "an empty pool at start:\n{}",
        before.text
    );

    let jobs = [
        r.enqueue(r.job(&["echo one"])).await?,
        r.enqueue(r.job(&["echo two"])).await?,
    ];
    for id in jobs {
        let view = r.gitlab.control.wait_final(id, WITHIN).await?;
        ensure!(view.status == JobStatus::Success, "{view:?}");
    }

    // The jobs ran on machines the pool made for them. A machine takes jobs as soon as it
    // boots, and the pass that asked for both reports its decision once both creates returned,
    // so the jobs may finish first: wait for both.
    let created = [POOL, ("action", "create"), ("reason", "waiting_jobs")];
    let running = wait_for(
        admin,
        WITHIN,
        "the jobs are counted as finished and the creation that served them",
        |s| {
            s.sum("autoscaler_jobs", &[POOL, ("phase", "finished")]) == 2.0
                && s.sum("autoscaler_scale_actions_total", &created) >= 1.0
        },
    )
    .await?;
    let at_least = |s: &Scrape, name: &str, labels: &[(&str, &str)], n: f64| {
        let v = s.sum(name, labels);
        ensure!(
            v >= n,
            "{name} {labels:?} is {v}, expected at least {n}:\n{}",
            s.text
        );
        Ok(())
    };
    at_least(&running, "autoscaler_job_wait_seconds_count", &[POOL], 2.0)?;
    at_least(&running, "autoscaler_scale_actions_total", &created, 1.0)?;
    at_least(
        &running,
        "autoscaler_provisioner_call_seconds_count",
        &[POOL, ("verb", "create"), ("exit", "ok")],
        1.0,
    )?;
    at_least(
        &running,
        "autoscaler_provisioner_call_seconds_count",
        &[POOL, ("verb", "list"), ("exit", "ok")],
        1.0,
    )?;
    at_least(
        &running,
        "autoscaler_upstream_request_seconds_count",
        &[
            ("origin", "autoscaler"),
            ("endpoint", "job_request"),
            ("outcome", "201"),
        ],
        2.0,
    )?;
    at_least(
        &running,
        "autoscaler_upstream_request_seconds_count",
        &[
            ("origin", "relay"),
            ("endpoint", "job_update"),
            ("outcome", "200"),
        ],
        2.0,
    )?;
    at_least(
        &running,
        "autoscaler_mirror_request_seconds_count",
        &[("endpoint", "PATCH /api/v4/jobs/{id}/trace")],
        2.0,
    )?;
    at_least(&running, "autoscaler_store_flush_seconds_count", &[], 1.0)?;
    let machines_made = running.sum(
        "autoscaler_scale_actions_total",
        &[POOL, ("action", "create")],
    );
    let scraped = wait_for(admin, WITHIN, "every new machine became ready", |s| {
        s.sum("autoscaler_machine_readiness_seconds_count", &[POOL]) >= machines_made
    })
    .await?;
    at_least(
        &scraped,
        "autoscaler_machine_creation_seconds_count",
        &[POOL],
        machines_made,
    )?;

    // Idle past idle_time, the machines go, and the metrics say why.
    r.autoscaler
        .wait_machines(WITHIN, "every machine gone", all_gone)
        .await?;
    let after = wait_for(admin, WITHIN, "the machines' deletion is counted", |s| {
        s.sum("autoscaler_machine_lifetime_seconds_count", &[POOL]) >= machines_made
    })
    .await?;
    at_least(
        &after,
        "autoscaler_scale_actions_total",
        &[POOL, ("action", "destroy"), ("reason", "idle_timeout")],
        machines_made,
    )?;
    at_least(
        &after,
        "autoscaler_machine_deletion_seconds_count",
        &[POOL],
        machines_made,
    )?;
    at_least(
        &after,
        "autoscaler_provisioner_call_seconds_count",
        &[POOL, ("verb", "destroy"), ("exit", "ok")],
        machines_made,
    )?;
    ensure!(
        after.sum("autoscaler_machines", &[POOL]) == 0.0
            && after.sum("autoscaler_job_slots", &[POOL]) == 0.0,
        "no machine and no slot left:\n{}",
        after.text
    );
    ensure!(
        r.created()? as f64 == machines_made,
        "the provisioner made {} machines, the metrics say {machines_made}",
        r.created()?
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_of_a_job_that_waited_for_a_new_machine_lists_each_step_in_order() -> Result<()>
{
    let r = rig(&[], "max_machines = 1", "", &[]).await?;
    let id = r.enqueue(r.job(&["echo waited for its machine"])).await?;
    let view = r.gitlab.control.wait_final(id, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");

    // The job's final step is recorded once GitLab answered the final update.
    let deadline = tokio::time::Instant::now() + WITHIN;
    let detail: serde_json::Value = loop {
        let detail: serde_json::Value = r
            .autoscaler
            .admin_get(&format!("/jobs/{id}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if detail["phase"] == "finished" || tokio::time::Instant::now() > deadline {
            break detail;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let steps = detail["timeline"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = steps.iter().filter_map(|s| s["step"].as_str()).collect();
    let expected = [
        "taken",
        "capacity_reserved",
        "machine_requested",
        "machine_running",
        "sidecar_ready",
        "handed_over",
        "started",
        "finished",
    ];
    ensure!(names == expected, "steps {names:?}\n{detail:#}");
    let times: Vec<u64> = steps.iter().filter_map(|s| s["at"].as_u64()).collect();
    ensure!(
        times.len() == expected.len() && times.windows(2).all(|w| w[0] <= w[1]) && times[0] > 0,
        "timestamps in order: {times:?}\n{detail:#}"
    );
    ensure!(
        steps
            .iter()
            .all(|s| s["detail"].as_str().is_some_and(|d| !d.is_empty())),
        "every step says why: {detail:#}"
    );
    let reserved = steps[1]["detail"].as_str().unwrap_or_default();
    ensure!(reserved.starts_with("waiting_jobs"), "{reserved}");
    ensure!(detail["machine"].as_str().is_some(), "{detail:#}");

    // The CLI shows the same steps, one line each.
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        r.autoscaler.admin_token.clone().unwrap_or_default(),
    )?;
    let out = tokio::process::Command::new(e2e::process::binary("autoscaler")?)
        .args(["job", &id.to_string(), "--url", &r.autoscaler.admin_url])
        .arg("--token-file")
        .arg(&token_file)
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut at = 0;
    for name in expected {
        let found = text[at..].find(name);
        ensure!(found.is_some(), "{name} missing or out of order:\n{text}");
        at += found.unwrap_or(0);
    }
    Ok(())
}
