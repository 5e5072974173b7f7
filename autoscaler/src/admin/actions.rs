//! What an operator can do without a restart: drain a machine, destroy an idle one, pause and
//! resume a pool's intake. Each answers the object as it is after the action; a name that does
//! not exist is `404` with the name, an action the object's state does not allow `409`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};

use super::{Admin, AdminError, PoolStatus};
use crate::core::machine::{MachineEvent, MachineState};
use crate::store::MachineRecord;

/// Stops giving the machine jobs; the planner destroys it once its jobs ended (`drained`).
pub async fn drain(
    State(admin): State<Arc<Admin>>,
    Path(id): Path<String>,
) -> Result<Json<MachineRecord>, AdminError> {
    let (machines, m) = admin.machine(&id)?;
    if !(m.state.takes_jobs() || m.state.is_starting() || m.state == MachineState::Draining) {
        return Err(AdminError::Conflict(format!(
            "machine {id} is {} and cannot be drained",
            m.state
        )));
    }
    machines
        .apply(&id, MachineEvent::Drain, "drained by an operator")
        .map_err(|e| AdminError::Conflict(format!("machine {id}: {e}")))?;
    tracing::info!(machine.id = %id, pool = %m.pool, "machine drained by an operator");
    current(machines, &id)
}

/// Destroys a machine that runs no job; one that does is refused (`409`): drain it instead.
pub async fn destroy(
    State(admin): State<Arc<Admin>>,
    Path(id): Path<String>,
) -> Result<Json<MachineRecord>, AdminError> {
    let (machines, m) = admin.machine(&id)?;
    let running = m
        .sidecar
        .and_then(|s| admin.jobs.with_each_sidecar().get(&s).copied())
        .unwrap_or(0);
    if running > 0 || m.state == MachineState::Busy {
        return Err(AdminError::Conflict(format!(
            "machine {id} runs {running} job(s); drain it instead, it is destroyed once they end"
        )));
    }
    if matches!(m.state, MachineState::Gone | MachineState::Destroying) {
        return Err(AdminError::Conflict(format!(
            "machine {id} is already {}",
            m.state
        )));
    }
    // The next reconcile pass asks the provisioner to destroy it (and retries until gone).
    machines
        .apply(&id, MachineEvent::Destroy, "destroyed by an operator")
        .map_err(|e| AdminError::Conflict(format!("machine {id}: {e}")))?;
    tracing::info!(machine.id = %id, pool = %m.pool, "machine destroyed by an operator");
    current(machines, &id)
}

fn current(
    machines: &crate::machines::PoolMachines,
    id: &str,
) -> Result<Json<MachineRecord>, AdminError> {
    machines
        .get(id)
        .map(Json)
        .ok_or_else(|| AdminError::Internal(format!("machine {id} vanished")))
}

pub async fn pause(
    State(admin): State<Arc<Admin>>,
    Path(name): Path<String>,
) -> Result<Json<PoolStatus>, AdminError> {
    set_paused(&admin, &name, true)
}

pub async fn resume(
    State(admin): State<Arc<Admin>>,
    Path(name): Path<String>,
) -> Result<Json<PoolStatus>, AdminError> {
    set_paused(&admin, &name, false)
}

/// A paused pool takes no jobs from GitLab; its running jobs go on and its machines follow the
/// pool's policy (idle ones go after `idle_time`).
fn set_paused(admin: &Admin, name: &str, paused: bool) -> Result<Json<PoolStatus>, AdminError> {
    let pool = admin.pool(name)?;
    if pool.set_paused_by_operator(paused) {
        tracing::info!(pool = %name, paused, "pool {} by an operator", if paused { "paused" } else { "resumed" });
    }
    super::views::pool_statuses(admin)
        .into_iter()
        .find(|p| p.name == name)
        .map(Json)
        .ok_or_else(|| AdminError::Internal(format!("pool {name} vanished")))
}
