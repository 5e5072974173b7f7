//! A launcher in memory: it records what it was asked to do and fails where told to, so that
//! the controller runs in tests without machines or an SSH server.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{LaunchError, LaunchSession, LaunchTarget, Result, SidecarLauncher};
use crate::secret::Secret;

/// A sidecar the fake started.
#[derive(Debug, Clone)]
pub struct Launched {
    pub machine_id: String,
    pub name: String,
    pub token: String,
}

#[derive(Debug, Default)]
struct State {
    launched: Vec<Launched>,
    stopped: Vec<String>,
    unreachable: HashSet<String>,
    /// Machines not yet asked about that will be unreachable when first asked about.
    next_unreachable: usize,
    /// Machines asked about so far.
    seen: HashSet<String>,
    dead: HashSet<String>,
}

#[derive(Debug, Default, Clone)]
pub struct FakeLauncher {
    state: Arc<Mutex<State>>,
}

impl FakeLauncher {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opening a session to `machine` fails from now on.
    pub fn make_unreachable(&self, machine: &str) {
        self.lock().unreachable.insert(machine.to_string());
    }

    /// The next `n` machines the launcher is first asked to reach are unreachable (for
    /// machines whose injection starts before a test learns their ids).
    pub fn make_next_unreachable(&self, n: usize) {
        self.lock().next_unreachable = n;
    }

    /// The sidecar of `machine` is reported as not running.
    pub fn kill_sidecar(&self, machine: &str) {
        self.lock().dead.insert(machine.to_string());
    }

    pub fn launched(&self) -> Vec<Launched> {
        self.lock().launched.clone()
    }

    pub fn stopped(&self) -> Vec<String> {
        self.lock().stopped.clone()
    }

    /// The host key `machine` presents (made up from its id).
    pub fn host_key_of(machine: &str) -> String {
        format!("ssh-ed25519 FAKE-{machine}")
    }

    fn check_reachable(&self, target: &LaunchTarget, step: &'static str) -> Result<()> {
        let mut state = self.lock();
        if state.seen.insert(target.machine_id.clone()) && state.next_unreachable > 0 {
            state.next_unreachable -= 1;
            state.unreachable.insert(target.machine_id.clone());
        }
        if state.unreachable.contains(&target.machine_id) {
            return Err(LaunchError::Refused {
                step,
                detail: format!("{} is unreachable", target.machine_id),
            });
        }
        let presented = Self::host_key_of(&target.machine_id);
        match &target.host_key {
            Some(expected) if *expected != presented => Err(LaunchError::Refused {
                step,
                detail: format!("host key mismatch: expected {expected}, got {presented}"),
            }),
            _ => Ok(()),
        }
    }
}

struct FakeSession {
    launcher: FakeLauncher,
    machine_id: String,
    host_key: String,
}

impl LaunchSession for FakeSession {
    fn host_key(&self) -> &str {
        &self.host_key
    }

    fn ready(&self) -> BoxFuture<'_, Result<()>> {
        async { Ok(()) }.boxed()
    }

    fn start<'a>(&'a self, name: &'a str, token: &'a Secret) -> BoxFuture<'a, Result<String>> {
        async move {
            let mut state = self.launcher.lock();
            state.dead.remove(&self.machine_id);
            state.launched.push(Launched {
                machine_id: self.machine_id.clone(),
                name: name.to_string(),
                token: token.expose().to_string(),
            });
            Ok(state.launched.len().to_string())
        }
        .boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

impl SidecarLauncher for FakeLauncher {
    fn open<'a>(
        &'a self,
        target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn LaunchSession>>> {
        async move {
            self.check_reachable(target, "connecting")?;
            Ok(Box::new(FakeSession {
                launcher: self.clone(),
                machine_id: target.machine_id.clone(),
                host_key: Self::host_key_of(&target.machine_id),
            }) as Box<dyn LaunchSession>)
        }
        .boxed()
    }

    fn alive<'a>(
        &'a self,
        target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        async move {
            self.check_reachable(target, "probing")?;
            Ok(!self.lock().dead.contains(&target.machine_id))
        }
        .boxed()
    }

    fn stop<'a>(
        &'a self,
        target: &'a LaunchTarget,
        _within: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            self.check_reachable(target, "stopping")?;
            self.lock().stopped.push(target.machine_id.clone());
            Ok(())
        }
        .boxed()
    }
}
