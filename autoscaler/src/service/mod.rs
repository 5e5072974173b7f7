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

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, Admin};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::decisions::Decisions;
use crate::delivery::Delivery;
use crate::intake::Intake;
use crate::jobs::Jobs;
use crate::metrics::Metrics;
use crate::mirror::{self, App, Limits};
use crate::observe::{self, Levels};
use crate::pools::Pool;
use crate::sidecars::Sidecars;
use crate::store::{SledStore, Store, StoreError};
use crate::systemd::{self, Step};
use crate::tls::{CertFiles, CertStore};
use crate::upstream::{HttpUpstream, MeteredUpstream, Origin, Upstream, UpstreamError};

mod startup;
mod tasks;

use startup::{announce, look_ahead, machine_controllers, verify_pool};
use tasks::{drain, maintenance};

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
    #[error("cannot make the pipeline look-ahead's HTTP client: {0}")]
    LookAhead(#[source] reqwest::Error),
    #[error("cannot record the instance id in {path}: {source}")]
    RecordInstanceId {
        path: String,
        source: std::io::Error,
    },
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
    crate::config::instance::record(&config.state.dir, &config.server.instance_id).map_err(
        |source| ServiceError::RecordInstanceId {
            path: crate::config::instance::recorded_path(&config.state.dir)
                .display()
                .to_string(),
            source,
        },
    )?;
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
        metrics.register_pool(pool.name());
        let info = crate::intake::presented_info(&sidecars, pool);
        verify_pool(upstream.as_ref(), pool, &info).await?;
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
    let lookahead = look_ahead(&config, &clock)?;
    for controller in &controllers {
        controller.report_decisions_to(decisions.clone());
        if let Some(lookahead) = &lookahead {
            controller.look_ahead_with(lookahead.clone());
        }
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
    if let Some(lookahead) = lookahead {
        tasks.spawn(lookahead.run(stop_maintenance.clone()));
    }
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
        tasks.spawn(observe::watch_machines(
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
    metrics.register_collector(Box::new(Levels::new(
        pools.clone(),
        app.machines.clone(),
        jobs.clone(),
    )));
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
            book_dir: config.admin.as_ref().and_then(|a| a.book_dir.clone()),
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
