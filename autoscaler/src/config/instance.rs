//! The instance id a state directory was started with (`<state.dir>/instance_id`).
//!
//! Machines carry the autoscaler's instance id in their labels, and `list` finds only those with
//! this autoscaler's id: an id that changes under a running fleet leaves its machines running,
//! unmanaged and billed. The default id is the host name, which changes when the host is
//! renamed or the state directory moves to another VM. So the id is recorded in the state
//! directory at the first start, and a default gives way to it; a written `instance_id` that
//! differs from it is refused, naming both and what to do.

use std::path::{Path, PathBuf};

use super::reader::Section;

const FILE_NAME: &str = "instance_id";

/// Where the id is recorded.
pub fn recorded_path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// The id recorded in `state_dir`, if any (first line, trimmed).
pub fn recorded(state_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(recorded_path(state_dir)).ok()?;
    let id = text.lines().next().unwrap_or("").trim().to_string();
    (!id.is_empty()).then_some(id)
}

/// The id to run with: the recorded one when the configuration did not write one, else the
/// written one, which must be the recorded one (a problem otherwise).
pub(super) fn effective(
    state_dir: &Path,
    configured: String,
    written: bool,
    root: &Section<'_>,
) -> String {
    match recorded(state_dir) {
        Some(recorded) if !written => recorded,
        Some(recorded) if recorded != configured => {
            root.problem(
                "server.instance_id",
                format!(
                    "is {configured:?}, but this state directory's machines carry the instance id {recorded:?} \
                     (recorded in {}): with another id they would run on unmanaged. Write instance_id = {recorded:?}, \
                     or destroy those machines and remove that file",
                    recorded_path(state_dir).display()
                ),
            );
            configured
        }
        _ => configured,
    }
}

/// Records `id` in `state_dir` when nothing is recorded yet (at start, once the store has
/// made the directory).
pub fn record(state_dir: &Path, id: &str) -> std::io::Result<()> {
    if recorded(state_dir).is_some() {
        return Ok(());
    }
    let path = recorded_path(state_dir);
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("{id}\n"))?;
    std::fs::File::open(&partial)?.sync_all()?;
    std::fs::rename(&partial, &path)
}
