//! `pools[].sidecar.job_user`: the unprivileged user the built-in sidecar runs job scripts as.
//! Jobs are arbitrary code; run as the sidecar's own user they could read its token and ask for
//! the pool's next jobs, other projects' included.

use super::reader::Section;

/// The default job user, created on each machine when missing.
pub const DEFAULT_JOB_USER: &str = "autoscaler-job";

/// The job user of a pool whose sidecar mode is `builtin` (`None`: jobs run as the sidecar's
/// own user, which only an explicit `job_user = ""` chooses).
pub(super) fn read_job_user(s: &Section<'_>, builtin: bool) -> Option<String> {
    if !builtin {
        if s.has("job_user") {
            s.problem("job_user", "only applies to mode = \"builtin\"");
        }
        return None;
    }
    let name: String = s.or("job_user", DEFAULT_JOB_USER.to_string());
    if name.is_empty() {
        return None;
    }
    let valid = name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid || name == "root" {
        s.problem(
            "job_user",
            "must be a user name (a-z 0-9 _ -, at most 32) other than root, or \"\" to run jobs as the sidecar's user",
        );
    }
    Some(name)
}
