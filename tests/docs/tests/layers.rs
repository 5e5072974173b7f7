//! Layers import only downwards: the rule `ARCHITECTURE.md` writes under `## Layers`, held to
//! every path the autoscaler's and the sidecar's modules name.

use anyhow::{Result, bail};
use docs_check::layers::{circles, layer_breaches, layer_table, read_crate};
use docs_check::repo_root;

#[test]
fn the_autoscaler_imports_only_downwards() -> Result<()> {
    let root = repo_root();
    let modules = read_crate(&root.join("autoscaler/src/lib.rs"))?;
    let table = layer_table(&std::fs::read_to_string(root.join("ARCHITECTURE.md"))?)?;
    let mut problems = circles(&modules, &root);
    problems.extend(layer_breaches(&modules, &table, &root));
    if !problems.is_empty() {
        bail!(
            "ARCHITECTURE.md's layering is broken:\n{}",
            problems.join("\n")
        );
    }
    Ok(())
}

#[test]
fn the_sidecar_has_no_import_circle() -> Result<()> {
    let root = repo_root();
    let problems = circles(&read_crate(&root.join("sidecar/src/lib.rs"))?, &root);
    if !problems.is_empty() {
        bail!(
            "the sidecar's modules import each other:\n{}",
            problems.join("\n")
        );
    }
    Ok(())
}

/// A small crate written to `dir`: `files` as (path, text).
fn small_crate(files: &[(&str, &str)]) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a directory"))?;
        std::fs::write(path, text)?;
    }
    Ok(dir)
}

#[test]
fn a_circle_is_named_with_a_use_of_each_edge() -> Result<()> {
    let dir = small_crate(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::Thing;\npub struct Other;\n"),
        // A path inside a macro call counts as a use.
        (
            "b/mod.rs",
            "pub struct Thing;\n\nfn f() {\n    format!(\"{:?}\", super::a::Other);\n}\n",
        ),
        // Test code may use anything: it closes no circle.
        (
            "c.rs",
            "use crate::a::Other;\n#[cfg(test)]\nmod tests {\n    use crate::c::*;\n}\n",
        ),
    ])?;
    let modules = read_crate(&dir.path().join("lib.rs"))?;
    let found = circles(&modules, dir.path());
    assert_eq!(
        found,
        vec!["circle between a, b:\n  a uses b (a.rs:1)\n  b uses a (b/mod.rs:4)".to_string()]
    );
    Ok(())
}

#[test]
fn a_use_of_a_later_layer_and_an_unplaced_module_are_breaches() -> Result<()> {
    let dir = small_crate(&[
        ("lib.rs", "pub mod low;\npub mod high;\npub mod new;\n"),
        ("low.rs", "pub fn f() -> u8 {\n    crate::high::g()\n}\n"),
        ("high.rs", "pub fn g() -> u8 {\n    1\n}\n"),
        (
            "new.rs",
            "#[cfg(test)]\nfn t() {\n    crate::high::g();\n}\n",
        ),
    ])?;
    let table = layer_table(
        "# A\n\n## Layers\n\n| Layer | Modules |\n|---|---|\n| 1. bottom | `low` |\n| 2. top | `high`, `gone` |\n\n## Next\n",
    )?;
    let modules = read_crate(&dir.path().join("lib.rs"))?;
    let breaches = layer_breaches(&modules, &table, dir.path());
    assert_eq!(
        breaches,
        vec![
            "module `new` is in no row of the layer table",
            "the layer table names `gone`, which is not a module",
            "low.rs:2: `low` (1. bottom) uses `high` (2. top), a layer above it",
        ]
    );
    Ok(())
}
