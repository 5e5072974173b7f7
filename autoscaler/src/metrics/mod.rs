//! Prometheus metrics, served on the admin listener at `/metrics` (OpenMetrics text).
//!
//! One [`Metrics`] is made at start and handed to every part that records something, as an
//! `Arc`: no global registry, so tests can run services side by side. Two kinds of figure:
//!
//! - **events**, recorded where they happen: provisioner calls (`provisioner/script.rs`), calls
//!   to GitLab (the `upstream::MeteredUpstream` decorator, for relayed calls and the
//!   autoscaler's own alike), requests to the mirrored API (a tower layer, `layer.rs`), scale
//!   actions (the controller's plan, through `decisions.rs`), a job's wait for a sidecar
//!   (`jobs/`), store flushes; machine creation, readiness, deletion and lifetime are read from
//!   the machines' timelines (`observe/durations.rs`), so the machine code only keeps its
//!   timeline;
//! - **levels**, counted at each scrape from the live state (`observe/levels.rs`): machines by
//!   state, job slots, jobs by phase.
//!
//! This module sits below everything that records: it knows families and labels, not jobs,
//! machines or GitLab. What reads those lives above them, in `observe/` and `upstream/`.
//!
//! Every family is listed, with its labels (declared in `labels.rs`), in the book's metrics
//! page (`docs/src/operating/metrics.md`).

mod labels;
mod layer;

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use labels::SCALE_ACTIONS;
pub use labels::{
    FAILURE_REASONS, FailureLabels, MirrorLabels, PoolLabel, ProvisionerLabels, RELOAD_OUTCOMES,
    ReloadLabel, ScaleLabels, UpstreamLabels,
};
pub use layer::record_request;

/// A histogram family whose buckets come from a plain function.
type Timings<L> = Family<L, Histogram, fn() -> Histogram>;

/// The registry and every family recorded by events.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// From the request to the provider reporting the machine running.
    pub machine_creation: Timings<PoolLabel>,
    /// From the request to the sidecar's first job request (the machine counts as capacity).
    pub machine_readiness: Timings<PoolLabel>,
    /// From the destroy decision to the provider reporting the machine gone.
    pub machine_deletion: Timings<PoolLabel>,
    /// From the request to gone.
    pub machine_lifetime: Timings<PoolLabel>,
    pub machine_failures: Family<FailureLabels, Counter>,
    pub scale_actions: Family<ScaleLabels, Counter>,
    pub provisioner_calls: Timings<ProvisionerLabels>,
    pub upstream_requests: Timings<UpstreamLabels>,
    pub mirror_requests: Timings<MirrorLabels>,
    /// The wait a user sees: from the job's pending at GitLab to the first call of the sidecar
    /// running it (the two parts below; without GitLab's part, the part here alone).
    pub job_wait: Timings<PoolLabel>,
    /// From the job's pending at GitLab to GitLab handing it to the autoscaler
    /// (`job_info.time_in_queue_seconds`, whole seconds).
    pub job_wait_in_gitlab: Timings<PoolLabel>,
    /// From GitLab's hand-over to the autoscaler to the first call of the sidecar running it.
    pub job_wait_here: Timings<PoolLabel>,
    pub store_flush: Histogram,
    /// Configuration reloads on `SIGHUP`, by outcome.
    pub config_reloads: Family<ReloadLabel, Counter>,
}

fn timings<L: Clone + std::hash::Hash + Eq>(buckets: fn() -> Histogram) -> Timings<L> {
    Family::new_with_constructor(buckets)
}

fn machine_buckets() -> Histogram {
    Histogram::new([
        1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
    ])
}

fn lifetime_buckets() -> Histogram {
    Histogram::new([
        60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
    ])
}

fn call_buckets() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

fn provisioner_buckets() -> Histogram {
    Histogram::new([
        0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

fn wait_buckets() -> Histogram {
    Histogram::new([
        0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
    ])
}

fn flush_buckets() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let metrics = Self {
            registry: Mutex::new(Registry::default()),
            machine_creation: timings(machine_buckets),
            machine_readiness: timings(machine_buckets),
            machine_deletion: timings(machine_buckets),
            machine_lifetime: timings(lifetime_buckets),
            machine_failures: Family::default(),
            scale_actions: Family::default(),
            provisioner_calls: timings(provisioner_buckets),
            upstream_requests: timings(call_buckets),
            mirror_requests: timings(call_buckets),
            job_wait: timings(wait_buckets),
            job_wait_in_gitlab: timings(wait_buckets),
            job_wait_here: timings(wait_buckets),
            store_flush: flush_buckets(),
            config_reloads: Family::default(),
        };
        for outcome in RELOAD_OUTCOMES {
            metrics.config_reload(outcome, 0);
        }
        metrics.register_families();
        metrics
    }

    fn register_families(&self) {
        let mut r = self.lock();
        r.register(
            "autoscaler_machine_creation_seconds",
            "From a machine's request to the provider reporting it running",
            self.machine_creation.clone(),
        );
        r.register(
            "autoscaler_machine_readiness_seconds",
            "From a machine's request to its sidecar's first job request (capacity from then on)",
            self.machine_readiness.clone(),
        );
        r.register(
            "autoscaler_machine_deletion_seconds",
            "From the decision to destroy a machine to the provider reporting it gone",
            self.machine_deletion.clone(),
        );
        r.register(
            "autoscaler_machine_lifetime_seconds",
            "From a machine's request to its being gone",
            self.machine_lifetime.clone(),
        );
        r.register(
            "autoscaler_machine_failures",
            "Machines that failed, by reason: failed (unreachable, injection failed, sidecar lost, provider says failed), vanished (gone at the provider without a destroy), create_lost",
            self.machine_failures.clone(),
        );
        r.register(
            "autoscaler_scale_actions",
            "Scale actions taken, by action and the planner's reason code",
            self.scale_actions.clone(),
        );
        r.register(
            "autoscaler_provisioner_call_seconds",
            "Provisioner calls, by verb and exit class, and how long each took",
            self.provisioner_calls.clone(),
        );
        r.register(
            "autoscaler_upstream_request_seconds",
            "Calls to GitLab (relayed and the autoscaler's own) until GitLab's answer headers, by endpoint and outcome",
            self.upstream_requests.clone(),
        );
        r.register(
            "autoscaler_mirror_request_seconds",
            "Requests to the mirrored runner API until the answer headers, by route and status",
            self.mirror_requests.clone(),
        );
        r.register(
            "autoscaler_job_wait_seconds",
            "From a job's pending at GitLab to the first call of the sidecar that runs it (the sum of the two parts below)",
            self.job_wait.clone(),
        );
        r.register(
            "autoscaler_job_wait_gitlab_seconds",
            "From a job's pending at GitLab to GitLab handing it to the autoscaler (job_info.time_in_queue_seconds)",
            self.job_wait_in_gitlab.clone(),
        );
        r.register(
            "autoscaler_job_wait_here_seconds",
            "From GitLab handing a job to the autoscaler to the first call of the sidecar that runs it",
            self.job_wait_here.clone(),
        );
        r.register(
            "autoscaler_store_flush_seconds",
            "Flushes of the store to disk (one per group of writers)",
            self.store_flush.clone(),
        );
        r.register(
            "autoscaler_config_reloads",
            "Configuration reloads on SIGHUP, by outcome",
            self.config_reloads.clone(),
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds figures counted from live state at every scrape (`observe::Levels`).
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        self.lock().register_collector(collector);
    }

    /// Everything, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.lock()) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }

    /// Makes every series of `pool` exist at zero, so that the first event of each kind is an
    /// increase Prometheus sees (`increase()` misses a series' first sample).
    pub fn register_pool(&self, pool: &str) {
        let label = PoolLabel {
            pool: pool.to_string(),
        };
        for family in [
            &self.machine_creation,
            &self.machine_readiness,
            &self.machine_deletion,
            &self.machine_lifetime,
            &self.job_wait,
            &self.job_wait_in_gitlab,
            &self.job_wait_here,
        ] {
            drop(family.get_or_create(&label));
        }
        for reason in FAILURE_REASONS {
            self.machine_failure(pool, reason, 0);
        }
        for (action, reasons) in SCALE_ACTIONS {
            for reason in reasons {
                self.scale_action(pool, action, reason.code(), 0);
            }
        }
    }

    /// Counts `n` machine failures of `pool` for `reason` (one of [`FAILURE_REASONS`]).
    pub fn machine_failure(&self, pool: &str, reason: &str, n: u64) {
        self.machine_failures
            .get_or_create(&FailureLabels {
                pool: pool.to_string(),
                reason: reason.to_string(),
            })
            .inc_by(n);
    }

    pub fn provisioner_call(&self, pool: &str, verb: &str, exit: &str, took: Duration) {
        self.provisioner_calls
            .get_or_create(&ProvisionerLabels {
                pool: pool.to_string(),
                verb: verb.to_string(),
                exit: exit.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn scale_action(&self, pool: &str, action: &str, reason: &str, machines: u64) {
        self.scale_actions
            .get_or_create(&ScaleLabels {
                pool: pool.to_string(),
                action: action.to_string(),
                reason: reason.to_string(),
            })
            .inc_by(machines);
    }

    /// Counts `n` reloads that ended in `outcome` (one of [`RELOAD_OUTCOMES`]).
    pub fn config_reload(&self, outcome: &str, n: u64) {
        self.config_reloads
            .get_or_create(&ReloadLabel {
                outcome: outcome.to_string(),
            })
            .inc_by(n);
    }

    /// A job started on its sidecar after `at_gitlab_ms` pending at GitLab (when GitLab said)
    /// and `here_ms` in the autoscaler.
    pub fn job_waited(&self, pool: &str, at_gitlab_ms: Option<u64>, here_ms: u64) {
        let label = PoolLabel {
            pool: pool.to_string(),
        };
        let total = here_ms.saturating_add(at_gitlab_ms.unwrap_or(0));
        self.job_wait.get_or_create(&label).observe(seconds(total));
        self.job_wait_here
            .get_or_create(&label)
            .observe(seconds(here_ms));
        if let Some(ms) = at_gitlab_ms {
            self.job_wait_in_gitlab
                .get_or_create(&label)
                .observe(seconds(ms));
        }
    }
}

/// Milliseconds as seconds, for histograms.
#[allow(clippy::cast_precision_loss)] // Durations in ms stay far below 2^52.
pub fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests;
