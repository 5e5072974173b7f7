//! GitLab's offset pagination of REST lists, shared by every list the fake serves: the `page`
//! and `per_page` parameters (`lib/api/concerns/pagination_params.rb`), Kaminari's pages, and
//! the headers `Gitlab::Pagination::OffsetHeaderBuilder` writes (`X-Page`, `X-Per-Page`,
//! `X-Next-Page`, `X-Prev-Page`, `X-Total`, `X-Total-Pages`, `Link`).

use std::ops::Range;

use axum::Json;
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::api::params::Params;

/// GitLab's `per_page` default and maximum (the API's Kaminari settings).
const PER_PAGE_DEFAULT: i64 = 20;
const PER_PAGE_MAX: i64 = 100;

/// Grape's `type: Integer` parameter: `None` when absent (or empty), and a `"<name> is
/// invalid"` error for anything that is not a whole number.
pub(crate) fn integer(params: &Params, name: &str, errors: &mut Vec<String>) -> Option<i64> {
    let parsed = match params.0.get(name)? {
        Value::Null => return None,
        Value::String(s) if s.is_empty() => return None,
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    };
    if parsed.is_none() {
        errors.push(format!("{name} is invalid"));
    }
    parsed
}

/// The page a request asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pagination {
    page: usize,
    per_page: usize,
}

impl Pagination {
    /// Reads `page` and `per_page` (Grape's messages for invalid ones go to `errors`) and
    /// writes them back into `params` as Grape does, defaults included, for the `Link` header.
    pub(crate) fn read(params: &mut Params, errors: &mut Vec<String>) -> Self {
        let page = integer(params, "page", errors).unwrap_or(1);
        let per_page = integer(params, "per_page", errors).unwrap_or(PER_PAGE_DEFAULT);
        if per_page == 0 {
            // `except_values: [0]`.
            errors.push("per_page has a value not allowed".to_owned());
        }
        params.0.insert("page".into(), json!(page));
        params.0.insert("per_page".into(), json!(per_page));
        // Kaminari reads a page below 1 as the first, ignores a negative `per_page` and caps
        // a larger one than the maximum.
        let per_page = match per_page {
            n if n < 0 => PER_PAGE_DEFAULT,
            n => n.min(PER_PAGE_MAX),
        };
        Pagination {
            page: usize::try_from(page).unwrap_or(1).max(1),
            per_page: usize::try_from(per_page).unwrap_or(1).max(1),
        }
    }

    /// The part of a list of `total` items this page shows.
    pub(crate) fn window(&self, total: usize) -> Range<usize> {
        let start = (self.page - 1).saturating_mul(self.per_page).min(total);
        start..start.saturating_add(self.per_page).min(total)
    }

    /// The page's items as a JSON array, with GitLab's pagination headers. `link` is the
    /// request as Grape saw it.
    pub(crate) fn respond(&self, items: Vec<Value>, total: usize, link: &PageLink) -> Response {
        let page = self.page;
        // Kaminari's own count may be 0; GitLab shows at least one page.
        let pages = total.div_ceil(self.per_page);
        let shown_pages = pages.max(1);
        let next = (page < pages).then_some(page + 1);
        let prev = (page > 1 && page <= pages).then_some(page - 1);
        let mut links = Vec::new();
        if let Some(prev) = prev {
            links.push(format!("<{}>; rel=\"prev\"", link.href(prev)));
        }
        if let Some(next) = next {
            links.push(format!("<{}>; rel=\"next\"", link.href(next)));
        }
        links.push(format!("<{}>; rel=\"first\"", link.href(1)));
        links.push(format!("<{}>; rel=\"last\"", link.href(shown_pages)));
        let text = |n: Option<usize>| n.map(|n| n.to_string()).unwrap_or_default();
        let mut response = Json(items).into_response();
        let headers = response.headers_mut();
        for (name, value) in [
            ("x-per-page", self.per_page.to_string()),
            ("x-page", page.to_string()),
            ("x-next-page", text(next)),
            ("x-prev-page", text(prev)),
            ("link", links.join(", ")),
            ("x-total", total.to_string()),
            ("x-total-pages", shown_pages.to_string()),
        ] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
        response
    }
}

/// What a `Link` URL is built from: GitLab's external URL with the request's path, and every
/// parameter of the request as Grape holds it (route parameters and defaults included), `page`
/// replaced.
#[derive(Debug, Clone)]
pub(crate) struct PageLink {
    base: String,
    params: Map<String, Value>,
}

impl PageLink {
    pub(crate) fn new(server_url: &str, path: &str, params: &Params) -> Self {
        PageLink {
            base: format!("{}{path}", server_url.trim_end_matches('/')),
            params: params.0.clone(),
        }
    }

    fn href(&self, page: usize) -> String {
        let mut params = self.params.clone();
        params.insert("page".into(), json!(page));
        format!("{}?{}", self.base, to_query(&params, None))
    }
}

/// Rails' `Hash#to_query`: `key=value` pairs escaped with `CGI.escape`, nested keys as
/// `a[b]`, lists as `a[]`, empty lists and hashes left out, pairs sorted.
fn to_query(map: &Map<String, Value>, prefix: Option<&str>) -> String {
    let mut pieces: Vec<String> = map
        .iter()
        .filter(|(_, value)| !is_empty_collection(value))
        .map(|(key, value)| {
            let key = prefix.map_or_else(|| key.clone(), |p| format!("{p}[{key}]"));
            value_query(value, &key)
        })
        .collect();
    if !prefix.is_some_and(|p| p.contains("[]")) {
        pieces.sort();
    }
    pieces.join("&")
}

fn is_empty_collection(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

fn value_query(value: &Value, key: &str) -> String {
    match value {
        Value::Object(map) => to_query(map, Some(key)),
        Value::Array(items) => {
            let key = format!("{key}[]");
            let pieces: Vec<String> = items.iter().map(|item| value_query(item, &key)).collect();
            pieces.join("&")
        }
        Value::String(s) => format!("{}={}", cgi_escape(key), cgi_escape(s)),
        Value::Null => format!("{}=", cgi_escape(key)),
        other => format!("{}={}", cgi_escape(key), cgi_escape(&other.to_string())),
    }
}

/// Ruby's `CGI.escape`: all but `a-zA-Z0-9_.-~` percent-encoded, a space as `+`.
fn cgi_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(query: &str) -> (Pagination, Vec<String>, Params) {
        let mut params = Params::from_query(Some(query));
        let mut errors = Vec::new();
        let pagination = Pagination::read(&mut params, &mut errors);
        (pagination, errors, params)
    }

    #[test]
    fn pages_follow_kaminari() {
        let (p, errors, _) = read("page=2&per_page=500");
        assert!(errors.is_empty());
        assert_eq!(p.per_page, 100, "capped");
        assert_eq!(p.window(150), 100..150);
        assert_eq!(p.window(50), 50..50, "out of range: empty");
        let (p, _, _) = read("page=-3&per_page=-1");
        assert_eq!((p.page, p.per_page), (1, 20));
        let (_, errors, _) = read("page=two&per_page=0");
        assert_eq!(
            errors,
            ["page is invalid", "per_page has a value not allowed"]
        );
    }

    #[test]
    fn links_are_rails_queries() {
        let (_, _, mut params) = read("scope[]=created&scope[]=pending&per_page=2");
        params.0.insert("id".into(), json!("group/project"));
        params.0.insert("include_retried".into(), json!(false));
        let link = PageLink::new("https://gitlab.example/", "/api/v4/x", &params);
        assert_eq!(
            link.href(3),
            "https://gitlab.example/api/v4/x?id=group%2Fproject&include_retried=false&page=3\
             &per_page=2&scope%5B%5D=created&scope%5B%5D=pending"
        );
        assert_eq!(cgi_escape("a b~*"), "a+b~%2A");
    }
}
