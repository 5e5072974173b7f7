//! The modelled machines of one simulated pool, and what they cost: time alive, time idle,
//! billed time.

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
    pub billed_ms: u128,
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
            billed_ms: 0,
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
        });
        self.made += 1;
        self.peak = self
            .peak
            .max(u32::try_from(self.machines.len()).unwrap_or(u32::MAX));
    }

    pub fn next_boot_end(&self) -> Option<Millis> {
        self.machines
            .iter()
            .filter(|m| m.state == MachineState::Booting)
            .map(|m| m.boot_ends)
            .min()
    }

    /// Boots that ended by `now`: (machines ready, creations failed).
    pub fn finish_boots(&mut self, now: Millis) -> (u32, u32) {
        let (mut ready, mut failed) = (0, 0);
        let mut gone = Vec::new();
        for m in &mut self.machines {
            if m.state == MachineState::Booting && m.boot_ends <= now {
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
        let alive = now - m.created_at;
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
        Some(self.billed_ms as f64 / 3_600_000.0 * price)
    }
}
