//! A crate's module tree and the paths each module names, read with `syn` from its sources.
//!
//! Test code is left out: a module or item under `#[cfg(test)]` is compiled into no build that
//! anything imports, so it may use any layer without making a circle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;
use syn::{Attribute, Item, UseTree};

/// A module's path below the crate root (`["machines", "controller"]`); the root is `[]`.
pub type ModPath = Vec<String>;

/// One path a module names, made absolute, with where it is written.
#[derive(Debug, Clone)]
pub struct Reference {
    pub target: ModPath,
    pub file: PathBuf,
    pub line: usize,
}

/// A module of the crate and what it names.
#[derive(Debug)]
pub struct Module {
    pub path: ModPath,
    pub references: Vec<Reference>,
}

/// Every module of the crate whose root is `lib` (its `lib.rs`), test modules left out.
pub fn read_crate(lib: &Path) -> Result<Vec<Module>> {
    let mut modules = Vec::new();
    let dir = lib.parent().context("lib.rs has no directory")?;
    read_file(lib, dir, Vec::new(), &mut modules)?;
    let known: BTreeSet<ModPath> = modules.iter().map(|m| m.path.clone()).collect();
    for module in &mut modules {
        // A path into an item of a module (`crate::metrics::Metrics`) counts as a use of the
        // deepest module it names.
        for r in &mut module.references {
            while !r.target.is_empty() && !known.contains(&r.target) {
                r.target.pop();
            }
        }
    }
    Ok(modules)
}

/// Reads the module in `file`, whose child modules' files live in `children_dir`.
fn read_file(file: &Path, children_dir: &Path, path: ModPath, out: &mut Vec<Module>) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let parsed = syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
    read_items(&parsed.items, file, children_dir, path, out)
}

fn read_items(
    items: &[Item],
    file: &Path,
    children_dir: &Path,
    path: ModPath,
    out: &mut Vec<Module>,
) -> Result<()> {
    let children: BTreeSet<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Mod(m) if !is_test(&m.attrs) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    let mut names = Names {
        here: &path,
        children: &children,
        file,
        found: Vec::new(),
    };
    for item in items {
        match item {
            Item::Mod(m) if is_test(&m.attrs) => {}
            Item::Mod(m) => {
                let mut child = path.clone();
                child.push(m.ident.to_string());
                let dir = children_dir.join(m.ident.to_string());
                if m.attrs.iter().any(|a| a.path().is_ident("path")) {
                    bail!(
                        "{}: `#[path]` on mod {} is not read",
                        file.display(),
                        m.ident
                    );
                }
                match &m.content {
                    Some((_, inner)) => read_items(inner, file, &dir, child, out)?,
                    None => {
                        let own = children_dir.join(format!("{}.rs", m.ident));
                        let nested = dir.join("mod.rs");
                        let source = if own.exists() { own } else { nested };
                        read_file(&source, &dir, child, out)?;
                    }
                }
            }
            other if item_is_test(other) => {}
            other => names.visit_item(other),
        }
    }
    let references = names.found;
    out.push(Module { path, references });
    Ok(())
}

fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

fn item_is_test(item: &Item) -> bool {
    match item {
        Item::Fn(i) => is_test(&i.attrs),
        Item::Use(i) => is_test(&i.attrs),
        Item::Impl(i) => is_test(&i.attrs),
        Item::Const(i) => is_test(&i.attrs),
        Item::Static(i) => is_test(&i.attrs),
        Item::Struct(i) => is_test(&i.attrs),
        Item::Enum(i) => is_test(&i.attrs),
        Item::Type(i) => is_test(&i.attrs),
        Item::Trait(i) => is_test(&i.attrs),
        Item::Macro(i) => is_test(&i.attrs),
        _ => false,
    }
}

/// Collects the paths one module names: `use` trees, paths in code and types, and paths
/// inside macro calls (which `syn` leaves as tokens).
struct Names<'a> {
    here: &'a ModPath,
    children: &'a BTreeSet<String>,
    file: &'a Path,
    found: Vec<Reference>,
}

impl Names<'_> {
    /// Makes `segments` absolute, or `None` when it does not start in this crate.
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let (first, rest) = segments.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.here.clone(),
            "super" => self.here[..self.here.len().checked_sub(1)?].to_vec(),
            name if self.children.contains(name) => {
                let mut base = self.here.clone();
                base.push(name.to_string());
                base
            }
            _ => return None,
        };
        for segment in rest {
            if segment == "super" {
                base.pop()?;
            } else {
                base.push(segment.clone());
            }
        }
        Some(base)
    }

    fn add(&mut self, segments: &[String], line: usize) {
        if let Some(target) = self.absolute(segments) {
            self.found.push(Reference {
                target,
                file: self.file.to_path_buf(),
                line,
            });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.add(&prefix.clone(), n.ident.span().start().line);
                prefix.pop();
            }
            UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.add(&prefix.clone(), r.ident.span().start().line);
                prefix.pop();
            }
            UseTree::Glob(g) => self.add(&prefix.clone(), g.star_token.spans[0].start().line),
            UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// `crate::a::b`, `super::c` or `self::d` sequences among a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if ["crate", "super", "self"].contains(&&*id.to_string()) => {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(next)) =
                        (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                        && a.as_char() == ':'
                        && b.as_char() == ':'
                        && let TokenTree::Ident(next) = next
                    {
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.add(&segments, id.span().start().line);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item_use(&mut self, node: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &node.tree);
    }

    fn visit_path(&mut self, node: &'ast syn::Path) {
        let segments: Vec<String> = node.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = node.segments.first() {
            self.add(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, node);
    }

    fn visit_macro(&mut self, node: &'ast syn::Macro) {
        self.tokens(node.tokens.clone());
        syn::visit::visit_macro(self, node);
    }

    // Test items nested in impls and functions are skipped like top-level ones.
    fn visit_impl_item_fn(&mut self, node: &'ast syn::ImplItemFn) {
        if !is_test(&node.attrs) {
            syn::visit::visit_impl_item_fn(self, node);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Modules are read by `read_items`, each with its own path.
    }
}
