//! Selecting artifact files (`paths` globs, directories recursive, `exclude`, untracked)
//! and writing them as zip (default), gzip or raw (runner-protocol.md §7.1 formats).

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use glob::{MatchOptions, Pattern};
use zip::write::SimpleFileOptions;

use super::ArtifactError;
use crate::client::retry::civil_from_days;

/// Doublestar-like matching: `*` stays within one path component, dot files match.
const MATCH: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// Files and directories selected for one artifact, relative to the project directory,
/// in a stable order, with the messages the runner prints per pattern.
#[derive(Debug, Default)]
pub struct Selection {
    pub entries: BTreeSet<PathBuf>,
    pub messages: Vec<String>,
    pub warnings: Vec<String>,
}

/// A relative path that stays inside the project directory, normalised (`./` removed).
fn normalise(path: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn walk(root: &Path, rel: &Path, into: &mut BTreeSet<PathBuf>) -> io::Result<()> {
    let full = root.join(rel);
    let meta = fs::symlink_metadata(&full)?;
    if !rel.as_os_str().is_empty() {
        into.insert(rel.to_path_buf());
    }
    if meta.is_dir() {
        for entry in fs::read_dir(&full)? {
            let entry = entry?;
            walk(root, &rel.join(entry.file_name()), into)?;
        }
    }
    Ok(())
}

fn is_excluded(rel: &Path, excludes: &[Pattern]) -> bool {
    // A path is excluded when it or one of its parent directories matches.
    rel.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| excludes.iter().any(|p| p.matches_path_with(a, MATCH)))
}

/// Select files under `project_dir` for `paths` (already variable-expanded), minus
/// `exclude`, plus `untracked` (relative paths from `git ls-files -o`).
pub fn select(
    project_dir: &Path,
    paths: &[String],
    exclude: &[String],
    untracked: &[PathBuf],
) -> Selection {
    let mut sel = Selection::default();
    let mut excludes = Vec::new();
    for pattern in exclude {
        match normalise(pattern).map(|p| Pattern::new(&p.to_string_lossy())) {
            Some(Ok(p)) => excludes.push(p),
            _ => sel
                .warnings
                .push(format!("{pattern}: invalid exclude pattern, ignored")),
        }
    }
    let root_pattern = Pattern::escape(&project_dir.to_string_lossy());
    for path in paths {
        let Some(rel_pattern) = normalise(path) else {
            sel.warnings.push(format!(
                "{path}: artifact path is not a subpath of the project directory"
            ));
            continue;
        };
        let full = format!("{root_pattern}/{}", rel_pattern.to_string_lossy());
        let mut found = BTreeSet::new();
        let mut excluded = 0usize;
        match glob::glob_with(&full, MATCH) {
            Ok(matches) => {
                for m in matches.flatten() {
                    let Ok(rel) = m.strip_prefix(project_dir) else {
                        continue;
                    };
                    let mut here = BTreeSet::new();
                    if rel.as_os_str().is_empty() {
                        let _ = walk(project_dir, Path::new(""), &mut here);
                    } else if walk(project_dir, rel, &mut here).is_err() {
                        continue;
                    }
                    for e in here {
                        if is_excluded(&e, &excludes) {
                            excluded += 1;
                        } else {
                            found.insert(e);
                        }
                    }
                }
            }
            Err(e) => {
                sel.warnings.push(format!("{path}: invalid pattern: {e}"));
                continue;
            }
        }
        if found.is_empty() && excluded == 0 {
            sel.warnings.push(format!(
                "{path}: no matching files. Ensure that the artifact path is relative to the working directory ({})",
                project_dir.display()
            ));
        } else {
            let mut msg = format!(
                "{path}: found {} matching artifact files and directories",
                found.len()
            );
            if excluded > 0 {
                msg.push_str(&format!(" ({excluded} excluded)"));
            }
            sel.messages.push(msg);
        }
        sel.entries.extend(found);
    }
    if !untracked.is_empty() {
        let before = sel.entries.len();
        for rel in untracked {
            if let Some(rel) = normalise(&rel.to_string_lossy())
                && !rel.as_os_str().is_empty()
                && !is_excluded(&rel, &excludes)
            {
                sel.entries.insert(rel);
            }
        }
        sel.messages.push(format!(
            "untracked: found {} files",
            sel.entries.len() - before
        ));
    }
    sel
}

fn zip_time(meta: &fs::Metadata) -> zip::DateTime {
    let secs = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let year = u16::try_from(y).unwrap_or(1980);
    zip::DateTime::from_date_and_time(
        year,
        m as u8,
        d as u8,
        (rem / 3600) as u8,
        ((rem % 3600) / 60) as u8,
        (rem % 60) as u8,
    )
    .unwrap_or_default()
}

fn zip_err(e: zip::result::ZipError) -> ArtifactError {
    ArtifactError::Archive(e.to_string())
}

/// Write a zip of `entries` (relative to `root`) to `out`. Directories become directory
/// entries, symlinks stay symlinks, file modes are kept.
pub fn write_zip<W: Write + io::Seek>(
    root: &Path,
    entries: &BTreeSet<PathBuf>,
    out: W,
) -> Result<W, ArtifactError> {
    let mut zip = zip::ZipWriter::new(out);
    for rel in entries {
        let full = root.join(rel);
        let meta = fs::symlink_metadata(&full)?;
        let name = rel.to_string_lossy().into_owned();
        let options = SimpleFileOptions::default()
            .last_modified_time(zip_time(&meta))
            .unix_permissions(meta.permissions().mode() & 0o7777);
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&full)?;
            zip.add_symlink(name, target.to_string_lossy(), options)
                .map_err(zip_err)?;
        } else if meta.is_dir() {
            zip.add_directory(format!("{name}/"), options)
                .map_err(zip_err)?;
        } else if meta.is_file() {
            let options = options.large_file(meta.len() >= u64::from(u32::MAX));
            zip.start_file(name, options).map_err(zip_err)?;
            let mut file = fs::File::open(&full)?;
            io::copy(&mut file, &mut zip)?;
        }
    }
    zip.finish().map_err(zip_err)
}

/// Write regular files of `entries` as concatenated gzip members (one per file, with its
/// name in the header), the runner's gzip artifact format.
pub fn write_gzip<W: Write>(
    root: &Path,
    entries: &BTreeSet<PathBuf>,
    mut out: W,
) -> Result<W, ArtifactError> {
    for rel in entries {
        let full = root.join(rel);
        if !fs::symlink_metadata(&full)?.is_file() {
            continue;
        }
        let mut encoder = flate2::GzBuilder::new()
            .filename(rel.to_string_lossy().as_bytes())
            .write(&mut out, flate2::Compression::default());
        io::copy(&mut fs::File::open(&full)?, &mut encoder)?;
        encoder.finish()?;
    }
    Ok(out)
}

/// Extract a zip archive into `dest` (entries outside `dest` are refused by the zip
/// crate). Returns the number of entries.
pub fn extract_zip(archive: &Path, dest: &Path) -> Result<usize, ArtifactError> {
    extract_zip_from(fs::File::open(archive)?, dest)
}

/// [`extract_zip`] from an archive already open: the caller may have opened it with rights the
/// extraction (run with a job user's filesystem identity) does not have.
pub fn extract_zip_from(file: fs::File, dest: &Path) -> Result<usize, ArtifactError> {
    let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
    let count = zip.len();
    zip.extract(dest).map_err(zip_err)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        fs::create_dir_all(p.join("out/sub")).unwrap();
        fs::write(p.join("out/a.txt"), "a").unwrap();
        fs::write(p.join("out/b.log"), "b").unwrap();
        fs::write(p.join("out/sub/c.txt"), "c").unwrap();
        fs::write(p.join("top.bin"), "t").unwrap();
        fs::write(p.join(".hidden"), "h").unwrap();
        dir
    }

    fn names(sel: &Selection) -> Vec<String> {
        sel.entries
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn directories_are_recursive_and_excludes_apply() {
        let dir = tree();
        let sel = select(dir.path(), &["out/".into()], &["out/*.log".into()], &[]);
        assert_eq!(
            names(&sel),
            ["out", "out/a.txt", "out/sub", "out/sub/c.txt"]
        );
        assert!(
            sel.messages[0].contains("found 4 matching"),
            "{:?}",
            sel.messages
        );
        let sel = select(dir.path(), &["out".into()], &["out/sub".into()], &[]);
        assert_eq!(names(&sel), ["out", "out/a.txt", "out/b.log"]);
    }

    #[test]
    fn globs_and_doublestar() {
        let dir = tree();
        let sel = select(dir.path(), &["out/**/*.txt".into()], &[], &[]);
        assert_eq!(names(&sel), ["out/a.txt", "out/sub/c.txt"]);
        let sel = select(dir.path(), &["*.bin".into(), ".hidden".into()], &[], &[]);
        assert_eq!(names(&sel), [".hidden", "top.bin"]);
        let sel = select(dir.path(), &["./top.bin".into()], &[], &[]);
        assert_eq!(names(&sel), ["top.bin"]);
    }

    #[test]
    fn missing_and_escaping_paths_warn() {
        let dir = tree();
        let sel = select(
            dir.path(),
            &["nope/".into(), "../etc".into(), "/etc".into()],
            &[],
            &[],
        );
        assert!(sel.entries.is_empty());
        assert_eq!(sel.warnings.len(), 3, "{:?}", sel.warnings);
        assert!(sel.warnings[0].contains("no matching files"));
    }

    #[test]
    fn untracked_files_are_added() {
        let dir = tree();
        let sel = select(
            dir.path(),
            &[],
            &["*.bin".into()],
            &["top.bin".into(), "out/a.txt".into()],
        );
        assert_eq!(names(&sel), ["out/a.txt"]);
    }

    #[test]
    fn zip_roundtrip_keeps_content_modes_and_symlinks() {
        let dir = tree();
        let p = dir.path();
        fs::set_permissions(p.join("out/a.txt"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a.txt", p.join("out/link")).unwrap();
        let sel = select(p, &["out/".into()], &[], &[]);
        let bytes = write_zip(p, &sel.entries, io::Cursor::new(Vec::new()))
            .unwrap()
            .into_inner();
        let archive = tempfile::NamedTempFile::new().unwrap();
        fs::write(archive.path(), &bytes).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let n = extract_zip(archive.path(), dest.path()).unwrap();
        assert_eq!(n, 6);
        assert_eq!(
            fs::read_to_string(dest.path().join("out/sub/c.txt")).unwrap(),
            "c"
        );
        let mode = fs::metadata(dest.path().join("out/a.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            fs::read_link(dest.path().join("out/link")).unwrap(),
            Path::new("a.txt")
        );
    }

    #[test]
    fn gzip_members_concatenate() {
        let dir = tree();
        let sel = select(
            dir.path(),
            &["out/a.txt".into(), "out/b.log".into()],
            &[],
            &[],
        );
        let bytes = write_gzip(dir.path(), &sel.entries, Vec::new()).unwrap();
        let mut decoded = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut decoded)
            .unwrap();
        assert_eq!(decoded, "ab");
    }
}
