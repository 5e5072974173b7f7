//! One module per figure of the benchmark; each returns its rows.

pub mod artifacts;
pub mod durability;
pub mod footprint;
pub mod injection;
pub mod pickup;
pub mod throughput;
pub mod trace;
