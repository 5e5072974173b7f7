//! The runner's description of itself (`info`, runner-protocol.md §3.1), sent with every
//! call, and the bodies of the `/runners` calls that register, verify and unregister it (§2).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::null_as_default;
use crate::secret::Secret;

/// The 31 feature keys of `info.features` (§3.1). All are always serialized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub variables: bool,
    pub image: bool,
    pub services: bool,
    pub artifacts: bool,
    pub cache: bool,
    pub fallback_cache_keys: bool,
    pub shared: bool,
    pub upload_multiple_artifacts: bool,
    pub upload_raw_artifacts: bool,
    pub session: bool,
    pub terminal: bool,
    pub refspecs: bool,
    pub masking: bool,
    pub proxy: bool,
    pub raw_variables: bool,
    pub artifacts_exclude: bool,
    pub multi_build_steps: bool,
    pub trace_reset: bool,
    pub trace_checksum: bool,
    pub trace_size: bool,
    pub vault_secrets: bool,
    pub cancelable: bool,
    pub return_exit_code: bool,
    pub service_variables: bool,
    pub service_multiple_aliases: bool,
    pub image_executor_opts: bool,
    pub service_executor_opts: bool,
    pub cancel_gracefully: bool,
    pub native_steps_integration: bool,
    pub two_phase_job_commit: bool,
    pub job_inputs: bool,
}

impl Features {
    /// What the sidecar really implements. GitLab uses these to decide job compatibility,
    /// graceful cancellation and two-phase commit (§3.1), so nothing is advertised that the
    /// code does not do: no image/services/cache/session/terminal/secrets/steps/inputs.
    pub fn sidecar() -> Self {
        Self {
            variables: true,
            artifacts: true,
            shared: true,
            upload_multiple_artifacts: true,
            upload_raw_artifacts: true,
            refspecs: true,
            masking: true,
            raw_variables: true,
            artifacts_exclude: true,
            multi_build_steps: true,
            trace_reset: true,
            trace_checksum: true,
            trace_size: true,
            cancelable: true,
            return_exit_code: true,
            cancel_gracefully: true,
            two_phase_job_commit: true,
            ..Self::default()
        }
    }
}

/// `info.config` (§3.1): the runner always sends the `gpus` key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigInfo {
    pub gpus: String,
}

/// The runner info object sent with register/verify/job request/update (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerInfo {
    pub name: String,
    pub version: String,
    pub revision: String,
    pub platform: String,
    pub architecture: String,
    pub executor: String,
    pub shell: String,
    pub features: Features,
    pub config: ConfigInfo,
}

impl RunnerInfo {
    /// Info for job requests and updates: shell executor, bash.
    pub fn sidecar() -> Self {
        Self {
            name: crate::NAME.to_owned(),
            version: crate::VERSION.to_owned(),
            revision: crate::REVISION.to_owned(),
            platform: std::env::consts::OS.to_owned(),
            architecture: go_arch(std::env::consts::ARCH).to_owned(),
            executor: "shell".to_owned(),
            shell: "bash".to_owned(),
            features: Features::sidecar(),
            config: ConfigInfo::default(),
        }
    }

    /// Info for `POST /runners` (§2): built from an empty config, so executor and shell
    /// are empty.
    pub fn for_registration() -> Self {
        Self {
            executor: String::new(),
            shell: String::new(),
            ..Self::sidecar()
        }
    }
}

/// Rust's `std::env::consts::ARCH` spelled the way Go's GOARCH spells it, which is what
/// GitLab expects in `info.architecture` and the User-Agent (§1, §3.1).
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

// ---------------------------------------------------------------------------------------
// Register / verify / unregister (§2)

#[derive(Debug, Serialize)]
pub struct RegisterRequest<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub run_untagged: bool,
    pub locked: bool,
    pub paused: bool,
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
}

#[derive(Debug, Serialize)]
pub struct VerifyRequest<'a> {
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
    pub system_id: &'a str,
}

#[derive(Debug, Serialize)]
pub struct UnregisterRequest<'a> {
    pub token: &'a Secret,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_id: Option<&'a str>,
}

/// Answer of register and verify: `{id, token, token_expires_at}`.
#[derive(Deserialize, Clone)]
pub struct RunnerCredentials {
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token: Secret,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token_expires_at: Option<String>,
}

impl fmt::Debug for RunnerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerCredentials")
            .field("id", &self.id)
            .field("token_expires_at", &self.token_expires_at)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_serialize_all_31_keys() {
        let v = serde_json::to_value(Features::sidecar()).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 31);
        assert_eq!(obj["cancel_gracefully"], true);
        assert_eq!(obj["two_phase_job_commit"], true);
        assert_eq!(obj["image"], false);
        assert_eq!(obj["job_inputs"], false);
        assert_eq!(obj["cache"], false);
    }

    #[test]
    fn runner_info_shape() {
        let v = serde_json::to_value(RunnerInfo::sidecar()).unwrap();
        assert_eq!(v["name"], "sidecar");
        assert_eq!(v["executor"], "shell");
        assert_eq!(v["shell"], "bash");
        assert_eq!(v["config"]["gpus"], "");
        assert_eq!(v["platform"], std::env::consts::OS);
        let reg = serde_json::to_value(RunnerInfo::for_registration()).unwrap();
        assert_eq!(reg["executor"], "");
    }

    #[test]
    fn go_arch_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }
}
