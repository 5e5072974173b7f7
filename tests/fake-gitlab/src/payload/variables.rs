//! The predefined variables of a job payload (`CI_*`, `GITLAB_*`), as GitLab sends them.

use crate::control::JobVariable;

use super::{PayloadInput, SERVER_VERSION, project_name};

fn slug(value: &str) -> String {
    let lowered: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    lowered.trim_matches('-').chars().take(63).collect()
}

/// The predefined `CI_*` set GitLab sends, then `GIT_STRATEGY=none` unless the spec has a
/// repository, then the spec's own variables (later entries win in the runner).
pub(super) fn variables(
    input: &PayloadInput,
    server_url: &str,
    repo_url: &str,
) -> Vec<JobVariable> {
    let spec = &input.spec;
    let (scheme, authority) = server_url.split_once("://").unwrap_or(("http", server_url));
    let authority = authority.split('/').next().unwrap_or(authority);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.to_owned()),
        None => (
            authority,
            if scheme == "https" { "443" } else { "80" }.to_owned(),
        ),
    };
    let project_url = format!("{server_url}/{}", spec.project_path);
    let namespace = spec
        .project_path
        .rsplit_once('/')
        .map_or("", |(namespace, _)| namespace);
    let root_namespace = spec.project_path.split('/').next().unwrap_or_default();
    let (major, minor, patch) = SERVER_VERSION;
    let short_sha: String = input.sha.chars().take(8).collect();
    // The payload is rendered when the job is handed out, the moment GitLab calls its start.
    let now = iso8601_utc(std::time::SystemTime::now());

    let public = |key: &str, value: String| JobVariable::new(key, value);
    let secret = |key: &str, value: String, masked: bool| JobVariable {
        public: false,
        masked,
        ..JobVariable::new(key, value)
    };
    let mut vars = vec![
        public("CI", "true".into()),
        public("GITLAB_CI", "true".into()),
        public("CI_JOB_ID", input.job_id.to_string()),
        public(
            "CI_JOB_URL",
            format!("{project_url}/-/jobs/{}", input.job_id),
        ),
        secret("CI_JOB_TOKEN", input.job_token.clone(), true),
        public("CI_JOB_NAME", spec.name.clone()),
        public("CI_JOB_NAME_SLUG", slug(&spec.name)),
        public("CI_JOB_STAGE", spec.stage.clone()),
        public("CI_NODE_TOTAL", "1".into()),
        public("CI_SERVER_URL", server_url.to_owned()),
        public("CI_SERVER_HOST", host.to_owned()),
        public("CI_SERVER_PORT", port),
        public("CI_SERVER_PROTOCOL", scheme.to_owned()),
        public("CI_SERVER_FQDN", authority.to_owned()),
        public("CI_SERVER_NAME", "GitLab".into()),
        public("CI_SERVER_VERSION", format!("{major}.{minor}.{patch}")),
        public("CI_SERVER_VERSION_MAJOR", major.to_string()),
        public("CI_SERVER_VERSION_MINOR", minor.to_string()),
        public("CI_SERVER_VERSION_PATCH", patch.to_string()),
        public("CI_API_V4_URL", format!("{server_url}/api/v4")),
        public("CI_API_GRAPHQL_URL", format!("{server_url}/api/graphql")),
        public("CI_PROJECT_ID", spec.project_id.to_string()),
        public(
            "CI_PROJECT_NAME",
            project_name(&spec.project_path).to_owned(),
        ),
        public("CI_PROJECT_PATH", spec.project_path.clone()),
        public("CI_PROJECT_PATH_SLUG", slug(&spec.project_path)),
        public("CI_PROJECT_NAMESPACE", namespace.to_owned()),
        public("CI_PROJECT_ROOT_NAMESPACE", root_namespace.to_owned()),
        public("CI_PROJECT_URL", project_url.clone()),
        public("CI_PROJECT_VISIBILITY", "private".into()),
        public("CI_DEFAULT_BRANCH", "main".into()),
        secret("CI_REPOSITORY_URL", repo_url.to_owned(), false),
        public("CI_PIPELINE_ID", input.pipeline_id.to_string()),
        public("CI_PIPELINE_IID", input.pipeline_id.to_string()),
        public("CI_PIPELINE_SOURCE", spec.pipeline_source.clone()),
        public(
            "CI_PIPELINE_URL",
            format!("{project_url}/-/pipelines/{}", input.pipeline_id),
        ),
        public("CI_COMMIT_SHA", input.sha.clone()),
        public("CI_COMMIT_SHORT_SHA", short_sha),
        public("CI_COMMIT_BEFORE_SHA", "0".repeat(40)),
        public("CI_COMMIT_REF_NAME", spec.git_ref.clone()),
        public("CI_COMMIT_REF_SLUG", slug(&spec.git_ref)),
        public("CI_COMMIT_BRANCH", spec.git_ref.clone()),
        public("CI_COMMIT_TITLE", "Commit under test".into()),
        public("CI_COMMIT_MESSAGE", "Commit under test".into()),
        public("CI_COMMIT_DESCRIPTION", String::new()),
        public(
            "CI_COMMIT_AUTHOR",
            "Administrator <admin@example.com>".into(),
        ),
        public("CI_COMMIT_TIMESTAMP", now.clone()),
        public("CI_CONFIG_PATH", ".gitlab-ci.yml".into()),
        public("CI_PIPELINE_CREATED_AT", now.clone()),
        public("CI_JOB_STARTED_AT", now),
        public(
            "CI_PROJECT_TITLE",
            project_name(&spec.project_path).to_owned(),
        ),
        public("GITLAB_USER_ID", "1".into()),
        public("GITLAB_USER_LOGIN", "root".into()),
        public("GITLAB_USER_NAME", "Administrator".into()),
        public("GITLAB_USER_EMAIL", "admin@example.com".into()),
    ];
    if spec.repo_url.is_none() {
        vars.push(public("GIT_STRATEGY", "none".into()));
    }
    vars.extend(spec.variables.iter().cloned());
    vars
}

/// `2026-01-02T03:04:05Z`, the form GitLab gives its `*_AT` variables.
pub(super) fn iso8601_utc(at: std::time::SystemTime) -> String {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}
