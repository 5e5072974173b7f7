//! Links checked offline: a relative link names an existing file, its `#anchor` a heading of
//! that page. A book page's links stay inside the book, which is all the rendered book has.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::markdown::Page;

/// Every broken link of `page`, described.
pub fn broken(page: &Page, book: Option<&Path>) -> Result<Vec<String>> {
    let dir = page.path.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    for link in page.links() {
        let dest = link.dest.as_str();
        if dest.contains("://") || dest.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match dest.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (dest, None),
        };
        let target: PathBuf = if file.is_empty() {
            page.path.clone()
        } else {
            normalize(&dir.join(file))
        };
        let here = format!("{}:{}: {dest}", page.name(), link.line);
        if let Some(book) = book
            && !target.starts_with(book)
        {
            problems.push(format!(
                "{here} leaves the book (name repository files in a code span instead)"
            ));
            continue;
        }
        if !target.exists() {
            problems.push(format!("{here}: no such file"));
            continue;
        }
        if let Some(anchor) = anchor {
            if target.extension().is_none_or(|e| e != "md") {
                problems.push(format!(
                    "{here}: an anchor into a file that is not Markdown"
                ));
                continue;
            }
            let anchors = Page::read(&target)?.anchors();
            if !anchors.iter().any(|a| a == anchor) {
                problems.push(format!("{here}: no heading makes the anchor #{anchor}"));
            }
        }
    }
    Ok(problems)
}

/// `a/b/../c` as `a/c`, without touching the disk (a link may name a missing file).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
