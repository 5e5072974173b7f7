//! The sources of a pool's machines: `[pools.provisioner]` (one, named `default`) or
//! `[[pools.sources]]` (several, tried in order).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::reader::Section;
use super::values::duration_or;
use super::{resolve, values};
use crate::core::reconcile::OrphanPolicy;

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

/// Per-verb time limits (`[pools.provisioner.timeouts]`). `stop` and `start` have the
/// `destroy` limit: each is, like it, one power operation on one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    pub info: Duration,
    pub create: Duration,
    pub list: Duration,
    pub status: Duration,
    pub destroy: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            info: Duration::from_secs(10),
            create: Duration::from_secs(300),
            list: Duration::from_secs(60),
            status: Duration::from_secs(60),
            destroy: Duration::from_secs(300),
        }
    }
}

/// `[pools.provisioner]` (one source, `default`) or `[[pools.sources]]` (several, tried in
/// order): `None` when the pool has neither (static), `Some(empty)` when they do not read.
pub(super) fn read_sources(s: &Section<'_>, base_dir: &Path) -> Option<Vec<ProvisionerConfig>> {
    let listed = s.tables("sources");
    let single = s.table("provisioner");
    if single.is_some() && !listed.is_empty() {
        s.problem(
            "sources",
            "give either [pools.provisioner] or [[pools.sources]], not both",
        );
        return Some(Vec::new());
    }
    if let Some(t) = single {
        return Some(read_provisioner(t, base_dir, false).into_iter().collect());
    }
    if listed.is_empty() {
        return None;
    }
    let count = listed.len();
    let read: Vec<Option<ProvisionerConfig>> = listed
        .into_iter()
        .map(|t| read_provisioner(t, base_dir, true))
        .collect();
    let read: Vec<ProvisionerConfig> = read.into_iter().flatten().collect();
    let mut names = std::collections::BTreeSet::new();
    for source in &read {
        if !names.insert(source.name.as_str()) {
            s.problem(
                "sources",
                format!("the name {:?} is used twice", source.name),
            );
        }
    }
    Some(if read.len() == count {
        read
    } else {
        Vec::new()
    })
}

fn read_provisioner(s: Section<'_>, base_dir: &Path, named: bool) -> Option<ProvisionerConfig> {
    let name: Option<String> = if named {
        s.required("name")
    } else {
        Some(s.or("name", "default".to_string()))
    };
    if let Some(n) = &name
        && let Err(e) = values::pool_name(n)
    {
        s.problem("name", e.replace("pool name", "source name"));
    }
    let max_machines: Option<u32> = s.optional("max_machines");
    let reclaim_cooldown = s.parsed("reclaim_cooldown", values::duration);
    if max_machines == Some(0) {
        s.problem(
            "max_machines",
            "must be at least 1 (leave it out for no limit)",
        );
    }
    let command: Option<PathBuf> = s.required("command");
    let command = command.map(|c| resolve(base_dir, c));
    if let Some(c) = &command
        && !c.is_file()
    {
        s.problem("command", format!("{} is not a file", c.display()));
    }
    let env: BTreeMap<String, String> = s.or("env", BTreeMap::new());
    let max_concurrency: usize = s.or("max_concurrency", 4);
    if !(1..=64).contains(&max_concurrency) {
        s.problem("max_concurrency", "must be between 1 and 64");
    }
    let create_rate: f64 = s.or("create_rate", 1.0);
    if !(create_rate > 0.0 && create_rate <= 1000.0) {
        s.problem("create_rate", "must be above 0 and at most 1000 per second");
    }
    let create_burst: u32 = s.or("create_burst", 5);
    if !(1..=1000).contains(&create_burst) {
        s.problem("create_burst", "must be between 1 and 1000");
    }
    let orphan_policy: OrphanPolicy = s.or("orphan_policy", OrphanPolicy::Destroy);
    let defaults = Timeouts::default();
    let mut timeouts = defaults.clone();
    let mut boot_timeout = Duration::from_secs(600);
    if let Some(t) = s.table("timeouts") {
        timeouts = Timeouts {
            info: duration_or(&t, "info", defaults.info),
            create: duration_or(&t, "create", defaults.create),
            list: duration_or(&t, "list", defaults.list),
            status: duration_or(&t, "status", defaults.status),
            destroy: duration_or(&t, "destroy", defaults.destroy),
        };
        boot_timeout = duration_or(&t, "boot", boot_timeout);
        t.finish();
    }
    if boot_timeout <= timeouts.create {
        s.problem(
            "timeouts.boot",
            "must be longer than timeouts.create (a create may still be running)",
        );
    }
    let reconcile_interval = duration_or(&s, "reconcile_interval", Duration::from_secs(10));
    let user_data: Option<String> = s.optional("user_data");
    s.finish();
    Some(ProvisionerConfig {
        name: name?,
        max_machines,
        reclaim_cooldown,
        command: command?,
        env,
        max_concurrency,
        create_rate,
        create_burst,
        orphan_policy,
        timeouts,
        boot_timeout,
        reconcile_interval,
        user_data,
    })
}
