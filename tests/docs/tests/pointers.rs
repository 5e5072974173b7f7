//! What points into the book from outside it resolves: the status page's links (served at
//! `/book/` from the built book) and the `docs/src/…` paths the code prints or names (the
//! demo's summary, error messages, module docs).

use anyhow::{Result, bail};
use docs_check::{book_src, files_ending, pointers, repo_root};

#[test]
fn every_pointer_into_the_book_from_the_code_and_the_status_page_resolves() -> Result<()> {
    let root = repo_root();
    let mut files = vec![root.join("autoscaler/src/admin/page/index.html")];
    for dir in ["autoscaler/src", "sidecar/src", "tests"] {
        files.extend(files_ending(&root.join(dir), ".rs")?);
    }
    let mut problems = Vec::new();
    let mut seen = 0;
    for file in &files {
        for pointer in pointers::find(&std::fs::read_to_string(file)?) {
            seen += 1;
            if let Some(why) = pointers::broken(&pointer, &book_src())? {
                let file = file.strip_prefix(&root).unwrap_or(file);
                problems.push(format!("{}: {why}", file.display()));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "pointers into the book that lead nowhere:\n{}",
            problems.join("\n")
        );
    }
    // The status page alone links five panels to the book.
    assert!(
        seen >= 5,
        "only {seen} pointers found: is the scan reading the files?"
    );
    Ok(())
}
