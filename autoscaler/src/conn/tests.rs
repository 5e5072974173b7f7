//! The connection limits against a real listener on loopback.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::*;

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

fn limits(per_address: usize, header_read_timeout: Duration) -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout,
        idle_timeout: header_read_timeout * 3,
        max_connections: 1000,
        max_connections_per_address: per_address,
        max_job_requests_per_sidecar: 4,
    }
}

/// A server whose `/slow` answers after `slow` (a long poll), `/` at once, `/peer` with the
/// client's address as the handlers see it and `POST /upload` with the length of the body.
async fn server(limits: ConnectionLimits, slow: Duration) -> (SocketAddr, CancellationToken) {
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/slow",
            get(move || async move {
                tokio::time::sleep(slow).await;
                "late"
            }),
        )
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .route(
            "/upload",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move { serve(listener, None, router, &limits, stopped).await });
    (addr, stop)
}

async fn connect_from(source: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse::<IpAddr>().unwrap(), 0))
        .unwrap();
    socket.connect(server).await.unwrap()
}

/// Sends `GET path` and reads the whole answer (the request asks for the connection's close).
async fn get_from(source: &str, server: SocketAddr, path: &str) -> String {
    let mut stream = connect_from(source, server).await;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// Waits for the server to close `stream` (end of file or reset), at most `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, stream.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

#[tokio::test]
async fn unfinished_headers_are_closed_after_the_header_timeout_but_a_long_poll_is_not() {
    let (addr, stop) = server(limits(100, HEADER_TIMEOUT), HEADER_TIMEOUT * 3).await;
    let mut slow = connect_from("127.0.0.1", addr).await;
    slow.write_all(b"POST /api/v4/jobs/request HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = crate::clock::monotonic();
    let long_poll = tokio::spawn(get_from("127.0.0.2", addr, "/slow"));
    assert!(closed_within(&mut slow, HEADER_TIMEOUT * 2).await);
    assert!(
        started.elapsed() >= HEADER_TIMEOUT,
        "closed before its time"
    );
    let answer = long_poll.await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("late"),
        "{answer}"
    );
    stop.cancel();
}

#[tokio::test]
async fn an_address_over_its_cap_is_closed_at_once_while_another_is_served() {
    // A header timeout far longer than the wait below: only the cap can close the connection.
    let (addr, stop) = server(limits(20, Duration::from_secs(60)), Duration::ZERO).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect_from("127.0.0.1", addr).await);
    }
    // The server counts a connection once it has accepted it: the first request on each proves it.
    for stream in &mut held {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        assert!(stream.read(&mut buf).await.unwrap() > 0);
    }
    let mut excess = connect_from("127.0.0.1", addr).await;
    assert!(closed_within(&mut excess, Duration::from_secs(2)).await);
    assert_eq!(
        get_from("127.0.0.2", addr, "/peer").await.lines().last(),
        Some("127.0.0.2")
    );
    drop(held);
    stop.cancel();
}

/// Reads one answer of known length from a kept-alive connection: its head and `body_len` bytes.
async fn read_answer(stream: &mut TcpStream, body_len: usize) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n")
            && answer.len() >= head_end + 4 + body_len
        {
            return text;
        }
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed in the middle of an answer: {text}");
        answer.extend_from_slice(&buf[..n]);
    }
}

async fn get_kept_alive(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_answer(stream, 2).await
}

#[tokio::test]
async fn an_idle_kept_alive_connection_outlives_the_header_timeout_until_the_idle_timeout() {
    let (addr, stop) = server(limits(100, HEADER_TIMEOUT), Duration::ZERO).await;
    let mut stream = connect_from("127.0.0.1", addr).await;
    assert!(get_kept_alive(&mut stream).await.ends_with("ok"));
    let idle_since = crate::clock::monotonic();
    // Idle for twice the header timeout: the connection must still be open and serve.
    assert!(!closed_within(&mut stream, HEADER_TIMEOUT * 2).await);
    assert!(get_kept_alive(&mut stream).await.ends_with("ok"));
    let idle_since_second = crate::clock::monotonic();
    assert!(idle_since.elapsed() >= HEADER_TIMEOUT * 2);
    assert!(closed_within(&mut stream, IDLE_TIMEOUT * 2).await);
    assert!(
        idle_since_second.elapsed() >= IDLE_TIMEOUT,
        "closed after {:?} idle, before the idle timeout",
        idle_since_second.elapsed()
    );
    stop.cancel();
}

#[tokio::test]
async fn a_head_started_on_a_kept_alive_connection_is_timed_from_its_first_byte() {
    let (addr, stop) = server(limits(100, HEADER_TIMEOUT), Duration::ZERO).await;
    let mut stream = connect_from("127.0.0.1", addr).await;
    assert!(get_kept_alive(&mut stream).await.ends_with("ok"));
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let started = crate::clock::monotonic();
    assert!(closed_within(&mut stream, HEADER_TIMEOUT * 2).await);
    assert!(
        started.elapsed() >= HEADER_TIMEOUT,
        "closed before its time"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_long_poll_longer_than_both_timeouts_is_answered_on_a_kept_alive_connection() {
    let (addr, stop) = server(limits(100, HEADER_TIMEOUT), IDLE_TIMEOUT + HEADER_TIMEOUT).await;
    let mut stream = connect_from("127.0.0.1", addr).await;
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_answer(&mut stream, 4).await.ends_with("late"));
    assert!(get_kept_alive(&mut stream).await.ends_with("ok"));
    stop.cancel();
}

#[tokio::test]
async fn a_slow_upload_after_expect_continue_is_not_cut_by_the_header_timeout() {
    let (addr, stop) = server(limits(100, HEADER_TIMEOUT), Duration::ZERO).await;
    let mut stream = connect_from("127.0.0.1", addr).await;
    let chunks = 6;
    let chunk = [b'x'; 100];
    let head = format!(
        "POST /upload HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        chunks * chunk.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut continue_line = [0u8; 25];
    stream.read_exact(&mut continue_line).await.unwrap();
    assert_eq!(&continue_line, b"HTTP/1.1 100 Continue\r\n\r\n");
    let started = crate::clock::monotonic();
    // The body takes three header timeouts to arrive, in pieces.
    for _ in 0..chunks {
        tokio::time::sleep(HEADER_TIMEOUT / 2).await;
        stream.write_all(&chunk).await.unwrap();
    }
    let answer = read_answer(&mut stream, 3).await;
    assert!(started.elapsed() >= HEADER_TIMEOUT * 3);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("600"),
        "{answer}"
    );
    stop.cancel();
}
