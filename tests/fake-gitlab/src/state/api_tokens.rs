//! Access tokens of GitLab's REST API (personal, group or project access tokens: GitLab's
//! `PersonalAccessToken`, the group and project ones being tokens of bot users), added by a test
//! with `POST /control/api_tokens`, and how GitLab authenticates a request by one.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::State;
use super::entities::rfc3339;

/// GitLab writes `last_used_at` at most this often (`PersonalAccessTokens::LastUsedService`,
/// `app/services/personal_access_tokens/last_used_service.rb`), to spare the database a write
/// per request.
const LAST_USED_PERIOD: Duration = Duration::from_secs(10 * 60);

/// Every token belongs to the administrator jobs are run for (`GITLAB_USER_ID` 1).
const USER_ID: u64 = 1;

/// One access token, as GitLab stores it.
#[derive(Debug, Clone)]
pub(crate) struct ApiToken {
    id: u64,
    name: String,
    /// In the order given (GitLab keeps the array as created).
    scopes: Vec<String>,
    created: SystemTime,
    last_used: Option<SystemTime>,
}

/// Why an API call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApiRefusal {
    /// No such token (401).
    Unauthorized,
    /// The token lacks `read_api` and `api` (403 `insufficient_scope`).
    InsufficientScope,
    /// No runner with that id (404 `Runner Not Found`).
    RunnerNotFound,
    /// No project with that id or path, or none the token's user may see (404 `Project Not
    /// Found`).
    ProjectNotFound,
    /// `ActiveRecord::RecordNotFound`, here an unknown pipeline (404 `Not found`).
    NotFound,
}

impl State {
    /// Adds an access token with its scopes. Adding a known token again changes its scopes and
    /// name but keeps its id, creation time and last use.
    pub fn add_api_token(
        &mut self,
        token: &str,
        name: Option<&str>,
        scopes: &[String],
        now: SystemTime,
    ) {
        let mut unique: Vec<String> = Vec::new();
        for scope in scopes {
            if !unique.contains(scope) {
                unique.push(scope.clone());
            }
        }
        let next_id = self.api_tokens.len() as u64 + 1;
        let entry = self
            .api_tokens
            .entry(token.to_owned())
            .or_insert_with(|| ApiToken {
                id: next_id,
                name: String::new(),
                scopes: Vec::new(),
                created: now,
                last_used: None,
            });
        entry.name = name.map_or_else(|| format!("api-token-{}", entry.id), str::to_owned);
        entry.scopes = unique;
    }

    /// GitLab's authentication by access token: an unknown one is `401`; a known one has its
    /// `last_used_at` written (at most every ten minutes) whatever the route then decides.
    pub fn use_api_token(&mut self, token: &str, now: SystemTime) -> Result<(), ApiRefusal> {
        let known = self
            .api_tokens
            .get_mut(token)
            .ok_or(ApiRefusal::Unauthorized)?;
        let stale = known.last_used.is_none_or(|at| {
            now.duration_since(at)
                .is_ok_and(|since| since >= LAST_USED_PERIOD)
        });
        if stale {
            known.last_used = Some(now);
        }
        Ok(())
    }

    /// A read (`GET`) route needs `read_api` or `api` (`API::API`'s
    /// `allow_access_with_scope`), else `403 insufficient_scope`. Call after
    /// [`State::use_api_token`].
    pub fn may_read_api(&self, token: &str) -> Result<(), ApiRefusal> {
        let known = self.api_tokens.get(token).ok_or(ApiRefusal::Unauthorized)?;
        let allowed = known.scopes.iter().any(|s| s == "read_api" || s == "api");
        if allowed {
            Ok(())
        } else {
            Err(ApiRefusal::InsufficientScope)
        }
    }

    /// `GET /personal_access_tokens/self` (`lib/api/personal_access_tokens/self_information.rb`,
    /// GitLab's `PersonalAccessTokenWithLastUsedIps` entity): the token describes itself, whatever
    /// its scopes. `None` for an unknown token.
    pub fn api_token_json(&self, token: &str) -> Option<Value> {
        let known = self.api_tokens.get(token)?;
        Some(json!({
            "id": known.id,
            "name": known.name,
            "revoked": false,
            "created_at": rfc3339(known.created),
            "description": null,
            "scopes": known.scopes,
            "user_id": USER_ID,
            "last_used_at": known.last_used.map(rfc3339),
            "active": true,
            "expires_at": null,
            // GitLab records the addresses a token was used from; the fake does not.
            "last_used_ips": [],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Rules;

    fn state() -> State {
        State::new(Rules {
            ack_window: None,
            trace_limit: 1 << 20,
            provisioning_retries: 0,
        })
    }

    #[test]
    fn scopes_decide_reads_and_every_token_describes_itself() {
        let mut s = state();
        let now = SystemTime::now();
        s.add_api_token("glpat-read", None, &["read_api".into()], now);
        s.add_api_token("glpat-user", Some("profile"), &["read_user".into()], now);
        assert_eq!(s.may_read_api("glpat-read"), Ok(()));
        assert_eq!(
            s.may_read_api("glpat-user"),
            Err(ApiRefusal::InsufficientScope)
        );
        assert_eq!(
            s.use_api_token("glpat-nope", now),
            Err(ApiRefusal::Unauthorized)
        );
        let profile = s.api_token_json("glpat-user").expect("known");
        assert_eq!(profile["id"], 2);
        assert_eq!(profile["name"], "profile");
        assert_eq!(profile["scopes"], json!(["read_user"]));
        assert!(profile["last_used_at"].is_null());
        assert!(s.api_token_json("glpat-nope").is_none());
    }

    #[test]
    fn last_use_is_written_at_most_every_ten_minutes() {
        let mut s = state();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        s.add_api_token("glpat-a", None, &["api".into()], t0);
        let used_at =
            |s: &State| s.api_token_json("glpat-a").expect("known")["last_used_at"].clone();
        s.use_api_token("glpat-a", t0).expect("known");
        assert_eq!(used_at(&s), json!(rfc3339(t0)));
        s.use_api_token("glpat-a", t0 + Duration::from_secs(60))
            .expect("known");
        assert_eq!(used_at(&s), json!(rfc3339(t0)), "too soon to write again");
        let later = t0 + LAST_USED_PERIOD;
        s.use_api_token("glpat-a", later).expect("known");
        assert_eq!(used_at(&s), json!(rfc3339(later)));
    }
}
