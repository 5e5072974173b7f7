//! `[[pools]]`: a pool's identity towards GitLab, and, for pools that scale, its provisioner,
//! its scaling policy and how sidecars are started on its machines.
use std::path::Path;
use std::time::Duration;

use super::reader::Section;
pub(crate) use super::scaling::read_scaling_and_policies;
use super::scaling::{PoolPolicy, ScalingConfig};
use super::sidecar::{SidecarConfig, read_sidecar};
use super::sources::ProvisionerConfig;
use super::{read_secret, values};
use crate::core::schedule::PolicyEntry;
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

impl PoolConfig {
    /// The pool's policy as this configuration states it.
    pub fn policy(&self) -> PoolPolicy {
        PoolPolicy {
            scaling: self.scaling.clone(),
            policies: self.policies.clone(),
        }
    }
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
    // A started machine gets a fresh sidecar token over its connection (the one it had was
    // revoked when it stopped); a sidecar started from user-data would come back with the old.
    let warm_pool = scaling.stopped_count > 0 || scaling.max_stopped > 0;
    if warm_pool
        && let Some(Some(c)) = &sidecar
        && c.start == super::sidecar::SidecarStart::UserData
    {
        s.problem(
            "scaling.max_stopped",
            "a warm pool (stopped_count, max_stopped) needs sidecar.start = \"ssh\": a started \
             machine is given a fresh sidecar token over SSH, which a sidecar started from \
             user-data cannot be",
        );
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
