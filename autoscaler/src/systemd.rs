//! What systemd is told about the service (`Type=notify` in `deploy/autoscaler.service`).
//!
//! `READY=1` goes out once the store is loaded and the mirrored API (and the admin API, when
//! configured) are bound, so that units ordered after the autoscaler start against a server that
//! answers. `STOPPING=1` goes out when the first signal starts the graceful shutdown. Each step
//! also sets a one-line `STATUS=`, which `systemctl status autoscaler` shows.
//!
//! Nothing is sent unless the service manager set `NOTIFY_SOCKET`; a failed send is logged and
//! otherwise ignored: the notifications are a courtesy to the supervisor, never a reason to stop.

use sd_notify::NotifyState;

/// A step of the service's life that systemd hears about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Loading the store and checking the pools' upstream tokens.
    Starting,
    /// Store loaded, listeners bound: sidecars are served and jobs taken.
    Ready { pools: usize },
    /// The first signal arrived: no new jobs, waiting for the running ones.
    Draining { jobs_with_sidecars: usize },
    /// The waits are over (or skipped); the store is being made durable.
    Flushing,
}

impl Step {
    /// The status line `systemctl status` shows.
    pub fn status(self) -> String {
        match self {
            Step::Starting => "starting: loading the store".to_string(),
            Step::Ready { pools } => format!(
                "ready: serving {pools} pool{}",
                if pools == 1 { "" } else { "s" }
            ),
            Step::Draining { jobs_with_sidecars } => format!(
                "draining: no new jobs; waiting for {jobs_with_sidecars} running job{} (a second SIGTERM stops at once)",
                if jobs_with_sidecars == 1 { "" } else { "s" }
            ),
            Step::Flushing => "stopping: writing the store to disk".to_string(),
        }
    }

    /// What is sent for this step, with `status` as its status line.
    fn states(self, status: &str) -> Vec<NotifyState<'_>> {
        let mut states = Vec::with_capacity(2);
        match self {
            Step::Ready { .. } => states.push(NotifyState::Ready),
            Step::Draining { .. } => states.push(NotifyState::Stopping),
            Step::Starting | Step::Flushing => {}
        }
        states.push(NotifyState::Status(status));
        states
    }

    /// The datagram sent for this step, in the `sd_notify(3)` format.
    pub fn message(self) -> String {
        let status = self.status();
        self.states(&status)
            .iter()
            .map(|s| format!("{s}\n"))
            .collect()
    }
}

/// Tells the service manager about `step`, when there is one (`NOTIFY_SOCKET` set).
pub fn notify(step: Step) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let status = step.status();
    let result = sd_notify::notify(&step.states(&status));
    match result {
        Ok(()) => tracing::debug!(status = %status, "service manager notified"),
        Err(e) => tracing::warn!(error = %e, status = %status, "cannot notify the service manager"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_sent_with_its_status_line() {
        assert_eq!(
            Step::Ready { pools: 2 }.message(),
            "READY=1\nSTATUS=ready: serving 2 pools\n"
        );
        assert_eq!(
            Step::Ready { pools: 1 }.message(),
            "READY=1\nSTATUS=ready: serving 1 pool\n"
        );
    }

    #[test]
    fn a_graceful_shutdown_says_stopping_and_draining() {
        let message = Step::Draining {
            jobs_with_sidecars: 3,
        }
        .message();
        assert!(
            message.starts_with("STOPPING=1\nSTATUS=draining: "),
            "{message}"
        );
        assert!(message.contains("3 running jobs"), "{message}");
        assert!(message.ends_with('\n'));
    }

    #[test]
    fn other_steps_only_set_the_status() {
        for step in [Step::Starting, Step::Flushing] {
            let message = step.message();
            assert!(message.starts_with("STATUS="), "{message}");
            assert_eq!(message.lines().count(), 1, "{message}");
        }
    }
}
