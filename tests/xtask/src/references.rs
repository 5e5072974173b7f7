//! The repository must stand on its own: no file may point outside it. This check reads every
//! tracked text file and fails on
//! - paths that leave the repository (a parent directory's `shared` folder, absolute paths of
//!   the workplace) or name notes that live outside it;
//! - relative Markdown links whose target does not exist;
//! - `runner-protocol.md §N` references to a section the protocol notes do not have.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Strings that only appear when a file points outside the repository, each written in two
/// parts so that this file does not match itself.
const OUTSIDE: &[[&str; 2]] = &[
    ["../", "shared"],
    ["/wo", "rk/"],
    ["runner-api", ".md"],
    ["protocol-audit", ".md"],
    ["anchors", ".md"],
    ["design", ".md"],
];

const PROTOCOL_NOTES: &str = "api-spec/runner-protocol.md";

pub fn check(root: &Path) -> Result<()> {
    let files = tracked_files(root)?;
    let sections = protocol_sections(&root.join(PROTOCOL_NOTES))?;
    let mut problems = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // binary or unreadable: nothing to point anywhere
        };
        check_file(root, file, &text, &sections, &mut problems);
    }
    if problems.is_empty() {
        eprintln!(
            "references: {} files point only inside the repository",
            files.len()
        );
        return Ok(());
    }
    for problem in &problems {
        eprintln!("  {problem}");
    }
    bail!(
        "{} references lead outside the repository or nowhere",
        problems.len()
    )
}

fn check_file(
    root: &Path,
    file: &Path,
    text: &str,
    sections: &BTreeSet<String>,
    problems: &mut Vec<String>,
) {
    for (number, line) in text.lines().enumerate() {
        let at = format!("{}:{}", file.display(), number + 1);
        for [head, tail] in OUTSIDE {
            let pattern = format!("{head}{tail}");
            if line.contains(&pattern) {
                problems.push(format!("{at}: names `{pattern}`"));
            }
        }
        for section in protocol_references(line) {
            if !sections.contains(&section) {
                problems.push(format!("{at}: {PROTOCOL_NOTES} has no §{section}"));
            }
        }
        if file.extension().is_some_and(|e| e == "md") {
            for target in markdown_links(line) {
                let base = file.parent().unwrap_or(Path::new(""));
                if !root.join(base).join(&target).exists() {
                    problems.push(format!("{at}: link to missing `{}`", target.display()));
                }
            }
        }
    }
}

fn tracked_files(root: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .context("running git ls-files")?;
    if !output.status.success() {
        bail!("git ls-files failed");
    }
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
        .filter(|path| path.extension().is_none_or(|e| e != "lock"))
        .collect())
}

/// Section numbers of the protocol notes' headings (`## 3.` → `3`, `### 3.5 ...` → `3.5`).
fn protocol_sections(path: &Path) -> Result<BTreeSet<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|line| line.trim_start_matches('#').trim_start())
        .filter_map(|title| title.split_whitespace().next())
        .map(|number| number.trim_end_matches('.').to_owned())
        .filter(|number| number.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect())
}

/// The section right after each `runner-protocol.md §` in a line.
fn protocol_references(line: &str) -> Vec<String> {
    line.match_indices("runner-protocol.md")
        .filter_map(|(at, name)| {
            let rest = line[at + name.len()..].trim_start_matches(['`', ' ']);
            let rest = rest.strip_prefix('§')?;
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            Some(number.trim_end_matches('.').to_owned())
        })
        .filter(|number| !number.is_empty())
        .collect()
}

/// Relative link targets of `[text](target)` in a Markdown line (no URLs, no anchors alone).
fn markdown_links(line: &str) -> Vec<PathBuf> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or_default();
            let external = target.contains("://") || target.starts_with("mailto:");
            (!target.is_empty() && !external).then(|| PathBuf::from(target))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_section_references() {
        assert_eq!(
            protocol_references("see runner-protocol.md §3.5, and `runner-protocol.md` §10."),
            vec!["3.5".to_owned(), "10".to_owned()]
        );
        assert!(protocol_references("runner-protocol.md is ours").is_empty());
    }

    #[test]
    fn finds_relative_links_only() {
        assert_eq!(
            markdown_links("[a](../x.md#y) [b](https://e.org) [c](#top)"),
            vec![PathBuf::from("../x.md")]
        );
    }
}
