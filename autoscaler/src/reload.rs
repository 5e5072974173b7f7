//! The configuration file read again on `SIGHUP` (`systemctl reload`), with the same reader
//! and checks as at start. A file with problems changes nothing: each problem is logged with
//! its key path. A file that changes only pools' scaling policies (`config::reload` says which
//! keys those are) is put in force at once, each pool's policy swapped whole; the planner picks
//! it up at its next pass and, as for a period change, never destroys a busy machine. A file
//! that changes anything else is refused whole, naming every key that needs a restart, and the
//! old configuration stays. Jobs are never touched by a reload.
//!
//! Each reload gives one log line with its outcome, counts in
//! `autoscaler_config_reloads_total{outcome}`, and shows in the admin API's `GET /status`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::reload::{Change, compare};
use crate::config::{Config, ConfigError};
use crate::metrics::Metrics;
use crate::pools::Pool;

/// What the admin API shows of the configuration in force.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConfigStatus {
    /// 1 at start, one more for each reload that changed something.
    pub generation: u64,
    /// The latest reload, whatever its outcome (`None`: none since start).
    #[serde(default)]
    pub last_reload: Option<ReloadReport>,
}

/// One reload: when, its outcome, and the keys it concerned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReloadReport {
    /// When the file was read (ms since the epoch).
    pub at: u64,
    /// `applied`, `unchanged`, `refused` or `invalid` (see `metrics::RELOAD_OUTCOMES`).
    pub outcome: String,
    /// `applied`: each key changed, with old and new value; `refused`: each key that needs a
    /// restart; `invalid`: each problem of the file; all as `key.path: detail`.
    pub details: Vec<String>,
}

/// The addresses the listeners were bound to. A file that names them (where it named port 0
/// before, say) asks for no change.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub server: SocketAddr,
    pub admin: Option<SocketAddr>,
}

/// The configuration in force and the reloads' outcomes.
#[derive(Debug)]
pub struct Reloads {
    current: Mutex<Config>,
    bound: Bound,
    status: Mutex<ConfigStatus>,
    pools: Vec<Arc<Pool>>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

impl Reloads {
    pub fn new(
        config: Config,
        bound: Bound,
        pools: Vec<Arc<Pool>>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            current: Mutex::new(config),
            bound,
            status: Mutex::new(ConfigStatus {
                generation: 1,
                last_reload: None,
            }),
            pools,
            metrics,
            clock,
        })
    }

    pub fn status(&self) -> ConfigStatus {
        lock(&self.status).clone()
    }

    /// Reads the file again and puts what it changes in force, or nothing.
    pub async fn reload(&self) -> ReloadReport {
        let file = lock(&self.current).file.clone();
        let read = tokio::task::spawn_blocking(move || Config::load(&file, std::env::vars()));
        let loaded = match read.await {
            Ok(loaded) => loaded,
            Err(e) => Err(ConfigError {
                source_name: lock(&self.current).file.display().to_string(),
                problems: vec![crate::config::Problem {
                    path: "(file)".into(),
                    message: format!("could not be read: {e}"),
                }],
            }),
        };
        self.take(loaded)
    }

    /// Decides on a configuration just read, puts it in force if it may be, and reports.
    pub fn take(&self, loaded: Result<Config, ConfigError>) -> ReloadReport {
        let mut current = lock(&self.current);
        let (outcome, details) = match loaded {
            Err(e) => {
                for p in &e.problems {
                    tracing::error!(key = %p.path, problem = %p.message, file = %e.source_name,
                        "configuration problem; the file is not reloaded");
                }
                tracing::error!(
                    outcome = "invalid",
                    problems = e.problems.len(),
                    "configuration not reloaded: the file has problems; nothing changed"
                );
                (
                    "invalid",
                    e.problems.iter().map(ToString::to_string).collect(),
                )
            }
            Ok(mut new) => {
                self.as_bound(&current, &mut new);
                let comparison = compare(&current, &new);
                if !comparison.restart.is_empty() {
                    let details = lines(&comparison.restart);
                    tracing::warn!(outcome = "refused", restart = %details.join("; "),
                        "configuration not reloaded: these changes need a restart; the old configuration stays");
                    ("refused", details)
                } else if comparison.live.is_empty() {
                    tracing::info!(
                        outcome = "unchanged",
                        "configuration reloaded: nothing changed"
                    );
                    ("unchanged", Vec::new())
                } else {
                    let details = lines(&comparison.live);
                    self.put_in_force(&new);
                    *current = new;
                    let generation = self.next_generation();
                    tracing::info!(outcome = "applied", generation, changes = %details.join("; "),
                        "configuration reloaded; scaling policies in force now, busy machines kept");
                    ("applied", details)
                }
            }
        };
        self.metrics.config_reload(outcome, 1);
        let report = ReloadReport {
            at: self.clock.now(),
            outcome: outcome.to_string(),
            details,
        };
        lock(&self.status).last_reload = Some(report.clone());
        report
    }

    /// Listen addresses of `new` that are where the listeners are bound read as unchanged.
    fn as_bound(&self, current: &Config, new: &mut Config) {
        if new.server.listen == self.bound.server {
            new.server.listen = current.server.listen;
        }
        if let (Some(bound), Some(admin), Some(now)) =
            (self.bound.admin, new.admin.as_mut(), current.admin.as_ref())
            && admin.listen == bound
        {
            admin.listen = now.listen;
        }
    }

    fn put_in_force(&self, new: &Config) {
        for pool in &self.pools {
            if let Some(config) = new.pools.iter().find(|p| p.name == pool.name()) {
                pool.replace_policy(config.policy());
            }
        }
    }

    fn next_generation(&self) -> u64 {
        let mut status = lock(&self.status);
        status.generation += 1;
        status.generation
    }
}

fn lines(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| format!("{}: {}", c.path, c.detail))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts listening for `SIGHUP`. Called before the service announces itself, so that a
/// signal sent as soon as it listens is a reload and not the default action (exit).
pub fn hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; the configuration is not reloaded");
            None
        }
    }
}

/// Reloads on every `SIGHUP` until `stop`.
pub async fn watch(reloads: Arc<Reloads>, mut hangups: Signal, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            received = hangups.recv() => if received.is_none() { return },
        }
        let span = tracing::info_span!("config_reload", trigger = "SIGHUP");
        tracing::Instrument::instrument(reloads.reload(), span).await;
    }
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
