//! The modelled machines of one simulated pool, and what they cost: time alive, time idle,
//! billed time. A warm pool's machine stops at once (the provider's stop is not modelled as
//! taking time) and is then billed at the stopped (disk) price; a start takes a drawn start
//! time, billed at the full price, like running.

use super::policy::Cloud;
use super::rng::Rng;
use crate::core::Millis;
use crate::core::machine::MachineState;
use crate::core::scaler::MachineView;

#[derive(Debug, Clone)]
pub struct Machine {
    pub id: String,
    pub state: MachineState,
    pub created_at: Millis,
    /// When its boot ends (ready, or failed).
    pub boot_ends: Millis,
    pub fails: bool,
    pub running: u32,
    pub use_count: u32,
    pub idle_since: Millis,
    /// When it was last asked to become ready: its create, or its start from stopped.
    pub requested_at: Millis,
    /// Since when it is stopped, while it is.
    stopped_since: Millis,
    /// Time spent stopped, before the current stop.
    stopped_ms: Millis,
}

impl Machine {
    pub fn view(&self) -> MachineView {
        MachineView {
            id: self.id.clone(),
            state: self.state,
            running_jobs: self.running,
            use_count: self.use_count,
            idle_since: self.idle_since,
            created_at: self.created_at,
        }
    }

    fn is_idle(&self) -> bool {
        matches!(self.state, MachineState::Ready | MachineState::Draining) && self.running == 0
    }
}

/// The fleet and its running totals.
#[derive(Debug)]
pub struct Fleet {
    pub machines: Vec<Machine>,
    cloud: Cloud,
    seed: u64,
    made: u64,
    pub created: u32,
    pub failed: u32,
    pub never_used: u32,
    pub peak: u32,
    pub alive_ms: u128,
    pub idle_ms: u128,
    /// Time from a create (or a warm pool's start) to ready or failure: paid, not yet usable.
    pub booting_ms: u128,
    pub billed_ms: u128,
    /// Time machines spent stopped (billed at the stopped price).
    pub stopped_ms: u128,
    starts: u64,
}

impl Fleet {
    pub fn new(cloud: Cloud, seed: u64) -> Self {
        Self {
            machines: Vec::new(),
            cloud,
            seed,
            made: 0,
            created: 0,
            failed: 0,
            never_used: 0,
            peak: 0,
            alive_ms: 0,
            idle_ms: 0,
            booting_ms: 0,
            billed_ms: 0,
            stopped_ms: 0,
            starts: 0,
        }
    }

    /// Asks the cloud for a machine. The n-th machine of a pool boots as long, and fails or
    /// not, whatever the policy, so that policies are compared on the same luck.
    pub fn create(&mut self, now: Millis) {
        let mut rng = Rng::new(self.seed ^ self.made.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let (low, high) = self.cloud.boot_time;
        let drawn = low + (rng.unit() * (high - low) as f64) as Millis;
        let replayed = &self.cloud.boot_times;
        let boot = match usize::try_from(self.made) {
            Ok(n) if !replayed.is_empty() => replayed[n % replayed.len()],
            _ => drawn,
        };
        let fails = rng.unit() < self.cloud.failure_rate;
        self.machines.push(Machine {
            id: format!("m{}", self.made),
            state: MachineState::Booting,
            created_at: now,
            boot_ends: now + boot,
            fails,
            running: 0,
            use_count: 0,
            idle_since: now,
            requested_at: now,
            stopped_since: 0,
            stopped_ms: 0,
        });
        self.made += 1;
        self.peak = self
            .peak
            .max(u32::try_from(self.machines.len()).unwrap_or(u32::MAX));
    }

    pub fn next_boot_end(&self) -> Option<Millis> {
        self.machines
            .iter()
            .filter(|m| matches!(m.state, MachineState::Booting | MachineState::Starting))
            .map(|m| m.boot_ends)
            .min()
    }

    /// Boots that ended by `now`: (machines ready, creations failed).
    pub fn finish_boots(&mut self, now: Millis) -> (u32, u32) {
        let (mut ready, mut failed) = (0, 0);
        let mut gone = Vec::new();
        for m in &mut self.machines {
            let on_its_way = matches!(m.state, MachineState::Starting | MachineState::Booting);
            if on_its_way && m.boot_ends <= now {
                self.booting_ms += u128::from(m.boot_ends - m.requested_at);
            }
            if m.state == MachineState::Starting && m.boot_ends <= now {
                m.state = MachineState::Ready;
                m.idle_since = m.boot_ends;
            } else if m.state == MachineState::Booting && m.boot_ends <= now {
                if m.fails {
                    failed += 1;
                    gone.push(m.id.clone());
                } else {
                    ready += 1;
                    m.state = MachineState::Ready;
                    m.idle_since = m.boot_ends;
                }
            }
        }
        self.failed += failed;
        self.created += ready;
        for id in gone {
            self.remove(&id, now);
        }
        (ready, failed)
    }

    /// A job starts on `index`.
    pub fn start_job(&mut self, index: usize, now: Millis) {
        let m = &mut self.machines[index];
        if m.is_idle() {
            self.idle_ms += u128::from(now - m.idle_since);
        }
        m.running += 1;
        m.use_count += 1;
        if m.state == MachineState::Ready {
            m.state = MachineState::Busy;
        }
    }

    pub fn end_job(&mut self, id: &str, now: Millis) {
        if let Some(m) = self.machines.iter_mut().find(|m| m.id == id) {
            m.running -= 1;
            if m.running == 0 {
                m.idle_since = now;
                if m.state == MachineState::Busy {
                    m.state = MachineState::Ready;
                }
            }
        }
    }

    /// Warm pool: an idle machine stops; its idle time ends and its stopped time begins.
    pub fn stop(&mut self, id: &str, now: Millis) {
        if let Some(m) = self.machines.iter_mut().find(|m| m.id == id) {
            assert_eq!(m.running, 0, "the planner stopped a busy machine");
            self.idle_ms += u128::from(now - m.idle_since);
            m.state = MachineState::Stopped;
            m.stopped_since = now;
        }
    }

    /// Warm pool: a stopped machine starts; it takes jobs after a drawn start time. The n-th
    /// start takes as long whatever the policy.
    pub fn start(&mut self, id: &str, now: Millis) {
        let mut rng = Rng::new(!self.seed ^ self.starts.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let (low, high) = self.cloud.start_time;
        let took = low + (rng.unit() * (high - low) as f64) as Millis;
        self.starts += 1;
        if let Some(m) = self.machines.iter_mut().find(|m| m.id == id) {
            m.stopped_ms += now - m.stopped_since;
            m.state = MachineState::Starting;
            m.requested_at = now;
            m.boot_ends = now + took;
        }
    }

    pub fn drain(&mut self, id: &str) {
        if let Some(m) = self.machines.iter_mut().find(|m| m.id == id) {
            m.state = MachineState::Draining;
        }
    }

    /// Destroys a machine (the planner only names idle ones); its time is accounted.
    pub fn remove(&mut self, id: &str, now: Millis) {
        let Some(index) = self.machines.iter().position(|m| m.id == id) else {
            return;
        };
        let m = self.machines.swap_remove(index);
        assert_eq!(m.running, 0, "the planner destroyed a busy machine");
        if m.is_idle() {
            self.idle_ms += u128::from(now - m.idle_since);
        }
        if m.use_count == 0 && m.state != MachineState::Booting {
            self.never_used += 1;
        }
        let stopped = m.stopped_ms
            + if m.state == MachineState::Stopped {
                now - m.stopped_since
            } else {
                0
            };
        self.stopped_ms += u128::from(stopped);
        // Stopped time is billed at the disk's price, not the machine's (per second).
        let alive = now - m.created_at - stopped;
        self.alive_ms += u128::from(alive);
        let period = self.cloud.billing_period;
        self.billed_ms += u128::from(if period == 0 {
            alive
        } else {
            alive.div_ceil(period).max(1) * period
        });
    }

    /// The end of the simulation: every machine left is accounted as if destroyed now.
    pub fn close(&mut self, now: Millis) {
        let ids: Vec<String> = self
            .machines
            .iter()
            .filter(|m| m.running == 0)
            .map(|m| m.id.clone())
            .collect();
        for id in ids {
            self.remove(&id, now);
        }
    }

    pub fn cost(&self) -> Option<f64> {
        let price = self.cloud.price_per_hour?;
        let disk = self.cloud.stopped_price_per_hour.unwrap_or(0.0);
        Some((self.billed_ms as f64 * price + self.stopped_ms as f64 * disk) / 3_600_000.0)
    }
}
