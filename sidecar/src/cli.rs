//! Command-line interface. `--url`/`--token` may come from `SIDECAR_URL`/`SIDECAR_TOKEN`
//! but never from `CI_SERVER_URL`/`CI_SERVER_TOKEN`: those are set inside CI jobs and would
//! silently point a sidecar started from a job at upstream GitLab (runner-protocol.md §2.1).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::executor::user::{JobUser, JobUserError};
use crate::runner::RunnerConfig;
use crate::secret::Secret;

#[derive(Debug, Parser)]
#[command(
    name = "sidecar",
    version,
    about = "Compact GitLab runner with a shell executor"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register a runner with a registration token (POST /api/v4/runners); prints
    /// {"id":…,"token":…} on stdout. A `glrt-` token is verified instead.
    Register(RegisterArgs),
    /// Check that a runner token is valid (POST /api/v4/runners/verify).
    Verify(TokenArgs),
    /// Remove the runner (manager) from GitLab.
    Unregister(UnregisterArgs),
    /// Poll for jobs and run them (alias: run-single).
    #[command(alias = "run-single")]
    Run(RunArgs),
}

/// Trust for an HTTPS server whose CA is not among the system's (`tls-ca-file` of a stock
/// runner).
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// PEM CA certificates trusted for the server on top of the system's; also handed to jobs
    /// as CI_SERVER_TLS_CA_FILE and to git for clones, so it should hold GitLab's CA too.
    #[arg(long, env = "SIDECAR_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// GitLab URL.
    #[arg(long, env = "SIDECAR_URL")]
    pub url: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[arg(long, env = "SIDECAR_REGISTRATION_TOKEN", hide_env_values = true)]
    pub registration_token: Secret,
    #[arg(long, default_value = "")]
    pub description: String,
    /// Where the system id is kept (used when a `glrt-` token is verified).
    #[arg(long, default_value = ".runner_system_id")]
    pub system_id_file: PathBuf,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[arg(long, env = "SIDECAR_URL")]
    pub url: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[arg(long, env = "SIDECAR_TOKEN", hide_env_values = true)]
    pub token: Secret,
    #[arg(long, default_value = ".runner_system_id")]
    pub system_id_file: PathBuf,
}

#[derive(Debug, Args)]
pub struct UnregisterArgs {
    #[command(flatten)]
    pub target: TokenArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long, env = "SIDECAR_URL")]
    pub url: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[arg(long, env = "SIDECAR_TOKEN", hide_env_values = true)]
    pub token: Secret,
    /// Parallel jobs (one worker each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent: u16,
    /// Where jobs run (default: `builds`, or with `--job-user` `builds/<name>-<pid>` in that
    /// user's home).
    #[arg(long)]
    pub builds_dir: Option<PathBuf>,
    /// Run job scripts as this unprivileged user (the sidecar must run as root), so that
    /// jobs cannot read the sidecar's token or files.
    #[arg(long, env = "SIDECAR_JOB_USER")]
    pub job_user: Option<String>,
    /// Exit after this many jobs (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    pub max_builds: u64,
    /// Exit when no job arrived for this long (e.g. `30s`, `5m`, or plain seconds).
    #[arg(long, value_parser = parse_duration)]
    pub wait_timeout: Option<Duration>,
    /// Wait after an empty job request or an error.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub check_interval: Duration,
    /// Runner name shown in job logs.
    #[arg(long, default_value = "sidecar")]
    pub name: String,
    #[arg(long, default_value = ".runner_system_id")]
    pub system_id_file: PathBuf,
    /// Job log limit in KiB.
    #[arg(long, default_value_t = 4096)]
    pub output_limit: usize,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Durations as humantime (`3s`, `1m30s`) or a plain number of seconds.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(value).map_err(|e| e.to_string())
}

impl RunArgs {
    /// Runner configuration; relative directories are made absolute against `cwd` since
    /// job scripts `cd` into the project directory.
    pub fn to_config(&self, cwd: &std::path::Path) -> Result<RunnerConfig, JobUserError> {
        let job_user = self.job_user.as_deref().map(JobUser::lookup).transpose()?;
        let builds_dir = match (&self.builds_dir, &job_user) {
            (Some(dir), _) => cwd.join(dir),
            // The process id keeps two sidecars of one host apart (local sandboxes share the
            // job user's home), whose job ids may be the same.
            (None, Some(user)) => {
                user.home
                    .join("builds")
                    .join(format!("{}-{}", self.name, std::process::id()))
            }
            (None, None) => cwd.join("builds"),
        };
        Ok(RunnerConfig {
            url: self.url.clone(),
            token: self.token.clone(),
            concurrent: usize::from(self.concurrent),
            builds_dir,
            job_user,
            max_builds: self.max_builds,
            wait_timeout: self.wait_timeout,
            check_interval: self.check_interval,
            name: self.name.clone(),
            system_id_file: cwd.join(&self.system_id_file),
            output_limit: self.output_limit.saturating_mul(1024),
            tls_ca_file: self.tls.tls_ca_file.as_ref().map(|f| cwd.join(f)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn run_single_is_an_alias_and_defaults_apply() {
        let cli = Cli::try_parse_from([
            "sidecar",
            "run-single",
            "--url",
            "http://x",
            "--token",
            "glrt-abc",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(args.concurrent, 1);
        assert_eq!(args.check_interval, Duration::from_secs(3));
        assert_eq!(args.output_limit, 4096);
        assert_eq!(args.max_builds, 0);
        assert!(args.wait_timeout.is_none());
        let cfg = args.to_config(std::path::Path::new("/w")).unwrap();
        assert_eq!(cfg.builds_dir, PathBuf::from("/w/builds"));
        assert_eq!(cfg.output_limit, 4096 * 1024);
        assert!(!format!("{args:?}").contains("glrt-abc"));
    }

    #[test]
    fn ci_server_variables_are_not_read() {
        // Every env fallback of every subcommand is a SIDECAR_* variable.
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut seen = 0;
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                if let Some(env) = arg.get_env() {
                    seen += 1;
                    assert!(env.to_string_lossy().starts_with("SIDECAR_"), "{env:?}");
                }
            }
        }
        assert!(seen >= 7);
    }
}
