//! Protocol v1 on the wire: requests as sent, responses as parsed and checked. Unknown fields in
//! responses are ignored (scripts may say more); missing required fields, wrong types and
//! unknown states are refused with a message naming the field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Labels, ProvisionerError};
use crate::core::reconcile::ProviderState;

pub const PROTOCOL: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Info {
    pub protocol: u32,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub capabilities: Capabilities,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Capabilities {
    #[serde(default)]
    pub batch_create: bool,
    #[serde(default)]
    pub max_batch: Option<u32>,
    #[serde(default)]
    pub host_key: bool,
    /// `create` honours each machine's own `user_data` (sidecars started at boot).
    #[serde(default)]
    pub machine_user_data: bool,
    /// The provisioner answers `stop` and `start`: a machine can be parked, keeping its id,
    /// labels and disk, and brought back later.
    #[serde(default)]
    pub stop_start: bool,
}

impl Capabilities {
    /// Most machines one `create` call may carry.
    pub fn batch_size(&self) -> u32 {
        match (self.batch_create, self.max_batch) {
            (false, _) => 1,
            (true, Some(n)) => n.max(1),
            (true, None) => 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateItem {
    pub key: String,
    pub labels: Labels,
    /// This machine's own user-data (a bootstrap script carrying its sidecar token), for pools
    /// whose sidecars start at boot. Left out when absent, so older provisioners see the
    /// request they know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_data: Option<crate::secret::Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateRequest {
    pub machines: Vec<CreateItem>,
    pub ssh_public_key: String,
    pub user_data: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Created {
    pub key: String,
    pub id: String,
    pub state: ProviderState,
}

#[derive(Deserialize)]
struct CreateResponse {
    machines: Vec<Created>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ListedMachine {
    pub id: String,
    pub state: ProviderState,
    #[serde(default)]
    pub labels: Labels,
    /// The provider is taking the machine back (a spot reclaim; `api-spec/provisioner.md`,
    /// "Reporting a reclaim").
    #[serde(default)]
    pub interruption: Option<Interruption>,
}

/// A provider's notice that a machine is being taken back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Interruption {
    /// `spot_reclaim`, `maintenance`, or the provider's own word.
    pub reason: String,
    /// When the machine goes (RFC 3339), if the provider says.
    #[serde(default)]
    pub deadline: Option<String>,
}

#[derive(Deserialize)]
struct ListResponse {
    machines: Vec<ListedMachine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Status {
    pub id: String,
    pub state: ProviderState,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default = "default_user")]
    pub user: String,
    #[serde(default)]
    pub host_key: Option<String>,
    #[serde(default)]
    pub labels: Labels,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub interruption: Option<Interruption>,
}

fn default_port() -> u16 {
    22
}

fn default_user() -> String {
    "root".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destroyed {
    Stopping,
    Gone,
}

/// What `stop` answers: the machine is on its way down, down, or was never there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopAnswer {
    Stopping,
    Stopped,
    Gone,
}

/// What `start` answers: the machine is on its way up, up, or was never there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartAnswer {
    Starting,
    Running,
    Gone,
}

/// The answer of the verbs that act on one machine (`destroy`, `stop`, `start`).
#[derive(Deserialize)]
struct MachineAnswer<S> {
    id: String,
    state: S,
}

/// The optional body of a failed call.
#[derive(Deserialize, Default)]
pub struct ErrorResponse {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub retry_after: Option<u64>,
}

/// Parses exactly one JSON object from `stdout` into `T`.
fn parse<T: serde::de::DeserializeOwned>(verb: &str, stdout: &[u8]) -> Result<T, ProvisionerError> {
    let value: Value = serde_json::from_slice(stdout).map_err(|e| {
        let shown = String::from_utf8_lossy(&stdout[..stdout.len().min(200)]).into_owned();
        ProvisionerError::InvalidResponse(format!(
            "{verb}: stdout is not one JSON object ({e}); it began {shown:?}"
        ))
    })?;
    if !value.is_object() {
        return Err(ProvisionerError::InvalidResponse(format!(
            "{verb}: stdout is JSON but not an object"
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| ProvisionerError::InvalidResponse(format!("{verb}: {e}")))
}

pub fn parse_info(stdout: &[u8]) -> Result<Info, ProvisionerError> {
    let info: Info = parse("info", stdout)?;
    if info.protocol != PROTOCOL {
        return Err(ProvisionerError::InvalidResponse(format!(
            "info: speaks protocol {}, this autoscaler speaks {PROTOCOL}",
            info.protocol
        )));
    }
    if info.name.is_empty() || info.version.is_empty() {
        return Err(ProvisionerError::InvalidResponse(
            "info: empty name or version".into(),
        ));
    }
    Ok(info)
}

pub fn parse_created(
    stdout: &[u8],
    asked: &[CreateItem],
) -> Result<Vec<Created>, ProvisionerError> {
    let response: CreateResponse = parse("create", stdout)?;
    for m in &response.machines {
        if m.id.is_empty() {
            return Err(ProvisionerError::InvalidResponse(format!(
                "create: machine {} has an empty id",
                m.key
            )));
        }
        if !asked.iter().any(|a| a.key == m.key) {
            return Err(ProvisionerError::InvalidResponse(format!(
                "create: answered key {:?}, which was not asked for",
                m.key
            )));
        }
        if !matches!(m.state, ProviderState::Creating | ProviderState::Running) {
            return Err(ProvisionerError::InvalidResponse(format!(
                "create: machine {} is {:?} right after creation",
                m.id, m.state
            )));
        }
    }
    Ok(response.machines)
}

pub fn parse_list(stdout: &[u8]) -> Result<Vec<ListedMachine>, ProvisionerError> {
    Ok(parse::<ListResponse>("list", stdout)?.machines)
}

pub fn parse_status(stdout: &[u8], id: &str) -> Result<Status, ProvisionerError> {
    let status: Status = parse("status", stdout)?;
    if status.id != id {
        return Err(ProvisionerError::InvalidResponse(format!(
            "status: asked about {id:?}, answered about {:?}",
            status.id
        )));
    }
    if status.state == ProviderState::Running && status.address.as_deref().is_none_or(str::is_empty)
    {
        return Err(ProvisionerError::InvalidResponse(format!(
            "status: {id} is running but has no address"
        )));
    }
    Ok(status)
}

/// Reads the answer of a verb acting on machine `id`, which must answer about that machine.
fn parse_machine_answer<S: serde::de::DeserializeOwned>(
    verb: &str,
    stdout: &[u8],
    id: &str,
) -> Result<S, ProvisionerError> {
    let response: MachineAnswer<S> = parse(verb, stdout)?;
    if response.id != id {
        return Err(ProvisionerError::InvalidResponse(format!(
            "{verb}: asked about {id:?}, answered about {:?}",
            response.id
        )));
    }
    Ok(response.state)
}

pub fn parse_destroyed(stdout: &[u8], id: &str) -> Result<Destroyed, ProvisionerError> {
    parse_machine_answer("destroy", stdout, id)
}

pub fn parse_stopped(stdout: &[u8], id: &str) -> Result<StopAnswer, ProvisionerError> {
    parse_machine_answer("stop", stdout, id)
}

pub fn parse_started(stdout: &[u8], id: &str) -> Result<StartAnswer, ProvisionerError> {
    parse_machine_answer("start", stdout, id)
}

#[cfg(test)]
mod tests;
