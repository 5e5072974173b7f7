//! Clauses 13–17: `stop` and `start`, for a provisioner whose `info` declares `stop_start`.
//! They run on a machine of their own, made after the other clauses, so that a provisioner
//! without the capability is judged exactly as before (these clauses are then skipped).

use serde_json::json;

use super::clauses::owner_labels;
use super::{Kit, Outcome};
use crate::core::reconcile::ProviderState;
use crate::provisioner::Labels;
use crate::provisioner::protocol::{self, CreateItem, StartAnswer, StopAnswer};

/// How many clauses this file records.
const POWER_CLAUSES: usize = 5;

impl Kit {
    /// Clauses 13–17, on a second machine.
    pub(super) async fn power_clauses(&mut self) {
        match self.stop_start {
            None => return self.skip_power_clauses("needs clause 1", 0),
            Some(false) => {
                return self.skip_power_clauses("the provisioner does not declare stop_start", 0);
            }
            Some(true) => {}
        }
        let (item, id) = match self.running_machine().await {
            Ok(made) => made,
            Err(e) => {
                self.record(Outcome::Failed(format!(
                    "cannot make a running machine to stop: {e}"
                )));
                return self.skip_power_clauses("needs clause 13", 1);
            }
        };
        // 13. stop reaches stopped, same id and labels
        let outcome = self.stopped_with_labels(&id, &item.labels).await;
        self.record(outcome);
        // 14. stop again
        let outcome = match self.stop(&id).await {
            Ok(StopAnswer::Stopped) => Outcome::Passed,
            Ok(other) => Outcome::Failed(format!("a second stop answered {other:?}, not stopped")),
            Err(e) => Outcome::Failed(format!("a second stop failed: {e}")),
        };
        self.record(outcome);
        // 15. start reaches running, with an address
        let outcome = self.started_with_address(&id).await;
        self.record(outcome);
        // 16. start again
        let outcome = match self.start(&id).await {
            Ok(StartAnswer::Running) => Outcome::Passed,
            Ok(other) => Outcome::Failed(format!("a second start answered {other:?}, not running")),
            Err(e) => Outcome::Failed(format!("a second start failed: {e}")),
        };
        self.record(outcome);
        // 17. stop, then destroy the stopped machine
        let outcome = self.destroyed_while_stopped(&id).await;
        self.record(outcome);
    }

    /// Records `why` as the reason for each power clause not yet recorded, after `done` of them.
    fn skip_power_clauses(&mut self, why: &str, done: usize) {
        for _ in done..POWER_CLAUSES {
            self.record(Outcome::Skipped(why.to_string()));
        }
    }

    /// Creates a machine and waits until it runs.
    async fn running_machine(&mut self) -> Result<(CreateItem, String), String> {
        let (item, create) = self.new_machine_request()?;
        let id = self.create(&create, &item).await?;
        let within = self.options.timeouts.create;
        if let Err(e) = self.wait_for(&id, ProviderState::Running, within).await {
            self.clean_up(&id).await;
            return Err(e);
        }
        Ok((item, id))
    }

    async fn stopped_with_labels(&mut self, id: &str, labels: &Labels) -> Outcome {
        if let Err(e) = self.stop(id).await {
            return Outcome::Failed(e);
        }
        let within = self.options.timeouts.destroy;
        let status = match self.wait_for(id, ProviderState::Stopped, within).await {
            Ok(status) => status,
            Err(e) => return Outcome::Failed(format!("after stop: {e}")),
        };
        if !carries(&status.labels, labels) {
            return Outcome::Failed(format!(
                "stopped, status gives labels {:?}, created with {labels:?}",
                status.labels
            ));
        }
        match self.list(&owner_labels(labels)).await {
            Ok(machines) => match machines.iter().find(|m| m.id == id) {
                Some(m) if m.state == ProviderState::Stopped && carries(&m.labels, labels) => {
                    Outcome::Passed
                }
                Some(m) => Outcome::Failed(format!(
                    "stopped, list gives it {:?} with labels {:?}",
                    m.state, m.labels
                )),
                None => Outcome::Failed(format!("{id} is stopped but not in the list")),
            },
            Err(e) => Outcome::Failed(e),
        }
    }

    async fn started_with_address(&mut self, id: &str) -> Outcome {
        match self.start(id).await {
            Ok(StartAnswer::Starting | StartAnswer::Running) => {}
            Ok(StartAnswer::Gone) => return Outcome::Failed(format!("start answered {id} gone")),
            Err(e) => return Outcome::Failed(e),
        }
        let within = self.options.timeouts.create;
        match self.wait_for(id, ProviderState::Running, within).await {
            Ok(status) if status.address.as_deref().is_some_and(|a| !a.is_empty()) => {
                Outcome::Passed
            }
            Ok(_) => Outcome::Failed("running without an address".into()),
            Err(e) => Outcome::Failed(format!("after start: {e}")),
        }
    }

    async fn destroyed_while_stopped(&mut self, id: &str) -> Outcome {
        let within = self.options.timeouts.destroy;
        let stopped = match self.stop(id).await {
            Ok(_) => self.wait_for(id, ProviderState::Stopped, within).await,
            Err(e) => Err(e),
        };
        if let Err(e) = stopped {
            self.clean_up(id).await;
            return Outcome::Failed(format!("cannot stop the machine to destroy it: {e}"));
        }
        match self.destroy(id).await {
            Ok(_) => match self.wait_for(id, ProviderState::Gone, within).await {
                Ok(_) => Outcome::Passed,
                Err(e) => Outcome::Failed(format!("after destroy: {e}")),
            },
            Err(e) => Outcome::Failed(format!("{e} (the machine may be left behind: {id})")),
        }
    }

    /// Destroys a machine a failed clause left behind; a failure here is already reported.
    async fn clean_up(&mut self, id: &str) {
        if let Err(e) = self.destroy(id).await {
            tracing::warn!(machine.id = id, error = %e, "the check could not destroy its machine");
        }
    }

    async fn stop(&mut self, id: &str) -> Result<StopAnswer, String> {
        let timeout = self.options.timeouts.destroy;
        let req = self.request(json!({"id": id}));
        let v = self.call("stop", Some(id), &req, timeout).await?;
        protocol::parse_stopped(v.to_string().as_bytes(), id).map_err(|e| e.to_string())
    }

    async fn start(&mut self, id: &str) -> Result<StartAnswer, String> {
        let timeout = self.options.timeouts.destroy;
        let req = self.request(json!({"id": id}));
        let v = self.call("start", Some(id), &req, timeout).await?;
        protocol::parse_started(v.to_string().as_bytes(), id).map_err(|e| e.to_string())
    }
}

/// Every one of `wanted` is among `labels`.
fn carries(labels: &Labels, wanted: &Labels) -> bool {
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}
