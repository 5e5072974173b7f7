//! A job GitLab gave the autoscaler is on stable storage before a sidecar sees it. The
//! autoscaler runs under `strace`, and its system calls show, between reading GitLab's `201`
//! and writing the sidecar's `201`, the journal written and `fdatasync`ed (not only sled's
//! `sync_file_range`, which leaves the data in the disk's cache). And a job it has read
//! survives `kill -9` while the disk is slow to sync (strace holds every `fdatasync`).

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, register_sidecar};
use fake_gitlab::control::JobSpec;
use reqwest::StatusCode;

const STRACE: &str = "/usr/bin/strace";
const TRACED: &str = "trace=fdatasync,fsync,sync_file_range,pwrite64,read,recvfrom,recvmsg,write,writev,sendto,sendmsg";

/// One line of `strace -f` output: the thread and the rest.
fn split(line: &str) -> (&str, &str) {
    let (thread, rest) = line.split_once(' ').unwrap_or(("", line));
    (thread, rest.trim_start())
}

fn is_call(rest: &str, names: &[&str]) -> bool {
    names.iter().any(|n| {
        rest.starts_with(&format!("{n}(")) || rest.starts_with(&format!("<... {n} resumed>"))
    })
}

/// The index of the line where the call begun at `start` returned `0`, if it did.
fn returned_zero(lines: &[&str], start: usize, name: &str) -> Option<usize> {
    let (thread, rest) = split(lines[start]);
    if !rest.contains("<unfinished ...>") {
        return rest.trim_end().ends_with("= 0").then_some(start);
    }
    let resumed = format!("<... {name} resumed>");
    (start + 1..lines.len()).find_map(|i| {
        let (t, r) = split(lines[i]);
        (t == thread && r.starts_with(&resumed))
            .then(|| r.trim_end().ends_with("= 0").then_some(i))?
    })
}

#[tokio::test]
async fn the_acceptance_is_fdatasynced_before_the_job_is_handed_out() -> Result<()> {
    ensure!(
        std::path::Path::new(STRACE).exists(),
        "{STRACE} is missing (cargo xtask test installs it)"
    );
    let gitlab = FakeGitLab::start(&[]).await?;
    let pool = PoolSpec::new("durable");
    gitlab.add_runner(&pool.upstream_token).await?;
    let dir = tempfile::tempdir()?;
    let trace_path = dir.path().join("strace.txt");
    let trace_arg = trace_path.to_str().context("temporary path is not UTF-8")?;
    let wrap = [
        STRACE, "-f", "-y", "-qq", "-s", "40", "-e", TRACED, "-o", trace_arg,
    ];
    let mut autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &Extra {
            server: "long_poll_timeout = \"5s\"",
            wrap: &wrap,
            ..Extra::default()
        },
    )
    .await?;
    let token = register_sidecar(&autoscaler.url, &pool.registration_token, "traced").await?;
    let id = gitlab
        .control
        .enqueue(&JobSpec::new(&pool.upstream_token, &["true"]))
        .await?
        .id;
    let http = reqwest::Client::new();
    let mut handed_out = None;
    for _ in 0..10 {
        let answer = http
            .post(format!("{}/api/v4/jobs/request", autoscaler.url))
            .json(&serde_json::json!({"token": token, "info": {"name": "traced"}}))
            .send()
            .await?;
        if answer.status() == StatusCode::CREATED {
            handed_out = Some(answer.json::<serde_json::Value>().await?);
            break;
        }
        ensure!(
            answer.status() == StatusCode::NO_CONTENT,
            "job request answered {}",
            answer.status()
        );
    }
    let job = handed_out.context("no job handed out within ten long polls")?;
    assert_eq!(job["id"].as_u64(), Some(id));

    // Kill the autoscaler (strace's child): strace then writes out the trace and exits.
    kill_traced_child(&autoscaler)?;
    autoscaler.proc.wait(Duration::from_secs(30)).await?;

    let text = std::fs::read_to_string(&trace_path)?;
    let lines: Vec<&str> = text.lines().collect();
    let from_gitlab = lines
        .iter()
        .position(|l| {
            let (_, rest) = split(l);
            is_call(rest, &["read", "recvfrom", "recvmsg"]) && rest.contains("HTTP/1.1 201")
        })
        .context("the trace shows no 201 read from GitLab")?;
    let to_sidecar = (from_gitlab..lines.len())
        .find(|&i| {
            let (_, rest) = split(lines[i]);
            is_call(rest, &["write", "writev", "sendto", "sendmsg"])
                && rest.contains("HTTP/1.1 201")
        })
        .context("the trace shows no 201 written to the sidecar after GitLab's")?;
    let journal_call = |i: usize, name: &str| {
        let (_, rest) = split(lines[i]);
        rest.starts_with(&format!("{name}(")) && rest.contains("/journal-")
    };
    let written = (from_gitlab..to_sidecar)
        .find(|&i| journal_call(i, "pwrite64"))
        .context("the journal was not written between GitLab's 201 and the sidecar's")?;
    let synced = (written..to_sidecar)
        .filter(|&i| journal_call(i, "fdatasync"))
        .find_map(|i| returned_zero(&lines, i, "fdatasync").filter(|&done| done < to_sidecar));
    if synced.is_none() {
        bail!(
            "no fdatasync of the journal returned between its write and the hand-out:\n{}",
            lines[from_gitlab..=to_sidecar].join("\n")
        );
    }
    Ok(())
}

/// `kill -9` while the disk is slow to sync: a job the autoscaler has read from GitLab is in
/// its journal file from that moment, not only once a sync covers it. Every `fdatasync` is
/// held for a while (strace's fault injection), two jobs are taken for two waiting requests,
/// and the autoscaler is killed as soon as its admin API shows both, while neither request has
/// been answered (their syncs are still held). After a restart it must still hold both jobs,
/// hand them out again, and relay their end to GitLab.
#[tokio::test]
async fn jobs_read_from_gitlab_survive_kill_9_while_the_disk_syncs_slowly() -> Result<()> {
    ensure!(
        std::path::Path::new(STRACE).exists(),
        "{STRACE} is missing (cargo xtask test installs it)"
    );
    let gitlab = FakeGitLab::start(&[]).await?;
    let mut pool = PoolSpec::new("slowdisk");
    // Hand-outs cut by the kill come back to the queue soon after the restart.
    pool.tail = "assign_ack_timeout = \"2s\"\n".into();
    gitlab.add_runner(&pool.upstream_token).await?;
    let dir = tempfile::tempdir()?;
    let wrap = [
        STRACE,
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=fdatasync",
        "-e",
        "inject=fdatasync:delay_enter=3000000",
    ];
    let mut autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &Extra {
            server: "long_poll_timeout = \"20s\"",
            wrap: &wrap,
            ..Extra::default()
        },
    )
    .await?;
    let mut tokens = Vec::new();
    for name in ["first", "second"] {
        tokens.push(register_sidecar(&autoscaler.url, &pool.registration_token, name).await?);
    }
    let http = reqwest::Client::new();
    // Restarts keep the URL.
    let url = autoscaler.url.clone();
    let request = |token: &str| {
        http.post(format!("{url}/api/v4/jobs/request"))
            .json(&serde_json::json!({"token": token, "info": {"name": "slowdisk"}}))
            .send()
    };
    let held: Vec<_> = tokens.iter().map(|t| tokio::spawn(request(t))).collect();
    let mut ids = Vec::new();
    for n in 0..2 {
        let spec = JobSpec::new(&pool.upstream_token, &[&format!("echo job {n}")]);
        ids.push(gitlab.control.enqueue(&spec).await?.id);
    }
    // Both jobs read and recorded (the admin API shows what the autoscaler holds).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for &id in &ids {
        loop {
            let known = autoscaler
                .admin_get(&format!("/jobs/{id}"))
                .send()
                .await?
                .status();
            if known == StatusCode::OK {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the autoscaler never showed job {id} ({known})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let answered = held.iter().filter(|h| h.is_finished()).count();
    kill_traced_child(&autoscaler)?;
    autoscaler.proc.wait(Duration::from_secs(30)).await?;
    ensure!(
        answered == 0,
        "{answered} job request(s) were answered before the kill: the disk was not slow enough to test anything"
    );
    for h in held {
        // Cut by the kill: the answer, if any, is an error.
        let _ = h.await?;
    }

    autoscaler.unwrap_command();
    autoscaler.restart().await?;
    for &id in &ids {
        let known = autoscaler
            .admin_get(&format!("/jobs/{id}"))
            .send()
            .await?
            .status();
        ensure!(
            known == StatusCode::OK,
            "after the restart job {id} is {known}"
        );
    }
    // Each comes back to a job request once its cut hand-out is given up, and its end reaches
    // GitLab.
    let mut finished = Vec::new();
    while finished.len() < ids.len() {
        let answer = request(&tokens[0]).await?;
        if answer.status() == StatusCode::NO_CONTENT {
            continue;
        }
        ensure!(
            answer.status() == StatusCode::CREATED,
            "job request answered {}",
            answer.status()
        );
        let job: serde_json::Value = answer.json().await?;
        let id = job["id"].as_u64().context("job without an id")?;
        let job_token = job["token"].as_str().context("job without a token")?;
        let put = http
            .put(format!("{url}/api/v4/jobs/{id}"))
            .json(&serde_json::json!({"token": job_token, "state": "success", "exit_code": 0}))
            .send()
            .await?;
        ensure!(
            put.status() == StatusCode::OK,
            "final update answered {}",
            put.status()
        );
        finished.push(id);
    }
    for &id in &ids {
        let view = gitlab
            .control
            .wait_final(id, Duration::from_secs(60))
            .await?;
        assert_eq!(
            view.status.as_str(),
            "success",
            "job {id} at GitLab: {view:?}"
        );
    }
    Ok(())
}

/// Kills the autoscaler under strace (strace's child) with SIGKILL.
fn kill_traced_child(autoscaler: &Autoscaler) -> Result<()> {
    let strace_pid = autoscaler.proc.pid().context("strace already exited")?;
    let children =
        std::fs::read_to_string(format!("/proc/{strace_pid}/task/{strace_pid}/children"))?;
    for child in children.split_whitespace() {
        let pid = nix::unistd::Pid::from_raw(child.parse()?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
    }
    Ok(())
}
