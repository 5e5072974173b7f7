//! `[[pools]]`: a pool's identity towards GitLab, and, for pools that scale, its provisioner,
//! its scaling policy and how sidecars are started on its machines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::reader::Section;
use super::{read_secret, resolve, values};
use crate::core::reconcile::OrphanPolicy;
use crate::core::scaler::{ScalePolicy, Strategy};
use crate::core::schedule::PolicyEntry;
use crate::provisioner::Timeouts;
use crate::secret::Secret;

/// A pool: one upstream runner identity and the sidecars that serve its jobs.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub name: String,
    /// The runner authentication token GitLab knows this pool by. Never leaves the autoscaler.
    pub upstream_token: Secret,
    /// Lets static sidecars register with `POST /api/v4/runners`.
    pub registration_token: Option<Secret>,
    /// Most job requests in flight to GitLab at once for this pool.
    pub request_concurrency: u32,
    /// How long a job handed to a sidecar may wait for its acceptance (`PUT state=running`)
    /// before it is offered to another sidecar.
    pub assign_ack_timeout: Duration,
    /// Machines made by a provisioner. Without it the pool is static: sidecars register
    /// themselves.
    pub provisioner: Option<ProvisionerConfig>,
    /// Every source of machines, in the order they are tried: `[pools.provisioner]` alone, or
    /// the `[[pools.sources]]` entries (the first is also `provisioner`).
    pub sources: Vec<ProvisionerConfig>,
    pub scaling: ScalingConfig,
    /// `[[pools.classes]]`: kinds of machine a job chooses with a CI variable (`None`: one).
    pub classes: Option<crate::core::classes::Classes>,
    /// `[[pools.policy]]`: idle settings for cron periods; the last matching entry wins over
    /// the `[pools.scaling]` ones.
    pub policies: Vec<PolicyEntry>,
    pub sidecar: Option<SidecarConfig>,
}

#[derive(Debug, Clone)]
pub struct ProvisionerConfig {
    /// The source's name (`default` for `[pools.provisioner]`), carried as the machines'
    /// `autoscaler-source` label.
    pub name: String,
    /// Most live machines from this source; beyond it, machines come from the next source.
    pub max_machines: Option<u32>,
    /// After the provider reclaims one of this source's machines (spot), new machines come
    /// from the next sources for this long.
    pub reclaim_cooldown: Option<Duration>,
    pub command: PathBuf,
    pub env: BTreeMap<String, String>,
    pub max_concurrency: usize,
    /// Machine creations per second (token bucket refill) and how many at once.
    pub create_rate: f64,
    pub create_burst: u32,
    pub orphan_policy: OrphanPolicy,
    pub timeouts: Timeouts,
    /// Longest from the create request to `running` at the provider.
    pub boot_timeout: Duration,
    pub reconcile_interval: Duration,
    pub user_data: Option<String>,
}

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
    pub intake: Intake,
    /// `hybrid` intake: most jobs held waiting for a machine at once.
    pub hybrid_ahead: u32,
    /// How free capacity is decided: `demand` (ahead of demand; the default when no idle
    /// policy is written) or `idle` (taskscaler's idle target and `idle_time`).
    pub strategy: Strategy,
    /// Machines are paid for by this period from their creation: an idle machine that is not
    /// needed goes near the end of a paid period. `None`: by the second.
    pub billing_period: Option<Duration>,
    /// How long a job taken from GitLab may wait for a machine before it is failed.
    pub acquire_timeout: Duration,
    /// Destroy the pool's machines when the autoscaler shuts down (default: keep them for the
    /// next start, so that running jobs continue).
    pub delete_on_shutdown: bool,
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

impl PoolConfig {
    /// The pool's policy as this configuration states it.
    pub fn policy(&self) -> PoolPolicy {
        PoolPolicy {
            scaling: self.scaling.clone(),
            policies: self.policies.clone(),
        }
    }
}

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
            strategy: self.strategy,
            billing_period: self.billing_period.map_or(0, ms),
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
            intake: Intake::OnDemand,
            hybrid_ahead: 4,
            strategy: Strategy::Demand,
            billing_period: None,
            acquire_timeout: Duration::from_secs(900),
            delete_on_shutdown: false,
        }
    }
}

/// How the sidecar is started on a machine.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    pub mode: SidecarMode,
    /// How the sidecar gets onto a machine.
    pub start: SidecarStart,
    /// A local file uploaded to the machine when it lacks it (checksum verified).
    pub binary: Option<PathBuf>,
    /// The sidecar's directory on the machine, relative to the login user's home.
    pub remote_dir: String,
    /// Run on the machine before the sidecar starts; a non-zero exit fails the machine.
    pub ready_command: Option<String>,
    /// From `running` at the provider to the sidecar's first poll: SSH, ready command,
    /// upload, start.
    pub ready_timeout: Duration,
    /// After a ready machine's sidecar has been silent this long, the machine is lost.
    pub silence_timeout: Duration,
    /// From where the machine's sidecar token is accepted.
    pub token_binding: super::TokenBinding,
    /// The user the built-in sidecar runs job scripts as (`None`: its own user).
    pub job_user: Option<String>,
}

/// How a pool's machines get their sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarStart {
    /// The autoscaler connects over SSH, uploads the binary and starts the sidecar.
    Ssh,
    /// The provisioner hands the machine a bootstrap script as its user-data; the machine
    /// starts its sidecar itself (no SSH from the autoscaler to the machine).
    UserData,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarMode {
    /// The project's own sidecar (`sidecar run`).
    Builtin,
    /// Stock `gitlab-runner run` with a generated `config.toml`.
    GitlabRunner {
        executor: String,
        /// TOML lines added to the generated `[[runners]]` entry (executor options).
        extra_config: String,
    },
    /// Any runner: a command template with `{url}`, `{token}`, `{concurrency}`, `{name}`,
    /// `{binary}` and `{dir}`.
    Command { template: String },
}

pub(super) fn read_pool(s: Section<'_>, base_dir: &Path) -> Option<PoolConfig> {
    let name: Option<String> = s.required("name");
    if let Some(n) = &name
        && let Err(e) = values::pool_name(n)
    {
        s.problem("name", e);
    }
    let upstream_token = read_secret(&s, "upstream_token", base_dir, true);
    let registration_token = read_secret(&s, "registration_token", base_dir, false);
    let request_concurrency: u32 = s.or("request_concurrency", 4);
    if !(1..=256).contains(&request_concurrency) {
        s.problem("request_concurrency", "must be between 1 and 256");
    }
    let assign_ack_timeout = s
        .parsed("assign_ack_timeout", values::duration)
        .unwrap_or(Duration::from_secs(120));
    let sources = super::sources::read_sources(&s, base_dir);
    let provisioner = sources.as_ref().map(|all| all.first().cloned());
    let (scaling, policies) = read_scaling_and_policies(&s);
    let classes = super::classes::read_classes(
        &s,
        sources.as_deref().unwrap_or_default(),
        scaling.capacity_per_machine,
    );
    if !policies.is_empty() && provisioner.is_none() {
        s.problem("policy", "only applies to pools with a provisioner");
    }
    let sidecar = s.table("sidecar").map(|t| read_sidecar(t, base_dir));
    match (&provisioner, &sidecar) {
        (Some(_), None) => s.problem(
            "sidecar",
            "is required with a provisioner: how is the sidecar started on a machine?",
        ),
        (None, Some(_)) => s.problem("sidecar", "only applies to pools with a provisioner"),
        _ => {}
    }
    if let (Some(Some(p)), Some(Some(c))) = (&provisioner, &sidecar)
        && c.ready_timeout + p.timeouts.status >= p.boot_timeout * 10
    {
        s.problem(
            "sidecar.ready_timeout",
            "is out of proportion with provisioner.timeouts.boot",
        );
    }
    s.finish();
    Some(PoolConfig {
        name: name?,
        upstream_token: upstream_token?,
        registration_token,
        request_concurrency,
        assign_ack_timeout,
        provisioner: provisioner.flatten(),
        sources: sources.unwrap_or_default(),
        scaling,
        classes,
        policies: policies.into_iter().collect::<Option<Vec<_>>>()?,
        sidecar: sidecar.flatten(),
    })
}

pub(super) fn duration_or(s: &Section<'_>, key: &str, default: Duration) -> Duration {
    s.parsed(key, values::duration).unwrap_or(default)
}

/// `[pools.scaling]` and `[[pools.policy]]` of the pool (or policy file) `s`. The strategy is
/// `idle` when the operator wrote an idle policy (`idle_count`, `scale_factor`, periods) and
/// did not name one.
pub(crate) fn read_scaling_and_policies(
    s: &Section<'_>,
) -> (ScalingConfig, Vec<Option<PolicyEntry>>) {
    let (mut scaling, named) = s
        .table("scaling")
        .map(read_scaling)
        .unwrap_or_else(|| (ScalingConfig::default(), false));
    let policies = super::policy::read_policies(s.tables("policy"));
    if !named && !policies.is_empty() {
        scaling.strategy = Strategy::Idle;
    }
    (scaling, policies)
}

/// The pool's scaling settings, and whether `strategy` was written.
fn read_scaling(s: Section<'_>) -> (ScalingConfig, bool) {
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
    let default_strategy = if wrote_idle_policy {
        Strategy::Idle
    } else {
        Strategy::Demand
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
        intake,
        hybrid_ahead: read_hybrid_ahead(&s, intake, d.hybrid_ahead),
        strategy: named.unwrap_or(default_strategy),
        billing_period,
        acquire_timeout: read_acquire_timeout(&s, d.acquire_timeout),
        delete_on_shutdown: s.or("delete_on_shutdown", d.delete_on_shutdown),
    };
    s.finish();
    (scaling, named.is_some())
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

fn read_sidecar(s: Section<'_>, base_dir: &Path) -> Option<SidecarConfig> {
    let mode_name: String = s.or("mode", "builtin".to_string());
    let executor: Option<String> = s.optional("executor");
    let extra_config: Option<String> = s.optional("executor_config");
    let template: Option<String> = s.optional("command");
    let mode = match mode_name.as_str() {
        "builtin" => Some(SidecarMode::Builtin),
        "gitlab-runner" => Some(SidecarMode::GitlabRunner {
            executor: executor.clone().unwrap_or_else(|| "shell".into()),
            extra_config: extra_config.clone().unwrap_or_default(),
        }),
        "command" => match &template {
            Some(t) if t.contains("{url}") && t.contains("{token}") => Some(SidecarMode::Command {
                template: t.clone(),
            }),
            Some(_) => {
                s.problem("command", "must contain {url} and {token}");
                None
            }
            None => {
                s.problem("command", "is required with mode = \"command\"");
                None
            }
        },
        other => {
            s.problem(
                "mode",
                format!("{other:?} is not one of builtin, gitlab-runner, command"),
            );
            None
        }
    };
    if mode_name != "gitlab-runner" && (executor.is_some() || extra_config.is_some()) {
        s.problem("executor", "only applies to mode = \"gitlab-runner\"");
    }
    if mode_name != "command" && template.is_some() {
        s.problem("command", "only applies to mode = \"command\"");
    }
    let binary: Option<PathBuf> = s
        .optional::<PathBuf>("binary")
        .map(|b| resolve(base_dir, b));
    if let Some(b) = &binary
        && !b.is_file()
    {
        s.problem("binary", format!("{} is not a file", b.display()));
    }
    let remote_dir: String = s.or("remote_dir", "autoscaler-sidecar".to_string());
    if remote_dir.is_empty() || remote_dir.contains(['\'', '"', '`', '$', '\\', '\n', ' ']) {
        s.problem(
            "remote_dir",
            "must be a plain path without spaces, quotes or shell characters",
        );
    }
    let start_name: String = s.or("start", "ssh".to_string());
    let start = match start_name.as_str() {
        "ssh" => Some(SidecarStart::Ssh),
        "user_data" => Some(SidecarStart::UserData),
        other => {
            s.problem("start", format!("{other:?} is not one of ssh, user_data"));
            None
        }
    };
    let config = SidecarConfig {
        mode: mode?,
        start: start?,
        binary,
        remote_dir,
        ready_command: s.optional("ready_command"),
        ready_timeout: duration_or(&s, "ready_timeout", Duration::from_secs(300)),
        silence_timeout: duration_or(&s, "silence_timeout", Duration::from_secs(45)),
        token_binding: super::token_binding::read_token_binding(&s),
        job_user: super::job_user::read_job_user(&s, mode_name == "builtin"),
    };
    s.finish();
    Some(config)
}
