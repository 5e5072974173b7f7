//! A router that keeps the list of its own routes, so that tests can hold each listener's
//! OpenAPI document to what the listener really serves (axum cannot list a router's routes).
//!
//! Every route of the mirrored runner API and of the admin API is added through [`Routes`]:
//! a route added with a plain `Router::route` would escape the check against the spec.

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, on};

/// One method on one path, in axum's path syntax (`/jobs/{id}`, the same as OpenAPI's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
}

/// A [`Router`] under construction and the routes added to it so far.
#[derive(Debug)]
pub struct Routes<S> {
    router: Router<S>,
    list: Vec<Route>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Self {
            router: Router::new(),
            list: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    /// Serves `handler` for `method` on `path`. Several methods on one path merge (axum
    /// panics on the same method twice, as on any overlapping route).
    pub fn add<H, T>(mut self, method: Method, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|_| panic!("{method} cannot be routed"));
        self.router = self.router.route(path, on(filter, handler));
        self.list.push(Route { method, path });
        self
    }

    /// The routes added, sorted.
    pub fn list(&self) -> Vec<Route> {
        let mut list = self.list.clone();
        list.sort();
        list
    }

    pub fn into_router(self) -> Router<S> {
        self.router
    }
}

#[cfg(test)]
pub mod spec;
