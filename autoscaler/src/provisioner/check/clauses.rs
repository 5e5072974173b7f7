//! The clauses themselves: `info`, one machine taken through create, status, list and destroy,
//! and requests that name nothing real. Each records its outcome in order, so that the report
//! can number them.

use std::time::Duration;

use serde_json::json;

use super::{Kit, Outcome};
use crate::core::reconcile::ProviderState;
use crate::provisioner::Labels;
use crate::provisioner::protocol::{self, CreateItem};

impl Kit {
    /// Clause 1.
    pub(super) async fn info(&mut self) -> String {
        let timeouts = self.options.timeouts.clone();
        // 1. info
        let req = self.request(json!({}));
        match self.call("info", None, &req, timeouts.info).await {
            Ok(v) => match protocol::parse_info(v.to_string().as_bytes()) {
                Ok(info) => {
                    self.record(Outcome::Passed);
                    self.stop_start = Some(info.capabilities.stop_start);
                    format!("{} {}", info.name, info.version)
                }
                Err(e) => {
                    self.record(Outcome::Failed(e.to_string()));
                    "unnamed".into()
                }
            },
            Err(e) => {
                self.record(Outcome::Failed(e));
                "no answer to info".into()
            }
        }
    }

    /// Clauses 2–8, on one machine.
    pub(super) async fn machine_clauses(&mut self) {
        let timeouts = self.options.timeouts.clone();
        let (item, create) = match self.new_machine_request() {
            Ok(made) => made,
            Err(e) => {
                self.record(Outcome::Failed(e));
                self.skip_machine_clauses("needs clause 2");
                return;
            }
        };
        let labels = item.labels.clone();
        let id = match self.create(&create, &item).await {
            Ok(id) => {
                self.record(Outcome::Passed);
                id
            }
            Err(e) => {
                self.record(Outcome::Failed(e));
                self.skip_machine_clauses("needs clause 2");
                return;
            }
        };
        let outcome = match self.create(&create, &item).await {
            Ok(again) if again == id => Outcome::Passed,
            Ok(again) => Outcome::Failed(format!("the same key gave {id:?}, then {again:?}")),
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 4. status reaches running
        let outcome = match self
            .wait_for(&id, ProviderState::Running, timeouts.create)
            .await
        {
            Ok(status) if status.address.as_deref().is_some_and(|a| !a.is_empty()) => {
                Outcome::Passed
            }
            Ok(_) => Outcome::Failed("running without an address".into()),
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 5. list returns it with its labels
        let owner = owner_labels(&labels);
        let outcome = match self.list(&owner).await {
            Ok(machines) => match machines.iter().find(|m| m.id == id) {
                Some(m) if labels.iter().all(|(k, v)| m.labels.get(k) == Some(v)) => {
                    Outcome::Passed
                }
                Some(m) => Outcome::Failed(format!(
                    "listed with labels {:?}, created with {labels:?}",
                    m.labels
                )),
                None => Outcome::Failed(format!("{id} is not in the list")),
            },
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 6. destroy, then gone
        let outcome = match self.destroy(&id).await {
            Ok(_) => match self
                .wait_for(&id, ProviderState::Gone, timeouts.destroy)
                .await
            {
                Ok(_) => Outcome::Passed,
                Err(e) => Outcome::Failed(format!("after destroy: {e}")),
            },
            Err(e) => Outcome::Failed(format!("{e} (the machine may be left behind: {id})")),
        };
        self.record(outcome);

        // 7. list no longer returns it
        let outcome = match self.list(&owner).await {
            Ok(machines)
                if machines
                    .iter()
                    .any(|m| m.id == id && m.state != ProviderState::Gone) =>
            {
                Outcome::Failed(format!("{id} is still listed after it was destroyed"))
            }
            Ok(_) => Outcome::Passed,
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 8. destroy again
        let outcome = match self.destroy(&id).await {
            Ok(protocol::Destroyed::Gone) => Outcome::Passed,
            Ok(other) => Outcome::Failed(format!("a second destroy answered {other:?}, not gone")),
            Err(e) => Outcome::Failed(format!("a second destroy failed: {e}")),
        };
        self.record(outcome);
    }

    /// Clauses 9–11: answers to requests that name nothing real.
    pub(super) async fn error_clauses(&mut self) {
        let timeouts = self.options.timeouts.clone();
        // 9. unknown id
        let unknown = format!("check-unknown-{:08x}", rand::random::<u32>());
        let req = self.request(json!({"id": unknown}));
        let outcome = match self
            .call("status", Some(&unknown), &req, timeouts.status)
            .await
        {
            Ok(v) => match protocol::parse_status(v.to_string().as_bytes(), &unknown) {
                Ok(s) if s.state == ProviderState::Gone => Outcome::Passed,
                Ok(s) => Outcome::Failed(format!("answered {:?}", s.state)),
                Err(e) => Outcome::Failed(e.to_string()),
            },
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 10. invalid JSON on stdin
        let outcome = self
            .refused(&["list"], b"this is { not JSON", timeouts.list)
            .await;
        self.record(outcome);
        // 11. unknown verb
        let req = self.request(json!({}));
        let outcome = self.refused(&["frobnicate"], &req, timeouts.info).await;
        self.record(outcome);
    }

    /// A machine to create, with fresh key and labels, and the `create` request asking for it.
    pub(super) fn new_machine_request(&self) -> Result<(CreateItem, Vec<u8>), String> {
        let key = format!("check-{:08x}", rand::random::<u32>());
        let labels: Labels = [
            (
                "autoscaler-id".to_string(),
                format!("check-{:08x}", rand::random::<u32>()),
            ),
            ("autoscaler-pool".to_string(), self.options.pool.clone()),
            ("autoscaler-key".to_string(), key.clone()),
        ]
        .into();
        let public_key = throwaway_public_key()
            .map_err(|e| format!("cannot make an SSH key for the test: {e}"))?;
        let item = CreateItem {
            key,
            labels,
            user_data: None,
        };
        let create = self
            .request(json!({"machines": [item], "ssh_public_key": public_key, "user_data": null}));
        Ok((item, create))
    }

    pub(super) async fn create(
        &mut self,
        request: &[u8],
        item: &CreateItem,
    ) -> Result<String, String> {
        let timeout = self.options.timeouts.create;
        let v = self.call("create", None, request, timeout).await?;
        let created = protocol::parse_created(v.to_string().as_bytes(), std::slice::from_ref(item))
            .map_err(|e| e.to_string())?;
        match created.as_slice() {
            [one] => Ok(one.id.clone()),
            other => Err(format!("answered {} machines for one key", other.len())),
        }
    }

    pub(super) async fn list(
        &mut self,
        labels: &Labels,
    ) -> Result<Vec<protocol::ListedMachine>, String> {
        let timeout = self.options.timeouts.list;
        let req = self.request(json!({"labels": labels}));
        let v = self.call("list", None, &req, timeout).await?;
        protocol::parse_list(v.to_string().as_bytes()).map_err(|e| e.to_string())
    }

    pub(super) async fn destroy(&mut self, id: &str) -> Result<protocol::Destroyed, String> {
        let timeout = self.options.timeouts.destroy;
        let req = self.request(json!({"id": id}));
        let v = self.call("destroy", Some(id), &req, timeout).await?;
        protocol::parse_destroyed(v.to_string().as_bytes(), id).map_err(|e| e.to_string())
    }

    /// Polls `status` until the machine is in `state`, at most `within`.
    pub(super) async fn wait_for(
        &mut self,
        id: &str,
        state: ProviderState,
        within: Duration,
    ) -> Result<protocol::Status, String> {
        let started = crate::clock::monotonic();
        let timeout = self.options.timeouts.status;
        let req = self.request(json!({"id": id}));
        loop {
            let v = self.call("status", Some(id), &req, timeout).await?;
            let status =
                protocol::parse_status(v.to_string().as_bytes(), id).map_err(|e| e.to_string())?;
            if status.state == state {
                return Ok(status);
            }
            if started.elapsed() >= within {
                return Err(format!(
                    "still {:?} after {within:?}, expected {state:?}",
                    status.state
                ));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    async fn refused(&mut self, args: &[&str], stdin: &[u8], timeout: Duration) -> Outcome {
        match self.p.call_raw(args, stdin, timeout, None).await {
            Ok(raw) if raw.timed_out => {
                Outcome::Failed(format!("did not answer within {timeout:?}"))
            }
            Ok(raw) if raw.status.is_some_and(|s| s.success()) => {
                Outcome::Failed("exited 0 (it must refuse)".into())
            }
            Ok(_) => Outcome::Passed,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

/// The labels `list` is asked with: the owner's, without the machine's own key.
pub(super) fn owner_labels(labels: &Labels) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| *k != "autoscaler-key")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A public key to authorise on the test machine; its private half is thrown away.
fn throwaway_public_key() -> Result<String, String> {
    let key = russh::keys::PrivateKey::random(&mut rand::rng(), russh::keys::Algorithm::Ed25519)
        .map_err(|e| e.to_string())?;
    let mut public = key.public_key().clone();
    public.set_comment("autoscaler-provisioner-check");
    public.to_openssh().map_err(|e| e.to_string())
}
