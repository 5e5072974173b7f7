//! The running service: start-up, background tasks and the one shutdown protocol.
//!
//! Start: open the store, load jobs and sidecars, check each pool's upstream token, offer the
//! jobs that were waiting for a sidecar, bind, then start one intake per pool and the
//! maintenance loop. systemd (`Type=notify`) hears each step through `systemd.rs`: ready once
//! bound, stopping when the drain begins.
//!
//! Shutdown, on the first signal: stop asking GitLab for jobs (requests in flight complete and
//! their jobs are stored), stop handing out jobs, keep relaying until every job that is with a
//! sidecar has ended or `shutdown_grace` has passed, stop the server, make the store durable.
//! A second signal skips the wait; the store is still flushed.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, Admin};
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, SidecarStart};
use crate::core::job::JobEvent;
use crate::decisions::Decisions;
use crate::delivery::Delivery;
use crate::inject::{Injector, SidecarCa};
use crate::intake::Intake;
use crate::jobs::Jobs;
use crate::launcher::{SidecarLauncher, SshLauncher, UserDataLauncher};
use crate::machines::{
    ControllerSettings, MachinesSettings, PoolController, PoolMachines, SourceSpec,
};
use crate::metrics::{self, Levels, MeteredUpstream, Metrics, Origin};
use crate::mirror::{self, App, Limits};
use crate::pools::Pool;
use crate::provisioner::ScriptProvisioner;
use crate::sidecars::Sidecars;
use crate::ssh::ClientKey;
use crate::store::{SledStore, Store, StoreError};
use crate::systemd::{self, Step};
use crate::tls::{CertFiles, CertStore};
use crate::upstream::{HttpUpstream, Upstream, UpstreamError, VerifyOutcome};

/// How long a sidecar has to acknowledge a job it was handed before the autoscaler does.
const ACK_GRACE_MS: u64 = 5_000;
/// Finished jobs are kept this long so that late calls for them get a coherent answer.
const FINISHED_RETENTION_MS: u64 = 10 * 60 * 1000;
const MAINTENANCE_TICK: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Machines(#[from] crate::machines::MachinesError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("GitLab rejected the upstream token of pool {pool:?} (403): check upstream_token")]
    TokenRejected { pool: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Serve(std::io::Error),
    #[error("pool {pool:?} cannot start: {detail}")]
    PoolSetup { pool: String, detail: String },
    #[error("server.tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// The two signals of the shutdown protocol.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// Stop taking work, finish what is running.
    pub graceful: CancellationToken,
    /// Stop now (state is still flushed).
    pub immediate: CancellationToken,
}

/// Runs the service until shutdown.
pub async fn run(config: Config, shutdown: Shutdown) -> Result<(), ServiceError> {
    systemd::notify(Step::Starting);
    let metrics = Arc::new(Metrics::new());
    let store: Arc<dyn Store> = Arc::new(
        SledStore::open(&config.state.dir)?.with_flush_histogram(metrics.store_flush.clone()),
    );
    let upstream: Arc<dyn Upstream> = Arc::new(HttpUpstream::new(&config.upstream)?);
    run_with(
        config,
        store,
        upstream,
        Arc::new(SystemClock),
        metrics,
        shutdown,
    )
    .await
}

/// Runs the service on the given edges (tests substitute fakes).
pub async fn run_with(
    config: Config,
    store: Arc<dyn Store>,
    raw_upstream: Arc<dyn Upstream>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) -> Result<(), ServiceError> {
    // The relay's calls and the autoscaler's own are counted apart.
    let upstream: Arc<dyn Upstream> =
        MeteredUpstream::wrap(raw_upstream.clone(), metrics.clone(), Origin::Autoscaler);
    let relay_upstream: Arc<dyn Upstream> =
        MeteredUpstream::wrap(raw_upstream, metrics.clone(), Origin::Relay);
    let jobs = Arc::new(Jobs::load(store.clone(), clock.clone())?.with_metrics(metrics.clone()));
    let sidecars = Arc::new(Sidecars::load(store.clone(), clock.clone())?);
    let pools = config
        .pools
        .iter()
        .map(|p| Pool::open(p.clone(), jobs.clone(), store.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    tracing::info!(
        jobs = jobs.unfinished(),
        sidecars = pools
            .iter()
            .map(|p| sidecars.in_pool(p.name()).len())
            .sum::<usize>(),
        pools = pools.len(),
        "state loaded"
    );
    for pool in &pools {
        verify_pool(upstream.as_ref(), pool).await?;
    }
    for pool in &pools {
        for id in jobs.queued(pool.name()) {
            pool.queue.offer(id);
        }
    }

    let listener = TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| ServiceError::Bind {
            addr: config.server.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServiceError::Serve)?;
    let certs = match &config.server.tls {
        Some(t) => Some(CertStore::load(CertFiles {
            certificate: t.certificate.clone(),
            key: t.key.clone(),
        })?),
        None => None,
    };
    let scheme = if certs.is_some() { "https" } else { "http" };
    let admin_listener = match &config.admin {
        Some(a) => {
            Some(
                TcpListener::bind(a.listen)
                    .await
                    .map_err(|source| ServiceError::Bind {
                        addr: a.listen,
                        source,
                    })?,
            )
        }
        None => None,
    };
    // Sidecars must be given the address actually bound (the configured port may be 0).
    let public_url = config.server.public_url.clone().map_or_else(
        || format!("{scheme}://{addr}"),
        |u| u.as_str().trim_end_matches('/').to_string(),
    );
    let decisions = Decisions::new(metrics.clone());
    let (controllers, sidecar_binaries) = machine_controllers(
        &config,
        &public_url,
        &pools,
        &jobs,
        &sidecars,
        &store,
        &clock,
        &metrics,
    )?;
    for controller in &controllers {
        controller.report_decisions_to(decisions.clone());
    }
    let bound = crate::reload::Bound {
        server: addr,
        admin: admin_listener.as_ref().and_then(|l| l.local_addr().ok()),
    };
    let reloads = crate::reload::Reloads::new(
        config.clone(),
        bound,
        pools.clone(),
        metrics.clone(),
        clock.clone(),
    );
    let hangups = crate::reload::hangups();
    announce(
        &format!("{scheme}://{addr}"),
        admin_listener.as_ref().and_then(|l| l.local_addr().ok()),
    );

    let tasks = TaskTracker::new();
    let stop_intake = CancellationToken::new();
    let stop_maintenance = CancellationToken::new();
    for pool in &pools {
        let intake = Arc::new(Intake::new(
            pool.clone(),
            upstream.clone(),
            jobs.clone(),
            sidecars.clone(),
            &config.upstream,
        ));
        tasks.spawn(intake.run(stop_intake.clone()));
    }
    let delivery = Delivery::new(
        upstream.clone(),
        jobs.clone(),
        clock.clone(),
        config.state.dir.join("spool"),
        config.upstream.keepalive_interval,
    );
    tasks.spawn(maintenance(
        pools.clone(),
        jobs.clone(),
        delivery.clone(),
        stop_maintenance.clone(),
    ));
    let stop_controllers = CancellationToken::new();
    // Tracked on their own: machines are retired only once no controller pass can start more.
    let controller_tasks = TaskTracker::new();
    for controller in &controllers {
        controller_tasks.spawn(controller.clone().run(stop_controllers.clone()));
        tasks.spawn(metrics::watch_machines(
            metrics.clone(),
            controller.machines.clone(),
            stop_maintenance.clone(),
        ));
    }
    controller_tasks.close();

    let machines = controllers
        .iter()
        .map(|c| (c.machines.pool().to_string(), c.machines.clone()))
        .collect();
    let app = Arc::new(
        App::new(
            pools.clone(),
            jobs.clone(),
            sidecars,
            relay_upstream,
            delivery,
            Limits::from_config(&config),
        )
        .with_machines(machines)
        .with_metrics(metrics.clone())
        .with_sidecar_binaries(sidecar_binaries),
    );
    metrics.register_levels(Levels {
        pools: pools.clone(),
        machines: app.machines.clone(),
        jobs: jobs.clone(),
    });
    let stop_server = CancellationToken::new();
    if let Some(listener) = admin_listener {
        let admin = Arc::new(Admin {
            pools: pools.clone(),
            machines: app.machines.clone(),
            jobs: jobs.clone(),
            draining: shutdown.graceful.clone(),
            metrics: metrics.clone(),
            decisions: decisions.clone(),
            reloads: reloads.clone(),
            token: config.admin.as_ref().and_then(|a| a.token.clone()),
        });
        let stop = stop_server.clone();
        tasks.spawn(async move {
            let serve = axum::serve(listener, admin::router(admin))
                .with_graceful_shutdown(async move { stop.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "admin API failed");
            }
        });
    }
    if let Some(certs) = &certs {
        tasks.spawn(crate::tls::watch(certs.clone(), stop_maintenance.clone()));
    }
    if let Some(hangups) = hangups {
        tasks.spawn(crate::reload::watch(
            reloads,
            hangups,
            stop_maintenance.clone(),
        ));
    }
    let mut server = crate::tls::serve(
        listener,
        certs,
        mirror::router(app),
        config.server.connections.clone(),
        stop_server.clone(),
    );
    // Store loaded, both listeners bound and served: a supervisor may now count on us.
    systemd::notify(Step::Ready { pools: pools.len() });

    let server_ended_early = tokio::select! {
        () = shutdown.graceful.cancelled() => None,
        result = &mut server => Some(result),
    };
    if let Some(result) = server_ended_early {
        stop_intake.cancel();
        stop_maintenance.cancel();
        stop_controllers.cancel();
        store.durable().await?;
        return match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ServiceError::Serve(e)),
            Err(e) => Err(ServiceError::Serve(std::io::Error::other(e))),
        };
    }
    tracing::info!("shutting down: no new jobs are taken; waiting for running jobs");
    systemd::notify(Step::Draining {
        jobs_with_sidecars: jobs.with_sidecars(),
    });
    stop_intake.cancel();
    for pool in &pools {
        pool.queue.stop_handing_out();
    }
    drain(&jobs, config.server.shutdown_grace, &shutdown.immediate).await;
    stop_server.cancel();
    stop_maintenance.cancel();
    stop_controllers.cancel();
    tokio::select! {
        () = controller_tasks.wait() => {}
        () = shutdown.immediate.cancelled() => {}
    }
    // Machines are kept (their sidecars reach the next start of the autoscaler), unless the
    // pool says otherwise.
    for controller in controllers.iter().filter(|c| c.delete_on_shutdown()) {
        tokio::select! {
            () = controller.clone().retire_all(config.server.shutdown_grace) => {}
            () = shutdown.immediate.cancelled() => break,
        }
    }
    tasks.close();
    tokio::select! {
        () = async { tasks.wait().await; let _ = (&mut server).await; } => {}
        () = shutdown.immediate.cancelled() => tracing::warn!("second signal: not waiting for calls in flight"),
    }
    systemd::notify(Step::Flushing);
    store.durable().await?;
    tracing::info!(
        unfinished_jobs = jobs.unfinished(),
        "stopped; state is on disk"
    );
    Ok(())
}

/// Sidecar binaries the mirrored API serves to machines that fetch their own, by SHA-256.
type SidecarBinaries = std::collections::HashMap<String, std::path::PathBuf>;

/// The machine controller of every pool with a provisioner, installed as its pool's slot gate.
#[allow(clippy::too_many_arguments)] // start-up wiring: each argument is one shared service
fn machine_controllers(
    config: &Config,
    public_url: &str,
    pools: &[Arc<Pool>],
    jobs: &Arc<Jobs>,
    sidecars: &Arc<Sidecars>,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    metrics: &Arc<Metrics>,
) -> Result<(Vec<Arc<PoolController>>, SidecarBinaries), ServiceError> {
    let scaled: Vec<&Arc<Pool>> = pools
        .iter()
        .filter(|p| p.config.provisioner.is_some())
        .collect();
    if scaled.is_empty() {
        return Ok((Vec::new(), SidecarBinaries::new()));
    }
    let setup = |pool: &str, detail: String| ServiceError::PoolSetup {
        pool: pool.to_string(),
        detail,
    };
    let key = ClientKey::load_or_generate(config.ssh.key_file.as_deref(), &config.state.dir)
        .map_err(|e| setup(scaled[0].name(), e.to_string()))?;
    let mut controllers = Vec::new();
    let mut binaries = SidecarBinaries::new();
    for pool in scaled {
        let (Some(p), Some(sidecar)) = (&pool.config.provisioner, &pool.config.sidecar) else {
            continue;
        };
        let sources = pool
            .config
            .sources
            .iter()
            .map(|source| SourceSpec {
                name: source.name.clone(),
                provisioner: Arc::new(
                    ScriptProvisioner::new(
                        source.command.clone(),
                        pool.name(),
                        &config.server.instance_id,
                        source.env.clone(),
                        source.timeouts.clone(),
                        source.max_concurrency,
                    )
                    .with_metrics(metrics.clone()),
                ),
                max_machines: source.max_machines,
                create_rate: source.create_rate,
                create_burst: source.create_burst,
                user_data: source.user_data.clone(),
                reclaim_cooldown: source.reclaim_cooldown,
            })
            .collect();
        let settings = MachinesSettings {
            pool: pool.name().to_string(),
            autoscaler_id: config.server.instance_id.clone(),
            ssh_public_key: key.public_openssh().to_string(),
            boot_timeout: p.boot_timeout,
            ready_timeout: sidecar.ready_timeout,
            orphans: p.orphan_policy,
        };
        let machines = PoolMachines::load(settings, sources, store.clone(), clock.clone())?;
        let injector = Injector::new(
            key.clone(),
            sidecar.clone(),
            public_url.to_string(),
            // The sidecar holds as many job requests as the largest class runs jobs; the slot
            // gate keeps each machine to its own class's capacity.
            pool.config
                .classes
                .as_ref()
                .map_or(pool.config.scaling.capacity_per_machine, |c| {
                    c.list
                        .iter()
                        .map(|class| class.capacity_per_machine)
                        .max()
                        .unwrap_or(1)
                }),
        )
        .map_err(|e| setup(pool.name(), e.to_string()))?
        .with_ca(config.server.tls.as_ref().map(|t| SidecarCa {
            certificate: t.certificate.clone(),
            ca_bundle: t.ca_bundle.clone(),
            system_ca_files: t.system_ca_files.clone(),
        }));
        let launcher: Arc<dyn SidecarLauncher> = match sidecar.start {
            SidecarStart::Ssh => Arc::new(SshLauncher::new(injector)),
            SidecarStart::UserData => {
                if let Some((path, sum)) = injector.binary() {
                    binaries.insert(sum.to_string(), path.to_path_buf());
                }
                Arc::new(UserDataLauncher::new(
                    injector,
                    sidecars.clone(),
                    pool.name(),
                ))
            }
        };
        let controller = PoolController::new(
            machines,
            launcher,
            sidecars.clone(),
            jobs.clone(),
            pool.queue.clone(),
            ControllerSettings {
                policy: pool.policy_cell(),
                classes: pool.config.classes.clone(),
                reconcile_interval: p.reconcile_interval,
                ready_timeout: sidecar.ready_timeout,
                silence_timeout: sidecar.silence_timeout,
            },
        );
        if let Some(classes) = &pool.config.classes {
            jobs.set_classes(pool.name(), classes.clone());
        }
        controller.recover();
        pool.queue.set_gate(controller.clone());
        tracing::info!(pool = %pool.name(), provisioner = %p.command.display(), machines = controller.machines.live().len(), "pool scales with its provisioner");
        controllers.push(controller);
    }
    Ok((controllers, binaries))
}

async fn verify_pool(upstream: &dyn Upstream, pool: &Pool) -> Result<(), ServiceError> {
    match upstream
        .verify(&pool.config.upstream_token, &pool.system_id)
        .await
    {
        Ok(VerifyOutcome::Valid) => {
            tracing::info!(pool = %pool.name(), system_id = %pool.system_id, "upstream token verified");
            Ok(())
        }
        Ok(VerifyOutcome::Invalid) => Err(ServiceError::TokenRejected {
            pool: pool.name().to_string(),
        }),
        // GitLab being down must not keep the autoscaler (and its running jobs) from starting.
        Ok(VerifyOutcome::Unexpected { status }) => {
            tracing::warn!(pool = %pool.name(), status, "could not verify the upstream token; carrying on");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(pool = %pool.name(), error = %e, "could not verify the upstream token; carrying on");
            Ok(())
        }
    }
}

/// The lines a supervising process or test reads to learn the bound addresses.
#[allow(clippy::print_stdout)]
fn announce(url: &str, admin: Option<std::net::SocketAddr>) {
    use std::io::Write;
    println!("listening on {url}");
    if let Some(admin) = admin {
        println!("admin listening on http://{admin}");
    }
    let _ = std::io::stdout().flush();
    tracing::info!(%url, admin = ?admin, "mirrored runner API listening");
}

/// Waits until no job is with a sidecar, `grace` has passed, or `immediate` fires.
async fn drain(jobs: &Jobs, grace: Duration, immediate: &CancellationToken) {
    let deadline = crate::clock::monotonic() + grace;
    let mut changes = jobs.subscribe();
    loop {
        let remaining = jobs.with_sidecars();
        if remaining == 0 {
            return;
        }
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(jobs = remaining, "shutdown grace period over; jobs still running stay with their sidecars");
                return;
            }
            () = immediate.cancelled() => return,
        }
    }
}

/// Periodic upkeep: hand-outs never acknowledged go back to the queue, replay entries and
/// finished jobs are collected.
async fn maintenance(
    pools: Vec<Arc<Pool>>,
    jobs: Arc<Jobs>,
    delivery: Arc<Delivery>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(MAINTENANCE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        ticks += 1;
        for pool in &pools {
            let window = millis(pool.config.assign_ack_timeout);
            for id in jobs.unacknowledged(pool.name(), window) {
                pool.queue.requeue_unacknowledged(id);
            }
            pool.queue.prune_replays();
            if pool.config.provisioner.is_some() {
                let timeout = millis(pool.policy().scaling.acquire_timeout);
                for id in jobs.waited_too_long(pool.name(), timeout) {
                    give_up(&jobs, pool.name(), id, timeout);
                }
            }
        }
        delivery.deliver_owed(ACK_GRACE_MS).await;
        if ticks.is_multiple_of(60) {
            match jobs.collect_finished(FINISHED_RETENTION_MS) {
                Ok(0) => {}
                Ok(n) => tracing::debug!(jobs = n, "finished jobs collected"),
                Err(e) => tracing::error!(error = %e, "could not collect finished jobs"),
            }
        }
    }
}

/// A job no machine took within `acquire_timeout`. Held by GitLab for our acknowledgement, it
/// is released by ceasing keep-alives: GitLab fails it as `runner_provisioning_timeout` and
/// its retry rules give it to another runner. Else GitLab runs it already, and it is failed
/// there with `runner_system_failure` (which CI `retry:` can rerun).
fn give_up(jobs: &Jobs, pool: &str, id: crate::core::JobId, timeout: u64) {
    let held = jobs.get(id).is_some_and(|r| r.held && !r.acknowledged);
    let reason = format!(
        "no machine took it within {} s (acquire_timeout)",
        timeout / 1000
    );
    let result = if held {
        tracing::warn!(job.id = %id, %pool, %reason,
            "releasing the job to GitLab: no more keep-alives, so GitLab fails it as runner_provisioning_timeout and may retry it elsewhere");
        jobs.apply(id, JobEvent::Ended)
    } else {
        tracing::warn!(job.id = %id, %pool, %reason, "giving up on a job");
        jobs.apply(id, JobEvent::Abandon { reason })
    };
    if let Err(e) = result {
        tracing::error!(job.id = %id, error = %e, "cannot give up on the job");
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
