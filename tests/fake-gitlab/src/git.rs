//! `GET /git/<path>`: the files of `--git-dir` as they are, which is all git's "dumb" HTTP
//! protocol needs (a bare repository after `git update-server-info`). It lets a job's
//! `repo_url` point at the GitLab host, over HTTPS when the fake serves TLS.

use std::path::{Component, Path, PathBuf};

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::StatusCode;
use axum::routing::get;

/// The route, serving files under `root`.
pub fn routes(root: PathBuf) -> Router {
    Router::new().route(
        "/git/{*path}",
        get(move |UrlPath(path): UrlPath<String>| {
            let root = root.clone();
            async move { serve(&root, &path).await }
        }),
    )
}

async fn serve(root: &Path, path: &str) -> Result<Vec<u8>, StatusCode> {
    let relative = Path::new(path);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(StatusCode::NOT_FOUND);
    }
    tokio::fs::read(root.join(relative))
        .await
        .map_err(|_| StatusCode::NOT_FOUND)
}
