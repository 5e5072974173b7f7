//! Durability cost: what making a job's acceptance durable before hand-over costs, on the disk
//! the autoscaler's state would live on. The store is the autoscaler's own (sled with group
//! commit), driven in process: one acceptance at a time (every one pays a flush), then many at
//! once (they share flushes), each against the same writes without waiting for the disk.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use autoscaler::core::JobId;
use autoscaler::core::job::JobPhase;
use autoscaler::secret::Secret;
use autoscaler::store::{JobRecord, SledStore, Store};

use crate::report::{Row, ms, percentile};

const CONCURRENT: usize = 64;

fn record(id: u64) -> JobRecord {
    JobRecord {
        id: JobId(id),
        pool: "bench".into(),
        token: Secret::new(format!("glcbt-durability-{id}")),
        dependencies: Vec::new(),
        project_id: Some(1),
        pipeline: None,
        class: None,
        phase: JobPhase::Queued,
        accepted_at: 0,
        queued_at_gitlab_ms: None,
        runner_interrupted_listed: false,
        acknowledged: false,
        held: false,
        spooled: Vec::new(),
        artifact_refusal: None,
        timeline: Vec::new(),
        failed: false,
    }
}

/// What `Jobs::accept` writes for a new job, then (optionally) the wait for the disk.
async fn accept(store: &SledStore, id: u64, payload: &[u8], durable: bool) -> Result<()> {
    store.put_payload(JobId(id), payload)?;
    store.put_job(&record(id))?;
    if durable {
        store.durable().await?;
    }
    Ok(())
}

pub async fn run(dir: &Path, jobs: usize) -> Result<Vec<Row>> {
    let store = Arc::new(SledStore::open(&dir.join("state"))?);
    let payload = vec![b'x'; 4096];
    let mut next = 1u64;

    // One at a time.
    let mut buffered = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let t = Instant::now();
        accept(&store, next, &payload, false).await?;
        buffered.push(t.elapsed());
        next += 1;
    }
    let mut durable = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let t = Instant::now();
        accept(&store, next, &payload, true).await?;
        durable.push(t.elapsed());
        next += 1;
    }

    // Many at once: acceptances per second and flushes per acceptance.
    let concurrent_rate = |durable: bool, first: u64| {
        let store = store.clone();
        let payload = payload.clone();
        async move {
            let flushes = store.flush_count();
            let start = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..CONCURRENT as u64 {
                let (store, payload) = (store.clone(), payload.clone());
                tasks.spawn(async move {
                    for k in 0..(jobs as u64 / CONCURRENT as u64) {
                        accept(&store, first + t * 1_000_000 + k, &payload, durable).await?;
                    }
                    Ok::<(), anyhow::Error>(())
                });
            }
            while let Some(r) = tasks.join_next().await {
                r??;
            }
            let done = (jobs / CONCURRENT * CONCURRENT) as f64;
            let rate = done / start.elapsed().as_secs_f64();
            Ok::<_, anyhow::Error>((rate, (store.flush_count() - flushes) as f64 / done))
        }
    };
    let (rate_buffered, _) = concurrent_rate(false, 10_000_000).await?;
    let (rate_durable, flushes_per_job) = concurrent_rate(true, 100_000_000).await?;

    let p50 = |v: &mut Vec<Duration>| ms(percentile(v, 50.0));
    let (b50, d50) = (p50(&mut buffered), p50(&mut durable));
    Ok(vec![
        Row {
            figure: "durability",
            measure: "one acceptance at a time: p50 write → on disk".into(),
            direct: Some(b50),
            through: d50,
            unit: "ms",
            target: format!("(reported: +{:.2} ms per job alone)", d50 - b50),
            met: true,
        },
        Row {
            figure: "durability",
            measure: format!("{CONCURRENT} acceptances at once: acceptances/s"),
            direct: Some(rate_buffered),
            through: rate_durable,
            unit: "/s",
            target: format!("flushes shared ({flushes_per_job:.3} flushes per acceptance)"),
            met: flushes_per_job < 0.5,
        },
    ])
}
