//! Shared helpers: an in-process server and a minimal runner speaking runner-protocol.md.
#![allow(dead_code, clippy::unwrap_used)] // test helpers: a panic is the failure report

use std::time::Duration;

use fake_gitlab::control::Client;
use fake_gitlab::{Config, RunningServer};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

pub const RUNNER_TOKEN: &str = "glrt-test-runner-token";
/// Upper bound for anything that should happen promptly; never a synchronisation sleep.
pub const PROMPT: Duration = Duration::from_secs(10);

/// A server with one runner token and test-friendly defaults (a long poll far longer than any
/// test, so a held request only returns when something happens).
pub async fn server(configure: impl FnOnce(&mut Config)) -> (RunningServer, Client) {
    let mut config = Config {
        runner_tokens: vec![RUNNER_TOKEN.to_owned()],
        long_poll: Duration::from_secs(60),
        ..Config::default()
    };
    configure(&mut config);
    let server = fake_gitlab::start(config).await.expect("server starts");
    let client = server.client();
    (server, client)
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `info.features` object a stock runner sends, with the given ones switched on.
pub fn features(enabled: &[&str]) -> Value {
    let mut features = serde_json::Map::new();
    for name in [
        "variables",
        "image",
        "services",
        "artifacts",
        "cache",
        "shared",
        "upload_multiple_artifacts",
        "upload_raw_artifacts",
        "session",
        "terminal",
        "refspecs",
        "masking",
        "proxy",
        "raw_variables",
        "artifacts_exclude",
        "multi_build_steps",
        "trace_reset",
        "trace_checksum",
        "trace_size",
        "vault_secrets",
        "cancelable",
        "return_exit_code",
        "service_variables",
        "cancel_gracefully",
        "two_phase_job_commit",
    ] {
        features.insert(name.to_owned(), Value::Bool(enabled.contains(&name)));
    }
    Value::Object(features)
}

/// A runner manager as far as the protocol goes: remembers `X-GitLab-Last-Update` like
/// gitlab-runner does (runner-protocol.md §3.3).
#[derive(Debug, Clone)]
pub struct Runner {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
    pub system_id: String,
    pub features: Value,
    pub last_update: Option<String>,
}

impl Runner {
    pub fn new(server: &RunningServer, features: Value) -> Self {
        Runner {
            http: http(),
            base: server.url().to_owned(),
            token: RUNNER_TOKEN.to_owned(),
            system_id: "s_0123456789ab".to_owned(),
            features,
            last_update: None,
        }
    }

    pub fn body(&self) -> Value {
        let mut body = json!({
            "info": {
                "name": "gitlab-runner", "version": "19.4.0", "revision": "d79f3e7b",
                "platform": "linux", "architecture": "amd64", "executor": "shell", "shell": "bash",
                "features": self.features, "config": {"gpus": ""},
            },
            "token": self.token,
            "system_id": self.system_id,
        });
        if let Some(last_update) = &self.last_update {
            body["last_update"] = Value::String(last_update.clone());
        }
        body
    }

    /// One `POST /jobs/request`; keeps a non-empty `X-GitLab-Last-Update`.
    pub async fn request(&mut self) -> Response {
        let response = self
            .http
            .post(format!("{}/api/v4/jobs/request", self.base))
            .header("RUNNER-TOKEN", &self.token)
            .header("Accept", "application/json")
            .json(&self.body())
            .send()
            .await
            .unwrap();
        if let Some(value) = response.headers().get("x-gitlab-last-update") {
            let value = value.to_str().unwrap().to_owned();
            if !value.is_empty() {
                self.last_update = Some(value);
            }
        }
        response
    }

    /// Requests until the answer is a job (at most a few times) and returns its payload.
    pub async fn take_job(&mut self) -> Value {
        let response = self.request().await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "application/json"
        );
        response.json().await.unwrap()
    }

    pub async fn put(&self, id: u64, job_token: &str, body: Value) -> Response {
        let mut body = body;
        body["token"] = Value::String(job_token.to_owned());
        self.http
            .put(format!("{}/api/v4/jobs/{id}", self.base))
            .header("JOB-TOKEN", job_token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn put_state(&self, id: u64, job_token: &str, state: &str) -> Response {
        self.put(id, job_token, json!({ "state": state })).await
    }

    pub async fn patch(&self, id: u64, job_token: &str, start: u64, bytes: &[u8]) -> Response {
        let end = start + bytes.len() as u64 - 1;
        self.http
            .patch(format!("{}/api/v4/jobs/{id}/trace", self.base))
            .header("JOB-TOKEN", job_token)
            .header("Content-Range", format!("{start}-{end}"))
            .header("Content-Type", "text/plain")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap()
    }
}

pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

pub fn job_id(payload: &Value) -> u64 {
    payload["id"].as_u64().unwrap()
}

pub fn job_token(payload: &Value) -> String {
    payload["token"].as_str().unwrap().to_owned()
}
