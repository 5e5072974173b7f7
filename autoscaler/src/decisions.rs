//! The planner's recent decisions per pool, with their reasons: counted in the metrics
//! (`autoscaler_scale_actions_total`) and kept for the admin API (`GET /decisions`).
//!
//! A pool's controller reports each plan it executed here; a pass that changes nothing is kept
//! only as the pool's latest decision, so the history shows what the planner did.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::core::Millis;
use crate::core::scaler::{Reason, Retire, ScalePlan};
use crate::metrics::Metrics;

/// Decisions kept per pool.
const HISTORY: usize = 50;

/// One executed plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub pool: String,
    /// When it was made (ms since the epoch).
    pub at: Millis,
    /// Machines the plan asked for, and how many were requested (fewer when throttled).
    pub create: u32,
    pub created: u32,
    /// Why `create` is what it is (a reason code).
    pub reason: String,
    pub drain: Vec<Retirement>,
    pub destroy: Vec<Retirement>,
    /// The figures behind the decision.
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retirement {
    pub machine: String,
    pub reason: String,
    pub detail: String,
}

impl Decision {
    /// A decision that does something (or wanted to and could not).
    fn acts(&self) -> bool {
        self.create > 0
            || !self.drain.is_empty()
            || !self.destroy.is_empty()
            || self.reason != Reason::Steady.code()
    }
}

#[derive(Debug, Default)]
struct Log {
    history: VecDeque<Decision>,
    latest: Option<Decision>,
}

#[derive(Debug)]
pub struct Decisions {
    metrics: Arc<Metrics>,
    pools: Mutex<HashMap<String, Log>>,
}

fn retirements(list: &[Retire]) -> Vec<Retirement> {
    list.iter()
        .map(|r| Retirement {
            machine: r.id.clone(),
            reason: r.reason.code().to_string(),
            detail: r.detail.clone(),
        })
        .collect()
}

impl Decisions {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            pools: Mutex::new(HashMap::new()),
        })
    }

    /// A plan of `pool` was executed at `at`; `created` machines were requested.
    pub fn record(&self, pool: &str, plan: &ScalePlan, created: u32, at: Millis) {
        let decision = Decision {
            pool: pool.to_string(),
            at,
            create: plan.create,
            created,
            reason: plan.reason.code().to_string(),
            drain: retirements(&plan.drain),
            destroy: retirements(&plan.destroy),
            summary: plan.summary.clone(),
        };
        self.count(&decision, plan);
        let mut pools = self
            .pools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let log = pools.entry(pool.to_string()).or_default();
        if decision.acts()
            && log
                .history
                .back()
                .is_none_or(|last| !same_kind(last, &decision))
        {
            log.history.push_back(decision.clone());
            if log.history.len() > HISTORY {
                log.history.pop_front();
            }
        }
        log.latest = Some(decision);
    }

    fn count(&self, d: &Decision, plan: &ScalePlan) {
        if d.created > 0 {
            self.metrics
                .scale_action(&d.pool, "create", &d.reason, u64::from(d.created));
        }
        if plan.reason == Reason::ProvisionerPaused {
            self.metrics.scale_action(&d.pool, "blocked", &d.reason, 1);
        }
        for r in &d.drain {
            self.metrics.scale_action(&d.pool, "drain", &r.reason, 1);
        }
        for r in &d.destroy {
            self.metrics.scale_action(&d.pool, "destroy", &r.reason, 1);
        }
    }

    /// The recent decisions of `pool` (every pool when `None`), oldest first, and each pool's
    /// latest.
    pub fn recent(&self, pool: Option<&str>) -> (Vec<Decision>, Vec<Decision>) {
        let pools = self
            .pools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let chosen = pools
            .iter()
            .filter(|(name, _)| pool.is_none_or(|p| p == name.as_str()));
        let mut history: Vec<Decision> = chosen
            .clone()
            .flat_map(|(_, l)| l.history.iter().cloned())
            .collect();
        history.sort_by(|a, b| (a.at, &a.pool).cmp(&(b.at, &b.pool)));
        let mut latest: Vec<Decision> = chosen.filter_map(|(_, l)| l.latest.clone()).collect();
        latest.sort_by(|a, b| a.pool.cmp(&b.pool));
        (history, latest)
    }
}

/// A repeat of the last kept decision that did nothing new (a pool paused or waiting on its
/// maximum plans the same each pass): kept once, not every pass.
fn same_kind(last: &Decision, next: &Decision) -> bool {
    next.created == 0
        && next.drain.is_empty()
        && next.destroy.is_empty()
        && last.created == 0
        && last.drain.is_empty()
        && last.destroy.is_empty()
        && last.reason == next.reason
}
