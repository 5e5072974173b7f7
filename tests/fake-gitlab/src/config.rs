//! Server configuration: the CLI options of `README.md` as a plain struct.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// How to run the fake. `Default` gives GitLab's own values (runner-protocol.md §10).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Runner tokens known from the start (more via `POST /control/runners`).
    pub runner_tokens: Vec<String>,
    /// Registration tokens `POST /api/v4/runners` accepts (more via
    /// `POST /control/registration_tokens`).
    pub registration_tokens: Vec<String>,
    /// How long a job request whose `last_update` is current is held (Workhorse, §3.3).
    /// Zero disables holding, as a Workhorse without long polling.
    pub long_poll: Duration,
    /// `X-GitLab-Trace-Update-Interval` sent on trace and update answers (whole seconds).
    pub trace_update_interval: Duration,
    /// GitLab's feature flag `allow_runner_job_acknowledgement` (off by default on a
    /// self-managed GitLab): with it on, a runner that advertises `two_phase_job_commit` and
    /// sends a `system_id` gets jobs that wait for its acceptance `PUT` (runner-protocol.md §3.5).
    pub two_phase_commit: bool,
    /// How long a two-phase job waits for its acceptance `PUT` or a `pending` keep-alive
    /// (GitLab: 2 minutes). Scaled down in tests; the retry worker's period scales with it.
    pub ack_window: Duration,
    /// How many times a job failed with `runner_provisioning_timeout` is retried as a new job
    /// (new id and token) by GitLab's auto-retry. The count GitLab uses by default is
    /// unconfirmed; its worker's tests show one retry.
    pub provisioning_retries: u32,
    /// GitLab fails a running job this long after its own timeout ran out
    /// (`Ci::TimedOutBuilds::DropRunningService`, 15 minutes), reason `server_timeout_running`.
    pub running_timeout_margin: Duration,
    /// Where artifacts are stored; `None` = a temporary directory removed with the server.
    pub data_dir: Option<PathBuf>,
    /// Larger artifact uploads are refused with `413`.
    pub max_artifact_size: u64,
    /// A trace growing beyond this fails the job with `trace_size_exceeded`.
    pub trace_limit: u64,
    /// Answer `GET /jobs/:id/artifacts?direct_download=true` with a `302` to `/storage/…`,
    /// as GitLab does with object storage (§7.2).
    pub artifacts_redirect: bool,
    /// The URL jobs see as `CI_SERVER_URL` (and clone URLs are built from); `None` = the URL
    /// of the bound socket.
    pub external_url: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (with [`Config::tls_key`]).
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of [`Config::tls_cert`].
    pub tls_key: Option<PathBuf>,
    /// Serve the files of this directory at `/git/…` (git's dumb HTTP protocol).
    pub git_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            runner_tokens: Vec::new(),
            registration_tokens: Vec::new(),
            long_poll: Duration::from_secs(50),
            trace_update_interval: Duration::from_secs(3),
            two_phase_commit: false,
            ack_window: Duration::from_secs(120),
            provisioning_retries: 1,
            running_timeout_margin: Duration::from_secs(15 * 60),
            data_dir: None,
            max_artifact_size: 2 << 30,
            trace_limit: 100 << 20,
            artifacts_redirect: false,
            external_url: None,
            tls_cert: None,
            tls_key: None,
            git_dir: None,
        }
    }
}

/// A size or duration option that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    reason: String,
}

/// Parses a byte size such as `2GiB`, `100MiB`, `512k` or `1048576`.
pub fn parse_size(input: &str) -> Result<u64, ParseError> {
    let error = |reason: &str| ParseError {
        what: "size",
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = input.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let number: u64 = digits.parse().map_err(|_| error("expected a number"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(error("unknown unit (use B, KiB, MiB, GiB or TiB)")),
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| error("too large"))
}

/// Parses a duration: a humantime string (`50s`, `2m`, `500ms`) or plain seconds (`3`).
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    let trimmed = input.trim();
    if let Ok(seconds) = trimmed.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(trimmed).map_err(|e| ParseError {
        what: "duration",
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("100MiB").unwrap(), 100 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("42").unwrap(), 42);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("50s").unwrap(), Duration::from_secs(50));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("soon").is_err());
    }
}
