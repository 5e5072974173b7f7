//! Clippy's lints, run while the workspace is built rather than in a pass of their own.
//!
//! `cargo clippy` is `cargo check` with every workspace crate compiled by `clippy-driver` (cargo's
//! `RUSTC_WORKSPACE_WRAPPER`) and its `-- ...` arguments handed to the driver in `CLIPPY_ARGS`.
//! The driver is rustc with clippy's lints added, so it can as well compile: `cargo build` under
//! the same two variables reports the same lints, from the same `clippy.toml` files, and fails
//! on them as `cargo clippy -- -D warnings` does. A separate `cargo clippy` type-checked every
//! dependency once more for nothing but the lints: about eight of CI's forty minutes.
//!
//! Cargo keeps a crate built through the wrapper apart from one built without it (the wrapper
//! is part of each build's hash), so every cargo command of `cargo xtask test` that builds the
//! workspace carries [`Lints::env`]: one without it would build the workspace a second time.
//! Not `cargo install`, though: the wrapper would lint the installed crate (mdBook) too.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The toolchain's `clippy-driver`, found.
#[derive(Debug, Clone)]
pub struct Lints {
    driver: PathBuf,
}

/// How `cargo clippy` separates the arguments it passes the driver in `CLIPPY_ARGS`.
const ARG_SEPARATOR: &str = "__CLIPPY_HACKERY__";

/// What `cargo clippy -- -D warnings` passes: every warning, clippy's included, fails the build.
const DRIVER_ARGS: &[&str] = &["-D", "warnings"];

impl Lints {
    /// `clippy-driver` of the toolchain that builds `root` (its `rust-toolchain.toml`); an error
    /// saying how to install clippy when the toolchain has none.
    pub fn find(root: &Path) -> Result<Self> {
        let output = Command::new("rustc")
            .args(["--print", "sysroot"])
            .current_dir(root)
            .output()
            .context("cannot run rustc --print sysroot")?;
        if !output.status.success() {
            bail!(
                "`rustc --print sysroot` failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        let driver = sysroot.join("bin").join("clippy-driver");
        if !driver.is_file() {
            bail!(
                "clippy is not installed for the toolchain at {}: {} is missing \
                 (`rustup component add clippy` installs it)",
                sysroot.display(),
                driver.display()
            );
        }
        Ok(Self { driver })
    }

    /// The environment under which cargo builds the workspace through clippy, failing on any
    /// warning.
    pub fn env(&self) -> Vec<(String, String)> {
        let args: String = DRIVER_ARGS
            .iter()
            .map(|arg| format!("{arg}{ARG_SEPARATOR}"))
            .collect();
        vec![
            (
                "RUSTC_WORKSPACE_WRAPPER".into(),
                self.driver.to_string_lossy().into_owned(),
            ),
            ("CLIPPY_ARGS".into(), args),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_gets_deny_warnings_as_cargo_clippy_passes_it() {
        let lints = Lints {
            driver: PathBuf::from("/toolchain/bin/clippy-driver"),
        };
        assert_eq!(
            lints.env(),
            [
                (
                    "RUSTC_WORKSPACE_WRAPPER".to_string(),
                    "/toolchain/bin/clippy-driver".to_string()
                ),
                (
                    "CLIPPY_ARGS".to_string(),
                    "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__".to_string()
                ),
            ]
        );
    }
}
