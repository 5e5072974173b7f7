//! The `/runners` calls (runner-protocol.md §2): register with a legacy registration token,
//! verify a runner token, unregister. Each accepts only its exact success code.

use reqwest::{Method, StatusCode};

use super::transport::is_json;
use super::{Client, ClientError, VerifyOutcome};
use crate::protocol::{
    RegisterRequest, RunnerCredentials, RunnerInfo, UnregisterRequest, VerifyRequest,
};
use crate::secret::Secret;

impl Client {
    /// `POST /runners` with a legacy registration token (§2). Success is 201 only.
    pub async fn register(
        &self,
        registration_token: &Secret,
        description: &str,
        info: &RunnerInfo,
    ) -> Result<RunnerCredentials, ClientError> {
        let body = RegisterRequest {
            description,
            // Without tags the runner registers as run-untagged (GitLab rejects an empty
            // tag list otherwise); locked defaults to true like `gitlab-runner register`.
            run_untagged: true,
            locked: true,
            paused: false,
            info,
            token: registration_token,
        };
        let token = Some(registration_token.expose());
        let response = self
            .json_call(Method::POST, "runners", token, &body, true)
            .await?;
        match response.status() {
            StatusCode::CREATED => Self::decode(response).await,
            status => Err(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }

    /// `POST /runners/verify` (§2).
    pub async fn verify(
        &self,
        token: &Secret,
        system_id: &str,
        info: &RunnerInfo,
    ) -> VerifyOutcome {
        let body = VerifyRequest {
            info,
            token,
            system_id,
        };
        let result = self
            .json_call(
                Method::POST,
                "runners/verify",
                Some(token.expose()),
                &body,
                true,
            )
            .await;
        let response = match result {
            Ok(r) => r,
            Err(e) => return VerifyOutcome::Error(e),
        };
        match response.status() {
            StatusCode::OK if is_json(&response) => match Self::decode(response).await {
                Ok(creds) => VerifyOutcome::Valid(creds),
                Err(e) => VerifyOutcome::Error(e),
            },
            // Old GitLab answered a plain "200": valid, but without an id.
            StatusCode::OK => VerifyOutcome::Valid(RunnerCredentials {
                id: 0,
                token: token.clone(),
                token_expires_at: None,
            }),
            StatusCode::FORBIDDEN => VerifyOutcome::Invalid,
            status => VerifyOutcome::Error(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }

    /// `DELETE /runners` (legacy tokens) or `DELETE /runners/managers` (`glrt-` tokens with a
    /// system id), §2. Success is 204 only.
    pub async fn unregister(
        &self,
        token: &Secret,
        system_id: Option<&str>,
    ) -> Result<(), ClientError> {
        let path = if system_id.is_some() {
            "runners/managers"
        } else {
            "runners"
        };
        let body = UnregisterRequest { token, system_id };
        let response = self
            .json_call(Method::DELETE, path, Some(token.expose()), &body, false)
            .await?;
        match response.status() {
            StatusCode::NO_CONTENT => Ok(()),
            status => Err(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }
}
