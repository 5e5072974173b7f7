//! The built-in sidecar: a compact GitLab runner with a shell executor that speaks the
//! protocol of a stock `gitlab-runner run-single` (see `api-spec/runner-protocol.md`).
//!
//! Layout:
//! * [`client`] — HTTP calls to GitLab, with the HTTP-level retry policy of runner-protocol.md §1.1.
//! * [`protocol`] — request/response bodies and the job payload (§3, §4).
//! * [`trace`] — job log: masking, output limit, checksum and offsets (§5, §6).
//! * [`executor`] — bash script generation and process-group handling.
//! * [`artifacts`] — zip/gzip archives, upload and download (§7).
//! * [`job`] — one job's lifecycle from acceptance to the final update, with the loop that
//!   ships its trace and state (`job::updater`).
//! * [`runner`] — the worker loop (`run`/`run-single`), shutdown.
//! * [`system_id`] — the runner's system id, kept in a file.
//! * [`cli`] — command-line parsing.

pub mod artifacts;
pub mod cli;
pub mod client;
pub mod executor;
pub mod job;
pub mod protocol;
pub mod runner;
pub mod secret;
pub mod system_id;
pub mod trace;

/// Name reported in `info.name` and the User-Agent (runner-protocol.md §1, §3.1).
pub const NAME: &str = "sidecar";
/// Crate version, reported as `info.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Source revision, injected at build time through `SIDECAR_REVISION` when available.
pub const REVISION: &str = match option_env!("SIDECAR_REVISION") {
    Some(rev) => rev,
    None => "unknown",
};
