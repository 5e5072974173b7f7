//! A Markdown page as the checks see it: its text with mdBook's `{{#include FILE}}` lines
//! expanded, its fenced code blocks, its links and the anchors of its headings.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A page, read from disk.
#[derive(Debug, Clone)]
pub struct Page {
    pub path: PathBuf,
    /// The text with includes expanded: what the rendered page shows.
    pub text: String,
}

impl Page {
    pub fn read(path: &Path) -> Result<Page> {
        let raw =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let text = expand_includes(path, &raw)?;
        Ok(Page {
            path: path.to_path_buf(),
            text,
        })
    }

    /// The page's name for messages: its path from the repository's root.
    pub fn name(&self) -> String {
        let root = crate::repo_root().canonicalize().unwrap_or_default();
        let path = self
            .path
            .canonicalize()
            .unwrap_or_else(|_| self.path.clone());
        path.strip_prefix(&root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }

    pub fn code_blocks(&self) -> Vec<CodeBlock> {
        code_blocks(&self.text)
    }

    pub fn links(&self) -> Vec<Link> {
        links(&self.text)
    }

    pub fn anchors(&self) -> Vec<String> {
        anchors(&self.text)
    }
}

/// `{{#include PATH}}` alone on a line, relative to the including file, as mdBook expands it
/// (whole files only: the book uses no anchors or line ranges).
fn expand_includes(path: &Path, raw: &str) -> Result<String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = String::with_capacity(raw.len());
    for line in raw.lines() {
        let trimmed = line.trim();
        if let Some(target) = trimmed
            .strip_prefix("{{#include ")
            .and_then(|rest| rest.strip_suffix("}}"))
        {
            let target = dir.join(target.trim());
            if target.to_string_lossy().contains(':') {
                bail!(
                    "{}: includes with anchors or ranges are not checked",
                    path.display()
                );
            }
            let included = std::fs::read_to_string(&target)
                .with_context(|| format!("{} includes {}", path.display(), target.display()))?;
            out.push_str(&included);
            if !included.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// A fenced code block: its info string (`console`, `toml`, `toml,gitlab-runner`) and body.
#[derive(Debug, Clone)]
pub struct CodeBlock {
    pub info: String,
    pub body: String,
    /// 1-based line of the opening fence in the expanded text.
    pub line: usize,
}

pub fn code_blocks(text: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut current: Option<CodeBlock> = None;
    for (event, range) in Parser::new_ext(text, Options::all()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                current = Some(CodeBlock {
                    info: info.trim().to_string(),
                    body: String::new(),
                    line: line_of(text, range.start),
                });
            }
            Event::Text(t) => {
                if let Some(block) = current.as_mut() {
                    block.body.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
            _ => {}
        }
    }
    blocks
}

/// A link or image destination, with the line it is on.
#[derive(Debug, Clone)]
pub struct Link {
    pub dest: String,
    pub line: usize,
}

pub fn links(text: &str) -> Vec<Link> {
    Parser::new_ext(text, Options::all())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => Some(Link {
                dest: dest_url.to_string(),
                line: line_of(text, range.start),
            }),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings, made as mdBook and GitHub make them: the heading's text
/// in lower case, spaces as `-`, other punctuation but `-` and `_` dropped; a repeated anchor
/// gets `-1`, `-2`.
pub fn anchors(text: &str) -> Vec<String> {
    let mut anchors: Vec<String> = Vec::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, Options::all()) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let base = anchor_of(&h);
                    let mut anchor = base.clone();
                    let mut n = 1;
                    while anchors.contains(&anchor) {
                        anchor = format!("{base}-{n}");
                        n += 1;
                    }
                    anchors.push(anchor);
                }
            }
            _ => {}
        }
    }
    anchors
}

fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The `## ` headings' text, in order, with the line each starts on.
pub fn level_two_headings(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut heading: Option<(String, usize)> = None;
    for (event, range) in Parser::new_ext(text, Options::all()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading {
                level: HeadingLevel::H2,
                ..
            }) => heading = Some((String::new(), line_of(text, range.start))),
            Event::Text(t) | Event::Code(t) => {
                if let Some((h, _)) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(HeadingLevel::H2)) => found.extend(heading.take()),
            _ => {}
        }
    }
    found
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_follow_mdbook() {
        let text = "# The `[server]` table\n## Exit codes (sysexits)\n## Exit codes (sysexits)\n";
        assert_eq!(
            anchors(text),
            [
                "the-server-table",
                "exit-codes-sysexits",
                "exit-codes-sysexits-1"
            ]
        );
    }

    #[test]
    fn blocks_keep_their_info_and_line() {
        let text = "a\n\n```console\n$ autoscaler --version\n```\n\n```toml,other\nx = 1\n```\n";
        let blocks = code_blocks(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].info, "console");
        assert_eq!(blocks[0].line, 3);
        assert_eq!(blocks[0].body, "$ autoscaler --version\n");
        assert_eq!(blocks[1].info, "toml,other");
    }
}
