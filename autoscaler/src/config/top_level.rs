//! The top-level tables of the file (`[server]`, `[state]`, `[upstream]`, `[log]`, `[ssh]`,
//! `[admin]`, `[[pools]]`) read into a `Config`, with the checks that span pools. Each reader
//! reports its problems and fills in defaults, so that one pass finds every problem.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::value::Dict;

use super::instance;
use super::reader::{Problems, Section};
use super::{
    AdminConfig, Config, LogConfig, LogFormat, PoolConfig, ServerConfig, SshConfig, StateConfig,
    UpstreamConfig, connections, pool, read_secret, resolve, tls, values,
};

pub(super) fn read(
    dict: &Dict,
    base_dir: &Path,
    file: &Path,
    problems: &Problems,
) -> Option<Config> {
    let root = Section::root(dict, problems);
    let server = read_server(root.table("server"), base_dir, problems);
    let state = read_state(root.table("state"), base_dir, &root);
    let server = server.map(|mut server| {
        let written = dict
            .get("server")
            .and_then(|v| v.as_dict())
            .is_some_and(|d| d.contains_key("instance_id"));
        if let Some(state) = &state {
            server.instance_id =
                instance::effective(&state.dir, server.instance_id, written, &root);
        }
        server
    });
    let upstream = read_upstream(root.table("upstream"), base_dir, &root);
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
        let book_dir = t
            .optional::<PathBuf>("book_dir")
            .map(|p| resolve(base_dir, p));
        if let Some(dir) = &book_dir
            && !dir.join("index.html").is_file()
        {
            t.problem(
                "book_dir",
                format!(
                    "{} holds no index.html: point it at the directory `cargo xtask docs` writes (target/book)",
                    dir.display()
                ),
            );
        }
        t.finish();
        Some(AdminConfig {
            listen,
            token,
            book_dir,
        })
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
/// rebuilt autoscaler are still recognised as its own). The id a state directory recorded wins
/// over it (`instance.rs`), so that a renamed host or a moved directory keeps its machines.
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

fn read_upstream(
    s: Option<Section<'_>>,
    base_dir: &Path,
    root: &Section<'_>,
) -> Option<UpstreamConfig> {
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
    let api_token = read_secret(&s, "api_token", base_dir, false);
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
        api_token,
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
