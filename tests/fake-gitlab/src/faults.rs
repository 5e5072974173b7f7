//! Fault injection for `/api/v4/*` (README "Fault rule") and the request counting around it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::control::{FaultAction, FaultRule};
use crate::shared::Shared;
use crate::stats::{self, DROPPED};

/// Put into each request by the connection loop: cancelling it makes the loop drop the
/// connection, so the client sees the TCP connection close without any response.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionKill(pub CancellationToken);

#[derive(Debug)]
struct ActiveRule {
    id: u64,
    rule: FaultRule,
    expires_at: Option<Instant>,
    remaining: Option<u64>,
}

impl ActiveRule {
    fn is_live(&self, now: Instant) -> bool {
        self.remaining != Some(0) && self.expires_at.is_none_or(|expiry| now < expiry)
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        let method_ok = self.rule.methods.is_empty()
            || self
                .rule
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(method));
        let path_ok = self
            .rule
            .path_prefix
            .as_deref()
            .is_none_or(|prefix| path.starts_with(prefix));
        method_ok && path_ok
    }
}

/// The rules in the order added; the first live match wins.
#[derive(Debug, Default)]
pub(crate) struct FaultRules {
    rules: Mutex<Vec<ActiveRule>>,
    next_id: AtomicU64,
}

impl FaultRules {
    pub fn add(&self, rule: FaultRule, now: Instant) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let active = ActiveRule {
            id,
            expires_at: rule.duration_ms.map(|ms| now + Duration::from_millis(ms)),
            remaining: rule.count,
            rule,
        };
        self.lock().push(active);
        id
    }

    pub fn remove(&self, id: u64) {
        self.lock().retain(|rule| rule.id != id);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The action for this request, if a live rule matches; spends one of its `count`.
    pub fn pick(&self, method: &str, path: &str, now: Instant) -> Option<FaultAction> {
        let mut rules = self.lock();
        rules.retain(|rule| rule.is_live(now));
        let rule = rules.iter_mut().find(|rule| rule.matches(method, path))?;
        if let Some(remaining) = rule.remaining.as_mut() {
            *remaining -= 1;
        }
        Some(rule.rule.action.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ActiveRule>> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts every request by route and outcome, applies faults to `/api/v4/*`, and answers with
/// an `X-Request-Id` like GitLab (the request's own when it sent one, runner-protocol.md §1).
pub(crate) async fn observe(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let route = stats::route_key(&request);
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .cloned()
        .unwrap_or_else(new_request_id);
    let started = Instant::now();
    let mut response = faulty(&shared, &route, request, next).await;
    shared.stats.record(&route, response.status().as_str());
    tracing::debug!(
        %route,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis(),
        "request"
    );
    response.headers_mut().insert(REQUEST_ID, request_id);
    response
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// 32 hex digits, the shape of GitLab's correlation ids.
fn new_request_id() -> HeaderValue {
    let id = format!("{:032x}", rand::random::<u128>());
    HeaderValue::from_str(&id).unwrap_or(HeaderValue::from_static("0"))
}

/// Runs the request through the first matching fault rule, if any, then the handler.
async fn faulty(shared: &Shared, route: &str, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let action = if path.starts_with("/api/v4/") {
        shared
            .faults
            .pick(request.method().as_str(), path, Instant::now())
    } else {
        None
    };
    let Some(action) = action else {
        return next.run(request).await;
    };
    shared.stats.fault_injected();
    tracing::debug!(%route, ?action, "injecting fault");
    match action {
        FaultAction::Status {
            status,
            retry_after,
        } => fault_status(status, retry_after),
        FaultAction::Drop => {
            shared.stats.record(route, DROPPED);
            let kill = request.extensions().get::<ConnectionKill>().cloned();
            drop(request);
            drop_connection(kill).await
        }
        FaultAction::Delay { ms } => {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = shared.shutdown.cancelled() => {}
            }
            next.run(request).await
        }
    }
}

fn fault_status(status: u16, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (
        status,
        Json(json!({ "message": format!("{status} (injected fault)") })),
    )
        .into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Ends the connection without writing anything: the handler future never completes, and the
/// connection loop drops the connection (and this future with it).
async fn drop_connection(kill: Option<ConnectionKill>) -> Response {
    match kill {
        Some(ConnectionKill(kill)) => {
            kill.cancel();
            std::future::pending::<Response>().await
        }
        None => {
            // Only the server's own connection loop can close a connection; a router driven some
            // other way (e.g. `oneshot` in a unit test) gets a loud error instead.
            tracing::error!("drop fault outside the connection loop; answering 500");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> FaultAction {
        FaultAction::Status {
            status: code,
            retry_after: None,
        }
    }

    #[test]
    fn first_matching_rule_wins_in_order_added() {
        let rules = FaultRules::default();
        let now = Instant::now();
        rules.add(
            FaultRule::new(status(502))
                .methods(&["patch"])
                .path_prefix("/api/v4/jobs"),
            now,
        );
        rules.add(FaultRule::new(status(503)), now);
        assert_eq!(
            rules.pick("PATCH", "/api/v4/jobs/1/trace", now),
            Some(status(502))
        );
        assert_eq!(rules.pick("PUT", "/api/v4/jobs/1", now), Some(status(503)));
        assert_eq!(
            rules.pick("PATCH", "/api/v4/runners/verify", now),
            Some(status(503))
        );
    }

    #[test]
    fn count_and_duration_limit_a_rule() {
        let rules = FaultRules::default();
        let now = Instant::now();
        rules.add(FaultRule::new(FaultAction::Drop).count(2), now);
        rules.add(
            FaultRule::new(status(500)).duration(Duration::from_secs(10)),
            now,
        );
        assert_eq!(rules.pick("GET", "/x", now), Some(FaultAction::Drop));
        assert_eq!(rules.pick("GET", "/x", now), Some(FaultAction::Drop));
        assert_eq!(rules.pick("GET", "/x", now), Some(status(500)));
        let later = now + Duration::from_secs(10);
        assert_eq!(rules.pick("GET", "/x", later), None);
    }

    #[test]
    fn remove_and_clear() {
        let rules = FaultRules::default();
        let now = Instant::now();
        let first = rules.add(FaultRule::new(status(500)), now);
        rules.add(FaultRule::new(status(501)), now);
        rules.remove(first);
        assert_eq!(rules.pick("GET", "/x", now), Some(status(501)));
        rules.clear();
        assert_eq!(rules.pick("GET", "/x", now), None);
    }
}
