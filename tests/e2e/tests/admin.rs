//! The admin API and the operator's commands against a running stack: the token is required,
//! machines are drained and destroyed, pools paused and resumed, and the CLI shows it all; the
//! book the status page links to is served from `[admin] book_dir`.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::counting::{CountingRig, WITHIN, rig};
use e2e::process::binary;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec};
use fake_gitlab::control::JobStatus;
use reqwest::{Method, StatusCode};

/// `autoscaler ARGS --url ADMIN [--token-file FILE]`: exit code and stdout.
async fn cli(r: &CountingRig, args: &[&str], token_file: Option<&Path>) -> Result<(i32, String)> {
    let mut command = tokio::process::Command::new(binary("autoscaler")?);
    command
        .args(args)
        .args(["--url", &r.autoscaler.admin_url])
        .env_remove("AUTOSCALER_CONFIG");
    if let Some(file) = token_file {
        command.arg("--token-file").arg(file);
    }
    let out = command.output().await?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    ))
}

async fn post(r: &CountingRig, path: &str) -> Result<(StatusCode, serde_json::Value)> {
    let response = r
        .autoscaler
        .admin_request(Method::POST, path)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_wants_its_token_and_drains_destroys_pauses_and_resumes() -> Result<()> {
    let r = rig(&[], "max_machines = 1\nidle_time = \"10m\"", "", &[]).await?;
    let a = &r.autoscaler;
    let token = a
        .admin_token
        .clone()
        .context("the rig sets an admin token")?;

    // Without the token, or with another, nothing but /healthz answers.
    let client = reqwest::Client::new();
    for path in [
        "/status",
        "/machines",
        "/jobs",
        "/metrics",
        "/pools/local/pause",
    ] {
        let bare = client.get(format!("{}{path}", a.admin_url)).send().await?;
        ensure!(
            bare.status() == StatusCode::UNAUTHORIZED,
            "{path}: {}",
            bare.status()
        );
        let wrong = client
            .get(format!("{}{path}", a.admin_url))
            .bearer_auth(format!("{token}x"))
            .send()
            .await?;
        ensure!(
            wrong.status() == StatusCode::UNAUTHORIZED,
            "{path}: {}",
            wrong.status()
        );
    }
    let health = client
        .get(format!("{}/healthz", a.admin_url))
        .send()
        .await?;
    ensure!(health.status() == StatusCode::OK);

    // A running job keeps its machine: destroying it is refused, draining is not.
    let long = r
        .enqueue(r.job(&["for i in $(seq 8); do echo tick $i; sleep 1; done"]))
        .await?;
    r.wait_started(long).await?;
    let machine = a
        .machines()
        .await?
        .into_iter()
        .find(|m| m.state == MachineState::Busy)
        .context("the long job's machine")?;
    let (status, body) = post(&r, &format!("/machines/{}/destroy", machine.id)).await?;
    ensure!(
        status == StatusCode::CONFLICT,
        "destroy of a busy machine: {status} {body}"
    );
    for (path, name) in [
        ("/machines/no-such-machine/drain", "no-such-machine"),
        ("/machines/no-such-machine/destroy", "no-such-machine"),
        ("/pools/no-such-pool/pause", "no-such-pool"),
    ] {
        let (status, body) = post(&r, path).await?;
        ensure!(
            status == StatusCode::NOT_FOUND
                && body["error"].as_str().is_some_and(|e| e.contains(name)),
            "{path}: {status} {body}"
        );
    }
    let (status, body) = post(&r, &format!("/machines/{}/drain", machine.id)).await?;
    ensure!(
        status == StatusCode::OK && body["state"] == "draining",
        "{status} {body}"
    );
    let view = r.gitlab.control.wait_final(long, WITHIN).await?;
    ensure!(
        view.status == JobStatus::Success,
        "the drained machine's job ends: {view:?}"
    );
    let gone = a
        .wait_machines(WITHIN, "the drained machine is destroyed", |list| {
            list.iter()
                .any(|m| m.id == machine.id && m.state == MachineState::Gone)
        })
        .await?;
    let drained = gone
        .iter()
        .find(|m| m.id == machine.id)
        .context("machine")?;
    ensure!(
        drained.reason.as_deref() == Some("drained by an operator"),
        "{drained:?}"
    );

    // Paused, the pool takes no job; resumed, it does.
    let (status, body) = post(&r, "/pools/local/pause").await?;
    ensure!(
        status == StatusCode::OK && body["paused_by_operator"] == true,
        "{status} {body}"
    );
    let (code, out) = cli(&r, &["status"], None).await?;
    ensure!(
        code == 77,
        "the CLI without the token exits 77: {code} {out}"
    );
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n"))?;
    let (code, out) = cli(&r, &["status"], Some(&token_file)).await?;
    ensure!(
        code == 0 && out.contains("local") && out.contains("by operator"),
        "{code}\n{out}"
    );
    let (status, _) = post(&r, "/pools/local/resume").await?;
    ensure!(status == StatusCode::OK);
    let next = r.enqueue(r.job(&["echo after resume"])).await?;
    let view = r.gitlab.control.wait_final(next, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");

    // The CLI's tables and JSON.
    let (code, out) = cli(&r, &["machines"], Some(&token_file)).await?;
    ensure!(
        code == 0 && out.contains(&machine.id) && out.contains("gone"),
        "{out}"
    );
    let (code, out) = cli(&r, &["jobs", "--json"], Some(&token_file)).await?;
    let jobs: serde_json::Value = serde_json::from_str(&out).context(out.clone())?;
    ensure!(
        code == 0 && jobs.as_array().is_some_and(|j| j.len() == 2),
        "{out}"
    );
    let (code, out) = cli(&r, &["drain", "no-such-machine"], Some(&token_file)).await?;
    ensure!(code == 1 && out.contains("no-such-machine"), "{code} {out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_book_the_status_page_links_to() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let book = dir.path().join("book");
    std::fs::create_dir_all(book.join("concepts"))?;
    std::fs::write(book.join("index.html"), "<h1>Introduction</h1>")?;
    std::fs::write(book.join("concepts/machines.html"), "<h1>Machines</h1>")?;
    let gitlab = FakeGitLab::start(&[]).await?;
    let pool = PoolSpec::new("static");
    gitlab.add_runner(&pool.upstream_token).await?;
    let book_dir = format!("book_dir = \"{}\"", book.display());
    let extra = Extra {
        admin_token: Some("admin-token"),
        admin: &book_dir,
        ..Extra::default()
    };
    let a = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &extra,
    )
    .await?;
    // Open without the token, like the status page: the book holds no data.
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("{}{path}", a.admin_url)).send();
    let page = get("/book/concepts/machines.html").await?;
    ensure!(page.status() == StatusCode::OK, "{page:?}");
    let kind = page.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()?
        .to_string();
    ensure!(kind.starts_with("text/html"), "{kind}");
    ensure!(page.text().await? == "<h1>Machines</h1>");
    let index = get("/book/").await?;
    ensure!(index.status() == StatusCode::OK && index.text().await? == "<h1>Introduction</h1>");
    // Nothing outside the book's directory: not the admin token beside it (the client would
    // fold a literal `..` away, so the separators are encoded), and no page that is not there.
    for outside in [
        "/book/..%2fautoscaler%2fadmin.token",
        "/book/concepts/..%2f..%2fautoscaler%2fadmin.token",
        "/book/no-such-image.png",
    ] {
        let answer = get(outside).await?;
        ensure!(
            answer.status() == StatusCode::NOT_FOUND,
            "{outside}: {answer:?}"
        );
        ensure!(
            !answer.text().await?.contains("admin-token"),
            "{outside} leaked the token"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_book_dir_a_book_page_says_how_to_serve_the_book() -> Result<()> {
    let r = rig(&[], "max_machines = 1", "", &[]).await?;
    let answer = reqwest::get(format!(
        "{}/book/concepts/machines.html",
        r.autoscaler.admin_url
    ))
    .await?;
    ensure!(answer.status() == StatusCode::NOT_FOUND, "{answer:?}");
    let body: serde_json::Value = answer.json().await?;
    ensure!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("[admin] book_dir") && e.contains("cargo xtask docs")),
        "{body}"
    );
    Ok(())
}
