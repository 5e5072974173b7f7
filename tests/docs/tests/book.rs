//! The book and the repository's Markdown, held to what they show (`docs/README.md`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use docs_check::markdown::Page;
use docs_check::{book_src, configs, links, markdown_files, reference, repo_root, transcript};

/// The book's pages and the README, which hold examples an operator copies.
fn example_pages() -> Result<Vec<Page>> {
    let mut pages = vec![Page::read(&repo_root().join("README.md"))?];
    for path in markdown_files(&book_src())? {
        pages.push(Page::read(&path)?);
    }
    Ok(pages)
}

/// Fails with every problem found, not the first.
fn report(what: &str, problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    bail!("{} {what}:\n\n{}", problems.len(), problems.join("\n\n"))
}

/// A page's scratch directory: a copy of `docs/examples/`, with `deploy/` and `provisioners/`
/// reachable as in the repository.
fn scratch() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let examples = repo_root().join("docs/examples");
    for entry in std::fs::read_dir(&examples)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name()))?;
        }
    }
    for shared in ["deploy", "provisioners"] {
        std::os::unix::fs::symlink(repo_root().join(shared), dir.path().join(shared))?;
    }
    Ok(dir)
}

#[test]
fn every_console_block_prints_what_it_shows() -> Result<()> {
    let bin = docs_check::debug_binary("autoscaler")?
        .parent()
        .context("no bin dir")?
        .to_path_buf();
    let mut problems = Vec::new();
    for page in example_pages()? {
        let blocks: Vec<_> = page
            .code_blocks()
            .into_iter()
            .filter(|b| b.info == "console")
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let dir = scratch()?;
        for block in blocks {
            let here = format!("{}:{}", page.name(), block.line);
            let steps = match transcript::parse(&block.body) {
                Ok(steps) => steps,
                Err(e) => {
                    problems.push(format!("{here}: {e:#}"));
                    continue;
                }
            };
            for step in steps {
                let outcome = transcript::run(&step.command, dir.path(), &bin)?;
                if outcome.exit != step.exit
                    || !transcript::matches(&step.expected, &outcome.output)
                {
                    problems.push(format!(
                        "{here}: `$ {}` exited {} (the book shows {}) and printed:\n{}\n--- the book shows:\n{}",
                        step.command,
                        outcome.exit,
                        step.exit,
                        outcome.output.trim_end(),
                        step.expected.join("\n")
                    ));
                }
            }
        }
    }
    report(
        "transcripts differ from what their commands print",
        problems,
    )
}

#[test]
fn every_configuration_example_passes_check_config() -> Result<()> {
    let base = std::fs::read_to_string(repo_root().join("docs/examples/base.toml"))?;
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in example_pages()? {
        for block in page.code_blocks() {
            let here = format!("{}:{}", page.name(), block.line);
            let outcome = match block.info.as_str() {
                "toml" => configs::complete(&block.body, &base).and_then(|c| configs::check(&c)),
                "toml,gitlab-runner" => configs::import(&block.body),
                "toml,other" => continue,
                info if info.starts_with("toml") => {
                    problems.push(format!("{here}: unknown kind of TOML block `{info}`"));
                    continue;
                }
                _ => continue,
            };
            checked += 1;
            if let Err(e) = outcome {
                problems.push(format!("{here}: {e:#}"));
            }
        }
    }
    ensure!(checked > 0, "no configuration example found");
    report("configuration examples do not pass", problems)
}

#[test]
fn the_reference_documents_exactly_the_keys_the_reader_asks_for() -> Result<()> {
    let every_table = Path::new(env!("CARGO_MANIFEST_DIR")).join("every-table.toml");
    let asked = autoscaler::config::keys_asked(&every_table).map_err(|e| anyhow::anyhow!("{e}"))?;
    let page = Page::read(&book_src().join("configuration/reference.md"))?;
    let documented = reference::documented(&page.text);
    let mut problems: Vec<String> = documented
        .duplicates
        .iter()
        .map(|k| format!("`{k}` has two rows"))
        .collect();
    for key in &asked {
        if !documented.keys.contains_key(key) && !documented.tables.contains_key(key) {
            problems.push(format!(
                "`{key}` is read by the configuration code but has no row"
            ));
        }
    }
    for (key, line) in &documented.keys {
        if !asked.contains(key) {
            problems.push(format!(
                "{}:{line}: `{key}` is documented but the configuration code never reads it",
                page.name()
            ));
        }
    }
    for (table, line) in &documented.tables {
        if !asked.contains(table) {
            problems.push(format!(
                "{}:{line}: the table `{table}` is documented but never read",
                page.name()
            ));
        }
    }
    report("differences between the reference and the code", problems)
}

/// The subcommands `autoscaler [PARENT] --help` lists, `help` aside.
fn subcommands(parent: &[&str]) -> Result<Vec<String>> {
    let output = std::process::Command::new(docs_check::debug_binary("autoscaler")?)
        .args(parent)
        .arg("--help")
        .output()?;
    let text = String::from_utf8(output.stdout)?;
    let mut names = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line == "Commands:" {
            in_commands = true;
        } else if in_commands && line.starts_with("  ") {
            let name = line.split_whitespace().next().unwrap_or_default();
            if name != "help" && line.starts_with(&format!("  {name}")) {
                names.push(name.to_string());
            }
        } else if in_commands && !line.starts_with(' ') {
            in_commands = false;
        }
    }
    Ok(names)
}

#[test]
fn the_cli_page_shows_the_help_of_every_command() -> Result<()> {
    let page = Page::read(&book_src().join("operating/cli.md"))?;
    let shown: BTreeSet<String> = page
        .code_blocks()
        .into_iter()
        .filter(|b| b.info == "console")
        .flat_map(|b| transcript::parse(&b.body).unwrap_or_default())
        .map(|s| s.command)
        .collect();
    let mut wanted = vec!["autoscaler --help".to_string()];
    for sub in subcommands(&[])? {
        wanted.push(format!("autoscaler {sub} --help"));
        for nested in subcommands(&[&sub])? {
            wanted.push(format!("autoscaler {sub} {nested} --help"));
        }
    }
    ensure!(wanted.len() > 5, "found too few subcommands: {wanted:?}");
    let missing: Vec<String> = wanted
        .into_iter()
        .filter(|w| !shown.contains(w))
        .map(|w| format!("`$ {w}` has no console block in {}", page.name()))
        .collect();
    report("commands without their help in the book", missing)
}

#[test]
fn every_relative_link_resolves() -> Result<()> {
    let book = book_src().canonicalize()?;
    let mut problems = Vec::new();
    for path in markdown_files(&repo_root())? {
        let path = path.canonicalize()?;
        let in_book = path.starts_with(&book);
        if path.ends_with("SUMMARY.md") {
            continue;
        }
        let page = Page::read(&path)?;
        problems.extend(links::broken(&page, in_book.then_some(book.as_path()))?);
    }
    report("broken links", problems)
}

#[test]
fn the_summary_lists_every_page_and_only_pages_that_exist() -> Result<()> {
    let src = book_src();
    let summary = Page::read(&src.join("SUMMARY.md"))?;
    let listed: BTreeSet<PathBuf> = summary
        .links()
        .into_iter()
        .map(|l| src.join(l.dest))
        .collect();
    let mut problems: Vec<String> = listed
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| format!("SUMMARY.md lists {}, which does not exist", p.display()))
        .collect();
    for page in markdown_files(&src)? {
        if !page.ends_with("SUMMARY.md") && !listed.contains(&page) {
            problems.push(format!("{} is not in SUMMARY.md", page.display()));
        }
    }
    report("differences between SUMMARY.md and the pages", problems)
}
