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

#[derive(Deserialize)]
struct DestroyResponse {
    id: String,
    state: Destroyed,
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

pub fn parse_destroyed(stdout: &[u8], id: &str) -> Result<Destroyed, ProvisionerError> {
    let response: DestroyResponse = parse("destroy", stdout)?;
    if response.id != id {
        return Err(ProvisionerError::InvalidResponse(format!(
            "destroy: asked about {id:?}, answered about {:?}",
            response.id
        )));
    }
    Ok(response.state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_needs_an_address_when_running_and_defaults_port_and_user() {
        let s = parse_status(br#"{"id":"a","state":"running","address":"10.0.0.1"}"#, "a").unwrap();
        assert_eq!((s.port, s.user.as_str()), (22, "root"));
        assert!(parse_status(br#"{"id":"a","state":"running"}"#, "a").is_err());
        assert!(parse_status(br#"{"id":"b","state":"gone"}"#, "a").is_err());
        let e = parse_status(br#"{"id":"a","state":"exploded"}"#, "a").unwrap_err();
        assert!(e.to_string().contains("exploded"), "{e}");
    }

    #[test]
    fn garbage_and_trailing_output_are_refused() {
        assert!(parse_list(b"hello").is_err());
        assert!(parse_list(br#"{"machines":[]} extra"#).is_err());
        assert!(parse_list(br#"[1,2]"#).is_err());
        assert!(
            parse_list(br#"{"machines":[{"state":"running"}]}"#)
                .unwrap_err()
                .to_string()
                .contains("id")
        );
        assert_eq!(parse_list(b"  {\"machines\": []}\n").unwrap(), vec![]);
    }

    #[test]
    fn a_machines_own_user_data_is_sent_only_when_it_has_one() {
        let plain = CreateItem {
            key: "k1".into(),
            labels: Labels::new(),
            user_data: None,
        };
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("user_data").is_none(), "{json}");
        let own = CreateItem {
            user_data: Some(crate::secret::Secret::new("#!/bin/sh\necho hi\n")),
            ..plain
        };
        let json = serde_json::to_value(&own).unwrap();
        assert_eq!(json["user_data"], "#!/bin/sh\necho hi\n");
        assert!(!format!("{own:?}").contains("echo hi"), "Debug hides it");
    }

    #[test]
    fn create_answers_must_match_what_was_asked() {
        let asked = vec![CreateItem {
            key: "k1".into(),
            labels: Labels::new(),
            user_data: None,
        }];
        assert!(
            parse_created(
                br#"{"machines":[{"key":"k1","id":"i-1","state":"creating"}]}"#,
                &asked
            )
            .is_ok()
        );
        assert!(
            parse_created(
                br#"{"machines":[{"key":"k2","id":"i-1","state":"creating"}]}"#,
                &asked
            )
            .is_err()
        );
        assert!(
            parse_created(
                br#"{"machines":[{"key":"k1","id":"","state":"creating"}]}"#,
                &asked
            )
            .is_err()
        );
        assert!(
            parse_created(
                br#"{"machines":[{"key":"k1","id":"i","state":"gone"}]}"#,
                &asked
            )
            .is_err()
        );
    }

    #[test]
    fn info_must_speak_protocol_1() {
        assert!(parse_info(br#"{"protocol":1,"name":"x","version":"1"}"#).is_ok());
        assert!(parse_info(br#"{"protocol":2,"name":"x","version":"1"}"#).is_err());
        assert_eq!(
            parse_info(
                br#"{"protocol":1,"name":"x","version":"1","capabilities":{"batch_create":true}}"#
            )
            .unwrap()
            .capabilities
            .batch_size(),
            10
        );
    }
}
