//! `autoscaler run`: the service on a runtime of its own, the signals that stop it, and what an
//! operator reads when it stops on an error (the exit code and, for the store, what to do).

use std::process::ExitCode;

use super::{exit, report, runtime};
use crate::config::Config;
use crate::service::{self, ServiceError, Shutdown};
use crate::store::StoreError;
use crate::telemetry;

/// Runs the service until it stops; its exit code says why.
pub(super) fn run(config: Config) -> ExitCode {
    // Dropped last (after the runtime), so that every line logged is written before exit.
    let _log_writer = telemetry::init(&config.log);
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let shutdown = Shutdown::default();
        tokio::spawn(watch_signals(shutdown.clone()));
        match service::run(config, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "autoscaler stopped");
                report(&format!("autoscaler: {e}"));
                if let ServiceError::Store(store) = &e
                    && let Some(hint) = recovery_hint(store)
                {
                    report(hint);
                }
                ExitCode::from(exit_code(&e))
            }
        }
    })
}

/// What an operator can do about a store that does not open (the book's page on the state
/// directory, `docs/src/operating/state.md`, says more).
fn recovery_hint(e: &StoreError) -> Option<&'static str> {
    match e {
        StoreError::Open { .. } | StoreError::Io(_) => Some(
            "The store could not be opened or written. Fix the cause (disk full or failing, permissions, \
             another autoscaler using the same state directory) and start again; nothing was changed.",
        ),
        StoreError::Damaged { .. } | StoreError::Corrupt { .. } => Some(
            "The store is damaged, so the autoscaler refuses to start on it rather than forget what it held. \
             Either restore the state directory from a backup taken while the autoscaler was stopped, or \
             move it aside (keep it for inspection) and start again with an empty store: machines carrying \
             this autoscaler's labels are then found by the provisioners' `list` and handled by \
             `orphan_policy`, static sidecars register again, and jobs the old store held are failed by \
             GitLab as stuck. See the book: docs/src/operating/state.md.",
        ),
        StoreError::NewerSchema { .. } | StoreError::UnsupportedRecordVersion { .. } => Some(
            "The store was written by a newer autoscaler. Run that version again (downgrades are not \
             supported), or restore a backup taken before the upgrade.",
        ),
        StoreError::Encode(_) => None,
    }
}

fn exit_code(e: &ServiceError) -> u8 {
    match e {
        ServiceError::Store(StoreError::Io(_) | StoreError::Open { .. })
        | ServiceError::RecordInstanceId { .. } => exit::STORE_IO,
        ServiceError::Store(_) => exit::STORE_DATA,
        ServiceError::TokenRejected { .. } => exit::TOKEN_REJECTED,
        ServiceError::Bind { .. } => exit::UNAVAILABLE,
        ServiceError::PoolSetup { .. } | ServiceError::Tls(_) => exit::CONFIG,
        ServiceError::Upstream(_)
        | ServiceError::Serve(_)
        | ServiceError::Machines(_)
        | ServiceError::LookAhead(_) => 1,
    }
}

/// First SIGTERM/SIGINT: graceful shutdown. Second: immediate.
async fn watch_signals(shutdown: Shutdown) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let mut next = async || {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    let first = next().await;
    tracing::info!(signal = first, "shutdown requested");
    shutdown.graceful.cancel();
    let second = next().await;
    tracing::warn!(signal = second, "second signal: stopping now");
    shutdown.immediate.cancel();
}
