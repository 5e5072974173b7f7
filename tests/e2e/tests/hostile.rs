//! A machine running hostile job code against the autoscaler's mirrored API: thousands of
//! connections that never finish their headers, from one address, while another machine's
//! sidecar goes on being served.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, register_sidecar};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SLOW_CONNECTIONS: usize = 3000;
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const PER_ADDRESS: usize = 400;

fn open_fds(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The soft limit on open files of process `pid`.
fn fd_limit(pid: u32) -> Result<usize> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .context("no open files limit")?;
    Ok(line
        .split_whitespace()
        .nth(3)
        .context("no soft limit")?
        .parse()?)
}

/// Lets this test process hold its thousands of client sockets.
fn raise_own_fd_limit() -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    anyhow::ensure!(
        hard as usize > SLOW_CONNECTIONS + 512,
        "the hard file limit ({hard}) is too low for this test"
    );
    Ok(())
}

/// Connects from 127.0.0.1 and sends a request line and headers that never end.
async fn slow_connection(server: SocketAddr) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(server).await?;
    // Written into the socket's buffer even when the server already closed its side.
    let _ = stream
        .write_all(b"POST /api/v4/jobs/request HTTP/1.1\r\nHost: autoscaler\r\nContent-Type: application/json\r\n")
        .await;
    Ok(stream)
}

/// Whether the server closed `stream` (end of file or reset) within `within`.
async fn closed_within(mut stream: TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    matches!(
        tokio::time::timeout(within, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// The other machine: a client on 127.0.0.2 making job requests and verify calls in a loop until
/// `stop`; returns how many calls it made and every status that was not the expected one.
async fn other_machine(
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
) -> Result<(usize, Vec<String>)> {
    let http = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<IpAddr>()?)
        .timeout(Duration::from_secs(10))
        .build()?;
    let (mut calls, mut failures) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let verify = http
            .post(format!("{url}/api/v4/runners/verify"))
            .json(&serde_json::json!({"token": token}))
            .send()
            .await;
        let poll = http
            .post(format!("{url}/api/v4/jobs/request"))
            .json(&serde_json::json!({"token": token, "info": {}}))
            .send()
            .await;
        calls += 2;
        match verify.map(|r| r.status()) {
            Ok(StatusCode::OK) => {}
            other => failures.push(format!("verify: {other:?}")),
        }
        match poll.map(|r| r.status()) {
            Ok(StatusCode::NO_CONTENT) => {}
            other => failures.push(format!("job request: {other:?}")),
        }
    }
    Ok((calls, failures))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_slow_connections_from_one_address_are_closed_and_another_machine_is_served()
-> Result<()> {
    raise_own_fd_limit()?;
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&[]).await?;
    let pool = PoolSpec::new("linux");
    gitlab.add_runner(&pool.upstream_token).await?;
    let server_keys = format!(
        "long_poll_timeout = \"1s\"\nheader_read_timeout = \"{}s\"\n\
         max_connections_per_address = {PER_ADDRESS}\nmax_connections = 2000",
        HEADER_TIMEOUT.as_secs()
    );
    let autoscaler = Autoscaler::start(
        dir.path(),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &server_keys,
    )
    .await?;
    let pid = autoscaler.proc.pid().context("no pid")?;
    let server: SocketAddr = autoscaler.url.trim_start_matches("http://").parse()?;
    let token = register_sidecar(&autoscaler.url, &pool.registration_token, "other").await?;
    let baseline = open_fds(pid)?;
    let limit = fd_limit(pid)?;

    let stop = Arc::new(AtomicBool::new(false));
    let other = tokio::spawn(other_machine(autoscaler.url.clone(), token, stop.clone()));
    let watch_stop = stop.clone();
    let fds = tokio::spawn(async move {
        let mut most = 0;
        while !watch_stop.load(Ordering::Relaxed) {
            most = most.max(open_fds(pid).unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        most
    });

    let mut slow = Vec::with_capacity(SLOW_CONNECTIONS);
    for _ in 0..SLOW_CONNECTIONS {
        slow.push(slow_connection(server).await?);
    }
    let last_opened = Instant::now();
    let closes: Vec<_> = slow
        .into_iter()
        .map(|s| tokio::spawn(closed_within(s, HEADER_TIMEOUT + Duration::from_secs(3))))
        .collect();
    let mut open_after = 0;
    for close in closes {
        if !close.await? {
            open_after += 1;
        }
    }
    let all_closed_after = last_opened.elapsed();
    stop.store(true, Ordering::Relaxed);
    let most_fds = fds.await?;
    let (calls, failures) = other.await??;

    assert_eq!(
        open_after, 0,
        "slow connections still open after {all_closed_after:?}"
    );
    assert!(
        failures.is_empty(),
        "the other machine was refused: {failures:?}"
    );
    assert!(calls >= 4, "the other machine made only {calls} calls");
    // The slow connections of one address never held more than its cap of descriptors.
    assert!(
        most_fds <= baseline + PER_ADDRESS + 16,
        "the autoscaler held {most_fds} descriptors (baseline {baseline}, cap {PER_ADDRESS})"
    );
    assert!(most_fds < limit, "{most_fds} descriptors, limit {limit}");
    eprintln!(
        "{SLOW_CONNECTIONS} slow connections closed {all_closed_after:?} after the last was opened; \
         descriptors: baseline {baseline}, at most {most_fds}, limit {limit}; other machine: {calls} calls"
    );
    Ok(())
}
