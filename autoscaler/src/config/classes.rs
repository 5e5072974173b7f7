//! `[[pools.classes]]`: the machine classes of a pool, and the CI variable jobs choose one with.

use super::reader::Section;
use super::sources::ProvisionerConfig;
use super::values;
use crate::core::classes::{Classes, DEFAULT_VARIABLE, MachineClass};

/// The pool's classes, or `None` without `[[pools.classes]]` (one implicit class).
pub(super) fn read_classes(
    pool: &Section<'_>,
    sources: &[ProvisionerConfig],
    default_capacity: u32,
) -> Option<Classes> {
    let tables = pool.tables("classes");
    let variable: String = pool.or("class_variable", DEFAULT_VARIABLE.to_string());
    let default: Option<String> = pool.optional("default_class");
    if tables.is_empty() {
        if pool.has("class_variable") || default.is_some() {
            pool.problem(
                "classes",
                "class_variable and default_class need [[pools.classes]]",
            );
        }
        return None;
    }
    if sources.is_empty() {
        pool.problem("classes", "only applies to pools with a provisioner");
    }
    let list: Vec<MachineClass> = tables
        .into_iter()
        .filter_map(|t| read_class(t, sources, default_capacity))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for class in &list {
        if !seen.insert(class.name.as_str()) {
            pool.problem(
                "classes",
                format!("the name {:?} is used twice", class.name),
            );
        }
    }
    let default = default.or_else(|| list.first().map(|c| c.name.clone()))?;
    if !list.iter().any(|c| c.name == default) {
        pool.problem(
            "default_class",
            format!("{default:?} is not one of the pool's classes"),
        );
    }
    Some(Classes {
        variable,
        default,
        list,
    })
}

fn read_class(
    s: Section<'_>,
    sources: &[ProvisionerConfig],
    default_capacity: u32,
) -> Option<MachineClass> {
    let name: Option<String> = s.required("name");
    if let Some(n) = &name
        && let Err(e) = values::pool_name(n)
    {
        s.problem("name", e.replace("pool name", "class name"));
    }
    let capacity_per_machine: u32 = s.or("capacity_per_machine", default_capacity);
    if !(1..=1000).contains(&capacity_per_machine) {
        s.problem("capacity_per_machine", "must be between 1 and 1000");
    }
    let max_machines: Option<u32> = s.optional("max_machines");
    if max_machines == Some(0) {
        s.problem(
            "max_machines",
            "must be at least 1 (leave it out for no limit)",
        );
    }
    let named: Option<Vec<String>> = s.optional("sources");
    if let Some(named) = &named {
        if named.is_empty() {
            s.problem("sources", "a class needs at least one source");
        }
        for source in named {
            if !sources.iter().any(|p| &p.name == source) {
                s.problem(
                    "sources",
                    format!("{source:?} is not one of the pool's sources"),
                );
            }
        }
    }
    s.finish();
    Some(MachineClass {
        name: name?,
        capacity_per_machine,
        max_machines,
        sources: named.unwrap_or_default(),
    })
}
