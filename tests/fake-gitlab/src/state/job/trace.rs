//! The job log as GitLab stores it: appends at the stored length only, up to the size limit, with
//! a running CRC32 to compare with the runner's checksum (runner-protocol.md §5).

use crate::control::JobStatus;

use super::Job;

/// How GitLab answers a `PATCH /jobs/:id/trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TraceReply {
    NotFound,
    Forbidden,
    NotProcessing(JobStatus),
    /// `400`: no usable `Content-Range`.
    MissingRange,
    /// `202` with the new length.
    Appended {
        length: u64,
        status: JobStatus,
    },
    /// `416` with the stored length.
    RangeMismatch {
        length: u64,
        status: JobStatus,
    },
    /// `403`: the trace would outgrow the limit; the job is now failed.
    SizeExceeded,
}

impl Job {
    /// `PATCH /jobs/:id/trace` once the token is checked (runner-protocol.md §5). `body` is `None`
    /// when it was too large to even read (larger than `limit`).
    pub fn append_trace(
        &mut self,
        start: Option<u64>,
        body: Option<&[u8]>,
        limit: u64,
    ) -> TraceReply {
        if !matches!(self.status, JobStatus::Running | JobStatus::Canceling) {
            return TraceReply::NotProcessing(self.status);
        }
        let Some(start) = start else {
            return TraceReply::MissingRange;
        };
        let length = self.trace_len();
        if start != length {
            // Rails appends nothing, then compares the stored length with start + body size:
            // equal (a repeat of the trace's tail, or an empty patch) is still `202`.
            let size = body.map_or(u64::MAX, |b| b.len() as u64);
            if start.saturating_add(size) == length {
                return TraceReply::Appended {
                    length,
                    status: self.status,
                };
            }
            return TraceReply::RangeMismatch {
                length,
                status: self.status,
            };
        }
        let new_length = body.map_or(u64::MAX, |body| length.saturating_add(body.len() as u64));
        let Some(body) = body.filter(|_| new_length <= limit) else {
            self.status = JobStatus::Failed;
            self.failure_reason = Some("trace_size_exceeded".to_owned());
            return TraceReply::SizeExceeded;
        };
        self.trace.extend_from_slice(body);
        self.trace_crc.update(body);
        TraceReply::Appended {
            length: new_length,
            status: self.status,
        }
    }

    pub fn trace_len(&self) -> u64 {
        self.trace.len() as u64
    }

    pub fn trace_checksum(&self) -> String {
        format!("crc32:{:08x}", self.trace_crc.clone().finalize())
    }
}
