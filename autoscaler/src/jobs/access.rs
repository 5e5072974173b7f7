//! Which relayed calls a job token opens.

use super::{Denied, Jobs};
use crate::core::JobId;
use crate::store::JobRecord;

impl Jobs {
    /// May a call presenting `token` act on job `id`? Only the job's own token opens it.
    pub fn authorize(&self, id: JobId, token: &str) -> Result<JobRecord, Denied> {
        let held = self.lock();
        let job = held.get(&id).ok_or(Denied::UnknownJob(id))?;
        if !job.record.token.matches(token) {
            return Err(Denied::WrongToken(id));
        }
        // The autoscaler failed the job (its machine left service): its outcome is ours to
        // report, whatever a sidecar still says (a stock runner aborts on 403).
        if matches!(job.record.phase, crate::core::job::JobPhase::Failing { .. }) {
            return Err(Denied::GivenUp(id));
        }
        Ok(job.record.clone())
    }

    /// May `token` download the artifacts of job `id`? Yes if `id` is a job we hold and the token
    /// is its own, or `id` is a declared dependency of a live job we hold and the token is the
    /// one GitLab gave for that dependency (or the dependent job's own token).
    pub fn authorize_download(&self, id: JobId, token: &str) -> Result<(), Denied> {
        let held = self.lock();
        if let Some(job) = held.get(&id)
            && job.record.token.matches(token)
        {
            return Ok(());
        }
        let declares = |j: &JobRecord| j.dependencies.iter().any(|d| d.id == id);
        let granted = held.values().map(|j| &j.record).any(|j| {
            !j.phase.is_finished()
                && declares(j)
                && (j.token.matches(token)
                    || j.dependencies
                        .iter()
                        .any(|d| d.id == id && d.token.matches(token)))
        });
        if granted {
            Ok(())
        } else if held.contains_key(&id) || held.values().any(|j| declares(&j.record)) {
            Err(Denied::WrongToken(id))
        } else {
            Err(Denied::UnknownJob(id))
        }
    }
}
