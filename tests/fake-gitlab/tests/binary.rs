//! The `fake-gitlab` binary: first stdout line, control API reachable, clean exit on SIGTERM.

use std::process::Stdio;
use std::time::Duration;

use fake_gitlab::control::{Client, JobSpec};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn prints_the_address_serves_and_exits_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-gitlab"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--runner-token",
            "glrt-bin",
            "--long-poll",
            "1s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the address is printed promptly")
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("listening on ")
        .expect(&first)
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let client = Client::new(&url);
    let job = client
        .enqueue(&JobSpec::new("glrt-bin", &["true"]))
        .await
        .unwrap();
    assert_eq!(client.job(job.id).await.unwrap().id, job.id);

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits promptly")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
