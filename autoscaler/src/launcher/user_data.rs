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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::config::{SidecarConfig, SidecarMode, SidecarStart};
    use crate::ssh::ClientKey;
    use crate::store::MemoryStore;

    fn launcher(dir: &std::path::Path) -> (UserDataLauncher, Arc<Sidecars>) {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let sidecars = Arc::new(Sidecars::load(Arc::new(MemoryStore::new()), clock).unwrap());
        let config = SidecarConfig {
            mode: SidecarMode::Command {
                template: "runner --url {url} --token {token}".into(),
            },
            start: SidecarStart::UserData,
            binary: None,
            remote_dir: "autoscaler-sidecar".into(),
            ready_command: None,
            ready_timeout: Duration::from_secs(60),
            silence_timeout: Duration::from_secs(45),
            token_binding: Default::default(),
            job_user: None,
        };
        let key = ClientKey::load_or_generate(None, dir).unwrap();
        let injector = Injector::new(key, config, "http://10.0.0.1:8090".into(), 2).unwrap();
        (
            UserDataLauncher::new(injector, sidecars.clone(), "linux"),
            sidecars,
        )
    }

    use crate::inject::bootstrap::token_written_by as token_in;

    #[tokio::test]
    async fn each_machine_gets_its_own_token_in_its_user_data() {
        let dir = tempfile::tempdir().unwrap();
        let (launcher, sidecars) = launcher(dir.path());
        let a = launcher.prepare("linux-1").await.unwrap().unwrap();
        let b = launcher.prepare("linux-2").await.unwrap().unwrap();
        let token_a = token_in(a.user_data.expose());
        let token_b = token_in(b.user_data.expose());
        assert_ne!(token_a, token_b);
        let sidecar = sidecars
            .authenticate(&token_a)
            .expect("the token opens a sidecar");
        assert_eq!(sidecar.id(), a.sidecar);
        assert_eq!(sidecar.pool(), "linux");
        assert_eq!(sidecar.record.machine.as_deref(), Some("linux-1"));
        assert!(
            !format!("{a:?}").contains(&token_a),
            "Debug hides the script"
        );
    }

    #[tokio::test]
    async fn the_launcher_never_connects_and_stopping_is_left_to_destroy() {
        let dir = tempfile::tempdir().unwrap();
        let (launcher, _) = launcher(dir.path());
        let target = LaunchTarget {
            machine_id: "linux-1".into(),
            host: "10.0.0.9".into(),
            port: 22,
            user: "root".into(),
            host_key: None,
        };
        assert!(!launcher.connects());
        assert!(
            launcher
                .open(&target, Duration::from_secs(1))
                .await
                .is_err()
        );
        assert!(launcher.stop(&target, Duration::from_secs(1)).await.is_ok());
    }
}
