//! `AUTOSCALER_` environment overrides.
//!
//! `AUTOSCALER_SERVER__LISTEN=0.0.0.0:8090` sets `server.listen`. Pools live in an array, so they
//! are addressed by name: `AUTOSCALER_POOLS__DEFAULT__UPSTREAM_TOKEN=glrt-...` sets
//! `upstream_token` of the pool named `default` (names are matched in lower case, `-` may be
//! written `_`). Values are parsed like TOML scalars (`8` is a number, `true` a boolean).
//!
//! Key paths are matched in lower case, but the names below an `env` table are environment
//! variables of a provisioner, kept as written:
//! `AUTOSCALER_POOLS__LINUX__PROVISIONER__ENV__AWS_REGION=eu-west-1`. The command line's own
//! variables (`AUTOSCALER_CONFIG`, the admin CLI's) share the prefix and are not overrides.

use std::str::FromStr;

use figment::value::{Dict, Tag, Value};

use super::reader::Problems;

const PREFIX: &str = "AUTOSCALER_";

/// Variables of the command line (`cli/`) that share the prefix: they choose the file or the
/// admin API, and are no configuration key.
const COMMAND_LINE_VARIABLES: &[&str] = &[
    "AUTOSCALER_CONFIG",
    "AUTOSCALER_ADMIN_URL",
    "AUTOSCALER_ADMIN_TOKEN_FILE",
];

pub fn apply_overrides(
    dict: &mut Dict,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &Problems,
) {
    for (key, raw) in env {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        if COMMAND_LINE_VARIABLES.contains(&key.as_str()) {
            continue;
        }
        let path = key_path(rest);
        if path.iter().any(String::is_empty) {
            problems.add(format!("env {key}"), "has an empty segment");
            continue;
        }
        let value = Value::from_str(&raw).unwrap_or_else(|_| Value::from(raw.clone()));
        if path[0] == "pools" {
            apply_pool_override(dict, &key, &path[1..], value, problems);
        } else {
            set(dict, &path, value);
        }
    }
}

/// `SERVER__LISTEN` → `["server", "listen"]`; segments below an `env` table keep their case.
fn key_path(rest: &str) -> Vec<String> {
    let mut below_env = false;
    rest.split("__")
        .map(|segment| {
            if below_env {
                return segment.to_string();
            }
            let lower = segment.to_ascii_lowercase();
            below_env = lower == "env";
            lower
        })
        .collect()
}

fn apply_pool_override(
    dict: &mut Dict,
    key: &str,
    path: &[String],
    value: Value,
    problems: &Problems,
) {
    let [name, field @ ..] = path else {
        problems.add(
            format!("env {key}"),
            "must name a pool and a key: AUTOSCALER_POOLS__<NAME>__<KEY>",
        );
        return;
    };
    if field.is_empty() {
        problems.add(format!("env {key}"), "must name a key after the pool name");
        return;
    }
    let Some(Value::Array(_, pools)) = dict.get_mut("pools") else {
        problems.add(
            format!("env {key}"),
            "there is no [[pools]] entry to override",
        );
        return;
    };
    let wanted = name.replace('_', "-");
    let pool = pools.iter_mut().find_map(|p| match p {
        Value::Dict(_, d) => {
            let matches = d
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n == name || n.replace('_', "-") == wanted);
            matches.then_some(d)
        }
        _ => None,
    });
    match pool {
        Some(d) => set(d, field, value),
        None => problems.add(format!("env {key}"), format!("no pool is named {name:?}")),
    }
}

fn set(dict: &mut Dict, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry(first.clone())
                .or_insert_with(|| Value::Dict(Tag::Default, Dict::new()));
            if !matches!(entry, Value::Dict(..)) {
                *entry = Value::Dict(Tag::Default, Dict::new());
            }
            if let Value::Dict(_, inner) = entry {
                set(inner, rest, value);
            }
        }
    }
}
