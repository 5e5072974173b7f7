//! Logging: tracing to stderr, text or JSON, filtered by the configured level (`RUST_LOG`, when
//! set, wins so that an operator can turn up one module without editing the file).

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the subscriber. Lines are written to stderr by a thread of their own, so that a slow
/// log sink (a file during write-back, a busy journald) never stalls a request; when that
/// thread falls 128k lines behind, logging waits rather than drops lines. Keep the guard for
/// the life of the process: dropping it writes out what is still queued.
pub fn init(config: &LogConfig) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("log-writer")
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    // A second initialisation (tests, or `run` after `check-config` in one process) is harmless.
    let _ = match config.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    guard
}

/// For commands that log only when asked: with `RUST_LOG` set, [`init`] at that filter (text
/// on stderr); without it, nothing.
pub fn init_if_asked() -> Option<WorkerGuard> {
    std::env::var_os("RUST_LOG").map(|_| {
        init(&LogConfig {
            level: "warn".into(),
            format: LogFormat::Text,
        })
    })
}
