//! Artifacts on the wire, against a local stand-in that records every request: an upload
//! streamed as multipart, retried on 5xx and given up on 403, and a download that follows
//! GitLab's redirect to object storage without the job token.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use axum::http::StatusCode;
use common::mock::{Mock, with_headers};
use sidecar::client::Client;
use sidecar::secret::Secret;

#[tokio::test]
async fn artifact_upload_is_streamed_multipart() {
    let mock = Mock::start(|_req, _| with_headers(StatusCode::CREATED, &[], "{}")).await;
    let client = Client::new(&mock.url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("archive.zip");
    std::fs::write(&file, b"PK\x05\x06 pretend zip").unwrap();
    let params = sidecar::artifacts::transfer::UploadParams {
        artifact_format: "zip".to_owned(),
        artifact_type: "archive".to_owned(),
        expire_in: String::new(),
    };
    sidecar::artifacts::transfer::upload(
        &client,
        7,
        &Secret::new("glcbt-t"),
        &file,
        "out.zip",
        &params,
    )
    .await
    .unwrap();
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/api/v4/jobs/7/artifacts");
    assert_eq!(r.query, "artifact_format=zip&artifact_type=archive");
    assert_eq!(r.header("JOB-TOKEN"), Some("glcbt-t"));
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    assert!(r.header("Content-Length").is_none());
    assert!(
        r.header("Content-Type")
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("name=\"file\"; filename=\"out.zip\""),
        "{body}"
    );
    assert!(body.contains("pretend zip"));
}

#[tokio::test]
async fn artifact_upload_retries_and_gives_up_on_403() {
    // 500 twice (each a full §1.1 retry round), then 201.
    let mock = Mock::start(|_req, n| {
        if n < 10 {
            with_headers(StatusCode::INTERNAL_SERVER_ERROR, &[], "")
        } else {
            with_headers(StatusCode::CREATED, &[], "")
        }
    })
    .await;
    let client = Client::new(&mock.url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.zip");
    std::fs::write(&file, b"data").unwrap();
    let params = sidecar::artifacts::transfer::UploadParams::default();
    sidecar::artifacts::transfer::upload(&client, 1, &Secret::new("t"), &file, "a.zip", &params)
        .await
        .unwrap();
    assert_eq!(mock.requests().len(), 11);
    assert!(mock.requests().iter().all(|r| r.query.is_empty()));

    let forbidden = Mock::start(|_req, _| with_headers(StatusCode::FORBIDDEN, &[], "")).await;
    let client = Client::new(&forbidden.url).unwrap();
    let err = sidecar::artifacts::transfer::upload(
        &client,
        1,
        &Secret::new("t"),
        &file,
        "a.zip",
        &params,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, sidecar::artifacts::ArtifactError::Status(403)),
        "{err:?}"
    );
    assert_eq!(forbidden.requests().len(), 1);
}

#[tokio::test]
async fn artifact_download_follows_location_without_the_job_token() {
    let mock = Mock::start(|req, _| {
        if req.path == "/api/v4/jobs/9/artifacts" {
            with_headers(StatusCode::FOUND, &[("Location", "/storage/abc")], "")
        } else {
            with_headers(StatusCode::OK, &[], "zip-bytes")
        }
    })
    .await;
    let client = Client::new(&mock.url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dl");
    let n = sidecar::artifacts::transfer::download(&client, 9, &Secret::new("glcbt-dep"), &dest)
        .await
        .unwrap();
    assert_eq!(n, 9);
    assert_eq!(std::fs::read(&dest).unwrap(), b"zip-bytes");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].query, "direct_download=true");
    assert_eq!(reqs[0].header("JOB-TOKEN"), Some("glcbt-dep"));
    assert_eq!(reqs[1].path, "/storage/abc");
    assert!(reqs[1].header("JOB-TOKEN").is_none());

    // 404 is permanent: one request only.
    let missing = Mock::start(|_req, _| with_headers(StatusCode::NOT_FOUND, &[], "")).await;
    let client = Client::new(&missing.url).unwrap();
    assert!(
        sidecar::artifacts::transfer::download(&client, 9, &Secret::new("t"), &dest)
            .await
            .is_err()
    );
    assert_eq!(missing.requests().len(), 1);
}
