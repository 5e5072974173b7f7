//! TLS on the mirrored runner API, end to end. GitLab (the fake) serves HTTPS with a certificate
//! of one CA (CA-G) and also serves a git repository over HTTPS from its own host; the
//! autoscaler serves the mirrored API with a certificate of another CA (CA-R).
//!
//! The machines' "system CA certificates" are simulated: the machines are local sandboxes on
//! this host, so the test cannot (and must not) add CA-G to the host's real store. It writes a
//! file holding CA-G and names it in `server.tls.system_ca_files`, the key that tells the
//! injection where a machine image keeps its system bundle. The autoscaler process itself is
//! given the same file as `SSL_CERT_FILE`, which its HTTP client reads as its system store, so
//! that it trusts GitLab.

#[path = "tls/pki.rs"]
mod pki;
#[path = "tls/probe.rs"]
mod probe;

use std::path::Path;
use std::process::Command as StdCommand;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::process::binary;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, repo_root};
use fake_gitlab::control::{JobSpec, JobStatus, JobVariable};
use pki::TestCa;

const WITHIN: Duration = Duration::from_secs(120);

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = StdCommand::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()?;
    ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A bare repository `group/project.git` under `root`, ready for git's dumb HTTP protocol, with
/// one commit holding `hello.txt`. Returns the commit id.
fn make_repository(root: &Path, work: &Path) -> Result<String> {
    std::fs::create_dir_all(work)?;
    git(work, &["-c", "init.defaultBranch=main", "init", "-q"])?;
    std::fs::write(work.join("hello.txt"), "cloned over https\n")?;
    git(work, &["add", "hello.txt"])?;
    git(
        work,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-qm",
            "first",
        ],
    )?;
    let bare = root.join("group/project.git");
    std::fs::create_dir_all(bare.parent().context("no parent")?)?;
    let work_str = work.to_string_lossy().into_owned();
    let bare_str = bare.to_string_lossy().into_owned();
    git(root, &["clone", "-q", "--bare", &work_str, &bare_str])?;
    git(&bare, &["update-server-info"])?;
    git(work, &["rev-parse", "HEAD"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_behind_the_tls_relay_clones_from_gitlab_over_https() -> Result<()> {
    clone_through_the_relay("mode = \"builtin\"").await
}

/// The same with `mode = "gitlab-runner"`: the generated `config.toml` carries `tls-ca-file`,
/// which the stand-in for a stock runner passes on as a stock runner would use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_runner_config_behind_the_tls_relay_clones_from_gitlab_over_https() -> Result<()> {
    let bin = tempfile::tempdir()?;
    let shim = bin.path().join("gitlab-runner");
    let text = std::fs::read_to_string(repo_root().join("tests/e2e/fixtures/gitlab-runner-shim"))?
        .replace("__SIDECAR__", &binary("sidecar")?.display().to_string());
    std::fs::write(&shim, text)?;
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    clone_through_the_relay(&format!(
        "mode = \"gitlab-runner\"\nexecutor = \"shell\"\nbinary = \"{}\"",
        shim.display()
    ))
    .await
}

/// A job cloning from the GitLab host over HTTPS (CA-G), run by a sidecar of `sidecar` mode
/// behind the relay (CA-R), must succeed; a clone trusting CA-R alone must fail.
async fn clone_through_the_relay(sidecar: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (ca_g, ca_r) = (TestCa::new("CA-G")?, TestCa::new("CA-R")?);
    let gitlab_leaf = ca_g.issue(d, "gitlab")?;
    let relay_leaf = ca_r.issue(d, "relay")?;
    let system_cas = ca_g.write(&d.join("system-ca.pem"))?;
    let sha = make_repository(&d.join("git"), &d.join("work"))?;

    let gitlab = FakeGitLab::start_trusting(
        &[
            "--trace-update-interval",
            "1",
            "--tls-cert",
            &gitlab_leaf.chain.to_string_lossy(),
            "--tls-key",
            &gitlab_leaf.key.to_string_lossy(),
            "--git-dir",
            &d.join("git").to_string_lossy(),
        ],
        ca_g.pem.as_bytes(),
    )
    .await?;
    ensure!(gitlab.url.starts_with("https://"), "{}", gitlab.url);
    let machines_root = d.join("machines");
    let _cleanup = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let pool = PoolSpec::local(
        "tls",
        &machines_root,
        "max_machines = 1\nidle_time = \"60s\"",
        sidecar,
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let tls = format!(
        "long_poll_timeout = \"10s\"\n\n[server.tls]\ncertificate = \"{}\"\nkey = \"{}\"\nsystem_ca_files = [\"/nonexistent/ca.crt\", \"{}\"]\n",
        relay_leaf.chain.display(),
        relay_leaf.key.display(),
        system_cas.display(),
    );
    let system_cas_str = system_cas.to_string_lossy().into_owned();
    let autoscaler = Autoscaler::start_with_env(
        &d.join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &tls,
        &[("SSL_CERT_FILE", &system_cas_str)],
    )
    .await?;
    ensure!(autoscaler.url.starts_with("https://"), "{}", autoscaler.url);

    let repo_url = format!("{}/git/group/project.git", gitlab.url);
    let mut spec = JobSpec::new(
        &pool.upstream_token,
        &[
            "cat hello.txt",
            "test -s \"$CI_SERVER_TLS_CA_FILE\" && echo ca-file-given",
        ],
    );
    spec.repo_url = Some(repo_url.clone());
    spec.sha = Some(sha);
    // git's dumb HTTP protocol cannot make shallow clones.
    spec.variables.push(JobVariable::new("GIT_DEPTH", "0"));
    let id = gitlab.control.enqueue(&spec).await?.id;
    let view = gitlab.control.wait_final(id, WITHIN).await?;
    let trace = String::from_utf8_lossy(&gitlab.control.trace(id).await?).into_owned();
    ensure!(
        view.status == JobStatus::Success,
        "job {id}: {view:?}\n{trace}"
    );
    ensure!(
        trace.contains("cloned over https") && trace.contains("ca-file-given"),
        "{trace}"
    );

    // The bundle on the machine: the relay's CA, then the machine's system CAs.
    let bundle_path = std::fs::read_dir(&machines_root)?
        .flatten()
        .map(|e| e.path().join("home/autoscaler-sidecar/ca.crt"))
        .find(|p| p.exists())
        .context("no CA bundle on the machine")?;
    let bundle = std::fs::read_to_string(&bundle_path)?;
    let norm = |s: &str| s.replace('\r', "");
    ensure!(
        norm(&bundle) == norm(&format!("{}{}", ca_r.pem, ca_g.pem)),
        "{bundle}"
    );

    // What the job's clone relied on: with CA-R alone, the same clone fails; with the bundle
    // the sidecar was given, it works.
    let only_r = ca_r.write(&d.join("only-relay-ca.pem"))?;
    let clone = |ca: &Path, into: &str| {
        StdCommand::new("git")
            .arg("-c")
            .arg(format!("http.sslCAInfo={}", ca.display()))
            .args(["clone", "-q", &repo_url, into])
            .current_dir(d)
            .env("GIT_TERMINAL_PROMPT", "0")
            // Either would take precedence over http.sslCAInfo.
            .env_remove("GIT_SSL_CAINFO")
            .env_remove("GIT_SSL_CAPATH")
            .output()
    };
    let refused = clone(&only_r, "with-relay-ca-only")?;
    ensure!(
        !refused.status.success(),
        "a clone trusting only CA-R succeeded"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    ensure!(
        stderr.contains("certificate") || stderr.contains("ssl"),
        "{stderr}"
    );
    let cloned = clone(&bundle_path, "with-bundle")?;
    ensure!(
        cloned.status.success(),
        "{}",
        String::from_utf8_lossy(&cloned.stderr)
    );
    Ok(())
}

const BAD_CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n";

fn config_with_tls(dir: &Path, cert: &Path, key: &Path) -> Result<std::path::PathBuf> {
    let path = dir.join("autoscaler.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[server.tls]\ncertificate = \"{}\"\nkey = \"{}\"\n\n\
             [state]\ndir = \"state\"\n\n[upstream]\nurl = \"http://127.0.0.1:9\"\n\n\
             [[pools]]\nname = \"p\"\nupstream_token = \"glrt-unused\"\n",
            cert.display(),
            key.display()
        ),
    )?;
    Ok(path)
}

/// Runs `autoscaler <verb> --config <config>`; returns its exit code and stderr.
fn autoscaler(verb: &str, config: &Path) -> Result<(Option<i32>, String)> {
    let out = StdCommand::new(binary("autoscaler")?)
        .args([verb, "--config"])
        .arg(config)
        .output()?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn a_certificate_that_does_not_parse_or_a_key_that_does_not_match_is_a_configuration_error()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let ca = TestCa::new("CA-R")?;
    let good = ca.issue(d, "good")?;
    let other = ca.issue(d, "other")?;
    let garbage = d.join("garbage.pem");
    std::fs::write(&garbage, BAD_CERT)?;

    let config = config_with_tls(d, &garbage, &good.key)?;
    for verb in ["check-config", "run"] {
        let (code, stderr) = autoscaler(verb, &config)?;
        ensure!(code == Some(64), "{verb}: exit {code:?}\n{stderr}");
        ensure!(
            stderr.contains("server.tls.certificate") && stderr.contains("garbage.pem"),
            "{verb}: {stderr}"
        );
    }
    let config = config_with_tls(d, &good.chain, &other.key)?;
    for verb in ["check-config", "run"] {
        let (code, stderr) = autoscaler(verb, &config)?;
        ensure!(code == Some(64), "{verb}: exit {code:?}\n{stderr}");
        ensure!(
            stderr.contains("server.tls.key")
                && stderr.contains("other.key")
                && stderr.contains("does not match"),
            "{verb}: {stderr}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_new_handshakes_the_new_certificate_and_keeps_open_connections()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (ca_r, ca_r2) = (TestCa::new("CA-R")?, TestCa::new("CA-R2")?);
    let first = ca_r.issue(d, "relay")?;
    let gitlab = FakeGitLab::start(&[]).await?;
    let pool = PoolSpec::new("static");
    gitlab.add_runner(&pool.upstream_token).await?;
    let tls = format!(
        "[server.tls]\ncertificate = \"{}\"\nkey = \"{}\"\n",
        first.chain.display(),
        first.key.display()
    );
    let autoscaler = Autoscaler::start(
        &d.join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &tls,
    )
    .await?;
    let addr = autoscaler.url.trim_start_matches("https://").to_string();
    let trust = format!("{}{}", ca_r.pem, ca_r2.pem);

    let mut open = probe::Connection::open(&addr, &trust).await?;
    ensure!(
        open.peer_leaf == first.der,
        "the first handshake did not get the first certificate"
    );
    let refused = open.verify().await?;
    ensure!(refused == 403, "an unknown token: {refused}");

    // New files from another CA, written over the old ones (the key last, as an operator's
    // tools do), then SIGHUP.
    let second = ca_r2.issue(d, "next")?;
    std::fs::copy(&second.chain, &first.chain)?;
    std::fs::copy(&second.key, &first.key)?;
    autoscaler.proc.signal(nix::sys::signal::Signal::SIGHUP)?;
    wait_for_leaf(&addr, &trust, &second.der).await?;
    // The connection opened before the reload still carries requests.
    ensure!(
        open.verify().await? == refused,
        "the open connection stopped working"
    );

    // Without a signal, a change of the files is noticed within a few seconds.
    let third = ca_r.issue(d, "third")?;
    std::fs::copy(&third.chain, &first.chain)?;
    std::fs::copy(&third.key, &first.key)?;
    wait_for_leaf(&addr, &trust, &third.der).await?;
    ensure!(
        open.verify().await? == refused,
        "the open connection stopped working"
    );
    Ok(())
}

/// Waits until a new handshake with `addr` presents the certificate `leaf`.
async fn wait_for_leaf(addr: &str, trust: &str, leaf: &[u8]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if probe::Connection::open(addr, trust).await?.peer_leaf == leaf {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
