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

/// What stock `gitlab-runner` reports whatever its executor: its network layer's features
/// (`network/gitlab.go`, v19.3.0) and those of its shells (`shells/abstract.go`).
const STOCK_COMMON: &[&str] = &[
    "trace_reset",
    "trace_checksum",
    "trace_size",
    "cancelable",
    "cancel_gracefully",
    "two_phase_job_commit",
    "job_inputs",
    "artifacts",
    "upload_multiple_artifacts",
    "upload_raw_artifacts",
    "cache",
    "fallback_cache_keys",
    "refspecs",
    "masking",
    "raw_variables",
    "artifacts_exclude",
    "multi_build_steps",
    "vault_secrets",
    "return_exit_code",
];

/// What each executor of stock `gitlab-runner` v19.3.0 adds, from its features updater
/// (`executors/<name>/...`, cited in runner-protocol.md §3.1). `docker+machine` and
/// `docker-autoscaler` run the `docker` executor's updater; `docker-windows` is
/// [`added_by`]'s.
const STOCK_EXECUTORS: &[(&str, &[&str])] = &[
    (
        "shell",
        &[
            "variables",
            "shared",
            "session",
            "terminal",
            "native_steps_integration",
        ],
    ),
    ("ssh", &["variables", "shared"]),
    (
        "instance",
        &["variables", "shared", "native_steps_integration"],
    ),
    ("custom", &["variables", "shared", "service_variables"]),
    ("virtualbox", &["variables"]),
    ("parallels", &["variables"]),
    ("docker", DOCKER),
    ("docker+machine", DOCKER),
    ("docker-autoscaler", DOCKER),
    (
        "kubernetes",
        &[
            "image",
            "image_executor_opts",
            "proxy",
            "service_multiple_aliases",
            "service_variables",
            "services",
            "session",
            "terminal",
            "variables",
            "native_steps_integration",
        ],
    ),
];

/// `executors/docker/docker_command.go` `dockerFeaturesUpdater`.
const DOCKER: &[&str] = &[
    "image",
    "image_executor_opts",
    "native_steps_integration",
    "service_executor_opts",
    "service_multiple_aliases",
    "service_variables",
    "services",
    "session",
    "terminal",
    "variables",
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
        ConfiguredRunner::Stock { executor } => {
            // An executor this list does not know: every feature any of them adds, so that
            // GitLab drops no job it might run (its own report replaces this at its first poll).
            let added = added_by(executor).unwrap_or_else(|| {
                STOCK_EXECUTORS
                    .iter()
                    .flat_map(|(_, f)| f.iter().copied())
                    .collect()
            });
            [STOCK_COMMON.to_vec(), added].concat()
        }
    };
    names
        .into_iter()
        .map(|name| (name.to_string(), Value::Bool(true)))
        .collect()
}

/// What stock `gitlab-runner` with `executor` adds to [`STOCK_COMMON`]; `None` for an executor
/// it does not have.
fn added_by(executor: &str) -> Option<Vec<&'static str>> {
    if executor == "docker-windows" {
        // Its Windows provider runs docker's updater, then turns native steps off again
        // (`executors/docker/docker_command.go:482-485`).
        return Some(
            DOCKER
                .iter()
                .copied()
                .filter(|&f| f != "native_steps_integration")
                .collect(),
        );
    }
    STOCK_EXECUTORS
        .iter()
        .find(|(name, _)| *name == executor)
        .map(|(_, features)| features.to_vec())
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

    fn names(features: &Map<String, Value>) -> Vec<&str> {
        let mut names: Vec<&str> = features.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The keys a v19.3.0 runner with the shell executor on Linux sends `true`: its network
    /// layer's, its shells' and the shell executor's (native steps since v19.3.0).
    #[test]
    fn a_shell_pool_advertises_what_a_stock_shell_runner_sends() {
        let shell = configured_features(ConfiguredRunner::Stock { executor: "shell" });
        let mut expected = vec![
            "artifacts",
            "artifacts_exclude",
            "cache",
            "cancel_gracefully",
            "cancelable",
            "fallback_cache_keys",
            "job_inputs",
            "masking",
            "multi_build_steps",
            "native_steps_integration",
            "raw_variables",
            "refspecs",
            "return_exit_code",
            "session",
            "shared",
            "terminal",
            "trace_checksum",
            "trace_reset",
            "trace_size",
            "two_phase_job_commit",
            "upload_multiple_artifacts",
            "upload_raw_artifacts",
            "variables",
            "vault_secrets",
        ];
        expected.sort_unstable();
        assert_eq!(names(&shell), expected);
    }

    #[test]
    fn each_executor_adds_its_own_and_an_unknown_one_gets_them_all() {
        let docker = configured_features(ConfiguredRunner::Stock { executor: "docker" });
        assert!(
            !docker.contains_key("shared"),
            "docker's updater sets no `shared`"
        );
        assert!(docker.contains_key("services"));
        let autoscaled = configured_features(ConfiguredRunner::Stock {
            executor: "docker-autoscaler",
        });
        assert_eq!(names(&autoscaled), names(&docker));
        let windows = configured_features(ConfiguredRunner::Stock {
            executor: "docker-windows",
        });
        assert!(!windows.contains_key("native_steps_integration"));
        let ssh = configured_features(ConfiguredRunner::Stock { executor: "ssh" });
        assert!(!ssh.contains_key("session") && ssh.contains_key("shared"));
        let unknown = configured_features(ConfiguredRunner::Stock {
            executor: "someday",
        });
        for key in ["proxy", "services", "shared", "native_steps_integration"] {
            assert!(unknown.contains_key(key), "{key}");
        }
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
