//! When the listener's certificate is read again: on SIGHUP, and when the modification time of
//! the certificate or key file changes (checked every [`RELOAD_CHECK_INTERVAL`]). A reload that
//! fails keeps the old certificate and is logged once, naming the file; the same files are not
//! tried again until they change or another SIGHUP comes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::CertStore;

pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Reloads `store` on SIGHUP or a change of its files until `stop`.
pub async fn watch(store: Arc<CertStore>, stop: CancellationToken) {
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; certificates reload on file changes only");
            None
        }
    };
    let mut seen = store.files().modified();
    let mut tick = tokio::time::interval(RELOAD_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let trigger = tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => "file change",
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => "SIGHUP",
        };
        let now = store.files().modified();
        if trigger == "file change" && (now.is_none() || now == seen) {
            continue;
        }
        seen = now;
        reload(&store, trigger, now);
    }
}

fn reload(store: &CertStore, trigger: &'static str, modified: Option<SystemTime>) {
    let files = store.files();
    let _span = tracing::info_span!(
        "tls_reload",
        certificate = %files.certificate.display(),
        key = %files.key.display(),
        trigger
    )
    .entered();
    match store.reload() {
        Ok(()) => tracing::info!(
            ?modified,
            "TLS certificate reloaded; new connections get it"
        ),
        Err(e) => {
            tracing::error!(error = %e, "TLS certificate not reloaded; the old one is still served")
        }
    }
}
