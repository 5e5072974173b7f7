//! Pointers into the book from outside it: a source path (`docs/src/concepts/jobs.md`, in code
//! that prints or documents it) or a page as the admin listener serves it
//! (`/book/concepts/jobs.html`, in the status page), each with an optional `#anchor`.

use std::path::Path;

use anyhow::Result;

use crate::markdown::Page;

/// One pointer: the page's path below `docs/src` (`concepts/jobs.md`) and its anchor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub page: String,
    pub anchor: Option<String>,
}

/// Every pointer in `text`.
pub fn find(text: &str) -> Vec<Pointer> {
    let mut found = Vec::new();
    for (prefix, suffix) in [("docs/src/", ".md"), ("/book/", ".html")] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_-/.#".contains(c)))
                .unwrap_or(rest.len());
            // A sentence's full stop is not part of the path.
            let pointer = rest[..end].trim_end_matches('.');
            let (path, anchor) = match pointer.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor.to_string())),
                None => (pointer, None),
            };
            let page = match path.strip_suffix(suffix) {
                // mdBook writes the book's first page, the introduction, as its index.html too.
                Some("index") if suffix == ".html" => "introduction.md".to_string(),
                Some(stem) => format!("{stem}.md"),
                None => continue,
            };
            found.push(Pointer { page, anchor });
        }
    }
    found
}

/// Why `pointer` does not resolve in the book at `book` (`docs/src`), if it does not.
pub fn broken(pointer: &Pointer, book: &Path) -> Result<Option<String>> {
    let path = book.join(&pointer.page);
    if !path.is_file() {
        return Ok(Some(format!("no page {}", pointer.page)));
    }
    if let Some(anchor) = &pointer.anchor
        && !Page::read(&path)?.anchors().contains(anchor)
    {
        return Ok(Some(format!("no heading #{anchor} in {}", pointer.page)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_paths_and_served_pages_are_found_with_their_anchors() {
        let text = r#"See docs/src/operating/state.md. <a href="/book/concepts/jobs.html#waiting-for-a-machine">"#;
        assert_eq!(
            find(text),
            vec![
                Pointer {
                    page: "operating/state.md".into(),
                    anchor: None
                },
                Pointer {
                    page: "concepts/jobs.md".into(),
                    anchor: Some("waiting-for-a-machine".into())
                },
            ]
        );
    }
}
