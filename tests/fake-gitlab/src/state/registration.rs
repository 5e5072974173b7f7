//! GitLab's legacy runner registration (`POST /api/v4/runners` with a registration token,
//! runner-protocol.md §2): a new runner with a fresh `glrt-` token that job requests accept.

use super::{State, random_hex};

/// What a registration asks for, already checked by the handler.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registration {
    pub description: Option<String>,
    pub tags: Vec<String>,
}

impl State {
    pub fn add_registration_token(&mut self, token: &str) {
        self.registration_tokens.insert(token.to_owned());
    }

    /// `Some((id, runner token))` for a known registration token, `None` (GitLab: `403`) else.
    pub fn register_runner(
        &mut self,
        registration_token: &str,
        registration: Registration,
    ) -> Option<(u64, String)> {
        if !self.registration_tokens.contains(registration_token) {
            return None;
        }
        let token = format!("glrt-{}", random_hex(24));
        self.add_runner(&token);
        let runner = self.runners.get_mut(&token)?;
        runner.description = registration.description;
        runner.tags = registration.tags;
        Some((runner.id, token))
    }
}
