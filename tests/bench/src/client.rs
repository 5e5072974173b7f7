//! A lightweight runner: just the protocol calls of one job's life, as a stock runner makes
//! them (runner-protocol.md), with nothing around them. The same code talks to the fake GitLab
//! directly and to the autoscaler, so the difference between the two is the autoscaler.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

/// Features a current runner advertises; two-phase commit as the autoscaler does upstream.
fn info() -> serde_json::Value {
    json!({
        "name": "bench-runner",
        "version": "18.6.0",
        "executor": "shell",
        "features": {
            "variables": true, "artifacts": true, "cancelable": true, "trace_reset": true,
            "trace_checksum": true, "trace_size": true, "upload_multiple_artifacts": true,
            "cancel_gracefully": true, "two_phase_job_commit": true, "return_exit_code": true,
            "raw_variables": true, "masking": true, "refspecs": true
        }
    })
}

/// A job as the runner needs it: its id and token.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    pub id: u64,
    pub token: String,
}

/// One simulated runner: a base URL (GitLab's or the autoscaler's) and its runner token.
#[derive(Debug, Clone)]
pub struct Runner {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// The HTTP client the runners share: one connection per request in flight, kept alive.
pub fn http() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(120))
        .tcp_nodelay(true)
        .no_proxy()
        .build()?)
}

impl Runner {
    pub fn new(http: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v4/{path}", self.base)
    }

    /// `POST /jobs/request`; `last_update` as Workhorse long polling wants it. Returns the job
    /// or, on `204`, the new `X-GitLab-Last-Update` (if any).
    pub async fn request_job(
        &self,
        last_update: Option<&str>,
    ) -> Result<std::result::Result<Job, Option<String>>> {
        let mut body = json!({"token": self.token, "info": info()});
        if let Some(v) = last_update {
            body["last_update"] = json!(v);
        }
        let response = self
            .http
            .post(self.url("jobs/request"))
            .json(&body)
            .send()
            .await?;
        match response.status().as_u16() {
            201 => Ok(Ok(response.json().await?)),
            204 => Ok(Err(response
                .headers()
                .get("x-gitlab-last-update")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string))),
            status => bail!("job request answered {status}"),
        }
    }

    /// Asks until a job comes, following long polling like a runner.
    pub async fn next_job(&self) -> Result<Job> {
        let mut last_update: Option<String> = None;
        loop {
            match self.request_job(last_update.as_deref()).await? {
                Ok(job) => return Ok(job),
                Err(Some(v)) => last_update = Some(v),
                Err(None) => {}
            }
        }
    }

    async fn update(&self, job: &Job, body: serde_json::Value) -> Result<u16> {
        let response = self
            .http
            .put(self.url(&format!("jobs/{}", job.id)))
            .header("JOB-TOKEN", &job.token)
            .json(&body)
            .send()
            .await?;
        Ok(response.status().as_u16())
    }

    /// The acceptance: `PUT state=running`.
    pub async fn accept(&self, job: &Job) -> Result<()> {
        let status = self
            .update(
                job,
                json!({"token": job.token, "state": "running", "info": info()}),
            )
            .await?;
        ensure!(
            status == 200,
            "job {}: acceptance answered {status}",
            job.id
        );
        Ok(())
    }

    /// `PATCH /jobs/:id/trace` of `data` at `offset`; returns the new length.
    pub async fn patch(&self, job: &Job, offset: u64, data: Bytes) -> Result<u64> {
        let end = offset + data.len() as u64;
        let response = self
            .http
            .patch(self.url(&format!("jobs/{}/trace", job.id)))
            .header("JOB-TOKEN", &job.token)
            .header("Content-Range", format!("{offset}-{}", end - 1))
            .header("Content-Type", "text/plain")
            .body(data)
            .send()
            .await?;
        let status = response.status().as_u16();
        ensure!(
            status == 202,
            "job {}: trace patch answered {status}",
            job.id
        );
        Ok(end)
    }

    /// The final `PUT state=success` with the trace's checksum and size.
    pub async fn succeed(&self, job: &Job, trace: &[u8]) -> Result<()> {
        let checksum = format!("crc32:{:08x}", crc32fast::hash(trace));
        let status = self
            .update(
                job,
                json!({
                    "token": job.token, "state": "success", "exit_code": 0, "checksum": checksum,
                    "output": {"checksum": checksum, "bytesize": trace.len()}, "info": info()
                }),
            )
            .await?;
        ensure!(
            status == 200,
            "job {}: final update answered {status}",
            job.id
        );
        Ok(())
    }

    /// A whole job: acceptance, `patches` trace patches of `chunk`, final update.
    pub async fn run(&self, job: &Job, patches: usize, chunk: &Bytes) -> Result<()> {
        self.accept(job).await?;
        let mut offset = 0;
        for _ in 0..patches {
            offset = self.patch(job, offset, chunk.clone()).await?;
        }

        let trace = chunk.repeat(patches);
        self.succeed(job, &trace).await
    }

    /// Uploads `size` bytes as the job's archive (multipart field `file`, chunked), generated
    /// on the fly so that the client holds only one block.
    pub async fn upload(&self, job: &Job, size: u64) -> Result<()> {
        let block = Bytes::from(
            (0..1024 * 1024u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect::<Vec<u8>>(),
        );
        let blocks = size.div_ceil(block.len() as u64);
        let stream = futures::stream::iter((0..blocks).map(move |i| {
            let left = size - i * block.len() as u64;
            let n = usize::try_from(left.min(block.len() as u64)).unwrap_or(block.len());
            Ok::<Bytes, std::io::Error>(block.slice(..n))
        }));
        let part = reqwest::multipart::Part::stream(reqwest::Body::wrap_stream(stream))
            .file_name("artifacts.zip")
            .mime_str("application/zip")?;
        let form = reqwest::multipart::Form::new().part("file", part);
        let response = self
            .http
            .post(self.url(&format!(
                "jobs/{}/artifacts?artifact_type=archive&artifact_format=zip",
                job.id
            )))
            .header("JOB-TOKEN", &job.token)
            .timeout(Duration::from_secs(600))
            .multipart(form)
            .send()
            .await?;
        let status = response.status().as_u16();
        ensure!(status == 201, "job {}: upload answered {status}", job.id);
        Ok(())
    }

    /// Downloads the job's archive, counting and dropping the bytes; returns how many came.
    pub async fn download(&self, job: &Job) -> Result<u64> {
        use futures::StreamExt;
        let response = self
            .http
            .get(self.url(&format!("jobs/{}/artifacts", job.id)))
            .header("JOB-TOKEN", &job.token)
            .timeout(Duration::from_secs(600))
            .send()
            .await?;
        let status = response.status().as_u16();
        ensure!(status == 200, "job {}: download answered {status}", job.id);
        let mut body = response.bytes_stream();
        let mut total = 0u64;
        while let Some(chunk) = body.next().await {
            total += chunk.context("download interrupted")?.len() as u64;
        }
        Ok(total)
    }
}

/// Registers `n` sidecars with a pool's registration token; their runner tokens.
pub async fn register(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    n: usize,
) -> Result<Vec<String>> {
    let mut tokens = Vec::with_capacity(n);
    for i in 0..n {
        let response = http
            .post(format!("{base}/api/v4/runners"))
            .json(&json!({"token": token, "description": format!("bench-{i}")}))
            .send()
            .await?;
        ensure!(
            response.status().as_u16() == 201,
            "registration answered {}",
            response.status()
        );
        let body: serde_json::Value = response.json().await?;
        tokens.push(
            body["token"]
                .as_str()
                .context("registration without a token")?
                .to_string(),
        );
    }
    Ok(tokens)
}
