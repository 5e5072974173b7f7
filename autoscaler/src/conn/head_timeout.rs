//! The header read timeout, kept apart from the idle keep-alive timeout.
//!
//! hyper starts its header read timer as soon as a kept-alive connection waits for its next
//! request, so the one timer would bound both how long a client may take to send a request head
//! and how long an idle connection stays open. The mirrored API wants the second far longer than
//! the first (runners keep their connections between calls), so hyper's timer is given the idle
//! timeout and the header timeout is counted here: from a request's first byte (from the accept
//! for a new connection, which must not stay silent) until hyper hands the request to the router.
//!
//! A connection is in one of three phases, shared by the stream wrapper (`HeadDeadline`), the
//! service (which marks the router's call) and the response body (`EndsRequest`, whose drop marks
//! the end of the answer). Bytes read while a request is being answered are its body, or a
//! client's pipelined next request; neither is timed here, so an upload, an `Expect:
//! 100-continue` wait or a long poll is never cut. A pipelined head left incomplete is bounded by
//! the idle timeout only: runners do not pipeline.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

const IDLE: u8 = 0;
const READING_HEAD: u8 = 1;
const IN_REQUEST: u8 = 2;

/// Where a connection is between two requests, shared by everything that moves it on.
#[derive(Debug, Clone)]
pub(super) struct RequestPhase(Arc<AtomicU8>);

impl RequestPhase {
    /// A new connection: its first request head is due within the header timeout.
    pub(super) fn reading_first_head() -> Self {
        Self(Arc::new(AtomicU8::new(READING_HEAD)))
    }

    /// hyper has read a whole head and called the router.
    pub(super) fn request_started(&self) {
        self.0.store(IN_REQUEST, Ordering::Release);
    }

    fn response_ended(&self) {
        let _ = self
            .0
            .compare_exchange(IN_REQUEST, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Bytes arrived: when the connection was idle they start a head, whose deadline starts now.
    fn bytes_arrived(&self) -> bool {
        self.0
            .compare_exchange(IDLE, READING_HEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn reading_head(&self) -> bool {
        self.0.load(Ordering::Acquire) == READING_HEAD
    }
}

/// A connection's stream whose reads fail with `TimedOut` once a request head has taken longer
/// than the header timeout; hyper then closes the connection.
pub(super) struct HeadDeadline<S> {
    stream: S,
    phase: RequestPhase,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<S> HeadDeadline<S> {
    pub(super) fn new(stream: S, phase: RequestPhase, timeout: Duration) -> Self {
        Self {
            stream,
            phase,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let got_bytes = matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if got_bytes && this.phase.bytes_arrived() {
            this.deadline
                .as_mut()
                .reset(crate::clock::monotonic() + this.timeout);
        }
        // Polling the deadline also wakes this task when it passes with the read still pending.
        if this.phase.reading_head() && this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received within header_read_timeout",
            )));
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A response body that marks its connection idle once hyper is done with it (written to the
/// end, or dropped with the connection).
pub(super) struct EndsRequest<B> {
    body: B,
    phase: RequestPhase,
}

impl<B> EndsRequest<B> {
    pub(super) fn new(body: B, phase: RequestPhase) -> Self {
        Self { body, phase }
    }
}

impl<B: Body + Unpin> Body for EndsRequest<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for EndsRequest<B> {
    fn drop(&mut self) {
        self.phase.response_ended();
    }
}
