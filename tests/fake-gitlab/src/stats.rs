//! Request counters per route template and outcome (`GET /control/stats`).

use std::sync::{Mutex, PoisonError};

use axum::extract::{MatchedPath, Request};

use crate::control::Stats;

/// The outcome label of a connection closed by a `drop` fault.
pub(crate) const DROPPED: &str = "dropped";

#[derive(Debug, Default)]
pub(crate) struct StatsRecorder {
    inner: Mutex<Stats>,
}

impl StatsRecorder {
    pub fn record(&self, route: &str, outcome: &str) {
        let mut stats = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *stats
            .requests
            .entry(route.to_owned())
            .or_default()
            .entry(outcome.to_owned())
            .or_default() += 1;
    }

    pub fn fault_injected(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .faults_injected += 1;
    }

    pub fn snapshot(&self) -> Stats {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// `"<METHOD> <route template>"` in the README's `:param` notation, e.g.
/// `PATCH /api/v4/jobs/:id/trace`; the raw path when no route matched.
pub(crate) fn route_key(request: &Request) -> String {
    let path = match request.extensions().get::<MatchedPath>() {
        Some(matched) => colon_params(matched.as_str()),
        None => request.uri().path().to_owned(),
    };
    format!("{} {path}", request.method())
}

/// axum writes parameters as `{id}`; GitLab's docs (and our README) as `:id`.
fn colon_params(template: &str) -> String {
    template
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => format!(":{}", name.trim_start_matches('*')),
                None => segment.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_use_colon_params() {
        assert_eq!(
            colon_params("/api/v4/jobs/{id}/trace"),
            "/api/v4/jobs/:id/trace"
        );
        assert_eq!(colon_params("/storage/{*key}"), "/storage/:key");
        assert_eq!(colon_params("/api/v4/jobs/request"), "/api/v4/jobs/request");
    }

    #[test]
    fn counts_accumulate() {
        let recorder = StatsRecorder::default();
        recorder.record("PUT /api/v4/jobs/:id", "200");
        recorder.record("PUT /api/v4/jobs/:id", "200");
        recorder.record("PUT /api/v4/jobs/:id", DROPPED);
        recorder.fault_injected();
        let stats = recorder.snapshot();
        assert_eq!(stats.count("PUT /api/v4/jobs/:id", "200"), 2);
        assert_eq!(stats.count("PUT /api/v4/jobs/:id", "dropped"), 1);
        assert_eq!(stats.total("PUT /api/v4/jobs/:id"), 3);
        assert_eq!(stats.faults_injected, 1);
    }
}
