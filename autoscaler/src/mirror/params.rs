//! A request's parameters as GitLab's API framework (Grape on Rack) sees them
//! (runner-protocol.md §1): the query string, then the body merged over it, whatever its
//! encoding: a JSON object, `application/x-www-form-urlencoded` or `multipart/form-data`.
//! Form keys follow Rack's rules: `a[b]=1` nests, `a[]=1&a[]=2` makes a list, and a plain key
//! given twice keeps its last value.
//!
//! Every endpoint of the mirrored API reads its parameters through [`Params`], so that they
//! accept the same bodies and refuse the same mistakes as GitLab does.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};

use super::ApiError;
use super::body::header;

/// The merged parameters of one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Params(Map<String, Value>);

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamsError {
    /// Grape answers `400` when a body of a parsed type does not parse.
    #[error("message body does not match declared format: {0}")]
    Malformed(String),
    /// A parameter of the wrong type (`info` that is not a hash, `run_untagged=maybe`).
    #[error("{0}")]
    Invalid(String),
}

impl From<ParamsError> for ApiError {
    fn from(e: ParamsError) -> Self {
        ApiError::BadRequest(e.to_string())
    }
}

/// The media type of a `Content-Type` value, lower-cased, without its parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    header(headers, "content-type").map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

fn is_json(media: &str) -> bool {
    media == "application/json" || media.ends_with("+json")
}

impl Params {
    /// The query string's parameters alone (bodies that are not parameters: trace, uploads).
    pub fn from_query(query: Option<&str>) -> Result<Self, ParamsError> {
        let mut params = Params::default();
        if let Some(q) = query {
            params.merge_form(q.as_bytes())?;
        }
        Ok(params)
    }

    /// Query and body, the body winning on a name given in both (Rack merges in that order).
    pub async fn parse(
        query: Option<&str>,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<Self, ParamsError> {
        let mut params = Self::from_query(query)?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(params);
        }
        match media_type(headers).as_deref() {
            Some(m) if is_json(m) => params.merge_json(body)?,
            Some("application/x-www-form-urlencoded") => params.merge_form(body)?,
            Some("multipart/form-data") => {
                let content_type = header(headers, "content-type").unwrap_or_default();
                params.merge_multipart(content_type, body.clone()).await?;
            }
            // No type: Rack reads a POST body as a form. A JSON object is taken as well
            // (older clients of this API sent JSON without a type).
            None if looks_like_json(body) => params.merge_json(body)?,
            None => params.merge_form(body)?,
            // Other types are not parameters for Grape; a JSON object is still taken.
            Some(_) if looks_like_json(body) => params.merge_json(body)?,
            Some(_) => {}
        }
        Ok(params)
    }

    fn merge_json(&mut self, body: &[u8]) -> Result<(), ParamsError> {
        match serde_json::from_slice::<Value>(body) {
            // Grape merges a JSON object into the parameters; any other JSON value is kept as
            // the body only, so the parameters stay empty.
            Ok(Value::Object(map)) => {
                self.0.extend(map);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(ParamsError::Malformed(e.to_string())),
        }
    }

    fn merge_form(&mut self, body: &[u8]) -> Result<(), ParamsError> {
        for (key, value) in url::form_urlencoded::parse(body) {
            insert_nested(&mut self.0, &key, Value::String(value.into_owned()))?;
        }
        Ok(())
    }

    async fn merge_multipart(
        &mut self,
        content_type: &str,
        body: Bytes,
    ) -> Result<(), ParamsError> {
        let boundary = multer::parse_boundary(content_type)
            .map_err(|e| ParamsError::Malformed(e.to_string()))?;
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
        let mut multipart = multer::Multipart::new(stream, boundary);
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| ParamsError::Malformed(e.to_string()))?
        {
            let Some(name) = field.name().map(str::to_string) else {
                continue;
            };
            let is_file = field.file_name().is_some();
            let text = field
                .text()
                .await
                .map_err(|e| ParamsError::Malformed(e.to_string()))?;
            if !is_file {
                insert_nested(&mut self.0, &name, Value::String(text))?;
            }
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// A string parameter (numbers are read as Grape coerces them to `String`); empty is absent.
    pub fn string(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// `token`, as every runner endpoint names it.
    pub fn token(&self) -> Option<String> {
        self.string("token")
    }

    /// A `Hash` parameter: absent or null is fine, anything but an object is `invalid`.
    pub fn hash(&self, name: &str) -> Result<Option<&Map<String, Value>>, ParamsError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(ParamsError::Invalid(format!("{name} is invalid"))),
        }
    }

    /// A `Boolean` parameter, with the spellings Grape's coercion takes.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, ParamsError> {
        let invalid = || ParamsError::Invalid(format!("{name} is invalid"));
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(0) => Ok(Some(false)),
                Some(1) => Ok(Some(true)),
                _ => Err(invalid()),
            },
            Some(Value::String(s)) => match s.as_str() {
                "1" | "on" | "On" | "ON" | "t" | "true" | "True" | "TRUE" | "T" | "y" | "yes"
                | "Yes" | "YES" | "Y" => Ok(Some(true)),
                "0" | "off" | "Off" | "OFF" | "f" | "false" | "False" | "FALSE" | "F" | "n"
                | "no" | "No" | "NO" | "N" => Ok(Some(false)),
                _ => Err(invalid()),
            },
            Some(_) => Err(invalid()),
        }
    }

    /// `tag_list` as GitLab reads it: a list, or one comma-separated string.
    pub fn list(&self, name: &str) -> Result<Vec<String>, ParamsError> {
        let split = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        };
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(split(s)),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(split(s)),
                    _ => Err(ParamsError::Invalid(format!("{name} is invalid"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.concat()),
            Some(_) => Err(ParamsError::Invalid(format!("{name} is invalid"))),
        }
    }
}

fn looks_like_json(body: &[u8]) -> bool {
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

/// How deep a form key may nest (`a[b][c]` is 2). Rack refuses deeper keys (its
/// `param_depth_limit`, 32 since Rack 3.1) with `400`; here the limit also keeps a query of
/// 100,000 brackets from exhausting the stack of the recursive `place`.
const MAX_KEY_DEPTH: usize = 32;

/// Inserts `key=value` the way Rack's nested query parser does.
fn insert_nested(map: &mut Map<String, Value>, key: &str, value: Value) -> Result<(), ParamsError> {
    let (head, rest) = match key.find('[') {
        Some(i) if i > 0 => (&key[..i], &key[i..]),
        _ => (key, ""),
    };
    let mut path = Vec::new();
    let mut remaining = rest;
    while let Some(stripped) = remaining.strip_prefix('[') {
        let Some(end) = stripped.find(']') else { break };
        if path.len() == MAX_KEY_DEPTH {
            return Err(ParamsError::Malformed(format!(
                "a parameter key nests deeper than {MAX_KEY_DEPTH} levels"
            )));
        }
        path.push(&stripped[..end]);
        remaining = &stripped[end + 1..];
    }
    let slot = map.entry(head.to_string()).or_insert(Value::Null);
    place(slot, &path, value);
    Ok(())
}

fn place(slot: &mut Value, path: &[&str], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        // A plain key given twice: the last value wins.
        *slot = value;
        return;
    };
    if first.is_empty() {
        if !slot.is_array() {
            *slot = Value::Array(Vec::new());
        }
        if let Value::Array(items) = slot {
            if rest.is_empty() {
                items.push(value);
            } else {
                let mut item = Value::Null;
                place(&mut item, rest, value);
                items.push(item);
            }
        }
        return;
    }
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(map) = slot {
        let next = map.entry(first.to_string()).or_insert(Value::Null);
        place(next, rest, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn parse(query: Option<&str>, content_type: Option<&str>, body: &str) -> Params {
        let mut headers = HeaderMap::new();
        if let Some(t) = content_type {
            headers.insert("content-type", t.parse().unwrap());
        }
        Params::parse(query, &headers, &Bytes::from(body.to_string()))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn json_form_and_multipart_give_the_same_parameters() {
        let json = parse(
            None,
            Some("Application/JSON; charset=utf-8"),
            r#"{"token":"t","info":{"name":"r"}}"#,
        )
        .await;
        let form = parse(
            None,
            Some("application/x-www-form-urlencoded"),
            "token=t&info%5Bname%5D=r",
        )
        .await;
        let multipart = parse(
            None,
            Some("multipart/form-data; boundary=XX"),
            "--XX\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\nt\r\n--XX\r\n\
             Content-Disposition: form-data; name=\"info[name]\"\r\n\r\nr\r\n--XX--\r\n",
        )
        .await;
        assert_eq!(json, form);
        assert_eq!(json, multipart);
        assert_eq!(json.token().as_deref(), Some("t"));
    }

    #[tokio::test]
    async fn the_body_wins_over_the_query() {
        let p = parse(
            Some("token=q&state=running"),
            Some("application/json"),
            r#"{"token":"b"}"#,
        )
        .await;
        assert_eq!(p.token().as_deref(), Some("b"));
        assert_eq!(p.string("state").as_deref(), Some("running"));
        let q = parse(Some("token=q"), None, "").await;
        assert_eq!(q.token().as_deref(), Some("q"));
    }

    #[tokio::test]
    async fn rack_keys() {
        let p = parse(
            None,
            Some("application/x-www-form-urlencoded"),
            "tag_list=a&tag_list=b&x[]=1&x[]=2&info[features][variables]=true",
        )
        .await;
        // A plain key given twice keeps its last value, as Rack does.
        assert_eq!(p.list("tag_list").unwrap(), vec!["b"]);
        assert_eq!(p.get("x"), Some(&json!(["1", "2"])));
        assert_eq!(
            p.get("info"),
            Some(&json!({"features": {"variables": "true"}}))
        );
        let commas = parse(None, Some("application/json"), r#"{"tag_list":"a, b,c"}"#).await;
        assert_eq!(commas.list("tag_list").unwrap(), vec!["a", "b", "c"]);
    }

    #[tokio::test]
    async fn types_as_grape_checks_them() {
        let p = parse(
            None,
            Some("application/json"),
            r#"{"info":[1],"run_untagged":"False","locked":"maybe"}"#,
        )
        .await;
        assert_eq!(
            p.hash("info"),
            Err(ParamsError::Invalid("info is invalid".into()))
        );
        assert_eq!(p.boolean("run_untagged"), Ok(Some(false)));
        assert!(p.boolean("locked").is_err());
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        let broken = Params::parse(None, &headers, &Bytes::from_static(b"{nope")).await;
        assert!(matches!(broken, Err(ParamsError::Malformed(_))));
    }
}
