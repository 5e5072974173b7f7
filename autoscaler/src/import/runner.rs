//! One `[[runners]]` entry that autoscales, as one `[[pools]]` entry: its identity, its
//! sidecar (a stock `gitlab-runner` on each machine with the entry's job settings), and its
//! machines (taskscaler or docker+machine).

use toml::{Table, Value};

use super::source::Source;
use super::{Options, Pool, Report, machine, taskscaler};

/// Keys of a `[[runners]]` entry that say how jobs run: they go into the sidecar runner's own
/// entry on each machine (`executor_config`), unchanged.
const JOB_SETTINGS: &[&str] = &[
    "environment",
    "shell",
    "clone_url",
    "output_limit",
    "pre_get_sources_script",
    "post_get_sources_script",
    "pre_build_script",
    "post_build_script",
    "debug_trace_disabled",
    "unhealthy_requests_limit",
    "unhealthy_interval",
    "job_status_final_update_retry_limit",
    "docker",
    "cache",
    "custom_build_dir",
    "feature_flags",
];

/// `None` when the entry does not autoscale.
pub(super) fn convert(
    entry: &Source<'_>,
    options: &Options,
    names: &mut Vec<String>,
    report: &mut Report,
) -> Option<Pool> {
    let executor = entry.str("executor").unwrap_or_default();
    let mut pool = Table::new();
    if let Some(autoscaler) = entry.table("autoscaler") {
        taskscaler::convert(&autoscaler, entry, options, &mut pool, report);
    } else if let Some(machine) = entry.table("machine") {
        machine::convert(&machine, entry, options, &mut pool, report);
    } else {
        return None;
    }
    let name = pool_name(entry.str("name").unwrap_or("pool"), names);
    let mut identity = Table::new();
    identity.insert("name".into(), name.into());
    match entry.str("token") {
        Some(token) => {
            identity.insert("upstream_token".into(), token.into());
        }
        None => report.check(
            entry.key_path("token"),
            "the runner has no token: set upstream_token (or AUTOSCALER_POOLS__<NAME>__UPSTREAM_TOKEN)",
        ),
    }
    if let Some(n) = entry.int("request_concurrency") {
        identity.insert(
            "request_concurrency".into(),
            Value::Integer(n.clamp(1, 256)),
        );
    }
    // The identity keys first, as a person would write them.
    identity.extend(pool);
    let mut pool = identity;
    let mut sidecar_table = match pool.remove("sidecar") {
        Some(Value::Table(t)) => t,
        _ => Table::new(),
    };
    sidecar_table.extend(sidecar(entry, executor));
    pool.insert("sidecar".into(), Value::Table(sidecar_table));
    for key in ["id", "token_obtained_at", "token_expires_at"] {
        entry.get(key);
    }
    entry.drop(
        "builds_dir",
        "the sidecar keeps builds in its own directory on each machine",
        &mut report.not_carried,
    );
    entry.drop(
        "cache_dir",
        "the sidecar keeps its cache in its own directory on each machine",
        &mut report.not_carried,
    );
    let url = entry.str("url").map(str::to_string);
    entry.rest(
        "a setting of the runner manager with no equivalent here",
        &mut report.not_carried,
    );
    Some(Pool { table: pool, url })
}

/// A name the configuration takes (`a-z 0-9 - _`), unique among the pools.
fn pool_name(runner_name: &str, taken: &mut Vec<String>) -> String {
    let mut name: String = runner_name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    // `docker autoscaler (AWS)` → `docker-autoscaler-aws`.
    while name.contains("--") {
        name = name.replace("--", "-");
    }
    name = name.trim_matches('-').to_string();
    if name.is_empty() {
        name = "pool".into();
    }
    let base = name.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    taken.push(name.clone());
    name
}

/// A stock `gitlab-runner` on each machine, running jobs there as the manager's executor did
/// on its instances: Docker for `docker-autoscaler` and `docker+machine`, the shell for
/// `instance`.
fn sidecar(entry: &Source<'_>, executor: &str) -> Table {
    let mut sidecar = Table::new();
    sidecar.insert("mode".into(), "gitlab-runner".into());
    let local = if executor == "instance" {
        "shell"
    } else {
        "docker"
    };
    sidecar.insert("executor".into(), local.into());
    let lines = job_settings(entry);
    if !lines.is_empty() {
        sidecar.insert("executor_config".into(), lines.into());
    }
    sidecar
}

/// The entry's job settings as TOML lines of a `[[runners]]` entry: plain keys, then tables.
fn job_settings(entry: &Source<'_>) -> String {
    let mut plain = String::new();
    let mut tables = String::new();
    for key in JOB_SETTINGS {
        match entry.get(key) {
            Some(Value::Table(t)) => {
                let mut runners = Table::new();
                runners.insert((*key).to_string(), Value::Table(t.clone()));
                let mut wrapper = Table::new();
                wrapper.insert("runners".into(), Value::Table(runners));
                let text = toml::to_string(&wrapper).expect("a TOML table serialises");
                tables.push_str(&text);
            }
            Some(value) => plain.push_str(&format!("{key} = {value}\n")),
            None => {}
        }
    }
    plain + &tables
}
