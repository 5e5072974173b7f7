//! `[server]` keys that bound what one client can hold of the mirrored API: every machine runs
//! arbitrary job code and can reach it, so no machine may exhaust it for the others.

use std::time::Duration;

use super::reader::Section;
use super::values;

/// The connection limits of the mirrored API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client has to send a request's line and headers. hyper runs the same timer
    /// while a kept-alive connection waits for its next request, so it is also how long an idle
    /// connection stays open; a request being answered (a long poll) is never cut by it.
    pub header_read_timeout: Duration,
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
            max_connections: 4096,
            max_connections_per_address: 256,
            // A stock runner holds at most its `request_concurrency` (1 by default), the built-in
            // sidecar one per free slot: 16 leaves room for any sensible machine.
            max_job_requests_per_sidecar: 16,
        }
    }
}

pub(super) fn read_connection_limits(s: &Section<'_>) -> ConnectionLimits {
    let default = ConnectionLimits::default();
    let header_read_timeout = s
        .parsed("header_read_timeout", values::duration)
        .unwrap_or(default.header_read_timeout);
    if header_read_timeout < Duration::from_secs(1)
        || header_read_timeout > Duration::from_secs(300)
    {
        s.problem("header_read_timeout", "must be between 1s and 5m");
    }
    let count = |key: &str, fallback: usize, max: usize| {
        let n: usize = s.or(key, fallback);
        if n == 0 || n > max {
            s.problem(key, format!("must be between 1 and {max}"));
        }
        n
    };
    let max_connections = count("max_connections", default.max_connections, 1 << 20);
    let max_connections_per_address = count(
        "max_connections_per_address",
        default.max_connections_per_address,
        1 << 20,
    );
    if max_connections_per_address > max_connections {
        s.problem(
            "max_connections_per_address",
            "must not exceed max_connections",
        );
    }
    let max_job_requests_per_sidecar = count(
        "max_job_requests_per_sidecar",
        default.max_job_requests_per_sidecar,
        1024,
    );
    ConnectionLimits {
        header_read_timeout,
        max_connections,
        max_connections_per_address,
        max_job_requests_per_sidecar,
    }
}
