//! A job's timeline as an operator reads it: the job's own steps joined with the steps of the
//! machine that ran it and the planner's decision that made room for it, each with why the job
//! waited for it. For a job that waited for a new machine:
//!
//! `taken -> [held] -> capacity_reserved -> machine_requested -> machine_running ->
//! sidecar_ready -> handed_over -> started -> finished`
//!
//! Machine steps from before the job arrived are left out (the job did not wait for them); the
//! reservation then names the free slot it got.

use serde::{Deserialize, Serialize};

use super::{Admin, JobView};
use crate::core::Millis;
use crate::core::job::JobPhase;
use crate::core::machine::MachineState;
use crate::decisions::Decision;
use crate::store::{JobRecord, MachineRecord};

/// One step, with why the job waited for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// ms since the Unix epoch.
    pub at: Millis,
    pub step: String,
    #[serde(default)]
    pub detail: Option<String>,
}

/// `GET /jobs/{id}`: the job, its timeline, and what it waits for now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: JobView,
    pub timeline: Vec<Step>,
    /// Why a job not yet with a sidecar still waits (the planner's latest word for its pool).
    #[serde(default)]
    pub waiting: Option<String>,
}

/// Where a step sorts among steps of the same millisecond.
fn rank(step: &str) -> u8 {
    match step {
        "taken" => 0,
        "held" => 1,
        "capacity_reserved" => 2,
        "machine_requested" => 3,
        "machine_running" => 4,
        "sidecar_ready" => 5,
        "handed_over" | "returned" => 6,
        "started" => 7,
        "failing" => 8,
        _ => 9,
    }
}

fn step(at: Millis, name: &str, detail: String) -> Step {
    Step {
        at,
        step: name.to_string(),
        detail: Some(detail),
    }
}

fn secs(from: Millis, to: Millis) -> String {
    format!("{:.1} s", to.saturating_sub(from) as f64 / 1000.0)
}

pub fn detail(admin: &Admin, r: &JobRecord, job: JobView) -> JobDetail {
    let machine = last_machine(admin, r);
    let mut steps: Vec<Step> = r
        .timeline
        .iter()
        .map(|s| Step {
            at: s.at,
            step: s.step.clone(),
            detail: s.detail.clone().or_else(|| own_detail(admin, r, s)),
        })
        .collect();
    let decisions = admin.decisions.recent(Some(&r.pool)).0;
    steps.push(reservation(r, &decisions, machine.as_ref(), &steps));
    if let Some(m) = &machine {
        steps.extend(machine_steps(m, r.accepted_at));
    }
    steps.sort_by_key(|s| (s.at, rank(&s.step)));
    JobDetail {
        waiting: waiting(admin, r),
        job,
        timeline: steps,
    }
}

/// The machine of the sidecar the job was last handed to.
fn last_machine(admin: &Admin, r: &JobRecord) -> Option<MachineRecord> {
    let sidecar = r.timeline.iter().rev().find_map(|s| s.sidecar)?;
    admin.machines.get(&r.pool)?.by_sidecar(sidecar)
}

fn own_detail(admin: &Admin, r: &JobRecord, s: &crate::store::JobStep) -> Option<String> {
    let taken = r.accepted_at;
    Some(match s.step.as_str() {
        "handed_over" => {
            let to = s
                .sidecar
                .and_then(|id| admin.machines.get(&r.pool)?.by_sidecar(id))
                .map_or_else(
                    || "a sidecar".to_string(),
                    |m| format!("machine {}'s sidecar", m.id),
                );
            format!(
                "to {to} at its job request, {} after it was taken",
                secs(taken, s.at)
            )
        }
        "started" => "the sidecar's first call for the job".into(),
        "finished" => format!(
            "GitLab has its final state, {} after it was taken",
            secs(taken, s.at)
        ),
        _ => return None,
    })
}

/// When room was made for the job, and why: the planner's first decision after the job came
/// that made machines for waiting jobs, else the free slot it was handed to.
fn reservation(
    r: &JobRecord,
    decisions: &[Decision],
    machine: Option<&MachineRecord>,
    steps: &[Step],
) -> Step {
    let planned = decisions
        .iter()
        .find(|d| d.at >= r.accepted_at && d.created > 0);
    if let Some(d) = planned {
        return step(
            d.at,
            "capacity_reserved",
            format!(
                "{}: {}; {} machine(s) requested",
                d.reason, d.summary, d.created
            ),
        );
    }
    let handed = steps.iter().find(|s| s.step == "handed_over");
    let at = handed.map_or(r.accepted_at, |s| s.at);
    let detail = match machine {
        Some(m) => format!("a free slot on machine {}", m.id),
        None => "a free slot of a waiting sidecar".into(),
    };
    step(at, "capacity_reserved", detail)
}

/// The machine's request, running and ready steps that came after the job was taken.
fn machine_steps(m: &MachineRecord, taken: Millis) -> Vec<Step> {
    let first = |state: MachineState| m.timeline.iter().find(|e| e.state == state).map(|e| e.at);
    let mut out = Vec::new();
    if m.created_at >= taken {
        out.push(step(
            m.created_at,
            "machine_requested",
            format!("machine {} requested from the provisioner", m.id),
        ));
    }
    if let Some(at) = first(MachineState::Booting).filter(|at| *at >= taken) {
        out.push(step(
            at,
            "machine_running",
            format!(
                "the provider reports it running, {} after its request",
                secs(m.created_at, at)
            ),
        ));
    }
    if let Some(at) = first(MachineState::Ready).filter(|at| *at >= taken) {
        out.push(step(
            at,
            "sidecar_ready",
            format!(
                "SSH, ready command and sidecar start took {}; its sidecar asked for a job",
                secs(first(MachineState::Booting).unwrap_or(m.created_at), at)
            ),
        ));
    }
    out
}

/// Why a job that no sidecar has yet still waits.
fn waiting(admin: &Admin, r: &JobRecord) -> Option<String> {
    if !matches!(r.phase, JobPhase::Queued) {
        return None;
    }
    if admin
        .pools
        .iter()
        .any(|p| p.name() == r.pool && p.paused_by_operator())
    {
        return Some("its pool is paused by an operator".into());
    }
    if !admin.machines.contains_key(&r.pool) {
        return Some("no sidecar of the pool has asked for a job yet".into());
    }
    let (_, latest) = admin.decisions.recent(Some(&r.pool));
    Some(match latest.first() {
        Some(d) => format!("{}: {}", d.reason, d.summary),
        None => "the pool's planner has not run yet".into(),
    })
}
