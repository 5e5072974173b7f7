//! Reading a workload or policy file: TOML through the configuration's own reader, so that
//! every problem names its key path, and the line it is on when the key is in the file.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Toml};
use figment::value::{Dict, Value};

use super::SimulateError;
use crate::config::reader::{Problem, Problems};

/// A file read into a table, with its text for finding lines.
#[derive(Debug)]
pub struct Input {
    pub path: PathBuf,
    pub text: String,
    pub dict: Dict,
}

impl Input {
    pub fn read(path: &Path) -> Result<Self, SimulateError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimulateError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        let invalid = |message: String| SimulateError::Invalid {
            file: path.to_path_buf(),
            problems: vec![message],
        };
        let value: Value = Figment::from(Toml::string(&text))
            .extract()
            .map_err(|e| invalid(e.to_string()))?;
        let Value::Dict(_, dict) = value else {
            return Err(invalid("is not a TOML table".into()));
        };
        Ok(Self {
            path: path.to_path_buf(),
            text,
            dict,
        })
    }

    /// Problems found, as one error naming the file, and each problem's line where known.
    pub fn check(&self, problems: Problems) -> Result<(), SimulateError> {
        let problems = problems.into_vec();
        if problems.is_empty() {
            return Ok(());
        }
        Err(SimulateError::Invalid {
            file: self.path.clone(),
            problems: problems.iter().map(|p| self.describe(p)).collect(),
        })
    }

    fn describe(&self, p: &Problem) -> String {
        match line_of(&self.text, &p.path) {
            Some(line) => format!("line {line}: {p}"),
            None => p.to_string(),
        }
    }
}

/// The line (1-based) of the key or table header that best matches a key path such as
/// `pools[0].policy[1].periods[0]`: the longest path of the file that the key path starts with.
pub fn line_of(text: &str, key_path: &str) -> Option<usize> {
    let mut table = String::new();
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    let mut best: Option<(usize, usize)> = None; // (length matched, line)
    let mut consider = |path: &str, line: usize| {
        let matches = key_path == path
            || key_path.starts_with(&format!("{path}."))
            || key_path.starts_with(&format!("{path}["));
        if matches && best.is_none_or(|(len, _)| path.len() > len) {
            best = Some((path.len(), line));
        }
    };
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let parent = resolve(name.trim(), &counts, true);
            let n = counts.entry(parent.clone()).or_insert(0);
            table = format!("{parent}[{n}]");
            *n += 1;
            consider(&table, index + 1);
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            table = resolve(name.trim(), &counts, false);
            consider(&table, index + 1);
        } else if let Some((key, _)) = line.split_once('=')
            && !line.starts_with('#')
        {
            let key = key.trim().trim_matches('"');
            let path = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            consider(&path, index + 1);
        }
    }
    best.map(|(_, line)| line)
}

/// `pools.policy` as a path with the index of the latest `[[pools]]` entry: `pools[0].policy`.
/// The last part is left without an index for an array header (the caller adds it).
fn resolve(dotted: &str, counts: &std::collections::HashMap<String, usize>, array: bool) -> String {
    let parts: Vec<&str> = dotted.split('.').map(str::trim).collect();
    let mut path = String::new();
    for (i, part) in parts.iter().enumerate() {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
        let last = i + 1 == parts.len();
        if let Some(n) = counts.get(&path)
            && !(last && array)
        {
            path = format!("{path}[{}]", n.saturating_sub(1));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::line_of;

    #[test]
    fn key_paths_are_found_on_their_lines() {
        let text = "seed = 1\n[[pools]]\nname = \"a\"\n[pools.scaling]\nidle_count = 2\n\
                    [[pools.policy]]\nperiods = [\"x\"]\n[[pools]]\nname = \"b\"\n[[pools.policy]]\n\
                    idle_time = \"1m\"\n[[pools.policy]]\ntimezone = \"Mars\"\n";
        assert_eq!(line_of(text, "seed"), Some(1));
        assert_eq!(line_of(text, "pools[0].scaling.idle_count"), Some(5));
        assert_eq!(line_of(text, "pools[0].policy[0].periods[0]"), Some(7));
        assert_eq!(line_of(text, "pools[1].policy[0].idle_time"), Some(11));
        assert_eq!(line_of(text, "pools[1].policy[1].timezone"), Some(13));
        // A missing key: the line of its table.
        assert_eq!(line_of(text, "pools[1].policy[1].idle_count"), Some(12));
        assert_eq!(line_of(text, "nothing"), None);
    }
}
