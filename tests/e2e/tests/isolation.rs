//! What a sidecar can reach through the autoscaler: only its own pool's jobs, only with the job's
//! own token, and never the pool's upstream token. Driven by a hand-written client that records
//! everything it receives, so nothing a sidecar could see escapes the check.

use std::time::Duration;

use anyhow::Result;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, register_sidecar};
use fake_gitlab::control::JobSpec;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A sidecar reduced to its HTTP calls; keeps every byte it is sent.
struct RawSidecar {
    http: reqwest::Client,
    base: String,
    token: String,
    received: Vec<u8>,
}

impl RawSidecar {
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        job_token: Option<&str>,
        body: Option<Value>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = job_token {
            request = request.header("JOB-TOKEN", t);
        }
        if let Some(b) = body {
            request = request.json(&b);
        }
        let response = request.send().await?;
        let status = response.status();
        for (name, value) in response.headers() {
            self.received.extend(name.as_str().as_bytes());
            self.received.extend(value.as_bytes());
        }
        let body = response.bytes().await?.to_vec();
        self.received.extend(&body);
        Ok((status, body))
    }

    async fn request_job(&mut self) -> Result<Option<Value>> {
        let token = self.token.clone();
        let (status, body) = self
            .call(
                Method::POST,
                "/api/v4/jobs/request",
                None,
                Some(json!({"token": token, "info": {"features": {"cancel_gracefully": true}}})),
            )
            .await?;
        Ok(match status {
            StatusCode::CREATED => Some(serde_json::from_slice(&body)?),
            StatusCode::NO_CONTENT => None,
            other => anyhow::bail!("job request answered {other}"),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_reaches_only_its_own_jobs_and_never_sees_an_upstream_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&[]).await?;
    let (a, b) = (PoolSpec::new("alpha"), PoolSpec::new("beta"));
    gitlab.add_runner(&a.upstream_token).await?;
    gitlab.add_runner(&b.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        dir.path(),
        &gitlab.url,
        &[a.clone(), b.clone()],
        "long_poll_timeout = \"2s\"",
    )
    .await?;
    let http = reqwest::Client::new();
    let sidecar = |token: String| RawSidecar {
        http: http.clone(),
        base: autoscaler.url.clone(),
        token,
        received: Vec::new(),
    };
    let mut a1 = sidecar(register_sidecar(&autoscaler.url, &a.registration_token, "a1").await?);
    let mut a2 = sidecar(register_sidecar(&autoscaler.url, &a.registration_token, "a2").await?);
    let mut b1 = sidecar(register_sidecar(&autoscaler.url, &b.registration_token, "b1").await?);

    let job_b = gitlab
        .control
        .enqueue(&JobSpec::new(&b.upstream_token, &["echo b"]))
        .await?;
    // Pool alpha's sidecar asks: pool beta's job is not for it.
    assert!(
        a1.request_job().await?.is_none(),
        "a sidecar of alpha was given beta's job"
    );
    let job_a1 = gitlab
        .control
        .enqueue(&JobSpec::new(&a.upstream_token, &["echo a1"]))
        .await?;
    let job_a2 = gitlab
        .control
        .enqueue(&JobSpec::new(&a.upstream_token, &["echo a2"]))
        .await?;
    let got_a1 = a1.request_job().await?.expect("a1 gets an alpha job");
    let got_a2 = a2
        .request_job()
        .await?
        .expect("a2 gets the other alpha job");
    let got_b = b1.request_job().await?.expect("b1 gets beta's job");
    let mut alpha_ids = vec![
        got_a1["id"].as_u64().unwrap(),
        got_a2["id"].as_u64().unwrap(),
    ];
    alpha_ids.sort();
    assert_eq!(alpha_ids, vec![job_a1.id, job_a2.id]);
    assert_eq!(got_b["id"].as_u64(), Some(job_b.id));

    let (own_id, own_token) = (
        got_a1["id"].as_u64().unwrap(),
        got_a1["token"].as_str().unwrap().to_string(),
    );
    let other_id = got_a2["id"].as_u64().unwrap();
    let before = gitlab.control.stats().await?;

    // With its own job token, a1 cannot update, patch or read another sidecar's job, nor another
    // pool's job, nor a job nobody holds.
    for target in [other_id, job_b.id] {
        let path = format!("/api/v4/jobs/{target}");
        let (status, _) = a1
            .call(
                Method::PUT,
                &path,
                Some(&own_token),
                Some(json!({"token": own_token, "state": "failed"})),
            )
            .await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "PUT {path}");
        let (status, _) = a1
            .call(
                Method::PATCH,
                &format!("{path}/trace"),
                Some(&own_token),
                None,
            )
            .await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "PATCH {path}/trace");
        let (status, _) = a1
            .call(
                Method::GET,
                &format!("{path}/artifacts"),
                Some(&own_token),
                None,
            )
            .await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "GET {path}/artifacts");
    }
    let (status, _) = a1
        .call(
            Method::PUT,
            "/api/v4/jobs/999999",
            Some(&own_token),
            Some(json!({"token": own_token, "state": "running"})),
        )
        .await?;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "GitLab's answer for a job the token does not open"
    );
    let (status, _) = a1
        .call(
            Method::GET,
            "/api/v4/jobs/999999/artifacts",
            Some(&own_token),
            None,
        )
        .await?;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a job that is no declared dependency"
    );
    let after = gitlab.control.stats().await?;
    for route in [
        "PUT /api/v4/jobs/:id",
        "PATCH /api/v4/jobs/:id/trace",
        "GET /api/v4/jobs/:id/artifacts",
    ] {
        assert_eq!(
            before.total(route),
            after.total(route),
            "a refused call reached GitLab: {route}"
        );
    }

    // Its own job works end to end through the relay.
    let (status, _) = a1
        .call(
            Method::PUT,
            &format!("/api/v4/jobs/{own_id}"),
            Some(&own_token),
            Some(json!({"token": own_token, "state": "running"})),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = a1
        .call(
            Method::PUT,
            &format!("/api/v4/jobs/{own_id}"),
            Some(&own_token),
            Some(json!({"token": own_token, "state": "success"})),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    let view = gitlab
        .control
        .wait_final(own_id, Duration::from_secs(30))
        .await?;
    assert_eq!(view.status.as_str(), "success");

    // Identity calls, too, and a refused registration.
    let token = a1.token.clone();
    a1.call(
        Method::POST,
        "/api/v4/runners/verify",
        None,
        Some(json!({"token": token})),
    )
    .await?;
    a1.call(
        Method::POST,
        "/api/v4/runners",
        None,
        Some(json!({"token": a.upstream_token})),
    )
    .await?;
    for s in [&a1, &a2, &b1] {
        let seen = String::from_utf8_lossy(&s.received);
        assert!(!seen.is_empty());
        assert!(
            !seen.contains(&a.upstream_token) && !seen.contains(&b.upstream_token),
            "an upstream token reached a sidecar"
        );
    }
    Ok(())
}
