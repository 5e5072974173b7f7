//! Artifact upload and download (runner-protocol.md §7), with the helper's retry rules on top
//! of the HTTP-level retries of §1.1.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use tokio::io::AsyncWriteExt;
use url::Url;

use super::ArtifactError;
use crate::client::{Client, ClientError, HEADER_JOB_TOKEN, TRANSFER_TIMEOUT};
use crate::secret::Secret;

/// Upload tries for a 503 answer, and for any other failure (§7.1).
const UPLOAD_TRIES_503: u32 = 6;
const UPLOAD_TRIES_OTHER: u32 = 3;
const UPLOAD_BACKOFF_START: Duration = Duration::from_secs(1);
const UPLOAD_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Download: 3 tries, 1 s apart (§7.2).
const DOWNLOAD_TRIES: u32 = 3;
const DOWNLOAD_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Query parameters of an upload; empty values are not sent (§7.1).
#[derive(Debug, Clone, Default)]
pub struct UploadParams {
    pub artifact_format: String,
    pub artifact_type: String,
    pub expire_in: String,
}

/// What an upload try decided (pure, for testing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadDecision {
    Done,
    /// Permanent failure (403, 413).
    Fail,
    Retry,
    /// 307: retry against the `Location`'s origin.
    Redirect,
}

/// The helper's decision for an upload answer (`None` = transport error) at try `tries`.
pub fn upload_decision(status: Option<u16>, tries: u32) -> UploadDecision {
    match status {
        Some(201) => UploadDecision::Done,
        Some(403) | Some(413) => UploadDecision::Fail,
        Some(307) if tries < UPLOAD_TRIES_OTHER => UploadDecision::Redirect,
        Some(503) if tries < UPLOAD_TRIES_503 => UploadDecision::Retry,
        Some(503) => UploadDecision::Fail,
        _ if tries < UPLOAD_TRIES_OTHER => UploadDecision::Retry,
        _ => UploadDecision::Fail,
    }
}

/// Backoff before upload try `tries + 1`: 1 s doubling, at most 5 s.
pub fn upload_backoff(tries: u32) -> Duration {
    let exp = tries.saturating_sub(1).min(8);
    (UPLOAD_BACKOFF_START * (1u32 << exp)).min(UPLOAD_BACKOFF_MAX)
}

fn upload_url(base: &Url, job_id: i64, params: &UploadParams) -> Result<Url, ArtifactError> {
    let mut url = base
        .join(&format!("jobs/{job_id}/artifacts"))
        .map_err(|e| ArtifactError::Archive(e.to_string()))?;
    let pairs = [
        ("artifact_format", &params.artifact_format),
        ("artifact_type", &params.artifact_type),
        ("expire_in", &params.expire_in),
    ];
    if pairs.iter().any(|(_, v)| !v.is_empty()) {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
    }
    Ok(url)
}

/// Same path and query on the scheme+host(+port) of `location`.
fn rebase(url: &Url, location: &str) -> Option<Url> {
    let loc = url.join(location).ok()?;
    let mut out = url.clone();
    out.set_scheme(loc.scheme()).ok()?;
    out.set_host(loc.host_str()).ok()?;
    out.set_port(loc.port()).ok()?;
    Some(out)
}

/// Upload the archive at `file` as multipart field `file` named `filename`, streamed with
/// chunked transfer encoding (no Content-Length). The file is re-read for every try.
pub async fn upload(
    client: &Client,
    job_id: i64,
    job_token: &Secret,
    file: &Path,
    filename: &str,
    params: &UploadParams,
) -> Result<(), ArtifactError> {
    let mut url = upload_url(client.base(), job_id, params)?;
    let mut tries = 0;
    loop {
        tries += 1;
        let result = client
            .send(Method::POST, url.clone(), TRANSFER_TIMEOUT, false, |rb| {
                let std_file = std::fs::File::open(file)?;
                let body = reqwest::Body::from(tokio::fs::File::from_std(std_file));
                let part = Part::stream(body)
                    .file_name(filename.to_owned())
                    .mime_str("application/octet-stream")
                    .map_err(ClientError::transport)?;
                Ok(rb
                    .header(HEADER_JOB_TOKEN, job_token.expose())
                    .multipart(Form::new().part("file", part)))
            })
            .await;
        let (status, location, detail) = match result {
            Ok(response) => {
                let status = response.status().as_u16();
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                (Some(status), location, format!("{}", response.status()))
            }
            Err(e) => (None, None, e.to_string()),
        };
        match upload_decision(status, tries) {
            UploadDecision::Done => return Ok(()),
            UploadDecision::Fail => {
                return Err(match status {
                    Some(413) => ArtifactError::TooLarge,
                    Some(s) => ArtifactError::Status(s),
                    None => ArtifactError::Transfer(detail),
                });
            }
            UploadDecision::Redirect => match location.as_deref().and_then(|l| rebase(&url, l)) {
                Some(next) => {
                    url = next;
                    continue;
                }
                None => return Err(ArtifactError::Status(307)),
            },
            UploadDecision::Retry => {
                tracing::warn!(job_id, tries, %detail, "artifact upload failed, retrying");
                tokio::time::sleep(upload_backoff(tries)).await;
            }
        }
    }
}

/// Download decision for one answer (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownloadDecision {
    Stream,
    FollowLocation,
    Permanent,
    Retry,
}

pub fn download_decision(status: Option<u16>) -> DownloadDecision {
    match status {
        Some(200) => DownloadDecision::Stream,
        Some(302) | Some(307) => DownloadDecision::FollowLocation,
        Some(401) | Some(403) | Some(404) => DownloadDecision::Permanent,
        _ => DownloadDecision::Retry,
    }
}

async fn stream_to(response: reqwest::Response, dest: &Path) -> Result<u64, ArtifactError> {
    let mut file = tokio::fs::File::create(dest).await?;
    let mut stream = response.bytes_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ArtifactError::Transfer(e.without_url().to_string()))?;
        total += chunk.len() as u64;
        file.write_all(&chunk).await?;
    }
    file.flush().await?;
    Ok(total)
}

/// One download try. Redirects are never followed automatically: the `Location` (object
/// storage) is fetched without the job token so the token never leaves GitLab.
async fn download_once(
    client: &Client,
    dep_id: i64,
    token: &Secret,
    direct: bool,
    dest: &Path,
) -> Result<u64, (DownloadDecision, ArtifactError)> {
    let retry = |e: ArtifactError| (DownloadDecision::Retry, e);
    let mut url = client
        .endpoint(&format!("jobs/{dep_id}/artifacts"))
        .map_err(|e| retry(e.into()))?;
    if direct {
        url.query_pairs_mut().append_pair("direct_download", "true");
    }
    let response = client
        .send(Method::GET, url.clone(), TRANSFER_TIMEOUT, false, |rb| {
            Ok(rb.header(HEADER_JOB_TOKEN, token.expose()))
        })
        .await
        .map_err(|e| retry(e.into()))?;
    let status = response.status();
    let response = match download_decision(Some(status.as_u16())) {
        DownloadDecision::Stream => response,
        DownloadDecision::FollowLocation => {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| url.join(l).ok())
                .ok_or_else(|| retry(ArtifactError::Status(status.as_u16())))?;
            let followed = client
                .send(Method::GET, location, TRANSFER_TIMEOUT, true, Ok)
                .await
                .map_err(|e| retry(e.into()))?;
            if followed.status() != StatusCode::OK {
                let s = followed.status().as_u16();
                return Err((download_decision(Some(s)), ArtifactError::Status(s)));
            }
            followed
        }
        decision => return Err((decision, ArtifactError::Status(status.as_u16()))),
    };
    stream_to(response, dest).await.map_err(retry)
}

/// Download the artifacts of job `dep_id` to `dest` (§7.2): first with
/// `direct_download=true`, then up to two more tries without it, 1 s apart; 401/403/404
/// are permanent.
pub async fn download(
    client: &Client,
    dep_id: i64,
    token: &Secret,
    dest: &Path,
) -> Result<u64, ArtifactError> {
    let mut last = ArtifactError::Status(0);
    for attempt in 1..=DOWNLOAD_TRIES {
        match download_once(client, dep_id, token, attempt == 1, dest).await {
            Ok(n) => return Ok(n),
            Err((DownloadDecision::Permanent, e)) => return Err(e),
            Err((_, e)) => {
                tracing::warn!(dep_id, attempt, error = %e, "artifact download failed");
                last = e;
                if attempt < DOWNLOAD_TRIES {
                    tokio::time::sleep(DOWNLOAD_RETRY_WAIT).await;
                }
            }
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_decisions() {
        use UploadDecision::*;
        assert_eq!(upload_decision(Some(201), 1), Done);
        assert_eq!(upload_decision(Some(403), 1), Fail);
        assert_eq!(upload_decision(Some(413), 1), Fail);
        for t in 1..6 {
            assert_eq!(upload_decision(Some(503), t), Retry, "503 try {t}");
        }
        assert_eq!(upload_decision(Some(503), 6), Fail);
        assert_eq!(upload_decision(Some(500), 1), Retry);
        assert_eq!(upload_decision(Some(500), 2), Retry);
        assert_eq!(upload_decision(Some(500), 3), Fail);
        assert_eq!(upload_decision(None, 2), Retry);
        assert_eq!(upload_decision(None, 3), Fail);
        assert_eq!(upload_decision(Some(200), 1), Retry, "only 201 is success");
        assert_eq!(upload_decision(Some(307), 1), Redirect);
    }

    #[test]
    fn upload_backoff_grows_to_five_seconds() {
        let secs: Vec<u64> = (1..=6).map(|t| upload_backoff(t).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 5, 5, 5]);
    }

    #[test]
    fn download_decisions() {
        use DownloadDecision::*;
        assert_eq!(download_decision(Some(200)), Stream);
        assert_eq!(download_decision(Some(302)), FollowLocation);
        assert_eq!(download_decision(Some(307)), FollowLocation);
        assert_eq!(download_decision(Some(401)), Permanent);
        assert_eq!(download_decision(Some(403)), Permanent);
        assert_eq!(download_decision(Some(404)), Permanent);
        assert_eq!(download_decision(Some(500)), Retry);
        assert_eq!(download_decision(None), Retry);
    }

    #[test]
    fn upload_url_query_only_when_non_empty() {
        let base = Url::parse("http://h/api/v4/").unwrap();
        let u = upload_url(&base, 5, &UploadParams::default()).unwrap();
        assert_eq!(u.as_str(), "http://h/api/v4/jobs/5/artifacts");
        let u = upload_url(
            &base,
            5,
            &UploadParams {
                artifact_format: "zip".into(),
                artifact_type: "archive".into(),
                expire_in: String::new(),
            },
        )
        .unwrap();
        assert_eq!(
            u.as_str(),
            "http://h/api/v4/jobs/5/artifacts?artifact_format=zip&artifact_type=archive"
        );
    }

    #[test]
    fn rebase_keeps_path() {
        let u = Url::parse("http://h/api/v4/jobs/5/artifacts?a=b").unwrap();
        let r = rebase(&u, "https://other:8443/whatever").unwrap();
        assert_eq!(r.as_str(), "https://other:8443/api/v4/jobs/5/artifacts?a=b");
    }
}
