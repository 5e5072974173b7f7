//! Sidecars started from user-data (`[pools.sidecar] start = "user_data"`), for networks where
//! the autoscaler cannot reach its machines: each machine is created with a bootstrap script
//! that carries its own sidecar token (minted for it before `create`; never the pool's upstream
//! token) and starts the sidecar at boot. The autoscaler never connects to the machine: it is
//! ready when its sidecar polls, judged by the provider's `status` when it falls silent, and
//! destroyed without stopping its sidecar first (destroy ends it).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{LaunchError, LaunchSession, LaunchTarget, Prepared, Result, SidecarLauncher};
use crate::inject::Injector;
use crate::sidecars::Sidecars;

#[derive(Debug, Clone)]
pub struct UserDataLauncher {
    injector: Injector,
    sidecars: Arc<Sidecars>,
    pool: String,
}

impl UserDataLauncher {
    pub fn new(injector: Injector, sidecars: Arc<Sidecars>, pool: &str) -> Self {
        Self {
            injector,
            sidecars,
            pool: pool.to_string(),
        }
    }
}

fn no_connection(step: &'static str) -> LaunchError {
    LaunchError::Refused {
        step,
        detail: "this pool's machines start their sidecars from user-data; the autoscaler does not connect to them".into(),
    }
}

impl SidecarLauncher for UserDataLauncher {
    fn open<'a>(
        &'a self,
        _target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn LaunchSession>>> {
        async { Err(no_connection("connecting")) }.boxed()
    }

    fn alive<'a>(
        &'a self,
        _target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        async { Err(no_connection("probing the sidecar")) }.boxed()
    }

    fn stop<'a>(
        &'a self,
        _target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        // Destroying the machine ends its sidecar; there is no way in to stop it sooner.
        async { Ok(()) }.boxed()
    }

    fn connects(&self) -> bool {
        false
    }

    fn prepare<'a>(&'a self, machine_id: &'a str) -> BoxFuture<'a, Result<Option<Prepared>>> {
        async move {
            let (sidecar, token) = self
                .sidecars
                .register(
                    &self.pool,
                    Some(format!("machine {machine_id}")),
                    Some(machine_id.to_string()),
                )
                .await?;
            let user_data = match self.injector.bootstrap(machine_id, &token) {
                Ok(script) => script,
                Err(e) => {
                    // No machine will ever hold this token.
                    let _ = self.sidecars.revoke_id(sidecar.id()).await;
                    return Err(e.into());
                }
            };
            tracing::debug!(pool = %self.pool, machine.id = %machine_id, sidecar.id = %sidecar.id(), "sidecar registered; its bootstrap goes to the machine as user-data");
            Ok(Some(Prepared {
                sidecar: sidecar.id(),
                user_data,
            }))
        }
        .boxed()
    }
}
