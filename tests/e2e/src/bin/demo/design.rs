//! How each demo job is designed to end, checked against what GitLab ended up with: the demo
//! fails (non-zero exit) when any job ends otherwise, so that a broken path cannot hide behind
//! a summary nobody reads.

use fake_gitlab::control::{JobStatus, JobView};

/// Why `view` (with its stored `trace`) is not how the job called `what` was designed to end,
/// or `None` when it is.
pub fn deviation(what: &str, view: &JobView, trace: &str) -> Option<String> {
    let (status, reason, exit_code) = designed_end(what);
    if view.status != status {
        return Some(format!(
            "ended {}, designed to end {}",
            view.status.as_str(),
            status.as_str()
        ));
    }
    if view.failure_reason.as_deref() != reason {
        return Some(format!(
            "failure reason {:?}, designed {reason:?}",
            view.failure_reason
        ));
    }
    if exit_code.is_some() && view.exit_code != exit_code {
        return Some(format!(
            "exit code {:?}, designed {exit_code:?}",
            view.exit_code
        ));
    }
    if view.reported_checksum.as_deref() != Some(view.trace_crc32.as_str()) {
        return Some(format!(
            "trace checksum {:?} from the runner, {} stored",
            view.reported_checksum, view.trace_crc32
        ));
    }
    content_deviation(what, view, trace)
}

/// Status, failure reason and exit code each kind of demo job is designed to end with.
fn designed_end(what: &str) -> (JobStatus, Option<&'static str>, Option<i64>) {
    match what {
        "failing tests (exit 2)" => (JobStatus::Failed, Some("script_failure"), Some(2)),
        "long job, canceled while running" => (JobStatus::Canceled, None, None),
        _ => (JobStatus::Success, None, None),
    }
}

/// What the trace or the artifacts of a job must show beyond its status.
fn content_deviation(what: &str, view: &JobView, trace: &str) -> Option<String> {
    let missing =
        |needle: &str| (!trace.contains(needle)).then(|| format!("no {needle:?} in its log"));
    match what {
        "a build log of 5,000 lines" => missing("compiling unit 5000"),
        "build with artifacts" => view
            .artifacts
            .is_empty()
            .then(|| "no artifact stored".to_string()),
        "masked secret" => {
            if trace.contains("super-secret-value") {
                Some("the secret is in its log".to_string())
            } else {
                missing("deploying with token [MASKED]")
            }
        }
        "after_script" => missing("after_script: cleaning up"),
        "deploy, with build's artifacts" => missing("dist/app: OK"),
        _ => None,
    }
}
