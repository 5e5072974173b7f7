//! A table of the `config.toml` being imported that remembers which keys were read, so that
//! every key left unread can be named as not carried over.

use std::cell::RefCell;
use std::collections::BTreeSet;

use toml::{Table, Value};

/// A setting that has no place in the pool configuration, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The key path in `config.toml` (`runners[0].machine.OffPeakPeriods`).
    pub key: String,
    pub reason: String,
}

/// One table of the input, at a key path.
#[derive(Debug)]
pub struct Source<'a> {
    path: String,
    table: &'a Table,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Source<'a> {
    pub fn new(path: impl Into<String>, table: &'a Table) -> Self {
        Self {
            path: path.into(),
            table,
            read: RefCell::default(),
        }
    }

    /// This table's own key path (`runners[0]`).
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value of `key`, now counted as read.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        let value = self.table.get(key)?;
        self.read.borrow_mut().insert(key.to_string());
        Some(value)
    }

    pub fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(Value::as_integer)
    }

    pub fn float(&self, key: &str) -> Option<f64> {
        self.get(key)
            .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    pub fn table(&self, key: &str) -> Option<Source<'a>> {
        let table = self.get(key)?.as_table()?;
        Some(Source::new(self.key_path(key), table))
    }

    /// The tables of an array of tables (`[[runners.machine.autoscaling]]`).
    pub fn tables(&self, key: &str) -> Vec<Source<'a>> {
        let Some(Value::Array(items)) = self.get(key) else {
            return Vec::new();
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                Some(Source::new(
                    format!("{}[{i}]", self.key_path(key)),
                    v.as_table()?,
                ))
            })
            .collect()
    }

    /// Names `key` as not carried over, with `reason`, when it is set.
    pub fn drop(&self, key: &str, reason: &str, notes: &mut Vec<Note>) {
        if self.get(key).is_some() {
            notes.push(Note {
                key: self.key_path(key),
                reason: reason.to_string(),
            });
        }
    }

    /// Names every key not read so far as not carried over.
    pub fn rest(&self, reason: &str, notes: &mut Vec<Note>) {
        let read = self.read.borrow();
        for key in self.table.keys().filter(|k| !read.contains(*k)) {
            notes.push(Note {
                key: self.key_path(key),
                reason: reason.to_string(),
            });
        }
    }
}
