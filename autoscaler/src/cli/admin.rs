//! The operator's commands (`status`, `machines`, `jobs`, `job ID`, `drain`, `destroy`,
//! `pause`, `resume`): calls to a running autoscaler's admin API, shown as tables for people or
//! as the API's JSON (`--json`) for scripts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::exit;
use super::table::{age, table};

/// Where the admin API is and how to authenticate.
#[derive(Debug, Args)]
pub struct Target {
    /// The admin API's URL (default: from --config's `[admin] listen`, else
    /// http://127.0.0.1:8091).
    #[arg(long, env = "AUTOSCALER_ADMIN_URL")]
    url: Option<String>,
    /// A file holding the admin token (default: from --config's `[admin] token_file`).
    #[arg(long, env = "AUTOSCALER_ADMIN_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The autoscaler's configuration, to find the admin address and token.
    #[arg(long, short, env = "AUTOSCALER_CONFIG")]
    config: Option<PathBuf>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The service, its pools, machines and jobs at a glance.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Every machine with its state and why it left service.
    Machines {
        #[command(flatten)]
        target: Target,
    },
    /// The jobs the autoscaler holds.
    Jobs {
        #[command(flatten)]
        target: Target,
    },
    /// One job, with its timeline.
    Job {
        id: u64,
        #[command(flatten)]
        target: Target,
    },
    /// Stop giving a machine jobs; it is destroyed once its jobs ended.
    Drain {
        machine: String,
        #[command(flatten)]
        target: Target,
    },
    /// Destroy a machine that runs no job.
    Destroy {
        machine: String,
        #[command(flatten)]
        target: Target,
    },
    /// Stop a pool taking jobs from GitLab (running jobs go on).
    Pause {
        pool: String,
        #[command(flatten)]
        target: Target,
    },
    /// Let a paused pool take jobs again.
    Resume {
        pool: String,
        #[command(flatten)]
        target: Target,
    },
}

impl AdminCommand {
    fn target(&self) -> &Target {
        match self {
            AdminCommand::Status { target }
            | AdminCommand::Machines { target }
            | AdminCommand::Jobs { target }
            | AdminCommand::Job { target, .. }
            | AdminCommand::Drain { target, .. }
            | AdminCommand::Destroy { target, .. }
            | AdminCommand::Pause { target, .. }
            | AdminCommand::Resume { target, .. } => target,
        }
    }
}

/// Why a command failed, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the admin API at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("the admin API refused the token ({0}): give --token-file or --config")]
    Unauthorized(String),
    #[error("{0}")]
    Refused(String),
}

impl CommandError {
    fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CommandError::Usage(_) => exit::CONFIG,
            CommandError::Unreachable { .. } => exit::UNAVAILABLE,
            CommandError::Unauthorized(_) => exit::TOKEN_REJECTED,
            CommandError::Refused(_) => 1,
        })
    }
}

pub fn run(command: AdminCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            super::report(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(&command)) {
        Ok(text) => {
            super::print_report(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::report(&format!("autoscaler: {e}"));
            e.exit_code()
        }
    }
}

async fn execute(command: &AdminCommand) -> Result<String, CommandError> {
    let target = command.target();
    let (url, token) = resolve(target)?;
    let client = Client { url, token };
    let (method, path) = match command {
        AdminCommand::Status { .. } => ("GET", "/status".to_string()),
        AdminCommand::Machines { .. } => ("GET", "/machines".to_string()),
        AdminCommand::Jobs { .. } => ("GET", "/jobs".to_string()),
        AdminCommand::Job { id, .. } => ("GET", format!("/jobs/{id}")),
        AdminCommand::Drain { machine, .. } => ("POST", format!("/machines/{machine}/drain")),
        AdminCommand::Destroy { machine, .. } => ("POST", format!("/machines/{machine}/destroy")),
        AdminCommand::Pause { pool, .. } => ("POST", format!("/pools/{pool}/pause")),
        AdminCommand::Resume { pool, .. } => ("POST", format!("/pools/{pool}/resume")),
    };
    let body = client.call(method, &path).await?;
    if target.json {
        return Ok(serde_json::to_string_pretty(&body).unwrap_or_default());
    }
    Ok(match command {
        AdminCommand::Status { .. } => show_status(&body),
        AdminCommand::Machines { .. } => show_machines(&body),
        AdminCommand::Jobs { .. } => show_jobs(&body),
        AdminCommand::Job { .. } => show_job(&body),
        AdminCommand::Drain { machine, .. } | AdminCommand::Destroy { machine, .. } => {
            format!("machine {machine} is {}", text(&body["state"]))
        }
        AdminCommand::Pause { pool, .. } => format!("pool {pool} is paused: it takes no jobs"),
        AdminCommand::Resume { pool, .. } => format!("pool {pool} takes jobs again"),
    })
}

/// The URL and token, from the flags, else the configuration, else the defaults.
fn resolve(target: &Target) -> Result<(String, Option<String>), CommandError> {
    let config = match &target.config {
        Some(path) => Some(
            crate::config::Config::load(path, std::env::vars())
                .map_err(|e| CommandError::Usage(e.to_string()))?,
        ),
        None => None,
    };
    let admin = config.as_ref().and_then(|c| c.admin.as_ref());
    let url = target
        .url
        .clone()
        .or_else(|| admin.map(|a| format!("http://{}", a.listen)))
        .unwrap_or_else(|| "http://127.0.0.1:8091".to_string());
    let token = match &target.token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| CommandError::Usage(format!("{}: {e}", file.display())))?
                .trim()
                .to_string(),
        ),
        None => admin.and_then(|a| a.token.as_ref().map(|t| t.expose().to_string())),
    };
    Ok((url.trim_end_matches('/').to_string(), token))
}

#[derive(Debug)]
struct Client {
    url: String,
    token: Option<String>,
}

impl Client {
    async fn call(&self, method: &str, path: &str) -> Result<Value, CommandError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| CommandError::Usage(e.to_string()))?;
        let url = format!("{}{path}", self.url);
        let mut request = match method {
            "POST" => http.post(&url),
            _ => http.get(&url),
        };
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| CommandError::Unreachable {
                url: self.url.clone(),
                detail: e.to_string(),
            })?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = || {
            body.get("error")
                .and_then(Value::as_str)
                .map_or_else(|| status.to_string(), str::to_string)
        };
        match status.as_u16() {
            200..=299 => Ok(body),
            401 => Err(CommandError::Unauthorized(message())),
            _ => Err(CommandError::Refused(message())),
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `{"ready": 2, "busy": 1}` as `ready=2 busy=1`.
fn counts(v: &Value) -> String {
    let parts: Vec<String> = v
        .as_object()
        .map(|o| o.iter().map(|(k, n)| format!("{k}={n}")).collect())
        .unwrap_or_default();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn show_status(v: &Value) -> String {
    let mut out = format!(
        "autoscaler {}{}\nmachines: {}\njobs: {}\n\n",
        text(&v["version"]),
        if v["draining"] == Value::Bool(true) {
            " (draining)"
        } else {
            ""
        },
        counts(&v["machines"]),
        counts(&v["jobs"]),
    );
    out.insert_str(out.len() - 1, &configuration(&v["config"]));
    let rows = items(&v["pools"])
        .iter()
        .map(|p| {
            let paused = if p["paused_by_operator"] == Value::Bool(true) {
                "by operator".to_string()
            } else {
                p["paused"].as_str().unwrap_or("no").to_string()
            };
            vec![
                text(&p["name"]),
                text(&p["intake"]),
                p["target_wait_seconds"]
                    .as_f64()
                    .map_or_else(|| "-".into(), |s| format!("{s}s")),
                paused,
                counts(&p["machines"]),
                counts(&p["jobs"]),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "POOL",
            "INTAKE",
            "WAIT TARGET",
            "PAUSED",
            "MACHINES",
            "JOBS",
        ],
        rows,
    ));
    out
}

/// The status line of the configuration in force, e.g. `configuration: generation 2, last
/// reload 5m ago: applied (pools[0].scaling.idle_count: 1 -> 2)`.
fn configuration(config: &Value) -> String {
    let last = &config["last_reload"];
    let reload = if last.is_object() {
        let details: Vec<String> = items(&last["details"]).iter().map(text).collect();
        let details = if details.is_empty() {
            String::new()
        } else {
            format!(" ({})", details.join("; "))
        };
        format!(
            ", last reload {} ago: {}{details}",
            age(last["at"].as_u64()),
            text(&last["outcome"]),
        )
    } else {
        String::new()
    };
    format!(
        "configuration: generation {}{reload}\n",
        text(&config["generation"])
    )
}

fn show_machines(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|m| {
            vec![
                text(&m["id"]),
                text(&m["pool"]),
                text(&m["state"]),
                age(m["since"].as_u64()),
                text(&m["use_count"]),
                text(&m["reason"]),
            ]
        })
        .collect();
    table(
        &["MACHINE", "POOL", "STATE", "FOR", "JOBS RUN", "REASON"],
        rows,
    )
}

fn show_jobs(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|j| {
            vec![
                text(&j["id"]),
                text(&j["pool"]),
                text(&j["phase"]),
                age(j["accepted_at"].as_u64()),
                text(&j["machine"]),
            ]
        })
        .collect();
    table(&["JOB", "POOL", "PHASE", "TAKEN", "MACHINE"], rows)
}

fn show_job(v: &Value) -> String {
    let mut out = format!(
        "job {} (pool {}): {}{}\n",
        text(&v["id"]),
        text(&v["pool"]),
        text(&v["phase"]),
        v["machine"]
            .as_str()
            .map(|m| format!(" on machine {m}"))
            .unwrap_or_default(),
    );
    let rows: Vec<Vec<String>> = items(&v["timeline"])
        .iter()
        .map(|s| {
            vec![
                super::table::clock(s["at"].as_u64()),
                text(&s["step"]),
                text(&s["detail"]),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(&["AT", "STEP", "DETAIL"], rows));
    }
    out
}
