//! Metrics read from the live state rather than recorded where something happens: the levels
//! counted at each scrape (machines by state, job slots, jobs by phase) and the machine
//! durations read from the machines' timelines.
//!
//! It sits above `machines`, `jobs` and `pools`, which it reads, and hands what it reads to
//! `metrics`, which sits below them all; the figures themselves are declared there.

mod durations;
mod levels;

pub use durations::watch_machines;
pub use levels::Levels;
