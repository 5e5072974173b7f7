//! How many machines a pool needs, decided: keep enough free job slots for the jobs that wait
//! and `idle_count` more, up to `max_machines`; remove machines idle past `idle_time` that are
//! not needed for that; retire machines that ran `max_use_count` jobs. A machine running a job
//! is never chosen for removal.

use super::Millis;
use super::machine::MachineState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineView {
    pub id: String,
    pub state: MachineState,
    /// Jobs handed to it and not finished.
    pub running_jobs: u32,
    /// Jobs handed to it so far.
    pub use_count: u32,
    /// Since when it has had no job (or since it became ready).
    pub idle_since: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalePolicy {
    pub max_machines: u32,
    pub capacity_per_machine: u32,
    pub idle_count: u32,
    pub idle_time: Millis,
    /// 0 is unlimited.
    pub max_use_count: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScalePlan {
    pub create: u32,
    /// Stop giving these jobs; destroy them once their jobs end.
    pub drain: Vec<(String, String)>,
    /// Destroy these now (they run nothing).
    pub destroy: Vec<(String, String)>,
    /// Why `create` is what it is, for logs and the admin view.
    pub reason: String,
}

impl ScalePolicy {
    /// Jobs `m` can still take.
    fn free_slots(&self, m: &MachineView) -> u32 {
        let by_capacity = self.capacity_per_machine.saturating_sub(m.running_jobs);
        if self.max_use_count == 0 {
            by_capacity
        } else {
            by_capacity.min(self.max_use_count.saturating_sub(m.use_count))
        }
    }

    fn used_up(&self, m: &MachineView) -> bool {
        self.max_use_count > 0 && m.use_count >= self.max_use_count
    }
}

/// `waiting_jobs`: jobs the pool holds that no machine has taken yet.
pub fn plan(
    machines: &[MachineView],
    waiting_jobs: u32,
    now: Millis,
    p: &ScalePolicy,
) -> ScalePlan {
    let mut plan = ScalePlan::default();
    let counted = machines
        .iter()
        .filter(|m| m.state.counts_toward_max())
        .count() as u32;
    let serving: Vec<&MachineView> = machines
        .iter()
        .filter(|m| m.state.is_starting() || m.state.takes_jobs())
        .collect();

    // Machines that are done: used up, or drained.
    for m in machines {
        let idle = m.running_jobs == 0;
        if m.state.takes_jobs() && p.used_up(m) {
            let reason = format!(
                "ran {} jobs (max_use_count {})",
                m.use_count, p.max_use_count
            );
            if idle {
                plan.destroy.push((m.id.clone(), reason));
            } else {
                plan.drain.push((m.id.clone(), reason));
            }
        } else if m.state == MachineState::Draining && idle {
            plan.destroy.push((m.id.clone(), "drained".into()));
        }
    }
    let retiring = |id: &str| plan.destroy.iter().chain(&plan.drain).any(|(d, _)| d == id);
    let mut free: u32 = serving
        .iter()
        .filter(|m| !retiring(&m.id))
        .map(|m| {
            if m.state.is_starting() {
                p.capacity_per_machine.min(if p.max_use_count == 0 {
                    u32::MAX
                } else {
                    p.max_use_count
                })
            } else {
                p.free_slots(m)
            }
        })
        .sum();
    let wanted_free = waiting_jobs + p.idle_count;

    if free < wanted_free {
        let missing = wanted_free - free;
        let per_machine = if p.max_use_count == 0 {
            p.capacity_per_machine
        } else {
            p.capacity_per_machine.min(p.max_use_count)
        };
        let machines_needed = missing.div_ceil(per_machine.max(1));
        let room = p.max_machines.saturating_sub(counted);
        plan.create = machines_needed.min(room);
        plan.reason = format!(
            "{waiting_jobs} jobs waiting + {} idle slots wanted, {free} free slots: {machines_needed} machines needed, room for {room}",
            p.idle_count
        );
        return plan;
    }

    // Idle reclaim: the longest-idle first, while the rest still covers what is wanted.
    let mut idle: Vec<&&MachineView> = serving
        .iter()
        .filter(|m| m.state == MachineState::Ready && m.running_jobs == 0 && !retiring(&m.id))
        .filter(|m| now.saturating_sub(m.idle_since) >= p.idle_time)
        .collect();
    idle.sort_by_key(|m| m.idle_since);
    for m in idle {
        let slots = p.free_slots(m);
        if free - slots < wanted_free {
            break;
        }
        free -= slots;
        plan.destroy.push((
            m.id.clone(),
            format!(
                "idle for {} s (idle_time {} s)",
                now.saturating_sub(m.idle_since) / 1000,
                p.idle_time / 1000
            ),
        ));
    }
    plan.reason = format!(
        "{free} free slots cover {waiting_jobs} waiting jobs + {} idle slots",
        p.idle_count
    );
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use MachineState as S;

    const P: ScalePolicy = ScalePolicy {
        max_machines: 5,
        capacity_per_machine: 2,
        idle_count: 0,
        idle_time: 60_000,
        max_use_count: 0,
    };

    fn m(
        id: &str,
        state: MachineState,
        running: u32,
        uses: u32,
        idle_since: Millis,
    ) -> MachineView {
        MachineView {
            id: id.into(),
            state,
            running_jobs: running,
            use_count: uses,
            idle_since,
        }
    }

    #[test]
    fn waiting_jobs_get_machines_up_to_the_maximum() {
        assert_eq!(plan(&[], 3, 0, &P).create, 2);
        assert_eq!(plan(&[], 30, 0, &P).create, 5);
        let busy = [m("a", S::Busy, 2, 2, 0), m("b", S::Creating, 0, 0, 0)];
        // b will bring 2 slots: 3 waiting need one more machine.
        assert_eq!(plan(&busy, 3, 0, &P).create, 1);
        let full: Vec<_> = (0..5)
            .map(|i| m(&i.to_string(), S::Busy, 2, 2, 0))
            .collect();
        assert_eq!(plan(&full, 10, 0, &P).create, 0);
    }

    #[test]
    fn idle_count_is_kept_in_slots() {
        let p = ScalePolicy { idle_count: 3, ..P };
        assert_eq!(plan(&[], 0, 0, &p).create, 2);
        let ready = [m("a", S::Ready, 0, 0, 0), m("b", S::Ready, 1, 1, 0)];
        assert_eq!(plan(&ready, 0, 0, &p).create, 0);
        // An idle machine that is needed for idle_count is kept however long it idles.
        assert!(plan(&ready, 0, 1_000_000, &p).destroy.is_empty());
    }

    #[test]
    fn idle_machines_go_after_idle_time_and_busy_ones_never() {
        let ms = [
            m("a", S::Ready, 0, 1, 0),
            m("b", S::Ready, 0, 1, 50_000),
            m("c", S::Busy, 1, 1, 0),
        ];
        assert!(plan(&ms, 0, 59_999, &P).destroy.is_empty());
        let at_60 = plan(&ms, 0, 60_000, &P);
        assert_eq!(
            at_60
                .destroy
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        let later = plan(&ms, 0, 200_000, &P);
        assert_eq!(
            later
                .destroy
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        // c's free slot takes one waiting job; a second keeps one idle machine.
        assert_eq!(plan(&ms, 1, 200_000, &P).destroy.len(), 2);
        assert_eq!(plan(&ms, 2, 200_000, &P).destroy.len(), 1);
    }

    #[test]
    fn used_up_machines_are_retired_when_idle_and_drained_when_busy() {
        let p = ScalePolicy {
            max_use_count: 2,
            ..P
        };
        let ms = [
            m("a", S::Ready, 0, 2, 0),
            m("b", S::Busy, 1, 2, 0),
            m("c", S::Draining, 0, 2, 0),
        ];
        let plan = plan(&ms, 0, 0, &p);
        let ids =
            |v: &Vec<(String, String)>| v.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&plan.destroy), ["a", "c"]);
        assert_eq!(ids(&plan.drain), ["b"]);
    }

    #[test]
    fn used_up_machines_do_not_count_as_capacity() {
        let p = ScalePolicy {
            max_use_count: 1,
            capacity_per_machine: 3,
            ..P
        };
        let ms = [m("a", S::Ready, 0, 1, 0)];
        // 2 waiting jobs, max one job per machine: two new machines.
        assert_eq!(plan(&ms, 2, 0, &p).create, 2);
    }

    #[test]
    fn machines_being_destroyed_count_toward_the_maximum() {
        let ms: Vec<_> = (0..5)
            .map(|i| m(&i.to_string(), S::Destroying, 0, 0, 0))
            .collect();
        assert_eq!(plan(&ms, 4, 0, &P).create, 0);
    }
}
