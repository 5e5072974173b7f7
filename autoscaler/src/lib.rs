//! The autoscaler service. See `ARCHITECTURE.md` at the repository root for the map.

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
pub mod delivery;
pub mod dispatch;
pub mod import;
pub mod inject;
pub mod intake;
pub mod jobs;
pub mod launcher;
pub mod machines;
pub mod mirror;
pub mod pools;
pub mod provisioner;
pub mod routes;
pub mod secret;
pub mod service;
pub mod sidecars;
pub mod ssh;
pub mod store;
pub mod systemd;
pub mod telemetry;
pub mod tls;
pub mod upstream;
