//! Which runner features a pool advertises to GitLab.
//!
//! GitLab drops a job as `runner_unsupported` when the runner that took it lacks a feature the
//! job needs, and it decides graceful cancellation and two-phase acceptance from the features the
//! runner advertised (runner-protocol.md §3.1). The autoscaler takes jobs on behalf of every sidecar of
//! a pool, so it advertises only what all of them support: a job taken for one sidecar can then
//! run on any other.

use serde_json::{Map, Value};

/// What the built-in sidecar implements (`sidecar::protocol::Features::sidecar`; a test keeps
/// the two equal): no cache, no secrets, no images or services.
const BUILTIN: &[&str] = &[
    "variables",
    "artifacts",
    "shared",
    "upload_multiple_artifacts",
    "upload_raw_artifacts",
    "refspecs",
    "masking",
    "raw_variables",
    "artifacts_exclude",
    "multi_build_steps",
    "trace_reset",
    "trace_checksum",
    "trace_size",
    "cancelable",
    "return_exit_code",
    "cancel_gracefully",
    "two_phase_job_commit",
];

/// What a current stock `gitlab-runner` (19.x) reports with a shell executor: the network
/// layer's features, and those its shells add (runner-protocol.md §3.1).
const STOCK_SHELL: &[&str] = &[
    "variables",
    "artifacts",
    "cache",
    "fallback_cache_keys",
    "shared",
    "upload_multiple_artifacts",
    "upload_raw_artifacts",
    "session",
    "terminal",
    "refspecs",
    "masking",
    "raw_variables",
    "artifacts_exclude",
    "multi_build_steps",
    "trace_reset",
    "trace_checksum",
    "trace_size",
    "vault_secrets",
    "cancelable",
    "return_exit_code",
    "cancel_gracefully",
    "two_phase_job_commit",
    "job_inputs",
];

/// What the container executors (`docker`, `docker-autoscaler`, `kubernetes`, ...) add.
const STOCK_CONTAINER: &[&str] = &[
    "image",
    "services",
    "service_variables",
    "service_multiple_aliases",
    "image_executor_opts",
    "service_executor_opts",
];

/// The runner a pool is configured to start, as far as its features go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfiguredRunner<'a> {
    Builtin,
    /// Stock `gitlab-runner` with this executor (also assumed for `command` pools, which
    /// usually start a gitlab-runner-compatible runner).
    Stock {
        executor: &'a str,
    },
}

/// The features a pool advertises before any of its sidecars has described itself: those of
/// the runner it is configured to start, so that GitLab drops no job that runner could run.
/// Replaced by what the live sidecars report as soon as one polls.
pub fn configured_features(runner: ConfiguredRunner<'_>) -> Map<String, Value> {
    let names: Vec<&str> = match runner {
        ConfiguredRunner::Builtin => BUILTIN.to_vec(),
        ConfiguredRunner::Stock { executor } if executor == "shell" || executor == "ssh" => {
            STOCK_SHELL.to_vec()
        }
        ConfiguredRunner::Stock { .. } => [STOCK_SHELL, STOCK_CONTAINER].concat(),
    };
    names
        .into_iter()
        .map(|name| (name.to_string(), Value::Bool(true)))
        .collect()
}

/// The features present and `true` in every one of `sidecars`, as a complete map over every key
/// any of them mentioned (absent keys are `false`). `None` when there is no sidecar to speak for.
pub fn common_features<'a>(
    sidecars: impl IntoIterator<Item = &'a Map<String, Value>>,
) -> Option<Map<String, Value>> {
    let mut iter = sidecars.into_iter();
    let first = iter.next()?;
    let mut common: Map<String, Value> = first
        .iter()
        .map(|(k, v)| (k.clone(), Value::Bool(v.as_bool().unwrap_or(false))))
        .collect();
    for other in iter {
        for (key, value) in common.iter_mut() {
            let theirs = other.get(key).and_then(Value::as_bool).unwrap_or(false);
            if !theirs {
                *value = Value::Bool(false);
            }
        }
        for key in other.keys() {
            common.entry(key.clone()).or_insert(Value::Bool(false));
        }
    }
    Some(common)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_features_are_what_the_sidecar_reports() {
        let reported = serde_json::to_value(sidecar::protocol::Features::sidecar()).unwrap();
        let reported: Map<String, Value> = reported
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.as_bool() == Some(true))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(configured_features(ConfiguredRunner::Builtin), reported);
    }

    #[test]
    fn a_stock_runner_pool_keeps_the_features_gitlab_checks() {
        for executor in ["shell", "docker"] {
            let features = configured_features(ConfiguredRunner::Stock { executor });
            for checked in [
                "upload_multiple_artifacts",
                "refspecs",
                "artifacts_exclude",
                "multi_build_steps",
                "return_exit_code",
                "fallback_cache_keys",
                "vault_secrets",
            ] {
                assert_eq!(
                    features.get(checked),
                    Some(&Value::Bool(true)),
                    "{executor} {checked}"
                );
            }
        }
        let docker = configured_features(ConfiguredRunner::Stock { executor: "docker" });
        assert_eq!(docker.get("image"), Some(&Value::Bool(true)));
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn intersection_over_all_sidecars() {
        let a = map(json!({"artifacts": true, "cancel_gracefully": true, "image": false}));
        let b = map(json!({"artifacts": true, "cancel_gracefully": false, "refspecs": true}));
        let c = common_features([&a, &b]).unwrap();
        assert_eq!(
            Value::Object(c),
            json!({"artifacts": true, "cancel_gracefully": false, "image": false, "refspecs": false})
        );
    }

    #[test]
    fn one_sidecar_is_taken_as_is_and_none_gives_none() {
        let a = map(json!({"artifacts": true, "odd": "yes"}));
        assert_eq!(
            Value::Object(common_features([&a]).unwrap()),
            json!({"artifacts": true, "odd": false})
        );
        assert!(common_features(std::iter::empty()).is_none());
    }
}
