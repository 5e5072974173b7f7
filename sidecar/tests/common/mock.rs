//! A tiny local GitLab stand-in for wire-level checks: an axum server on loopback that records
//! every request and answers as the test's responder says.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

pub type Responder = Arc<dyn Fn(&Recorded, usize) -> Response + Send + Sync>;

pub struct Mock {
    pub url: String,
    log: Arc<Mutex<Vec<Recorded>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Mock {
    /// `respond` gets the request and how many requests came before it.
    pub async fn start(
        respond: impl Fn(&Recorded, usize) -> Response + Send + Sync + 'static,
    ) -> Mock {
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let respond: Responder = Arc::new(respond);
        let app = {
            let log = log.clone();
            axum::Router::new().fallback(
                move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                    let log = log.clone();
                    let respond = respond.clone();
                    async move {
                        let rec = Recorded {
                            method,
                            path: uri.path().to_owned(),
                            query: uri.query().unwrap_or("").to_owned(),
                            headers,
                            body,
                        };
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(rec.clone());
                            log.len() - 1
                        };
                        respond(&rec, n)
                    }
                },
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Mock {
            url,
            log,
            _task: task,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }
}

pub fn with_headers(
    status: StatusCode,
    headers: &[(&'static str, &str)],
    body: impl Into<axum::body::Body>,
) -> Response {
    let mut r = (status, body.into()).into_response();
    for (k, v) in headers {
        r.headers_mut().insert(*k, v.parse().unwrap());
    }
    r
}
