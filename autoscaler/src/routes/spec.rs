//! An OpenAPI document of `api-spec/` as the route tests read it: each operation (method and
//! path) and the statuses its responses list.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use axum::http::Method;
use yaml_rust2::{Yaml, YamlLoader};

use super::Route;

/// Method and path of one operation, the path as the spec writes it.
pub type Operation = (Method, String);

/// The operations of `api-spec/<file>` and the statuses each one lists.
pub fn operations(file: &str) -> BTreeMap<Operation, BTreeSet<u16>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../api-spec")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    let paths = docs[0]["paths"]
        .as_hash()
        .unwrap_or_else(|| panic!("{} has no paths", path.display()));
    let mut found = BTreeMap::new();
    for (path, item) in paths {
        let path = path.as_str().expect("paths are strings").to_string();
        for (method, operation) in item.as_hash().into_iter().flatten() {
            let Some(method) = method.as_str().and_then(http_method) else {
                continue; // `parameters`, `summary` … of the path item
            };
            found.insert((method, path.clone()), statuses(&operation["responses"]));
        }
    }
    found
}

fn http_method(name: &str) -> Option<Method> {
    match name {
        "get" | "put" | "post" | "delete" | "options" | "head" | "patch" | "trace" => {
            Method::from_bytes(name.to_ascii_uppercase().as_bytes()).ok()
        }
        _ => None,
    }
}

fn statuses(responses: &Yaml) -> BTreeSet<u16> {
    responses
        .as_hash()
        .into_iter()
        .flatten()
        .map(|(code, _)| match code {
            Yaml::String(s) => s.parse().expect("a status code"),
            Yaml::Integer(n) => u16::try_from(*n).expect("a status code"),
            other => panic!("{other:?} is not a status code"),
        })
        .collect()
}

/// The operations a router serves, with `prefix` (the spec's server path) taken off.
pub fn served(routes: &[Route], prefix: &str) -> BTreeSet<Operation> {
    routes
        .iter()
        .map(|r| {
            let path = r.path.strip_prefix(prefix).unwrap_or(r.path);
            // OpenAPI has no wildcard: axum's `{*page}` (the rest of the path) is `{page}`.
            (r.method.clone(), path.replace("{*", "{"))
        })
        .collect()
}

/// Fails with the routes missing from the spec and the operations no route serves.
pub fn assert_same(file: &str, served: &BTreeSet<Operation>) {
    let documented: BTreeSet<Operation> = operations(file).into_keys().collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "api-spec/{file} and the router differ: served but not in the spec {undocumented:?}; \
         in the spec but not served {unserved:?}"
    );
}
