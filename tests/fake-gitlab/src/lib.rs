//! A stand-in for GitLab's runner API (see `tests/fake-gitlab/README.md`).
//!
//! [`start`] runs the server in-process on a real loopback socket; [`control::Client`] drives it
//! (enqueue jobs, inject faults, read back traces, artifacts and counters). The `fake-gitlab`
//! binary runs the same server as a process.
//!
//! Module map: `state` is the pure job/queue state machine (no IO); `payload` renders the job
//! payload; `api` holds the `/api/v4` handlers, `control` the control API and its client;
//! `faults` the fault-injection middleware; `server` the socket and connection loop.

mod api;
mod config;
pub mod control;
mod faults;
mod git;
mod payload;
mod server;
mod shared;
mod state;
mod stats;
mod tls;

pub use config::{Config, ParseError, parse_duration, parse_size};
pub use server::{RunningServer, start};
