//! Pure interpretation of PUT /jobs/:id and PATCH /jobs/:id/trace answers
//! (runner-protocol.md §4, §5, §6). The HTTP code hands status and headers in; the trace loop
//! acts on the decision.

use std::time::Duration;

use crate::trace::offsets::parse_range_offset;

/// Upper bound for `X-GitLab-Trace-Update-Interval` (§5, §10).
pub const MAX_UPDATE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// The job status GitLab reports in the `Job-Status` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteStatus {
    /// Header absent or a state that needs no action (running, pending, …).
    Unremarkable,
    /// `canceling`: graceful cancellation requested (§6).
    Canceling,
    /// `canceled` or `failed`: the job is over server-side, abort (§6).
    Finished,
}

impl RemoteStatus {
    pub fn from_header(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some("canceling") => RemoteStatus::Canceling,
            Some("canceled") | Some("failed") => RemoteStatus::Finished,
            _ => RemoteStatus::Unremarkable,
        }
    }
}

/// `X-GitLab-Trace-Update-Interval`: integer seconds; non-integers and ≤0 are ignored;
/// capped at 15 min (§4).
pub fn parse_update_interval(value: Option<&str>) -> Option<Duration> {
    let secs: i64 = value?.trim().parse().ok()?;
    if secs <= 0 {
        return None;
    }
    Some(Duration::from_secs(secs.unsigned_abs()).min(MAX_UPDATE_INTERVAL))
}

/// Result of `PUT /jobs/:id` (§4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateResult {
    /// 200.
    Succeeded,
    /// 202: final state accepted, trace still being persisted; wait and repeat.
    Accepted,
    /// 412: trace validation failed; resend the whole log.
    TraceValidationFailed,
    /// 403, 404 or `Job-Status` canceled/failed.
    Abort,
    /// Anything else, including transport errors.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateOutcome {
    pub result: UpdateResult,
    pub remote: RemoteStatus,
    pub interval: Option<Duration>,
}

impl UpdateOutcome {
    pub fn cancel_requested(&self) -> bool {
        self.remote == RemoteStatus::Canceling && self.result != UpdateResult::Abort
    }
}

/// Classify a PUT answer; `status` is `None` for a transport error.
pub fn classify_update(
    status: Option<u16>,
    job_status: Option<&str>,
    interval: Option<&str>,
) -> UpdateOutcome {
    let remote = RemoteStatus::from_header(job_status);
    let result = match status {
        _ if remote == RemoteStatus::Finished => UpdateResult::Abort,
        Some(403) | Some(404) => UpdateResult::Abort,
        Some(200) => UpdateResult::Succeeded,
        Some(202) => UpdateResult::Accepted,
        Some(412) => UpdateResult::TraceValidationFailed,
        _ => UpdateResult::Failed,
    };
    UpdateOutcome {
        result,
        remote,
        interval: parse_update_interval(interval),
    }
}

/// Result of `PATCH /jobs/:id/trace` (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchResult {
    /// 202: the next offset is the end of what was sent (`Range` is ignored on 202).
    Accepted { next_offset: u64 },
    /// 416: the server holds `offset` bytes; continue from there.
    RangeMismatch { offset: u64 },
    /// 404: keep going during the job; stop sending trace in the final phase.
    NotFound,
    /// 403: abort.
    Abort,
    /// Anything else, including transport errors: retry at the next tick.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchOutcome {
    pub result: PatchResult,
    pub remote: RemoteStatus,
    pub interval: Option<Duration>,
}

impl PatchOutcome {
    /// Abort the job: 403 or `Job-Status` canceled/failed (§5, §6).
    pub fn is_abort(&self) -> bool {
        self.result == PatchResult::Abort || self.remote == RemoteStatus::Finished
    }
}

/// Classify a PATCH answer for a patch of `len` bytes starting at `start`.
pub fn classify_patch(
    status: Option<u16>,
    job_status: Option<&str>,
    range: Option<&str>,
    interval: Option<&str>,
    start: u64,
    len: u64,
) -> PatchOutcome {
    let result = match status {
        Some(202) => PatchResult::Accepted {
            next_offset: start + len,
        },
        Some(416) => PatchResult::RangeMismatch {
            offset: range.and_then(parse_range_offset).unwrap_or(0),
        },
        Some(403) => PatchResult::Abort,
        Some(404) => PatchResult::NotFound,
        _ => PatchResult::Failed,
    };
    PatchOutcome {
        result,
        remote: RemoteStatus::from_header(job_status),
        interval: parse_update_interval(interval),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_header() {
        assert_eq!(
            parse_update_interval(Some("5")),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_update_interval(Some(" 60 ")),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_update_interval(Some("0")), None);
        assert_eq!(parse_update_interval(Some("-3")), None);
        assert_eq!(parse_update_interval(Some("1.5")), None);
        assert_eq!(parse_update_interval(None), None);
        assert_eq!(
            parse_update_interval(Some("100000")),
            Some(MAX_UPDATE_INTERVAL)
        );
    }

    #[test]
    fn update_classification() {
        use UpdateResult::*;
        let c = |s, js| classify_update(s, js, None).result;
        assert_eq!(c(Some(200), None), Succeeded);
        assert_eq!(c(Some(200), Some("running")), Succeeded);
        assert_eq!(c(Some(202), None), Accepted);
        assert_eq!(c(Some(412), None), TraceValidationFailed);
        assert_eq!(c(Some(403), None), Abort);
        assert_eq!(c(Some(404), None), Abort);
        assert_eq!(c(Some(200), Some("canceled")), Abort);
        assert_eq!(c(Some(202), Some("failed")), Abort);
        assert_eq!(c(Some(400), None), Failed);
        assert_eq!(c(Some(409), None), Failed);
        assert_eq!(c(Some(502), None), Failed);
        assert_eq!(
            c(Some(201), None),
            Failed,
            "only the exact success codes count"
        );
        assert_eq!(c(None, None), Failed);
        assert!(classify_update(Some(200), Some("canceling"), None).cancel_requested());
        assert!(!classify_update(Some(403), Some("canceling"), None).cancel_requested());
    }

    #[test]
    fn patch_classification() {
        let c = |s, js, range| classify_patch(s, js, range, Some("7"), 100, 50);
        let ok = c(Some(202), Some("running"), Some("0-150"));
        assert_eq!(ok.result, PatchResult::Accepted { next_offset: 150 });
        assert_eq!(ok.interval, Some(Duration::from_secs(7)));
        // Range is ignored on 202.
        let ok = c(Some(202), None, Some("0-999"));
        assert_eq!(ok.result, PatchResult::Accepted { next_offset: 150 });
        assert_eq!(
            c(Some(416), None, Some("0-42")).result,
            PatchResult::RangeMismatch { offset: 42 }
        );
        assert_eq!(
            c(Some(416), None, None).result,
            PatchResult::RangeMismatch { offset: 0 }
        );
        assert!(c(Some(403), None, None).is_abort());
        assert!(c(Some(202), Some("canceled"), None).is_abort());
        assert_eq!(
            c(Some(202), Some("canceling"), None).remote,
            RemoteStatus::Canceling
        );
        assert_eq!(c(Some(404), None, None).result, PatchResult::NotFound);
        assert_eq!(c(Some(400), None, None).result, PatchResult::Failed);
        assert_eq!(c(Some(200), None, None).result, PatchResult::Failed);
        assert_eq!(c(None, None, None).result, PatchResult::Failed);
    }
}
