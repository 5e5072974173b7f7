//! A reverse proxy on loopback that passes every request on to one upstream (the autoscaler's
//! mirrored API, or its admin API) and keeps a copy of each answer, so that a test can hold the
//! answers of a real run to the API's spec (`openapi`) without a hook in the product.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Longer than any long poll of the tests: the proxy must never be the one to give up.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(600);

/// One answer as the client received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request's path, without its query.
    pub path: String,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    client: reqwest::Client,
    answers: Mutex<Vec<Recorded>>,
}

/// The proxy; it stops when dropped.
#[derive(Debug)]
pub struct RecordingProxy {
    /// Where clients send their requests instead of the upstream (no trailing slash).
    pub url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl RecordingProxy {
    /// Listens on a free loopback port and passes requests on to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(UPSTREAM_TIMEOUT)
            .build()?;
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client,
            answers: Mutex::default(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let router = Router::new().fallback(forward).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            url: format!("http://{addr}"),
            shared,
            task,
        })
    }

    /// Every answer so far, in the order they were given.
    pub fn answers(&self) -> Vec<Recorded> {
        self.shared
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Hop-by-hop headers, which belong to one connection and are not passed on.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::HOST,
        header::CONTENT_LENGTH,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    headers
        .iter()
        .filter(|(name, _)| !hop_by_hop(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match relay(&shared, request).await {
        Ok(response) => response,
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(format!("recording proxy: {e:#}")))
            .unwrap_or_default(),
    }
}

async fn relay(shared: &Shared, request: Request) -> Result<Response> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await?;
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let answer = shared
        .client
        .request(
            parts.method.clone(),
            format!("{}{path_and_query}", shared.upstream),
        )
        .headers(end_to_end(&parts.headers))
        .body(body)
        .send()
        .await
        .context("upstream unreachable")?;
    let status = answer.status();
    let headers = end_to_end(answer.headers());
    let body = answer.bytes().await.context("upstream body")?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    shared
        .answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Recorded {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            status: status.as_u16(),
            content_type,
            body: body.clone(),
        });
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}
