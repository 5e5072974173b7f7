//! `autoscaler history`: the export run from the command line, its summary on stderr and its
//! failures mapped to exit codes.

use std::path::Path;
use std::process::ExitCode;

use chrono::{DateTime, Utc};

use super::{exit, print_report, report};
use crate::clock::{Clock, SystemClock};
use crate::history::{self, HistoryError, HistoryRequest};

/// Where the API token is read from: never a flag, which other users see in `ps`.
const TOKEN_VARIABLE: &str = "GITLAB_API_TOKEN";

/// `--since`: an RFC 3339 time, or a duration back from `now` (`7d`, `36h`).
fn parse_since(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let ago = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is neither an RFC 3339 time nor a duration ({e})"))?;
    chrono::TimeDelta::from_std(ago)
        .ok()
        .and_then(|ago| now.checked_sub_signed(ago))
        .ok_or_else(|| format!("{s:?} reaches too far back"))
}

pub(super) fn run(
    url: String,
    runner: u64,
    since: Option<String>,
    class: String,
    output: Option<&Path>,
) -> ExitCode {
    let clock = SystemClock;
    let now = DateTime::from_timestamp_millis(i64::try_from(clock.now()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    let since = match since.map(|s| parse_since(&s, now)).transpose() {
        Ok(since) => since,
        Err(e) => {
            report(&format!("history: --since: {e}"));
            return ExitCode::from(exit::CONFIG);
        }
    };
    let Some(token) = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty()) else {
        report(&format!(
            "history: set {TOKEN_VARIABLE} to a GitLab access token with the read_api scope"
        ));
        return ExitCode::from(exit::CONFIG);
    };
    let request = HistoryRequest {
        url,
        runner,
        token,
        since,
        class,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            report(&format!("history: cannot start: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let export = match runtime.block_on(history::export(&request, &clock)) {
        Ok(export) => export,
        Err(e) => {
            report(&format!("history: {e}"));
            return ExitCode::from(exit_code(&e));
        }
    };
    let written = match output {
        Some(path) => std::fs::write(path, &export.replay).map(|()| path.display().to_string()),
        None => {
            print_report(export.replay.trim_end());
            Ok("stdout".into())
        }
    };
    match written {
        Ok(to) => {
            report(&format!(
                "history: {} finished jobs of runner {runner} from {} pages to {to} ({} still running and {} never started left out)",
                export.jobs, export.pages, export.unfinished, export.never_started
            ));
            ExitCode::SUCCESS
        }
        Err(e) => {
            report(&format!("history: cannot write the replay: {e}"));
            ExitCode::from(exit::STORE_IO)
        }
    }
}

fn exit_code(e: &HistoryError) -> u8 {
    match e {
        HistoryError::Refused { .. } => exit::TOKEN_REJECTED,
        HistoryError::NotFound { .. } => exit::CONFIG,
        HistoryError::Unavailable { .. } => exit::UNAVAILABLE,
        HistoryError::BadAnswer { .. } => exit::STORE_DATA,
        HistoryError::Client(_) => 1,
    }
}
