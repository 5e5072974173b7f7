//! The label sets of the metric families, and the values some labels take from start-up
//! (every pair exists, at zero, before anything happens).

use prometheus_client::encoding::EncodeLabelSet;

use crate::core::scaler::Reason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub pool: String,
    /// One of [`FAILURE_REASONS`].
    pub reason: String,
}

/// Why a machine counts as failed: `failed` (it entered the failed state: unreachable, wrong
/// host key, injection failed, sidecar lost, the provider says failed), `vanished` (it ran, and
/// the provider reports it gone or lists it no more without a destroy from the autoscaler), or
/// `create_lost` (a create produced no machine).
pub const FAILURE_REASONS: [&str; 3] = ["failed", "vanished", "create_lost"];

/// The scale actions and the planner's reasons each is taken for: every pair exists from
/// start-up. Written as `Reason`s, so that the codes are the planner's own.
pub(super) const SCALE_ACTIONS: [(&str, &[Reason]); 6] = [
    (
        "create",
        &[
            Reason::WaitingJobs,
            Reason::IdleTarget,
            Reason::DemandForecast,
            Reason::PipelineForecast,
            Reason::GitlabQueue,
        ],
    ),
    ("blocked", &[Reason::ProvisionerPaused]),
    ("drain", &[Reason::MaxUse, Reason::MaxAge]),
    (
        "destroy",
        &[
            Reason::IdleTimeout,
            Reason::MaxUse,
            Reason::MaxAge,
            Reason::Drained,
            Reason::DemandFell,
            Reason::BillingPeriodEnd,
            Reason::StoppedTarget,
            Reason::StoppedExpired,
            Reason::StoppedUnused,
        ],
    ),
    ("start", &[Reason::StartStopped]),
    ("stop", &[Reason::StopIdle]),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScaleLabels {
    pub pool: String,
    /// `create`, `drain`, `destroy`, `start` and `stop` (the warm pool), or `blocked`
    /// (machines wanted, provisioner paused).
    pub action: String,
    /// The planner's reason code (`core::scaler::Reason`).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionerLabels {
    pub pool: String,
    pub verb: String,
    /// `ok`, `retry_later` (exit 75), `permanent` (exit 78), `failed` (any other exit or a
    /// signal), `timeout`, `invalid_response`, `output_too_large`, `spawn_error`.
    pub exit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// `relay` (a sidecar's call passed on) or `autoscaler` (its own: job requests, token
    /// checks, keep-alives, acknowledgements, spooled uploads, final states).
    pub origin: String,
    pub endpoint: String,
    /// GitLab's status code, `timeout` or `unreachable`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MirrorLabels {
    /// The route as declared, e.g. `PUT /api/v4/jobs/{id}`.
    pub endpoint: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabel {
    /// `applied`, `unchanged`, `refused` (a change needs a restart) or `invalid` (the file
    /// has problems).
    pub outcome: String,
}

/// Every outcome of a configuration reload, counted from zero.
pub const RELOAD_OUTCOMES: [&str; 4] = ["applied", "unchanged", "refused", "invalid"];
