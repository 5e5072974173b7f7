//! `cargo xtask docs`: the book under `docs/`, built with mdBook into `target/book/`. mdBook
//! comes from crates.io at a pinned version, installed once into `target/tools/` without its
//! `serve` and `watch` features, which the build does not use. It is built unoptimised and
//! without debug info: that installs in 1m20 on two cores rather than 2m24, and the book then
//! takes 4 s to build rather than a fraction of one. `cargo xtask test` builds it too and fails
//! on any warning mdBook prints ([`build_without_warnings`]). The book's checks (transcripts,
//! configurations, the reference, help, links) are tests of `tests/docs` and run with every
//! other test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// The mdBook release the book is built with.
const MDBOOK_VERSION: &str = "0.5.4";

pub fn build(root: &Path) -> Result<()> {
    let mdbook = ensure_mdbook(root)?;
    super::run(
        mdbook.to_str().context("non-UTF-8 path")?,
        &["build", "docs"],
    )?;
    eprintln!(
        "xtask docs: the book is in {}",
        root.join("target/book/index.html").display()
    );
    Ok(())
}

/// Builds the book as [`build`] does and fails when mdBook warns or errs: a warning is a page
/// that renders wrong (a missing include, a bad link in `SUMMARY.md`).
pub fn build_without_warnings(root: &Path) -> Result<()> {
    let mdbook = ensure_mdbook(root)?;
    eprintln!("+ {} build docs", mdbook.display());
    let output = Command::new(&mdbook)
        .args(["build", "docs"])
        .current_dir(root)
        .output()
        .with_context(|| format!("running {}", mdbook.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprint!("{log}");
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    ensure!(
        output.status.success() && warned.is_empty(),
        "mdBook did not build the book cleanly ({}):\n{}",
        output.status,
        warned.join("\n")
    );
    Ok(())
}

fn ensure_mdbook(root: &Path) -> Result<PathBuf> {
    let tools = root.join("target/tools");
    let mdbook = tools.join("bin/mdbook");
    let installed = Command::new(&mdbook)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if installed.as_deref() == Some(&format!("mdbook v{MDBOOK_VERSION}")) {
        return Ok(mdbook);
    }
    super::run(
        "cargo",
        &[
            "--config",
            "profile.dev.debug=false",
            "install",
            "--debug",
            "--root",
            tools.to_str().context("non-UTF-8 path")?,
            "--locked",
            "--force",
            "--version",
            MDBOOK_VERSION,
            "--no-default-features",
            "--features",
            "search",
            "mdbook",
        ],
    )?;
    Ok(mdbook)
}
