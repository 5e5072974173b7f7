//! Harness shared by the end-to-end tests and the demo: the project's real binaries as
//! processes on loopback ports, and the fake GitLab they talk to (see `tests/fake-gitlab`).

pub mod process;
pub mod stack;

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::{Context, Result};

/// The trace checksum in the form runners report it (`crc32:%08x`, runner-api.md §5).
pub fn crc32_tag(bytes: &[u8]) -> String {
    format!("crc32:{:08x}", crc32fast::hash(bytes))
}

/// The files of a zip archive, by name.
pub fn unzip(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes)).context("not a zip archive")?;
    let mut files = BTreeMap::new();
    for i in 0..archive.len() {
        let mut file = archive.by_index(i)?;
        if file.is_dir() {
            continue;
        }
        let mut content = Vec::new();
        file.read_to_end(&mut content)?;
        files.insert(file.name().to_string(), content);
    }
    Ok(files)
}
