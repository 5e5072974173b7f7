//! The `201` job payload, field by field with GitLab's JSON types (runner-protocol.md §3.4).
//!
//! A wrong JSON type makes a stock gitlab-runner drop the whole job silently, so every value here
//! is written with its type in mind (see the notes next to the odd ones).

use std::time::Duration;

use serde_json::{Value, json};

use crate::control::JobSpec;
use crate::state::FAILURE_REASONS;

mod variables;
use variables::variables;

/// `job_info` claims this GitLab version (only shown to jobs as `CI_SERVER_VERSION`).
const SERVER_VERSION: (u32, u32, u32) = (18, 5, 0);
/// Timeout of the `after_script` step: the runner's own default (runner-protocol.md §10).
const AFTER_SCRIPT_TIMEOUT_SECS: u64 = 300;
/// Prefixes of GitLab tokens the runner masks in the trace.
const TOKEN_MASK_PREFIXES: &[&str] = &["glpat-", "glcbt-", "glrt-", "glptt-", "gldt-", "glft-"];

/// Everything the payload needs, copied out of the state.
#[derive(Debug, Clone)]
pub(crate) struct PayloadInput {
    pub job_id: u64,
    pub job_token: String,
    pub spec: JobSpec,
    pub pipeline_id: u64,
    pub sha: String,
    pub time_in_queue: Duration,
    /// Candidate jobs for this runner token when it asked (GitLab's `queue_size`).
    pub queue_size: usize,
    /// 1-based position of this job among them, at most 45 (`queue_depth`).
    pub queue_depth: usize,
    /// The project's jobs running now (GitLab sends the count as a string).
    pub project_jobs_running: usize,
    pub runner_uuid: String,
    pub dependencies: Vec<DependencyInput>,
}

#[derive(Debug, Clone)]
pub(crate) struct DependencyInput {
    pub id: u64,
    pub name: String,
    /// `(filename, size)` of the dependency's `archive` artifact, if it uploaded one.
    pub archive: Option<(String, u64)>,
}

/// Renders the payload. `server_url` is this server's base URL (no trailing slash).
pub(crate) fn render(input: &PayloadInput, server_url: &str) -> Value {
    let spec = &input.spec;
    let server_url = server_url.trim_end_matches('/');
    let repo_url = clone_url(input, server_url);
    let ref_name = spec.git_ref.as_str();
    json!({
        "id": input.job_id,
        "token": input.job_token,
        "allow_git_fetch": true,
        "job_info": {
            "id": input.job_id,
            "name": spec.name,
            "stage": spec.stage,
            "pipeline_id": input.pipeline_id,
            "project_id": spec.project_id,
            "project_name": project_name(&spec.project_path),
            "project_full_path": spec.project_path,
            "namespace_id": spec.project_id,
            "root_namespace_id": spec.project_id,
            "organization_id": 1,
            "instance_id": "1",
            "instance_uuid": "00000000-0000-4000-8000-000000000001",
            "user_id": 1,
            "scoped_user_id": null,
            // Whole seconds since the job was queued, as GitLab's entity sends them.
            "time_in_queue_seconds": input.time_in_queue.as_secs(),
            // A string in GitLab's entity, not a number.
            "project_jobs_running_on_instance_runners_count": input.project_jobs_running.to_string(),
            "queue_size": input.queue_size,
            "queue_depth": input.queue_depth,
        },
        "git_info": {
            "repo_url": repo_url,
            "repo_object_format": "sha1",
            "ref": ref_name,
            "sha": input.sha,
            "before_sha": "0000000000000000000000000000000000000000",
            "ref_type": "branch",
            "refspecs": [format!("+refs/heads/{ref_name}:refs/remotes/origin/{ref_name}")],
            "depth": 20,
            "protected": false,
        },
        "runner_info": {
            "uuid": input.runner_uuid,
            // An int of seconds.
            "timeout": spec.timeout,
        },
        "variables": variables(input, server_url, &repo_url),
        "steps": steps(spec),
        "image": spec.image.as_deref().map(image),
        "services": spec.services.iter().map(|name| image(name)).collect::<Vec<_>>(),
        "artifacts": spec.artifacts.iter().map(|a| json!({
            "name": a.name,
            "untracked": a.untracked,
            "paths": a.paths,
            "exclude": a.exclude,
            "when": a.when,
            "artifact_type": a.artifact_type,
            "artifact_format": a.artifact_format,
            "expire_in": a.expire_in,
        })).collect::<Vec<_>>(),
        "cache": [],
        "credentials": [{
            "type": "registry",
            "url": registry_host(server_url),
            "username": "gitlab-ci-token",
            "password": input.job_token,
        }],
        "dependencies": input.dependencies.iter().map(|dep| dependency(dep, &input.job_token)).collect::<Vec<_>>(),
        "features": {
            "trace_sections": true,
            "token_mask_prefixes": TOKEN_MASK_PREFIXES,
            "failure_reasons": FAILURE_REASONS,
        },
    })
}

/// The HTTP clone URL with `gitlab-ci-token:<job token>@` inserted (`Ci::Build#repo_url`). A spec
/// `repo_url` wins; credentials go into it only when it is HTTP(S) without userinfo.
fn clone_url(input: &PayloadInput, server_url: &str) -> String {
    let base = match &input.spec.repo_url {
        Some(url) => url.clone(),
        None => format!("{server_url}/{}.git", input.spec.project_path),
    };
    for scheme in ["http://", "https://"] {
        if let Some(rest) = base.strip_prefix(scheme) {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            if rest[..authority_end].contains('@') {
                return base;
            }
            return format!("{scheme}gitlab-ci-token:{}@{rest}", input.job_token);
        }
    }
    base
}

/// Modern GitLab exposes the *running* job's token for dependency downloads
/// (`ci_expose_running_job_token_for_artifacts`); `artifacts_file` only when there is an archive.
fn dependency(dep: &DependencyInput, running_job_token: &str) -> Value {
    let mut value = json!({
        "id": dep.id,
        "name": dep.name,
        "token": running_job_token,
    });
    if let (Some((filename, size)), Some(object)) = (&dep.archive, value.as_object_mut()) {
        object.insert(
            "artifacts_file".to_owned(),
            json!({ "filename": filename, "size": size }),
        );
    }
    value
}

fn steps(spec: &JobSpec) -> Vec<Value> {
    let mut steps = vec![json!({
        "name": "script",
        "script": spec.script,
        "timeout": spec.timeout,
        "when": "on_success",
        "allow_failure": false,
    })];
    if !spec.after_script.is_empty() {
        steps.push(json!({
            "name": "after_script",
            "script": spec.after_script,
            "timeout": AFTER_SCRIPT_TIMEOUT_SECS,
            "when": "always",
            "allow_failure": true,
        }));
    }
    steps
}

/// GitLab's image entity: `name`, `entrypoint` (null unless set) and `ports`.
fn image(name: &str) -> Value {
    json!({ "name": name, "alias": "", "entrypoint": null, "ports": [] })
}

fn project_name(project_path: &str) -> &str {
    project_path.rsplit('/').next().unwrap_or(project_path)
}

fn registry_host(server_url: &str) -> &str {
    server_url
        .split_once("://")
        .map_or(server_url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or(server_url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ArtifactSpec;
    use crate::control::JobVariable;

    fn input(spec: JobSpec) -> PayloadInput {
        PayloadInput {
            job_id: 7,
            job_token: "glcbt-abc".into(),
            spec,
            pipeline_id: 3,
            sha: "a".repeat(40),
            time_in_queue: Duration::from_millis(1500),
            queue_size: 2,
            queue_depth: 1,
            project_jobs_running: 0,
            runner_uuid: "u".into(),
            dependencies: vec![
                DependencyInput {
                    id: 5,
                    name: "build".into(),
                    archive: Some(("out.zip".into(), 123)),
                },
                DependencyInput {
                    id: 6,
                    name: "lint".into(),
                    archive: None,
                },
            ],
        }
    }

    fn var<'a>(payload: &'a Value, key: &str) -> Option<&'a Value> {
        payload["variables"]
            .as_array()?
            .iter()
            .find(|v| v["key"] == key)
    }

    #[test]
    fn json_types_match_the_runner_structs() {
        let spec = JobSpec {
            after_script: vec!["echo bye".into()],
            artifacts: vec![ArtifactSpec::default()],
            ..JobSpec::new("glrt-x", &["echo hi"])
        };
        let p = render(&input(spec), "http://127.0.0.1:8080");
        assert!(p["id"].is_u64());
        assert!(p["token"].as_str().unwrap().starts_with("glcbt-"));
        assert!(p["allow_git_fetch"].is_boolean());
        assert!(p["job_info"]["project_jobs_running_on_instance_runners_count"].is_string());
        assert!(p["job_info"]["pipeline_id"].is_u64());
        assert!(p["job_info"]["time_in_queue_seconds"].is_number());
        assert!(p["job_info"]["scoped_user_id"].is_null());
        assert!(p["runner_info"]["timeout"].is_u64());
        assert!(p["git_info"]["refspecs"].is_array());
        assert!(p["git_info"]["depth"].is_u64());
        assert_eq!(
            p["git_info"]["repo_url"],
            "http://gitlab-ci-token:glcbt-abc@127.0.0.1:8080/group/project.git"
        );
        assert_eq!(p["steps"][0]["name"], "script");
        assert_eq!(p["steps"][0]["when"], "on_success");
        assert_eq!(p["steps"][0]["allow_failure"], false);
        assert_eq!(p["steps"][0]["timeout"], 3600);
        assert_eq!(p["steps"][1]["name"], "after_script");
        assert_eq!(p["steps"][1]["when"], "always");
        assert_eq!(p["steps"][1]["timeout"], 300);
        assert!(p["image"].is_null());
        assert_eq!(p["artifacts"][0]["artifact_type"], "archive");
        let reasons = p["features"]["failure_reasons"].as_array().unwrap();
        assert!(reasons.iter().any(|r| r == "runner_unsupported"));
        assert!(reasons.iter().any(|r| r == "script_failure"));
        assert!(
            p["features"]["token_mask_prefixes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "glcbt-")
        );
        for v in p["variables"].as_array().unwrap() {
            assert!(v["key"].is_string() && v["value"].is_string());
            for flag in ["public", "file", "masked", "raw"] {
                assert!(v[flag].is_boolean(), "{v}");
            }
        }
    }

    #[test]
    fn predefined_variables() {
        let mut spec = JobSpec::new("glrt-x", &["true"]);
        spec.variables.push(JobVariable::new("MINE", "1"));
        let p = render(&input(spec), "http://127.0.0.1:8080/");
        assert_eq!(var(&p, "CI").unwrap()["value"], "true");
        assert_eq!(var(&p, "GITLAB_CI").unwrap()["value"], "true");
        assert_eq!(var(&p, "CI_JOB_ID").unwrap()["value"], "7");
        let token = var(&p, "CI_JOB_TOKEN").unwrap();
        assert_eq!(token["value"], "glcbt-abc");
        assert_eq!(token["masked"], true);
        assert_eq!(token["public"], false);
        assert_eq!(
            var(&p, "CI_SERVER_URL").unwrap()["value"],
            "http://127.0.0.1:8080"
        );
        assert_eq!(var(&p, "CI_SERVER_HOST").unwrap()["value"], "127.0.0.1");
        assert_eq!(var(&p, "CI_SERVER_PORT").unwrap()["value"], "8080");
        assert_eq!(
            var(&p, "CI_PROJECT_PATH").unwrap()["value"],
            "group/project"
        );
        assert_eq!(var(&p, "CI_PIPELINE_ID").unwrap()["value"], "3");
        assert_eq!(var(&p, "CI_COMMIT_SHA").unwrap()["value"], "a".repeat(40));
        assert_eq!(var(&p, "CI_JOB_NAME").unwrap()["value"], "build");
        assert_eq!(var(&p, "CI_JOB_STAGE").unwrap()["value"], "test");
        assert_eq!(var(&p, "GIT_STRATEGY").unwrap()["value"], "none");
        // What GitLab always sends and some runners cannot do without.
        assert_eq!(
            var(&p, "CI_CONFIG_PATH").unwrap()["value"],
            ".gitlab-ci.yml"
        );
        assert_eq!(var(&p, "CI_PIPELINE_SOURCE").unwrap()["value"], "push");
        assert!(var(&p, "CI_JOB_URL").is_some() && var(&p, "CI_PIPELINE_URL").is_some());
        let started = var(&p, "CI_JOB_STARTED_AT").unwrap()["value"].clone();
        assert_eq!(started.as_str().map(str::len), Some(20), "{started}");
        assert_eq!(
            variables::iso8601_utc(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_453_148)
            ),
            "2026-11-23T16:59:08Z"
        );
        let keys: Vec<_> = p["variables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["key"].clone())
            .collect();
        let strategy = keys.iter().position(|k| k == "GIT_STRATEGY").unwrap();
        assert_eq!(keys.iter().position(|k| k == "MINE"), Some(strategy + 1));
    }

    #[test]
    fn repo_url_overrides_clone_url() {
        let mut spec = JobSpec::new("glrt-x", &["true"]);
        spec.repo_url = Some("file:///tmp/repo.git".into());
        let p = render(&input(spec.clone()), "http://h:1");
        assert_eq!(p["git_info"]["repo_url"], "file:///tmp/repo.git");
        assert!(var(&p, "GIT_STRATEGY").is_none());

        spec.repo_url = Some("https://example.com/a/b.git".into());
        let p = render(&input(spec), "http://h:1");
        assert_eq!(
            p["git_info"]["repo_url"],
            "https://gitlab-ci-token:glcbt-abc@example.com/a/b.git"
        );
    }

    #[test]
    fn dependencies_carry_the_running_jobs_token_and_archive_only_when_present() {
        let p = render(&input(JobSpec::new("glrt-x", &["true"])), "http://h:1");
        let deps = p["dependencies"].as_array().unwrap();
        assert_eq!(deps[0]["id"], 5);
        assert_eq!(deps[0]["token"], "glcbt-abc");
        assert_eq!(deps[0]["artifacts_file"]["filename"], "out.zip");
        assert_eq!(deps[0]["artifacts_file"]["size"], 123);
        assert!(deps[1].get("artifacts_file").is_none());
    }
}
