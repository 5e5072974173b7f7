//! Configuration: a TOML file plus `AUTOSCALER_` environment overrides (`__` separates nesting
//! levels; pools are addressed by name: `AUTOSCALER_POOLS__DEFAULT__REQUEST_CONCURRENCY=8`).
//!
//! Everything is validated before the service binds a port or touches its store, and every
//! problem is reported at once with its key path.
mod classes;
mod connections;
mod env;
pub mod instance;
mod job_user;
mod policy;
pub(crate) mod pool;
pub(crate) mod reader;
pub mod reload;
mod scaling;
mod sidecar;
mod sources;
mod tls;
mod token_binding;
mod top_level;
pub(crate) mod values;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};
use figment::value::{Dict, Value};

use crate::secret::Secret;
pub use connections::ConnectionLimits;
pub use job_user::DEFAULT_JOB_USER;
pub use pool::PoolConfig;
pub use reader::Problem;
use reader::{Problems, Section};
pub use scaling::{Intake, PolicyCell, PoolPolicy, Prices, ScalingConfig};
pub use sidecar::{SidecarConfig, SidecarMode, SidecarStart};
pub use sources::{ProvisionerConfig, Timeouts};
pub use tls::{SYSTEM_CA_FILES, TlsConfig};
pub use token_binding::TokenBinding;
use top_level::read;

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub state: StateConfig,
    pub upstream: UpstreamConfig,
    pub log: LogConfig,
    pub ssh: SshConfig,
    pub admin: Option<AdminConfig>,
    pub pools: Vec<PoolConfig>,
    /// The file this configuration was read from, read again on `SIGHUP` (`reload.rs`).
    pub file: PathBuf,
}

/// How the autoscaler logs into machines.
#[derive(Debug, Clone, Default)]
pub struct SshConfig {
    /// A private key file (mode 600). Without it, a key pair is generated once into the state
    /// directory and handed to provisioners.
    pub key_file: Option<PathBuf>,
}

/// The admin API (machines, pools, jobs, metrics), on its own listener.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// The bearer token every request but `/healthz` must carry (`token_file`); required when
    /// `listen` is not a loopback address.
    pub token: Option<Secret>,
    /// The built book (`cargo xtask docs`), served at `/book/` for the status page's links.
    pub book_dir: Option<PathBuf>,
}

/// The mirrored runner API that sidecars talk to.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// The URL sidecars are given. Defaults to `http(s)://<listen>` when `listen` names a host.
    pub public_url: Option<url::Url>,
    /// `[server.tls]`: serve the mirrored API over TLS.
    pub tls: Option<TlsConfig>,
    /// How long a sidecar's job request is held before `204` (GitLab's Workhorse uses 50 s; the
    /// runner waits up to 10 min for headers).
    pub long_poll_timeout: Duration,
    /// Largest trace patch accepted from a sidecar (stock runners send at most 1 MiB).
    pub max_trace_patch_bytes: u64,
    /// Largest job update (`PUT /jobs/:id`) body accepted.
    pub max_update_bytes: u64,
    /// How long a graceful shutdown keeps relaying for jobs that are with sidecars. Jobs still
    /// running after it keep running: their sidecars reach the next autoscaler start.
    pub shutdown_grace: Duration,
    /// This autoscaler's name in the labels of the machines it creates. Two autoscalers sharing
    /// an infrastructure account must have different ones.
    pub instance_id: String,
    /// What one client may hold of the mirrored API.
    pub connections: ConnectionLimits,
}

#[derive(Debug, Clone)]
pub struct StateConfig {
    pub dir: PathBuf,
}

/// The GitLab instance the autoscaler serves, and how it is called.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub url: url::Url,
    pub connect_timeout: Duration,
    /// Timeout of a relayed job update or trace patch.
    pub call_timeout: Duration,
    /// Timeout of one `POST /jobs/request`; longer than `gitlab_long_poll`, so that a job GitLab
    /// assigns at the end of a long poll is never cut off.
    pub job_request_timeout: Duration,
    /// How long GitLab's Workhorse holds a job request (`apiCiLongPollingDuration`; 50 s in
    /// GitLab's own packages).
    pub gitlab_long_poll: Duration,
    /// How often a job waiting for a machine is confirmed with GitLab (`PUT state=pending` while
    /// GitLab holds it for acknowledgement, else `state=running`): well inside GitLab's
    /// 2-minute acknowledgement window, and how fast a cancel reaches a waiting job.
    pub keepalive_interval: Duration,
    /// Timeout of an artifact upload or download relayed through the autoscaler.
    pub artifact_timeout: Duration,
    /// Pause between job requests when GitLab does not long-poll (it answers `204` at once with
    /// the `last_update` we sent).
    pub poll_interval: Duration,
    /// An access token with `read_api` for the pipeline look-ahead (`lookahead`); none: off.
    pub api_token: Option<crate::secret::Secret>,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A tracing filter directive, e.g. `info` or `autoscaler=debug,info`.
    pub level: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Why the configuration was refused: every problem found, each with its key path.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub source_name: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(
            f,
            "{}: {n} configuration problem{}:",
            self.source_name,
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl Config {
    /// Reads the file at `path`, applies overrides from `env` (pairs as from `std::env::vars`),
    /// and validates the result.
    pub fn load(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let source_name = path.display().to_string();
        let fail = |problems| ConfigError {
            source_name: source_name.clone(),
            problems,
        };
        if !path.is_file() {
            return Err(fail(vec![Problem {
                path: "(file)".into(),
                message: "does not exist or is not a file".into(),
            }]));
        }
        let mut dict = parse_file(path).map_err(|p| fail(vec![p]))?;
        let problems = Problems::default();
        env::apply_overrides(&mut dict, env, &problems);
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let config = read(&dict, base_dir, path, &problems);
        let problems = problems.into_vec();
        match config {
            Some(c) if problems.is_empty() => Ok(c),
            _ => Err(fail(problems)),
        }
    }
}

/// Every key path the reader asks for while reading the file at `path` (array indices dropped:
/// `pools.scaling.idle_count`), whether the file has it or not, and whatever problems it has.
/// A file with every table in it names every key; the book's reference is checked against it.
pub fn keys_asked(path: &Path) -> Result<std::collections::BTreeSet<String>, ConfigError> {
    let dict = parse_file(path).map_err(|p| ConfigError {
        source_name: path.display().to_string(),
        problems: vec![p],
    })?;
    let problems = Problems::default();
    let base_dir = path.parent().unwrap_or(Path::new("."));
    read(&dict, base_dir, path, &problems);
    Ok(problems.into_asked())
}

/// The file's TOML as a table, or the one problem that it is not valid TOML.
fn parse_file(path: &Path) -> Result<Dict, Problem> {
    match Figment::from(Toml::file_exact(path)).extract::<Value>() {
        Ok(Value::Dict(_, d)) => Ok(d),
        Ok(_) => Ok(Dict::new()),
        Err(e) => Err(Problem {
            path: "(file)".into(),
            message: format!("is not valid TOML: {}", e.kind),
        }),
    }
}

/// A secret given inline (`key`) or in a file (`key_file`, first line, trimmed). Inline secrets
/// are allowed because environment overrides are the usual way to inject them.
pub(super) fn read_secret(
    s: &Section<'_>,
    key: &str,
    base_dir: &Path,
    required: bool,
) -> Option<Secret> {
    let file_key = format!("{key}_file");
    let inline: Option<String> = s.optional(key);
    let file: Option<PathBuf> = s.optional(&file_key);
    let value = match (inline, file) {
        (Some(_), Some(_)) => {
            s.problem(key, format!("give either {key} or {file_key}, not both"));
            return None;
        }
        (Some(v), None) => v,
        (None, Some(f)) => {
            let path = resolve(base_dir, f);
            match std::fs::read_to_string(&path) {
                Ok(text) => text.lines().next().unwrap_or("").trim().to_string(),
                Err(e) => {
                    s.problem(&file_key, format!("cannot read {}: {e}", path.display()));
                    return None;
                }
            }
        }
        (None, None) => {
            if required {
                s.problem(key, format!("is required (or {file_key})"));
            }
            return None;
        }
    };
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        s.problem(key, "must be a non-empty token without spaces");
        return None;
    }
    Some(Secret::new(value))
}

pub(super) fn resolve(base_dir: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() { p } else { base_dir.join(p) }
}

#[cfg(test)]
mod tests;
