//! Artifact upload and download (runner-protocol.md §7).
#![allow(clippy::unwrap_used)] // test helpers: a panic is the failure report

mod common;

use common::{RUNNER_TOKEN, Runner, features, header, http, job_id, job_token, server};
use fake_gitlab::control::{ArtifactSpec, JobSpec};
use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};

/// Deterministic bytes, not all alike.
fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// A multipart form whose `file` part is a stream of unknown length, so the request goes out
/// with chunked transfer encoding like the artifacts uploader's.
fn chunked_form(bytes: &[u8], filename: &str) -> Form {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let part = Part::stream(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .file_name(filename.to_owned())
        .mime_str("application/zip")
        .unwrap();
    Form::new().part("file", part)
}

async fn upload(base: &str, id: u64, token: &str, form: Form) -> reqwest::Response {
    http()
        .post(format!("{base}/api/v4/jobs/{id}/artifacts?artifact_format=zip&artifact_type=archive&expire_in=1+day"))
        .header("JOB-TOKEN", token)
        .multipart(form)
        .send()
        .await
        .unwrap()
}

async fn download(base: &str, id: u64, token: &str, direct: bool) -> reqwest::Response {
    let query = if direct { "?direct_download=true" } else { "" };
    http()
        .get(format!("{base}/api/v4/jobs/{id}/artifacts{query}"))
        .header("JOB-TOKEN", token)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn chunked_upload_then_download_by_the_dependent_job() {
    let (server, control) = server(|_| {}).await;
    let base = server.url();
    let producer = control
        .enqueue(&JobSpec {
            artifacts: vec![ArtifactSpec {
                name: "out".into(),
                paths: vec!["out/".into()],
                ..ArtifactSpec::default()
            }],
            ..JobSpec::new(RUNNER_TOKEN, &["make"])
        })
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    runner.take_job().await;

    let bytes = content(8 * 1024 * 1024 + 17);
    let response = upload(
        base,
        producer.id,
        &producer.token,
        chunked_form(&bytes, "out.zip"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    // Same bytes again (a retried upload): accepted without change.
    let response = upload(
        base,
        producer.id,
        &producer.token,
        chunked_form(&bytes, "out.zip"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    // Different bytes for the same type: refused like Rails does.
    let response = upload(
        base,
        producer.id,
        &producer.token,
        chunked_form(b"other", "out.zip"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let view = control.job(producer.id).await.unwrap();
    assert_eq!(view.artifacts.len(), 1);
    assert_eq!(view.artifacts[0].artifact_type, "archive");
    assert_eq!(view.artifacts[0].filename, "out.zip");
    assert_eq!(view.artifacts[0].size, bytes.len() as u64);
    assert_eq!(view.artifacts[0].expire_in.as_deref(), Some("1 day"));
    assert_eq!(
        control
            .artifact(producer.id, "archive")
            .await
            .unwrap()
            .unwrap(),
        bytes
    );
    assert_eq!(control.artifact(producer.id, "junit").await.unwrap(), None);
    runner
        .put_state(producer.id, &producer.token, "success")
        .await;

    let consumer = control
        .enqueue(&JobSpec {
            dependencies: vec![producer.id],
            ..JobSpec::new(RUNNER_TOKEN, &["use"])
        })
        .await
        .unwrap();
    let unrelated = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["other"]))
        .await
        .unwrap();
    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), consumer.id);
    let dependency = &payload["dependencies"][0];
    assert_eq!(dependency["id"], producer.id);
    assert_eq!(
        dependency["token"], consumer.token,
        "the running job's own token"
    );
    assert_eq!(dependency["artifacts_file"]["filename"], "out.zip");
    assert_eq!(dependency["artifacts_file"]["size"], bytes.len() as u64);
    assert_eq!(job_token(&runner.take_job().await), unrelated.token);

    let response = download(base, producer.id, &consumer.token, true).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "content-type"), Some("application/zip"));
    assert_eq!(response.bytes().await.unwrap(), bytes);

    let response = download(base, producer.id, &unrelated.token, false).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let response = download(base, consumer.id, &consumer.token, false).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "no archive");
}

#[tokio::test]
async fn dependency_without_archive_has_no_artifacts_file() {
    let (server, control) = server(|_| {}).await;
    let producer = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    control
        .enqueue(&JobSpec {
            dependencies: vec![producer.id],
            ..JobSpec::new(RUNNER_TOKEN, &["use"])
        })
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    runner.take_job().await;
    let payload = runner.take_job().await;
    assert_eq!(payload["dependencies"][0]["id"], producer.id);
    assert!(payload["dependencies"][0].get("artifacts_file").is_none());
}

#[tokio::test]
async fn redirect_to_storage_with_direct_download() {
    let (server, control) = server(|c| c.artifacts_redirect = true).await;
    let base = server.url();
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    Runner::new(&server, features(&[])).take_job().await;
    let bytes = content(1000);
    assert_eq!(
        upload(base, job.id, &job.token, chunked_form(&bytes, "a.zip"))
            .await
            .status(),
        StatusCode::CREATED
    );

    let response = download(base, job.id, &job.token, true).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    let location = header(&response, "location").unwrap().to_owned();
    assert!(
        location.starts_with(&format!("{base}/storage/")),
        "{location}"
    );
    let stored = http().get(&location).send().await.unwrap();
    assert_eq!(stored.status(), StatusCode::OK);
    assert_eq!(stored.bytes().await.unwrap(), bytes);

    // Without direct_download the API streams it itself.
    let response = download(base, job.id, &job.token, false).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn upload_is_refused_when_not_running_too_large_or_without_file() {
    let (server, control) = server(|c| c.max_artifact_size = 4096).await;
    let base = server.url();
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();

    let response = upload(base, job.id, &job.token, chunked_form(b"x", "a.zip")).await;
    assert_eq!(
        response.status(),
        StatusCode::FORBIDDEN,
        "pending, not running"
    );
    assert_eq!(header(&response, "job-status"), Some("pending"));

    Runner::new(&server, features(&[])).take_job().await;
    let response = upload(
        base,
        job.id,
        &job.token,
        chunked_form(&content(5000), "a.zip"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    let form = Form::new().text("metadata", "nothing");
    let response = upload(base, job.id, &job.token, form).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let response = upload(base, job.id, "glcbt-wrong", chunked_form(b"x", "a.zip")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(control.job(job.id).await.unwrap().artifacts.is_empty());
}
