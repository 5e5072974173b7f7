//! Which runner features a pool advertises to GitLab.
//!
//! GitLab drops a job as `runner_unsupported` when the runner that took it lacks a feature the
//! job needs, and it decides graceful cancellation and two-phase acceptance from the features the
//! runner advertised (runner-protocol.md §3.1). The autoscaler takes jobs on behalf of every sidecar of
//! a pool, so it advertises only what all of them support: a job taken for one sidecar can then
//! run on any other.

use serde_json::{Map, Value};

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
