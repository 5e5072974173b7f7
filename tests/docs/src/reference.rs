//! The configuration reference (`docs/src/configuration/reference.md`): one `## ` heading per
//! table (its TOML header in backticks) and a table whose rows start with one key in
//! backticks. Read into the key paths it documents, as the reader names them.

use std::collections::BTreeMap;

use crate::markdown;

/// The documented key paths (`pools.scaling.idle_count`) with the line each is on, and the
/// tables named by headings (`pools.scaling`).
#[derive(Debug, Default)]
pub struct Documented {
    pub keys: BTreeMap<String, usize>,
    pub tables: BTreeMap<String, usize>,
    pub duplicates: Vec<String>,
}

pub fn documented(text: &str) -> Documented {
    let mut found = Documented::default();
    let headings = markdown::level_two_headings(text);
    let lines: Vec<&str> = text.lines().collect();
    for (i, (heading, line)) in headings.iter().enumerate() {
        let Some(table) = table_of(heading) else {
            continue;
        };
        found.tables.insert(table.clone(), *line);
        let end = headings
            .get(i + 1)
            .map_or(lines.len(), |(_, next)| next - 1);
        for (offset, row) in lines[*line..end].iter().enumerate() {
            let Some(key) = key_of(row) else {
                continue;
            };
            let path = format!("{table}.{key}");
            if found.keys.insert(path.clone(), line + offset + 1).is_some() {
                found.duplicates.push(path);
            }
        }
    }
    found
}

/// `[pools.scaling]` or `[[pools.policy]]` → `pools.scaling`, `pools.policy`.
fn table_of(heading: &str) -> Option<String> {
    let inner = heading.trim().trim_start_matches('[').trim_end_matches(']');
    (heading.trim().starts_with('[') && !inner.is_empty()).then(|| inner.to_string())
}

/// ``| `listen` | …`` → `listen`; the header and separator rows are not keys.
fn key_of(row: &str) -> Option<&str> {
    let cell = row.trim().strip_prefix('|')?.split('|').next()?.trim();
    let key = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!key.is_empty() && !key.contains(' ')).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keys_under_table_headings() {
        let text = "# Reference\n\n## `[server]`\n\n| key | type |\n|---|---|\n| `listen` | address |\n\n## `[[pools]]`\n\n| key | type |\n|---|---|\n| `name` | string |\n| `name` | again |\n";
        let found = documented(text);
        assert_eq!(
            found.keys.keys().collect::<Vec<_>>(),
            ["pools.name", "server.listen"]
        );
        assert_eq!(found.tables.keys().collect::<Vec<_>>(), ["pools", "server"]);
        assert_eq!(found.duplicates, ["pools.name"]);
    }
}
