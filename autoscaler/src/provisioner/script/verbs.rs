//! The protocol's verbs on a script: each runs [`ScriptProvisioner::call`] with its argv, its
//! request fields, its timeout and its answer's parser.

use futures::future::BoxFuture;
use serde_json::json;

use super::super::protocol::{
    self, CreateRequest, Created, Destroyed, Info, ListedMachine, StartAnswer, Status, StopAnswer,
};
use super::super::{Labels, Provisioner, ProvisionerError, Result};
use super::ScriptProvisioner;

impl Provisioner for ScriptProvisioner {
    fn info(&self) -> BoxFuture<'_, Result<Info>> {
        Box::pin(async move {
            self.call(
                "info",
                None,
                json!({}),
                self.timeouts.info,
                protocol::parse_info,
            )
            .await
        })
    }

    fn create(&self, request: CreateRequest) -> BoxFuture<'_, Result<Vec<Created>>> {
        Box::pin(async move {
            let fields = serde_json::to_value(&request)
                .map_err(|e| ProvisionerError::Spawn(e.to_string()))?;
            self.call("create", None, fields, self.timeouts.create, |out| {
                protocol::parse_created(out, &request.machines)
            })
            .await
        })
    }

    fn list(&self, labels: Labels) -> BoxFuture<'_, Result<Vec<ListedMachine>>> {
        Box::pin(async move {
            self.call(
                "list",
                None,
                json!({"labels": labels}),
                self.timeouts.list,
                protocol::parse_list,
            )
            .await
        })
    }

    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Status>> {
        Box::pin(async move {
            self.call(
                "status",
                Some(id),
                json!({"id": id}),
                self.timeouts.status,
                |out| protocol::parse_status(out, id),
            )
            .await
        })
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Destroyed>> {
        Box::pin(async move {
            self.call(
                "destroy",
                Some(id),
                json!({"id": id}),
                self.timeouts.destroy,
                |out| protocol::parse_destroyed(out, id),
            )
            .await
        })
    }

    fn stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StopAnswer>> {
        Box::pin(async move {
            self.call(
                "stop",
                Some(id),
                json!({"id": id}),
                self.timeouts.destroy,
                |out| protocol::parse_stopped(out, id),
            )
            .await
        })
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StartAnswer>> {
        Box::pin(async move {
            self.call(
                "start",
                Some(id),
                json!({"id": id}),
                self.timeouts.destroy,
                |out| protocol::parse_started(out, id),
            )
            .await
        })
    }
}
