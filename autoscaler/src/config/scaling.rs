//! `[pools.scaling]`: how many machines a pool keeps and when it asks GitLab for jobs, and the
//! part of it (with `[[pools.policy]]`) that a reload may replace while the pool runs.

use std::time::Duration;

use super::reader::Section;
use super::values;
use super::values::duration_or;
use crate::core::scaler::{ScaleFactorCounts, ScalePolicy, Strategy};
use crate::core::schedule::PolicyEntry;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intake {
    /// Ask GitLab for a job only while a sidecar waits for one (fast start, needs idle
    /// capacity).
    Preemptive,
    /// Ask GitLab while the pool has room to run more jobs, and make machines for them.
    OnDemand,
    /// Preemptive for the sidecars that wait, plus at most `hybrid_ahead` jobs taken ahead of
    /// any sidecar, for which machines are made: idle machines start jobs at once, and a burst
    /// starts machines without letting the pool take more of GitLab's queue than it can start
    /// soon (other runners may take the rest).
    Hybrid,
}

impl Intake {
    /// The mode as the configuration spells it (`intake = "on_demand"`), for the admin API.
    pub fn name(self) -> &'static str {
        match self {
            Self::Preemptive => "preemptive",
            Self::OnDemand => "on_demand",
            Self::Hybrid => "hybrid",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ScalingConfig {
    pub max_machines: u32,
    pub capacity_per_machine: u32,
    /// Idle job slots to keep ready.
    pub idle_count: u32,
    /// How long a machine may stay idle before it is removed (unless needed for `idle_count`).
    pub idle_time: Duration,
    /// Jobs a machine runs before it is replaced; 0 is unlimited.
    pub max_use_count: u32,
    /// How old a machine may grow before it is drained and replaced; `None` is unlimited.
    pub max_age: Option<Duration>,
    /// Extra idle slots as a multiple of the slots in use (taskscaler's `scale_factor`).
    pub scale_factor: f64,
    /// Most idle slots `scale_factor` may ask for; 0 is no limit.
    pub scale_factor_limit: u32,
    /// Which jobs `scale_factor` multiplies (here and in every `[[pools.policy]]` entry).
    pub scale_factor_counts: ScaleFactorCounts,
    pub intake: Intake,
    /// `hybrid` intake: most jobs held waiting for a machine at once.
    pub hybrid_ahead: u32,
    /// How free capacity is decided: `demand` (ahead of demand; the default when no idle
    /// setting is written in `[pools.scaling]`) or `idle` (taskscaler's idle target and
    /// `idle_time`). `[[pools.policy]]` entries never choose it: under `demand` they are floors.
    pub strategy: Strategy,
    /// Why the pool runs `strategy`, in the operator's words (`check-config` prints it).
    pub strategy_chosen_by: &'static str,
    /// Machines are paid for by this period from their creation: an idle machine that is not
    /// needed goes near the end of a paid period. `None`: by the second.
    pub billing_period: Option<Duration>,
    /// How long a job taken from GitLab may wait for a machine before it is failed.
    pub acquire_timeout: Duration,
    /// Destroy the pool's machines when the autoscaler shuts down (default: keep them for the
    /// next start, so that running jobs continue).
    pub delete_on_shutdown: bool,
    /// Demand-aware: the p95 wait asked for, from which the free slots held are sized.
    pub target_wait: Duration,
    /// Warm pool: stopped machines kept at least (machines that keep their disk and start in a
    /// fraction of a boot).
    pub stopped_count: u32,
    /// Warm pool: stopped machines kept at most; with `stopped_count` 0 too, none (default).
    pub max_stopped: u32,
    /// Warm pool: what a machine of the pool costs per hour running, and stopped (its disk).
    /// Given together; the planner uses only their ratio, so any currency does.
    pub prices: Option<Prices>,
}

/// A pool's machine prices per hour, running and stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub per_hour: f64,
    pub stopped_per_hour: f64,
}

/// The part of a pool's configuration that a reload may replace while the pool runs: its
/// `[pools.scaling]` settings and `[[pools.policy]]` entries, swapped as one value so that a
/// reader never sees one half old and the other new.
#[derive(Debug, Clone)]
pub struct PoolPolicy {
    pub scaling: ScalingConfig,
    pub policies: Vec<PolicyEntry>,
}

/// A pool's policy in force, shared by everything that reads it (the planner, the slot gate,
/// the intake, the metrics) and replaced whole by a configuration reload.
pub type PolicyCell = arc_swap::ArcSwap<PoolPolicy>;

impl PoolPolicy {
    /// When the pool asks GitLab for jobs: a static pool only for waiting sidecars.
    pub fn intake(&self, static_pool: bool) -> Intake {
        if static_pool {
            Intake::Preemptive
        } else {
            self.scaling.intake
        }
    }
}

impl ScalingConfig {
    /// The settings the planner works with (before a `[[pools.policy]]` entry's idle settings).
    pub fn scale_policy(&self) -> ScalePolicy {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ScalePolicy {
            max_machines: self.max_machines,
            capacity_per_machine: self.capacity_per_machine,
            idle_count: self.idle_count,
            idle_time: ms(self.idle_time),
            max_use_count: self.max_use_count,
            max_age: self.max_age.map_or(0, ms),
            scale_factor: self.scale_factor,
            scale_factor_limit: self.scale_factor_limit,
            scale_factor_counts: self.scale_factor_counts,
            strategy: self.strategy,
            billing_period: self.billing_period.map_or(0, ms),
            target_wait: ms(self.target_wait),
            stopped_count: self.stopped_count,
            max_stopped: self.max_stopped,
            stopped_price_share: self.prices.map(|p| p.stopped_per_hour / p.per_hour),
        }
    }
}

impl Default for ScalingConfig {
    fn default() -> Self {
        Self {
            max_machines: 10,
            capacity_per_machine: 1,
            idle_count: 0,
            idle_time: Duration::from_secs(600),
            max_use_count: 0,
            max_age: None,
            scale_factor: 0.0,
            scale_factor_limit: 0,
            scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
            intake: Intake::OnDemand,
            hybrid_ahead: 4,
            strategy: Strategy::Demand,
            strategy_chosen_by: STRATEGY_BY_DEFAULT,
            billing_period: None,
            acquire_timeout: Duration::from_secs(900),
            delete_on_shutdown: false,
            target_wait: DEFAULT_TARGET_WAIT,
            stopped_count: 0,
            max_stopped: 0,
            prices: None,
        }
    }
}

const STRATEGY_BY_DEFAULT: &str = "the default";

/// Half a typical cloud boot (30-90 s): most jobs start at once, and those that find no slot
/// wait for a machine no longer than the boot they would have waited without any buffer.
const DEFAULT_TARGET_WAIT: Duration = Duration::from_secs(30);

/// `[pools.scaling]` and `[[pools.policy]]` of the pool (or policy file) `s`. Policy entries
/// do not change the strategy: adding a schedule of floors to a demand-aware pool must not
/// silently swap its whole scaling rule for taskscaler's (write `strategy = "idle"` for that).
pub(crate) fn read_scaling_and_policies(
    s: &Section<'_>,
) -> (ScalingConfig, Vec<Option<PolicyEntry>>) {
    let scaling = s.table("scaling").map(read_scaling).unwrap_or_default();
    let policies = super::policy::read_policies(s.tables("policy"));
    (scaling, policies)
}

/// The pool's scaling settings.
fn read_scaling(s: Section<'_>) -> ScalingConfig {
    let d = ScalingConfig::default();
    let max_machines: u32 = s.or("max_machines", d.max_machines);
    if !(1..=100_000).contains(&max_machines) {
        s.problem("max_machines", "must be between 1 and 100000");
    }
    let capacity_per_machine: u32 = s.or("capacity_per_machine", d.capacity_per_machine);
    if !(1..=1000).contains(&capacity_per_machine) {
        s.problem("capacity_per_machine", "must be between 1 and 1000");
    }
    let idle_count: u32 = s.or("idle_count", d.idle_count);
    let intake = s.or(
        "intake",
        if idle_count > 0 {
            Intake::Preemptive
        } else {
            Intake::OnDemand
        },
    );
    if intake == Intake::Preemptive && idle_count == 0 {
        s.problem(
            "intake",
            "preemptive intake needs idle_count > 0, or no job would ever be asked for",
        );
    }
    let (scale_factor, scale_factor_limit) = super::policy::read_scale_factor(&s, idle_count);
    let wrote_idle_policy = ["idle_count", "scale_factor", "scale_factor_limit"]
        .iter()
        .any(|k| s.has(k));
    let named: Option<Strategy> = s.optional("strategy");
    let (strategy, strategy_chosen_by) = match named {
        Some(strategy) => (strategy, "written"),
        None if wrote_idle_policy => (
            Strategy::Idle,
            "idle_count, scale_factor or scale_factor_limit written in [pools.scaling] without a strategy",
        ),
        None => (Strategy::Demand, STRATEGY_BY_DEFAULT),
    };
    let billing_period = s.parsed("billing_period", values::duration);
    if billing_period.is_some_and(|p| p < Duration::from_secs(60)) {
        s.problem(
            "billing_period",
            "must be at least 1m (per-second billing: leave it out)",
        );
    }
    let scaling = ScalingConfig {
        max_machines,
        capacity_per_machine,
        idle_count,
        idle_time: duration_or(&s, "idle_time", d.idle_time),
        max_use_count: s.or("max_use_count", d.max_use_count),
        max_age: s.parsed("max_age", values::duration),
        scale_factor,
        scale_factor_limit,
        scale_factor_counts: s.or("scale_factor_counts", d.scale_factor_counts),
        intake,
        hybrid_ahead: read_hybrid_ahead(&s, intake, d.hybrid_ahead),
        strategy,
        strategy_chosen_by,
        billing_period,
        acquire_timeout: read_acquire_timeout(&s, d.acquire_timeout),
        delete_on_shutdown: s.or("delete_on_shutdown", d.delete_on_shutdown),
        target_wait: read_target_wait(&s, strategy, d.target_wait),
        stopped_count: s.or("stopped_count", d.stopped_count),
        max_stopped: s.or("max_stopped", d.max_stopped),
        prices: read_prices(&s),
    };
    if s.has("max_stopped") && scaling.stopped_count > scaling.max_stopped {
        s.problem("stopped_count", "must not be above max_stopped");
    }
    s.finish();
    scaling
}

/// `price_per_hour` and `stopped_price_per_hour`: both or neither, and only for a warm pool
/// (nothing else reads them).
fn read_prices(s: &Section<'_>) -> Option<Prices> {
    let per_hour: Option<f64> = s.optional("price_per_hour");
    let stopped_per_hour: Option<f64> = s.optional("stopped_price_per_hour");
    let warm_pool = s.has("stopped_count") || s.has("max_stopped");
    for (key, given) in [
        ("price_per_hour", per_hour.is_some()),
        ("stopped_price_per_hour", stopped_per_hour.is_some()),
    ] {
        if given && !warm_pool {
            s.problem(
                key,
                "only applies to a warm pool (stopped_count, max_stopped)",
            );
        }
    }
    if per_hour.is_some_and(|p| !(p > 0.0 && p.is_finite())) {
        s.problem("price_per_hour", "must be above 0");
    }
    if stopped_per_hour.is_some_and(|p| !(p >= 0.0 && p.is_finite())) {
        s.problem("stopped_price_per_hour", "must not be negative");
    }
    match (per_hour, stopped_per_hour) {
        (Some(per_hour), Some(stopped_per_hour)) => Some(Prices {
            per_hour,
            stopped_per_hour,
        }),
        (None, None) => None,
        (Some(_), None) => {
            s.problem("stopped_price_per_hour", "is needed with price_per_hour");
            None
        }
        (None, Some(_)) => {
            s.problem("price_per_hour", "is needed with stopped_price_per_hour");
            None
        }
    }
}

fn read_target_wait(s: &Section<'_>, strategy: Strategy, default: Duration) -> Duration {
    let target = duration_or(s, "target_wait", default);
    if s.has("target_wait") && strategy != Strategy::Demand {
        s.problem("target_wait", "only applies to strategy = \"demand\"");
    }
    if target > Duration::from_secs(3600) {
        s.problem("target_wait", "must be at most 1h");
    }
    target
}

fn read_hybrid_ahead(s: &Section<'_>, intake: Intake, default: u32) -> u32 {
    let ahead: u32 = s.or("hybrid_ahead", default);
    if s.has("hybrid_ahead") && intake != Intake::Hybrid {
        s.problem("hybrid_ahead", "only applies to intake = \"hybrid\"");
    }
    if intake == Intake::Hybrid && !(1..=10_000).contains(&ahead) {
        s.problem("hybrid_ahead", "must be between 1 and 10000");
    }
    ahead
}

/// GitLab fails a running job 15 minutes after its own timeout, counted from when it became
/// running (runner-protocol.md §4). Where GitLab runs a job from hand-out (no two-phase commit),
/// the wait for a machine counts, so a longer wait could get a job that succeeds failed.
const GITLAB_RUNNING_MARGIN: Duration = Duration::from_secs(15 * 60);

fn read_acquire_timeout(s: &Section<'_>, default: Duration) -> Duration {
    let timeout = duration_or(s, "acquire_timeout", default);
    if timeout > GITLAB_RUNNING_MARGIN {
        s.problem(
            "acquire_timeout",
            "must be at most 15m: GitLab fails a running job 15 minutes after its timeout, and where it runs jobs from hand-out the wait for a machine counts",
        );
    }
    timeout
}

#[cfg(test)]
#[path = "target_wait_tests.rs"]
mod target_wait_tests;
