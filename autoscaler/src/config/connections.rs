//! `[server]` keys that bound what one client can hold of the mirrored API: every machine runs
//! arbitrary job code and can reach it, so no machine may exhaust it for the others.

use std::time::Duration;

use super::reader::Section;
use super::values;
pub use crate::conn::ConnectionLimits;
use crate::conn::DEFAULT_IDLE_TIMEOUT;

/// How much longer than the long poll the idle timeout is at least by default.
const IDLE_PAST_LONG_POLL: Duration = Duration::from_secs(30);

/// The `[server]` connection keys; `long_poll_timeout` is the mirrored API's long poll, which
/// the idle timeout must outlast.
pub(super) fn read_connection_limits(
    s: &Section<'_>,
    long_poll_timeout: Duration,
) -> ConnectionLimits {
    let default = ConnectionLimits::default();
    let header_read_timeout = s
        .parsed("header_read_timeout", values::duration)
        .unwrap_or(default.header_read_timeout);
    if header_read_timeout < Duration::from_secs(1)
        || header_read_timeout > Duration::from_secs(300)
    {
        s.problem("header_read_timeout", "must be between 1s and 5m");
    }
    let idle_timeout = read_idle_timeout(s, header_read_timeout, long_poll_timeout);
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
        idle_timeout,
        max_connections,
        max_connections_per_address,
        max_job_requests_per_sidecar,
    }
}

fn read_idle_timeout(
    s: &Section<'_>,
    header_read_timeout: Duration,
    long_poll_timeout: Duration,
) -> Duration {
    let fallback = DEFAULT_IDLE_TIMEOUT.max(long_poll_timeout + IDLE_PAST_LONG_POLL);
    let idle_timeout = s
        .parsed("idle_timeout", values::duration)
        .unwrap_or(fallback);
    if idle_timeout > Duration::from_secs(3600) {
        s.problem("idle_timeout", "must be at most 1h");
    }
    if idle_timeout <= long_poll_timeout || idle_timeout <= header_read_timeout {
        s.problem(
            "idle_timeout",
            format!(
                "must exceed long_poll_timeout ({} s) and header_read_timeout ({} s)",
                long_poll_timeout.as_secs(),
                header_read_timeout.as_secs()
            ),
        );
    }
    idle_timeout
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{Config, ConfigError};

    fn load(server_keys: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:8090\"\n{server_keys}\n[state]\ndir = \"./state\"\n\
             [upstream]\nurl = \"https://gitlab.example.com\"\n[[pools]]\nname = \"default\"\n\
             upstream_token = \"glrt-upstream\"\nregistration_token = \"reg-default\"\n"
        );
        let path = dir.path().join("autoscaler.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path, Vec::new())
    }

    #[test]
    fn the_idle_timeout_defaults_to_two_minutes_or_half_a_minute_past_a_longer_long_poll() {
        let c = load("").unwrap();
        assert_eq!(c.server.connections.idle_timeout, Duration::from_secs(120));
        assert_eq!(
            c.server.connections.header_read_timeout,
            Duration::from_secs(10)
        );
        let c = load("long_poll_timeout = \"3m\"").unwrap();
        assert_eq!(c.server.connections.idle_timeout, Duration::from_secs(210));
    }

    #[test]
    fn an_idle_timeout_not_longer_than_the_long_poll_is_refused() {
        let e = load("idle_timeout = \"50s\"").unwrap_err();
        assert!(
            e.problems
                .iter()
                .any(|p| p.path == "server.idle_timeout" && p.message.contains("long_poll")),
            "{e}"
        );
        let c = load("idle_timeout = \"51s\"").unwrap();
        assert_eq!(c.server.connections.idle_timeout, Duration::from_secs(51));
    }
}
