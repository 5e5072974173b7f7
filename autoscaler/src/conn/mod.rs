//! Serving the mirrored API connection by connection, with the limits that keep one machine
//! from holding it for the others (`ConnectionLimits`, read from `[server]`): a cap on
//! connections per source address and overall (`admission`), a header read timeout
//! (`head_timeout`), an idle keep-alive timeout (hyper's header read timer, which runs while a
//! connection waits for its next request) and, with TLS, a handshake timeout. Each request carries its peer address as axum's
//! `ConnectInfo`.

mod admission;
mod head_timeout;
mod limits;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use admission::{Admission, Ticket};
use head_timeout::{EndsRequest, HeadDeadline, RequestPhase};
pub use limits::{ConnectionLimits, DEFAULT_IDLE_TIMEOUT};

/// The longest a client may take to finish its TLS handshake (stock runners allow 10 s too).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept (out of file descriptors, most likely), wait before the next one
/// rather than spin; connections already open go on being served.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// File descriptors kept for everything but the mirrored API's connections (store, SSH,
/// connections to GitLab, provisioner pipes).
const RESERVED_FDS: u64 = 512;

/// Serves `router` on `listener` until `stop`, then lets open connections finish their requests.
/// With `tls`, each connection is a TLS one.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: &ConnectionLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let admission = Admission::new(
        fitting_connection_cap(limits.max_connections),
        limits.max_connections_per_address,
    );
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Over a cap: dropping the stream closes it before a byte is read.
        let Some(ticket) = admission.admit(peer.ip()) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            peer,
            router: router.clone(),
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
            stop: stop.clone(),
            _ticket: ticket,
        };
        connections.spawn(connection.run(stream, tls.clone()));
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// The overall cap, lowered to what the process's file descriptor limit allows (after raising
/// the soft limit to the hard one, as Go programs do), so that a flood of connections can never
/// leave the rest of the autoscaler without descriptors.
fn fitting_connection_cap(configured: usize) -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return configured;
    };
    let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let room = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    if room < configured {
        tracing::warn!(
            configured,
            allowed = room,
            fd_limit = soft,
            "server.max_connections lowered to fit the file descriptor limit"
        );
    }
    configured.min(room).max(1)
}

/// One accepted connection and what it needs to be served.
struct Connection {
    peer: SocketAddr,
    router: Router,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    stop: CancellationToken,
    _ticket: Ticket,
}

impl Connection {
    async fn run(self, stream: TcpStream, tls: Option<TlsAcceptor>) {
        let Some(acceptor) = tls else {
            return self.serve_http(stream).await;
        };
        let peer = self.peer;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => self.serve_http(tls).await,
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
        }
    }

    async fn serve_http<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let phase = RequestPhase::reading_first_head();
        let stream = HeadDeadline::new(stream, phase.clone(), self.header_read_timeout);
        let started = phase.clone();
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut r: http::Request<Incoming>| {
                started.request_started();
                r.extensions_mut().insert(ConnectInfo(peer));
                r
            })
            .map_response(move |r: axum::response::Response| {
                r.map(|body| Body::new(EndsRequest::new(body, phase.clone())))
            })
            .service(self.router);
        let mut builder = http1::Builder::new();
        // hyper's header timer starts when a connection begins to wait for a request, so it is
        // the idle timeout; `HeadDeadline` counts the header timeout from the head's first byte.
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.idle_timeout)
            .keep_alive(true);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::pin!(connection);
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            () = self.stop.cancelled() => {
                // Requests in progress are answered; the connection then closes.
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = ended {
            // A header timeout, a reset or garbage: the client's business, not an event.
            tracing::debug!(%peer, error = %e, "connection ended");
        }
    }
}

#[cfg(test)]
mod tests;
