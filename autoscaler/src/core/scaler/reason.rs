//! The reason code of every decision the planner makes.

use serde::Serialize;

/// Why a machine is made or retired. Shown in logs and the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Jobs wait and the free slots do not cover them.
    WaitingJobs,
    /// The idle target (`idle_count`, `scale_factor`) asks for more free slots.
    IdleTarget,
    /// Idle longer than `idle_time` and not needed for the idle target.
    IdleTimeout,
    /// Ran `max_use_count` jobs.
    MaxUse,
    /// Older than `max_age`.
    MaxAge,
    /// Drained and now idle.
    Drained,
    /// Nothing to do.
    Steady,
    /// Machines are wanted but the provisioner is paused (its circuit breaker is open).
    ProvisionerPaused,
    /// Demand-aware: recent arrivals say jobs will come faster than machines can be made.
    DemandForecast,
    /// Demand-aware: pipelines in flight will soon make their next stage's jobs pending.
    PipelineForecast,
    /// Demand-aware: GitLab reports more jobs queued for this runner.
    GitlabQueue,
    /// Demand-aware: idle, and the forecast no longer needs it.
    DemandFell,
    /// Idle and not needed, at the end of the period already paid for.
    BillingPeriodEnd,
    /// Warm pool: free slots fall short and a stopped machine is started before one is made.
    StartStopped,
    /// Warm pool: idle and not needed, stopped instead of destroyed (the stopped pool is
    /// below its target).
    StopIdle,
    /// Warm pool: stopped, and the stopped pool is above its target or `max_stopped`.
    StoppedTarget,
    /// Warm pool: stopped, and older than `max_age` or past `max_use_count`: replaced.
    StoppedExpired,
    /// Warm pool with prices: stopped and unused for longer than keeping it pays.
    StoppedUnused,
}

impl Reason {
    /// The code logs, metrics and the admin API use (`waiting_jobs`, `idle_timeout`, ...).
    pub fn code(self) -> &'static str {
        match self {
            Reason::WaitingJobs => "waiting_jobs",
            Reason::IdleTarget => "idle_target",
            Reason::IdleTimeout => "idle_timeout",
            Reason::MaxUse => "max_use",
            Reason::MaxAge => "max_age",
            Reason::Drained => "drained",
            Reason::Steady => "steady",
            Reason::ProvisionerPaused => "provisioner_paused",
            Reason::DemandForecast => "demand_forecast",
            Reason::PipelineForecast => "pipeline_forecast",
            Reason::GitlabQueue => "gitlab_queue",
            Reason::DemandFell => "demand_fell",
            Reason::BillingPeriodEnd => "billing_period_end",
            Reason::StartStopped => "start_stopped",
            Reason::StopIdle => "stop_idle",
            Reason::StoppedTarget => "stopped_target",
            Reason::StoppedExpired => "stopped_expired",
            Reason::StoppedUnused => "stopped_unused",
        }
    }
}
