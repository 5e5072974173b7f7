//! The simulator's planner pass: the service's planner on the simulated fleet, its decisions
//! carried out as the service's controller does, and logged in the service's words.

use super::{Sim, TICK};
use crate::core::Millis;
use crate::core::pipelines::ClassScope;
use crate::core::scaler::{self, PlanInput};
use crate::core::schedule;

impl Sim<'_> {
    /// The plan's decisions as debug events (`RUST_LOG=autoscaler::simulate=debug`), in the
    /// service's words, so that a simulated run can be read beside the service's log.
    fn trace(&self, now: Millis, plan: &scaler::ScalePlan) {
        let at_s = (now - self.start) as f64 / 1000.0;
        if plan.create > 0 {
            tracing::debug!(at_s, create = plan.create, reason = plan.reason.code(), summary = %plan.summary, "scaling up");
        }
        let moves = [
            ("drain", &plan.drain),
            ("destroy", &plan.destroy),
            ("stop", &plan.stop),
            ("start", &plan.start),
        ];
        for (action, retires) in moves {
            for r in retires {
                tracing::debug!(at_s, machine.id = %r.id, action, reason = r.reason.code(), detail = %r.detail, "machine retired or moved");
            }
        }
    }

    /// The planner's pass, carried out as the service's controller does.
    pub(super) fn scale(&mut self, now: Millis) {
        let base = self.pool.scaling.scale_policy();
        let (policy, _) = schedule::policy_in_force(base, &self.pool.policies, now);
        let views: Vec<_> = self.fleet.machines.iter().map(|m| m.view()).collect();
        let waiting = u32::try_from(self.waiting.len()).unwrap_or(u32::MAX);
        // As the service measures them: a machine made counts from its create (the lead time),
        // one started from stopped from its start (the start time); a stopped one is on no way.
        let on_the_way = |started: bool| {
            self.fleet
                .machines
                .iter()
                .filter(move |m| {
                    !m.state.is_stopped() && (m.requested_at != m.created_at) == started
                })
                .map(|m| {
                    let ready_at = m.state.takes_jobs().then_some(m.boot_ends);
                    (m.id.as_str(), m.requested_at, ready_at)
                })
        };
        self.demand.observe_machines(on_the_way(false));
        self.demand.observe_starts(on_the_way(true));
        let in_use = views.iter().map(|m| m.running_jobs).sum::<u32>() + waiting;
        self.demand.observe_in_use(in_use);
        let forecast = self
            .demand
            .forecast(now, policy.idle_time, policy.target_wait);
        let horizon = forecast.pipeline_horizon(policy.target_wait, TICK);
        let forecast = forecast.with_pipelines(&self.pipelines, (now, horizon), ClassScope::All);
        let plan = scaler::plan(&PlanInput {
            machines: &views,
            waiting_jobs: waiting,
            policy: &policy,
            provisioner_paused: !self.breaker.allows(now),
            forecast,
            now,
        });
        self.trace(now, &plan);
        for r in &plan.drain {
            self.fleet.drain(&r.id);
        }
        for r in &plan.destroy {
            self.fleet.remove(&r.id, now);
        }
        for r in &plan.stop {
            self.fleet.stop(&r.id, now);
        }
        for r in &plan.start {
            self.fleet.start(&r.id, now);
        }
        if plan.create > 0 && self.breaker.allows(now) {
            for _ in 0..self.throttle.take(plan.create, now) {
                self.fleet.create(now);
            }
        }
    }
}
