//! Footprint: a region's worth of state — 10,000 machines, their 10,000 sidecars and 20,000
//! running jobs with real payloads — written into a store, then the autoscaler started on it
//! with a provisioner that lists those machines. Start-up is the time to `listening on`;
//! memory is the resident size once the pool has been reconciled; the reconcile and pass
//! times are the autoscaler's own (`GET /pools`). A restarted service asks GitLab once whether
//! each running job it found still runs; a real GitLab would say so, and the fake, which never
//! handed these jobs out, is told to answer those calls `200`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use autoscaler::admin::PoolStatus;
use autoscaler::core::job::JobPhase;
use autoscaler::core::machine::MachineState;
use autoscaler::core::pipelines::PipelinePlace;
use autoscaler::core::{JobId, SidecarId};
use autoscaler::secret::{Secret, TokenDigest};
use autoscaler::store::{
    Endpoint, HostKey, HostKeySource, JobRecord, MachineRecord, SidecarRecord, SledStore, Store,
    TimelineEntry,
};
use fake_gitlab::control::{FaultAction, FaultRule};
use serde_json::json;

use super::throughput::fill;
use crate::client;
use crate::report::Row;
use crate::stack::{Autoscaler, Gitlab, memory};

const MIB: f64 = 1024.0 * 1024.0;
const INSTANCE: &str = "bench-footprint";

pub async fn run(dir: &Path, machines: usize, jobs: usize) -> Result<Vec<Row>> {
    let gitlab = Gitlab::start(&dir.join("gitlab"), &[]).await?;
    let upstream = "glrt-bench-footprint";
    gitlab.control.add_runner(upstream).await?;
    let payload = real_payload(&gitlab, upstream).await?;

    let home = dir.join("autoscaler");
    let written = Instant::now();
    populate(&home.join("state"), machines, jobs, &payload).await?;
    let populate_s = written.elapsed().as_secs_f64();
    let provisioner = write_provisioner(&home, machines)?;

    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ninstance_id = \"{INSTANCE}\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n[state]\ndir = \"state\"\n\n\
         [upstream]\nurl = \"{}\"\n\n\
         [[pools]]\nname = \"bench\"\nupstream_token = \"{upstream}\"\n\n\
         [pools.provisioner]\ncommand = \"{}\"\nreconcile_interval = \"1s\"\n\n\
         [pools.scaling]\nmax_machines = {machines}\ncapacity_per_machine = 2\nidle_time = \"1h\"\n\n\
         [pools.sidecar]\nmode = \"builtin\"\nsilence_timeout = \"1h\"\n",
        gitlab.url,
        provisioner.display()
    );
    gitlab
        .control
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 200,
                retry_after: None,
            })
            .methods(&["PUT"])
            .path_prefix("/api/v4/jobs/"),
        )
        .await?;
    let started = Instant::now();
    let autoscaler = Autoscaler::start(&home, &config).await?;
    let startup = started.elapsed();
    let status = reconciled(&autoscaler, 3).await?;
    let timings = status.timings.context("the pool reports no timings")?;
    anyhow::ensure!(
        status.machines.get("busy").copied().unwrap_or(0) == machines,
        "not every machine was kept: {:?}",
        status.machines
    );
    let (rss, _) = memory(autoscaler.pid()?)?;
    let rss_mib = rss as f64 / MIB;
    println!(
        "  (footprint: {machines} machines and {jobs} jobs written in {populate_s:.1} s; payload {} bytes)",
        payload.len()
    );
    Ok(vec![
        Row {
            figure: "footprint",
            measure: format!("resident memory, {machines} machines + {jobs} jobs"),
            direct: None,
            through: rss_mib,
            unit: "MiB",
            target: "≤ 128 MiB".into(),
            met: rss_mib <= 128.0,
        },
        Row {
            figure: "footprint",
            measure: format!("one reconcile pass against `list` ({machines} machines)"),
            direct: None,
            through: timings.reconcile_ms,
            unit: "ms",
            target: "≤ 50 ms".into(),
            met: timings.reconcile_ms <= 50.0,
        },
        Row {
            figure: "footprint",
            measure: "one pass over every machine (health, scaling)".into(),
            direct: None,
            through: timings.pass_ms,
            unit: "ms",
            target: "≤ 50 ms".into(),
            met: timings.pass_ms <= 50.0,
        },
        Row {
            figure: "footprint",
            measure: "start-up with that store".into(),
            direct: None,
            through: startup.as_secs_f64() * 1000.0,
            unit: "ms",
            target: "≤ 1000 ms".into(),
            met: startup <= Duration::from_secs(1),
        },
    ])
}

/// A job payload exactly as the fake GitLab hands one out (about the size of a real one).
async fn real_payload(gitlab: &Gitlab, token: &str) -> Result<Vec<u8>> {
    fill(gitlab, token, 1).await?;
    let response = client::http()?
        .post(format!("{}/api/v4/jobs/request", gitlab.url))
        .json(&json!({"token": token, "info": {"features": {}}}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().as_u16() == 201,
        "no job: {}",
        response.status()
    );
    Ok(response.bytes().await?.to_vec())
}

/// Writes the region's state the way the autoscaler would have.
async fn populate(state: &Path, machines: usize, jobs: usize, payload: &[u8]) -> Result<()> {
    let store = SledStore::open(state)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    for i in 0..machines {
        let id = format!("bench-{i}");
        let sidecar = SidecarId(i as u64 + 1);
        let timeline = [
            MachineState::Requested,
            MachineState::Creating,
            MachineState::Booting,
            MachineState::Injecting,
            MachineState::Ready,
            MachineState::Busy,
        ]
        .into_iter()
        .map(|state| TimelineEntry {
            at: now,
            state,
            reason: None,
        })
        .collect();
        store.put_machine(&MachineRecord {
            id: id.clone(),
            pool: "bench".into(),
            state: MachineState::Busy,
            since: now,
            created_at: now,
            source: String::new(),
            class: None,
            provider_id: Some(format!("p-{i}")),
            endpoint: Some(Endpoint {
                host: format!("10.0.{}.{}", i / 250, i % 250 + 1),
                port: 22,
                user: "runner".into(),
            }),
            host_key: Some(HostKey {
                key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGaYX1tM57rcX1Mv6mC4NaSKXB8CCFwZzhnXRb9xu6N3".into(),
                source: HostKeySource::Provider,
            }),
            sidecar: Some(sidecar),
            use_count: 1,
            reason: Some("reachable over SSH".into()),
            destroy_attempts: 0,
            next_attempt: 0,
            restarted_at: None,
            timeline,
        })?;
        store.put_sidecar(&SidecarRecord {
            id: sidecar,
            pool: "bench".into(),
            token_digest: TokenDigest::of(&format!("glrt-bench-sidecar-{i}-{now}")),
            description: Some(id.clone()),
            created_at: now,
            machine: Some(id),
        })?;
    }
    for j in 0..jobs {
        let id = JobId(1_000_000 + j as u64);
        store.put_job(&JobRecord {
            id,
            pool: "bench".into(),
            token: Secret::new(format!("glcbt-bench-{j}-{now}")),
            dependencies: Vec::new(),
            project_id: Some(1),
            // As a real job's record: where it sits in its pipeline (eight jobs a stage).
            pipeline: Some(PipelinePlace {
                pipeline: 5_000 + j as u64 / 8,
                stage: "test".into(),
                name: format!("rspec {}/8", j % 8 + 1),
                scheduled: false,
            }),
            class: None,
            phase: JobPhase::Running {
                sidecar: Some(SidecarId((j % machines.max(1)) as u64 + 1)),
                since: now,
            },
            accepted_at: now,
            queued_at_gitlab_ms: None,
            runner_interrupted_listed: false,
            acknowledged: true,
            held: false,
            spooled: Vec::new(),
            artifact_refusal: None,
            timeline: Vec::new(),
            failed: false,
        })?;
        store.put_payload(id, payload)?;
    }
    store.durable().await?;
    store.checkpoint()?;
    Ok(())
}

/// A provisioner whose `list` answers the populated machines, as a cloud's would.
fn write_provisioner(home: &Path, machines: usize) -> Result<std::path::PathBuf> {
    let list: Vec<serde_json::Value> = (0..machines)
        .map(|i| {
            json!({"id": format!("p-{i}"), "state": "running", "labels": {
                "autoscaler-id": INSTANCE, "autoscaler-pool": "bench",
                "autoscaler-key": format!("bench-{i}")}})
        })
        .collect();
    std::fs::create_dir_all(home)?;
    let list_file = home.join("list.json");
    std::fs::write(&list_file, serde_json::to_vec(&json!({"machines": list}))?)?;
    let script = home.join("provisioner");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# Lists a region's machines from a file; nothing else is needed here.\n\
             case \"$1\" in\n\
             info) echo '{{\"protocol\":1,\"name\":\"bench\",\"version\":\"1\",\"capabilities\":{{\"batch_create\":false,\"max_batch\":1,\"host_key\":true}}}}' ;;\n\
             list) cat '{}' ;;\n\
             *) echo '{{\"error\":\"not in this benchmark\"}}'; exit 78 ;;\n\
             esac\n",
            list_file.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}

/// The pool's status once it has been reconciled `times` times (and passed over as often).
async fn reconciled(autoscaler: &Autoscaler, times: u64) -> Result<PoolStatus> {
    let http = client::http()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pools: Vec<PoolStatus> = http
            .get(format!("{}/pools", autoscaler.admin_url))
            .send()
            .await?
            .json()
            .await?;
        let pool = pools.into_iter().next().context("no pool")?;
        if pool
            .timings
            .is_some_and(|t| t.reconciles >= times && t.passes >= times)
        {
            return Ok(pool);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the pool was not reconciled {times} times within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
