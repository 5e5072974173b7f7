//! Job artifacts (runner-protocol.md §7): selecting and archiving files ([`archive`]), upload
//! and download ([`transfer`]).

pub mod archive;
pub mod transfer;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("archive error: {0}")]
    Archive(String),
    #[error("unsupported artifact format {0:?}")]
    UnsupportedFormat(String),
    #[error("raw artifacts need exactly one file, found {0}")]
    RawNeedsOneFile(usize),
    #[error("artifact is too large (413)")]
    TooLarge,
    #[error("unexpected answer {0}")]
    Status(u16),
    #[error("transfer failed: {0}")]
    Transfer(String),
    #[error("downloaded file is not a zip archive")]
    NotZip,
}

impl From<ClientError> for ArtifactError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Status { status } => ArtifactError::Status(status),
            other => ArtifactError::Transfer(other.to_string()),
        }
    }
}

/// Archive formats the sidecar produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Zip,
    Gzip,
    Raw,
}

impl Format {
    /// From `artifact_format` (empty = zip). `zipzstd`/`tarzstd` are not supported.
    pub fn parse(value: &str) -> Result<Self, ArtifactError> {
        match value {
            "" | "zip" => Ok(Format::Zip),
            "gzip" => Ok(Format::Gzip),
            "raw" => Ok(Format::Raw),
            other => Err(ArtifactError::UnsupportedFormat(other.to_owned())),
        }
    }

    /// Upload filename: base of the artifact name (default `artifacts`) + extension.
    pub fn filename(self, name: &str) -> String {
        let base = name.rsplit('/').next().unwrap_or("");
        let base = if base.is_empty() { "artifacts" } else { base };
        match self {
            Format::Zip => format!("{base}.zip"),
            Format::Gzip => format!("{base}.gz"),
            Format::Raw => base.to_owned(),
        }
    }
}

/// Write the selected entries into a new temporary file in `tmp_dir` (blocking IO).
pub fn build_archive(
    format: Format,
    project_dir: &Path,
    entries: &BTreeSet<PathBuf>,
    tmp_dir: &Path,
) -> Result<tempfile::NamedTempFile, ArtifactError> {
    build_archive_into(
        format,
        project_dir,
        entries,
        tempfile::NamedTempFile::new_in(tmp_dir)?,
    )
}

/// [`build_archive`] into a temporary file opened beforehand, written through its handle only
/// (so that it may be opened with other rights than the project's files are read with).
pub fn build_archive_into(
    format: Format,
    project_dir: &Path,
    entries: &BTreeSet<PathBuf>,
    tmp: tempfile::NamedTempFile,
) -> Result<tempfile::NamedTempFile, ArtifactError> {
    let file = tmp.as_file().try_clone()?;
    match format {
        Format::Zip => {
            let mut w = archive::write_zip(project_dir, entries, std::io::BufWriter::new(file))?;
            std::io::Write::flush(&mut w)?;
        }
        Format::Gzip => {
            let mut w = archive::write_gzip(project_dir, entries, std::io::BufWriter::new(file))?;
            std::io::Write::flush(&mut w)?;
        }
        Format::Raw => {
            let files: Vec<_> = entries
                .iter()
                .filter(|e| project_dir.join(e).is_file())
                .collect();
            if files.len() != 1 {
                return Err(ArtifactError::RawNeedsOneFile(files.len()));
            }
            let mut source = std::fs::File::open(project_dir.join(files[0]))?;
            std::io::copy(&mut source, &mut &file)?;
        }
    }
    Ok(tmp)
}

/// Whether a downloaded file looks like a zip archive (local file or empty-archive magic).
pub fn is_zip(path: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path)?;
    let n = file.read(&mut magic)?;
    Ok(n == 4 && (magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_filenames() {
        assert_eq!(Format::parse("").unwrap(), Format::Zip);
        assert_eq!(Format::parse("gzip").unwrap(), Format::Gzip);
        assert!(Format::parse("tarzstd").is_err());
        assert_eq!(Format::Zip.filename(""), "artifacts.zip");
        assert_eq!(Format::Zip.filename("out"), "out.zip");
        assert_eq!(Format::Zip.filename("a/b/out"), "out.zip");
        assert_eq!(Format::Gzip.filename("junit"), "junit.gz");
        assert_eq!(Format::Raw.filename("metrics"), "metrics");
    }

    #[test]
    fn raw_needs_one_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("one"), "1").unwrap();
        std::fs::write(dir.path().join("two"), "2").unwrap();
        let one: BTreeSet<PathBuf> = [PathBuf::from("one")].into();
        let tmp = build_archive(Format::Raw, dir.path(), &one, dir.path()).unwrap();
        assert_eq!(std::fs::read(tmp.path()).unwrap(), b"1");
        let both: BTreeSet<PathBuf> = [PathBuf::from("one"), PathBuf::from("two")].into();
        assert!(matches!(
            build_archive(Format::Raw, dir.path(), &both, dir.path()),
            Err(ArtifactError::RawNeedsOneFile(2))
        ));
        let zip = build_archive(Format::Zip, dir.path(), &both, dir.path()).unwrap();
        assert!(is_zip(zip.path()).unwrap());
        assert!(!is_zip(&dir.path().join("one")).unwrap());
    }
}
