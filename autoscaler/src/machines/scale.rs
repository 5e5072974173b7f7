//! The scaler's decisions (`core::scaler`), carried out: one plan per machine class (one for a
//! pool without classes), each seeing only its class's machines, jobs and demand.

use std::sync::{Arc, PoisonError};

use super::controller::PoolController;
use super::policy::reason_code;
use crate::core::Millis;
use crate::core::breaker::BreakerState;
use crate::core::classes::MachineClass;
use crate::core::demand::{ClassDemand, ClassPass, Forecast, OnItsWay, Rises};
use crate::core::machine::MachineEvent;
use crate::core::pipelines::ClassScope;
use crate::core::scaler::{self, MachineView, PlanInput, ScalePlan, ScalePolicy};
use crate::store::MachineRecord;

/// A class's machines whose create-to-ready (or start-to-ready) time may be measured: (id,
/// created (or started) at, since when it takes jobs).
type Measured<'a> = Vec<OnItsWay<'a>>;

impl PoolController {
    /// Plans and carries out the pool's scaling for this pass. The machines are read before
    /// the jobs on them (`running`, [`jobs_on_machines`](PoolController::jobs_on_machines)).
    pub(super) async fn scale(self: &Arc<Self>) {
        let now = self.machines.now();
        let live = self.machines.live();
        let running = self.jobs_on_machines();
        let policy = self.without_impossible_warm_pool(self.policy_in_force(now));
        for (class, plan) in self.plan_classes(&live, &running, &policy, now) {
            self.carry_out(&plan, class, now).await;
        }
    }

    /// One plan per class, each from the class's own machines, waiting jobs and demand. All
    /// are planned before any is carried out, so that the demand's lock is not held across
    /// the provisioner's calls; the plans see the same snapshot of machines either way.
    fn plan_classes(
        &self,
        live: &[MachineRecord],
        running: &(dyn Fn(&MachineRecord) -> u32 + Sync),
        policy: &ScalePolicy,
        now: Millis,
    ) -> Vec<(Option<&MachineClass>, ScalePlan)> {
        let paused = !matches!(self.machines.breaker(), BreakerState::Closed);
        let mut waiting = self.jobs.waiting_by_class(self.pool());
        let mut demand = self.demand.lock().unwrap_or_else(PoisonError::into_inner);
        self.learn_from_jobs(&mut demand);
        let classes: Vec<Option<&MachineClass>> = match &self.classes {
            None => vec![None],
            Some(classes) => classes.list.iter().map(Some).collect(),
        };
        let mut plans = Vec::with_capacity(classes.len());
        for class in classes {
            // The class a machine serves is the one routing matches jobs against.
            let name = class.map(|c| c.name.clone());
            let (mine, others): (Vec<&MachineRecord>, Vec<&MachineRecord>) =
                live.iter().partition(|m| self.class_of(m) == name);
            let views: Vec<MachineView> = mine.iter().map(|m| view(m, running(m))).collect();
            let waiting_jobs = waiting.remove(&name).unwrap_or(0);
            let pass = ClassPass {
                machines: &measured(&mine),
                starts: &measured_starts(&mine),
                in_use: views.iter().map(|v| v.running_jobs).sum::<u32>() + waiting_jobs,
                now,
                window: policy.idle_time,
                target_wait: policy.target_wait,
            };
            let plan = scaler::plan(&PlanInput {
                machines: &views,
                waiting_jobs,
                policy: &self.class_policy(policy, class, others.len()),
                provisioner_paused: paused,
                forecast: self.class_forecast(&mut demand, class, &pass),
                now,
            });
            plans.push((class, plan));
        }
        drop(demand);
        self.save_pipeline_shapes(false);
        plans
    }

    /// The forecast of `class` from its own demand only (`core::demand::ClassDemand`): the jobs
    /// that route to it, the slots in use on its machines and by its waiting jobs, its
    /// machines' create-to-ready times, and the pipelines' next-stage jobs that route to it
    /// (jobs known to come, held for in every class). The default class alone holds the
    /// buffer for recent rises and GitLab's reported queue (which names no class), as the
    /// idle settings keep its machines ready; the other classes are otherwise made on demand.
    fn class_forecast(
        &self,
        demand: &mut ClassDemand,
        class: Option<&MachineClass>,
        pass: &ClassPass<'_>,
    ) -> Forecast {
        let forecast = demand.forecast(class.map(|c| c.name.as_str()), pass);
        let horizon = forecast.pipeline_horizon(pass.target_wait, scaler::PASS_INTERVAL);
        let is_default = self.is_default(class);
        let scope = class.map_or(ClassScope::All, |c| ClassScope::Class {
            name: &c.name,
            is_default,
        });
        let forecast = forecast.with_pipelines(
            &self.pipeline_learning().tracker,
            (pass.now, horizon),
            scope,
        );
        if !is_default {
            return Forecast {
                rises: Rises::default(),
                gitlab_backlog: 0,
                need_peak: Rises::default(),
                stop_need_peak: Rises::default(),
                ..forecast
            };
        }
        forecast
    }

    /// Whether `class` is the pool's default (a pool without classes has only that one).
    fn is_default(&self, class: Option<&MachineClass>) -> bool {
        match (class, &self.classes) {
            (Some(class), Some(classes)) => classes.default == class.name,
            _ => true,
        }
    }

    /// The policy in force narrowed to `class`: its slots per machine and maximum, within what
    /// the other classes leave of the pool's `max_machines`. The idle settings keep machines of
    /// the default class ready; the other classes are made on demand.
    fn class_policy(
        &self,
        policy: &ScalePolicy,
        class: Option<&MachineClass>,
        other_machines: usize,
    ) -> ScalePolicy {
        let Some(class) = class else {
            return *policy;
        };
        let left = policy
            .max_machines
            .saturating_sub(u32::try_from(other_machines).unwrap_or(u32::MAX));
        let is_default = self.is_default(Some(class));
        ScalePolicy {
            capacity_per_machine: class.capacity_per_machine,
            max_machines: class.max_machines.map_or(left, |max| max.min(left)),
            idle_count: if is_default { policy.idle_count } else { 0 },
            scale_factor: if is_default { policy.scale_factor } else { 0.0 },
            scale_factor_limit: if is_default {
                policy.scale_factor_limit
            } else {
                0
            },
            ..*policy
        }
    }

    async fn carry_out(
        self: &Arc<Self>,
        plan: &ScalePlan,
        class: Option<&MachineClass>,
        now: Millis,
    ) {
        for r in &plan.drain {
            let why = format!("{}: {}", reason_code(r.reason), r.detail);
            if let Err(e) = self.machines.apply(&r.id, MachineEvent::Drain, &why) {
                tracing::warn!(pool = %self.pool(), machine.id = %r.id, error = %e, "cannot drain the machine");
            }
        }
        for r in &plan.destroy {
            if let Some(m) = self.machines.get(&r.id) {
                let why = format!("{}: {}", reason_code(r.reason), r.detail);
                if let Err(e) = self.machines.apply(&r.id, MachineEvent::Destroy, &why) {
                    tracing::warn!(pool = %self.pool(), machine.id = %r.id, error = %e, "cannot retire the machine");
                    continue;
                }
                self.clone().start_teardown(&m);
            }
        }
        for r in &plan.stop {
            self.stop_idle(r);
        }
        for r in &plan.start {
            self.start_stopped(r);
        }
        let mut created = 0;
        if plan.create > 0 {
            let class_name = class.map_or("-", |c| c.name.as_str());
            tracing::info!(pool = %self.pool(), class = class_name, create = plan.create, reason = reason_code(plan.reason), summary = %plan.summary, "scaling up");
            match self
                .machines
                .create_of(plan.create, class, Some(self.launcher.as_ref()))
                .await
            {
                Ok(n) if n < plan.create => {
                    created = n;
                    tracing::debug!(pool = %self.pool(), class = class_name, asked = plan.create, created = n, "creation throttled or paused");
                }
                Ok(n) => created = n,
                Err(e) => {
                    tracing::error!(pool = %self.pool(), class = class_name, error = %e, "cannot create machines")
                }
            }
        }
        if let Some(decisions) = self.decisions.get() {
            decisions.record(self.pool(), plan, created, now);
        }
    }
}

impl PoolController {
    /// The policy without its warm pool when a source's provisioner cannot stop and start
    /// machines (said once): the plans would stop machines that cannot be stopped.
    fn without_impossible_warm_pool(&self, policy: ScalePolicy) -> ScalePolicy {
        use std::sync::atomic::Ordering;
        if !policy.has_warm_pool() || self.can_stop_start() {
            self.warm_pool_refused.store(false, Ordering::Relaxed);
            return policy;
        }
        if !self.warm_pool_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(pool = %self.pool(), "stopped_count and max_stopped are set, but the pool's provisioner does not declare the stop_start capability (or has not answered info yet): no machine is stopped; idle ones are destroyed as without a warm pool");
        }
        ScalePolicy {
            stopped_count: 0,
            max_stopped: 0,
            stopped_price_share: None,
            ..policy
        }
    }
}

fn view(m: &MachineRecord, running_jobs: u32) -> MachineView {
    MachineView {
        id: m.id.clone(),
        state: m.state,
        running_jobs,
        use_count: m.use_count,
        idle_since: m.since,
        created_at: m.created_at,
    }
}

/// The machines of a class whose create-to-ready time may be measured. A machine started from
/// stopped comes back in a start time, not a boot: it says nothing of the class's lead time.
fn measured<'a>(machines: &[&'a MachineRecord]) -> Measured<'a> {
    machines
        .iter()
        .filter(|m| m.restarted_at.is_none() && !m.state.is_stopped())
        .map(|m| {
            (
                m.id.as_str(),
                m.created_at,
                takes_jobs_since(m, m.created_at),
            )
        })
        .collect()
}

/// The machines of a class started from stopped (and not stopped again), whose start-to-ready
/// time may be measured: the warm pool's start time.
fn measured_starts<'a>(machines: &[&'a MachineRecord]) -> Measured<'a> {
    machines
        .iter()
        .filter(|m| !m.state.is_stopped())
        .filter_map(|m| {
            let started_at = m.restarted_at?;
            Some((m.id.as_str(), started_at, takes_jobs_since(m, started_at)))
        })
        .collect()
}

/// When a machine that takes jobs now first took them after `from` (its create or its start):
/// the first such step of its timeline, else when it entered its state (its timeline keeps
/// only the latest steps). `None` while it takes none.
fn takes_jobs_since(m: &MachineRecord, from: Millis) -> Option<Millis> {
    if !m.state.takes_jobs() {
        return None;
    }
    let first = m
        .timeline
        .iter()
        .find(|step| step.at >= from && step.state.takes_jobs())
        .map(|step| step.at);
    Some(first.unwrap_or(m.since))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::machine::MachineState as S;
    use crate::store::TimelineEntry;

    /// A machine asked for at 0 that went through `steps` and is now in the last one's state.
    fn machine(steps: &[(Millis, S)], restarted_at: Option<Millis>) -> MachineRecord {
        let &(since, state) = steps.last().expect("a step");
        MachineRecord {
            id: "m".into(),
            pool: "default".into(),
            state,
            since,
            created_at: 0,
            source: String::new(),
            class: None,
            provider_id: None,
            endpoint: None,
            host_key: None,
            sidecar: None,
            use_count: 0,
            reason: None,
            destroy_attempts: 0,
            next_attempt: 0,
            restarted_at,
            timeline: steps
                .iter()
                .map(|&(at, state)| TimelineEntry {
                    at,
                    state,
                    reason: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_boot_is_measured_to_the_first_job_request_not_to_the_pass() {
        let booting = [(0, S::Requested), (900, S::Creating), (5_000, S::Booting)];
        assert_eq!(measured(&[&machine(&booting, None)])[0].2, None);
        let busy = [
            (0, S::Requested),
            (900, S::Creating),
            (5_000, S::Booting),
            (5_100, S::Injecting),
            (7_450, S::Ready),
            (7_452, S::Busy),
        ];
        assert_eq!(measured(&[&machine(&busy, None)])[0], ("m", 0, Some(7_450)));
    }

    #[test]
    fn a_start_is_measured_from_the_start_to_ready_after_it() {
        let restarted = [
            (7_450, S::Ready),
            (20_000, S::Stopping),
            (21_000, S::Stopped),
            (30_000, S::Starting),
            (33_000, S::Injecting),
            (34_200, S::Ready),
        ];
        let m = machine(&restarted, Some(30_000));
        assert!(measured(&[&m]).is_empty(), "a start is not a boot");
        assert_eq!(measured_starts(&[&m])[0], ("m", 30_000, Some(34_200)));
    }
}
