//! The edge towards the infrastructure: provisioner scripts speaking protocol v1
//! (`api-spec/provisioner.md`).
//!
//! [`Provisioner`] has the script implementation ([`ScriptProvisioner`], the only place the
//! autoscaler starts processes) and an in-memory fake for tests of the layers above.

pub mod check;
mod protocol;
mod script;

#[cfg(test)]
pub mod fake;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;

/// Per-verb time limits, read from the configuration.
pub use crate::config::Timeouts;

pub use protocol::{
    Capabilities, CreateItem, CreateRequest, Created, Destroyed, Info, Interruption, ListedMachine,
    StartAnswer, Status, StopAnswer,
};
pub use script::{RawCall, ScriptProvisioner};

/// Labels as the protocol carries them.
pub type Labels = BTreeMap<String, String>;

/// Why a provisioner call failed. Each maps to one retry behaviour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionerError {
    /// Exit 75: rate limited, quota, capacity. Retried later.
    #[error("provisioner asks to retry later: {message}")]
    RetryLater {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Exit 78: will fail again if repeated.
    #[error("provisioner failed permanently: {message}")]
    Permanent { message: String },
    /// Any other exit (or a signal).
    #[error("provisioner failed ({exit}): {message}")]
    Failed { exit: String, message: String },
    #[error("provisioner did not finish within {0:?}; its process group was killed")]
    TimedOut(Duration),
    #[error("provisioner answered nonsense: {0}")]
    InvalidResponse(String),
    #[error("provisioner printed more than {0} bytes on stdout; its process group was killed")]
    OutputTooLarge(usize),
    #[error("cannot run the provisioner: {0}")]
    Spawn(String),
}

impl ProvisionerError {
    pub fn is_permanent(&self) -> bool {
        matches!(self, ProvisionerError::Permanent { .. })
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProvisionerError::RetryLater { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ProvisionerError>;

/// A pool's infrastructure, as the autoscaler sees it.
pub trait Provisioner: Send + Sync + std::fmt::Debug + 'static {
    fn info(&self) -> BoxFuture<'_, Result<Info>>;
    fn create(&self, request: CreateRequest) -> BoxFuture<'_, Result<Vec<Created>>>;
    fn list(&self, labels: Labels) -> BoxFuture<'_, Result<Vec<ListedMachine>>>;
    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Status>>;
    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Destroyed>>;
    /// Stops a machine, keeping its id, labels and disk. Only a provisioner whose `info`
    /// declares `stop_start` answers it; others refuse it as an unknown verb.
    fn stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StopAnswer>>;
    /// Starts a stopped machine again; it may come back with a new address (ask `status`).
    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StartAnswer>>;
}
