//! An OpenAPI 3.1 document of `api-spec/`, used to judge recorded answers: the route and method
//! exist, the status is listed, the content type is one listed for that status, and a JSON body
//! validates (JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the listed schema.

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use yaml_rust2::{Yaml, YamlLoader};

use crate::recording::Recorded;
use crate::stack::repo_root;

/// A spec, with the validators built so far, by the JSON pointer of their schema.
pub struct Spec {
    name: String,
    doc: Value,
    validators: Mutex<HashMap<String, jsonschema::Validator>>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec").field("name", &self.name).finish()
    }
}

impl Spec {
    /// `api-spec/<file>`.
    pub fn load(file: &str) -> Result<Self> {
        let path = repo_root().join("api-spec").join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let docs = YamlLoader::load_from_str(&text).with_context(|| format!("{file} is YAML"))?;
        let doc = docs.first().context("an empty document")?;
        Ok(Self {
            name: file.to_string(),
            doc: to_json(doc)?,
            validators: Mutex::default(),
        })
    }

    /// What is wrong with `answer` by the spec, as `METHOD path (route) status: problem`.
    pub fn check(&self, answer: &Recorded) -> Result<(), String> {
        let at = |route: &str, problem: String| {
            format!(
                "{} {} ({} {route}) {}: {problem}",
                answer.method, answer.path, self.name, answer.status
            )
        };
        let Some((route, item)) = self.route(&answer.path) else {
            return Err(at("?", "no path of the spec matches".into()));
        };
        let method = answer.method.to_ascii_lowercase();
        let Some(responses) = item.get(&method).and_then(|op| op.get("responses")) else {
            return Err(at(&route, format!("the spec has no {method} operation")));
        };
        let Some(listed) = responses.get(answer.status.to_string()) else {
            return Err(at(&route, "status not listed".into()));
        };
        let base = format!(
            "/paths/{}/{method}/responses/{}",
            escape(&route),
            answer.status
        );
        let (pointer, response) = self.follow(&base, listed);
        self.check_body(&pointer, response, answer)
            .map_err(|problem| at(&route, problem))
    }

    fn check_body(&self, pointer: &str, response: &Value, answer: &Recorded) -> Result<(), String> {
        let content = response.get("content").and_then(Value::as_object);
        let Some(content_type) = answer.content_type.as_deref() else {
            return match (content, answer.body.is_empty()) {
                (_, true) => Ok(()),
                (_, false) => Err("a body without a content type".into()),
            };
        };
        let Some(content) = content else {
            if answer.body.is_empty() {
                return Ok(());
            }
            return Err(format!("a {content_type} body where the spec lists none"));
        };
        let essence = essence(content_type);
        let Some(media) = content
            .keys()
            .find(|listed| media_matches(listed, &essence))
        else {
            return Err(format!(
                "content type {content_type} not among {:?}",
                content.keys().collect::<Vec<_>>()
            ));
        };
        let is_json = essence == "application/json" || essence.ends_with("+json");
        if !is_json || content[media].get("schema").is_none() {
            return Ok(());
        }
        let body: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("{content_type} body is not JSON: {e}"))?;
        let schema = format!("{pointer}/content/{}/schema", escape(media));
        self.validate(&schema, &body)
    }

    fn validate(&self, schema_pointer: &str, body: &Value) -> Result<(), String> {
        let mut validators = self
            .validators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !validators.contains_key(schema_pointer) {
            // The whole document is the schema's resource, so that its `$ref`s to
            // `#/components/schemas/...` resolve; its own keys are no schema keywords. The schema
            // itself is copied under `$defs` (a pointer into `paths` would need URI escaping).
            let schema = self
                .doc
                .pointer(schema_pointer)
                .cloned()
                .ok_or_else(|| format!("no schema at {schema_pointer}"))?;
            let mut root = self.doc.clone();
            root["$defs"] = json!({ "answer": schema });
            root["$ref"] = json!("#/$defs/answer");
            root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .build(&root)
                .map_err(|e| {
                    format!("the spec's schema at {schema_pointer} does not build: {e}")
                })?;
            validators.insert(schema_pointer.to_string(), validator);
        }
        let errors: Vec<String> = validators[schema_pointer]
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "body does not match {schema_pointer}: {}; body {}",
                errors.join("; "),
                abbreviated(body)
            ))
        }
    }

    /// The spec's path template for a request's path.
    pub fn route_of(&self, path: &str) -> Option<String> {
        self.route(path).map(|(template, _)| template)
    }

    /// The path template matching `path` (with the spec's server path before it) and its item,
    /// literal segments preferred over parameters.
    fn route(&self, path: &str) -> Option<(String, &Value)> {
        let paths = self.doc.get("paths")?.as_object()?;
        let global = server_path(self.doc.get("servers"));
        let asked: Vec<&str> = segments(path);
        paths
            .iter()
            .filter_map(|(template, item)| {
                let prefix = item
                    .get("servers")
                    .map_or_else(|| global.clone(), |s| server_path(Some(s)));
                let full = format!("{prefix}{template}");
                let wanted = segments(&full);
                let literal = matching_literals(&wanted, &asked)?;
                Some((literal, template.clone(), item))
            })
            .max_by_key(|(literal, _, _)| *literal)
            .map(|(_, template, item)| (template, item))
    }

    /// A response object, or the one its `$ref` names, with its JSON pointer.
    fn follow<'a>(&'a self, pointer: &str, response: &'a Value) -> (String, &'a Value) {
        match response.get("$ref").and_then(Value::as_str) {
            Some(target) => {
                let target = target.trim_start_matches('#');
                match self.doc.pointer(target) {
                    Some(found) => (target.to_string(), found),
                    None => (pointer.to_string(), response),
                }
            }
            None => (pointer.to_string(), response),
        }
    }
}

/// How many segments are literal when `wanted` (a template) matches `asked`; `None` when not.
fn matching_literals(wanted: &[&str], asked: &[&str]) -> Option<usize> {
    if wanted.len() != asked.len() {
        return None;
    }
    let mut literal = 0;
    for (w, a) in wanted.iter().zip(asked) {
        if w.starts_with('{') && w.ends_with('}') {
            continue;
        }
        if w != a {
            return None;
        }
        literal += 1;
    }
    Some(literal)
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// The path part of a `servers` entry's URL: after its `{variable}` or its host.
fn server_path(servers: Option<&Value>) -> String {
    let url = servers
        .and_then(|s| s.get(0))
        .and_then(|s| s.get("url"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let rest = match url.strip_prefix('{') {
        Some(templated) => templated.split_once('}').map_or("", |(_, rest)| rest),
        None => url
            .split_once("://")
            .map_or(url, |(_, r)| r.find('/').map_or("", |i| &r[i..])),
    };
    rest.trim_end_matches('/').to_string()
}

fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn media_matches(listed: &str, essence: &str) -> bool {
    match listed.split_once('/') {
        Some(("*", "*")) => true,
        Some((kind, "*")) => essence.split('/').next() == Some(kind),
        _ => listed.eq_ignore_ascii_case(essence),
    }
}

/// A JSON pointer token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn abbreviated(body: &Value) -> String {
    let text = body.to_string();
    match text.char_indices().nth(400) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

fn to_json(yaml: &Yaml) -> Result<Value> {
    Ok(match yaml {
        Yaml::Real(text) => json!(text.parse::<f64>().context("a YAML real")?),
        Yaml::Integer(n) => json!(n),
        Yaml::String(s) => json!(s),
        Yaml::Boolean(b) => json!(b),
        Yaml::Null => Value::Null,
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect::<Result<_>>()?),
        Yaml::Hash(hash) => {
            let mut object = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(n) => n.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => bail!("a YAML key that is no string: {other:?}"),
                };
                object.insert(key, to_json(value)?);
            }
            Value::Object(object)
        }
        other => bail!("a YAML node JSON cannot hold: {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(method: &str, path: &str, status: u16, content_type: &str, body: &str) -> Recorded {
        Recorded {
            method: method.into(),
            path: path.into(),
            status,
            content_type: Some(content_type.into()),
            body: body.to_string().into(),
        }
    }

    #[test]
    fn an_answer_is_held_to_its_route_status_content_type_and_schema() {
        let spec = Spec::load("runner-api.yaml").unwrap();
        let json = "application/json";
        let good = r#"{"id": 1, "token": "glrt-x", "token_expires_at": null}"#;
        assert_eq!(
            spec.check(&answer("POST", "/api/v4/runners/", 201, json, good)),
            Ok(())
        );
        let mistyped = r#"{"id": "1", "token": "glrt-x", "token_expires_at": null}"#;
        let e = spec
            .check(&answer("POST", "/api/v4/runners", 201, json, mistyped))
            .unwrap_err();
        assert!(e.contains("/runners") && e.contains("\"1\""), "{e}");
        let e = spec
            .check(&answer("POST", "/api/v4/runners", 200, json, good))
            .unwrap_err();
        assert!(e.contains("status not listed"), "{e}");
        let e = spec
            .check(&answer("POST", "/api/v4/runners", 201, "text/html", good))
            .unwrap_err();
        assert!(e.contains("content type text/html"), "{e}");
        let e = spec
            .check(&answer("GET", "/api/v4/nowhere", 200, json, good))
            .unwrap_err();
        assert!(e.contains("no path"), "{e}");
        let e = spec
            .check(&answer("PUT", "/api/v4/jobs/7", 403, json, "{}"))
            .unwrap_err();
        assert!(e.contains("/jobs/{id}"), "{e}");
    }
}
