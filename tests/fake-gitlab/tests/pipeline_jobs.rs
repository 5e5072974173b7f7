//! GitLab's REST API for a pipeline's jobs (`GET /api/v4/projects/:id/pipelines/:pipeline_id/
//! jobs`), read with an access token, as the autoscaler reads later stages to foresee demand.

mod common;

use std::time::Duration;

use common::{PROMPT, RUNNER_TOKEN, Runner, features, header, http, job_id, job_token, server};
use fake_gitlab::RunningServer;
use fake_gitlab::control::{Client, JobSpec};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

const READER: &str = "glpat-reader";

fn spec(stage: &str, name: &str) -> JobSpec {
    JobSpec {
        stage: stage.into(),
        name: name.into(),
        project_id: 42,
        project_path: "web/shop".into(),
        tags: vec!["linux".into(), "docker".into()],
        ..JobSpec::new(RUNNER_TOKEN, &["true"])
    }
}

/// A server with a `read_api` token and a pipeline of `build` (1 job), `test` (2), `deploy` (1).
async fn pipeline() -> (RunningServer, Client, u64, Vec<Vec<u64>>) {
    let (server, control) = server(|_| {}).await;
    control
        .add_api_token(READER, &["read_api"])
        .await
        .expect("a token");
    let created = control
        .create_pipeline(vec![
            vec![spec("build", "compile")],
            vec![spec("test", "unit 1/2"), spec("test", "unit 2/2")],
            vec![spec("deploy", "ship")],
        ])
        .await
        .expect("a pipeline");
    let ids = created
        .stages
        .iter()
        .map(|stage| stage.iter().map(|job| job.id).collect())
        .collect();
    (server, control, created.id, ids)
}

async fn get(server: &RunningServer, path_and_query: &str, token: Option<&str>) -> Response {
    let mut request = http().get(format!("{}/api/v4/{path_and_query}", server.url()));
    if let Some(token) = token {
        request = request.header("PRIVATE-TOKEN", token);
    }
    request.send().await.expect("an answer")
}

/// The ids and statuses of an answer's jobs.
async fn listed(response: Response) -> Vec<(u64, String)> {
    assert_eq!(response.status(), StatusCode::OK);
    let jobs: Vec<Value> = response.json().await.expect("a JSON list");
    jobs.iter()
        .map(|job| {
            (
                job["id"].as_u64().expect("an id"),
                job["status"].as_str().expect("a status").to_owned(),
            )
        })
        .collect()
}

fn variable<'a>(payload: &'a Value, key: &str) -> &'a str {
    payload["variables"]
        .as_array()
        .expect("variables")
        .iter()
        .find(|v| v["key"] == key)
        .and_then(|v| v["value"].as_str())
        .expect("the variable")
}

#[tokio::test]
async fn scope_filters_by_one_status_or_several() {
    let (server, _control, pipeline, ids) = pipeline().await;
    let path = format!("projects/42/pipelines/{pipeline}/jobs");
    let created = listed(get(&server, &format!("{path}?scope=created"), Some(READER)).await).await;
    let (test_1, test_2, deploy) = (ids[1][0], ids[1][1], ids[2][0]);
    assert_eq!(
        created,
        [deploy, test_2, test_1].map(|id| (id, "created".to_owned())),
        "newest first, as Ci::JobsFinder orders"
    );
    let query = "scope[]=created&scope[]=pending";
    let alive = listed(get(&server, &format!("{path}?{query}"), Some(READER)).await).await;
    assert_eq!(alive.len(), 4);
    assert_eq!(alive[3], (ids[0][0], "pending".to_owned()));
    let everything = listed(get(&server, &path, Some(READER)).await).await;
    assert_eq!(everything, alive, "no scope: every status");
    let running = listed(get(&server, &format!("{path}?scope=running"), Some(READER)).await).await;
    assert!(running.is_empty());
}

#[tokio::test]
async fn a_stage_goes_from_created_to_pending_when_the_one_before_succeeds() {
    let (server, _control, pipeline, ids) = pipeline().await;
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), ids[0][0]);

    // By the project's URL-encoded path as well as its id; the job as its payload says it.
    let path = format!("projects/web%2Fshop/pipelines/{pipeline}/jobs");
    let response = get(&server, &format!("{path}?scope=running"), Some(READER)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let jobs: Vec<Value> = response.json().await.unwrap();
    let build = &jobs[0];
    assert_eq!(build["id"], payload["job_info"]["id"]);
    assert_eq!(build["name"], payload["job_info"]["name"]);
    assert_eq!(build["stage"], payload["job_info"]["stage"]);
    assert_eq!(build["pipeline"]["id"], payload["job_info"]["pipeline_id"]);
    assert_eq!(
        build["pipeline"]["id"].to_string(),
        variable(&payload, "CI_PIPELINE_ID")
    );
    assert_eq!(
        build["pipeline"]["project_id"],
        payload["job_info"]["project_id"]
    );
    assert_eq!(build["pipeline"]["sha"], payload["git_info"]["sha"]);
    assert_eq!(build["pipeline"]["status"], "running");
    assert_eq!(build["web_url"], variable(&payload, "CI_JOB_URL"));
    assert_eq!(build["tag_list"], json!(["docker", "linux"]));
    assert_eq!(build["runner"]["id"], 1);
    assert!(build["started_at"].is_string() && build["finished_at"].is_null());

    let token = job_token(&payload);
    let response = runner.put_state(ids[0][0], &token, "success").await;
    assert_eq!(response.status(), StatusCode::OK);
    let path = format!("projects/42/pipelines/{pipeline}/jobs");
    let pending = listed(get(&server, &format!("{path}?scope=pending"), Some(READER)).await).await;
    assert_eq!(
        pending,
        [ids[1][1], ids[1][0]].map(|id| (id, "pending".to_owned()))
    );
    let response = get(&server, &format!("{path}?scope=created"), Some(READER)).await;
    let jobs: Vec<Value> = response.json().await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], ids[2][0]);
    assert!(jobs[0]["runner"].is_null() && jobs[0]["queued_duration"].is_null());
}

#[tokio::test]
async fn pages_are_gitlabs_offset_pages() {
    let (server, control) = server(|_| {}).await;
    control.add_api_token(READER, &["api"]).await.unwrap();
    let stage: Vec<JobSpec> = (0..5).map(|n| spec("test", &format!("t{n}"))).collect();
    let created = control.create_pipeline(vec![stage]).await.unwrap();
    let path = format!("projects/42/pipelines/{}/jobs", created.id);

    let mut seen = Vec::new();
    for (page, next, prev) in [(1, "2", ""), (2, "3", "1"), (3, "", "2")] {
        let response = get(
            &server,
            &format!("{path}?per_page=2&page={page}"),
            Some(READER),
        )
        .await;
        assert_eq!(header(&response, "x-page"), Some(page.to_string().as_str()));
        assert_eq!(header(&response, "x-per-page"), Some("2"));
        assert_eq!(header(&response, "x-total"), Some("5"));
        assert_eq!(header(&response, "x-total-pages"), Some("3"));
        assert_eq!(header(&response, "x-next-page"), Some(next));
        assert_eq!(header(&response, "x-prev-page"), Some(prev));
        let link = header(&response, "link").unwrap().to_owned();
        assert!(
            link.contains("rel=\"first\"") && link.contains("rel=\"last\""),
            "{link}"
        );
        assert_eq!(link.contains("rel=\"next\""), !next.is_empty(), "{link}");
        seen.extend(listed(response).await.into_iter().map(|(id, _)| id));
    }
    let mut all: Vec<u64> = created.stages[0].iter().map(|job| job.id).collect();
    all.reverse();
    assert_eq!(seen, all);

    let response = get(&server, &format!("{path}?per_page=500"), Some(READER)).await;
    assert_eq!(header(&response, "x-per-page"), Some("100"), "capped");
    let link = header(&response, "link").unwrap();
    let first = format!(
        "<{}/api/v4/{path}?id=42&include_retried=false&page=1&per_page=500&pipeline_id={}>; \
         rel=\"first\"",
        server.url(),
        created.id
    );
    assert!(link.contains(&first), "{link}");
}

#[tokio::test]
async fn refusals_are_gitlabs() {
    let (server, control, pipeline, _) = pipeline().await;
    control
        .add_api_token("glpat-profile", &["read_user"])
        .await
        .unwrap();
    let lone = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let path = format!("projects/42/pipelines/{pipeline}/jobs");
    let cases = [
        (
            path.clone(),
            Some("glpat-unknown"),
            401,
            json!({"message": "401 Unauthorized"}),
        ),
        (
            path.clone(),
            None,
            404,
            json!({"message": "404 Project Not Found"}),
        ),
        (
            "projects/7/pipelines/1/jobs".into(),
            Some(READER),
            404,
            json!({"message": "404 Project Not Found"}),
        ),
        (
            "projects/42/pipelines/999/jobs".into(),
            Some(READER),
            404,
            json!({"message": "404 Not found"}),
        ),
        (
            format!("projects/42/pipelines/{}/jobs", lone.id + 100),
            Some(READER),
            404,
            json!({"message": "404 Not found"}),
        ),
        (
            format!("{path}?scope=bogus"),
            Some(READER),
            400,
            json!({"error": "scope does not have a valid value"}),
        ),
        (
            format!("{path}?scope[]=created&scope[]=nope"),
            Some(READER),
            400,
            json!({"error": "scope does not have a valid value"}),
        ),
        (
            "projects/42/pipelines/abc/jobs".into(),
            Some(READER),
            400,
            json!({"error": "pipeline_id is invalid"}),
        ),
    ];
    for (path, token, status, body) in cases {
        let response = get(&server, &path, token).await;
        assert_eq!(response.status().as_u16(), status, "{path} {token:?}");
        assert_eq!(response.json::<Value>().await.unwrap(), body, "{path}");
    }
    let response = get(&server, &path, Some("glpat-profile")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "insufficient_scope");

    // The job enqueued alone is a one-job pipeline of project 1, as its payload says.
    let mut runner = Runner::new(&server, features(&[]));
    let mut payload = runner.take_job().await;
    while job_id(&payload) != lone.id {
        payload = runner.take_job().await;
    }
    let pipeline_id = payload["job_info"]["pipeline_id"].as_u64().unwrap();
    let path = format!("projects/1/pipelines/{pipeline_id}/jobs");
    let jobs = listed(get(&server, &path, Some(READER)).await).await;
    assert_eq!(jobs, [(lone.id, "running".to_owned())]);
}

#[tokio::test]
async fn retried_jobs_are_left_out_unless_asked_for() {
    let (server, control) = server(|c| {
        c.two_phase_commit = true;
        c.ack_window = Duration::from_millis(300);
        c.provisioning_retries = 1;
    })
    .await;
    control.add_api_token(READER, &["read_api"]).await.unwrap();
    let job = control.enqueue(&spec("build", "compile")).await.unwrap();
    let mut runner = Runner::new(&server, features(&["two_phase_job_commit"]));
    let payload = runner.take_job().await;
    let pipeline = payload["job_info"]["pipeline_id"].as_u64().unwrap();
    // Nobody acknowledges: GitLab fails the job and retries it in the same pipeline.
    let failed = control.wait_final(job.id, PROMPT).await.unwrap();
    let retry = failed.retried_as.expect("a retry");

    let path = format!("projects/42/pipelines/{pipeline}/jobs");
    let latest = listed(get(&server, &path, Some(READER)).await).await;
    assert_eq!(latest, [(retry, "pending".to_owned())]);
    let all = listed(
        get(
            &server,
            &format!("{path}?include_retried=true"),
            Some(READER),
        )
        .await,
    )
    .await;
    assert_eq!(
        all,
        [(retry, "pending".to_owned()), (job.id, "failed".to_owned())]
    );
}
