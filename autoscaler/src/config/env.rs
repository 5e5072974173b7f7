//! `AUTOSCALER_` environment overrides.
//!
//! `AUTOSCALER_SERVER__LISTEN=0.0.0.0:8090` sets `server.listen`. Pools live in an array, so they
//! are addressed by name: `AUTOSCALER_POOLS__DEFAULT__UPSTREAM_TOKEN=glrt-...` sets
//! `upstream_token` of the pool named `default` (names are matched in lower case, `-` may be
//! written `_`). Values are parsed like TOML scalars (`8` is a number, `true` a boolean).

use std::str::FromStr;

use figment::value::{Dict, Tag, Value};

use super::reader::Problems;

const PREFIX: &str = "AUTOSCALER_";

pub fn apply_overrides(
    dict: &mut Dict,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &Problems,
) {
    for (key, raw) in env {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
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
