//! Sidecars started over SSH: the launcher the service uses today.

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{LaunchSession, LaunchTarget, Result, SidecarLauncher};
use crate::inject::Injector;
use crate::secret::Secret;
use crate::ssh::{Connection, Target};

#[derive(Debug, Clone)]
pub struct SshLauncher {
    injector: Injector,
}

impl SshLauncher {
    pub fn new(injector: Injector) -> Self {
        injector.warm_up();
        Self { injector }
    }

    async fn connect(&self, target: &LaunchTarget, within: Duration) -> Result<Connection> {
        let target = Target {
            host: target.host.clone(),
            port: target.port,
            user: target.user.clone(),
            host_key: target.host_key.clone(),
        };
        Ok(self.injector.connect(&target, within).await?)
    }
}

struct SshSession {
    injector: Injector,
    conn: Connection,
}

impl LaunchSession for SshSession {
    fn host_key(&self) -> &str {
        &self.conn.host_key
    }

    fn ready(&self) -> BoxFuture<'_, Result<()>> {
        async move { Ok(self.injector.ready(&self.conn).await?) }.boxed()
    }

    fn start<'a>(&'a self, name: &'a str, token: &'a Secret) -> BoxFuture<'a, Result<String>> {
        async move { Ok(self.injector.start(&self.conn, name, token).await?) }.boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move { self.conn.close().await }.boxed()
    }
}

impl SidecarLauncher for SshLauncher {
    fn open<'a>(
        &'a self,
        target: &'a LaunchTarget,
        within: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn LaunchSession>>> {
        async move {
            let conn = self.connect(target, within).await?;
            Ok(Box::new(SshSession {
                injector: self.injector.clone(),
                conn,
            }) as Box<dyn LaunchSession>)
        }
        .boxed()
    }

    fn alive<'a>(
        &'a self,
        target: &'a LaunchTarget,
        within: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        async move {
            let conn = self.connect(target, within).await?;
            let alive = self.injector.sidecar_alive(&conn).await;
            conn.close().await;
            Ok(alive?)
        }
        .boxed()
    }

    fn stop<'a>(&'a self, target: &'a LaunchTarget, within: Duration) -> BoxFuture<'a, Result<()>> {
        async move {
            let conn = self.connect(target, within).await?;
            let stopped = self.injector.stop(&conn).await;
            conn.close().await;
            Ok(stopped?)
        }
        .boxed()
    }
}
