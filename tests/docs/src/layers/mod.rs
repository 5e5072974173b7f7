//! The layering rule of `ARCHITECTURE.md` held to the code: modules import only downwards.
//!
//! Two checks over every path a module names ([`tree`]):
//!
//! - **no circle** among the modules of any one parent (the crate's top-level modules, the
//!   files of `config/`, of `machines/`, …): a circle is reported with a use of each of its
//!   edges, file and line;
//! - **layers**: each top-level module of the autoscaler is in one row of the table under
//!   `## Layers` in `ARCHITECTURE.md`, and uses modules of its own row or of earlier rows only
//!   (rows are numbered from the bottom layer up).
//!
//! The paths are read as they are written: a re-export (`pub use`) hides the module it comes
//! from, so a circle through one is seen at the re-exporting module.

pub mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};

pub use tree::{ModPath, Module, Reference, read_crate};

/// One row of the layer table: its number, its name and its modules.
#[derive(Debug, Clone)]
pub struct Layer {
    pub number: usize,
    pub name: String,
    pub modules: Vec<String>,
}

/// The rows of the table under `## Layers` in `text` (Markdown): a row's first cell is
/// `N. name`, its second lists modules in backticks.
pub fn layer_table(text: &str) -> Result<Vec<Layer>> {
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Layers\n"))
        .ok_or_else(|| anyhow::anyhow!("no `## Layers` section"))?;
    let mut layers = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Some((number, name)) = cells.first().and_then(|c| c.split_once(". ")) else {
            continue;
        };
        let Ok(number) = number.parse() else { continue };
        let modules = cells
            .get(1)
            .map(|c| c.split('`').skip(1).step_by(2).map(String::from).collect())
            .unwrap_or_default();
        layers.push(Layer {
            number,
            name: name.to_string(),
            modules,
        });
    }
    if layers.is_empty() {
        bail!("the `## Layers` section has no rows");
    }
    Ok(layers)
}

/// Where `r` is written, relative to `root`.
fn at(r: &Reference, root: &Path) -> String {
    let file = r.file.strip_prefix(root).unwrap_or(&r.file);
    format!("{}:{}", file.display(), r.line)
}

/// An edge between two modules of one parent, with the first use that makes it.
type Edges = BTreeMap<(ModPath, ModPath), Reference>;

/// Every edge between two different children of one parent: a use in `a` (or below it) of
/// `b` (or anything below it), where `a` and `b` have the same parent.
fn sibling_edges(modules: &[Module]) -> Edges {
    let mut edges = Edges::new();
    for module in modules {
        for r in &module.references {
            let common = module
                .path
                .iter()
                .zip(&r.target)
                .take_while(|(a, b)| a == b)
                .count();
            if common < module.path.len() && common < r.target.len() {
                let from = module.path[..=common].to_vec();
                let to = r.target[..=common].to_vec();
                edges.entry((from, to)).or_insert_with(|| r.clone());
            }
        }
    }
    edges
}

/// Each circle among siblings, as one line per edge in it.
pub fn circles(modules: &[Module], root: &Path) -> Vec<String> {
    let edges = sibling_edges(modules);
    let mut graph: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
    }
    strongly_connected(&graph)
        .into_iter()
        .map(|members| {
            let mut lines = vec![format!(
                "circle between {}:",
                members
                    .iter()
                    .map(|m| m.join("::"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )];
            for ((from, to), r) in &edges {
                if members.contains(&from) && members.contains(&to) {
                    lines.push(format!(
                        "  {} uses {} ({})",
                        from.join("::"),
                        to.join("::"),
                        at(r, root)
                    ));
                }
            }
            lines.join("\n")
        })
        .collect()
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn strongly_connected<'a>(
    graph: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
) -> Vec<Vec<&'a ModPath>> {
    struct Walk<'a, 'g> {
        graph: &'g BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
        index: BTreeMap<&'a ModPath, (usize, usize)>,
        stack: Vec<&'a ModPath>,
        found: Vec<Vec<&'a ModPath>>,
    }
    impl<'a> Walk<'a, '_> {
        fn visit(&mut self, v: &'a ModPath) -> usize {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            let mut low = n;
            for &w in self.graph.get(v).into_iter().flatten() {
                match self.index.get(w) {
                    None => low = low.min(self.visit(w)),
                    Some(&(wi, _)) if self.stack.contains(&w) => low = low.min(wi),
                    Some(_) => {}
                }
            }
            self.index.insert(v, (n, low));
            if low == n {
                let at = self.stack.iter().rposition(|x| *x == v).unwrap_or(0);
                let members = self.stack.split_off(at);
                if members.len() > 1 {
                    self.found.push(members);
                }
            }
            low
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Every breach of the layer table by the crate's top-level modules: a module in no row or in
/// two, a row naming a module that does not exist, a use of a module in a later row.
pub fn layer_breaches(modules: &[Module], layers: &[Layer], root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut row_of: BTreeMap<&str, &Layer> = BTreeMap::new();
    for layer in layers {
        for m in &layer.modules {
            if row_of.insert(m, layer).is_some() {
                problems.push(format!("`{m}` is in two rows of the layer table"));
            }
        }
    }
    let top: BTreeSet<&str> = modules
        .iter()
        .filter(|m| m.path.len() == 1)
        .map(|m| m.path[0].as_str())
        .collect();
    for m in &top {
        if !row_of.contains_key(m) {
            problems.push(format!("module `{m}` is in no row of the layer table"));
        }
    }
    for m in row_of.keys() {
        if !top.contains(m) {
            problems.push(format!(
                "the layer table names `{m}`, which is not a module"
            ));
        }
    }
    for ((from, to), r) in sibling_edges(modules) {
        if from.len() != 1 {
            continue;
        }
        if let (Some(a), Some(b)) = (row_of.get(from[0].as_str()), row_of.get(to[0].as_str()))
            && b.number > a.number
        {
            problems.push(format!(
                "{}: `{}` ({}. {}) uses `{}` ({}. {}), a layer above it",
                at(&r, root),
                from[0],
                a.number,
                a.name,
                to[0],
                b.number,
                b.name
            ));
        }
    }
    problems
}
