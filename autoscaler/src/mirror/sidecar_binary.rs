//! `GET /autoscaler/v1/sidecar-binary/{sha256}`: the sidecar binary a machine fetches at boot
//! when its pool starts sidecars from user-data (`inject::bootstrap`). Only the binaries of such
//! pools are served, each under its own checksum, so the route names exactly what the machine
//! will verify; nothing else on the host is reachable through it. The binary is no secret (the
//! same file ships in every release), so the route takes no token.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{ApiError, App};

pub async fn download(
    State(app): State<Arc<App>>,
    Path(sha256): Path<String>,
) -> Result<Response, ApiError> {
    let path = app
        .sidecar_binaries
        .get(&sha256)
        .ok_or_else(|| ApiError::NotFound("no sidecar binary with that checksum".into()))?;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::Internal(format!("cannot open {}: {e}", path.display())))?;
    let length = file
        .metadata()
        .await
        .map_err(|e| ApiError::Internal(format!("cannot read {}: {e}", path.display())))?
        .len();
    tracing::debug!(sha256, bytes = length, "serving the sidecar binary");
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        body,
    )
        .into_response())
}
