//! Access tokens on GitLab's REST API: `GET /api/v4/personal_access_tokens/self` and the
//! runner's job history (`GET /api/v4/runners/:id/jobs`), with GitLab's pagination.

mod common;

use common::{RUNNER_TOKEN, Runner, features, header, http, job_id, server};
use fake_gitlab::control::JobSpec;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn a_token_of_any_scope_describes_itself() {
    let (server, control) = server(|_| {}).await;
    control
        .add_api_token("glpat-profile", &["read_user"])
        .await
        .unwrap();
    let url = format!("{}/api/v4/personal_access_tokens/self", server.url());

    let response = http()
        .get(&url)
        .header("PRIVATE-TOKEN", "glpat-profile")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let token: Value = response.json().await.unwrap();
    assert_eq!(token["id"], 1);
    assert_eq!(token["scopes"], json!(["read_user"]));
    assert_eq!(token["user_id"], 1);
    assert_eq!(token["active"], true);
    assert_eq!(token["revoked"], false);
    assert!(token["expires_at"].is_null());
    assert!(token["name"].is_string() && token["created_at"].is_string());
    assert!(
        token["last_used_at"].is_string(),
        "this very request used it"
    );

    for request in [
        http().get(&url).header("PRIVATE-TOKEN", "glpat-unknown"),
        http().get(&url),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body, json!({"message": "401 Unauthorized"}));
    }
    let response = http()
        .get(&url)
        .bearer_auth("glpat-profile")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "as an OAuth bearer too");
}

#[tokio::test]
async fn a_runners_history_is_paginated_like_every_list() {
    let (server, control) = server(|_| {}).await;
    control
        .add_api_token("glpat-reader", &["read_api"])
        .await
        .unwrap();
    control
        .enqueue_batch(&JobSpec::new(RUNNER_TOKEN, &["true"]), 3)
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(job_id(&runner.take_job().await));
    }
    let url = format!("{}/api/v4/runners/1/jobs", server.url());
    let get = |query: &'static str| {
        http()
            .get(format!("{url}?{query}"))
            .header("PRIVATE-TOKEN", "glpat-reader")
            .send()
    };

    let response = get("per_page=2").await.unwrap();
    assert_eq!(header(&response, "x-next-page"), Some("2"));
    assert_eq!(header(&response, "x-total"), Some("3"));
    assert!(header(&response, "link").unwrap().contains("rel=\"next\""));
    let jobs: Vec<Value> = response.json().await.unwrap();
    assert_eq!(jobs[0]["id"], taken[2], "newest first");
    assert_eq!(jobs[0]["project"]["path_with_namespace"], "group/project");

    let response = get("per_page=2&page=2&sort=asc").await.unwrap();
    assert_eq!(header(&response, "x-next-page"), Some(""));
    assert_eq!(header(&response, "x-prev-page"), Some("1"));
    let jobs: Vec<Value> = response.json().await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], taken[2]);

    let response = get("page=x").await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"error": "page is invalid"}));
    let response = http().get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}
