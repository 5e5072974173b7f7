//! Request parameters the way Grape (on Rack) collects them (runner-protocol.md §1): the query
//! string, with the body merged over it when it is a JSON object, an
//! `application/x-www-form-urlencoded` form or `multipart/form-data` (its text parts). Rack's
//! key rules: `a[b]=1` nests, `a[]=1` appends to a list, a plain key given twice keeps the last.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::header_str;

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Params(pub(crate) Map<String, Value>);

/// Grape's `400` for a parameter error: `{"error": "..."}`.
pub(crate) fn invalid(text: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": text }))).into_response()
}

/// A body that does not parse as its type, or a parameter of the wrong type: both are Grape's
/// `400 {"error": ...}`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ParamError {
    #[error("{0}")]
    Malformed(String),
    #[error("{0} is invalid")]
    Invalid(String),
}

impl IntoResponse for ParamError {
    fn into_response(self) -> Response {
        invalid(&self.to_string())
    }
}

pub(crate) fn media_type(headers: &HeaderMap) -> Option<String> {
    header_str(headers, header::CONTENT_TYPE).map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

impl Params {
    pub(crate) fn from_query(query: Option<&str>) -> Self {
        let mut params = Self::default();
        if let Some(query) = query {
            params.merge_form(query.as_bytes());
        }
        params
    }

    /// Query, then body. A body that does not parse as its declared type is Grape's `400`.
    pub(crate) async fn parse(
        query: Option<&str>,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<Self, ParamError> {
        let mut params = Self::from_query(query);
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(params);
        }
        let json_like = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        match media_type(headers).as_deref() {
            Some(m) if m == "application/json" || m.ends_with("+json") => {
                params.merge_json(body)?
            }
            Some("application/x-www-form-urlencoded") => params.merge_form(body),
            Some("multipart/form-data") => {
                let content_type = header_str(headers, header::CONTENT_TYPE).unwrap_or_default();
                params.merge_multipart(content_type, body.clone()).await?;
            }
            None if json_like => params.merge_json(body)?,
            None => params.merge_form(body),
            Some(_) if json_like => params.merge_json(body)?,
            Some(_) => {}
        }
        Ok(params)
    }

    fn merge_json(&mut self, body: &[u8]) -> Result<(), ParamError> {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => {
                self.0.extend(map);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(ParamError::Malformed(e.to_string())),
        }
    }

    fn merge_form(&mut self, body: &[u8]) {
        for (key, value) in url::form_urlencoded::parse(body) {
            self.insert(&key, Value::String(value.into_owned()));
        }
    }

    async fn merge_multipart(&mut self, content_type: &str, body: Bytes) -> Result<(), ParamError> {
        let malformed = |e: multer::Error| ParamError::Malformed(e.to_string());
        let boundary = multer::parse_boundary(content_type).map_err(malformed)?;
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
        let mut multipart = multer::Multipart::new(stream, boundary);
        while let Some(field) = multipart.next_field().await.map_err(malformed)? {
            let name = field.name().map(str::to_owned);
            let is_file = field.file_name().is_some();
            let text = field.text().await.map_err(malformed)?;
            if let Some(name) = name.filter(|_| !is_file) {
                self.insert(&name, Value::String(text));
            }
        }
        Ok(())
    }

    /// Adds one `key=value` pair with Rack's nesting rules.
    pub(crate) fn insert(&mut self, key: &str, value: Value) {
        let (head, mut rest) = match key.find('[') {
            Some(i) if i > 0 => (&key[..i], &key[i..]),
            _ => (key, ""),
        };
        let mut path = Vec::new();
        while let Some(inner) = rest.strip_prefix('[') {
            let Some(end) = inner.find(']') else { break };
            path.push(&inner[..end]);
            rest = &inner[end + 1..];
        }
        let slot = self.0.entry(head.to_owned()).or_insert(Value::Null);
        place(slot, &path, value);
    }

    /// A string parameter (a number reads as its digits); empty counts as absent.
    pub(crate) fn string(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// A parameter declared `type: Hash`: `Err` (Grape's "is invalid") for anything else.
    pub(crate) fn hash(&self, name: &str) -> Result<Option<Value>, ParamError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
            Some(_) => Err(ParamError::Invalid(name.to_owned())),
        }
    }

    /// A `Boolean` parameter with the spellings Grape's coercion accepts.
    pub(crate) fn boolean(&self, name: &str) -> Result<Option<bool>, String> {
        let invalid = || format!("{name} is invalid");
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(0) => Ok(Some(false)),
                Some(1) => Ok(Some(true)),
                _ => Err(invalid()),
            },
            Some(Value::String(s)) => {
                let lower = s.to_ascii_lowercase();
                match lower.as_str() {
                    "1" | "on" | "t" | "true" | "y" | "yes" => Ok(Some(true)),
                    "0" | "off" | "f" | "false" | "n" | "no" => Ok(Some(false)),
                    _ => Err(invalid()),
                }
            }
            Some(_) => Err(invalid()),
        }
    }

    /// GitLab's `tag_list`: a list, or a comma-separated string (or a list of those).
    pub(crate) fn list(&self, name: &str) -> Result<Vec<String>, String> {
        fn split(s: &str) -> impl Iterator<Item = String> + '_ {
            s.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        }
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(split(s).collect()),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for item in items {
                    let Value::String(s) = item else {
                        return Err(format!("{name} is invalid"));
                    };
                    out.extend(split(s));
                }
                Ok(out)
            }
            Some(_) => Err(format!("{name} is invalid")),
        }
    }
}

fn place(slot: &mut Value, path: &[&str], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *slot = value;
        return;
    };
    if first.is_empty() {
        if !slot.is_array() {
            *slot = Value::Array(Vec::new());
        }
        if let Value::Array(items) = slot {
            let mut item = Value::Null;
            place(&mut item, rest, value);
            items.push(item);
        }
        return;
    }
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(map) = slot {
        place(
            map.entry((*first).to_owned()).or_insert(Value::Null),
            rest,
            value,
        );
    }
}

/// The job token as GitLab's runner API finds it: parameter `token`, then the `JOB-TOKEN`
/// header; `job_token` (the query parameter of GitLab's other APIs) is taken too.
pub(crate) fn job_token(params: &Params, headers: &HeaderMap) -> Option<String> {
    params
        .string("token")
        .or_else(|| header_str(headers, super::JOB_TOKEN).map(str::to_owned))
        .or_else(|| params.string("job_token"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rack_keys() {
        let mut p = Params::default();
        p.merge_form(b"tag_list=a&tag_list=b&x[]=1&x[]=2&info[features][shared]=true");
        assert_eq!(p.list("tag_list").unwrap(), vec!["b"]);
        assert_eq!(p.0["x"], json!(["1", "2"]));
        assert_eq!(p.0["info"], json!({"features": {"shared": "true"}}));
        assert_eq!(p.boolean("nope"), Ok(None));
    }
}
