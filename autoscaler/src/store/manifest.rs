//! The store's witness, kept outside the database: which store lives in the state directory and
//! how far its durable history reached.
//!
//! sled recovers from a damaged log by keeping the longest valid prefix, so a log damaged at its
//! start looks like an empty store, and one damaged in the middle looks like an older one. Both
//! would be silent resets. The manifest (`store.json` next to the database) names the store by a
//! random id and records a commit number that the database also holds; at open, a database that
//! lost its id or went back in commits is refused with a recovery path instead.
//!
//! The manifest only ever records a commit number after the database flushed it, so a crash (a
//! lost unflushed tail) can never look like damage.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::journal::Position;

const FILE_NAME: &str = "store.json";
const FORMAT: &str = "autoscaler-store";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub schema: u32,
    /// Random, minted when the store is created; the database holds the same value.
    pub store_id: String,
    /// A commit number the database had flushed when this was written.
    pub commit: u64,
    /// The journal position that commit's checkpoint covered: entries before it are in the
    /// database on stable storage and are not replayed at open. Absent in manifests written
    /// before it existed (everything is replayed then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_covered: Option<Position>,
}

impl Manifest {
    pub fn new(schema: u32, store_id: String, commit: u64) -> Self {
        Self {
            format: FORMAT.into(),
            schema,
            store_id,
            commit,
            journal_covered: None,
        }
    }

    /// This manifest, recording that its commit's checkpoint covered the journal up to `at`.
    #[must_use]
    pub fn covering(mut self, at: Position) -> Self {
        self.journal_covered = Some(at);
        self
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// The manifest in `dir`, if there is one.
    pub fn read(dir: &Path) -> Result<Option<Self>, StoreError> {
        let path = Self::path(dir);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::Open {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                });
            }
        };
        let manifest: Self = serde_json::from_slice(&bytes).map_err(|e| StoreError::Damaged {
            path: path.display().to_string(),
            detail: format!("the store manifest is not readable: {e}"),
        })?;
        if manifest.format != FORMAT {
            return Err(StoreError::Damaged {
                path: path.display().to_string(),
                detail: format!("the store manifest has format {:?}", manifest.format),
            });
        }
        Ok(Some(manifest))
    }

    /// Replaces the manifest in `dir` atomically: a crash leaves the old one or the new one.
    pub fn write(&self, dir: &Path) -> Result<(), StoreError> {
        let path = Self::path(dir);
        let temporary = dir.join(format!("{FILE_NAME}.tmp"));
        let io = |e: std::io::Error| StoreError::Io(format!("{}: {e}", path.display()));
        let mut file = std::fs::File::create(&temporary).map_err(io)?;
        let json =
            serde_json::to_vec_pretty(self).map_err(|e| StoreError::Encode(e.to_string()))?;
        file.write_all(&json).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&temporary, &path).map_err(io)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)
    }
}

/// What the database says about itself at open.
#[derive(Debug)]
pub struct Found {
    pub store_id: Option<String>,
    pub commit: u64,
    /// Whether any record is stored (a store from before manifests has records but no id).
    pub has_records: bool,
}

/// What to do at open, given the manifest and what the database holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new store, or one written before manifests existed: give it this id.
    Adopt,
    /// The database is the store the manifest names, with all its recorded history.
    Intact,
    /// The manifest was lost; the database carries on and a new manifest is written.
    Rewrite,
}

/// Checks the database against the manifest. Pure, so every case is tested directly.
pub fn verdict(
    dir: &Path,
    manifest: Option<&Manifest>,
    found: &Found,
) -> Result<Verdict, StoreError> {
    let damaged = |detail: String| StoreError::Damaged {
        path: dir.display().to_string(),
        detail,
    };
    match (manifest, &found.store_id) {
        (None, None) => Ok(Verdict::Adopt),
        (None, Some(_)) => Ok(Verdict::Rewrite),
        (Some(m), None) => Err(damaged(format!(
            "the database holds no store, but {FILE_NAME} says store {} with {} commits lives here: \
             the database files are damaged or were replaced{}",
            m.store_id,
            m.commit,
            if found.has_records {
                ""
            } else {
                " (it reads as empty)"
            }
        ))),
        (Some(m), Some(id)) if *id != m.store_id => Err(damaged(format!(
            "the database is store {id}, but {FILE_NAME} says store {} lives here: the directory mixes two stores",
            m.store_id
        ))),
        (Some(m), Some(_)) if found.commit < m.commit => Err(damaged(format!(
            "the database ends at commit {}, but commit {} was on disk before: its log is truncated or damaged",
            found.commit, m.commit
        ))),
        (Some(_), Some(_)) => Ok(Verdict::Intact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(id: Option<&str>, commit: u64) -> Found {
        Found {
            store_id: id.map(str::to_string),
            commit,
            has_records: id.is_some(),
        }
    }

    #[test]
    fn every_combination_of_manifest_and_database_has_a_verdict() {
        let dir = Path::new("/state");
        let m = Manifest::new(1, "a1".into(), 10);
        assert_eq!(verdict(dir, None, &found(None, 0)).unwrap(), Verdict::Adopt);
        assert_eq!(
            verdict(dir, None, &found(Some("a1"), 3)).unwrap(),
            Verdict::Rewrite
        );
        assert_eq!(
            verdict(dir, Some(&m), &found(Some("a1"), 10)).unwrap(),
            Verdict::Intact
        );
        assert_eq!(
            verdict(dir, Some(&m), &found(Some("a1"), 12)).unwrap(),
            Verdict::Intact
        );
        let empty = verdict(dir, Some(&m), &found(None, 0))
            .unwrap_err()
            .to_string();
        assert!(
            empty.contains("holds no store") && empty.contains("reads as empty"),
            "{empty}"
        );
        let other = verdict(dir, Some(&m), &found(Some("b2"), 10))
            .unwrap_err()
            .to_string();
        assert!(other.contains("mixes two stores"), "{other}");
        let behind = verdict(dir, Some(&m), &found(Some("a1"), 9))
            .unwrap_err()
            .to_string();
        assert!(
            behind.contains("ends at commit 9") && behind.contains("commit 10"),
            "{behind}"
        );
    }

    #[test]
    fn the_manifest_round_trips_and_garbage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), None);
        let m = Manifest::new(1, "a1".into(), 4);
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), Some(m));
        std::fs::write(Manifest::path(dir.path()), b"{not json").unwrap();
        let err = Manifest::read(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    }
}
