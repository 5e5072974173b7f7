//! Requests to the mirrored runner API, timed by route and status. Installed as a route layer
//! of the mirror's router (`axum::middleware::from_fn_with_state`), so that handlers carry no
//! metric code and the route is the declared one (`/api/v4/jobs/{id}`), never a raw path.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::{Metrics, MirrorLabels};

/// Times one request until its answer's headers (bodies, such as artifact downloads, stream
/// on afterwards). A long-polled job request counts its whole hold.
pub async fn record_request(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let endpoint = format!("{} {route}", request.method());
    let started = crate::clock::monotonic();
    let response = next.run(request).await;
    metrics
        .mirror_requests
        .get_or_create(&MirrorLabels {
            endpoint,
            status: response.status().as_u16().to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
    response
}
