//! A scripted GitLab for tests of the layers above the upstream edge: it records every call and
//! answers with what the test queued.

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use super::{
    Forward, ForwardBody, Forwarded, JobRequest, JobRequestOutcome, Upstream, UpstreamError,
    VerifyOutcome,
};
use crate::secret::Secret;

#[derive(Debug, Clone)]
pub struct RecordedCall {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Debug, Clone)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

impl Scripted {
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }
}

#[derive(Debug, Default)]
pub struct FakeUpstream {
    calls: Mutex<Vec<RecordedCall>>,
    answers: Mutex<VecDeque<Result<Scripted, String>>>,
    job_requests: Mutex<Vec<JobRequest>>,
    verify_infos: Mutex<Vec<serde_json::Value>>,
}

impl FakeUpstream {
    /// Queues the answer to the next relayed call (`Err` = transport failure).
    pub fn answer(&self, answer: Result<Scripted, String>) {
        self.answers.lock().unwrap().push_back(answer);
    }

    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().unwrap().clone()
    }

    pub fn job_request_count(&self) -> usize {
        self.job_requests.lock().unwrap().len()
    }

    /// The `info` of every verify call, in order.
    pub fn verify_infos(&self) -> Vec<serde_json::Value> {
        self.verify_infos.lock().unwrap().clone()
    }
}

impl Upstream for FakeUpstream {
    fn verify(
        &self,
        _token: &Secret,
        _system_id: &str,
        info: &serde_json::Value,
    ) -> BoxFuture<'_, Result<VerifyOutcome, UpstreamError>> {
        self.verify_infos.lock().unwrap().push(info.clone());
        Box::pin(async { Ok(VerifyOutcome::Valid) })
    }

    fn request_job(
        &self,
        request: JobRequest,
    ) -> BoxFuture<'_, Result<JobRequestOutcome, UpstreamError>> {
        self.job_requests.lock().unwrap().push(request);
        Box::pin(async { Ok(JobRequestOutcome::NoJob { last_update: None }) })
    }

    fn forward(&self, call: Forward) -> BoxFuture<'_, Result<Forwarded, UpstreamError>> {
        Box::pin(async move {
            let body = match call.body {
                ForwardBody::Empty => Bytes::new(),
                ForwardBody::Bytes(b) => b,
                ForwardBody::Stream(s) => {
                    let chunks: Vec<Bytes> = s
                        .try_collect()
                        .await
                        .map_err(|e| UpstreamError::Transport(e.to_string()))?;
                    chunks.concat().into()
                }
            };
            self.calls.lock().unwrap().push(RecordedCall {
                method: call.method,
                path: call.path,
                query: call.query,
                headers: call.headers,
                body,
            });
            let answer = self
                .answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Ok(Scripted::new(200)));
            let scripted = answer.map_err(UpstreamError::Transport)?;
            let mut headers = HeaderMap::new();
            for (name, value) in scripted.headers {
                headers.insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value).unwrap(),
                );
            }
            let body = futures::stream::once(async move { Ok::<_, std::io::Error>(scripted.body) })
                .boxed();
            Ok(Forwarded {
                status: StatusCode::from_u16(scripted.status).unwrap(),
                headers,
                body,
            })
        })
    }
}
