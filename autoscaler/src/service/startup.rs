//! Start-up wiring that `run_with` calls before it serves: each pool's upstream token checked
//! with GitLab, the machine controller of every pool with a provisioner, and the lines that
//! announce the bound addresses. Kept apart so that `mod.rs` reads as the order of start-up and
//! shutdown.

use std::sync::Arc;

use super::ServiceError;
use crate::clock::Clock;
use crate::config::{Config, SidecarStart};
use crate::inject::{Injector, SidecarCa};
use crate::jobs::Jobs;
use crate::launcher::{SidecarLauncher, SshLauncher, UserDataLauncher};
use crate::machines::{
    ControllerSettings, MachinesSettings, PoolController, PoolMachines, SourceSpec,
};
use crate::metrics::Metrics;
use crate::pools::Pool;
use crate::provisioner::ScriptProvisioner;
use crate::sidecars::Sidecars;
use crate::ssh::ClientKey;
use crate::store::Store;
use crate::upstream::{Upstream, VerifyOutcome};

/// Sidecar binaries the mirrored API serves to machines that fetch their own, by SHA-256.
type SidecarBinaries = std::collections::HashMap<String, std::path::PathBuf>;

/// The machine controller of every pool with a provisioner, installed as its pool's slot gate.
#[allow(clippy::too_many_arguments)] // start-up wiring: each argument is one shared service
pub(super) fn machine_controllers(
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
            needs_machine_user_data: sidecar.start == SidecarStart::UserData,
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

pub(super) async fn verify_pool(
    upstream: &dyn Upstream,
    pool: &Pool,
    info: &serde_json::Value,
) -> Result<(), ServiceError> {
    match upstream
        .verify(&pool.config.upstream_token, &pool.system_id, info)
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
pub(super) fn announce(url: &str, admin: Option<std::net::SocketAddr>) {
    use std::io::Write;
    println!("listening on {url}");
    if let Some(admin) = admin {
        println!("admin listening on http://{admin}");
    }
    let _ = std::io::stdout().flush();
    tracing::info!(%url, admin = ?admin, "mirrored runner API listening");
}

/// The pipeline look-ahead, when `[upstream] api_token` is set. Its token is checked by its
/// own task once running, so that GitLab being slow to answer does not hold the start.
pub(super) fn look_ahead(
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<crate::lookahead::LookAhead>>, ServiceError> {
    let Some(token) = &config.upstream.api_token else {
        return Ok(None);
    };
    crate::lookahead::LookAhead::new(&config.upstream.url, token.clone(), clock.clone())
        .map(Some)
        .map_err(ServiceError::LookAhead)
}
