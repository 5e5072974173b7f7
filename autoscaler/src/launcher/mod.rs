//! The edge towards a machine once it runs: putting a sidecar on it, asking whether the sidecar
//! still runs, stopping it. [`SshLauncher`] does this over SSH with the pool's
//! [`Injector`](crate::inject::Injector); `fake::FakeLauncher` (built for tests) does it in
//! memory, so that the machine side runs in tests without an SSH server.
//!
//! An injection is one [`LaunchSession`] (one SSH connection): reach the machine, learn its host
//! key, run the ready check, then start the sidecar with a token minted for that machine. The
//! controller decides between the steps (it pins the host key, marks the machine reachable and
//! mints the token), so the steps are separate calls.
//!
//! [`UserDataLauncher`] starts sidecars without SSH: before `create`, it mints the machine's
//! own sidecar token and writes a bootstrap script that the provisioner hands the machine as
//! its user-data ([`SidecarLauncher::prepare`]).

#[cfg(test)]
pub mod fake;
mod ssh;
mod user_data;

use std::time::Duration;

use futures::future::BoxFuture;

pub use self::ssh::SshLauncher;
pub use self::user_data::UserDataLauncher;
use crate::core::SidecarId;
use crate::inject::InjectError;
use crate::secret::Secret;
use crate::store::MachineRecord;

/// Where a machine is and how it proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchTarget {
    pub machine_id: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    /// `type base64` of the host key the machine must present; `None` accepts the first one seen
    /// (the controller then pins it).
    pub host_key: Option<String>,
}

impl LaunchTarget {
    /// How to reach machine `m`, when the provider has said where it is.
    pub fn of(m: &MachineRecord) -> Option<Self> {
        let endpoint = m.endpoint.as_ref()?;
        Some(Self {
            machine_id: m.id.clone(),
            host: endpoint.host.clone(),
            port: endpoint.port,
            user: endpoint.user.clone(),
            host_key: m.host_key.as_ref().map(|h| h.key.clone()),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Inject(#[from] InjectError),
    /// A launcher without SSH (or a test's fake) refused a step.
    #[error("{step}: {detail}")]
    Refused { step: &'static str, detail: String },
    #[error("cannot register the machine's sidecar: {0}")]
    Register(#[from] crate::store::StoreError),
}

/// A sidecar made ready before its machine exists: registered (its token minted for that
/// machine) and written into the machine's user-data.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub sidecar: SidecarId,
    /// The bootstrap script; it carries the token.
    pub user_data: Secret,
}

pub type Result<T> = std::result::Result<T, LaunchError>;

/// One open way into one machine.
pub trait LaunchSession: Send + Sync {
    /// The host key the machine presented.
    fn host_key(&self) -> &str;
    /// The pool's ready command (if any) succeeded on the machine.
    fn ready(&self) -> BoxFuture<'_, Result<()>>;
    /// Installs and starts the sidecar named `name` with `token`; returns its process id.
    fn start<'a>(&'a self, name: &'a str, token: &'a Secret) -> BoxFuture<'a, Result<String>>;
    /// Ends the session (the sidecar keeps running).
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// How a pool's machines get and lose their sidecars.
pub trait SidecarLauncher: Send + Sync + std::fmt::Debug + 'static {
    /// Reaches the machine, retrying while it boots, for at most `within`. A host key that
    /// does not match is never retried.
    fn open<'a>(
        &'a self,
        target: &'a LaunchTarget,
        within: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn LaunchSession>>>;

    /// Whether the machine's sidecar process still runs (asked when it falls silent).
    fn alive<'a>(
        &'a self,
        target: &'a LaunchTarget,
        within: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Asks the sidecar to stop before its machine is destroyed.
    fn stop<'a>(&'a self, target: &'a LaunchTarget, within: Duration) -> BoxFuture<'a, Result<()>>;

    /// Whether the autoscaler connects to the machines (to start, probe and stop sidecars).
    /// When not, the machine starts its sidecar from user-data and a silent machine is judged
    /// by the provider's `status`.
    fn connects(&self) -> bool {
        true
    }

    /// Before `create`: the sidecar of machine `machine_id`, for launchers whose machines
    /// start it at boot (`None` for the others).
    fn prepare<'a>(&'a self, machine_id: &'a str) -> BoxFuture<'a, Result<Option<Prepared>>> {
        let _ = machine_id;
        Box::pin(async { Ok(None) })
    }
}
