//! The book, served at `/book/` on the admin listener from `[admin] book_dir` (the directory
//! `cargo xtask docs` writes), so that the status page's links to the pages that explain what
//! it shows open where the operator already is. Open like the page: the book holds no data.
//! Without `book_dir` every book path answers `404` saying how to serve it.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use tower_http::services::ServeDir;

use super::Admin;
use crate::routes::Routes;

pub(super) fn routes(routes: Routes<Arc<Admin>>) -> Routes<Arc<Admin>> {
    routes
        .add(Method::GET, "/book/", serve)
        .add(Method::GET, "/book/{*page}", serve)
}

/// The page the request names below `/book` (a directory's `index.html` for a directory), from
/// the book's directory. `ServeDir` decodes the path and refuses one that leaves the directory.
async fn serve(State(admin): State<Arc<Admin>>, mut request: Request) -> Response {
    let Some(dir) = &admin.book_dir else {
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "error": "the book is not served here: set [admin] book_dir to the directory \
                          `cargo xtask docs` writes (target/book), or read docs/src in the source"
            })),
        )
            .into_response();
    };
    let below = request.uri().path().strip_prefix("/book").unwrap_or("/");
    let Ok(uri) = below.parse::<Uri>() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    *request.uri_mut() = uri;
    match ServeDir::new(dir).oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}
