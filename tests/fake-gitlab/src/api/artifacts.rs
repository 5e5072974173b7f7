//! Artifact upload and download (runner-protocol.md §7), streamed to and from disk: an upload is never
//! held in memory whole, so ~1 GiB chunked uploads are fine.

use std::collections::HashMap;
use std::path::Path as FsPath;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

use super::{JOB_TOKEN, forbidden, header_str, message, not_found, not_processing, parse_id};
use crate::shared::Shared;
use crate::state::{ArtifactAccess, StoredArtifact, UploadDecision, new_storage_key};

const WRITE_BUFFER: usize = 256 << 10;
const READ_CHUNK: usize = 64 << 10;

#[derive(Debug, Deserialize)]
pub(super) struct UploadQuery {
    #[serde(default)]
    artifact_type: Option<String>,
    #[serde(default)]
    artifact_format: Option<String>,
    #[serde(default)]
    expire_in: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    job_token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
enum UploadError {
    #[error("artifact larger than {0} bytes")]
    TooLarge(u64),
    #[error("malformed multipart body: {0}")]
    Multipart(#[from] multer::Error),
    #[error("storing the artifact failed: {0}")]
    Io(#[from] std::io::Error),
}

impl IntoResponse for UploadError {
    fn into_response(self) -> Response {
        let status = match self {
            UploadError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            UploadError::Multipart(_) => StatusCode::BAD_REQUEST,
            UploadError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        message(status, &self.to_string())
    }
}

/// The `file` part, written to a temporary file next to its final place.
struct ReceivedFile {
    temp: NamedTempFile,
    filename: String,
    size: u64,
    sha256: [u8; 32],
}

fn access_denied(denied: ArtifactAccess) -> Response {
    match denied {
        ArtifactAccess::NotFound => not_found(),
        ArtifactAccess::Forbidden => forbidden(),
        ArtifactAccess::NotProcessing(status) => not_processing(status),
    }
}

/// Artifact types name files on disk, so only GitLab-like names (`archive`, `junit`, …).
fn valid_artifact_type(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `POST /api/v4/jobs/:id/artifacts`: multipart field `file`, `201`.
pub(super) async fn upload(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return not_found();
    };
    // Query `token` or `JOB-TOKEN` (Workhorse authorizes before it reads the body).
    let Some(token) = query.token.clone().filter(|t| !t.is_empty()).or_else(|| {
        header_str(&headers, JOB_TOKEN)
            .map(str::to_owned)
            .or_else(|| query.job_token.clone().filter(|t| !t.is_empty()))
    }) else {
        return forbidden();
    };
    if let Err(denied) = shared.read(|s| s.authorize_upload(id, &token)) {
        return access_denied(denied);
    }
    let max = shared.config.max_artifact_size;
    let declared = header_str(&headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max) {
        return UploadError::TooLarge(max).into_response();
    }
    let Some(boundary) = header_str(&headers, header::CONTENT_TYPE)
        .and_then(|content_type| multer::parse_boundary(content_type).ok())
    else {
        return message(
            StatusCode::BAD_REQUEST,
            "400 Bad request - not multipart/form-data",
        );
    };

    let (received, fields) = match receive(&shared, body, boundary, max).await {
        Ok((Some(received), fields)) => (received, fields),
        Ok((None, _)) => {
            return message(StatusCode::BAD_REQUEST, "400 Bad request - file is missing");
        }
        Err(e) => {
            tracing::warn!(job.id = id, error = %e, "artifact upload failed");
            return e.into_response();
        }
    };
    // Parameters come from the query or from text parts of the body (Rails reads both, the
    // body winning); runners send them in the query, others as form fields.
    let param = |name: &str, from_query: &Option<String>| {
        fields
            .get(name)
            .cloned()
            .or_else(|| from_query.clone())
            .filter(|v| !v.is_empty())
    };
    let artifact_type =
        param("artifact_type", &query.artifact_type).unwrap_or_else(|| "archive".to_owned());
    if !valid_artifact_type(&artifact_type) {
        return message(
            StatusCode::BAD_REQUEST,
            "400 Bad request - invalid artifact_type",
        );
    }
    let artifact_format =
        param("artifact_format", &query.artifact_format).unwrap_or_else(|| "zip".to_owned());
    let expire_in = param("expire_in", &query.expire_in);

    match shared.read(|s| s.upload_decision(id, &artifact_type, &received.sha256)) {
        UploadDecision::Identical => return created(),
        UploadDecision::Conflict => {
            // What Rails answers for a second, different file of one type.
            return message(
                StatusCode::BAD_REQUEST,
                "another artifact of the same type already exists",
            );
        }
        UploadDecision::Store => {}
    }
    let job_dir = shared.artifacts_dir.join(id.to_string());
    let path = job_dir.join(&artifact_type);
    let persisted = match tokio::fs::create_dir_all(&job_dir).await {
        Ok(()) => received.temp.persist(&path).map_err(|e| e.error),
        Err(e) => Err(e),
    };
    if let Err(e) = persisted {
        return UploadError::Io(e).into_response();
    }
    tracing::info!(job.id = id, %artifact_type, size = received.size, "artifact stored");
    let artifact = StoredArtifact {
        artifact_type,
        artifact_format,
        filename: received.filename,
        size: received.size,
        expire_in,
        path,
        sha256: received.sha256,
        storage_key: new_storage_key(),
    };
    shared.mutate(|s| s.record_artifact(id, artifact));
    created()
}

fn created() -> Response {
    message(StatusCode::CREATED, "201 Created")
}

/// Text parts of an upload (`artifact_type`, `artifact_format`, …) are small; larger ones are
/// read and dropped.
const FIELD_LIMIT: usize = 4 << 10;

/// Streams the multipart body; the first `file` part goes to a temporary file, small text parts
/// are kept by name, other parts (`metadata`, …) are read and ignored. No file when there was
/// no `file` part.
async fn receive(
    shared: &Shared,
    body: Body,
    boundary: String,
    max: u64,
) -> Result<(Option<ReceivedFile>, HashMap<String, String>), UploadError> {
    let mut multipart = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut received = None;
    let mut fields = HashMap::new();
    while let Some(mut field) = multipart.next_field().await? {
        if received.is_none() && field.name() == Some("file") {
            let filename = field.file_name().unwrap_or("artifacts").to_owned();
            tokio::fs::create_dir_all(&shared.uploads_dir).await?;
            let temp = NamedTempFile::new_in(&shared.uploads_dir)?;
            let mut writer = tokio::io::BufWriter::with_capacity(
                WRITE_BUFFER,
                tokio::fs::File::from_std(temp.as_file().try_clone()?),
            );
            let mut hasher = Sha256::new();
            let mut size = 0u64;
            while let Some(chunk) = field.chunk().await? {
                size += chunk.len() as u64;
                if size > max {
                    return Err(UploadError::TooLarge(max));
                }
                hasher.update(&chunk);
                writer.write_all(&chunk).await?;
            }
            writer.flush().await?;
            received = Some(ReceivedFile {
                temp,
                filename,
                size,
                sha256: hasher.finalize().into(),
            });
        } else if field.file_name().is_none()
            && let Some(name) = field.name().map(str::to_owned)
        {
            let mut text = Vec::new();
            while let Some(chunk) = field.chunk().await? {
                if text.len() + chunk.len() <= FIELD_LIMIT {
                    text.extend_from_slice(&chunk);
                }
            }
            fields.insert(name, String::from_utf8_lossy(&text).into_owned());
        } else {
            while field.chunk().await?.is_some() {}
        }
    }
    Ok((received, fields))
}

#[derive(Debug, Deserialize)]
pub(super) struct DownloadQuery {
    #[serde(default)]
    direct_download: Option<String>,
    #[serde(default)]
    job_token: Option<String>,
}

/// `GET /api/v4/jobs/:id/artifacts`: the archive, for the job's own token or that of a running
/// job depending on it; with `--artifacts-redirect` and `direct_download=true` a `302` to
/// `/storage/…`, like object storage.
pub(super) async fn download(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<DownloadQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return not_found();
    };
    let Some(token) = header_str(&headers, JOB_TOKEN)
        .map(str::to_owned)
        .or(query.job_token)
    else {
        return forbidden();
    };
    let artifact = match shared.read(|s| s.authorize_download(id, &token)) {
        Ok(artifact) => artifact,
        Err(denied) => return access_denied(denied),
    };
    if shared.config.artifacts_redirect && query.direct_download.as_deref() == Some("true") {
        let location = format!(
            "{}/storage/{}",
            shared.server_url.trim_end_matches('/'),
            artifact.storage_key
        );
        let mut response = StatusCode::FOUND.into_response();
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
        return response;
    }
    file_response(&artifact).await
}

/// `GET /storage/:key`: the redirect target (no token: the key is the secret, as with a
/// pre-signed object storage URL).
pub(super) async fn storage(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
) -> Response {
    match shared.read(|s| s.artifact_by_storage_key(&key)) {
        Some(artifact) => file_response(&artifact).await,
        None => not_found(),
    }
}

/// Streams a stored artifact from disk.
pub(crate) async fn file_response(artifact: &StoredArtifact) -> Response {
    let file = match tokio::fs::File::open(&artifact.path).await {
        Ok(file) => file,
        Err(e) => {
            tracing::error!(path = %artifact.path.display(), error = %e, "stored artifact unreadable");
            return message(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 artifact file unreadable",
            );
        }
    };
    let content_type = match artifact.artifact_format.as_str() {
        "gzip" => "application/gzip",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    };
    let body = Body::from_stream(ReaderStream::with_capacity(file, READ_CHUNK));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(artifact.size));
    let disposition = format!("attachment; filename=\"{}\"", file_name(&artifact.filename));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// The last path component, without quotes (it goes into a header).
fn file_name(name: &str) -> String {
    FsPath::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().replace('"', ""))
        .unwrap_or_else(|| "artifacts".to_owned())
}
