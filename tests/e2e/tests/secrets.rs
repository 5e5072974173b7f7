//! No token reaches a log: a stack runs jobs on a new machine with every kind of token in play
//! (the pool's upstream and registration tokens, a registered sidecar's token, the machines'
//! sidecar tokens, job tokens, the admin token, and wrong tokens presented on purpose), and
//! every log it produced is searched for each of them. The autoscaler's log also names each
//! span's ids once: a field recorded twice is printed twice.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::counting::{WITHIN, rig_logging};
use e2e::stack::register_sidecar;
use fake_gitlab::control::JobStatus;
use reqwest::{Method, StatusCode};

/// Every file under `root`, depth first.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&path)),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
    out
}

/// The fields that one span of a log line prints more than once, with the span's name
/// (`request{sidecar.id=4 pool="demo" sidecar.id=4}` gives `request: sidecar.id`). The spans
/// open the line after its level, each `name{fields}:`; quoted values may hold anything.
fn repeated_span_fields(line: &str) -> Vec<String> {
    let mut repeated = Vec::new();
    let Some(level) = ["TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "]
        .iter()
        .find_map(|l| line.find(l).map(|at| at + l.len()))
    else {
        return repeated;
    };
    let mut rest = line[level..].trim_start();
    while let Some(open) = rest.find('{') {
        let name = &rest[..open];
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            break;
        }
        let (fields, after) = span_fields(&rest[open + 1..]);
        let mut seen = std::collections::HashSet::new();
        for key in fields {
            if !seen.insert(key.clone()) {
                repeated.push(format!("{name}: {key}"));
            }
        }
        match after.strip_prefix(':') {
            Some(next) => rest = next,
            None => break,
        }
    }
    repeated
}

/// The keys of one span's `key=value` fields up to its closing brace, and what follows it.
fn span_fields(text: &str) -> (Vec<String>, &str) {
    let (mut keys, mut key) = (Vec::new(), String::new());
    let (mut in_value, mut quoted, mut escaped) = (false, false, false);
    for (at, c) in text.char_indices() {
        if quoted {
            (quoted, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if c == '}' {
            return (keys, &text[at + 1..]);
        } else if in_value {
            quoted = c == '"';
            in_value = c != ' ';
        } else if c == '=' {
            keys.push(std::mem::take(&mut key));
            in_value = true;
        } else if c != ' ' {
            key.push(c);
        }
    }
    (keys, "")
}

#[test]
fn a_field_a_span_prints_twice_is_found() {
    let twice = "2026-11-30T04:57:26.897349Z  INFO request{method=POST path=/api/v4/jobs/request \
        request_id=a299 sidecar.id=4 pool=\"demo\" sidecar.id=4 pool=\"demo\" machine.id=\"demo-2\"}: \
        autoscaler::machines: machine ready";
    assert_eq!(
        repeated_span_fields(twice),
        ["request: sidecar.id", "request: pool"]
    );
    let once = "2026-11-30T04:57:26.049429Z  INFO pass{pool=demo}:inject{pool=demo \
        machine.id=demo-2 note=\"a } and a \\\" and x=1\"}: autoscaler::machines: state changed pool=demo";
    assert!(repeated_span_fields(once).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_appears_in_any_log_the_stack_produced() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let autoscaler_log = dir.path().join("autoscaler.log");
    let r = rig_logging(
        &[],
        // The idle strategy: once every machine is drained, none is made again (the
        // demand-aware default would keep a spare for the two jobs it saw arrive together).
        "max_machines = 1\nidle_time = \"10m\"\nstrategy = \"idle\"",
        "",
        &[],
        Some(&autoscaler_log),
    )
    .await?;
    let admin_token = r.autoscaler.admin_token.clone().context("admin token")?;
    let mut tokens = vec![
        ("upstream", r.pool.upstream_token.clone()),
        ("registration", r.pool.registration_token.clone()),
        ("admin", admin_token),
    ];

    // A sidecar registered by hand, its token used, and wrong tokens refused.
    let registered =
        register_sidecar(&r.autoscaler.url, &r.pool.registration_token, "by hand").await?;
    let http = reqwest::Client::new();
    let verify = http
        .post(format!("{}/api/v4/runners/verify", r.autoscaler.url))
        .json(&serde_json::json!({"token": registered}))
        .send()
        .await?;
    ensure!(
        verify.status() == StatusCode::OK,
        "verify: {}",
        verify.status()
    );
    tokens.push(("registered sidecar", registered));
    let wrong_registration = format!("{}-wrong", r.pool.registration_token);
    let refused = http
        .post(format!("{}/api/v4/runners", r.autoscaler.url))
        .json(&serde_json::json!({"token": wrong_registration}))
        .send()
        .await?;
    ensure!(
        refused.status() == StatusCode::FORBIDDEN,
        "{}",
        refused.status()
    );
    tokens.push(("wrong registration", wrong_registration));
    let wrong_admin = format!("admin-wrong-{:016x}", rand::random::<u64>());
    let refused = http
        .get(format!("{}/status", r.autoscaler.admin_url))
        .bearer_auth(&wrong_admin)
        .send()
        .await?;
    ensure!(
        refused.status() == StatusCode::UNAUTHORIZED,
        "{}",
        refused.status()
    );
    tokens.push(("wrong admin", wrong_admin));

    // Jobs on a machine made for them, with their job tokens.
    let mut ids = Vec::new();
    for script in ["echo one", "echo two; exit 3"] {
        let job = r.gitlab.control.enqueue(&r.job(&[script])).await?;
        tokens.push(("job", job.token));
        ids.push(job.id);
    }
    for id in &ids {
        let view = r.gitlab.control.wait_final(*id, WITHIN).await?;
        ensure!(
            view.status != JobStatus::Pending && view.status != JobStatus::Running,
            "{view:?}"
        );
    }

    // The machines' sidecar tokens and logs, taken before the machines are destroyed.
    let mut logs: Vec<(String, String)> = Vec::new();
    for file in files_under(&r.machines_root) {
        let name = file.display().to_string();
        if file.file_name().is_some_and(|n| n == "token") && name.contains("autoscaler-sidecar") {
            tokens.push((
                "machine sidecar",
                std::fs::read_to_string(&file)?.trim().to_string(),
            ));
        } else if name.ends_with(".log") {
            logs.push((
                name,
                String::from_utf8_lossy(&std::fs::read(&file)?).into_owned(),
            ));
        }
    }
    ensure!(
        tokens.iter().any(|(kind, _)| *kind == "machine sidecar"),
        "no machine sidecar token found under {}",
        r.machines_root.display()
    );
    for m in r.autoscaler.machines().await? {
        let response = r
            .autoscaler
            .admin_request(Method::POST, &format!("/machines/{}/drain", m.id))
            .send()
            .await?;
        ensure!(
            response.status() == StatusCode::OK,
            "drain {}: {}",
            m.id,
            response.status()
        );
    }
    r.autoscaler
        .wait_machines(WITHIN, "every machine destroyed", |list| {
            list.iter().all(|m| m.state == MachineState::Gone)
        })
        .await?;
    logs.push((
        autoscaler_log.display().to_string(),
        std::fs::read_to_string(&autoscaler_log)?,
    ));

    // The logs are there and say what happened, with ids as fields, and hold no token.
    let main = &logs.last().context("the autoscaler's log")?.1;
    for needle in [
        "provisioner{",
        "ssh{",
        "pass{",
        "request{",
        "admin_request{",
        "machine.id=",
        "job.id=",
    ] {
        ensure!(
            main.contains(needle),
            "the autoscaler's log has no {needle:?}"
        );
    }
    for line in main.lines() {
        let repeated = repeated_span_fields(line);
        ensure!(
            repeated.is_empty(),
            "a span prints {repeated:?} more than once: {line}"
        );
    }
    ensure!(
        logs.iter().any(|(name, _)| name.ends_with("sidecar.log")),
        "no sidecar log found"
    );
    for (kind, token) in &tokens {
        ensure!(
            token.len() >= 8,
            "{kind} token {token:?} is too short to search for"
        );
        for (name, text) in &logs {
            ensure!(
                !text.contains(token.as_str()),
                "the {kind} token appears in {name}"
            );
        }
    }
    Ok(())
}
