//! What one client may hold of the mirrored API (read from `[server]` by the configuration):
//! defined here, where it is enforced, so that this layer needs nothing from above it.

use std::time::Duration;

/// The idle timeout unless the long poll needs a longer one.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The connection limits of the mirrored API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client has to send a request's line and headers, from their first byte (from
    /// the accept for a new connection); a request being answered (a long poll, an upload) is
    /// never cut by it.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request. Longer than the long poll:
    /// while a runner's job request is held on one connection, its other calls use another,
    /// which then sits idle until the long poll ends. Longer than Go's 90 s too (stock runners'
    /// idle connections), so that the client is the one to close an idle connection and never
    /// sends a request on one the server is closing.
    pub idle_timeout: Duration,
    /// Open connections from all clients together; further ones are closed as they arrive.
    pub max_connections: usize,
    /// Open connections from one source address.
    pub max_connections_per_address: usize,
    /// Job requests one sidecar token may hold open at once; more are answered `429`.
    pub max_job_requests_per_sidecar: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: 4096,
            max_connections_per_address: 256,
            // A stock runner holds at most its `request_concurrency` (1 by default), the built-in
            // sidecar one per free slot: 16 leaves room for any sensible machine.
            max_job_requests_per_sidecar: 16,
        }
    }
}
