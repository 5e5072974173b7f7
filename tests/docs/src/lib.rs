//! The book's checks (`docs/README.md` says what each one holds the book to): Markdown read
//! into code blocks, links and headings; `console` transcripts run and compared; `toml` blocks
//! checked as configurations; the configuration reference compared with the reader's keys; the
//! layering rule of `ARCHITECTURE.md` held to the code.

pub mod configs;
pub mod layers;
pub mod links;
pub mod markdown;
pub mod pointers;
pub mod reference;
pub mod transcript;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

/// The repository's root (this crate lives in `tests/docs`).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The book's pages (`docs/src`).
pub fn book_src() -> PathBuf {
    repo_root().join("docs/src")
}

/// A binary of the workspace's debug build, which `cargo xtask test` builds before the tests.
/// A missing one fails: these checks never pass without running what they check.
pub fn debug_binary(name: &str) -> Result<PathBuf> {
    let path = repo_root().join("target/debug").join(name);
    ensure!(
        path.is_file(),
        "{} is not built: run `cargo build --workspace --bins` first",
        path.display()
    );
    Ok(path)
}

/// Every Markdown file under `dir`, recursively, sorted; `target/` and hidden directories are
/// skipped.
pub fn markdown_files(dir: &Path) -> Result<Vec<PathBuf>> {
    files_ending(dir, ".md")
}

/// Every file under `dir` whose name ends in `suffix`, recursively, sorted; `target/` and
/// hidden directories are skipped.
pub fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current)
            .with_context(|| format!("reading {}", current.display()))?;
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    pending.push(path);
                }
            } else if name.ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}
