//! The status page: one HTML shell, its script and its style, built into the binary and served
//! without the token. The shell holds no data: the script asks the JSON views (`/status`,
//! `/machines`, `/jobs`, `/waits`) every few seconds with the bearer token the operator
//! pastes into the page, so the token guards the same data as it does for the CLI.

use std::sync::Arc;

use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::Admin;
use crate::routes::Routes;

const HTML: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");

/// Only the page's own script, style and API calls: data shown by the page (machine ids,
/// reasons from provisioner scripts) can never run as code in it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page's routes, open like `/healthz`.
pub(super) fn routes(routes: Routes<Arc<Admin>>) -> Routes<Arc<Admin>> {
    routes
        .add(Method::GET, "/", root)
        .add(Method::GET, "/ui", html)
        .add(Method::GET, "/ui/app.js", script)
        .add(Method::GET, "/ui/style.css", style)
}

async fn root() -> Redirect {
    Redirect::to("/ui")
}

async fn html() -> Response {
    asset("text/html; charset=utf-8", HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    let fixed = |v: &'static str| HeaderValue::from_static(v);
    headers.insert(header::CONTENT_TYPE, fixed(content_type));
    // A new binary brings a new page: browsers ask again rather than keep an old script.
    headers.insert(header::CACHE_CONTROL, fixed("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        fixed(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, fixed("nosniff"));
    headers.insert(header::REFERRER_POLICY, fixed("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_loads_only_its_own_script_and_style() {
        assert!(HTML.contains(r#"<script src="/ui/app.js""#), "{HTML}");
        assert!(HTML.contains(r#"href="/ui/style.css""#), "{HTML}");
        // Inline code would be refused by the policy above.
        assert!(!HTML.contains("<script>") && !HTML.contains("<style"));
    }

    #[test]
    fn every_route_of_the_admin_api_is_in_its_spec_and_back() {
        let routes = super::super::route_table().list();
        crate::routes::spec::assert_same(
            "admin-api.yaml",
            &crate::routes::spec::served(&routes, ""),
        );
    }

    #[test]
    fn the_script_reads_every_view_it_draws_from_the_admin_api() {
        let table: Vec<_> = super::super::route_table()
            .list()
            .into_iter()
            .map(|r| r.path)
            .collect();
        for view in ["/status", "/machines", "/jobs", "/waits"] {
            assert!(SCRIPT.contains(&format!("\"{view}\"")), "{view}");
            assert!(table.contains(&view), "{view}");
        }
    }
}
