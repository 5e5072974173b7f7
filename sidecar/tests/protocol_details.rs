//! Wire-level details checked against a tiny local axum mock that records every request:
//! headers, request ids across retries, body shapes, trace resync and final update,
//! unregister paths, and the binary's CLI/signal behaviour against the fake GitLab (artifacts
//! on the wire: `artifact_transfer.rs`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use common::mock::{Mock, Recorded, with_headers};
use sidecar::client::{Client, JobRequestOutcome};
use sidecar::executor::Interrupts;
use sidecar::job::updater::{FinalResult, FinalState, Updater, UpdaterTiming};
use sidecar::protocol::{JobState, RunnerInfo};
use sidecar::secret::Secret;
use sidecar::trace::Trace;
use sidecar::trace::buffer::TraceBuffer;
use sidecar::trace::masker::Masker;

#[tokio::test]
async fn job_request_headers_retries_and_last_update() {
    let mock = Mock::start(|_req, n| match n {
        0 | 1 => with_headers(StatusCode::SERVICE_UNAVAILABLE, &[("Retry-After", "0")], ""),
        2 => with_headers(
            StatusCode::NO_CONTENT,
            &[("X-GitLab-Last-Update", "queue-v1")],
            "",
        ),
        _ => with_headers(StatusCode::NO_CONTENT, &[], ""),
    })
    .await;
    let client = Client::new(&mock.url).unwrap();
    let token = Secret::new("glrt-abc");
    let info = RunnerInfo::sidecar();
    assert!(matches!(
        client.request_job(&token, "s_0123456789ab", &info).await,
        JobRequestOutcome::NoJob
    ));
    assert!(matches!(
        client.request_job(&token, "s_0123456789ab", &info).await,
        JobRequestOutcome::NoJob
    ));
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    let id = reqs[0].header("X-Request-Id").unwrap().to_owned();
    assert_eq!(id.len(), 32);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    // HTTP-level retries of one logical call reuse its request id (§1, §1.1).
    assert_eq!(reqs[1].header("X-Request-Id"), Some(id.as_str()));
    assert_eq!(reqs[2].header("X-Request-Id"), Some(id.as_str()));
    assert_ne!(reqs[3].header("X-Request-Id"), Some(id.as_str()));
    for r in &reqs {
        assert_eq!(r.method, Method::POST);
        assert_eq!(r.path, "/api/v4/jobs/request");
        assert_eq!(r.header("RUNNER-TOKEN"), Some("glrt-abc"));
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(r.header("Accept"), Some("application/json"));
        assert!(
            r.header("User-Agent").unwrap().starts_with("sidecar "),
            "{:?}",
            r.headers
        );
        let body = r.json();
        assert_eq!(body["token"], "glrt-abc");
        assert_eq!(body["system_id"], "s_0123456789ab");
        assert_eq!(body["info"]["features"].as_object().unwrap().len(), 31);
        assert!(body.get("session").is_none());
    }
    // last_update is omitted until received, then sent back (§3.3).
    assert!(reqs[2].json().get("last_update").is_none());
    assert_eq!(reqs[3].json()["last_update"], "queue-v1");
}

#[tokio::test]
async fn non_json_201_drops_the_job_and_403_is_unhealthy() {
    let mock = Mock::start(|_req, n| match n {
        0 => with_headers(StatusCode::CREATED, &[("Content-Type", "text/plain")], "{}"),
        1 => with_headers(StatusCode::FORBIDDEN, &[], ""),
        _ => with_headers(StatusCode::NOT_IMPLEMENTED, &[], ""),
    })
    .await;
    let client = Client::new(&mock.url).unwrap();
    let token = Secret::new("glrt-abc");
    let info = RunnerInfo::sidecar();
    assert!(matches!(
        client.request_job(&token, "r_x", &info).await,
        JobRequestOutcome::NoJob
    ));
    assert!(matches!(
        client.request_job(&token, "r_x", &info).await,
        JobRequestOutcome::Unhealthy
    ));
    // 501 is not retried (§1.1).
    assert!(matches!(
        client.request_job(&token, "r_x", &info).await,
        JobRequestOutcome::Failed(_)
    ));
    assert_eq!(mock.requests().len(), 3);
}

/// Mock trace endpoint with GitLab's append semantics, pre-seeded with `seed` bytes (as if
/// an earlier patch was stored but its answer lost).
fn trace_server(seed: &'static [u8]) -> impl Fn(&Recorded, usize) -> Response + Send + Sync {
    let stored = Arc::new(Mutex::new(seed.to_vec()));
    move |req, _| {
        if req.method == Method::PATCH {
            let range = req.header("Content-Range").unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
            assert_eq!(end + 1 - start, req.body.len(), "inclusive Content-Range");
            let mut stored = stored.lock().unwrap();
            if start != stored.len() {
                let range = format!("0-{}", stored.len());
                return with_headers(StatusCode::RANGE_NOT_SATISFIABLE, &[("Range", &range)], "");
            }
            stored.extend_from_slice(&req.body);
            let range = format!("0-{}", stored.len());
            with_headers(
                StatusCode::ACCEPTED,
                &[
                    ("Range", &range),
                    ("Job-Status", "running"),
                    ("X-GitLab-Trace-Update-Interval", "1"),
                ],
                "",
            )
        } else {
            with_headers(StatusCode::OK, &[("Job-Status", "success")], "")
        }
    }
}

#[tokio::test]
async fn final_update_resyncs_on_416_and_reports_checksum() {
    let content = b"hello world, this is the whole log\n";
    let mock = Mock::start(trace_server(b"hello")).await;
    let client = Arc::new(Client::new(&mock.url).unwrap());
    let trace = Trace::new(
        TraceBuffer::new(
            Masker::new(Vec::<String>::new(), Vec::<String>::new()),
            1 << 20,
        ),
        false,
    );
    trace.write(content);
    trace.finish();
    let mut updater = Updater::new(
        client,
        Arc::new(RunnerInfo::sidecar()),
        42,
        Secret::new("glcbt-job"),
        trace,
        false,
        Interrupts::new(),
        UpdaterTiming::default(),
    );
    let fin = FinalState {
        state: JobState::Success,
        failure_reason: None,
        exit_code: Some(0),
    };
    assert_eq!(updater.finish(&fin).await, FinalResult::Accepted);
    assert_eq!(updater.acknowledged(), content.len() as u64);

    let reqs = mock.requests();
    let patches: Vec<&Recorded> = reqs.iter().filter(|r| r.method == Method::PATCH).collect();
    assert_eq!(patches.len(), 2);
    assert_eq!(patches[0].header("Content-Range"), Some("0-34"));
    assert_eq!(patches[1].header("Content-Range"), Some("5-34"));
    assert_eq!(&patches[1].body[..], &content[5..]);
    for p in &patches {
        assert_eq!(p.path, "/api/v4/jobs/42/trace");
        assert_eq!(p.query, "debug_trace=false");
        assert_eq!(p.header("JOB-TOKEN"), Some("glcbt-job"));
        assert_eq!(p.header("Content-Type"), Some("text/plain"));
        assert!(p.header("RUNNER-TOKEN").is_none());
    }
    let put = reqs
        .iter()
        .find(|r| r.method == Method::PUT)
        .expect("final PUT");
    assert_eq!(put.path, "/api/v4/jobs/42");
    assert_eq!(put.header("JOB-TOKEN"), Some("glcbt-job"));
    let body = put.json();
    assert_eq!(body["state"], "success");
    assert_eq!(body["token"], "glcbt-job");
    let crc = format!("crc32:{:08x}", crc32fast::hash(content));
    assert_eq!(body["output"]["checksum"], crc.as_str());
    assert_eq!(body["output"]["bytesize"], content.len());
    assert!(
        body.get("exit_code").is_none(),
        "exit code 0 is omitted: {body}"
    );
    assert!(body.get("failure_reason").is_none());
}

#[tokio::test]
async fn unregister_uses_the_managers_endpoint_for_glrt_tokens() {
    let mock = Mock::start(|_req, _| with_headers(StatusCode::NO_CONTENT, &[], "")).await;
    let client = Client::new(&mock.url).unwrap();
    client
        .unregister(&Secret::new("glrt-new"), Some("s_0123456789ab"))
        .await
        .unwrap();
    client
        .unregister(&Secret::new("legacy-token"), None)
        .await
        .unwrap();
    let reqs = mock.requests();
    assert_eq!(reqs[0].method, Method::DELETE);
    assert_eq!(reqs[0].path, "/api/v4/runners/managers");
    assert_eq!(
        reqs[0].json(),
        serde_json::json!({"token": "glrt-new", "system_id": "s_0123456789ab"})
    );
    assert_eq!(reqs[0].header("RUNNER-TOKEN"), Some("glrt-new"));
    assert_eq!(reqs[1].path, "/api/v4/runners");
    assert_eq!(reqs[1].json(), serde_json::json!({"token": "legacy-token"}));
}

#[tokio::test]
async fn register_posts_a_legacy_registration() {
    let mock = Mock::start(|_req, _| {
        with_headers(
            StatusCode::CREATED,
            &[("Content-Type", "application/json")],
            r#"{"id": 12, "token": "glrtr-new", "token_expires_at": null}"#,
        )
    })
    .await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sidecar"))
        .args([
            "register",
            "--url",
            &format!("{}/", mock.url),
            "--registration-token",
            "reg-token",
        ])
        .args(["--description", "my sidecar"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, serde_json::json!({"id": 12, "token": "glrtr-new"}));
    let reqs = mock.requests();
    assert_eq!(reqs[0].path, "/api/v4/runners");
    let body = reqs[0].json();
    assert_eq!(body["token"], "reg-token");
    assert_eq!(body["description"], "my sidecar");
    assert_eq!(body["info"]["executor"], "");
    assert_eq!(reqs[0].header("RUNNER-TOKEN"), Some("reg-token"));
}

#[tokio::test]
async fn ci_server_url_is_never_used() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sidecar"))
        .args(["verify"])
        .env_remove("SIDECAR_URL")
        .env_remove("SIDECAR_TOKEN")
        .env("CI_SERVER_URL", "http://127.0.0.1:9")
        .env("CI_SERVER_TOKEN", "glrt-from-ci")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--url"), "{err}");
}

#[tokio::test]
async fn binary_finishes_running_job_on_sigterm_and_exits_zero() {
    use fake_gitlab::control::{JobSpec, JobStatus};
    let server = fake_gitlab::start(fake_gitlab::Config {
        trace_update_interval: Duration::from_secs(1),
        long_poll: Duration::from_secs(1),
        ..fake_gitlab::Config::default()
    })
    .await
    .unwrap();
    let ctl = server.client();
    let token = "glrt-binary-test";
    ctl.add_runner(token).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("started");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sidecar"))
        .args(["run", "--check-interval", "200ms", "--log-format", "json"])
        .arg("--builds-dir")
        .arg(dir.path().join("builds"))
        .arg("--system-id-file")
        .arg(dir.path().join("sid"))
        .env("SIDECAR_URL", server.url())
        .env("SIDECAR_TOKEN", token)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let script = format!(
        "echo started > {}; sleep 2; echo finished-after-signal",
        fifo.display()
    );
    let id = ctl
        .enqueue(&JobSpec::new(token, &[&script]))
        .await
        .unwrap()
        .id;
    // The job's script announces itself through the FIFO; then ask the sidecar to stop.
    let fifo_read = fifo.clone();
    tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo_read).unwrap())
        .await
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("sidecar exits after its job")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let view = ctl.job(id).await.unwrap();
    assert_eq!(view.status, JobStatus::Success);
    let trace = ctl.trace(id).await.unwrap();
    assert!(String::from_utf8_lossy(&trace).contains("finished-after-signal\n"));
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(!stderr.contains(token), "runner token in logs");
    assert!(
        stderr.lines().all(|l| l.starts_with('{')),
        "json logs: {stderr}"
    );
}
