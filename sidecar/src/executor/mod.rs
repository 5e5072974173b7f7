//! The shell executor: script generation ([`script`]), running a stage in its own
//! process group ([`process`]) and the interrupt levels that stop stages.

pub mod process;
pub mod script;
pub mod user;

use std::sync::Arc;

use tokio::sync::watch;

/// What the job has been told to do, in increasing severity. Levels only escalate.
///
/// * `Cancel`: `Job-Status: canceling` (runner-protocol.md §6) — stop the script, still run
///   after_script and on_failure/always artifacts.
/// * `Abort`: 403 / `Job-Status: canceled|failed` — kill everything, no after_script.
/// * `Shutdown`: second termination signal to the sidecar — kill everything, report
///   `runner_system_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Interrupt {
    None,
    Cancel,
    Abort,
    Shutdown,
}

/// Shared, escalate-only interrupt state of one job.
#[derive(Debug, Clone)]
pub struct Interrupts {
    tx: Arc<watch::Sender<Interrupt>>,
}

impl Default for Interrupts {
    fn default() -> Self {
        Self::new()
    }
}

impl Interrupts {
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::Sender::new(Interrupt::None)),
        }
    }

    /// Raise to `level` unless already at or above it.
    pub fn raise(&self, level: Interrupt) {
        self.tx.send_if_modified(|current| {
            if level > *current {
                tracing::debug!(?level, "job interrupt raised");
                *current = level;
                true
            } else {
                false
            }
        });
    }

    pub fn current(&self) -> Interrupt {
        *self.tx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Interrupt> {
        self.tx.subscribe()
    }

    /// Resolves once the level is at least `level`.
    pub async fn reached(&self, level: Interrupt) {
        let mut rx = self.subscribe();
        // The sender lives in `self`, so the wait can only end by reaching the level.
        let _ = rx.wait_for(|current| *current >= level).await;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot start bash: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("waiting for the script failed: {0}")]
    Wait(#[source] std::io::Error),
    #[error("cannot write the stage script: {0}")]
    Script(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_only_escalate() {
        let i = Interrupts::new();
        assert_eq!(i.current(), Interrupt::None);
        i.raise(Interrupt::Abort);
        i.raise(Interrupt::Cancel);
        assert_eq!(i.current(), Interrupt::Abort);
        i.raise(Interrupt::Shutdown);
        assert_eq!(i.current(), Interrupt::Shutdown);
    }

    #[tokio::test]
    async fn reached_resolves_when_raised() {
        let i = Interrupts::new();
        let waiter = {
            let i = i.clone();
            tokio::spawn(async move { i.reached(Interrupt::Cancel).await })
        };
        i.raise(Interrupt::Cancel);
        waiter.await.unwrap();
    }
}
