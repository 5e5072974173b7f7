//! The command line: `autoscaler run --config FILE`, `autoscaler check-config --config FILE`,
//! `autoscaler provisioner check PATH`, `autoscaler simulate WORKLOAD --policy FILE|--oracle`,
//! `autoscaler import-config FILE`, `autoscaler history`, and the operator's commands that call a running
//! autoscaler's admin API (`admin.rs`).

mod admin;
mod history_cli;
mod serve;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::provisioner::Timeouts;
use crate::provisioner::check::{self, CheckOptions};
use crate::telemetry;

/// Exit codes, from sysexits(3), so that supervisors and scripts can tell failures apart.
pub mod exit {
    /// The configuration is wrong (EX_USAGE).
    pub const CONFIG: u8 = 64;
    /// The store is corrupt or from a newer version (EX_DATAERR).
    pub const STORE_DATA: u8 = 65;
    /// The listen address cannot be bound (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// The store cannot be read or written (EX_IOERR).
    pub const STORE_IO: u8 = 74;
    /// GitLab refused an upstream token (EX_NOPERM).
    pub const TOKEN_REJECTED: u8 = 77;
}

#[derive(Debug, Parser)]
#[command(
    name = "autoscaler",
    version,
    about = "An autoscaler for GitLab CI runners"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service.
    Run {
        #[arg(long, short, env = "AUTOSCALER_CONFIG")]
        config: PathBuf,
    },
    /// Validate a configuration file (with the environment's overrides) and exit.
    CheckConfig {
        #[arg(long, short, env = "AUTOSCALER_CONFIG")]
        config: PathBuf,
    },
    /// Provisioner tools.
    #[command(subcommand)]
    Provisioner(ProvisionerCommand),
    /// Turn a gitlab-runner config.toml that autoscales ([runners.autoscaler] or
    /// [runners.machine]) into a configuration for this autoscaler, naming every setting that
    /// could not be carried over (on stderr).
    ImportConfig {
        /// The gitlab-runner configuration.
        file: PathBuf,
        /// Write the configuration here (mode 600: it holds the runners' tokens), not stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Where the provisioners are installed.
        #[arg(long, default_value = crate::import::DEFAULT_PROVISIONERS_DIR)]
        provisioners_dir: PathBuf,
    },
    /// Run a workload through the scaling planner in virtual time, against a modelled cloud,
    /// and print a JSON report (job waits, machine-minutes, machines made, cost).
    Simulate {
        /// The workload: a TOML file of arrivals and pipelines (see deploy/simulate/), or a
        /// replay of recorded jobs, `*.tsv`: a header line, then one job a line, tab-separated:
        /// ready (RFC 3339), duration, project, pipeline, stage, name, class, and optionally
        /// status (success, failed or canceled: a failed job's later stages are not
        /// forecast, as GitLab skips them). A replayed job is
        /// pending at its recorded ready time, and not before the earlier-stage jobs of its
        /// pipeline that had ended by then have ended in the run (deploy/simulate/MODEL.md).
        workload: PathBuf,
        /// The policy file: pools with their scaling settings and modelled cloud.
        #[arg(long, required_unless_present = "oracle", conflicts_with = "oracle")]
        policy: Option<PathBuf>,
        /// Instead of a policy, the clairvoyant lower bound: a machine ready exactly when
        /// each job is pending, reused when free, and the booting and idle machine-minutes
        /// that costs (deploy/simulate/MODEL.md).
        #[arg(long)]
        oracle: bool,
        /// The oracle's boot time, create request to ready.
        #[arg(long, requires = "oracle", default_value = "60s", value_parser = humantime::parse_duration)]
        boot_time: std::time::Duration,
        /// Instead of one run, one run per `target_wait` (comma-separated, e.g.
        /// 10s,20s,30s,45s,60s,90s), every demand-aware pool of the policy set to it: each run's
        /// p95 wait and machine time paid for no job, which runs are on the frontier, and each
        /// run's whole report.
        #[arg(long, conflicts_with = "oracle", value_delimiter = ',', value_parser = parse_target_wait)]
        target_waits: Vec<std::time::Duration>,
    },
    /// Export a runner's finished jobs from GitLab's REST API as a replay file for
    /// `simulate` (one job a line: ready, duration, project, pipeline, stage, name, class).
    /// The API token comes from GITLAB_API_TOKEN (read_api scope; its user must see the runner).
    History {
        /// GitLab's URL, e.g. https://gitlab.example.com.
        #[arg(long)]
        url: String,
        /// The runner's id (GitLab's admin area, or `GET /api/v4/runners`).
        #[arg(long)]
        runner: u64,
        /// Leave out jobs pending before this: an RFC 3339 time, or a duration ago (`7d`).
        #[arg(long)]
        since: Option<String>,
        /// The replay's class column (the pool's machine class) for every job.
        #[arg(long, default_value = "default")]
        class: String,
        /// Write the replay here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    #[command(flatten)]
    Admin(admin::AdminCommand),
}

#[derive(Debug, Subcommand)]
enum ProvisionerCommand {
    /// Run a provisioner through every clause of the protocol (api-spec/provisioner.md) and
    /// report each clause that fails. Creates and destroys one real machine.
    Check {
        /// The provisioner executable.
        path: PathBuf,
        /// A variable for the provisioner's environment (as a pool's `env`), repeatable.
        #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        env: Vec<(String, String)>,
        /// The pool name the provisioner is told.
        #[arg(long, default_value = "check")]
        pool: String,
        /// One timeout for every verb, instead of the protocol's defaults (e.g. `30s`).
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<std::time::Duration>,
    },
}

/// A `target_wait` as the policy file takes it: a duration of at most an hour.
fn parse_target_wait(s: &str) -> Result<std::time::Duration, String> {
    let target = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    if target > std::time::Duration::from_secs(3600) {
        return Err(format!("{s:?}: a target_wait must be at most 1h"));
    }
    Ok(target)
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

impl Cli {
    pub fn run(self) -> ExitCode {
        match self.command {
            Command::CheckConfig { config } => match load(&config) {
                Ok(c) => {
                    report(&format!(
                        "{}: configuration is valid ({} pool{}: {})",
                        config.display(),
                        c.pools.len(),
                        if c.pools.len() == 1 { "" } else { "s" },
                        c.pools
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    for pool in &c.pools {
                        report(&format!("  {}", strategy_line(pool)));
                    }
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            },
            Command::Run { config } => match load(&config) {
                Ok(c) => serve::run(c),
                Err(code) => code,
            },
            Command::Simulate {
                workload,
                policy,
                oracle: _,
                boot_time,
                target_waits,
            } => match policy {
                Some(policy) if !target_waits.is_empty() => print_simulation(
                    crate::simulate::sweep_target_wait(&workload, &policy, &target_waits),
                ),
                Some(policy) => {
                    // The planner's decisions go to stderr when asked for
                    // (`RUST_LOG=autoscaler::simulate=debug`); stdout stays the report.
                    let _log_writer = telemetry::init_if_asked();
                    print_simulation(crate::simulate::simulate(&workload, &policy))
                }
                None => print_simulation(crate::simulate::oracle(&workload, boot_time)),
            },
            Command::Provisioner(ProvisionerCommand::Check {
                path,
                env,
                pool,
                timeout,
            }) => check_provisioner(path, env, pool, timeout),
            Command::ImportConfig {
                file,
                output,
                provisioners_dir,
            } => crate::import::import_config(&file, output.as_deref(), provisioners_dir),
            Command::History {
                url,
                runner,
                since,
                class,
                output,
            } => history_cli::run(url, runner, since, class, output.as_deref()),
            Command::Admin(command) => admin::run(command),
        }
    }
}

/// A simulation's report as JSON on stdout, or its error on stderr with exit 64 (bad input).
fn print_simulation(
    result: Result<impl serde::Serialize, crate::simulate::SimulateError>,
) -> ExitCode {
    match result {
        Ok(r) => match serde_json::to_string_pretty(&r) {
            Ok(json) => {
                print_report(&json);
                ExitCode::SUCCESS
            }
            Err(e) => {
                report(&format!("cannot write the report: {e}"));
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            report(&e.to_string());
            ExitCode::from(exit::CONFIG)
        }
    }
}

fn check_provisioner(
    path: PathBuf,
    env: Vec<(String, String)>,
    pool: String,
    timeout: Option<std::time::Duration>,
) -> ExitCode {
    let mut options = CheckOptions::new(path);
    options.pool = pool;
    options.env = env.into_iter().collect();
    if let Some(t) = timeout {
        options.timeouts = Timeouts {
            info: t,
            create: t,
            list: t,
            status: t,
            destroy: t,
        };
    }
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let result = runtime.block_on(check::check(options));
    print_report(&result.to_string());
    if result.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[allow(clippy::print_stdout)]
fn print_report(text: &str) {
    println!("{text}");
}

/// The multi-threaded runtime `run` and `provisioner check` work on; a failure to make one is
/// reported and becomes the exit code.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            report(&format!("cannot start the async runtime: {e}"));
            ExitCode::FAILURE
        })
}

#[allow(clippy::print_stderr)]
fn report(message: &str) {
    eprintln!("{message}");
}

/// What decides a pool's machines, and why: `check-config` says it, so that no setting changes
/// the strategy unseen.
fn strategy_line(pool: &crate::config::PoolConfig) -> String {
    if pool.sources.is_empty() {
        return format!(
            "pool {:?}: static (its sidecars register themselves)",
            pool.name
        );
    }
    let scaling = &pool.scaling;
    let strategy = match scaling.strategy {
        crate::core::scaler::Strategy::Demand => "demand",
        crate::core::scaler::Strategy::Idle => "idle",
    };
    let mut line = format!(
        "pool {:?}: strategy {strategy} ({})",
        pool.name, scaling.strategy_chosen_by
    );
    let entries = pool.policies.len();
    if entries > 0 {
        let role = match scaling.strategy {
            crate::core::scaler::Strategy::Demand => "floors under the forecast",
            crate::core::scaler::Strategy::Idle => "the idle target in their periods",
        };
        line.push_str(&format!(
            "; {entries} [[pools.policy]] entr{}: {role}",
            if entries == 1 { "y" } else { "ies" }
        ));
    }
    line
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path, std::env::vars()).map_err(|e| {
        report(&e.to_string());
        ExitCode::from(exit::CONFIG)
    })
}
