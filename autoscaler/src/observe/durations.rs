//! Machine durations read from the machines' timelines: creation (requested to running at the
//! provider), readiness (to the sidecar's first job request), deletion (destroy decided to
//! gone), lifetime (requested to gone), and failures.
//!
//! The timeline already holds every transition with its time, so the machine code needs no
//! metric calls: this task looks at each pool's machines whenever they change and observes each
//! step once. Machines the pool held when the task started count as seen (their steps belong
//! to an earlier run of the autoscaler).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::core::machine::MachineState;
use crate::machines::PoolMachines;
use crate::metrics::{Metrics, PoolLabel, seconds};
use crate::store::MachineRecord;

/// Shortest time between two looks: the timeline carries the times, so looking less often
/// loses no precision, and a busy pool changes many times a second.
const GAP: Duration = Duration::from_millis(250);

/// Which steps of a machine were observed already.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    running: bool,
    ready: bool,
    failed: bool,
    gone: bool,
}

impl Seen {
    /// Everything the machine's timeline holds so far, as seen.
    fn all(m: &MachineRecord) -> Self {
        let mut seen = Self::default();
        for entry in &m.timeline {
            seen.mark(entry.state);
        }
        seen.mark(m.state);
        seen
    }

    fn mark(&mut self, state: MachineState) {
        match state {
            MachineState::Booting => self.running = true,
            MachineState::Ready => self.ready = true,
            MachineState::Failed => self.failed = true,
            MachineState::Gone => self.gone = true,
            _ => {}
        }
    }
}

/// Observes the steps of `machines` until `stop`.
pub async fn watch_machines(
    metrics: Arc<Metrics>,
    machines: Arc<PoolMachines>,
    stop: CancellationToken,
) {
    let mut changes = machines.subscribe();
    let mut seen: HashMap<String, Seen> = machines
        .snapshot()
        .iter()
        .map(|m| (m.id.clone(), Seen::all(m)))
        .collect();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let snapshot = machines.snapshot();
        seen.retain(|id, _| snapshot.iter().any(|m| &m.id == id));
        for m in &snapshot {
            observe(
                &metrics,
                machines.pool(),
                m,
                seen.entry(m.id.clone()).or_default(),
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(GAP) => {}
        }
    }
}

/// Observes the steps of `m` not seen yet.
fn observe(metrics: &Metrics, pool: &str, m: &MachineRecord, seen: &mut Seen) {
    let label = PoolLabel {
        pool: pool.to_string(),
    };
    let first = |state: MachineState| m.timeline.iter().find(|e| e.state == state);
    let since_request = |at: u64| seconds(at.saturating_sub(m.created_at));
    if !seen.running
        && let Some(e) = first(MachineState::Booting)
    {
        seen.running = true;
        metrics
            .machine_creation
            .get_or_create(&label)
            .observe(since_request(e.at));
    }
    if !seen.ready
        && let Some(e) = first(MachineState::Ready)
    {
        seen.ready = true;
        metrics
            .machine_readiness
            .get_or_create(&label)
            .observe(since_request(e.at));
    }
    if !seen.failed && first(MachineState::Failed).is_some() {
        seen.failed = true;
        metrics.machine_failure(pool, "failed", 1);
    }
    if !seen.gone
        && let Some(gone) = first(MachineState::Gone)
    {
        seen.gone = true;
        // Gone without a destroy from the autoscaler, and not already counted as failed: the
        // provider lost it behind our back.
        if first(MachineState::Destroying).is_none() && first(MachineState::Failed).is_none() {
            let reason = if first(MachineState::Booting).is_some() {
                "vanished"
            } else {
                "create_lost"
            };
            metrics.machine_failure(pool, reason, 1);
        }
        metrics
            .machine_lifetime
            .get_or_create(&label)
            .observe(since_request(gone.at));
        if let Some(destroying) = first(MachineState::Destroying) {
            metrics
                .machine_deletion
                .get_or_create(&label)
                .observe(seconds(gone.at.saturating_sub(destroying.at)));
        }
    }
}
