//! Reads a configuration tree key by key, collecting every problem instead of stopping at the
//! first one, so that an operator sees all mistakes of a file in one run.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

use figment::value::{Dict, Value};
use serde::de::DeserializeOwned;

/// One thing wrong with the configuration, at a key path such as `pools[0].request_concurrency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The problems found so far, and every key asked for, present or not. Shared by all sections
/// of one read.
#[derive(Debug, Default)]
pub struct Problems {
    found: RefCell<Vec<Problem>>,
    asked: RefCell<BTreeSet<String>>,
}

impl Problems {
    pub fn add(&self, path: impl Into<String>, message: impl Into<String>) {
        self.found.borrow_mut().push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn into_vec(self) -> Vec<Problem> {
        self.found.into_inner()
    }

    /// The key paths asked for, with array indices dropped (`pools.scaling.idle_count`): the
    /// keys this reader knows, which the book's configuration reference is checked against.
    pub fn into_asked(self) -> BTreeSet<String> {
        self.asked.into_inner()
    }

    fn note_asked(&self, path: &str) {
        let mut key = String::with_capacity(path.len());
        let mut in_index = false;
        for c in path.chars() {
            match c {
                '[' => in_index = true,
                ']' => in_index = false,
                _ if !in_index => key.push(c),
                _ => {}
            }
        }
        self.asked.borrow_mut().insert(key);
    }
}

/// A table of the configuration being read. Every key read is remembered; [`Section::finish`]
/// reports the keys nobody asked for, which is how unknown keys are rejected.
#[derive(Debug)]
pub struct Section<'a> {
    path: String,
    dict: &'a Dict,
    used: RefCell<BTreeSet<String>>,
    problems: &'a Problems,
}

impl<'a> Section<'a> {
    pub fn root(dict: &'a Dict, problems: &'a Problems) -> Self {
        Self {
            path: String::new(),
            dict,
            used: RefCell::default(),
            problems,
        }
    }

    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub fn problem(&self, key: &str, message: impl Into<String>) {
        self.problems.add(self.path_of(key), message);
    }

    pub fn has(&self, key: &str) -> bool {
        self.dict.contains_key(key)
    }

    fn raw(&self, key: &str) -> Option<&'a Value> {
        self.used.borrow_mut().insert(key.to_string());
        self.problems.note_asked(&self.path_of(key));
        self.dict.get(key)
    }

    /// A value that may be absent. Present but of the wrong type is a problem (and `None`).
    pub fn optional<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        let value = self.raw(key)?;
        match value.deserialize::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                self.problem(key, describe(&e));
                None
            }
        }
    }

    /// A value that must be present.
    pub fn required<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        if !self.dict.contains_key(key) {
            self.used.borrow_mut().insert(key.to_string());
            self.problems.note_asked(&self.path_of(key));
            self.problem(key, "is required");
            return None;
        }
        self.optional(key)
    }

    /// A value with a default. A present but invalid value is a problem and the default is
    /// returned so that reading can go on and find more problems.
    pub fn or<T: DeserializeOwned>(&self, key: &str, default: T) -> T {
        self.optional(key).unwrap_or(default)
    }

    /// A value parsed by `parse` from its string (or number) form, e.g. durations and URLs.
    pub fn parsed<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.raw(key)?;
        match parse(value) {
            Ok(v) => Some(v),
            Err(message) => {
                self.problem(key, message);
                None
            }
        }
    }

    /// A nested table; absent means empty.
    pub fn table(&self, key: &str) -> Option<Section<'a>> {
        match self.raw(key) {
            None => None,
            Some(Value::Dict(_, dict)) => Some(self.child(self.path_of(key), dict)),
            Some(_) => {
                self.problem(key, "must be a table");
                None
            }
        }
    }

    /// An array of tables (`[[pools]]`).
    pub fn tables(&self, key: &str) -> Vec<Section<'a>> {
        match self.raw(key) {
            None => Vec::new(),
            Some(Value::Array(_, items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let path = format!("{}[{i}]", self.path_of(key));
                    match item {
                        Value::Dict(_, dict) => Some(self.child(path, dict)),
                        _ => {
                            self.problems.add(path, "must be a table");
                            None
                        }
                    }
                })
                .collect(),
            Some(_) => {
                self.problem(key, "must be an array of tables ([[...]])");
                Vec::new()
            }
        }
    }

    fn child(&self, path: String, dict: &'a Dict) -> Section<'a> {
        Section {
            path,
            dict,
            used: RefCell::default(),
            problems: self.problems,
        }
    }

    /// Reports every key of this table that was never read.
    pub fn finish(self) {
        let used = self.used.borrow();
        for key in self.dict.keys() {
            if !used.contains(key) {
                self.problem(key, "unknown key");
            }
        }
    }
}

/// figment's messages name the expected type; strip its own path prefix, we add ours.
fn describe(e: &figment::Error) -> String {
    e.kind.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::Figment;
    use figment::providers::{Format, Toml};

    fn dict(toml: &str) -> Dict {
        let value: Value = Figment::from(Toml::string(toml)).extract().unwrap();
        match value {
            Value::Dict(_, d) => d,
            other => panic!("not a dict: {other:?}"),
        }
    }

    #[test]
    fn collects_all_problems_with_paths() {
        let d = dict("a = 'x'\nextra = 1\n[t]\nn = 'nan'\n[[list]]\nk = 1\n[[list]]\nbad = 2\n");
        let problems = Problems::default();
        let root = Section::root(&d, &problems);
        let a: Option<u32> = root.optional("a");
        assert!(a.is_none());
        let missing: Option<u32> = root.required("missing");
        assert!(missing.is_none());
        let t = root.table("t").unwrap();
        let _n: Option<u32> = t.optional("n");
        t.finish();
        for item in root.tables("list") {
            let _k: Option<u32> = item.optional("k");
            item.finish();
        }
        root.finish();
        let paths: Vec<String> = problems.into_vec().into_iter().map(|p| p.path).collect();
        assert_eq!(paths, ["a", "missing", "t.n", "list[1].bad", "extra"]);
    }

    #[test]
    fn remembers_every_key_asked_without_indices() {
        let d = dict("[[list]]\nk = 1\n[[list]]\nk = 2\n");
        let problems = Problems::default();
        let root = Section::root(&d, &problems);
        let _absent: Option<u32> = root.optional("absent");
        for item in root.tables("list") {
            let _k: Option<u32> = item.optional("k");
            let _t = item.table("sub");
        }
        let asked: Vec<String> = problems.into_asked().into_iter().collect();
        assert_eq!(asked, ["absent", "list", "list.k", "list.sub"]);
    }
}
