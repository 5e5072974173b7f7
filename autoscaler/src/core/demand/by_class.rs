//! A pool's demand kept apart per machine class.
//!
//! A job runs only on a machine of the class it routes to (`core::classes::Classes::choose`
//! names it, `core::routing` holds a job to it), so a job of one class is no demand on another:
//! counted pool-wide, a job naming `large` made the default class hold a small machine it could
//! never run on. Each class therefore has its own tracker, fed only the arrivals, slots in use
//! and machines of that class; its rises, peaks and lead time are its own.

use std::collections::BTreeMap;

use super::{Arrival, DemandTracker, Forecast, OnItsWay};
use crate::core::Millis;

/// One [`DemandTracker`] per class, keyed by the class a job routes to (`None`: the pool has
/// no classes).
#[derive(Debug, Clone, Default)]
pub struct ClassDemand {
    trackers: BTreeMap<Option<String>, DemandTracker>,
}

/// What one class is at this pass: the facts its forecast is taken from.
#[derive(Debug, Clone, Copy)]
pub struct ClassPass<'a> {
    /// The class's machines whose create-to-ready time may be measured: (id, created at,
    /// since when it takes jobs).
    pub machines: &'a [OnItsWay<'a>],
    /// The class's machines started from stopped and not stopped since: (id, started at,
    /// since when it takes jobs).
    pub starts: &'a [OnItsWay<'a>],
    /// Slots in use in the class: jobs running on its machines plus its jobs waiting for one.
    pub in_use: u32,
    pub now: Millis,
    /// The pool's `idle_time`: the window the forecast looks back over.
    pub window: Millis,
    /// The pool's `target_wait`.
    pub target_wait: Millis,
}

impl ClassDemand {
    /// A job routed to `class` came (`foreseen`: a pipeline's next stage, held for already).
    pub fn job_arrived(&mut self, class: Option<&str>, arrival: Arrival, foreseen: bool) {
        let tracker = self.tracker(class);
        if foreseen {
            tracker.foreseen_job_arrived(arrival.at, arrival.queue_size);
        } else {
            tracker.job_arrived(arrival.at, arrival.queue_size);
        }
    }

    /// A job routed to `class` was handed to a sidecar `wait` after it came; a pass comes every
    /// `pass_interval`.
    pub fn job_handed_out(&mut self, class: Option<&str>, wait: Millis, pass_interval: Millis) {
        self.tracker(class).job_handed_out(wait, pass_interval);
    }

    /// A job routed to `class` was released to GitLab at `at` for want of a machine: its retry
    /// may come back ([`DemandTracker::job_released`]).
    pub fn job_released(&mut self, class: Option<&str>, at: Millis) {
        self.tracker(class).job_released(at);
    }

    /// The forecast of `class` from its own jobs and machines only. Called for every class at
    /// every pass: the rises are read from the slots in use recorded at each one.
    pub fn forecast(&mut self, class: Option<&str>, pass: &ClassPass<'_>) -> Forecast {
        let tracker = self.tracker(class);
        tracker.observe_machines(pass.machines.iter().copied());
        tracker.observe_starts(pass.starts.iter().copied());
        tracker.observe_in_use(pass.in_use);
        tracker.forecast(pass.now, pass.window, pass.target_wait)
    }

    fn tracker(&mut self, class: Option<&str>) -> &mut DemandTracker {
        self.trackers.entry(class.map(str::to_owned)).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::classes::{Classes, DEFAULT_VARIABLE, MachineClass};

    const TARGET_WAIT: Millis = 30_000;

    fn classes() -> Classes {
        let class = |name: &str| MachineClass {
            name: name.into(),
            capacity_per_machine: 1,
            max_machines: None,
            sources: Vec::new(),
        };
        Classes {
            variable: DEFAULT_VARIABLE.into(),
            default: "small".into(),
            list: vec![class("small"), class("large")],
        }
    }

    /// A pass for every class: `busy` names the class whose one job is in use at `now`.
    fn pass_all(d: &mut ClassDemand, c: &Classes, busy: Option<&str>, now: Millis) {
        for name in c.names() {
            let in_use = u32::from(busy == Some(name));
            let pass = ClassPass {
                machines: &[],
                starts: &[],
                in_use,
                now,
                window: 600_000,
                target_wait: TARGET_WAIT,
            };
            d.forecast(Some(name), &pass);
        }
    }

    /// The buffers of the default class and of `large` after one job whose class variable is
    /// `asked` came to an idle pool, routed as intake routes it.
    fn buffers_after_a_job_asking(asked: Option<&str>) -> (u32, u32) {
        let c = classes();
        let mut d = ClassDemand::default();
        pass_all(&mut d, &c, None, 0);
        let class = c.choose(asked).expect("a class of the pool");
        let arrival = Arrival {
            at: 10_000,
            queue_size: None,
        };
        d.job_arrived(Some(&class), arrival, false);
        pass_all(&mut d, &c, Some(&class), 20_000);
        let pass = ClassPass {
            machines: &[],
            starts: &[],
            in_use: 0,
            now: 30_000,
            window: 600_000,
            target_wait: TARGET_WAIT,
        };
        let mut buffer = |class: &str| d.forecast(Some(class), &pass).buffer(TARGET_WAIT);
        (buffer(&c.default), buffer("large"))
    }

    #[test]
    fn a_job_of_another_class_raises_no_buffer_in_the_default_class() {
        // The large job is the large class's demand (its own buffer, which the controller
        // does not hold: classes other than the default are made on demand), not the default's.
        assert_eq!(buffers_after_a_job_asking(Some("large")), (0, 1));
    }

    #[test]
    fn a_job_of_the_default_class_raises_its_buffer() {
        // With the lead time not yet measured (90 s), a 30 s target lets 7 % of jobs wait:
        // the one job seen is all of them, so a slot is held for its like.
        assert_eq!(buffers_after_a_job_asking(None), (1, 0));
        assert_eq!(buffers_after_a_job_asking(Some("small")), (1, 0));
    }

    #[test]
    fn each_class_measures_its_own_lead_time() {
        let mut d = ClassDemand::default();
        let at = |machines, now| ClassPass {
            machines,
            starts: &[],
            in_use: 0,
            now,
            window: 600_000,
            target_wait: TARGET_WAIT,
        };
        d.forecast(Some("large"), &at(&[("l1", 0, None)], 0));
        let large = d.forecast(Some("large"), &at(&[("l1", 0, Some(300_000))], 301_000));
        let small = d.forecast(Some("small"), &at(&[], 300_000));
        assert_eq!(large.lead_time, 300_000);
        assert_eq!(small.lead_time, super::super::DEFAULT_LEAD_TIME);
    }
}
