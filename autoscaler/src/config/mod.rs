//! Configuration: a TOML file plus `AUTOSCALER_` environment overrides (`__` separates nesting
//! levels; pools are addressed by name: `AUTOSCALER_POOLS__DEFAULT__REQUEST_CONCURRENCY=8`).
//!
//! Everything is validated before the service binds a port or touches its store, and every
//! problem is reported at once with its key path.

mod classes;
mod connections;
mod env;
mod job_user;
mod policy;
pub(crate) mod pool;
pub(crate) mod reader;
pub mod reload;
mod sources;
mod tls;
mod token_binding;
pub(crate) mod values;

use std::collections::HashSet;
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
pub use pool::{
    Intake, PolicyCell, PoolConfig, PoolPolicy, ProvisionerConfig, ScalingConfig, SidecarConfig,
    SidecarMode, SidecarStart,
};
pub use reader::Problem;
use reader::{Problems, Section};
pub use tls::{SYSTEM_CA_FILES, TlsConfig};
pub use token_binding::TokenBinding;

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
        let mut dict = match Figment::from(Toml::file_exact(path)).extract::<Value>() {
            Ok(Value::Dict(_, d)) => d,
            Ok(_) => Dict::new(),
            Err(e) => {
                return Err(fail(vec![Problem {
                    path: "(file)".into(),
                    message: format!("is not valid TOML: {}", e.kind),
                }]));
            }
        };
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

fn read(dict: &Dict, base_dir: &Path, file: &Path, problems: &Problems) -> Option<Config> {
    let root = Section::root(dict, problems);
    let server = read_server(root.table("server"), base_dir, problems);
    let state = read_state(root.table("state"), base_dir, &root);
    let upstream = read_upstream(root.table("upstream"), &root);
    let log = read_log(root.table("log"));
    let ssh = root.table("ssh").map(|t| {
        let key_file = t
            .optional::<PathBuf>("key_file")
            .map(|p| resolve(base_dir, p));
        t.finish();
        SshConfig { key_file }
    });
    let admin = root.table("admin").and_then(|t| {
        let listen: SocketAddr = t.or("listen", "127.0.0.1:8091".parse().ok()?);
        let token = read_secret(&t, "token", base_dir, false);
        if token.is_none() && !listen.ip().is_loopback() && !t.has("token_file") && !t.has("token") {
            t.problem(
                "token_file",
                "is required when listen is not a loopback address: the admin API can drain and destroy machines",
            );
        }
        t.finish();
        Some(AdminConfig { listen, token })
    });
    let pools: Vec<_> = root
        .tables("pools")
        .into_iter()
        .map(|s| pool::read_pool(s, base_dir))
        .collect();
    if pools.is_empty() && !root.has("pools") {
        root.problem("pools", "at least one [[pools]] entry is required");
    }
    check_pools_are_distinct(&pools, &root);
    root.finish();
    Some(Config {
        server: server?,
        state: state?,
        upstream: upstream?,
        log,
        ssh: ssh.unwrap_or_default(),
        admin,
        pools: pools.into_iter().collect::<Option<Vec<_>>>()?,
        file: file.to_path_buf(),
    })
}

fn read_server(
    s: Option<Section<'_>>,
    base_dir: &Path,
    problems: &Problems,
) -> Option<ServerConfig> {
    let empty = Dict::new();
    let s = s.unwrap_or_else(|| Section::root(&empty, problems));
    let listen: SocketAddr = s.or("listen", "127.0.0.1:8090".parse().ok()?);
    let public_url = s.parsed("public_url", values::http_url);
    if public_url.is_none() && listen.ip().is_unspecified() && !s.has("public_url") {
        s.problem(
            "public_url",
            "is required when listen is a wildcard address: sidecars need a reachable URL",
        );
    }
    let tls = s
        .table("tls")
        .and_then(|t| tls::read_tls(t, base_dir, problems));
    if s.has("tls") && public_url.as_ref().is_some_and(|u| u.scheme() != "https") {
        s.problem("public_url", "must be https:// when [server.tls] is set");
    }
    let long_poll_timeout = s
        .parsed("long_poll_timeout", values::duration)
        .unwrap_or(Duration::from_secs(50));
    if long_poll_timeout < Duration::from_secs(1) || long_poll_timeout > Duration::from_secs(300) {
        s.problem(
            "long_poll_timeout",
            "must be between 1s and 5m (runners wait at most 10 min for an answer)",
        );
    }
    let max_trace_patch_bytes = s
        .parsed("max_trace_patch_bytes", values::byte_size)
        .unwrap_or(1 << 20);
    let max_update_bytes = s
        .parsed("max_update_bytes", values::byte_size)
        .unwrap_or(1 << 20);
    let shutdown_grace = s
        .parsed("shutdown_grace", values::duration)
        .unwrap_or(Duration::from_secs(60));
    let instance_id: String = s
        .optional("instance_id")
        .unwrap_or_else(default_instance_id);
    if instance_id.is_empty()
        || instance_id.len() > 63
        || !instance_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        s.problem("instance_id", "must be 1-63 of A-Z a-z 0-9 - _ .");
    }
    let connections = connections::read_connection_limits(&s, long_poll_timeout);
    s.finish();
    Some(ServerConfig {
        listen,
        public_url,
        tls,
        long_poll_timeout,
        max_trace_patch_bytes,
        max_update_bytes,
        shutdown_grace,
        instance_id,
        connections,
    })
}

/// The host name, which survives the loss of the state directory (so that the machines of a
/// rebuilt autoscaler are still recognised as its own).
fn default_instance_id() -> String {
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    if clean.is_empty() {
        "autoscaler".into()
    } else {
        clean
    }
}

fn read_state(s: Option<Section<'_>>, base_dir: &Path, root: &Section<'_>) -> Option<StateConfig> {
    let Some(s) = s else {
        root.problem("state", "is required ([state] dir = \"...\")");
        return None;
    };
    let dir: Option<PathBuf> = s.required("dir");
    s.finish();
    Some(StateConfig {
        dir: resolve(base_dir, dir?),
    })
}

fn read_upstream(s: Option<Section<'_>>, root: &Section<'_>) -> Option<UpstreamConfig> {
    let Some(s) = s else {
        root.problem(
            "upstream",
            "is required ([upstream] url = \"https://gitlab.example.com\")",
        );
        return None;
    };
    if !s.has("url") {
        s.problem("url", "is required");
    }
    let url = s.parsed("url", values::http_url);
    let d = |key: &str, default: u64| {
        s.parsed(key, values::duration)
            .unwrap_or(Duration::from_secs(default))
    };
    let connect_timeout = d("connect_timeout", 10);
    let call_timeout = d("call_timeout", 60);
    let job_request_timeout = d("job_request_timeout", 90);
    let gitlab_long_poll = d("gitlab_long_poll", 50);
    // Room for GitLab's answer after Workhorse's hold ends.
    if job_request_timeout < gitlab_long_poll + Duration::from_secs(10) {
        s.problem(
            "job_request_timeout",
            format!(
                "must exceed gitlab_long_poll ({} s) by at least 10 s: a job GitLab assigns as a long poll ends would be cut off with the request",
                gitlab_long_poll.as_secs()
            ),
        );
    }
    let keepalive_interval = d("keepalive_interval", 30);
    if keepalive_interval < Duration::from_secs(1) || keepalive_interval > Duration::from_secs(90) {
        s.problem(
            "keepalive_interval",
            "must be between 1s and 90s (GitLab forgets a held job 2 minutes after its last keep-alive)",
        );
    }
    let artifact_timeout = d("artifact_timeout", 3600);
    let poll_interval = d("poll_interval", 3);
    s.finish();
    Some(UpstreamConfig {
        url: url?,
        connect_timeout,
        call_timeout,
        job_request_timeout,
        gitlab_long_poll,
        keepalive_interval,
        artifact_timeout,
        poll_interval,
    })
}

fn read_log(s: Option<Section<'_>>) -> LogConfig {
    let default = LogConfig {
        level: "info".into(),
        format: LogFormat::Text,
    };
    let Some(s) = s else { return default };
    let level: String = s.or("level", default.level);
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&level) {
        s.problem("level", format!("is not a valid filter ({e})"));
    }
    let format = s.or("format", LogFormat::Text);
    s.finish();
    LogConfig { level, format }
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

fn check_pools_are_distinct(pools: &[Option<PoolConfig>], root: &Section<'_>) {
    let mut names = HashSet::new();
    let mut upstream = HashSet::new();
    let mut registration = HashSet::new();
    for (i, pool) in pools.iter().enumerate() {
        let Some(p) = pool else { continue };
        let at = |key: &str| format!("[{i}].{key}");
        if !names.insert(p.name.clone()) {
            root.problem(
                "pools",
                format!("{}: pool name {:?} is used twice", at("name"), p.name),
            );
        }
        if !upstream.insert(p.upstream_token.digest()) {
            root.problem(
                "pools",
                format!(
                    "{}: two pools share one upstream token",
                    at("upstream_token")
                ),
            );
        }
        if let Some(r) = &p.registration_token
            && !registration.insert(r.digest())
        {
            root.problem(
                "pools",
                format!(
                    "{}: two pools share one registration token",
                    at("registration_token")
                ),
            );
        }
    }
}

pub(super) fn resolve(base_dir: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() { p } else { base_dir.join(p) }
}

#[cfg(test)]
mod tests;
