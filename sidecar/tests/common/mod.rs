//! What the sidecar's end-to-end tests share: an in-process fake GitLab on loopback with a
//! runner token registered, the runner loop started against it, and checks of what GitLab saw.

// Each test binary uses its own part of these.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

pub mod mock;

use std::time::Duration;

use fake_gitlab::control::{Client, JobSpec, JobView};
use fake_gitlab::{Config, RunningServer};
use sidecar::runner::{RunSummary, RunnerConfig, Shutdown};
use sidecar::secret::Secret;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "glrt-sidecar-test-token";
pub const WAIT: Duration = Duration::from_secs(90);

pub struct Env {
    pub server: RunningServer,
    pub ctl: Client,
    pub dir: tempfile::TempDir,
}

pub async fn env_with(config: Config) -> Env {
    let server = fake_gitlab::start(config)
        .await
        .expect("fake gitlab starts");
    let ctl = server.client();
    ctl.add_runner(TOKEN).await.expect("runner token added");
    Env {
        server,
        ctl,
        dir: tempfile::tempdir().unwrap(),
    }
}

pub async fn env() -> Env {
    env_with(Config {
        // Ticks after the first (fixed 3 s) follow the server's interval: keep it short.
        trace_update_interval: Duration::from_secs(1),
        ..Config::default()
    })
    .await
}

impl Env {
    pub fn runner_config(&self, max_builds: u64) -> RunnerConfig {
        RunnerConfig {
            url: self.server.url().to_owned(),
            token: Secret::new(TOKEN),
            concurrent: 1,
            builds_dir: self.dir.path().join("builds"),
            max_builds,
            wait_timeout: Some(Duration::from_secs(60)),
            check_interval: Duration::from_millis(200),
            name: "test-sidecar".to_owned(),
            system_id_file: self.dir.path().join(".runner_system_id"),
            output_limit: 4096 * 1024,
            tls_ca_file: None,
            job_user: None,
        }
    }

    /// Start the runner loop in the background; it ends after `max_builds` jobs.
    pub fn spawn_runner(&self, max_builds: u64) -> JoinHandle<RunSummary> {
        let config = self.runner_config(max_builds);
        tokio::spawn(async move {
            sidecar::runner::run(config, Shutdown::default())
                .await
                .expect("runner loop")
        })
    }

    pub async fn run_jobs(&self, max_builds: u64) -> RunSummary {
        tokio::time::timeout(Duration::from_secs(120), self.spawn_runner(max_builds))
            .await
            .expect("runner finished in time")
            .expect("runner task")
    }

    pub async fn enqueue(&self, spec: &JobSpec) -> u64 {
        self.ctl.enqueue(spec).await.expect("job enqueued").id
    }

    pub async fn final_view(&self, id: u64) -> JobView {
        self.ctl
            .wait_final(id, WAIT)
            .await
            .expect("job reached a final state")
    }

    pub async fn trace(&self, id: u64) -> Vec<u8> {
        self.ctl.trace(id).await.expect("trace")
    }
}

pub fn spec(script: &[&str]) -> JobSpec {
    JobSpec::new(TOKEN, script)
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The checksum and size the runner reported describe exactly the stored trace.
pub fn assert_trace_integrity(view: &JobView, trace: &[u8]) {
    let crc = format!("crc32:{:08x}", crc32fast::hash(trace));
    assert_eq!(
        view.trace_crc32, crc,
        "fake's own checksum of the stored trace"
    );
    assert_eq!(
        view.reported_checksum.as_deref(),
        Some(crc.as_str()),
        "reported checksum"
    );
    assert_eq!(
        view.reported_bytesize,
        Some(trace.len() as u64),
        "reported bytesize"
    );
    assert_eq!(view.trace_bytes, trace.len() as u64);
}

/// Output of the `step_script` stage: after its only `$ command` echo line, up to the
/// section end marker.
pub fn step_script_output(trace: &[u8]) -> Vec<u8> {
    let header = b"Executing \"step_script\" stage of the job script";
    let start = trace
        .windows(header.len())
        .position(|w| w == header)
        .expect("step_script header");
    let rest = &trace[start..];
    // Skip the header line and the echoed command line.
    let mut lines = 0;
    let mut pos = 0;
    while lines < 2 {
        pos += rest[pos..].iter().position(|b| *b == b'\n').expect("line") + 1;
        lines += 1;
    }
    let body = &rest[pos..];
    let end = body
        .windows(b"section_end:".len())
        .position(|w| w == b"section_end:")
        .expect("section end");
    body[..end].to_vec()
}
