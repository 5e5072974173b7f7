//! The built-in sidecar: a compact runner with a shell executor.
