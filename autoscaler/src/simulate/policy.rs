//! A policy file: one `[[pools]]` entry per class of machine, each with the service's own
//! `[pools.scaling]` and `[[pools.policy]]` keys (read by the same code, so a pool's settings
//! can be copied between the two) and a `[pools.provisioner]` describing the modelled cloud.
//!
//! ```toml
//! [[pools]]
//! name = "default"                 # the class of the workload's jobs it serves
//! [pools.scaling]                  # as in the service's configuration
//! max_machines = 50
//! [pools.provisioner]              # the modelled cloud
//! boot_time = ["30s", "90s"]       # create request to a machine taking jobs, uniform
//! # boot_times = ["14.2s", "9.8s"] # or measured ones: the n-th machine made takes the n-th
//! failure_rate = 0.01              # share of creations that fail at the end of their boot
//! create_rate = 2.0                # creations per second (token bucket), as the service's
//! create_burst = 10
//! billing_period = "1m"            # the cloud bills machines by this period (per second: leave out)
//! price_per_hour = 0.10            # optional: the report then has a cost
//! start_time = ["10s", "20s"]      # warm pool: a stopped machine's start, uniform (default)
//! stopped_price_per_hour = 0.0055  # warm pool: a stopped machine's disk (default: 0.1375 of price_per_hour)
//! ```
//!
//! The planner is told the modelled cloud's two prices (its warm pool keeps a stopped machine
//! while it pays) unless `[pools.scaling]` writes its own `price_per_hour` and
//! `stopped_price_per_hour`.

use std::time::Duration;

use super::draws::read_range;
use super::input::Input;
use crate::config::{Prices, ScalingConfig};

use crate::config::pool::read_scaling_and_policies;
use crate::config::reader::{Problems, Section};
use crate::config::values;
use crate::core::Millis;
use crate::core::schedule::PolicyEntry;

#[derive(Debug, Clone)]
pub struct SimPool {
    pub name: String,
    pub scaling: ScalingConfig,
    pub policies: Vec<PolicyEntry>,
    pub cloud: Cloud,
}

/// The modelled provider of a pool's machines.
#[derive(Debug, Clone)]
pub struct Cloud {
    pub boot_time: (Millis, Millis),
    /// Measured boot times replayed in order (cycling), in place of `boot_time`'s range.
    pub boot_times: Vec<Millis>,
    pub failure_rate: f64,
    pub create_rate: f64,
    pub create_burst: u32,
    /// 0: billed by the second.
    pub billing_period: Millis,
    pub price_per_hour: Option<f64>,
    /// Warm pool: a stopped machine's start, request to taking jobs, drawn uniformly.
    pub start_time: (Millis, Millis),
    /// Warm pool: what a stopped machine (its disk) costs per hour.
    pub stopped_price_per_hour: Option<f64>,
}

/// A stopped machine's price as a share of a running one's, when only the latter is given: a
/// 50 GiB gp3 disk ($0.0055 an hour) against a small instance ($0.04).
pub const STOPPED_PRICE_SHARE: f64 = 0.0055 / 0.04;

fn ms(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn read(input: &Input) -> Result<Vec<SimPool>, super::SimulateError> {
    let problems = Problems::default();
    let root = Section::root(&input.dict, &problems);
    let pools: Vec<Option<SimPool>> = root.tables("pools").into_iter().map(read_pool).collect();
    if pools.is_empty() {
        root.problem("pools", "needs at least one [[pools]] entry");
    }
    let names: Vec<&str> = pools.iter().flatten().map(|p| p.name.as_str()).collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            root.problem(
                &format!("pools[{i}].name"),
                format!("{name:?} names two pools"),
            );
        }
    }
    root.finish();
    input.check(problems)?;
    Ok(pools.into_iter().flatten().collect())
}

fn read_pool(s: Section<'_>) -> Option<SimPool> {
    let name: String = s.or("name", "default".to_string());
    let (mut scaling, policies) = read_scaling_and_policies(&s);
    let cloud = match s.table("provisioner") {
        Some(p) => read_cloud(p),
        None => {
            s.problem(
                "provisioner",
                "is required: how long do machines take to boot?",
            );
            None
        }
    };
    s.finish();
    let cloud = cloud?;
    // The planner prices its warm pool with the pool's own prices when written, else with the
    // modelled cloud's: an operator writes the prices of the cloud the pool runs on.
    scaling.prices = scaling.prices.or(cloud.prices());
    Some(SimPool {
        name,
        scaling,
        policies: policies.into_iter().collect::<Option<Vec<_>>>()?,
        cloud,
    })
}

impl Cloud {
    /// The modelled prices, running and stopped, when the policy gives them.
    fn prices(&self) -> Option<Prices> {
        Some(Prices {
            per_hour: self.price_per_hour.filter(|&p| p > 0.0)?,
            stopped_per_hour: self.stopped_price_per_hour?,
        })
    }
}

fn read_cloud(s: Section<'_>) -> Option<Cloud> {
    let (boot_time, boot_times) = read_boot(&s);
    let failure_rate: f64 = s.or("failure_rate", 0.0);
    if !(0.0..1.0).contains(&failure_rate) {
        s.problem("failure_rate", "must be at least 0 and below 1");
    }
    let create_rate: f64 = s.or("create_rate", 1.0);
    if !(create_rate > 0.0 && create_rate <= 1000.0) {
        s.problem("create_rate", "must be above 0 and at most 1000 per second");
    }
    let create_burst: u32 = s.or("create_burst", 5);
    if !(1..=1000).contains(&create_burst) {
        s.problem("create_burst", "must be between 1 and 1000");
    }
    let billing_period = s.parsed("billing_period", values::duration).map_or(0, ms);
    let price_per_hour: Option<f64> = s.optional("price_per_hour");
    if price_per_hour.is_some_and(|p| p < 0.0) {
        s.problem("price_per_hour", "must not be negative");
    }
    let start_time = if s.has("start_time") {
        read_range(&s, "start_time")?
    } else {
        (10_000, 20_000)
    };
    let stopped_price_per_hour: Option<f64> = s
        .optional("stopped_price_per_hour")
        .or(price_per_hour.map(|p| p * STOPPED_PRICE_SHARE));
    if stopped_price_per_hour.is_some_and(|p| p < 0.0) {
        s.problem("stopped_price_per_hour", "must not be negative");
    }
    s.finish();
    Some(Cloud {
        boot_time: boot_time?,
        boot_times: boot_times?,
        failure_rate,
        create_rate,
        create_burst,
        billing_period,
        price_per_hour,
        start_time,
        stopped_price_per_hour,
    })
}

/// `boot_time` (a range drawn from) or `boot_times` (a list replayed in order), exactly one.
fn read_boot(s: &Section<'_>) -> (Option<(Millis, Millis)>, Option<Vec<Millis>>) {
    if !s.has("boot_times") {
        return (read_range(s, "boot_time"), Some(Vec::new()));
    }
    if s.has("boot_time") {
        s.problem("boot_time", "give either boot_time or boot_times, not both");
    }
    let times = s.parsed("boot_times", |v| match v {
        figment::value::Value::Array(_, items) if !items.is_empty() => items
            .iter()
            .map(|item| values::duration(item).map(ms))
            .collect(),
        _ => Err("must be a non-empty list of durations".into()),
    });
    (Some((0, 0)), times)
}
