//! The listening socket and the HTTP/1.1 connection loop.
//!
//! hyper is driven directly (not `axum::serve`) so that a `drop` fault can close one connection
//! without an answer: each connection gets a [`ConnectionKill`] token, and cancelling it makes the
//! loop drop the connection mid-request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::middleware;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::config::Config;
use crate::faults::{self, ConnectionKill};
use crate::shared::Shared;
use crate::{api, control, git, tls};

/// How long in-flight requests (e.g. an artifact upload) may finish after shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (e.g. out of file descriptors) before the next one.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A fake GitLab serving on a loopback socket. Dropping it stops the server abruptly;
/// [`RunningServer::shutdown`] stops it in order.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    url: String,
    shared: Arc<Shared>,
    accept_loop: Option<JoinHandle<()>>,
    /// The temporary data directory, removed when the server goes.
    _data_dir: Option<TempDir>,
}

impl RunningServer {
    /// `http://ADDR` of the bound socket (loopback when bound to an unspecified address).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A control API client for this server.
    pub fn client(&self) -> control::Client {
        control::Client::new(&self.url)
    }

    /// Stops accepting, answers held long polls and waits at once, lets in-flight requests
    /// finish for a few seconds, then closes everything.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(accept_loop) = self.accept_loop.take()
            && let Err(e) = accept_loop.await
        {
            tracing::warn!(error = %e, "accept loop ended abnormally");
        }
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        tracing::info!("fake-gitlab stopped");
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        if let Some(accept_loop) = self.accept_loop.take() {
            accept_loop.abort();
        }
    }
}

/// Binds `config.listen` and serves the runner API and the control API in the background.
pub async fn start(config: Config) -> anyhow::Result<RunningServer> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
        (None, None) => None,
        _ => anyhow::bail!("TLS needs both a certificate and a key"),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", reachable(addr));
    let git_dir = config.git_dir.clone();

    let (data_dir, temp_dir) = match &config.data_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("fake-gitlab-")
                .tempdir()
                .context("creating the data directory")?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    prepare_data_dir(&data_dir)?;

    let server_url = config
        .external_url
        .clone()
        .unwrap_or_else(|| url.clone())
        .trim_end_matches('/')
        .to_owned();
    let runner_tokens = config.runner_tokens.clone();
    let registration_tokens = config.registration_tokens.clone();
    let shared = Arc::new(Shared::new(config, server_url, data_dir));
    shared.mutate(|state| {
        for token in &runner_tokens {
            state.add_runner(token);
        }
        for token in &registration_tokens {
            state.add_registration_token(token);
        }
    });

    shared.spawn_timeout_sweeper();
    let mut router = router(Arc::clone(&shared));
    if let Some(dir) = git_dir {
        router = router.merge(git::routes(dir));
    }
    let accept_loop = tokio::spawn(accept_loop(listener, tls, router, Arc::clone(&shared)));
    tracing::info!(%url, "fake-gitlab listening");
    Ok(RunningServer {
        addr,
        url,
        shared,
        accept_loop: Some(accept_loop),
        _data_dir: temp_dir,
    })
}

fn prepare_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    for sub in ["artifacts", "uploads"] {
        let path: PathBuf = dir.join(sub);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    Ok(())
}

/// An address a client can dial: `0.0.0.0`/`::` become loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    let mut reachable = addr;
    if addr.ip().is_unspecified() {
        reachable.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    reachable
}

fn router(shared: Arc<Shared>) -> Router {
    let observed = api::routes().layer(middleware::from_fn_with_state(
        Arc::clone(&shared),
        faults::observe,
    ));
    let routes = observed.merge(control::routes()).with_state(shared);
    // Grape ignores a trailing slash (`POST /api/v4/runners/`), so the routes see none.
    Router::new().fallback_service(tower::ServiceExt::map_request(routes, trim_trailing_slash))
}

fn trim_trailing_slash<B>(mut request: axum::http::Request<B>) -> axum::http::Request<B> {
    let path = request.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = match path.trim_end_matches('/') {
            "" => "/",
            other => other,
        };
        let rebuilt = match request.uri().query() {
            Some(query) => format!("{trimmed}?{query}"),
            None => trimmed.to_owned(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *request.uri_mut() = uri;
        }
    }
    request
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    shared: Arc<Shared>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.shutdown.cancelled() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                // As GitLab's front ends do: no Nagle delay on small responses.
                let _ = stream.set_nodelay(true);
                let router = router.clone();
                let shutdown = shared.shutdown.clone();
                match tls.clone() {
                    None => shared
                        .tasks
                        .spawn(serve_connection(stream, peer, router, shutdown)),
                    Some(acceptor) => shared.tasks.spawn(async move {
                        let handshake = acceptor.accept(stream);
                        match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, handshake).await {
                            Ok(Ok(stream)) => {
                                serve_connection(stream, peer, router, shutdown).await;
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }),
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
}

async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    shutdown: tokio_util::sync::CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let kill = tokio_util::sync::CancellationToken::new();
    let request_kill = kill.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(ConnectionKill(request_kill.clone()));
        router.clone().oneshot(request.map(Body::new))
    });
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);

    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        () = kill.cancelled() => {
            tracing::debug!(%peer, "dropping connection (fault)");
            return;
        }
        () = shutdown.cancelled() => {}
    }
    // Shutdown: finish the request in flight (held polls answer at once), then close.
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection.as_mut() => {}
        () = kill.cancelled() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::debug!(%peer, "connection still busy after the grace period; closing");
        }
    }
}
