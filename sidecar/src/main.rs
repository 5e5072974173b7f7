//! The `sidecar` binary: parse the CLI, set up logging and signals, dispatch.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sidecar::cli::{Cli, Command, LogFormat};
use sidecar::client::{Client, VerifyOutcome};
use sidecar::protocol::RunnerInfo;
use sidecar::runner::{self, Shutdown, load_or_create_system_id};

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: on a machine the log goes to a file.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// First SIGTERM/SIGINT: graceful; second: force.
fn spawn_signal_handler(shutdown: Shutdown) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            count += 1;
            if count == 1 {
                tracing::warn!(
                    "shutdown requested: no new jobs, waiting for running jobs (signal again to abort them)"
                );
                shutdown.graceful.cancel();
            } else {
                tracing::warn!("second signal: aborting running jobs");
                shutdown.force.cancel();
                return;
            }
        }
    });
    Ok(())
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Register(args) => {
            let client = client_for(&args.url, &args.tls)?;
            let creds = if args.registration_token.expose().starts_with("glrt-") {
                // An authentication token is only verified, like `gitlab-runner register`.
                let system_id = load_or_create_system_id(&args.system_id_file)?;
                match client
                    .verify(&args.registration_token, &system_id, &RunnerInfo::sidecar())
                    .await
                {
                    VerifyOutcome::Valid(c) if c.id != 0 => c,
                    VerifyOutcome::Valid(_) => anyhow::bail!("verification returned no runner id"),
                    VerifyOutcome::Invalid => anyhow::bail!("the runner token is not valid"),
                    VerifyOutcome::Error(e) => return Err(e).context("verifying the runner token"),
                }
            } else {
                client
                    .register(
                        &args.registration_token,
                        &args.description,
                        &RunnerInfo::for_registration(),
                    )
                    .await
                    .context("Failed to register the runner")?
            };
            let out = serde_json::json!({"id": creds.id, "token": creds.token.expose()});
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{out}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify(args) => {
            let client = client_for(&args.url, &args.tls)?;
            let system_id = load_or_create_system_id(&args.system_id_file)?;
            match client
                .verify(&args.token, &system_id, &RunnerInfo::sidecar())
                .await
            {
                VerifyOutcome::Valid(c) => {
                    tracing::info!(id = c.id, "runner token is valid");
                    Ok(ExitCode::SUCCESS)
                }
                VerifyOutcome::Invalid => {
                    tracing::error!("runner token is not valid or the runner was removed");
                    Ok(ExitCode::FAILURE)
                }
                VerifyOutcome::Error(e) => Err(e).context("verifying the runner token"),
            }
        }
        Command::Unregister(args) => {
            let target = args.target;
            let client = client_for(&target.url, &target.tls)?;
            // glrt- tokens: the runner manager of this system id; others: legacy DELETE.
            let system_id = if target.token.expose().starts_with("glrt-") {
                Some(load_or_create_system_id(&target.system_id_file)?)
            } else {
                None
            };
            client
                .unregister(&target.token, system_id.as_deref())
                .await
                .context("unregistering the runner")?;
            tracing::info!("runner unregistered");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => {
            let cwd = std::env::current_dir().context("current directory")?;
            let config = args.to_config(&cwd)?;
            let shutdown = Shutdown::default();
            spawn_signal_handler(shutdown.clone())?;
            runner::run(config, shutdown).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The HTTP client for `url`, trusting `--tls-ca-file` when given.
fn client_for(url: &str, tls: &sidecar::cli::TlsArgs) -> anyhow::Result<Client> {
    let ca = tls
        .tls_ca_file
        .as_deref()
        .map(sidecar::client::ca::CaBundle::read)
        .transpose()?;
    Ok(Client::with_ca(url, ca.as_ref())?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Run(args) => args.log_format,
        _ => LogFormat::Text,
    };
    init_logging(format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
